"""Recall scoped to its session (issue 31): what one session's recall finds, in what order,
and what it costs never depend on other sessions; forget and purge take messages out of
recall's index; schema 9 fills the index in place from an archive of version 7 or 8."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest

from hermes_redis.core.text import fts_matches, recall_terms
from hermes_redis.store.archive import Archive, ArchiveStore, Forgotten
from hermes_redis.store.archive import base as archive_base
from hermes_redis.store.archive import postgres as archive_pg
from hermes_redis.store.archive.base import SCHEMA_VERSION
from hermes_redis.store.archive.postgres import PostgresArchive
from tests.test_archive import msgs, row

QUERIES = ("staging deploy", "deployment", "用户认证", "café notes", "zebra", "w17 w3")


def _seqs(archive: ArchiveStore, sid: str, query: str, limit: int = 8) -> list[int]:
    return [m.seq for m in archive.recall(sid, query, 0, 10**9, limit)]


def _own(archive: ArchiveStore) -> None:
    archive.write(row("mine"), msgs("mine", [
        "staging notes for the team",      # 1: ties with 3 on its own counts
        "ok",
        "deploy notes for the team",       # 3
        "ok",
        "帮我写一个用户认证接口",
        "好的",
        "cafe notes and the deployment plan w17",
        "done",
    ]))


def _others(archive: ArchiveStore, sessions: int, rng: random.Random) -> None:
    """Other sessions full of the same words, "staging" most of all."""
    words = ["staging", "staging", "staging", "deploy", "team", "notes", "用户", "认证",
             "cafe", "zebra", "w3", "w17"]
    for s in range(sessions):
        sid = f"other{s:03d}"
        archive.write(row(sid, user="bob"), msgs(sid, [
            " ".join(rng.choice(words) for _ in range(8)) for _ in range(20)]))


def test_a_sessions_recall_is_the_same_whatever_other_sessions_hold(
        archive: ArchiveStore) -> None:
    """Same hits in the same order before and after other sessions fill the archive with
    the query's words: IDF and rarity are the session's own, never the archive's."""
    _own(archive)
    alone = {q: _seqs(archive, "mine", q) for q in QUERIES}
    assert alone["staging deploy"][:4] == [1, 2, 3, 4]  # a tie within the session: earliest
    assert 5 in alone["用户认证"] and alone["zebra"] == []
    _others(archive, 30, random.Random(1))
    assert {q: _seqs(archive, "mine", q) for q in QUERIES} == alone
    assert _seqs(archive, "other000", "zebra")  # the others are recalled in their own


def test_recall_finds_exactly_the_messages_sharing_a_term(archive: ArchiveStore) -> None:
    """With room for all: the hits are the session's messages that share a recall term with
    the query (prefix for long words, as FTS5 matched them), each followed by its reply."""
    rng = random.Random(5)
    vocab = ["alpha", "alphabet", "beta", "gamma", "delta", "deploy", "deployment", "认证", "用户", "zeta"]
    texts = [" ".join(rng.choice(vocab) for _ in range(rng.randrange(1, 6))) for _ in range(60)]
    archive.write(row("s"), msgs("s", texts))
    _others(archive, 3, rng)
    for query in ("alpha", "deploy zeta", "用户认证", "gamma", "nothing"):
        words = [t.strip('"*') for t in recall_terms(query)]
        hits = {i + 1 for i, t in enumerate(texts) if any(fts_matches(w, t) for w in words)}
        want = hits | {s + 1 for s in hits if s < len(texts)}
        assert set(_seqs(archive, "s", query, limit=1000)) == want, query


def test_a_huge_token_is_archived_and_recalled(archive: ArchiveStore) -> None:
    """A token far longer than any word (a hash dump) archives on every backend (its index
    row is bounded) and is still found by that token, or by a longer one it starts."""
    blob = random.Random(0).randbytes(6_000).hex()  # 12,000 characters, incompressible
    archive.write(row("mine"), msgs("mine", [f"the dump {blob}", "ok", "short words only"]))
    assert _seqs(archive, "mine", blob)[:1] == [1]
    assert 3 not in _seqs(archive, "mine", blob)
    assert _seqs(archive, "mine", "dump")[:1] == [1]


