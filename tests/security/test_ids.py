"""Issue 35, part 1: a message_id names a message within its session. An id reused in
another session never drops an acknowledged message nor touches the other session's rows;
a retry with the same id answers with what is stored, at any time while it exists, and a
retry that says something else is a ConflictError naming the stored seq."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from hermes_redis import SessionMemory
from hermes_redis.core.errors import ConflictError
from hermes_redis.core.models import Message, new_message_id
from hermes_redis.store.archive import Archive, Forgotten
from hermes_redis.store.archive import postgres as archive_pg
from hermes_redis.store.archive.base import SCHEMA_VERSION
from hermes_redis.store.archive.postgres import PostgresArchive, fts_vector


def archived(mem: SessionMemory, sid: str) -> list[Message]:
    return mem.cold.messages(sid)


def expire(mem: SessionMemory, sid: str) -> None:
    """What a TTL does to a fully archived session: its hot keys go (the archive stays)."""
    mem.flush(sid)
    mem.hot.drop(sid)


# --- the same id in two sessions ------------------------------------------------------------
def test_an_id_reused_in_another_session_loses_nothing(mem: SessionMemory) -> None:
    shared = new_message_id()
    a, b = mem.create_session("alice"), mem.create_session("bob")
    mem.append(a, "user", "alice's words", message_id=shared)
    mem.append(b, "user", "bob's words", message_id=shared)
    mem.flush(a)
    mem.flush(b)
    assert [m.content for m in archived(mem, a)] == ["alice's words"]
    assert [m.content for m in archived(mem, b)] == ["bob's words"]  # was skipped: lost
    expire(mem, b)
    assert [m.content for m in mem.messages(b)] == ["bob's words"]
    assert mem.info(b).message_count == 1


def test_a_pop_in_one_session_never_deletes_another_sessions_message(mem: SessionMemory) -> None:
    shared = new_message_id()
    alice, bob = mem.create_session("alice"), mem.create_session("bob")
    mem.append(alice, "user", "alice's secret plan", message_id=shared)
    mem.flush(alice)
    mem.append(bob, "user", "bob borrows the id", message_id=shared)
    mem.flush(bob)
    popped = mem.pop(bob)
    assert popped is not None and popped.content == "bob borrows the id"
    assert [m.content for m in archived(mem, alice)] == ["alice's secret plan"]
    assert archived(mem, bob) == []
    assert mem.forget_keyword(bob, "nothing here") == 0
    assert [m.content for m in mem.messages(alice)] == ["alice's secret plan"]


def test_a_forget_in_one_session_keeps_the_same_id_in_another(mem: SessionMemory) -> None:
    shared = new_message_id()
    a, b = mem.create_session("u"), mem.create_session("u")
    for sid in (a, b):
        mem.append(sid, "user", f"words of {sid}", message_id=shared)
        mem.flush(sid)
    assert mem.forget_last(b, 1) == 1
    assert [m.content for m in archived(mem, a)] == [f"words of {a}"]
    assert mem.cold.tombstoned(a) == {}


# --- idempotency without a window ---------------------------------------------------------
@pytest.mark.parametrize("where", ["hot", "trimmed", "expired"])
def test_a_late_retry_returns_the_stored_message(mem: SessionMemory, where: str) -> None:
    """More than 64 newer appends, then (``trimmed``) compacted out of the hot list, or
    (``expired``) the hot keys gone: the retry still finds its message, no second copy."""
    sid = mem.create_session("u")
    mid = new_message_id()
    first = mem.append(sid, "user", "the one that matters", message_id=mid, created_at=1.7e9)
    mem.append_many(sid, [{"role": "assistant", "content": f"filler {i}"} for i in range(100)])
    if where == "trimmed":
        mem.flush(sid)
        mem.clear(sid)  # everything archived and out of the hot list
        assert all(m.seq != first.seq for m in mem.hot.messages(sid))
    elif where == "expired":
        expire(mem, sid)
    again = mem.append(sid, "user", "the one that matters", message_id=mid)
    assert (again.seq, again.message_id) == (first.seq, mid)
    assert again.created_at == first.created_at  # what is stored, not what was sent
    assert mem.info(sid).message_count == 101
    mem.flush(sid)
    seqs = [m.seq for m in mem.messages(sid)]
    assert seqs == list(range(1, 102))  # no gap, no second copy


def test_a_retry_that_differs_is_a_conflict_naming_the_stored_seq(mem: SessionMemory) -> None:
    sid = mem.create_session("u")
    mid = new_message_id()
    mem.append(sid, "user", "first", message_id=mid)
    with pytest.raises(ConflictError, match="stored at seq 1 with another role") as err:
        mem.append(sid, "assistant", "second", message_id=mid)
    assert err.value.seq == 1
    with pytest.raises(ConflictError, match="another content"):
        mem.append(sid, "user", "second", message_id=mid)
    mem.flush(sid)
    expire(mem, sid)
    with pytest.raises(ConflictError, match="another content"):
        mem.append(sid, "user", "second", message_id=mid)
    stored = mem.messages(sid)
    assert [(m.role, m.content) for m in stored] == [("user", "first")]


def test_a_batch_sharing_only_some_ids_is_a_conflict(mem: SessionMemory) -> None:
    sid = mem.create_session("u")
    a, b = new_message_id(), new_message_id()
    mem.append(sid, "user", "a", message_id=a)
    with pytest.raises(ConflictError, match="partly stored"):
        mem.append_many(sid, [{"role": "user", "content": "a", "message_id": a},
                              {"role": "assistant", "content": "b", "message_id": b}])
    assert mem.info(sid).message_count == 1


def test_a_forgotten_id_is_not_stored_again(mem: SessionMemory) -> None:
    """The archive keeps a tombstone for it: storing it again would be acknowledged, then
    skipped by the flush (lost). It is refused instead, while hot and once expired."""
    sid = mem.create_session("u")
    mid = new_message_id()
    mem.append(sid, "user", "forget me", message_id=mid)
    assert mem.pop(sid) is not None
    with pytest.raises(ConflictError, match="forgotten"):
        mem.append(sid, "user", "forget me", message_id=mid)
    mem.append(sid, "user", "something else")
    expire(mem, sid)
    with pytest.raises(ConflictError, match="forgotten"):
        mem.append(sid, "user", "forget me", message_id=mid)
    assert [m.content for m in mem.messages(sid)] == ["something else"]


def test_a_retry_after_a_lost_reply_enqueues_the_flush_it_owes(mem: SessionMemory) -> None:
    """The first attempt landed (and set the session pending) but its reply, and so its
    flush job, was lost: the retry must enqueue it, or the session waits for the sweep."""
    sid = mem.create_session("u")
    mid = new_message_id()
    msg = Message.new(sid, 0, "user", "landed", 1, mid, "", (), (), time.time(), "")
    seqs, enqueue, _ = mem.hot.append([msg], time.time(), "")  # the reply never came back
    assert enqueue  # the caller was to enqueue: it never did
    asked: list[str] = []
    real = mem._enqueue

    def spy(s: str) -> None:
        asked.append(s)
        real(s)

    mem._enqueue = spy
    again = mem.append(sid, "user", "landed", message_id=mid)
    assert again.seq == seqs[0] and asked == [sid]


# --- the archive's key and its migration -----------------------------------------------------
def _keyed_sqlite(path: Path, table: str) -> list[str]:
    with sqlite3.connect(path) as db:
        cols = sorted((r[5], r[1]) for r in db.execute(f"PRAGMA table_info({table})") if r[5])
    return [name for _, name in cols]


def _as_schema_6(path: Path) -> None:
    """Rebuild the file's two tables as schema 6 had them (message_id the global key),
    rowids kept: the file an older hermes-redis left."""
    db = sqlite3.connect(path)
    db.executescript("""
