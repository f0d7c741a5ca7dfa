"""``HermesClient`` against the library it stands in for (issue 33.5): append p50 and the
context of 200 messages, measured back to back in one run, and where the client's time goes.

    .venv/bin/python -m bench.client [--quick] [--profile] [--baseline OLD_CLIENT.py]

``--baseline`` adds another version of hermes_redis/client.py (e.g. ``git show
REV:hermes_redis/client.py > /tmp/old.py``) as a third contender in the same rounds: a
before/after measured back to back.

A private redis-server, a real ``hermes-redis serve`` (one worker) and an in-process
SessionMemory on the same Redis and archive. Blocks of library calls and of client calls
alternate (order flipped every round); p50 is the median of the per-round p50s, so a noisy
neighbour slows both sides of a ratio.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import workload
from bench.common import start_redis, us
from bench.http import Raw, _cycler, _rounds
from hermes_redis import SessionMemory
from hermes_redis.client import HermesClient
from hermes_redis.core import config as config_mod
from tests.http_server import ServeProcess, serve_config

APPEND_TARGET = 1.5  # HermesClient.append p50 ÷ SessionMemory.append p50
CONTEXT_TARGET = 2.0  # HermesClient.context (200 messages) ÷ SessionMemory.context
CONTEXT_MESSAGES = 200


def _load_client(path: str) -> type[HermesClient]:
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_baseline_client", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cls: type[HermesClient] = module.HermesClient
    return cls


def measure(quick: bool, profile: bool, baseline: str | None = None) -> dict[str, Any]:
    """The p50s and p99s of both sides, their ratios, and (``profile``) the client's
    cProfile top entries for each call."""
    out: dict[str, Any] = {}
    server = start_redis()  # AOF, fsync every second: as bench/http.py
    with tempfile.TemporaryDirectory(prefix="bench-client-") as tmp:
        config = serve_config(Path(tmp), server.url)
        serve = ServeProcess(config).start()
        mem = SessionMemory(config_mod.load(config))
        client = HermesClient(serve.url)
        before = _load_client(baseline)(serve.url) if baseline else None
        raw = Raw(serve.port)  # the floor: the server's own cost on a bare keep-alive socket
        rounds, block = (6, 100) if quick else (15, 300)
        try:
            texts = workload.cycle(1000)
            lib_sid, cli_sid = mem.create_session("bench"), mem.create_session("bench")
            old_sid, raw_sid = mem.create_session("bench"), mem.create_session("bench")
            raw_bodies = _cycler([json.dumps({"role": r, "content": t}).encode()
                                  for r, t in texts])
            lib_items, cli_items, old_items = _cycler(texts), _cycler(texts), _cycler(texts)

            def lib_append() -> None:
                role, text = lib_items()
                mem.append(lib_sid, role, text)

            def client_append() -> None:
                role, text = cli_items()
                client.append(cli_sid, role, text)

            appends: dict[str, Callable[[], Any]] = {"library": lib_append,
                                                     "HermesClient": client_append}
            appends["HTTP"] = lambda: raw.call("POST", f"/v1/sessions/{raw_sid}/messages",
                                               raw_bodies())
            if before is not None:
                old = before

                def before_append() -> None:
                    role, text = old_items()
                    old.append(old_sid, role, text)

                appends["before"] = before_append
            for fn in appends.values():  # warm up: connections, script cache, first enqueue
                for _ in range(100):
                    fn()
            out["append"] = _rounds(appends, rounds, block)

            ctx_sid = mem.create_session("bench")
            mem.append_many(ctx_sid, [{"role": r, "content": t}
                                      for r, t in texts[:CONTEXT_MESSAGES]])
            reads: dict[str, Callable[[], Any]] = {
                "library": lambda: mem.context(ctx_sid),
                "HermesClient": lambda: client.context(ctx_sid)}
            reads["HTTP"] = lambda: raw.call("GET", f"/v1/sessions/{ctx_sid}/context")
            if before is not None:
                reads["before"] = lambda: old.context(ctx_sid)
            for fn in reads.values():
                for _ in range(20):
                    fn()
            out["context"] = _rounds(reads, max(4, rounds // 2), max(30, block // 5))
            if profile:
                out["profile append"] = _profile(client_append, 2000)
                out["profile context"] = _profile(reads["HermesClient"], 300)
        finally:
            client.close()
            raw.close()
            if before is not None:
                before.close()
            mem.close()
            serve.stop()
            server.stop()
    return out


def _profile(fn: Callable[[], Any], n: int) -> str:
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        fn()
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(15)
    return f"{n} calls, sorted by own time:\n" + text.getvalue()


def report(out: dict[str, Any]) -> str:
    lines = ["| call | library p50 / p99 | HermesClient p50 / p99 | client ÷ library (p50) "
             "| target | before: p50 / p99, ÷ library | bare HTTP p50, ÷ library |",
             "|---|---|---|---|---|---|---|"]
    for name, target in (("append", APPEND_TARGET),
                         (f"context ({CONTEXT_MESSAGES} msgs)", CONTEXT_TARGET)):
        stats = out[name.split(" ")[0]]
        lib, cli = stats["library"], stats["HermesClient"]
        ratio = cli["p50"] / lib["p50"]
        old = stats.get("before")
        was = (f"{us(old['p50'])} / {us(old['p99'])}, {old['p50'] / lib['p50']:.2f}×"
               if old else "not run")
        lines.append(f"| {name} | {us(lib['p50'])} / {us(lib['p99'])} | {us(cli['p50'])} / "
                     f"{us(cli['p99'])} | {ratio:.2f}× | ≤ {target}×: "
                     f"{'met' if ratio <= target else 'missed'} | {was} | {us(stats['HTTP']['p50'])}, "
                     f"{stats['HTTP']['p50'] / lib['p50']:.2f}× |")
    for key in ("profile append", "profile context"):
        if key in out:
            lines += ["", f"{key}:", out[key]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds")
    parser.add_argument("--profile", action="store_true", help="cProfile the client's calls")
    parser.add_argument("--baseline", metavar="FILE",
                        help="another hermes_redis/client.py to measure in the same rounds")
    args = parser.parse_args(argv)
    print(report(measure(args.quick, args.profile, args.baseline)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
