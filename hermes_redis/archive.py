"""The cold tier: a SQLite archive that is the durable record of every session.

The ``sessions`` and ``messages`` tables keep the Hermes schema (tools written for it
keep working) plus a ``seq`` column, tombstones, persistent memories and FTS5 search.
WAL mode and a busy timeout let workers, the CLI and agents use one file at once.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from hermes_redis.errors import BackendUnavailableError
from hermes_redis.models import Memory, Message, new_message_id, parse_ts

# 1: the seed's tables; 2: sessions.cleared_seq; 3: the listing indexes (user, status, time);
# 4: messages.item (a framework's structured message, JSON text, NULL for none);
# 5: memories.seq/kind/topic/superseded_by and memory_sources (extracted memories).
# Upgraded in place on open (PRAGMA user_version).
SCHEMA_VERSION = 5
# Columns added after version 1, by table: added in place to an older archive.
ADDED_COLUMNS = {
    "sessions": {"cleared_seq": "INTEGER DEFAULT 0"},
    "messages": {"item": "JSON"},
    "memories": {"seq": "INTEGER", "kind": "TEXT DEFAULT 'explicit'", "topic": "TEXT",
                 "superseded_by": "TEXT"},
}
SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (session_id TEXT PRIMARY KEY, user_id TEXT, title TEXT,
  created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP, updated_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
  total_tokens INTEGER DEFAULT 0, message_count INTEGER DEFAULT 0,
  status TEXT DEFAULT 'active', summary TEXT,
  summary_seq INTEGER DEFAULT 0, last_seq INTEGER DEFAULT 0, cleared_seq INTEGER DEFAULT 0);
CREATE TABLE IF NOT EXISTS messages (message_id TEXT PRIMARY KEY,
  session_id TEXT REFERENCES sessions(session_id),
  role TEXT NOT NULL, content TEXT NOT NULL, token_count INTEGER, tool_calls JSON,
  file_refs JSON, memory_refs JSON, created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
  seq INTEGER NOT NULL, item JSON);
CREATE INDEX IF NOT EXISTS idx_messages_session ON messages(session_id, created_at);
CREATE UNIQUE INDEX IF NOT EXISTS idx_messages_seq ON messages(session_id, seq);
CREATE INDEX IF NOT EXISTS idx_sessions_user ON sessions(user_id, updated_at);
CREATE INDEX IF NOT EXISTS idx_sessions_user_page ON sessions(user_id, status, updated_at, session_id);
CREATE INDEX IF NOT EXISTS idx_sessions_page ON sessions(status, updated_at, session_id);
CREATE TABLE IF NOT EXISTS tombstones (message_id TEXT PRIMARY KEY, session_id TEXT NOT NULL,
  seq INTEGER, forgotten_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP);
CREATE INDEX IF NOT EXISTS idx_tombstones_session ON tombstones(session_id);
CREATE TABLE IF NOT EXISTS memories (memory_id TEXT PRIMARY KEY, user_id TEXT NOT NULL,
  session_id TEXT, content TEXT NOT NULL, token_count INTEGER,
  created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
  seq INTEGER, kind TEXT DEFAULT 'explicit', topic TEXT, superseded_by TEXT);
CREATE INDEX IF NOT EXISTS idx_memories_user ON memories(user_id, created_at);
CREATE TABLE IF NOT EXISTS memory_sources (memory_id TEXT NOT NULL, session_id TEXT NOT NULL,
  seq INTEGER NOT NULL, PRIMARY KEY (memory_id, session_id, seq));
CREATE INDEX IF NOT EXISTS idx_memory_sources_message ON memory_sources(session_id, seq);
CREATE TABLE IF NOT EXISTS api_keys (key_id TEXT PRIMARY KEY, user_id TEXT,
  key_hash TEXT NOT NULL UNIQUE, created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
  revoked_at TIMESTAMP);
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(body, tokenize='unicode61');
CREATE VIRTUAL TABLE IF NOT EXISTS messages_vocab USING fts5vocab(messages_fts, row);
"""
# Recall leaves out query terms found in more archived messages than this: their postings
# would cost more to rank than they say (BM25 weighs them near zero), and with them left
# out a recall over a million messages costs about what it costs over a thousand.
RECALL_MAX_POSTINGS = 10_000

