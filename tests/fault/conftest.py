"""Fault-suite fixtures: real worker processes killed for real, private Redis servers a test
may restart, and an audit of both tiers against what the agents were acknowledged.

Every test prints a ``FIGURES`` line (turns appended, faults injected, lost, duplicated);
docs/reliability.md quotes them from the last run (``pytest tests/fault -s``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_redis import Config, Message, SessionMemory
from tests.conftest import make_config
from tests.helpers import archive_rows, write_config
from tests.redis_server import RedisServer

REPO = Path(__file__).resolve().parents[2]


def child_env(config_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env["HERMES_CONFIG"] = str(config_path)
    env["PYTHONPATH"] = str(REPO)
    env["PYTHONFAULTHANDLER"] = "1"  # SIGABRT on a hang dumps every thread's stack
    return env


def spawn(args: list[str], config_path: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, *args], cwd=REPO, env=child_env(config_path),
                                stdout=out, stderr=subprocess.STDOUT)


def spawn_worker(config_path: Path, log: Path, burst: bool = False) -> subprocess.Popen[bytes]:
    """``python -m workers``: the real entry point, in its own process."""
    return spawn(["-m", "workers", *(["--burst"] if burst else [])], config_path, log)


def sigkill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            sigkill(proc)


def burst(config_path: Path, log: Path, timeout: float = 600) -> None:
    """A burst worker process: sweep with no grace, then drain the queue. ``timeout`` only
    catches a hang (it returns when the worker does): a compaction of thousands of messages
    on a loaded 2-core machine took over two minutes."""
    proc = spawn_worker(config_path, log, burst=True)
    try:
        rc = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)  # the stacks land in the log
        proc.wait(10)
        raise AssertionError(
            f"burst worker hung; stacks in {log}:\n{log.read_text()[-4000:]}") from None
    finally:
        sigkill(proc)
    assert rc == 0, f"burst worker exited {rc}; see {log}:\n{log.read_text()[-3000:]}"


def wait_for(predicate: Any, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def figures(name: str, **values: Any) -> None:
    """One greppable line per test for docs/reliability.md."""
    print(f"\nFIGURES {name}: " + json.dumps(values, sort_keys=True))


@dataclasses.dataclass
class Acked:
    """What an agent was told: the message and its seq, so the audit can hold the tiers to it."""

    session_id: str
    message_id: str
    seq: int
    token_count: int

    @classmethod
    def of(cls, m: Message) -> Acked:
        return cls(m.session_id, m.message_id, m.seq, m.token_count)


def audit(mem: SessionMemory, acked: Iterable[Acked], forgotten: Iterable[str] = (),
          require_flushed: bool = True, ambiguous_ok: bool = False) -> dict[str, int]:
    """Hold both tiers to the acknowledged appends (invariants 1, 2, 3, 4, 5).

    ``ambiguous_ok``: an append that raised BackendUnavailableError may still have landed
    (Redis died after persisting it, before replying); such rows are counted as
    ``ambiguous``, not as errors, and their seqs fill the gaps between acknowledged ones.
    Returns totals; fails listing every problem found, not just the first.
    """
    gone = set(forgotten)
    by_sid: dict[str, list[Acked]] = {}
    for a in acked:
        by_sid.setdefault(a.session_id, []).append(a)
    problems: list[str] = []
    totals = {"appended": 0, "archived": 0, "lost": 0, "duplicated": 0, "resurrected": 0,
              "ambiguous": 0}
    for sid, items in sorted(by_sid.items()):
        seqs = sorted(a.seq for a in items)
        keep = {a.message_id: a for a in items if a.message_id not in gone}
        rows = archive_rows(mem.config, sid)
        ids = [r[0] for r in rows]
        lost = set(keep) - set(ids)
        dup = len(ids) - len(set(ids))
        back = set(ids) & gone
        unknown = set(ids) - set(keep) - gone
        if ambiguous_ok:
            totals["ambiguous"] += len(unknown)
            extra = [r for r in rows if r[0] in unknown]
            items = items + [Acked(sid, r[0], r[1], r[2]) for r in extra]
            keep.update({r[0]: Acked(sid, r[0], r[1], r[2]) for r in extra})
            seqs = sorted(a.seq for a in items)
            unknown = set()
        if seqs != list(range(1, len(seqs) + 1)):
            problems.append(f"{sid}: acknowledged seqs are not 1..{len(seqs)} (dupes or gaps)")
        totals["appended"] += len(items)
        totals["archived"] += len(set(ids))
        totals["lost"] += len(lost)
        totals["duplicated"] += dup
        totals["resurrected"] += len(back)
        if lost or dup or back or unknown:
            problems.append(f"{sid}: lost {len(lost)}, duplicated {dup}, forgotten back "
                            f"{len(back)}, unknown {len(unknown)}")
        bad_seq = [r for r in rows if keep.get(r[0]) and keep[r[0]].seq != r[1]]
        if bad_seq:
            problems.append(f"{sid}: {len(bad_seq)} archived rows carry another seq than acked")
        count, tokens = len(keep), sum(a.token_count for a in keep.values())
        meta = mem.hot.meta(sid)
        row = mem.cold.session(sid)
        if row is None:
            problems.append(f"{sid}: no archive session row")
            continue
        if (row["message_count"], row["total_tokens"]) != (count, tokens):
            problems.append(f"{sid}: archive counters {row['message_count']}/{row['total_tokens']}"
                            f" != true {count}/{tokens}")
        if meta is None:
            continue  # expired after archiving: the archive is the record
        if (meta.message_count, meta.total_tokens) != (count, tokens):
            problems.append(f"{sid}: hot counters {meta.message_count}/{meta.total_tokens}"
                            f" != true {count}/{tokens}")
        last, flushed = meta.last_seq, meta.flushed_seq
        summary_seq = meta.summary_seq
        if last != len(items):
            problems.append(f"{sid}: last_seq {last} != {len(items)} appended")
        if require_flushed and flushed != last:
            problems.append(f"{sid}: backlog {last - flushed} left after the sweep")
        if summary_seq > last:
            problems.append(f"{sid}: summary covers seq {summary_seq} > last {last}")
        if (row["summary"] or "", int(row["summary_seq"] or 0)) != (meta.summary, summary_seq):
            problems.append(f"{sid}: archive summary (to {row['summary_seq']}) != hot summary "
                            f"(to {summary_seq})")
        hot = [m.seq for m in mem.hot.messages(sid)]
        if hot != sorted(set(hot)):
            problems.append(f"{sid}: hot list out of order or duplicated")
        must = {a.seq for a in keep.values() if a.seq > min(summary_seq, flushed)}
        missing = must - set(hot)
        if missing:
            problems.append(f"{sid}: {len(missing)} messages after the summary/flush point are "
                            f"missing from the hot list (first {min(missing)})")
    assert not problems, "\n".join(problems)
    return totals


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A private redis-server (AOF, appendfsync always) this test may kill and restart."""
    server = RedisServer().start()
    yield server
    server.cleanup()


