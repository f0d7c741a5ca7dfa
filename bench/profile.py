"""Profile one hot path with pyinstrument: ``python -m bench.profile append|context|flush``.

Runs the operation the way the benchmark does (private redis-server, client and server on
one core) and prints pyinstrument's call tree, so "what is slow" is one command away.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from bench import context_scaling, workload
from bench.common import SAME_CORE, open_memory, placement, scratch_dir, start_redis


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile")
    parser.add_argument("what", choices=("append", "context", "flush"))
    parser.add_argument("-n", type=int, default=3000, help="operations (messages for flush)")
    parser.add_argument("--interval", type=float, default=0.0001, help="sampling interval, s")
    args = parser.parse_args(argv)
    try:
        from pyinstrument import Profiler
    except ImportError:
        print("pyinstrument is not installed: bash scripts/bench.sh installs it", file=sys.stderr)
        return 2
    server = start_redis()
    mem = open_memory(server.url, scratch_dir())
    try:
        with placement(server.proc.pid, *SAME_CORE):
            run = _prepare(args.what, mem, args.n)
            profiler = Profiler(interval=args.interval)
            profiler.start()
            run()
            profiler.stop()
        print(profiler.output_text(unicode=True, color=sys.stdout.isatty()))
    finally:
        mem.close()
        server.cleanup()
    return 0


def _prepare(what: str, mem: Any, n: int) -> Any:
    sid = mem.create_session("bench")
    items = workload.cycle(n)
    if what == "append":
        for role, text in items[:100]:
            mem.append(sid, role, text)
        return lambda: [mem.append(sid, role, text) for role, text in items]
    if what == "context":
        sid = context_scaling.build(mem, 1_000)
        for _ in range(20):
            mem.context(sid, budget=context_scaling.BUDGET)
        return lambda: [mem.context(sid, budget=context_scaling.BUDGET) for _ in range(n // 10)]
    for role, text in items:
        mem.append(sid, role, text)
    return lambda: mem.maintainer.flush(sid)


if __name__ == "__main__":
    raise SystemExit(main())