# CJK text has no spaces between words; index each character so any substring is a phrase.
_CJK = re.compile(r"([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff])")


def fts_text(text: str) -> str:
    return _CJK.sub(r" \1 ", text)


def fts_query(query: str) -> str:
    """Each word of the query as a quoted prefix phrase (``auth`` finds "authentication",
    as the hot-tier scan does); user text is never FTS syntax."""
    phrases = []
    for word in query.split():
        parts = [p.replace('"', '""') for p in fts_text(word).split()]
        if parts and _TOKENS.search(word):  # a word of punctuation only has nothing to match
            phrases.append('"' + " ".join(parts) + '"*')
    return " AND ".join(phrases)


def fts_matches(query: str, text: str) -> bool:
    """Whether the archive's ``MATCH fts_query(query)`` would find ``text``: every query
    word's tokens appear consecutively in it, the last as a prefix (unicode61: lower-cased
    runs of letters and digits, each CJK character on its own). The hot tier's search uses
    it, so a message gives the same hits before and after it is archived."""
    tokens = _TOKENS.findall(fts_text(text).lower())
    wants = [w for w in (_TOKENS.findall(fts_text(word).lower()) for word in query.split()) if w]
    if not wants:
        return False  # fts_query(query) is empty: the archive finds nothing either
    for want in wants:
        if not any(
                tokens[i:i + len(want) - 1] == want[:-1]
                and tokens[i + len(want) - 1].startswith(want[-1])
                for i in range(len(tokens) - len(want) + 1)):
            return False
    return True


_TOKENS = re.compile(r"[^\W_]+")


T = TypeVar("T")


def relevant(items: Sequence[T], query: str, key: Callable[[T], str]) -> list[T]:
    """``items`` sharing a distinctive word with ``query`` (``recall_terms``), most shared
    first, ties in their order: how memories are ranked for a query, in Python (few)."""
    words = [t.strip('"*').replace(" ", "") for t in recall_terms(query)]
    scored = [(sum(1 for w in words if fts_matches(w, key(item))), i, item)
              for i, item in enumerate(items)]
    return [item for score, _, item in sorted(scored, key=lambda s: (-s[0], s[1])) if score]


# Words too common to say what a question is about (BM25 would weigh them low anyway, but
# each would make every message a candidate).
_STOP_WORDS = """
a about after again all also am an and any are as at be been before being but by can could
did do does doing done for from had has have having he her here hers him his how i if in into
is it its just me more most my no not now of on once only or other our out over own same she
should so some such than that the their them then there these they this those through to too
under until up very was we were what when where which while who whom why will with would you
your yours tell know think ever still much many get got go went say said like one way"""
STOP_WORDS = frozenset(_STOP_WORDS.split())
_WORDS = re.compile(r"[^\W_]+")


_SUFFIXES = ("ing", "ed", "es", "s", "ly", "er")


