"""What the SQLite and PostgreSQL archives run alike: each shared statement and its row
handling, written once.

``SQLArchive`` holds the reads, the session-row writes and the memory and API-key
bookkeeping of ``archive.ArchiveStore``; ``archive.Archive`` and ``archive_pg.PostgresArchive``
add their connection handling, schema, search index and the writes that touch the index
(``write``, ``forget``, ``purge``, ``search``, ``recall``). Shared statements are in SQLite's
dialect: ``?`` placeholders, and ``IN ({})`` for a list of values passed after every other
argument; PostgreSQL runs them as ``%s`` and ``= ANY(%s)`` (``archive_pg.postgres_sql``).
"""

from __future__ import annotations

import json
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from hermes_redis.core.embeddings import fuse
from hermes_redis.core.models import Memory, Message, new_message_id, parse_ts
from hermes_redis.core.text import recall_index_key, recall_index_terms, recall_terms

# Every column of ``messages`` but PostgreSQL's ``fts`` (which only search reads): what
# ``_message`` decodes.
MESSAGE_COLUMNS = ("message_id, session_id, role, content, token_count, tool_calls, file_refs,"
                   " memory_refs, created_at, seq, item")
_SELECT_MESSAGES = f"SELECT {MESSAGE_COLUMNS} FROM messages"
# Every column of ``memories`` but its vector (issue 31): what ``_memory`` decodes.
_SELECT_MEMORIES = ("SELECT memory_id, user_id, session_id, content, token_count, created_at,"
                    " seq, kind, topic, superseded_by FROM memories")

# The flush's session row: a deleted session stays deleted, the newer summary wins, and
# updated_at and the seqs only grow. ``{greatest}``: the dialect's two-argument maximum.
_UPSERT_SESSION = (
    "INSERT INTO sessions (session_id, user_id, title, created_at, updated_at, status,"
    " summary, summary_seq, last_seq, cleared_seq, parent_session_id, forked_at_seq)"
    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"
    " ON CONFLICT (session_id) DO UPDATE SET user_id=excluded.user_id,"
    " title=excluded.title, updated_at={greatest}(sessions.updated_at, excluded.updated_at),"
    " status=CASE WHEN sessions.status='deleted' THEN 'deleted' ELSE excluded.status END,"
    " summary=CASE WHEN excluded.summary_seq >= sessions.summary_seq"
    "   THEN excluded.summary ELSE sessions.summary END,"
    " summary_seq={greatest}(sessions.summary_seq, excluded.summary_seq),"
    " last_seq={greatest}(sessions.last_seq, excluded.last_seq),"
    " cleared_seq={greatest}(sessions.cleared_seq, excluded.cleared_seq),"
    # the lineage is set once, at creation: a later row without it never erases it
    " parent_session_id=coalesce(sessions.parent_session_id, excluded.parent_session_id),"
    " forked_at_seq=coalesce(sessions.forked_at_seq, excluded.forked_at_seq)"
)


class Cursor(Protocol):
    """A shared statement's result inside a transaction; its rows are read by column name."""

    @property
    def rowcount(self) -> int: ...
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...


Conn = TypeVar("Conn")  # the dialect's connection, as its ``_tx`` yields it


