"""Client instructions per call, counted by callgrind: ``python -m bench.instructions [WHAT ...]``.

Wall times on a shared 2-core VM move with the neighbours; instruction counts do not. Each
measure runs this module under ``valgrind --tool=callgrind`` twice against one private
redis-server, once with no calls and once with ``-n`` calls, and prints the difference per
call: what the client process itself executes (Redis's own work is not counted). Slow: about
a minute per measure. WHAT: raw, append, append_many, context, lrange20 (default: all).
"""

from __future__ import annotations

import argparse
import gc
import re
import shutil
import subprocess
import sys
import tempfile

MEASURES = ("raw", "append", "append_many", "context", "lrange20")


def _calls(url: str, what: str, n: int) -> None:
    """The child: set a session up, warm ``what`` up with one call, then make ``n`` more."""
    from bench import peer_compare, workload
    from bench.common import open_memory, scratch_dir

    mem = open_memory(url, scratch_dir())
    items = workload.cycle(1000)
    sid = mem.create_session("bench")
    for role, text in items[:200]:
        mem.append(sid, role, text)
    budget = peer_compare.budget_for(mem, items, peer_compare.CONTEXT_N)
    mem.context(sid, budget=budget)
    payloads = [m.pack() for m in mem.messages(sid)[:8]]
    client, key = mem.hot.client, mem.hot.list_key(sid)
    turns = [[{"role": r, "content": t} for r, t in items[j:j + 4]] for j in range(0, 1000, 4)]
    calls = {
        "raw": lambda i: client.rpush("bench:scratch", payloads[i % 8]),
        "append": lambda i: mem.append(sid, *items[i % 1000]),
        "append_many": lambda i: mem.append_many(sid, turns[i % len(turns)]),
        "context": lambda i: mem.context(sid, budget=budget),
        "lrange20": lambda i: client.lrange(key, -20, -1),
    }
    call = calls[what]
    gc.collect()
    gc.freeze()  # a collection then scans what the calls made, not every module loaded
    call(0)  # in both runs: first-call costs (lazy imports, connections) are not per call
    for i in range(1, n + 1):
        call(i)
    client.delete("bench:scratch")
    mem.hot.drop(sid)
    mem.close()


def count(url: str, what: str, n: int) -> int:
    """Instructions of the child process making ``n`` calls."""
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/out",
             sys.executable, "-m", "bench.instructions", "--child", url, what, str(n)],
            capture_output=True, text=True, check=True)
    found = re.search(r"Collected : (\d+)", out.stderr)
    if not found:
        raise RuntimeError(f"callgrind printed no total: {out.stderr[-500:]}")
    return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.instructions")
    parser.add_argument("what", nargs="*", default=list(MEASURES), help=", ".join(MEASURES))
    parser.add_argument("-n", type=int, default=300, help="calls per measure")
    parser.add_argument("--child", nargs=3, metavar=("URL", "WHAT", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        url, what, n = args.child
        _calls(url, what, int(n))
        return 0
    unknown = [w for w in args.what if w not in MEASURES]
    if unknown:
        parser.error(f"unknown measure {unknown[0]!r}: choose from {', '.join(MEASURES)}")
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    from bench.common import start_redis

    server = start_redis()
    try:
        raw = None
        for what in args.what:
            per_call = (count(server.url, what, args.n) - count(server.url, what, 0)) // args.n
            raw = per_call if what == "raw" else raw
            ratio = f"  {per_call / raw:.2f}× raw RPUSH" if raw else ""
            print(f"{what:12} {per_call:>10,} instructions per call{ratio}", flush=True)
    finally:
        server.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
