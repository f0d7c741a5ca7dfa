"""The cold tier in one SQLite file: the durable record of every session.

The ``sessions`` and ``messages`` tables keep the Hermes schema (tools written for it
keep working) plus a ``seq`` column, tombstones, persistent memories and FTS5 search.
WAL mode and a busy timeout let workers, the CLI and agents use one file at once.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hermes_redis.core.errors import BackendUnavailableError
from hermes_redis.core.models import Message, SearchHit
from hermes_redis.core.text import (
    expanded_match,
    fts_query,
    fts_terms,
    fts_text,
    ranked_hits,
    recall_index_terms,
)
from hermes_redis.store.archive.base import (
    ADDED_COLUMNS,
    KNOWN_TERMS_HELD,
    RECALL_MAX_POSTINGS,
    SCHEMA,
    SCHEMA_VERSION,
    SEARCH_MAX_EXPANSION,
    SEARCH_MAX_MATCHES,
    Forgotten,
)
from hermes_redis.store.archive.sql import SQLArchive, _json_list, _ts, recall_index_rows


class Archive(SQLArchive[sqlite3.Connection]):
    """The embedded cold tier: one SQLite file, FTS5 search; the shared statements are
    ``archive_sql.SQLArchive``'s."""

    GREATEST = "max"
    NO_LIMIT = -1

    def __init__(self, path: Path, busy_timeout: float = 10.0) -> None:
        self.path = path
        self.busy_timeout = busy_timeout  # how long a write waits for another writer's lock
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = 0
        self._inode = 0
        self._known_terms: set[str] = set()  # in this file's fts_terms (_remember_terms)

    # --- connection ------------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        if self._conn is not None and self._pid == os.getpid():
            self._check_file()
            return self._conn
        if self._inode and not self.path.exists():  # never start an empty one behind its back
            raise BackendUnavailableError(
                f"archive {self.path} is missing (removed while in use); restore it (the hot "
                "tier keeps unarchived turns), or restart to start an empty archive"
            )
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None,
                                   check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")
            conn.executescript(SCHEMA)
            for table, added in ADDED_COLUMNS.items():
                columns = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
                for name, decl in added.items():
                    if name not in columns:
                        conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {decl}")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                conn.close()
                raise BackendUnavailableError(
                    f"archive {self.path} has schema version {version}, newer than this "
                    f"hermes-redis understands ({SCHEMA_VERSION}); upgrade hermes-redis")
            if version < SCHEMA_VERSION:
                if version < 6:  # the terms indexed before fts_terms existed
                    conn.execute("INSERT OR IGNORE INTO fts_terms SELECT term FROM messages_vocab")
                if version < 7:
                    _scope_ids(conn)
                if version < 9:
                    _index_for_recall(conn)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except sqlite3.Error as err:
            raise self._unavailable(err) from None
        except OSError as err:
            raise BackendUnavailableError(f"cannot open archive {self.path}: {err.strerror}") from None
        self._conn, self._pid = conn, os.getpid()
        self._inode = self.path.stat().st_ino
        self._known_terms = set()
        return conn

    def _check_file(self) -> None:
        """A removed or replaced file would swallow writes silently; refuse instead."""
        try:
            inode = self.path.stat().st_ino
        except FileNotFoundError:
            inode = -1
        if inode != self._inode:
            if self._conn is not None:
                self._conn.close()
            self._conn = None
            raise BackendUnavailableError(
                f"archive {self.path} was removed or replaced while in use; restore it "
                "(the hot tier keeps unarchived turns) and retry"
            )

    def _unavailable(self, err: Exception) -> BackendUnavailableError:
        text = str(err)
        hint = {
            "locked": "another process holds a write lock; retry when it finishes",
            "full": "the disk is full; free space and retry",
            "readonly": "the file is read-only; fix its permissions",
            "unable to open": "check the path and its permissions",
            "malformed": "the file is corrupted; restore it from a backup",
        }
        extra = next((h for k, h in hint.items() if k in text), "check the file and retry")
        return BackendUnavailableError(f"archive {self.path}: {text}; {extra}")

    @contextmanager
    def _tx(self, sid: str | None = None) -> Iterator[sqlite3.Connection]:
        """One write transaction. BEGIN IMMEDIATE takes the file's one write lock, so every
        write is ordered against every other, whatever ``sid``."""
        with self._lock:
            conn = self._connect()
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
            except sqlite3.Error as err:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise self._unavailable(err) from None

    def _read(self, sql: str, args: Sequence[Any] = (),
              values: Sequence[Any] | None = None) -> list[dict[str, Any]]:
        """Rows of ``sql`` as dicts; with ``values``, its ``IN ({})`` takes them after ``args``,
        in chunks under SQLite's limit (``_in``)."""
        with self._lock:
            conn = self._connect()
            try:
                out: list[dict[str, Any]] = []
                for query, params in _chunks(sql, values, args) if values is not None \
                        else [(sql, args)]:
                    cur = conn.execute(query, params)
                    cols = [d[0] for d in cur.description]
                    out += [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]
                return out
            except sqlite3.Error as err:
                raise self._unavailable(err) from None

    def _run(self, conn: sqlite3.Connection, sql: str, args: Sequence[Any] = ()) -> sqlite3.Cursor:
        cur = conn.cursor()
        cur.row_factory = sqlite3.Row  # rows read by column name, as psycopg's dict rows
        return cur.execute(sql, args)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    # --- writes ----------------------------------------------------------------------------
    def write(self, session: dict[str, Any], messages: Sequence[Message],
              full_text: dict[str, str] | None = None) -> int:
        """Upsert the session row and insert messages not yet archived nor tombstoned.

        Idempotent by message_id, one transaction: a crash leaves all or nothing (invariant 3).
        Returns how many messages were new.
        """
        full_text = full_text or {}
        with self._tx() as conn:
            self._upsert_session(conn, session)
            # Batched (executemany), so a flush of thousands costs a few statements: skip what
            # is archived or tombstoned, insert the rest, index exactly the rows that went in.
            # Ids are the session's own (issue 35): another session's rows never shadow these.
            sid = session["session_id"]
            ids = [m.message_id for m in messages]
            known = {r[0] for r in _in(conn, "SELECT message_id FROM messages"
                                             " WHERE session_id=? AND message_id IN ({})", ids, [sid])}
            known |= {r[0] for r in _in(conn, "SELECT message_id FROM tombstones"
                                              " WHERE session_id=? AND message_id IN ({})", ids,
                                        [sid])}
            fresh = [m for m in messages if m.message_id not in known]
            conn.executemany(
                "INSERT OR IGNORE INTO messages (message_id, session_id, role, content,"
                " token_count, tool_calls, file_refs, memory_refs, created_at, seq, item)"
                " SELECT ?,?,?,?,?,?,?,?,?,?,? WHERE NOT EXISTS"
                " (SELECT 1 FROM tombstones WHERE session_id = ? AND message_id = ?)",
                [(m.message_id, sid, m.role, full_text.get(m.message_id, m.content),
                  m.token_count, m.tool_calls or None, _json_list(m.file_refs),
                  _json_list(m.memory_refs), _ts(m.created_at), m.seq, m.item_json or None,
                  sid, m.message_id)
                 for m in fresh],
            )
            added = _in(conn, "SELECT rowid, content, seq FROM messages WHERE session_id=? AND"
                              " message_id IN ({})", [m.message_id for m in fresh], [sid])
            # ascending rowids: FTS5 flushes its pending terms whenever a rowid goes backwards
            conn.executemany("INSERT INTO messages_fts(rowid, body) VALUES (?, ?)",
                             [(rowid, fts_text(content)) for rowid, content, _ in sorted(added)])
            conn.executemany(_INDEX_INSERT, recall_index_rows(  # issue 31
                sid, ((seq, content) for _, content, seq in added)))
            terms = fts_terms(content for _, content, _ in added) - self._known_terms
            conn.executemany("INSERT OR IGNORE INTO fts_terms(term) VALUES (?)",
                             [(t,) for t in terms])
            self._recount(conn, session["session_id"])
        self._remember_terms(terms)
        return len(added)

    def _remember_terms(self, terms: set[str]) -> None:
        """Terms committed to fts_terms, so the next flushes skip their inserts (bounded;
        fts_terms never loses a term, so a term held here is there)."""
        if len(self._known_terms) + len(terms) > KNOWN_TERMS_HELD:
            self._known_terms.clear()
        self._known_terms |= terms

    def forget(self, sid: str, targets: Sequence[Forgotten],
               memories: bool = True) -> list[Forgotten]:
        """Tombstone and delete, and (``memories``) the memories only these messages stated;
        returns the targets that were not forgotten before.

        A flush racing this either commits first (and is deleted here) or finds the
        tombstone and skips the row (invariant 4).
        """
        fresh: list[Forgotten] = []
        with self._tx() as conn:
            for t in targets:
                cur = conn.execute(
                    "INSERT OR IGNORE INTO tombstones (message_id, session_id, seq) VALUES (?,?,?)",
                    (t.message_id, sid, t.seq),
                )
                if cur.rowcount == 1:
                    fresh.append(t)
                row = conn.execute("SELECT rowid, seq, content FROM messages WHERE session_id=?"
                                   " AND message_id=?", (sid, t.message_id)).fetchone()
                if row:
                    conn.executemany("DELETE FROM recall_index WHERE session_id=? AND term=?"
                                     " AND seq=?", [(sid, term, row[1]) for term in
                                                    recall_index_terms(row[2])[0]])
                    conn.execute("DELETE FROM messages_fts WHERE rowid=?", (row[0],))
                    conn.execute("DELETE FROM messages WHERE rowid=?", (row[0],))
                    if conn.execute("DELETE FROM message_vectors WHERE session_id=? AND seq=?",
                                    (sid, row[1])).rowcount:
                        self._bump_vectors(conn, sid)
            self._recount(conn, sid)
            if memories:
                self._forget_derived(conn, sid, [t.seq for t in targets])
        return fresh

    def _forget_derived(self, conn: sqlite3.Connection, sid: str, seqs: Sequence[int] | None) -> None:
        """Drop the memories said only in these messages (``seqs`` None: the whole session);
        what they superseded is current again. Explicit memories are never derived."""
        if seqs is None:
            touched = sorted({r[0] for r in conn.execute(
                "SELECT memory_id FROM memory_sources WHERE session_id=?", (sid,))})
            conn.execute("DELETE FROM memory_sources WHERE session_id=?", (sid,))
        else:
            found: set[str] = set()
            for sql, args in _chunks("SELECT memory_id FROM memory_sources WHERE session_id=?"
                                     " AND seq IN ({})", list(seqs), [sid]):
                found |= {r[0] for r in conn.execute(sql, args)}
            for sql, args in _chunks("DELETE FROM memory_sources WHERE session_id=?"
                                     " AND seq IN ({})", list(seqs), [sid]):
                conn.execute(sql, args)
            touched = sorted(found)
        for mid in touched:
            left = conn.execute("SELECT 1 FROM memory_sources WHERE memory_id=? LIMIT 1",
                                (mid,)).fetchone()
            if left is None and conn.execute("DELETE FROM memories WHERE memory_id=? AND"
                                             " kind != 'explicit'", (mid,)).rowcount:
                conn.execute("UPDATE memories SET superseded_by=NULL WHERE superseded_by=?", (mid,))

    def forget_session_memories(self, sid: str) -> None:
        """Drop the memories said only in this session (it is being deleted)."""
        with self._tx() as conn:
            self._forget_derived(conn, sid, None)

    def purge(self, sid: str) -> None:
        with self._tx() as conn:
            conn.execute("DELETE FROM messages_fts WHERE rowid IN"
                         " (SELECT rowid FROM messages WHERE session_id=?)", (sid,))
            conn.execute("DELETE FROM recall_index WHERE session_id=?", (sid,))
            conn.execute("DELETE FROM message_vectors WHERE session_id=?", (sid,))
            self._bump_vectors(conn, sid)
            conn.execute("INSERT OR IGNORE INTO tombstones (message_id, session_id, seq)"
                         " SELECT message_id, session_id, seq FROM messages WHERE session_id=?",
                         (sid,))
            conn.execute("DELETE FROM messages WHERE session_id=?", (sid,))
            conn.execute("UPDATE sessions SET status='deleted', summary='', message_count=0,"
                         " total_tokens=0 WHERE session_id=?", (sid,))

    # --- search ----------------------------------------------------------------------------
    def recall(self, sid: str, query: str, after_seq: int, before_seq: int,
               limit: int, within: tuple[float, float] | None = None,
               near: Sequence[int] = (), near_weight: float = 1.0) -> Iterator[Message]:
        """The session's messages in after_seq < seq < before_seq that share words with
        ``query``, best BM25 rank first (any word may match; CJK by character pairs), each
        followed by the message after it (the reply that usually holds the answer).
        ``within``: only messages created in that span (Unix seconds, end excluded);
        ``near``: the seqs nearest by meaning, fused with the word ranks at ``near_weight``
        (issue 31).
        Reads this session's postings only (``SQLArchive._recall``, issue 31)."""
        return self._recall(sid, query, after_seq, before_seq, limit, within,
                            RECALL_MAX_POSTINGS, near, near_weight)

    def _terms_with_prefix(self, prefix: str) -> list[str] | None:
        rows = self._read("SELECT term FROM fts_terms WHERE term >= ? AND term < ? LIMIT ?",
                          (prefix, prefix + "\U0010ffff", SEARCH_MAX_EXPANSION + 1))
        return None if len(rows) > SEARCH_MAX_EXPANSION else [r["term"] for r in rows]

    def search(self, query: str, user_id: str | None = None, limit: int = 20) -> list[SearchHit]:
        if not fts_query(query):
            return []
        match = expanded_match(query, self._terms_with_prefix)
        if not match:
            return []
        # FTS5 walks exact terms' matches newest first and stops at SEARCH_MAX_MATCHES
        sql = (
            "SELECT m.session_id, m.seq, m.role, m.content, s.title"
            " FROM messages_fts JOIN messages m ON m.rowid = messages_fts.rowid"
            " JOIN sessions s ON s.session_id = m.session_id"
            " WHERE messages_fts MATCH ? AND s.status != 'deleted'"
        )
        args: list[Any] = [match]
        if user_id is not None:
            sql += " AND s.user_id = ?"
            args.append(user_id)
        sql += " ORDER BY messages_fts.rowid DESC LIMIT ?"
        return ranked_hits(query, self._read(sql, [*args, SEARCH_MAX_MATCHES]), limit)