BEGIN;
CREATE TABLE m6 (message_id TEXT PRIMARY KEY, session_id TEXT REFERENCES sessions(session_id),
  role TEXT NOT NULL, content TEXT NOT NULL, token_count INTEGER, tool_calls JSON,
  file_refs JSON, memory_refs JSON, created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
  seq INTEGER NOT NULL, item JSON);
INSERT INTO m6 (rowid, message_id, session_id, role, content, token_count, tool_calls, file_refs,
  memory_refs, created_at, seq, item) SELECT rowid, message_id, session_id, role, content,
  token_count, tool_calls, file_refs, memory_refs, created_at, seq, item FROM messages;
DROP TABLE messages; ALTER TABLE m6 RENAME TO messages;
CREATE INDEX idx_messages_session ON messages(session_id, created_at);
CREATE UNIQUE INDEX idx_messages_seq ON messages(session_id, seq);
CREATE TABLE t6 (message_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, seq INTEGER,
  forgotten_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP);
INSERT INTO t6 SELECT message_id, session_id, seq, forgotten_at FROM tombstones;
DROP TABLE tombstones; ALTER TABLE t6 RENAME TO tombstones;
CREATE INDEX idx_tombstones_session ON tombstones(session_id);
COMMIT;
PRAGMA user_version = 6;
""")
    db.close()


def _row(sid: str) -> dict[str, object]:
    return {"session_id": sid, "user_id": "u", "title": "", "created_at": 1.7e9,
            "updated_at": 1.7e9, "status": "active"}


def _msg(sid: str, seq: int, text: str, mid: str) -> Message:
    return Message(sid, seq, "user", text, 2, message_id=mid, created_at=1.7e9 + seq)


def test_a_schema_6_sqlite_archive_is_upgraded_in_place(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    store = Archive(path)
    store.write(_row("a"), [_msg("a", 1, "zebra crossing", "x" * 32),
                            _msg("a", 2, "quiet night", "y" * 32)])
    store.forget("a", [])
    store.close()
    _as_schema_6(path)
    assert _keyed_sqlite(path, "messages") == ["message_id"]
    store = Archive(path)
    try:  # the same id in another session: refused by schema 6, stored now
        assert store.write(_row("b"), [_msg("b", 1, "zebra again", "x" * 32)]) == 1
        assert [m.content for m in store.messages("a")] == ["zebra crossing", "quiet night"]
        hits = {(h.session_id, h.seq) for h in store.search("zebra")}
        assert hits == {("a", 1), ("b", 1)}  # the full-text index still points at its rows
    finally:
        store.close()
    assert _keyed_sqlite(path, "messages") == ["session_id", "message_id"]
    assert _keyed_sqlite(path, "tombstones") == ["session_id", "message_id"]
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 9


def _pg_key(conn: psycopg.Connection[Any], table: str) -> list[str]:
    rows = conn.execute(
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid"
        " AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary"
        " ORDER BY array_position(i.indkey, a.attnum)", (table,)).fetchall()
    return [str(r[0]) for r in rows]


@pytest.fixture
def pg6(pg_url: str) -> Iterator[str]:
    """A PostgreSQL archive as schema 6 left it, holding one session's two messages."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for version in range(1, 7):
            conn.execute(archive_pg.MIGRATIONS[version])
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO schema_version VALUES (6)")
        conn.execute("INSERT INTO sessions (session_id, user_id, title) VALUES ('a', 'u', '')")
        for seq, text, mid in ((1, "zebra crossing", "x" * 32), (2, "quiet night", "y" * 32)):
            conn.execute("INSERT INTO messages (message_id, session_id, role, content, seq, fts)"
                         " VALUES (%s, 'a', 'user', %s, %s, %s::tsvector)",
                         (mid, text, seq, fts_vector(text)))
        assert _pg_key(conn, "messages") == ["message_id"]
    yield pg_url


def test_a_schema_6_postgres_archive_is_upgraded_in_place(pg6: str) -> None:
    store = PostgresArchive(pg6, pool_size=2)
    try:
        assert store.write(_row("b"), [_msg("b", 1, "zebra again", "x" * 32)]) == 1
        assert [m.content for m in store.messages("a")] == ["zebra crossing", "quiet night"]
        assert {(h.session_id, h.seq) for h in store.search("zebra")} == {("a", 1), ("b", 1)}
        gone = store.messages("b")[0]
        store.forget("b", [Forgotten(gone.message_id, gone.seq, gone.token_count)])
    finally:
        store.close()
    with psycopg.connect(pg6) as conn:
        assert archive_pg.schema_version(conn) == archive_pg.SCHEMA_VERSION >= 9
        assert _pg_key(conn, "messages") == ["session_id", "message_id"]
        assert _pg_key(conn, "tombstones") == ["session_id", "message_id"]
    store = PostgresArchive(pg6, pool_size=2)
    try:
        assert [m.content for m in store.messages("a")] == ["zebra crossing", "quiet night"]
        assert store.messages("b") == []
    finally:
        store.close()