def test_forget_and_purge_take_messages_out_of_recall(archive: ArchiveStore) -> None:
    _own(archive)
    _others(archive, 2, random.Random(2))
    assert 3 in _seqs(archive, "mine", "deploy")
    archive.forget("mine", [Forgotten("mine-0003", 3, 4)])
    assert 3 not in _seqs(archive, "mine", "deploy")
    assert _index_rows(archive, "mine", 3) == 0
    archive.purge("mine")
    assert _seqs(archive, "mine", "notes") == [] and _index_rows(archive, "mine") == 0
    assert _seqs(archive, "other000", "notes")  # another session's index is untouched


def _index_rows(archive: ArchiveStore, sid: str, seq: int | None = None) -> int:
    sql = "SELECT count(*) AS n FROM recall_index WHERE session_id=?"
    args: list[Any] = [sid]
    if seq is not None:
        sql, args = sql + " AND seq=?", [sid, seq]
    return int(archive._read(sql, args)[0]["n"])  # type: ignore[attr-defined]


def _steps(store: Archive, query: str, sid: str = "mine") -> int:
    """SQLite virtual-machine steps one recall takes: its cost, free of the machine's load."""
    conn = store._connect()
    count = [0]

    def tick() -> int:
        count[0] += 1
        return 0
    conn.set_progress_handler(tick, 10)
    try:
        list(store.recall(sid, query, 0, 10**9, 16))
    finally:
        conn.set_progress_handler(None, 0)
    return count[0]


def test_sqlite_recall_cost_ignores_other_sessions(tmp_path: Path) -> None:
    """The work one recall does (SQLite VM steps) is the same with 2 other sessions as with
    60 holding the same words; FTS5 matched across all of them (issue 31)."""
    store = Archive(tmp_path / "a.db")
    try:
        _own(store)
        rng = random.Random(3)
        _others(store, 2, rng)
        few = {q: _steps(store, q) for q in QUERIES}
        _others(store, 60, rng)  # other000..059: the first two rewritten (idempotent), 58 new
        many = {q: _steps(store, q) for q in QUERIES}
        assert all(v > 0 for v in few.values())
        for q in QUERIES:
            assert many[q] <= few[q] * 1.05 + 50, (q, few[q], many[q])
    finally:
        store.close()


def _common(store: ArchiveStore, sid: str, count: int) -> None:
    """``count`` messages that all say the same four words, each with one rare word."""
    for start in range(1, count + 1, 500):
        texts = [f"alpha beta gamma delta note{seq}" for seq in range(start, min(count + 1, start + 500))]
        store.write(row(sid), msgs(sid, texts, start=start))


def test_sqlite_recall_cost_is_bounded_whatever_the_sessions_size(tmp_path: Path) -> None:
    """Issue 31 part 2: a recall of words every message holds does the same work (SQLite VM
    steps) in a session of 1,280 messages as in one of 6,400 (5 and 25 × RECALL_MAX_POSTINGS):
    each term is counted, and the kept one ranked, up to RECALL_MAX_POSTINGS + 1 postings.
    With the old cap (10,000) the big session's recall took 5.0× the small one's steps."""
    assert archive_base.RECALL_MAX_POSTINGS <= 1_280
    store = Archive(tmp_path / "a.db")
    try:
        _common(store, "small", 1_280)
        _common(store, "big", 6_400)
        for query in ("alpha beta gamma delta", "alpha note1234", "gamma"):
            small, big = _steps(store, query, "small"), _steps(store, query, "big")
            assert 0 < big <= small * 1.05 + 50, (query, small, big)
        # what is kept: the rare word alone ranks; with only common words, the rarest
        assert _seqs(store, "big", "alpha note1234", 4) == [1234, 1235]
        assert len(_seqs(store, "big", "alpha beta gamma delta", 16)) >= 16  # with a reply
    finally:
        store.close()


