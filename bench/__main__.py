"""Run every benchmark and print one report: ``python -m bench`` (or ``bash scripts/bench.sh``).

Starts a private redis-server on a free port (never 6379), runs the sections in order,
prints each table as it finishes and writes the whole report to bench/results-latest.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shutil
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

from bench.common import ROOT, Section, scratch_dir, start_redis

SECTIONS = ("append", "memory", "context", "flush", "archives", "recall", "recall-context",
            "listing", "compression", "quality", "extraction", "memories", "cluster", "peers",
            "http", "adapters", "hermes")
RESULTS = ROOT / "bench" / "results-latest.md"


def machine() -> list[str]:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / 1024 / 1024:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    redis_server = shutil.which("redis-server") or "redis-server"
    try:
        out = subprocess.run([redis_server, "--version"], capture_output=True, text=True,
                             timeout=10).stdout
        rv = next((p.split("=", 1)[1] for p in out.split() if p.startswith("v=")), "?")
    except (OSError, subprocess.SubprocessError):
        rv = "?"
    return [
        f"- Machine: {cpu}, {os.cpu_count()} cores{mem}; {platform.system()} "
        f"{platform.release()}",
        f"- Python {platform.python_version()}, redis-server {rv}, redis-py {version('redis')}, "
        f"hiredis {_ver('hiredis')}, tiktoken {version('tiktoken')}, "
        f"hermes-redis {version('hermes-redis')}",
    ]


def _ver(dist: str) -> str:
    try:
        return version(dist)
    except Exception:
        return "not installed"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true",
                        help="fewer rounds and no 100,000-turn history (a smoke run, ~1 min)")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, metavar="SECTION",
                        help=f"run only these sections: {', '.join(SECTIONS)}")
    parser.add_argument("--no-write", action="store_true",
                        help=f"do not write {RESULTS.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    wanted = args.only or list(SECTIONS)
    if "memory" in wanted and "append" not in wanted:
        wanted.insert(0, "append")  # memory is measured on the append benchmark's session

    started = time.perf_counter()
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = os.getloadavg()[0]
    busy = (f" — other processes were busy (load {load:.1f}): expect noise"
            if load > 0.5 * (os.cpu_count() or 1) else "")
    header = [f"## hermes-redis benchmark — {when}", "", *machine(),
              "- Redis: a private redis-server on 127.0.0.1 (TCP loopback), AOF with "
              "appendfsync everysec as docs/operations.md recommends",
              f"- Load average at start: {load:.2f}{busy}",
              f"- Command: `bash scripts/bench.sh{' --quick' if args.quick else ''}`"
              + (f" (only: {', '.join(wanted)})" if args.only else ""), ""]
    print("\n".join(header), flush=True)

    from bench import (
        adapters,
        append,
        archives,
        cluster,
        compression,
        context_recall,
        context_scaling,
        extraction,
        flush,
        hermes_agent,
        http,
        listing,
        memories,
        memory_use,
        peer_compare,
        quality,
        recall_scope,
    )

    server = start_redis()
    workdir = scratch_dir()
    sections: list[Section] = []
    one = None
    try:
        for name in wanted:
            t0 = time.perf_counter()
            if name == "append":
                sec, one = append.run(server, workdir, args.quick)
            elif name == "memory":
                sec = memory_use.run(server, one)
            elif name == "context":
                sec = context_scaling.run(server, workdir, args.quick)
            elif name == "flush":
                sec = flush.run(server, workdir, args.quick)
            elif name == "archives":
                sec = archives.run(workdir, args.quick)
            elif name == "recall":
                sec = recall_scope.run(workdir, args.quick)
            elif name == "recall-context":
                sec = context_recall.run(server, workdir, args.quick)
            elif name == "listing":
                sec = listing.run(server, workdir, args.quick)
            elif name == "compression":
                sec = compression.run(workdir, args.quick)
            elif name == "quality":
                sec = quality.run(workdir, args.quick)
            elif name == "extraction":
                sec = extraction.run(workdir, args.quick)
            elif name == "memories":
                sec = memories.run(workdir, args.quick)
            elif name == "cluster":
                sec = cluster.run(server, workdir, args.quick)
            elif name == "http":
                sec = http.run(server, workdir, args.quick)
            elif name == "adapters":
                sec = adapters.run(server, workdir, args.quick)
            elif name == "hermes":
                sec = hermes_agent.run(server, workdir, args.quick)
            else:
                sec = peer_compare.run(server, workdir, args.quick)
            sec.seconds = time.perf_counter() - t0
            sections.append(sec)
            print(sec.render(), f"\n_({sec.seconds:.0f} s)_\n", sep="\n", flush=True)
    finally:
        server.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)

    total = time.perf_counter() - started
    footer = f"Total: {total:.0f} s; load average at the end: {os.getloadavg()[0]:.2f}."
    print(footer)
    if not args.no_write:
        body = [*header, *(s.render() + "\n" for s in sections), footer, ""]
        RESULTS.write_text("\n".join(body), encoding="utf-8")
        print(f"wrote {RESULTS.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
