"""The deployment as separate hosts, and one partition scenario run against it (issue 35 part 8).

Hosts (network namespaces, tests/partition/net.py) and their point-to-point links::

    agent1 ─┐                ┌─ redis  (redis-server :6380, AOF always; relay :6379 → :6380)
            ├── server ──────┤
    agent2 ─┘                └─ pg     (PostgreSQL :5432: the archive and the API keys)
                 worker ─────┬─ redis
                             └─ pg

* agents: ``client.py`` processes (the real ``HermesClient``), own sessions, ids they choose;
* server: ``python -m hermes_redis.cli serve --host 0.0.0.0`` with a user key for the agents
  and an admin key for the checker (a non-loopback host needs keys);
* worker: ``python -m workers``, straight to Redis on :6380;
* the server reaches Redis through ``relay.py`` inside the redis host, so the relay's delay
  (off until a scenario turns it on) is on the server↔Redis path only, and cutting the
  server↔redis link still black-holes the server's connections.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import redis

from hermes_redis.client import HermesClient
from hermes_redis.store.embedded import redis_server_binary
from tests.helpers import write_config
from tests.partition.checker import Records, Row, Verdict, judge, latency, recovery
from tests.partition.net import Net, alive
from tests.postgres_server import PostgresServer

ROOT = Path(__file__).resolve().parents[2]
HOSTS = ("agent1", "agent2", "server", "worker", "redis", "pg")
LINKS = (("agent1", "server"), ("agent2", "server"), ("server", "redis"), ("server", "pg"),
         ("worker", "redis"), ("worker", "pg"))
REDIS_PORT, RELAY_PORT, PG_PORT, HTTP_PORT = 6380, 6379, 5432, 8080
AGENTS = ("agent1", "agent2")


DIR_PREFIX = "hermes-partition-"  # + pid + "-": the run's files, under the temp directory


def clean_stale_dirs() -> None:
    """Remove the files of earlier runs whose process is gone (killed before its cleanup)."""
    for path in Path(tempfile.gettempdir()).glob(f"{DIR_PREFIX}*-*"):
        pid = path.name[len(DIR_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def _wait(what: str, ready: Callable[[], bool], timeout: float,
          proc: subprocess.Popen[bytes] | None = None, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
            raise RuntimeError(f"{what} exited with {proc.returncode}: {tail}")
        try:
            if ready():
                return
        except Exception:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{what} not ready within {timeout}s")


class Cluster:
    """Every host and process; ``cleanup`` stops them all and removes the namespaces."""

    def __init__(self) -> None:
        self.net = Net(HOSTS, LINKS)
        clean_stale_dirs()
        self.dir = Path(tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-"))
        self.dir.chmod(0o711)  # PostgreSQL's directory inside is its user's (nobody as root)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.admin_key = self.agent_key = ""
        self.pg: PostgresServer | None = None

    # --- addresses ------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """The server, as agent1 reaches it (agent2: ``url_for``)."""
        return self.url_for("agent1")

    def url_for(self, agent: str) -> str:
        return f"http://{self.net.addr('server', agent)}:{HTTP_PORT}"

    def env(self, config: Path | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
        env["HERMES_DATA_DIR"] = str(self.dir / "data")
        if config is not None:
            env["HERMES_CONFIG"] = str(config)
        return env

    def spawn(self, name: str, host: str, args: list[str], config: Path | None = None,
              **kwargs: Any) -> subprocess.Popen[bytes]:
        log = self.dir / f"{name}.log"
        with open(log, "ab") as out:
            proc = self.net.popen(host, args, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                                  env=self.env(config), **kwargs)
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> Path:
        return self.dir / f"{name}.log"

    # --- start ----------------------------------------------------------------------------
    def start(self) -> Cluster:
        self.net.up()
        self._redis()
        self._postgres()
        tag = uuid.uuid4().hex[:8]
        common = {"key_prefix": f"p{tag}", "queue": f"q{tag}"}
        archive = {"data_dir": str(self.dir / "data"), "path": str(self.dir / "unused.db")}
        server_cfg = write_config({
            "redis": {"url": f"redis://{self.net.addr('redis', 'server')}:{RELAY_PORT}/0", **common},
            "archive": {**archive, "url": self._pg_url("server")}}, self.dir / "server.yml")
        worker_cfg = write_config({
            "redis": {"url": f"redis://{self.net.addr('redis', 'worker')}:{REDIS_PORT}/0", **common},
            "archive": {**archive, "url": self._pg_url("worker")}}, self.dir / "worker.yml")
        self.admin_key = self._key(server_cfg, "--admin")
        self.agent_key = self._key(server_cfg, "--user", "agents")
        server = self.spawn("server", "server", [sys.executable, "-m", "hermes_redis.cli",
                            "--config", str(server_cfg), "serve", "--host", "0.0.0.0",
                            "--port", str(HTTP_PORT)])
        _wait("hermes-redis serve", lambda: self.net.call(
            "agent1", lambda: httpx.get(self.url + "/readyz", timeout=1).status_code == 200),
            120, server, self.log("server"))
        self.spawn("worker", "worker", [sys.executable, "-m", "workers"], worker_cfg)
        return self

    def _redis(self) -> None:
        binary = (os.environ.get("TEST_REDIS_SERVER") or shutil.which("redis-server")
                  or redis_server_binary())
        data = self.dir / "redis"
        data.mkdir()
        proc = self.spawn("redis", "redis", [binary, "--port", str(REDIS_PORT), "--bind", "0.0.0.0",
                          "--protected-mode", "no", "--dir", str(data), "--save", "",
                          "--appendonly", "yes", "--appendfsync", "always"])
        _wait("redis-server", lambda: self.net.call(
            "redis", lambda: bool(redis.Redis(port=REDIS_PORT, socket_timeout=1).ping())),
            20, proc, self.log("redis"))
        relay = self.spawn("relay", "redis", [
            sys.executable, "-m", "tests.partition.relay", "--delay", "0.2",
            "--listen", f"{self.net.addr('redis', 'server')}:{RELAY_PORT}",
            "--to", f"127.0.0.1:{REDIS_PORT}"])
        _wait("relay", lambda: "relay ready" in self.log("relay").read_text(), 30, relay,
              self.log("relay"))

    def _postgres(self) -> None:
        """tests/postgres_server.py's PostgreSQL, started inside the pg host, listening on its
        links, trusting the 10.213/16 links (as root it runs as ``nobody``)."""
        pg = self.pg = PostgresServer()
        shutil.rmtree(pg.dir)
        pg.dir = self.dir / "pg"  # under ours, so a stale run's cleanup removes it too
        pg.dir.mkdir()
        data = pg.dir / "data"
        run_as: dict[str, Any] = {}
        if pg.user is not None:
            entry = pwd.getpwnam(pg.user)
            os.chown(pg.dir, entry.pw_uid, entry.pw_gid)
            if not pg._runnable():
                pg._copy_out()
            run_as = {"uid": entry.pw_uid, "gid": entry.pw_gid}
        subprocess.run([str(pg.bin / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
                        "--encoding=UTF8", "--locale=C", "--no-sync"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       **pg._run_as())  # type: ignore[call-overload]
        with open(data / "pg_hba.conf", "a", encoding="utf-8") as hba:
            hba.write("host all all 10.213.0.0/16 trust\n")
        enter = self.net.enter("pg")

        def child() -> None:  # into the namespace first, then drop root
            enter()
            if run_as:
                os.setgroups([])
                os.setgid(run_as["gid"])
                os.setuid(run_as["uid"])

        log = open(self.log("pg"), "wb")  # noqa: SIM115 -- the server's lifetime
        proc = subprocess.Popen([str(pg.bin / "postgres"), "-D", str(data), "-p", str(PG_PORT),
                                 "-h", "*", "-k", str(pg.dir), "-c", "fsync=off",
                                 "-c", "synchronous_commit=off", "-c", "max_connections=100"],
                                stdout=log, stderr=log, preexec_fn=child)
        self.net.procs.append(proc)
        self.procs["pg"] = proc
        def answers() -> bool:
            psycopg.connect(self.pg_local, connect_timeout=1).close()
            return True

        _wait("postgres", lambda: self.net.call("pg", answers), 60, proc, self.log("pg"))

    @property
    def pg_local(self) -> str:
        """The archive's URL from inside the pg host."""
        return f"postgresql://postgres@127.0.0.1:{PG_PORT}/postgres"

    def _pg_url(self, host: str) -> str:
        return f"postgresql://postgres@{self.net.addr('pg', host)}:{PG_PORT}/postgres"

    def _key(self, config: Path, *who: str) -> str:
        done = self.net.run("server", [sys.executable, "-m", "hermes_redis.cli", "--config",
                            str(config), "key", "create", *who], cwd=ROOT, env=self.env(),
                            timeout=120)
        keys = [w for w in done.stdout.split() if w.startswith("hrk_")]
        if done.returncode != 0 or not keys:
            raise RuntimeError(f"key create {' '.join(who)}: {done.stdout}{done.stderr}")
        return keys[0]

    def tails(self, names: list[str], files: list[Path] = ()) -> str:  # type: ignore[assignment]
        """The end of these processes' logs (and of ``files``), for a failure message."""
        parts = []
        for path in [*(self.log(n) for n in names), *files]:
            text = path.read_text(errors="replace")[-1500:] if path.exists() else "(none)"
            parts.append(f"--- {path.name}\n{text}")
        return "\n".join(parts)

    # --- faults ---------------------------------------------------------------------------
    def relay_delay(self, on: bool) -> None:
        self.procs["relay"].send_signal(signal.SIGUSR1 if on else signal.SIGUSR2)

    def check_alive(self) -> None:
        for name in ("redis", "relay", "pg", "server", "worker"):
            code = self.procs[name].poll()
            if code is not None:
                tail = self.log(name).read_text(errors="replace")[-2000:]
                raise AssertionError(f"{name} exited with {code} during the scenario: {tail}")

    def cleanup(self) -> None:
        with contextlib.suppress(Exception):
            self.net.heal()
        for name in ("worker", "server"):
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is None:
                proc.terminate()
        self.net.cleanup()
        if os.environ.get("PARTITION_KEEP"):  # the agents' records and the logs, to look into
            print(f"partition run kept in {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


@dataclass
class Outcome:
    """One scenario's figures."""

    name: str
    records: Records
    served: Verdict
    archived: Verdict
    heal: float
    fault_start: float
    recovery_s: float
    archived_after_s: float  # when the final archive check passed (an upper bound)
    burst_needed: list[str]
    healthz: dict[str, float]
    during: dict[str, float]
    wall_s: float
    extra: dict[str, Any] = field(default_factory=dict)

    def figures(self) -> dict[str, Any]:
        copies = {"stored_twice": self.served.copies[:5]} if self.served.copies else {}
        return {"scenario": self.name, **self.served.brief(), **copies,
                "archive": self.archived.brief(),
                "errors": len(self.records.errors),
                "retried_acks": sum(1 for r in self.records.acks if r["attempts"] > 1),
                "rejected": len(self.records.rejected),
                "unacked": len(self.records.unacked), "recovery_s": round(self.recovery_s, 2),
                "archived_after_heal_s": round(self.archived_after_s, 2),
                "burst_sweep_needed_for": len(self.burst_needed), **self.during,
                "healthz": self.healthz, "wall_s": round(self.wall_s, 1), **self.extra}


class Prober:
    """``/healthz`` from agent2 every 0.5 s (1 s timeout): reported, never asserted
    (issue 35 item 6 is fixed elsewhere)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster, self.stop = cluster, threading.Event()
        self.samples: list[float | None] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        self.cluster.net.enter("agent2")()
        url = self.cluster.url_for("agent2") + "/healthz"
        with httpx.Client(timeout=1.0) as client:
            while not self.stop.is_set():
                t0 = time.monotonic()
                try:
                    client.get(url)
                    self.samples.append(time.monotonic() - t0)
                except httpx.HTTPError:
                    self.samples.append(None)
                self.stop.wait(max(0.0, 0.5 - (time.monotonic() - t0)))

    def __enter__(self) -> Prober:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)

    def summary(self) -> dict[str, float]:
        ok = [s for s in self.samples if s is not None]
        return {"probes": len(self.samples), "timeouts": len(self.samples) - len(ok),
                "max_ms": round(1000 * max(ok, default=0.0))}


def run_scenario(cluster: Cluster, name: str, fault: Callable[[], float], *,
                 sessions: int = 2, warmup: float = 1.5, settle: float = 3.0,
                 archive_wait: float = 15.0) -> Outcome:
    """Agents append on both agent hosts; after ``warmup`` s, ``fault()`` breaks something and
    returns when it healed (its return: the heal's ``time.time()``); the agents go on for
    ``settle`` s, then stop (their in-flight append retried until acknowledged). Then the
    server's view and the archive's are judged against the acknowledgements. The archive is
    given ``archive_wait`` s to catch up by itself; sessions still behind then are swept by
    a burst worker (``python -m workers --burst``) and named in the figures."""
    began = time.time()
    outdir = cluster.dir / name
    outdir.mkdir()
    outs = [outdir / f"{agent}.jsonl" for agent in AGENTS]
    agents = [cluster.spawn(f"{name}-{agent}", agent, [
        sys.executable, "-m", "tests.partition.client", "--url", cluster.url_for(agent),
        "--key", cluster.agent_key, "--name", agent, "--out", str(out),
        "--sessions", str(sessions)]) for agent, out in zip(AGENTS, outs, strict=True)]
    try:
        try:
            _wait("agents' first acknowledgements", lambda: all(
                out.exists() and out.read_text().count('"ack"') >= 3 * sessions
                for out in outs) or any(p.poll() is not None for p in agents), 60)
        except RuntimeError:
            raise RuntimeError(cluster.tails([f"{name}-{a}" for a in AGENTS], outs)) from None
        if any(p.poll() is not None for p in agents):
            raise RuntimeError(cluster.tails([f"{name}-{a}" for a in AGENTS], outs))
        time.sleep(warmup)
        with Prober(cluster) as prober:
            fault_start = time.time()
            heal = fault()
            archive_recovery = _archive_recovery(cluster, outs, heal, limit=30.0)
            time.sleep(max(0.0, heal + settle - time.time()))
        for proc in agents:
            proc.send_signal(signal.SIGTERM)
        for proc in agents:
            proc.wait(60)
    finally:
        for proc in agents:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    cluster.check_alive()
    records = Records.load(outs)
    served = cluster.net.call("agent1", _read_served, cluster.url, cluster.admin_key,
                              records.sessions)
    archived, after, behind = _await_archive(cluster, records, heal, archive_wait)
    return Outcome(name=name, records=records, served=judge(records, served),
                   archived=archived, heal=heal, fault_start=fault_start,
                   recovery_s=recovery(records, heal), archived_after_s=after,
                   burst_needed=behind, healthz=prober.summary(),
                   during=latency(records, fault_start, heal), wall_s=time.time() - began,
                   extra={"archive_recovery_s": archive_recovery})


def _archive_recovery(cluster: Cluster, outs: list[Path], heal: float,
                      limit: float) -> float | None:
    """Seconds from the heal until the archive held every message acknowledged before it
    (read while the agents go on); None if not within ``limit`` s."""
    while time.time() < heal + limit:
        records = Records.load(outs)
        before = {(r["sid"], r["mid"]) for r in records.acks if r["t"] < heal}
        sids = sorted({sid for sid, _ in before})
        rows = cluster.net.call("pg", _read_archive, cluster.pg_local, sids)
        held = {(sid, mid) for sid, got in rows.items() for _, mid, _ in got}
        if before <= held:
            return round(time.time() - heal, 2)
        time.sleep(0.2)
    return None


def _read_served(url: str, key: str, sids: list[str]) -> dict[str, list[Row]]:
    with HermesClient(url, key, timeout=30) as client:
        return {sid: [(m.seq, m.message_id, m.content) for m in client.messages(sid)]
                for sid in sids}


def _read_archive(url: str, sids: list[str]) -> dict[str, list[Row]]:
    out: dict[str, list[Row]] = {sid: [] for sid in sids}
    with psycopg.connect(url, connect_timeout=5) as conn:
        rows = conn.execute("SELECT session_id, seq, message_id, content FROM messages "
                            "WHERE session_id = ANY(%s)", (sids,)).fetchall()
    for sid, seq, mid, content in rows:
        out[sid].append((int(seq), str(mid), str(content)))
    return out


def _await_archive(cluster: Cluster, records: Records, heal: float,
                   wait: float) -> tuple[Verdict, float, list[str]]:
    """The archive's verdict, seconds from the heal until it held every acknowledged
    message, and the sessions a burst worker had to sweep because no job archived them."""
    acked: dict[str, set[str]] = {}
    for rec in records.acks:
        acked.setdefault(rec["sid"], set()).add(rec["mid"])

    def behind() -> tuple[dict[str, list[Row]], list[str]]:
        rows = cluster.net.call("pg", _read_archive, cluster.pg_local, records.sessions)
        late = [sid for sid, mids in acked.items() if not mids <= {m for _, m, _ in rows[sid]}]
        return rows, late

    deadline = time.time() + wait
    rows, late = behind()
    while late and time.time() < deadline:
        time.sleep(0.25)
        rows, late = behind()
    swept: list[str] = []
    if late:
        swept = late
        done = cluster.net.run("worker", [sys.executable, "-m", "workers", "--burst"], cwd=ROOT,
                               env=cluster.env(cluster.dir / "worker.yml"), timeout=120)
        if done.returncode != 0:
            raise AssertionError(f"burst worker failed: {done.stdout}{done.stderr}")
        rows, late = behind()
    return judge(records, rows), time.time() - heal, swept


def print_figures(outcome: Outcome) -> None:
    print("FIGURES partition", json.dumps(outcome.figures()))
