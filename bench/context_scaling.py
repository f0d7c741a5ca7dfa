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


HOT_TAIL = 20  # the archived scenario: what a worker leaves in Redis (keep_recent turns)


def build_archived(mem: Any, turns: int) -> str:
    """The state workers leave: every turn but the newest ``HOT_TAIL`` messages archived and
    summarized, those in the hot list; ``context()`` then reads the archive (the older
    verbatim turns and the ranked recall for the newest user message)."""
    from dataclasses import replace


    sid = mem.create_session("bench")
    count = workload.Counter(mem.tokenizer)
    items = workload.cycle(2 * (turns - 1), roles=("user", "assistant"))
    n = len(items)
    messages = [m for m, _ in workload.packed(sid, items, count)]
    summary = mem.offline_summarizer.summarize("", messages[:400], 2000)
    meta = replace(mem.hot.meta(sid), summary=summary, summary_seq=max(0, n - HOT_TAIL),
                   last_seq=n, flushed_seq=n, message_count=n,
                   total_tokens=sum(m.token_count for m in messages))
    row = meta.to_row(sid)
    for i in range(0, n, 20_000):
        mem.cold.write(row, messages[i : i + 20_000], {})
    mem.cold.set_summary(sid, summary, meta.summary_seq, force=True)
    client = mem.hot.client
    tail = [m.pack() for m in messages[n - HOT_TAIL :]]
    if tail:
        client.rpush(mem.hot.list_key(sid), *tail)
    client.hset(mem.hot.meta_key(sid), mapping=meta.to_hash())
    user, assistant = workload.cycle(2, roles=("user", "assistant"))
    mem.append(sid, *user)
    mem.append(sid, *assistant)
    return sid


def run(server: Any, workdir: Path, quick: bool = False) -> Section:
    sizes = SIZES[:3] if quick else SIZES
    rounds, calls = (3, 20) if quick else (8, 40)
    sec = Section(f"context() — fixed budget of {BUDGET:,} tokens, growing history",
                  ["history", "state", "p50", "p99", "returned", "p50 vs 100 turns"])
    for label, builder in (("all in Redis", build), ("archived", build_archived)):
        _measure(sec, label, builder, server, workdir, sizes, rounds, calls)
    sec.note(f"Flat means the {sizes[-1]:,}-turn p50 ≤ {FLAT}× the {sizes[0]:,}-turn p50. Ratios "
             f"are medians of per-round ratios; {rounds} rounds × {calls} calls per size, sizes "
             "interleaved; same core.")
    sec.note("'all in Redis': the whole history in the hot list, no summary (the worst case for "
             "the hot read: no worker trimmed it); all turns but the last are bulk-loaded with "
             "the bytes append would write, the last turn goes through append(). 'archived': "
             f"the state workers leave (the archive holds every turn, Redis the newest {HOT_TAIL} "
             "messages and a summary); context() reads older verbatim turns from the archive "
             "and recalls by BM25 for the newest user message. See bench/context_scaling.py.")
    return sec


def _measure(sec: Section, label: str, builder: Any, server: Any, workdir: Path,
             sizes: tuple[int, ...], rounds: int, calls: int) -> None:
    mem = open_memory(server.url, workdir)
    try:
        sids = {n: builder(mem, n) for n in sizes}
        samples: dict[int, list[float]] = {n: [] for n in sizes}
        per_round: dict[int, list[float]] = {n: [] for n in sizes}
        shape: dict[int, Any] = {}
        with placement(server.proc.pid, *SAME_CORE):
            for n in sizes:  # warm up
                for _ in range(5):
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
    for n in sizes:
        ratio = median([a / b for a, b in zip(per_round[n], per_round[base], strict=True)])
        ctx = shape[n]
        parts = f"{len(ctx.messages)} msgs" + (f" + {len(ctx.recalled)} recalled" if ctx.recalled
                                               else "")
        sec.add(f"{n:,} turns", label, us(percentile(samples[n], 50)),
                us(percentile(samples[n], 99)), f"{parts} / {ctx.tokens:,} tok", times(ratio))
    top = sizes[-1]
    flat = median([a / b for a, b in zip(per_round[top], per_round[base], strict=True)])
    sec.note(f"{label}: {top:,} / {base:,} turns p50 ratio {flat:.2f}× ({verdict(flat <= FLAT)}).")