def _stem(word: str) -> str:
    """A crude English stem for a prefix match: "researched" and "researching" both give
    "research"; the stem keeps at least four letters."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[: -len(suffix)]
    return word


def recall_terms(query: str) -> list[str]:
    """The query's distinctive words as FTS5 terms: a prefix match for words of four letters
    or more (``paint`` finds "painting"), CJK runs as overlapping character pairs."""
    terms: list[str] = []
    for word in _WORDS.findall(query.lower()):
        chars = _CJK.findall(word)
        if chars:
            latin = _CJK.sub(" ", word).split()
            pairs = [f"{a} {b}" for a, b in itertools.pairwise(chars)] or chars
            terms += [f'"{p}"' for p in pairs]
            terms += [f'"{w}"' + ("*" if len(w) >= 4 else "") for w in latin if w not in STOP_WORDS]
        elif word not in STOP_WORDS and (len(word) > 1 or word.isdigit()):
            stem = _stem(word)
            terms.append(f'"{stem}"' + ("*" if len(stem) >= 4 else ""))
    return list(dict.fromkeys(terms))


@dataclass(frozen=True)
class SearchHit:
    session_id: str
    seq: int
    role: str
    snippet: str
    title: str
    score: float
    tier: str = "archive"

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Forgotten:
    message_id: str
    seq: int
    token_count: int


class ArchiveStore(Protocol):
    """What the rest of hermes-redis asks of a cold tier: ``Archive`` (SQLite, embedded) and
    ``archive_pg.PostgresArchive`` both answer it, and ``tests/test_archive.py`` holds each to
    the same behaviour. ``backends.open_archive(config)`` picks one."""

    def close(self) -> None: ...
    def write(self, session: dict[str, Any], messages: Sequence[Message],
              full_text: dict[str, str] | None = None) -> int: ...
    def set_summary(self, sid: str, summary: str, summary_seq: int, force: bool = False) -> None: ...
    def set_status(self, sid: str, status: str) -> None: ...
    def forget(self, sid: str, targets: Sequence[Forgotten],
               memories: bool = True) -> list[Forgotten]: ...
    def forget_session_memories(self, sid: str) -> None: ...
    def purge(self, sid: str) -> None: ...
    def reclaim(self, sid: str) -> bool: ...
    def remember(self, user_id: str, content: str, token_count: int, session_id: str | None,
                 seq: int | None = None, kind: str = "explicit", topic: str | None = None,
                 supersedes: Sequence[str] = ()) -> str | None: ...
    def add_source(self, memory_id: str, session_id: str, seq: int) -> None: ...
    def forget_memory(self, memory_id: str) -> bool: ...
    def drop_oldest_extracted(self, user_id: str, keep: int) -> int: ...
    def add_api_key(self, key_id: str, user_id: str | None, key_hash: str) -> None: ...
    def api_keys(self) -> list[dict[str, Any]]: ...
    def api_key_by_hash(self, key_hash: str) -> dict[str, Any] | None: ...
    def active_api_keys(self) -> int: ...
    def revoke_api_key(self, key_id: str) -> bool: ...
    def memory(self, memory_id: str) -> Memory | None: ...
    def knows_user(self, user_id: str) -> bool: ...
    def session(self, sid: str) -> dict[str, Any] | None: ...
    def sessions_page(self, user_id: str | None, status: str | None, limit: int,
                      after: tuple[str, str] | None = None) -> list[dict[str, Any]]: ...
    def session_ids_like(self, prefix: str, limit: int = 6) -> list[str]: ...
    def count_ids_like(self, prefix: str) -> int: ...
    def neighbours(self, sids: Sequence[str]) -> set[str]: ...
    def messages(self, sid: str, after_seq: int = 0,
                 upto_seq: int | None = None) -> list[Message]: ...
    def first(self, sid: str, after_seq: int, limit: int) -> list[Message]: ...
    def before(self, sid: str, before_seq: int, after_seq: int,
               limit: int) -> Iterator[Message]: ...
    def recall(self, sid: str, query: str, after_seq: int, before_seq: int,
               limit: int) -> Iterator[Message]: ...
    def newest(self, sid: str, after_seq: int, limit: int) -> list[Message]: ...
    def stats(self, sid: str) -> tuple[int, int, int]: ...
    def turn_starts(self, sid: str, upto_seq: int, within: int) -> tuple[int, int]: ...
    def reseat_needed(self, sid: str, messages: Sequence[Message]) -> tuple[int, int]: ...
    def high_seqs(self, sids: Sequence[str]) -> dict[str, int]: ...
    def tombstoned(self, sid: str) -> dict[str, int]: ...
    def memories(self, user_id: str, superseded: bool = False) -> list[Memory]: ...
    def search(self, query: str, user_id: str | None = None,
               limit: int = 20) -> list[SearchHit]: ...


class Archive:
    def __init__(self, path: Path, busy_timeout: float = 10.0) -> None:
        self.path = path
        self.busy_timeout = busy_timeout  # how long a write waits for another writer's lock
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = 0
        self._inode = 0

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
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except sqlite3.Error as err:
            raise self._unavailable(err) from None
        except OSError as err:
            raise BackendUnavailableError(f"cannot open archive {self.path}: {err.strerror}") from None
        self._conn, self._pid = conn, os.getpid()
        self._inode = self.path.stat().st_ino
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
    def _tx(self) -> Iterator[sqlite3.Connection]:
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
            ids = [m.message_id for m in messages]
            known = {r[0] for r in _in(conn, "SELECT message_id FROM messages"
                                             " WHERE message_id IN ({})", ids)}
            known |= {r[0] for r in _in(conn, "SELECT message_id FROM tombstones"
                                              " WHERE message_id IN ({})", ids)}
            fresh = [m for m in messages if m.message_id not in known]
            conn.executemany(
                "INSERT OR IGNORE INTO messages (message_id, session_id, role, content,"
                " token_count, tool_calls, file_refs, memory_refs, created_at, seq, item)"
                " SELECT ?,?,?,?,?,?,?,?,?,?,? WHERE NOT EXISTS"
                " (SELECT 1 FROM tombstones WHERE message_id = ?)",
                [(m.message_id, m.session_id, m.role, full_text.get(m.message_id, m.content),
                  m.token_count, m.tool_calls or None, _json_list(m.file_refs),
                  _json_list(m.memory_refs), _ts(m.created_at), m.seq, m.item_json or None,
                  m.message_id)
                 for m in fresh],
            )
            added = _in(conn, "SELECT rowid, content FROM messages WHERE message_id IN ({})",
                        [m.message_id for m in fresh])
            # ascending rowids: FTS5 flushes its pending terms whenever a rowid goes backwards
            conn.executemany("INSERT INTO messages_fts(rowid, body) VALUES (?, ?)",
                             [(rowid, fts_text(content)) for rowid, content in sorted(added)])
            self._recount(conn, session["session_id"])
            return len(added)

    def _upsert_session(self, conn: sqlite3.Connection, s: dict[str, Any]) -> None:
        conn.execute(
            "INSERT INTO sessions (session_id, user_id, title, created_at, updated_at, status,"
            " summary, summary_seq, last_seq, cleared_seq) VALUES (?,?,?,?,?,?,?,?,?,?)"
            " ON CONFLICT(session_id) DO UPDATE SET user_id=excluded.user_id,"
            " title=excluded.title, updated_at=max(updated_at, excluded.updated_at),"
            " status=CASE WHEN sessions.status='deleted' THEN 'deleted' ELSE excluded.status END,"
            " summary=CASE WHEN excluded.summary_seq >= sessions.summary_seq"
            "   THEN excluded.summary ELSE sessions.summary END,"
            " summary_seq=max(sessions.summary_seq, excluded.summary_seq),"
            " last_seq=max(sessions.last_seq, excluded.last_seq),"
            " cleared_seq=max(sessions.cleared_seq, excluded.cleared_seq)",
            (s["session_id"], s["user_id"], s["title"], _ts(s["created_at"]),
             _ts(s["updated_at"]), s["status"], s.get("summary", ""), s.get("summary_seq", 0),
             s.get("last_seq", 0), s.get("cleared_seq", 0)),
        )

    def _recount(self, conn: sqlite3.Connection, sid: str) -> None:
        conn.execute(
            "UPDATE sessions SET (message_count, total_tokens) = (SELECT count(*),"
            " coalesce(sum(token_count), 0) FROM messages WHERE session_id = ?)"
            " WHERE session_id = ?",
            (sid, sid),
        )

    def set_summary(self, sid: str, summary: str, summary_seq: int, force: bool = False) -> None:
        """Store a summary unless a newer one is there (``force``: clear may move it back)."""
        cond = "" if force else " AND summary_seq <= ?"
        args: tuple[Any, ...] = (summary, summary_seq, sid) + (() if force else (summary_seq,))
        with self._tx() as conn:
            conn.execute(f"UPDATE sessions SET summary=?, summary_seq=? WHERE session_id=?{cond}",
                         args)

    def set_status(self, sid: str, status: str) -> None:
        with self._tx() as conn:
            conn.execute("UPDATE sessions SET status=?, updated_at=? WHERE session_id=?",
                         (status, _ts(time.time()), sid))

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
                row = conn.execute("SELECT rowid FROM messages WHERE message_id=?",
                                   (t.message_id,)).fetchone()
                if row:
                    conn.execute("DELETE FROM messages_fts WHERE rowid=?", (row[0],))
                    conn.execute("DELETE FROM messages WHERE rowid=?", (row[0],))
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
            conn.execute("INSERT OR IGNORE INTO tombstones (message_id, session_id, seq)"
                         " SELECT message_id, session_id, seq FROM messages WHERE session_id=?",
                         (sid,))
            conn.execute("DELETE FROM messages WHERE session_id=?", (sid,))
            conn.execute("UPDATE sessions SET status='deleted', summary='', message_count=0,"
                         " total_tokens=0 WHERE session_id=?", (sid,))

    def reclaim(self, sid: str) -> bool:
        """Remove the row of a deleted session that holds no messages (purged), so its id can
        start a new session; False when there is no such row. Its tombstones stay: a flush
        of the old session still in flight must not bring a message back."""
        with self._tx() as conn:
            cur = conn.execute("DELETE FROM sessions WHERE session_id=? AND status='deleted' AND"
                               " NOT EXISTS (SELECT 1 FROM messages WHERE session_id=?)", (sid, sid))
            return cur.rowcount == 1

    def remember(self, user_id: str, content: str, token_count: int, session_id: str | None,
                 seq: int | None = None, kind: str = "explicit", topic: str | None = None,
                 supersedes: Sequence[str] = ()) -> str | None:
        """Store a memory (said at ``session_id``/``seq``, if given) and mark ``supersedes``
        replaced by it, in one transaction. An extracted memory is stored only while its
        message is archived and not forgotten (None otherwise): a forget racing the
        extraction either runs after this and removes it, or this finds the message gone."""
        memory_id = "mem_" + new_message_id()
        with self._tx() as conn:
            if kind == "extracted" and conn.execute(
                    "SELECT 1 FROM messages WHERE session_id=? AND seq=?", (session_id, seq)
            ).fetchone() is None:
                return None
            conn.execute("INSERT INTO memories (memory_id, user_id, session_id, content,"
                         " token_count, created_at, seq, kind, topic) VALUES (?,?,?,?,?,?,?,?,?)",
                         (memory_id, user_id, session_id, content, token_count, _ts(time.time()),
                          seq, kind, topic))
            if session_id is not None and seq is not None:
                self._cite(conn, memory_id, session_id, seq)
            for old in supersedes:
                conn.execute("UPDATE memories SET superseded_by=? WHERE memory_id=? AND user_id=?"
                             " AND superseded_by IS NULL", (memory_id, old, user_id))
        return memory_id

    def add_source(self, memory_id: str, session_id: str, seq: int) -> None:
        """One more message that says ``memory_id`` (forgetting it alone keeps the memory)."""
        with self._tx() as conn:
            if conn.execute("SELECT 1 FROM memories WHERE memory_id=?", (memory_id,)).fetchone():
                self._cite(conn, memory_id, session_id, seq)

    @staticmethod
    def _cite(conn: sqlite3.Connection, memory_id: str, sid: str, seq: int) -> None:
        """Record the message as a source of the memory; an archived message cites it in
        ``memory_refs``."""
        conn.execute("INSERT OR IGNORE INTO memory_sources VALUES (?,?,?)", (memory_id, sid, seq))
        row = conn.execute("SELECT rowid, memory_refs FROM messages WHERE session_id=? AND seq=?",
                           (sid, seq)).fetchone()
        if row is not None and memory_id not in _refs(row[1]):
            conn.execute("UPDATE messages SET memory_refs=? WHERE rowid=?",
                         (_json_list([*_refs(row[1]), memory_id]), row[0]))

    def forget_memory(self, memory_id: str) -> bool:
        """Delete one persistent memory (what it superseded is current again); False when
        there was none with that id."""
        with self._tx() as conn:
            gone = conn.execute("DELETE FROM memories WHERE memory_id=?", (memory_id,)).rowcount
            conn.execute("DELETE FROM memory_sources WHERE memory_id=?", (memory_id,))
            conn.execute("UPDATE memories SET superseded_by=NULL WHERE superseded_by=?", (memory_id,))
            return gone == 1

    def drop_oldest_extracted(self, user_id: str, keep: int) -> int:
        """Delete the user's oldest current extracted memories beyond ``keep``; how many went."""
        with self._tx() as conn:
            rows = conn.execute(
                "SELECT memory_id FROM memories WHERE user_id=? AND kind='extracted' AND"
                " superseded_by IS NULL ORDER BY created_at DESC, memory_id DESC LIMIT -1 OFFSET ?",
                (user_id, keep)).fetchall()
            for (mid,) in rows:
                conn.execute("DELETE FROM memories WHERE memory_id=?", (mid,))
                conn.execute("DELETE FROM memory_sources WHERE memory_id=?", (mid,))
            return len(rows)

    # --- API keys (hermes_redis.keys): only a hash of each key is stored -------------------
    def add_api_key(self, key_id: str, user_id: str | None, key_hash: str) -> None:
        with self._tx() as conn:
            conn.execute("INSERT INTO api_keys (key_id, user_id, key_hash, created_at)"
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
            cur = conn.execute("UPDATE api_keys SET revoked_at=? WHERE key_id=? AND revoked_at IS NULL",
                               (_ts(time.time()), key_id))
            return cur.rowcount == 1

    # --- reads -----------------------------------------------------------------------------
    def memory(self, memory_id: str) -> Memory | None:
        rows = self._read("SELECT * FROM memories WHERE memory_id=?", (memory_id,))
        return _memory(rows[0]) if rows else None

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
        """Up to ``limit`` sessions, newest archived activity first, strictly after the
        (updated_at, session_id) ``after``: an index range, whatever the table's size."""
        sql, args = "SELECT * FROM sessions WHERE 1=1", []
        if user_id is not None:
            sql += " AND user_id=?"
            args.append(user_id)
        if status is not None:
            sql += " AND status=?"
            args.append(status)
        if after is not None:
            sql += " AND (updated_at < ? OR (updated_at = ? AND session_id < ?))"
            args += [after[0], after[0], after[1]]
        return self._read(sql + " ORDER BY updated_at DESC, session_id DESC LIMIT ?", [*args, limit])

    def session_ids_like(self, prefix: str, limit: int = 6) -> list[str]:
        """Up to ``limit`` session ids starting with ``prefix`` (an index range lookup; session
        ids are ASCII below DEL, so ``prefix + DEL`` bounds the range)."""
        rows = self._read("SELECT session_id FROM sessions WHERE session_id >= ? AND session_id < ?"
                          " ORDER BY session_id LIMIT ?", (prefix, prefix + "\x7f", limit))
        return [r["session_id"] for r in rows]

    def count_ids_like(self, prefix: str) -> int:
        return int(self._read("SELECT count(*) AS n FROM sessions WHERE session_id >= ? AND"
                              " session_id < ?", (prefix, prefix + "\x7f"))[0]["n"])

    def neighbours(self, sids: Sequence[str]) -> set[str]:
        """The ids sorted next to each of ``sids``: enough to find their shortest unique prefixes."""
        out: set[str] = set()
        for sid in sids:
            for sql in ("SELECT session_id FROM sessions WHERE session_id < ? ORDER BY session_id"
                        " DESC LIMIT 1", "SELECT session_id FROM sessions WHERE session_id > ?"
                        " ORDER BY session_id LIMIT 1"):
                out.update(r["session_id"] for r in self._read(sql, (sid,)))
        return out

    def messages(self, sid: str, after_seq: int = 0, upto_seq: int | None = None) -> list[Message]:
        sql = "SELECT * FROM messages WHERE session_id=? AND seq>?"
        args: list[Any] = [sid, after_seq]
        if upto_seq is not None:
            sql += " AND seq<=?"
            args.append(upto_seq)
        return [_message(r) for r in self._read(sql + " ORDER BY seq", args)]

    def first(self, sid: str, after_seq: int, limit: int) -> list[Message]:
        rows = self._read("SELECT * FROM messages WHERE session_id=? AND seq>? ORDER BY seq"
                          " LIMIT ?", (sid, after_seq, limit))
        return [_message(r) for r in rows]

    def before(self, sid: str, before_seq: int, after_seq: int, limit: int) -> Iterator[Message]:
        """Up to ``limit`` messages with after_seq < seq < before_seq, newest first; read at
        once, each decoded only when the caller reaches it."""
        rows = self._read("SELECT * FROM messages WHERE session_id=? AND seq<? AND seq>?"
                          " ORDER BY seq DESC LIMIT ?", (sid, before_seq, after_seq, limit))
        return map(_message, rows)

    def recall(self, sid: str, query: str, after_seq: int, before_seq: int,
               limit: int) -> Iterator[Message]:
        """The session's messages in after_seq < seq < before_seq that share words with
        ``query``, best BM25 rank first (any word may match; CJK by character pairs), each
        followed by the message after it (the reply that usually holds the answer)."""
        terms = self._rare(recall_terms(query))
        if not terms:
            return iter(())
        rows = self._read(
            "SELECT m.* FROM messages_fts JOIN messages m ON m.rowid = messages_fts.rowid"
            " WHERE messages_fts MATCH ? AND m.session_id=? AND m.seq>? AND m.seq<?"
            " ORDER BY bm25(messages_fts) LIMIT ?",
            (" OR ".join(terms), sid, after_seq, before_seq, limit))
        wanted = sorted({r["seq"] + 1 for r in rows if r["seq"] + 1 < before_seq})
        found = self._read("SELECT * FROM messages WHERE session_id=? AND seq IN ({})", [sid],
                           values=wanted) if wanted else []
        return _with_replies(rows, {r["seq"]: r for r in found})

    def _rare(self, terms: list[str]) -> list[str]:
        """``terms`` less those in more than RECALL_MAX_POSTINGS messages (the rarest one is
        kept when every term is common). A phrase costs the postings of all its words."""
        if not terms:
            return []
        postings = {t: self._postings(t) for t in terms}
        rare = [t for t in terms if postings[t] <= RECALL_MAX_POSTINGS]
        return rare or [min(terms, key=postings.__getitem__)]

    def _postings(self, term: str) -> int:
        prefix = term.endswith("*")
        total = 0
        for word in term.strip('"*').split():
            if prefix:
                row = self._read("SELECT coalesce(sum(doc), 0) AS n FROM messages_vocab"
                                 " WHERE term >= ? AND term < ?", (word, word + "\U0010ffff"))
            else:
                row = self._read("SELECT coalesce(sum(doc), 0) AS n FROM messages_vocab"
                                 " WHERE term = ?", (word,))
            total += int(row[0]["n"])
        return total

    def newest(self, sid: str, after_seq: int, limit: int) -> list[Message]:
        rows = self._read("SELECT * FROM messages WHERE session_id=? AND seq>? ORDER BY seq DESC"
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
            "SELECT count(*) AS n, coalesce(sum(seq <= ?), 0) AS upto FROM messages"
            " WHERE session_id=? AND seq <= ? AND (role='user' OR seq ="
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
        row = self._read("SELECT coalesce(max(seq), 0) AS hw FROM messages WHERE session_id=?",
                         (sid,))[0]
        high = int(row["hw"])
        if messages[0].seq > high:
            return 0, 0
        ids = [m.message_id for m in messages if m.seq <= high]
        with self._tx() as conn:
            known = {r[0] for r in _in(conn, "SELECT message_id FROM messages"
                                             " WHERE message_id IN ({})", ids)}
            known |= {r[0] for r in _in(conn, "SELECT message_id FROM tombstones"
                                              " WHERE message_id IN ({})", ids)}
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

    def memories(self, user_id: str, superseded: bool = False) -> list[Memory]:
        """The user's current memories, oldest first (``superseded``: their history too)."""
        cond = "" if superseded else " AND superseded_by IS NULL"
        return [_memory(r) for r in self._read(
            f"SELECT * FROM memories WHERE user_id=?{cond} ORDER BY created_at, memory_id",
            (user_id,))]

    def search(self, query: str, user_id: str | None = None, limit: int = 20) -> list[SearchHit]:
        match = fts_query(query)
        if not match:
            return []
        sql = (
            "SELECT m.session_id, m.seq, m.role, m.content, s.title, bm25(messages_fts) AS score"
            " FROM messages_fts JOIN messages m ON m.rowid = messages_fts.rowid"
            " JOIN sessions s ON s.session_id = m.session_id"
            " WHERE messages_fts MATCH ? AND s.status != 'deleted'"
        )
        args: list[Any] = [match]
        if user_id is not None:
            sql += " AND s.user_id = ?"
            args.append(user_id)
        rows = self._read(sql + " ORDER BY score LIMIT ?", [*args, limit])
        return [
            SearchHit(r["session_id"], r["seq"], r["role"], snippet(r["content"], query),
                      r["title"] or "", -float(r["score"]))
            for r in rows
        ]


def snippet(text: str, query: str, width: int = 80) -> str:
    """A window of ``text`` around the first query word, on one line."""
    flat = " ".join(text.split())
    lowered = flat.lower()
    positions = [lowered.find(w.lower()) for w in query.split()]
    hits = [p for p in positions if p >= 0]
    at = min(hits) if hits else 0
    start = max(0, at - width // 3)
    piece = flat[start : start + width]
    return ("…" if start else "") + piece + ("…" if start + width < len(flat) else "")


def _in(conn: sqlite3.Connection, sql: str, values: list[str]) -> list[Any]:
    """Rows of ``sql`` whose ``IN ({})`` takes ``values``, in chunks under SQLite's limit."""
    rows: list[Any] = []
    for query, params in _chunks(sql, values):
        rows += conn.execute(query, params).fetchall()
    return rows


def _chunks(sql: str, values: Sequence[Any],
            args: Sequence[Any] = ()) -> Iterator[tuple[str, list[Any]]]:
    """(query, parameters) pairs that run ``sql``'s ``IN ({})`` over ``values`` 500 at a time,
    each after the fixed ``args``."""
    for i in range(0, len(values), 500):
        chunk = list(values[i : i + 500])
        yield sql.format(",".join("?" * len(chunk))), [*args, *chunk]


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


def _with_replies(rows: list[dict[str, Any]],
                  replies: dict[int, dict[str, Any]]) -> Iterator[Message]:
    """Each hit then its reply, each message once, decoded as the caller reaches it."""
    seen: set[int] = set()
    for row in rows:
        for r in (row, replies.get(row["seq"] + 1)):
            if r is not None and r["seq"] not in seen:
                seen.add(r["seq"])
                yield _message(r)


def _refs(text: str | None) -> tuple[str, ...]:
    return () if not text or text == "[]" else tuple(json.loads(text))
