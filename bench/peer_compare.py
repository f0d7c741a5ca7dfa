"""Peers: hermes-redis against what a user would pick instead, same workload, same Redis.

The loop an agent runs: append a message; after every second append read the context it
would send to the model. The peers read their newest ``CONTEXT_N`` messages; hermes-redis
reads ``context()`` with a token budget sized to hold about as many (the mean message of
the workload, times ``CONTEXT_N``), and the table says how many each one returned.
Rounds rotate the order of the libraries; each round starts a fresh session per library.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench import peers, workload
from bench.common import (
    SAME_CORE,
    Section,
    median,
    num,
    open_memory,
    percentile,
    placement,
    quiet_gc,
    rate,
    times,
    us,
)
from hermes_redis.core.tokens import MESSAGE_OVERHEAD

HERMES = "hermes-redis"
CONTEXT_EVERY = 2
CONTEXT_N = 20


def budget_for(mem: Any, items: list[tuple[str, str]], n: int) -> int:
    mean = sum(mem.tokenizer.count(t) for _, t in items) / len(items)
    return int(n * (mean + MESSAGE_OVERHEAD))


def run_hermes(url: str, workdir: Path, items: list[tuple[str, str]]) -> dict[str, Any]:
    mem = open_memory(url, workdir)
    try:
        budget = budget_for(mem, items, CONTEXT_N)
        sid = mem.create_session("bench")
        append_us: list[float] = []
        read_us: list[float] = []
        returned: list[int] = []
        clock = peers.clock
        start = clock()
        for i, (role, text) in enumerate(items, 1):
            t0 = clock()
            mem.append(sid, role, text)
            append_us.append((clock() - t0) / 1000)
            if i % CONTEXT_EVERY == 0:
                t0 = clock()
                ctx = mem.context(sid, budget=budget)
                read_us.append((clock() - t0) / 1000)
                returned.append(len(ctx.messages))
        total = (clock() - start) / 1e9
        hot = mem.hot
        footprint = sum(int(hot.client.memory_usage(k, samples=0) or 0)
                        for k in (hot.meta_key(sid), hot.list_key(sid)))
        hot.drop(sid)
    finally:
        mem.close()
    return {"append_us": append_us, "read_us": read_us, "seconds": total,
            "returned": returned, "bytes": footprint}


def run(server: Any, workdir: Path, quick: bool = False) -> Section:
    n, rounds = (200, 2) if quick else (500, 6)
    items = workload.cycle(n)
    found = peers.available()
    libs = [HERMES] + [p for p in peers.PEERS if found[p] is None]
    results: dict[str, list[dict[str, Any]]] = {lib: [] for lib in libs}
    with placement(server.proc.pid, *SAME_CORE):
        for r in range(rounds):
            order = libs[r % len(libs):] + libs[: r % len(libs)]
            for lib in order:
                with quiet_gc():
                    if lib == HERMES:
                        results[lib].append(run_hermes(server.url, workdir, items))
                    else:
                        results[lib].append(peers.run_peer(lib, server.url, items,
                                                           CONTEXT_EVERY, CONTEXT_N))
    sec = Section(f"peers — same workload, same Redis: {n} appends with a context read after "
                  f"every {CONTEXT_EVERY}nd, newest ~{CONTEXT_N} messages",
                  ["library", "append p50", "append p99", "context p50", "context p99",
                   "loop ops/s", "vs hermes-redis", "msgs/read", "Redis B/msg"])
    base = median([_ops(x) for x in results[HERMES]])
    for lib in libs:
        runs = results[lib]
        app = [v for x in runs for v in x["append_us"]]
        rd = [v for x in runs for v in x["read_us"]]
        ops = median([_ops(x) for x in runs])
        name = lib if lib == HERMES else f"{lib} {peers.version(lib)}"
        sec.add(name, us(percentile(app, 50)), us(percentile(app, 99)), us(percentile(rd, 50)),
                us(percentile(rd, 99)), rate(ops), times(ops / base),
                f"{median([float(v) for x in runs for v in x['returned']]):.0f}",
                num(median([x["bytes"] / n for x in runs])))
    for p in peers.PEERS:
        if found[p] is not None:
            sec.add(p, "skipped", "", "", "", "", "", "", "")
            sec.note(f"{p} skipped: {found[p]} (bash scripts/bench.sh installs the peers)")
    sec.note(f"{rounds} rounds, library order rotated; a fresh session per library per round; "
             "client and redis-server on one core. Loop ops/s = (appends + reads) / wall time; "
             "vs hermes-redis > 1 means faster than hermes-redis.")
    sec.note("What each append does: hermes-redis validates, counts tokens (tiktoken) and runs "
             "one Lua script (seq, counters, index, backlog, TTL); openai-agents runs a "
             "WATCH/MULTI transaction over several round trips; langchain does one LPUSH. "
             "A langchain read fetches and parses the whole list, so it grows with the session.")
    return sec


def _ops(r: dict[str, Any]) -> float:
    return (len(r["append_us"]) + len(r["read_us"])) / r["seconds"]
