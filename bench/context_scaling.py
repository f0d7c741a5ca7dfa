"""context(): latency at a fixed budget for histories of 100 … 100,000 turns.

Invariant 6 says the cost grows with the budget, never with the history. The worst case
for that is a hot list that holds the whole history (workers down, or compaction off), so
that is what is built here: every turn, verbatim, in the session's Redis list.

How the histories are built (honestly): appending 200,000 messages one round trip at a time
would dominate the run, so all turns but the last are written in bulk — the exact bytes
``append`` would store (``Message.pack()`` with its seq), pipelined ``RPUSH`` into the
session's own list key, with the meta counters (last_seq, message_count, total_tokens) set
to match. The last turn is appended through ``SessionMemory.append``, so the final state
is one the real code path produced. Each turn is a user message and an assistant reply.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench import workload
from bench.common import (
    SAME_CORE,
    Section,
    median,
    open_memory,
    percentile,
    placement,
    quiet_gc,
    timed,
    times,
    us,
    verdict,
)

SIZES = (100, 1_000, 10_000, 100_000)
BUDGET = 8_000
FLAT = 1.5  # 100,000-turn p50 within this factor of the 100-turn p50 counts as flat


def build(mem: Any, turns: int) -> str:
    sid = mem.create_session("bench")
    count = workload.Counter(mem.tokenizer)
    items = workload.cycle(2 * (turns - 1), roles=("user", "assistant"))
    client = mem.hot.client
    key = mem.hot.list_key(sid)
    tokens = 0
    pipe = client.pipeline(transaction=False)
    chunk: list[bytes] = []
    for m, payload in workload.packed(sid, items, count):
        tokens += m.token_count
        chunk.append(payload)
        if len(chunk) == 1000:
            pipe.rpush(key, *chunk)
            chunk = []
            if len(pipe) >= 20:
                pipe.execute()
    if chunk:
        pipe.rpush(key, *chunk)
    pipe.execute()
    n = len(items)
    client.hset(mem.hot.meta_key(sid), mapping={
        "last_seq": n, "message_count": n, "total_tokens": tokens})
    user, assistant = workload.cycle(2, roles=("user", "assistant"))
    mem.append(sid, *user)
    mem.append(sid, *assistant)
    info = mem.info(sid)
    assert info.message_count == 2 * turns and info.last_seq == 2 * turns, info
    return sid


def run(server: Any, workdir: Path, quick: bool = False) -> Section:
    sizes = SIZES[:3] if quick else SIZES
    rounds, calls = (3, 40) if quick else (10, 80)
    mem = open_memory(server.url, workdir)
    try:
        sids = {n: build(mem, n) for n in sizes}
        samples: dict[int, list[float]] = {n: [] for n in sizes}
        per_round: dict[int, list[float]] = {n: [] for n in sizes}
        shape: dict[int, Any] = {}
        with placement(server.proc.pid, *SAME_CORE):
            for n in sizes:  # warm up
                for _ in range(20):
                    shape[n] = mem.context(sids[n], budget=BUDGET)
            for _ in range(rounds):
                for n in sizes:
                    with quiet_gc():
                        lat, _ = timed(lambda n=n: mem.context(sids[n], budget=BUDGET), calls)
                    samples[n] += lat
                    per_round[n].append(percentile(lat, 50))
        for sid in sids.values():
            mem.hot.drop(sid)
    finally:
        mem.close()
    base = sizes[0]
    sec = Section(f"context() — fixed budget of {BUDGET:,} tokens, growing history",
                  ["history", "messages in Redis", "p50", "p99", "returned", "p50 vs 100 turns"])
    for n in sizes:
        ratio = median([a / b for a, b in zip(per_round[n], per_round[base], strict=True)])
        ctx = shape[n]
        sec.add(f"{n:,} turns", f"{2 * n:,}", us(percentile(samples[n], 50)),
                us(percentile(samples[n], 99)), f"{len(ctx.messages)} msgs / {ctx.tokens:,} tok",
                times(ratio))
    top = sizes[-1]
    flat = median([a / b for a, b in zip(per_round[top], per_round[base], strict=True)])
    sec.note(f"{top:,} / {base:,} turns p50 ratio: {flat:.2f}× (flat means ≤ {FLAT}×: "
             f"{verdict(flat <= FLAT)}). Ratios are medians of per-round ratios; "
             f"{rounds} rounds × {calls} calls per size, sizes interleaved; same core.")
    sec.note("Histories are whole in the hot list (the worst case: no worker trimmed them); "
             "all turns but the last are bulk-loaded with the bytes append would write, the "
             "last turn goes through append(). See bench/context_scaling.py.")
    return sec