class SQLArchive(ABC, Generic[Conn]):
    """The ``ArchiveStore`` methods whose SQL both dialects share. A dialect supplies the
    seam: ``_read``, ``_tx`` and ``_run``, plus ``GREATEST`` and ``NO_LIMIT``."""

    GREATEST: ClassVar[str]  # the SQL function giving the larger of two values
    NO_LIMIT: ClassVar[int | None]  # the LIMIT argument that means no limit

    # --- the dialect seam ------------------------------------------------------------------
    @abstractmethod
    def _read(self, sql: str, args: Sequence[Any] = (),
              values: Sequence[Any] | None = None) -> list[dict[str, Any]]:
        """Rows of a shared statement as dicts, outside any write transaction; with
        ``values``, each ``IN ({})`` takes them (after ``args``)."""

    @abstractmethod
    def _tx(self, sid: str | None = None) -> AbstractContextManager[Conn]:
        """One write transaction, committed whole or not at all; with ``sid``, ordered
        against every other write of that session."""

    @abstractmethod
    def _run(self, conn: Conn, sql: str, args: Sequence[Any] = ()) -> Cursor:
        """A shared statement in ``conn``'s transaction."""

    # --- session rows ----------------------------------------------------------------------
    def _upsert_session(self, conn: Conn, s: dict[str, Any]) -> None:
        self._run(conn, _UPSERT_SESSION.format(greatest=self.GREATEST), (
            s["session_id"], s["user_id"], s["title"], _ts(s["created_at"]),
            _ts(s["updated_at"]), s["status"], s.get("summary", ""), s.get("summary_seq", 0),
            s.get("last_seq", 0), s.get("cleared_seq", 0), s.get("parent_session_id"),
            s.get("forked_at_seq")))

    def _recount(self, conn: Conn, sid: str) -> None:
        self._run(conn, "UPDATE sessions SET (message_count, total_tokens) = (SELECT count(*),"
                        " coalesce(sum(token_count), 0) FROM messages WHERE session_id = ?)"
                        " WHERE session_id = ?", (sid, sid))

    def set_summary(self, sid: str, summary: str, summary_seq: int, force: bool = False) -> None:
        """Store a summary unless a newer one is there (``force``: clear may move it back)."""
        cond = "" if force else " AND summary_seq <= ?"
        args: tuple[Any, ...] = (summary, summary_seq, sid) + (() if force else (summary_seq,))
        with self._tx() as conn:
            self._run(conn, f"UPDATE sessions SET summary=?, summary_seq=? WHERE session_id=?{cond}",
                      args)

    def set_status(self, sid: str, status: str) -> None:
        with self._tx() as conn:
            self._run(conn, "UPDATE sessions SET status=?, updated_at=? WHERE session_id=?",
                      (status, _ts(time.time()), sid))

    def reclaim(self, sid: str) -> bool:
        """Remove the row of a deleted session that holds no messages (purged), so its id can
        start a new session; False when there is no such row. Its tombstones stay: a flush
        of the old session still in flight must not bring a message back."""
        with self._tx(sid) as conn:
            cur = self._run(conn, "DELETE FROM sessions WHERE session_id=? AND status='deleted'"
                                  " AND NOT EXISTS (SELECT 1 FROM messages WHERE session_id=?)",
                            (sid, sid))
            return cur.rowcount == 1

    # --- memories --------------------------------------------------------------------------
    def remember(self, user_id: str, content: str, token_count: int, session_id: str | None,
                 seq: int | None = None, kind: str = "explicit", topic: str | None = None,
                 supersedes: Sequence[str] = ()) -> str | None:
        """Store a memory (said at ``session_id``/``seq``, if given) and mark ``supersedes``
        replaced by it, in one transaction. An extracted memory is stored only while its
        message is archived and not forgotten (None otherwise): holding the session's write
        lock, a racing forget either runs after this and removes it, or first, and this finds
        the message gone."""
        memory_id = "mem_" + new_message_id()
        with self._tx(session_id if seq is not None else None) as conn:
            if kind == "extracted" and self._run(
                    conn, "SELECT 1 FROM messages WHERE session_id=? AND seq=?", (session_id, seq)
            ).fetchone() is None:
                return None
            self._run(conn, "INSERT INTO memories (memory_id, user_id, session_id, content,"
                            " token_count, created_at, seq, kind, topic) VALUES (?,?,?,?,?,?,?,?,?)",
                      (memory_id, user_id, session_id, content, token_count, _ts(time.time()),
                       seq, kind, topic))
            if session_id is not None and seq is not None:
                self._cite(conn, memory_id, session_id, seq)
            for old in supersedes:
                self._run(conn, "UPDATE memories SET superseded_by=? WHERE memory_id=?"
                                " AND user_id=? AND superseded_by IS NULL", (memory_id, old, user_id))
        return memory_id

    def add_source(self, memory_id: str, session_id: str, seq: int,
                   message_id: str | None = None) -> None:
        """One more message that says ``memory_id`` (forgetting it alone keeps the memory).
        ``message_id``: the message's, when it may not be archived yet (see ``_cite``)."""
        with self._tx(session_id) as conn:
            if self._run(conn, "SELECT 1 FROM memories WHERE memory_id=?", (memory_id,)).fetchone():
                self._cite(conn, memory_id, session_id, seq, message_id)

    def _cite(self, conn: Conn, memory_id: str, sid: str, seq: int,
              message_id: str | None = None) -> None:
        """Record the message as a source of the memory; an archived message cites it in
        ``memory_refs``. With ``message_id``, only that message: a hot message's seq may
        still be an archived one's (Redis went back in time; the flush moves it, and its
        sources with it: ``move_sources``)."""
        self._run(conn, "INSERT INTO memory_sources VALUES (?,?,?) ON CONFLICT DO NOTHING",
                  (memory_id, sid, seq))
        row = self._run(conn, "SELECT message_id, memory_refs FROM messages WHERE session_id=?"
                              " AND seq=?", (sid, seq)).fetchone()
        if row is not None and message_id not in (None, row["message_id"]):
            return
        if row is not None and memory_id not in _refs(row["memory_refs"]):
            self._run(conn, "UPDATE messages SET memory_refs=? WHERE session_id=? AND message_id=?",
                      (_json_list([*_refs(row["memory_refs"]), memory_id]), sid,
                       row["message_id"]))

    def move_sources(self, sid: str, moves: Sequence[tuple[int, int, Sequence[str]]]) -> None:
        """Hot messages renumbered from an ``old`` to a ``new`` seq, with the memories they
        cite (a reseat): what they are the source of follows them. A source at the old seq
        stays while the archived message there cites the memory too (it said the same)."""
        with self._tx(sid) as conn:
            for old, new, refs in moves:
                row = self._run(conn, "SELECT memory_refs FROM messages WHERE session_id=?"
                                      " AND seq=?", (sid, old)).fetchone()
                kept = _refs(row["memory_refs"]) if row is not None else []
                for memory_id in refs:
                    key = (memory_id, sid, old)
                    if self._run(conn, "SELECT 1 FROM memory_sources WHERE memory_id=? AND"
                                       " session_id=? AND seq=?", key).fetchone() is None:
                        continue
                    self._run(conn, "INSERT INTO memory_sources VALUES (?,?,?)"
                                    " ON CONFLICT DO NOTHING", (memory_id, sid, new))
                    if memory_id not in kept:
                        self._run(conn, "DELETE FROM memory_sources WHERE memory_id=? AND"
                                        " session_id=? AND seq=?", key)

    def forget_memory(self, memory_id: str) -> bool:
        """Delete one persistent memory (what it superseded is current again); False when
        there was none with that id."""
        with self._tx() as conn:
            gone = self._run(conn, "DELETE FROM memories WHERE memory_id=?", (memory_id,)).rowcount
            self._run(conn, "DELETE FROM memory_sources WHERE memory_id=?", (memory_id,))
            self._run(conn, "UPDATE memories SET superseded_by=NULL WHERE superseded_by=?",
                      (memory_id,))
            return gone == 1

    def drop_oldest_extracted(self, user_id: str, keep: int) -> int:
        """Delete the user's oldest current extracted memories beyond ``keep``; how many went."""
        with self._tx() as conn:
            rows = self._run(
                conn, "SELECT memory_id FROM memories WHERE user_id=? AND kind='extracted' AND"
                      " superseded_by IS NULL ORDER BY created_at DESC, memory_id DESC"
                      " LIMIT ? OFFSET ?", (user_id, self.NO_LIMIT, keep)).fetchall()
            for row in rows:
                self._run(conn, "DELETE FROM memories WHERE memory_id=?", (row["memory_id"],))
                self._run(conn, "DELETE FROM memory_sources WHERE memory_id=?",
                          (row["memory_id"],))
            return len(rows)

    def memory(self, memory_id: str) -> Memory | None:
        rows = self._read(_SELECT_MEMORIES + " WHERE memory_id=?", (memory_id,))
        return _memory(rows[0]) if rows else None

    def memories(self, user_id: str, superseded: bool = False) -> list[Memory]:
        """The user's current memories, oldest first (``superseded``: their history too)."""
        cond = "" if superseded else " AND superseded_by IS NULL"
        return [_memory(r) for r in self._read(
            f"{_SELECT_MEMORIES} WHERE user_id=?{cond} ORDER BY created_at, memory_id",
            (user_id,))]

    # --- API keys (hermes_redis.store.api_keys): only a hash of each key is stored -------------------
    def add_api_key(self, key_id: str, user_id: str | None, key_hash: str) -> None:
        with self._tx() as conn:
            self._run(conn, "INSERT INTO api_keys (key_id, user_id, key_hash, created_at)"
                            " VALUES (?,?,?,?)", (key_id, user_id, key_hash, _ts(time.time())))

    def api_keys(self) -> list[dict[str, Any]]:
        return self._read("SELECT key_id, user_id, created_at, revoked_at FROM api_keys"
                          " ORDER BY created_at, key_id")

    def api_key_by_hash(self, key_hash: str) -> dict[str, Any] | None:
        rows = self._read("SELECT key_id, user_id, created_at, revoked_at FROM api_keys"
                          " WHERE key_hash=?", (key_hash,))
        return rows[0] if rows else None

    def active_api_keys(self) -> int:
        return int(self._read("SELECT count(*) AS n FROM api_keys WHERE revoked_at IS NULL")[0]["n"])

    def revoke_api_key(self, key_id: str) -> bool:
        """Mark the key revoked; False when no unrevoked key has that id."""
        with self._tx() as conn:
            cur = self._run(conn, "UPDATE api_keys SET revoked_at=? WHERE key_id=?"
                                  " AND revoked_at IS NULL", (_ts(time.time()), key_id))
            return cur.rowcount == 1

    # --- sessions --------------------------------------------------------------------------
    def knows_user(self, user_id: str) -> bool:
        """The user has a session (of any status) or an unrevoked API key."""
        return bool(self._read(
            "SELECT EXISTS (SELECT 1 FROM sessions WHERE user_id=?) OR EXISTS (SELECT 1 FROM"
            " api_keys WHERE user_id=? AND revoked_at IS NULL) AS known", (user_id, user_id)
        )[0]["known"])

    def session(self, sid: str) -> dict[str, Any] | None:
        rows = self._read("SELECT * FROM sessions WHERE session_id=?", (sid,))
        return rows[0] if rows else None

    def sessions_page(self, user_id: str | None, status: str | None, limit: int,
                      after: tuple[str, str] | None = None) -> list[dict[str, Any]]:
        """Up to ``limit`` sessions (negative: all), newest archived activity first, strictly
        after the (updated_at, session_id) ``after``: an index range, whatever the table's size."""
        sql, args = "SELECT * FROM sessions WHERE 1=1", []
        if user_id is not None:
            sql += " AND user_id=?"
            args.append(user_id)
        if status is not None:
            sql += " AND status=?"
            args.append(status)
        if after is not None:
            sql += " AND (updated_at, session_id) < (?, ?)"
            args += [after[0], after[1]]
        return self._read(sql + " ORDER BY updated_at DESC, session_id DESC LIMIT ?",
                          [*args, limit if limit >= 0 else self.NO_LIMIT])

    def session_ids_like(self, prefix: str, limit: int = 6,
                         user_id: str | None = None) -> list[str]:
        """Up to ``limit`` session ids starting with ``prefix`` (an index range lookup: ids
        are ASCII below DEL, compared byte-wise, so ``prefix + DEL`` bounds the range); only
        ``user_id``'s when given (issue 34)."""
        mine, args = _of_user(user_id)
        rows = self._read("SELECT session_id FROM sessions WHERE session_id >= ? AND session_id < ?"
                          + mine + " ORDER BY session_id LIMIT ?",
                          (prefix, prefix + "\x7f", *args, limit))
        return [r["session_id"] for r in rows]

    def count_ids_like(self, prefix: str, user_id: str | None = None) -> int:
        mine, args = _of_user(user_id)  # issue 34
        return int(self._read("SELECT count(*) AS n FROM sessions WHERE session_id >= ? AND"
                              " session_id < ?" + mine, (prefix, prefix + "\x7f", *args))[0]["n"])

    def neighbours(self, sids: Sequence[str]) -> set[str]:
        """The ids sorted next to each of ``sids``: enough to find their shortest unique prefixes."""
        out: set[str] = set()
        for sid in sids:
            for sql in ("SELECT session_id FROM sessions WHERE session_id < ? ORDER BY session_id"
                        " DESC LIMIT 1", "SELECT session_id FROM sessions WHERE session_id > ?"
                        " ORDER BY session_id LIMIT 1"):
                out.update(r["session_id"] for r in self._read(sql, (sid,)))
        return out

    # --- messages --------------------------------------------------------------------------
    def messages(self, sid: str, after_seq: int = 0, upto_seq: int | None = None) -> list[Message]:
        sql = _SELECT_MESSAGES + " WHERE session_id=? AND seq>?"
        args: list[Any] = [sid, after_seq]
        if upto_seq is not None:
            sql += " AND seq<=?"
            args.append(upto_seq)
        return [_message(r) for r in self._read(sql + " ORDER BY seq", args)]

    def first(self, sid: str, after_seq: int, limit: int) -> list[Message]:
        rows = self._read(_SELECT_MESSAGES + " WHERE session_id=? AND seq>? ORDER BY seq LIMIT ?",
                          (sid, after_seq, limit))
        return [_message(r) for r in rows]

    def before(self, sid: str, before_seq: int, after_seq: int, limit: int) -> Iterator[Message]:
        """Up to ``limit`` messages with after_seq < seq < before_seq, newest first; read at
        once, each decoded only when the caller reaches it."""
        rows = self._read(_SELECT_MESSAGES + " WHERE session_id=? AND seq<? AND seq>?"
                          " ORDER BY seq DESC LIMIT ?", (sid, before_seq, after_seq, limit))
        return map(_message, rows)

    def newest(self, sid: str, after_seq: int, limit: int) -> list[Message]:
        rows = self._read(_SELECT_MESSAGES + " WHERE session_id=? AND seq>? ORDER BY seq DESC"
                          " LIMIT ?", (sid, after_seq, limit))
        return [_message(r) for r in reversed(rows)]

    def stats(self, sid: str) -> tuple[int, int, int]:
        """(archived messages, their tokens, highest archived seq)."""
        row = self._read("SELECT count(*) AS n, coalesce(sum(token_count),0) AS t,"
                         " coalesce(max(seq),0) AS m FROM messages WHERE session_id=?", (sid,))[0]
        return int(row["n"]), int(row["t"]), int(row["m"])

    def turn_starts(self, sid: str, upto_seq: int, within: int) -> tuple[int, int]:
        """Archived messages with seq <= ``within`` that start a turn (a user message, or the
        first message), and how many of those have seq <= ``upto_seq``."""
        row = self._read(
            "SELECT count(*) AS n, coalesce(sum(CASE WHEN seq <= ? THEN 1 ELSE 0 END), 0) AS upto"
            " FROM messages WHERE session_id=? AND seq <= ? AND (role='user' OR seq ="
            " (SELECT min(seq) FROM messages WHERE session_id=?))",
            (upto_seq, sid, within, sid))[0]
        return int(row["n"]), int(row["upto"])

    def reseat_needed(self, sid: str, messages: Sequence[Message]) -> tuple[int, int]:
        """Where ``messages`` would reuse seqs the archive already gave out (Redis went back
        in time: an older snapshot, a lagging replica): (the first such seq, the archive's
        highest seq). (0, 0) when none would. Archived and forgotten messages never count."""
        if not messages:
            return 0, 0
        # Only archived rows: a flush archives every message appended before the newest it
        # archives, so an unarchived one below them can only come from a Redis that forgot.
        # (Tombstones do not count: a forget may tombstone turns not archived yet.)
        high = int(self._read("SELECT coalesce(max(seq), 0) AS hw FROM messages"
                              " WHERE session_id=?", (sid,))[0]["hw"])
        if messages[0].seq > high:
            return 0, 0
        ids = [m.message_id for m in messages if m.seq <= high]
        found, gone = self.by_ids(sid, ids)  # this session's only (issue 35)
        known = set(found) | gone
        first = next((m.seq for m in messages if m.seq <= high and m.message_id not in known), 0)
        return (first, high) if first else (0, 0)

    def high_seqs(self, sids: Sequence[str]) -> dict[str, int]:
        """The highest archived seq of each of ``sids`` that has archived messages."""
        rows = self._read("SELECT session_id, max(seq) AS m FROM messages WHERE session_id IN ({})"
                          " GROUP BY session_id", values=list(sids))
        return {r["session_id"]: int(r["m"]) for r in rows}

    def tombstoned(self, sid: str) -> dict[str, int]:
        """The session's forgotten messages (message_id -> seq): never to be summarized."""
        rows = self._read("SELECT message_id, seq FROM tombstones WHERE session_id=?", (sid,))
        return {r["message_id"]: int(r["seq"] or 0) for r in rows}

    def by_ids(self, sid: str, message_ids: Sequence[str]) -> tuple[dict[str, Message], set[str]]:
        """The session's archived messages with these ids (by id), and those of the ids its
        tombstones hold (forgotten). Another session's rows never count: an id names a message
        within its session."""
        if not message_ids:
            return {}, set()
        found = {r["message_id"]: _message(r) for r in self._read(
            _SELECT_MESSAGES + " WHERE session_id=? AND message_id IN ({})", [sid],
            values=list(message_ids))}
        gone = {r["message_id"] for r in self._read(
            "SELECT message_id FROM tombstones WHERE session_id=? AND message_id IN ({})", [sid],
            values=list(message_ids))}
        return found, gone

    # --- vectors (issue 31): each stored with its model's key, compared only with its own ----
    def put_vectors(self, sid: str, model: str, rows: Sequence[tuple[int, bytes]]) -> int:
        """Store the vectors of archived messages (a message forgotten meanwhile gets none:
        its row is gone); returns how many were stored. One below the session's newest
        vector bumps ``vector_version``, so readers holding the session's vectors reload."""
        if not rows:
            return 0
        with self._tx(sid) as conn:
            top = self._run(conn, "SELECT max(seq) AS m FROM message_vectors WHERE session_id=?",
                            (sid,)).fetchone()
            stored = 0
            for seq, vec in rows:
                stored += self._run(
                    conn, "INSERT INTO message_vectors (session_id, seq, model, vec) SELECT ?,?,?,?"
                          " WHERE EXISTS (SELECT 1 FROM messages WHERE session_id=? AND seq=?)"
                          " ON CONFLICT (session_id, seq) DO UPDATE SET model=excluded.model,"
                          " vec=excluded.vec", (sid, seq, model, vec, sid, seq)).rowcount
            if top is not None and top["m"] is not None and min(q for q, _ in rows) <= top["m"]:
                self._bump_vectors(conn, sid)
        return stored

    def _bump_vectors(self, conn: Conn, sid: str) -> None:
        self._run(conn, "UPDATE sessions SET vector_version = coalesce(vector_version, 0) + 1"
                        " WHERE session_id=?", (sid,))

    def unembedded(self, sid: str, model: str, newest: int) -> list[tuple[int, str]]:
        """(seq, content) of the session's newest ``newest`` archived messages that have no
        vector of ``model``, in seq order (the window bounds a flush's cost)."""
        return [(int(r["seq"]), r["content"]) for r in self._read(
            "SELECT m.seq, m.content FROM (SELECT seq, content FROM messages WHERE session_id=?"
            " ORDER BY seq DESC LIMIT ?) AS m WHERE NOT EXISTS (SELECT 1 FROM message_vectors v"
            " WHERE v.session_id=? AND v.seq=m.seq AND v.model=?) ORDER BY m.seq",
            (sid, newest, sid, model))]

    def vectors(self, sid: str, model: str, after_seq: int = 0) -> list[tuple[int, bytes]]:
        """(seq, stored vector) of the session's messages above ``after_seq`` that have a
        vector of ``model``, in seq order."""
        return [(int(r["seq"]), bytes(r["vec"])) for r in self._read(
            "SELECT seq, vec FROM message_vectors WHERE session_id=? AND seq>? AND model=?"
            " ORDER BY seq", (sid, after_seq, model))]

    def vector_version(self, sid: str) -> int:
        """Grows whenever a vector is removed or one is stored below the newest."""
        rows = self._read("SELECT vector_version FROM sessions WHERE session_id=?", (sid,))
        return int(rows[0]["vector_version"] or 0) if rows else 0

    def put_memory_vectors(self, model: str, rows: Sequence[tuple[str, bytes]]) -> None:
        with self._tx() as conn:
            for memory_id, vec in rows:
                self._run(conn, "UPDATE memories SET vec=?, vec_model=? WHERE memory_id=?",
                          (vec, model, memory_id))

    def memory_vectors(self, user_id: str, model: str) -> dict[str, bytes]:
        """The stored vectors of the user's current memories made by ``model``."""
        return {r["memory_id"]: bytes(r["vec"]) for r in self._read(
            "SELECT memory_id, vec FROM memories WHERE user_id=? AND superseded_by IS NULL"
            " AND vec_model=?", (user_id, model))}

    def unembedded_memories(self, user_id: str, model: str, limit: int) -> list[tuple[str, str]]:
        """(memory_id, content) of the user's current memories with no vector of ``model``."""
        return [(r["memory_id"], r["content"]) for r in self._read(
            "SELECT memory_id, content FROM memories WHERE user_id=? AND superseded_by IS NULL"
            " AND (vec_model IS NULL OR vec_model != ?) ORDER BY created_at DESC LIMIT ?",
            (user_id, model, limit))]

    # --- recall (issue 31: scoped to the session by its own index) ---------------------------
    def _recall(self, sid: str, query: str, after_seq: int, before_seq: int, limit: int,
                within: tuple[float, float] | None, most: int,
                near: Sequence[int] = (), near_weight: float = 1.0) -> Iterator[Message]:
        """The session's messages in after_seq < seq < before_seq that share words with
        ``query``, best BM25 first (ties: earliest first), fused by reciprocal rank with
        ``near`` (the seqs nearest by meaning, best first) when given, each followed by its
        reply."""
        top = self._bm25(sid, query, after_seq, before_seq, limit, within, most)
        top = fuse([top, near], limit, (1.0, near_weight)) if near else top
        if not top:
            return iter(())
        hits = {r["seq"]: r for r in self._read(
            _SELECT_MESSAGES + " WHERE session_id=? AND seq IN ({})", [sid], values=top)}
        return self._with_replies(sid, [hits[s] for s in top if s in hits], before_seq)

    def _bm25(self, sid: str, query: str, after_seq: int, before_seq: int, limit: int,
              within: tuple[float, float] | None, most: int) -> list[int]:
        """The seqs in after_seq < seq < before_seq that share words with ``query``, best
        BM25 first (ties: earliest first).

        Reads only this session's rows of ``recall_index`` (keyed session, term, seq): at
        most ``most`` + 1 postings a query term, so the cost never depends on other
        sessions, and a term in more than ``most`` of the session's messages is left out
        (the rarest stays when all are that common). IDF and mean length are the
        session's own."""
        parts: list[tuple[str, list[Any]]] = []  # each term's postings: (SQL, arguments)
        for term in recall_terms(query):
            word, prefix = recall_index_key(term)
            if not word:
                continue
            cond, words = (("term >= ? AND term < ?", [word, word + "\U0010ffff"]) if prefix
                           else ("term = ?", [word]))
            sql = f"FROM recall_index WHERE session_id=? AND {cond} AND seq>? AND seq<?"
            args: list[Any] = [sid, *words, after_seq, before_seq]
            if within is not None:
                sql += (" AND seq IN (SELECT seq FROM messages WHERE session_id=? AND"
                        " created_at>=? AND created_at<?)")
                args += [sid, _ts(within[0]), _ts(within[1])]
            parts.append((sql, args))
        if not parts:
            return []
        # how many postings each term has here (counted up to most + 1, in one statement)
        counts = self._read("SELECT " + ", ".join(
            f"(SELECT count(*) FROM (SELECT 1 {sql} LIMIT ?) AS c{i}) AS n{i}"
            for i, (sql, _) in enumerate(parts)), [a for _, args in parts for a in [*args, most + 1]]
        )[0]
        found = [(int(counts[f"n{i}"]), part) for i, part in enumerate(parts)]
        found = [f for f in found if f[0]]
        kept = [f for f in found if f[0] <= most] or sorted(found, key=lambda f: f[0])[:1]
        if not kept:
            return []
        total = max(self._session_size(sid), *(n for n, _ in kept))
        # Okapi BM25 (k1 1.2, b 0.75) summed over the terms, IDF from the session's counts
        union = " UNION ALL ".join(
            f"SELECT * FROM (SELECT seq, tf, dl, CAST(? AS DOUBLE PRECISION) AS w {sql}"
            f" LIMIT ?) AS t{i}" for i, (_, (sql, _)) in enumerate(kept))
        scoring = [a for n, (_, part_args) in kept
                   for a in [math.log(1 + (total - n + 0.5) / (n + 0.5)), *part_args, most + 1]]
        # the mean length as a window over p, read once: a joined avg() subquery was run again
        # for every posting on PostgreSQL (a nested loop: 257² rows for 257 postings)
        rows = self._read(
            f"WITH p AS ({union}), q AS (SELECT seq, tf, dl, w, avg(dl) OVER () AS a FROM p)"
            " SELECT seq, sum(w * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * dl / a))) AS score"
            " FROM q GROUP BY seq ORDER BY score DESC, seq LIMIT ?", [*scoring, limit])
        return [int(r["seq"]) for r in rows]

    def _session_size(self, sid: str) -> int:
        rows = self._read("SELECT message_count FROM sessions WHERE session_id=?", (sid,))
        return int(rows[0]["message_count"] or 0) if rows else 0

    # --- recall (the dialect finds the hits) -----------------------------------------------
    def _with_replies(self, sid: str, hits: list[dict[str, Any]],
                      before_seq: int) -> Iterator[Message]:
        """Each recall hit then the message after it below ``before_seq`` (the reply that
        usually holds the answer), each message once; read now, decoded as the caller
        reaches it."""
        wanted = sorted({r["seq"] + 1 for r in hits if r["seq"] + 1 < before_seq})
        found = self._read(_SELECT_MESSAGES + " WHERE session_id=? AND seq IN ({})", [sid],
                           values=wanted) if wanted else []
        return _each_with_reply(hits, {r["seq"]: r for r in found})