def _pg_rows(store: PostgresArchive, url: str, query: str, sid: str) -> int:
    """Rows every plan node of one recall's statements handles on PostgreSQL (EXPLAIN
    ANALYZE: actual rows × loops, summed): its cost, free of the machine's load."""
    statements: list[tuple[str, list[Any]]] = []
    read = store._read

    def record(sql: str, args: Any = (), values: Any = None) -> list[dict[str, Any]]:
        if "recall_index" in sql:
            statements.append((sql, list(args)))
        return read(sql, args, values)
    store._read = record  # type: ignore[method-assign]
    try:
        list(store.recall(sid, query, 0, 10**9, 16))
    finally:
        del store._read

    def handled(node: dict[str, Any]) -> int:
        own = int(node.get("Actual Rows", 0) * node.get("Actual Loops", 1))
        return own + sum(handled(child) for child in node.get("Plans", []))
    total = 0
    with psycopg.connect(url) as conn:
        for sql, args in statements:
            plan = conn.execute("EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) "
                                + archive_pg.postgres_sql(sql), args).fetchone()[0]
            total += handled(plan[0]["Plan"])
    return total


def test_pg_recall_cost_is_bounded_whatever_the_sessions_size(pg_url: str) -> None:
    """As on SQLite: the rows a recall's plans handle in a session of 6,400 messages that all
    say the query's words are within 5 % of those in one of 1,280. (The mean length joined
    as an avg() subquery was evaluated again for each posting here: 257² rows.)"""
    store = PostgresArchive(pg_url)
    try:
        _common(store, "small", 1_280)
        _common(store, "big", 6_400)
        for query in ("alpha beta gamma delta", "alpha note1234", "gamma"):
            small = _pg_rows(store, pg_url, query, "small")
            big = _pg_rows(store, pg_url, query, "big")
            assert 0 < big <= small * 1.05 + 50, (query, small, big)
            assert big < 20 * archive_base.RECALL_MAX_POSTINGS, (query, big)
        assert _seqs(store, "big", "alpha note1234", 4) == [1234, 1235]
    finally:
        store.close()


def _recalls(archive: ArchiveStore) -> dict[str, list[int]]:
    return {q: _seqs(archive, sid, q) for q in QUERIES for sid in ("mine", "other001")}


@pytest.mark.parametrize("old", [7, 8])
def test_sqlite_archive_gets_its_recall_index_in_place(tmp_path: Path, old: int) -> None:
    path = tmp_path / "a.db"
    store = Archive(path)
    _own(store)
    _others(store, 3, random.Random(4))
    before, rows = _recalls(store), _index_rows(store, "mine")
    store.close()
    db = sqlite3.connect(path)  # as schema 7 (or the lineage branch's 8) left it
    db.execute("DROP TABLE recall_index")
    db.execute(f"PRAGMA user_version = {old}")
    db.commit()
    db.close()
    store = Archive(path)
    try:
        assert _recalls(store) == before and _index_rows(store, "mine") == rows > 0
        version = store._read("PRAGMA user_version")[0]
        assert next(iter(version.values())) == SCHEMA_VERSION >= 9
    finally:
        store.close()


@pytest.mark.parametrize("old", [7, 8])
def test_pg_archive_gets_its_recall_index_in_place(pg_url: str, old: int) -> None:
    store = PostgresArchive(pg_url)
    _own(store)
    _others(store, 3, random.Random(4))
    before, rows = _recalls(store), _index_rows(store, "mine")
    store.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP TABLE recall_index")
        conn.execute("UPDATE schema_version SET version = %s", (old,))
    store = PostgresArchive(pg_url)
    try:
        assert _recalls(store) == before and _index_rows(store, "mine") == rows > 0
    finally:
        store.close()
    with psycopg.connect(pg_url) as conn:
        assert archive_pg.schema_version(conn) == archive_pg.SCHEMA_VERSION >= 9