# Schema 7 (issue 35): the two tables keyed (session_id, message_id). SQLite cannot change a
# primary key in place, so each is rebuilt under that key; messages keep their rowids (the
# full-text index is keyed by them).
_REKEYED = {
    "messages": ("message_id TEXT NOT NULL, session_id TEXT NOT NULL REFERENCES"
                 " sessions(session_id), role TEXT NOT NULL, content TEXT NOT NULL,"
                 " token_count INTEGER, tool_calls JSON, file_refs JSON, memory_refs JSON,"
                 " created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP, seq INTEGER NOT NULL,"
                 " item JSON, PRIMARY KEY (session_id, message_id)",
                 "rowid, message_id, session_id, role, content, token_count, tool_calls,"
                 " file_refs, memory_refs, created_at, seq, item"),
    "tombstones": ("message_id TEXT NOT NULL, session_id TEXT NOT NULL, seq INTEGER,"
                   " forgotten_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,"
                   " PRIMARY KEY (session_id, message_id)",
                   "message_id, session_id, seq, forgotten_at"),
}


def _scope_ids(conn: sqlite3.Connection) -> None:
    """Rebuild ``messages`` and ``tombstones`` keyed (session_id, message_id), in one
    transaction, unless they are already (a new file, or another process did it first).
    The old key was global, so every row fits the new one."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        for table, (columns, copied) in _REKEYED.items():
            keyed = {row[1]: row[5] for row in conn.execute(f"PRAGMA table_info({table})")}
            if keyed.get("session_id"):
                continue
            conn.execute(f"CREATE TABLE {table}_v7 ({columns})")
            conn.execute(f"INSERT INTO {table}_v7 ({copied}) SELECT {copied} FROM {table}")
            conn.execute(f"DROP TABLE {table}")
            conn.execute(f"ALTER TABLE {table}_v7 RENAME TO {table}")
        for statement in SCHEMA.split(";"):  # the indexes the dropped tables took with them
            if statement.strip().startswith("CREATE INDEX"):
                conn.execute(statement)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


_INDEX_INSERT = "INSERT OR IGNORE INTO recall_index VALUES (?,?,?,?,?)"


def _index_for_recall(conn: sqlite3.Connection) -> None:
    """Schema 9 (issue 31): fill ``recall_index`` from every archived message, in one
    transaction, unless another process did it first (it is not empty then)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        if conn.execute("PRAGMA user_version").fetchone()[0] < 9:
            cur = conn.execute("SELECT session_id, seq, content FROM messages"
                               " ORDER BY session_id, seq")
            while batch := cur.fetchmany(2000):
                rows = [r for sid, seq, text in batch
                        for r in recall_index_rows(sid, [(seq, text)])]
                conn.executemany(_INDEX_INSERT, rows)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _in(conn: sqlite3.Connection, sql: str, values: list[str],
        args: Sequence[Any] = ()) -> list[Any]:
    """Rows of ``sql`` whose ``IN ({})`` takes ``values`` (after the fixed ``args``), in
    chunks under SQLite's limit."""
    rows: list[Any] = []
    for query, params in _chunks(sql, values, args):
        rows += conn.execute(query, params).fetchall()
    return rows


def _chunks(sql: str, values: Sequence[Any],
            args: Sequence[Any] = ()) -> Iterator[tuple[str, list[Any]]]:
    """(query, parameters) pairs that run each of ``sql``'s ``IN ({})`` over ``values`` 500 at
    a time, after the fixed ``args``."""
    lists = sql.count("{}")
    for i in range(0, len(values), 500):
        chunk = list(values[i : i + 500])
        yield sql.replace("{}", ",".join("?" * len(chunk))), [*args, *chunk * lists]