def recall_index_rows(sid: str, rows: Iterable[tuple[int, str]]) -> list[tuple[str, str, int, int, int]]:
    """``recall_index`` rows (session_id, term, seq, tf, dl) of the session's (seq, text)."""
    out = []
    for seq, text in rows:
        counts, length = recall_index_terms(text)
        out += [(sid, term, seq, tf, length) for term, tf in counts.items()]
    return out


def _each_with_reply(rows: list[dict[str, Any]],
                     replies: dict[int, dict[str, Any]]) -> Iterator[Message]:
    seen: set[int] = set()
    for row in rows:
        for r in (row, replies.get(row["seq"] + 1)):
            if r is not None and r["seq"] not in seen:
                seen.add(r["seq"])
                yield _message(r)


def _json_list(items: Sequence[str]) -> str:
    return json.dumps(list(items)) if items else "[]"


def _ts(value: float | str) -> str:
    """Timestamps as ISO text (what CURRENT_TIMESTAMP writes), with microseconds."""
    if isinstance(value, str):
        value = float(value)
    seconds, micros = divmod(round(value * 1_000_000), 1_000_000)
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds)) + f".{micros:06d}"


def _message(row: dict[str, Any]) -> Message:
    return Message(
        session_id=row["session_id"],
        seq=row["seq"],
        role=row["role"],
        content=row["content"],
        token_count=row["token_count"] or 0,
        message_id=row["message_id"],
        tool_calls=row["tool_calls"] or "",
        file_refs=_refs(row["file_refs"]),
        memory_refs=_refs(row["memory_refs"]),
        created_at=parse_ts(row["created_at"]),
        item_json=row.get("item") or "",
    )


def _memory(row: dict[str, Any]) -> Memory:
    return Memory(memory_id=row["memory_id"], user_id=row["user_id"], content=row["content"],
                  created_at=parse_ts(row["created_at"]), session_id=row["session_id"],
                  seq=row["seq"], kind=row["kind"] or "explicit", topic=row["topic"],
                  superseded_by=row["superseded_by"], token_count=row["token_count"] or 0)


def _refs(text: str | None) -> tuple[str, ...]:
    return () if not text or text == "[]" else tuple(json.loads(text))


def _of_user(user_id: str | None) -> tuple[str, tuple[str, ...]]:
    """The clause (and its argument) that keeps only ``user_id``'s sessions (issue 34)."""
    return ("", ()) if user_id is None else (" AND user_id = ?", (user_id,))