@pytest.fixture
def fault_config(tmp_path: Path, redis_url: str):  # type: ignore[no-untyped-def]
    """Config factory for fault tests: returns (Config, path of its YAML file)."""

    def factory(url: str | None = None, **session: Any) -> tuple[Config, Path]:
        cfg = make_config(tmp_path, "redis", url or redis_url, **session)
        return cfg, write_config(cfg, tmp_path / f"config-{cfg.redis.key_prefix}.yml")

    return factory


class SecureRedis(RedisServer):
    """A redis-server that wants a password, an ACL user and/or TLS; pings accordingly."""

    def __init__(self, password: str | None = None, tls_dir: Path | None = None,
                 acl: list[str] | None = None, username: str | None = None) -> None:
        super().__init__(aof=False)
        self.password, self.tls_dir, self.acl = password, tls_dir, acl or []
        self.username = username

    @property
    def url(self) -> str:
        auth = f"{self.username or ''}:{self.password}@" if self.password else ""
        if self.tls_dir is None:
            return f"redis://{auth}127.0.0.1:{self.port}/0"
        return f"rediss://{auth}127.0.0.1:{self.port}/0?ssl_ca_certs={self.tls_dir / 'ca.pem'}"

    def start(self) -> SecureRedis:
        import redis

        args = [self.binary, "--bind", "127.0.0.1", "--dir", str(self.dir), "--save", "",
                "--appendonly", "no"]
        if self.tls_dir is None:
            args += ["--port", str(self.port)]
        else:
            d = self.tls_dir
            args += ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file",
                     str(d / "server.pem"), "--tls-key-file", str(d / "server.key"),
                     "--tls-ca-cert-file", str(d / "ca.pem"), "--tls-auth-clients", "no"]
        if self.password and not self.username:
            args += ["--requirepass", self.password]
        for rule in self.acl:
            args += ["--user", *rule.split()]
        log = self.dir / "redis.log"
        with log.open("ab") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        if not wait_for(lambda: self._ping(redis), 10, 0.05):
            raise RuntimeError(f"redis-server did not start: {log.read_text()[-500:]}")
        return self

    def _ping(self, redis: Any) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            tail = (self.dir / "redis.log").read_text()[-500:]
            raise RuntimeError(f"redis-server exited with {self.proc.returncode}: {tail}")
        try:
            client = redis.Redis.from_url(self.url, socket_timeout=0.5)
            try:
                return bool(client.ping())
            finally:
                client.close()
        except redis.RedisError:
            return False


def make_tls_dir(path: Path) -> Path | None:
    """A CA and a server certificate for 127.0.0.1 made with openssl; None without openssl."""
    import shutil

    if shutil.which("openssl") is None:
        return None
    path.mkdir(parents=True, exist_ok=True)
    run = lambda *a: subprocess.run(["openssl", *a], cwd=path, check=True,  # noqa: E731
                                    capture_output=True)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", "2", "-subj", "/CN=hermes-test-ca")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
        "-subj", "/CN=127.0.0.1")
    (path / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf")
    return path
