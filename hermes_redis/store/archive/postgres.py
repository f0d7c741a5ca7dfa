"""The cold tier on PostgreSQL (``archive.url``): the SQLite archive's tables and behaviour
for deployments past one machine. Needs the ``postgres`` extra (psycopg 3 and its pool).

Same tables and columns as ``archive.SCHEMA``; timestamps and JSON read back as the text
SQLite gives, so rows, cursors and ``parse_ts`` work unchanged. Search uses a ``tsvector``
column built here from the same tokens as SQLite's FTS5 index (lower-cased runs of letters
and digits, each CJK character on its own), so both archives find the same messages.

Every write takes a per-session transaction lock (``pg_advisory_xact_lock``): flushes,
forgets and purges of one session run one at a time across processes, as SQLite's
``BEGIN IMMEDIATE`` makes them, which keeps tombstones final (invariant 4) and counters
true (invariant 5) under concurrent flushes.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.adapt import Loader
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from hermes_redis.core.errors import BackendUnavailableError
from hermes_redis.core.models import Message, SearchHit
from hermes_redis.core.text import _TOKENS, fts_tokens, ranked_hits
from hermes_redis.core.urls import redact_url
from hermes_redis.store.archive import Forgotten
from hermes_redis.store.archive.base import RECALL_MAX_POSTINGS, SEARCH_MAX_MATCHES
from hermes_redis.store.archive.sql import SQLArchive, _json_list, _ts, recall_index_rows

# Numbered as SQLite's (archive.SCHEMA_VERSION), so one number means one set of columns.
# Each step runs once, in order, in one transaction; adding a column is one more entry,
# e.g. 4: "ALTER TABLE messages ADD COLUMN IF NOT EXISTS item JSON".
MIGRATIONS: dict[int, str] = {
    1: """
CREATE TABLE IF NOT EXISTS sessions (session_id TEXT COLLATE "C" PRIMARY KEY, user_id TEXT, title TEXT,
  created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP, updated_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
  total_tokens INTEGER DEFAULT 0, message_count INTEGER DEFAULT 0,
  status TEXT DEFAULT 'active', summary TEXT,
  summary_seq INTEGER DEFAULT 0, last_seq INTEGER DEFAULT 0);
CREATE TABLE IF NOT EXISTS messages (message_id TEXT PRIMARY KEY,
  session_id TEXT REFERENCES sessions(session_id),
  role TEXT NOT NULL, content TEXT NOT NULL, token_count INTEGER, tool_calls JSON,
  file_refs JSON, memory_refs JSON, created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
  seq INTEGER NOT NULL, fts TSVECTOR NOT NULL);
CREATE INDEX IF NOT EXISTS idx_messages_session ON messages(session_id, created_at);
CREATE UNIQUE INDEX IF NOT EXISTS idx_messages_seq ON messages(session_id, seq);
CREATE INDEX IF NOT EXISTS idx_messages_fts ON messages USING GIN (fts);
CREATE INDEX IF NOT EXISTS idx_sessions_user ON sessions(user_id, updated_at);
CREATE TABLE IF NOT EXISTS tombstones (message_id TEXT PRIMARY KEY, session_id TEXT NOT NULL,
  seq INTEGER, forgotten_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP);
CREATE INDEX IF NOT EXISTS idx_tombstones_session ON tombstones(session_id);
CREATE TABLE IF NOT EXISTS memories (memory_id TEXT PRIMARY KEY, user_id TEXT NOT NULL,
  session_id TEXT, content TEXT NOT NULL, token_count INTEGER,
  created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP);
CREATE INDEX IF NOT EXISTS idx_memories_user ON memories(user_id, created_at);
CREATE TABLE IF NOT EXISTS api_keys (key_id TEXT PRIMARY KEY, user_id TEXT,
  key_hash TEXT NOT NULL UNIQUE, created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
  revoked_at TIMESTAMP);
""",
    2: "ALTER TABLE sessions ADD COLUMN IF NOT EXISTS cleared_seq INTEGER DEFAULT 0",
    3: """
CREATE INDEX IF NOT EXISTS idx_sessions_user_page ON sessions(user_id, status, updated_at, session_id);
CREATE INDEX IF NOT EXISTS idx_sessions_page ON sessions(status, updated_at, session_id);
""",
    4: "ALTER TABLE messages ADD COLUMN IF NOT EXISTS item JSON",
    5: """
ALTER TABLE memories ADD COLUMN IF NOT EXISTS seq INTEGER;
ALTER TABLE memories ADD COLUMN IF NOT EXISTS kind TEXT DEFAULT 'explicit';
ALTER TABLE memories ADD COLUMN IF NOT EXISTS topic TEXT;
ALTER TABLE memories ADD COLUMN IF NOT EXISTS superseded_by TEXT;
CREATE TABLE IF NOT EXISTS memory_sources (memory_id TEXT NOT NULL, session_id TEXT NOT NULL,
  seq INTEGER NOT NULL, PRIMARY KEY (memory_id, session_id, seq));
CREATE INDEX IF NOT EXISTS idx_memory_sources_message ON memory_sources(session_id, seq);
""",
    # SQLite's 6 is fts_terms, FTS5's term list for search's prefix expansion; a GIN index
    # answers a prefix without one, so here the number only keeps the two in step.
    6: "SELECT 1",
    # issue 35: an id names a message within its session; the old key was global, so every
    # row fits the new one
    7: """
ALTER TABLE messages DROP CONSTRAINT IF EXISTS messages_pkey;
ALTER TABLE messages ADD PRIMARY KEY (session_id, message_id);
ALTER TABLE tombstones DROP CONSTRAINT IF EXISTS tombstones_pkey;
ALTER TABLE tombstones ADD PRIMARY KEY (session_id, message_id);
""",
    # issue 30: a continued or forked session's lineage
    8: """
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS parent_session_id TEXT;
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS forked_at_seq INTEGER;
""",
    # issue 31: recall's own index keyed (session_id, term, seq), filled from the archived
    # messages (_index_for_recall)
    9: """
CREATE TABLE IF NOT EXISTS recall_index (session_id TEXT COLLATE "C" NOT NULL,
  term TEXT COLLATE "C" NOT NULL, seq INTEGER NOT NULL, tf INTEGER NOT NULL,
  dl INTEGER NOT NULL, PRIMARY KEY (session_id, term, seq));
""",
    # issue 31: embeddings, each stored with the key of the model that made it
    10: """
CREATE TABLE IF NOT EXISTS message_vectors (session_id TEXT COLLATE "C" NOT NULL,
  seq INTEGER NOT NULL, model TEXT NOT NULL, vec BYTEA NOT NULL, PRIMARY KEY (session_id, seq));
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS vector_version INTEGER DEFAULT 0;
ALTER TABLE memories ADD COLUMN IF NOT EXISTS vec BYTEA;
ALTER TABLE memories ADD COLUMN IF NOT EXISTS vec_model TEXT;
""",
}
SCHEMA_VERSION = max(MIGRATIONS)
_MIGRATION_LOCK = 0x6865726D6573  # "hermes": one process migrates at a time

# tsvector limits: a lexeme of at most 2047 bytes, positions up to 16383 (later words keep
# position 16383: still found, but not as phrases), and under 1 MB of distinct lexemes.
_MAX_LEXEME_CHARS = 511  # 4 bytes at most each: under 2047 bytes
_MAX_LEXEMES_BYTES = 1_000_000


def fts_vector(text: str) -> str:
    """``text`` as a tsvector literal: SQLite FTS5's tokens (``fts_tokens``: lower-cased
    letter/digit runs, each CJK character alone) with their positions, built here so
    PostgreSQL's parser (which reads e-mails, URLs and hyphenated words its own way) never
    decides what a word is."""
    tokens = [t[:_MAX_LEXEME_CHARS] for t in fts_tokens(text)]
    if len(text) > _MAX_LEXEMES_BYTES // 4:  # only a huge text can pass the limit
        tokens = _within_limit(tokens)
    return " ".join(f"'{t}':{min(i, 16383)}" for i, t in enumerate(tokens, 1))


def _within_limit(tokens: list[str]) -> list[str]:
    """The first tokens whose distinct lexemes fit the tsvector's size limit."""
    seen: set[str] = set()
    size = 0
    for i, token in enumerate(tokens):
        if token not in seen:
            seen.add(token)
            size += len(token.encode()) + 8  # and its entry
            if size > _MAX_LEXEMES_BYTES:
                return tokens[:i]
    return tokens


def _phrase(words: list[str], prefix: bool) -> str:
    """Consecutive tokens as a tsquery phrase, the last one a prefix when ``prefix``."""
    return " <-> ".join(f"'{w}'" + (":*" if prefix and i == len(words) - 1 else "")
                        for i, w in enumerate(words))


def ts_query(query: str) -> str:
    """``archive.fts_query`` for PostgreSQL: each word of the query as a phrase of its tokens,
    the last a prefix, all of them required. Tokens are letter/digit runs only, so user text
    is never tsquery syntax."""
    phrases = []
    for word in query.split():
        tokens = fts_tokens(word)
        if tokens:
            phrases.append(_phrase(tokens, prefix=True))
    return " & ".join(f"({p})" for p in phrases)


def term_query(term: str) -> str:
    """One ``recall_terms`` term (``"a b"`` or ``"word"*``) as a tsquery."""
    words = _TOKENS.findall(term.lower())
    if term.endswith("*"):  # FTS5's prefix phrase: every word a prefix
        return " <-> ".join(f"'{w}':*" for w in words)
    return _phrase(words, prefix=False)


class _TextLoader(Loader):
    """Timestamps and JSON as the text SQLite returns (``parse_ts`` and ``_refs`` read it)."""

    def load(self, data: Any) -> str:
        return bytes(data).decode()


@functools.lru_cache(maxsize=512)
def postgres_sql(sql: str) -> str:
    """A shared statement (``archive_sql``: SQLite's dialect) as psycopg runs it: ``?`` as
    ``%s``, a list's ``IN ({})`` as ``= ANY(%s)`` (one array argument), ``%`` escaped."""
    return sql.replace("%", "%%").replace("IN ({})", "= ANY(?)").replace("?", "%s")


class PostgresArchive(SQLArchive[psycopg.Connection[Any]]):
    """The cold tier on a PostgreSQL server, through a pool; the shared statements are
    ``archive_sql.SQLArchive``'s, this class's own SQL is in psycopg's ``%s`` style."""

    GREATEST = "greatest"
    NO_LIMIT = None

    def __init__(self, url: str, pool_size: int = 5, timeout: float = 10.0) -> None:
        self.url = url
        self.where = redact_url(url)
        self.pool_size = pool_size
        self.timeout = timeout  # seconds to wait for a connection (or the server)
        self._lock = threading.Lock()
        self._pool: ConnectionPool | None = None
        self._pid = 0

    # --- connection ------------------------------------------------------------------------
    def _connect(self) -> ConnectionPool:
        """The process's pool, opened (and the schema migrated) on first use; a forked child
        opens its own, never sharing its parent's sockets."""
        if self._pool is not None and self._pid == os.getpid():
            return self._pool
        with self._lock:
            if self._pool is not None and self._pid == os.getpid():
                return self._pool
            kwargs: dict[str, Any] = {"autocommit": True, "row_factory": dict_row,
                                      "connect_timeout": max(1, round(self.timeout))}
            try:  # one direct connection first: an unreachable server fails at once, in one line
                with psycopg.connect(self.url, **kwargs) as conn:
                    _configure(conn)
                    migrate(conn, self.where)
            except psycopg.Error as err:
                raise self._unavailable(err) from None
            pool = ConnectionPool(self.url, min_size=1, max_size=self.pool_size, open=False,
                                  timeout=self.timeout, kwargs=kwargs, configure=_configure,
                                  name="hermes-archive")
            pool.open()
            self._pool, self._pid = pool, os.getpid()
            return pool

    def _unavailable(self, err: Exception) -> BackendUnavailableError:
        if isinstance(err, PoolTimeout):
            return BackendUnavailableError(
                f"archive {self.where}: no connection within {self.timeout:g}s; check that "
                "PostgreSQL runs and archive.url (host, port, user, database) is right")
        text = (str(err).strip().splitlines() or [type(err).__name__])[0]
        if isinstance(err, psycopg.OperationalError):
            hint = "check that PostgreSQL runs and archive.url is right, then retry"
        elif isinstance(err, psycopg.errors.InsufficientPrivilege):
            hint = "grant the archive's user rights on its tables"
        else:
            hint = "check the server's log and retry"
        return BackendUnavailableError(f"archive {self.where}: {text}; {hint}")

    @contextmanager
    def _tx(self, sid: str | None = None) -> Iterator[psycopg.Connection[Any]]:
        """One transaction; with ``sid``, holding that session's write lock."""
        pool = self._connect()
        try:
            with pool.connection() as conn, conn.transaction():
                if sid is not None:
                    conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (sid,))
                yield conn
        except (psycopg.Error, PoolTimeout) as err:
            raise self._unavailable(err) from None

    def _read(self, sql: str, args: Sequence[Any] = (),
              values: Sequence[Any] | None = None) -> list[dict[str, Any]]:
        if values is not None:
            args = [*args, *[list(values)] * sql.count("IN ({})")]
        return self._query(postgres_sql(sql), args)

    def _run(self, conn: psycopg.Connection[Any], sql: str,
             args: Sequence[Any] = ()) -> psycopg.Cursor[Any]:
        return conn.execute(postgres_sql(sql), args)

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Rows of a statement in psycopg's own dialect, outside any write transaction."""
        pool = self._connect()
        try:
            with pool.connection() as conn:
                return conn.execute(sql, args).fetchall()  # type: ignore[return-value]
        except (psycopg.Error, PoolTimeout) as err:
            raise self._unavailable(err) from None

    def close(self) -> None:
        with self._lock:
            if self._pool is not None and self._pid == os.getpid():
                self._pool.close()
            self._pool = None

    # --- writes ----------------------------------------------------------------------------
    def write(self, session: dict[str, Any], messages: Sequence[Message],
              full_text: dict[str, str] | None = None) -> int:
        """Upsert the session row and insert messages not yet archived nor tombstoned.

        Idempotent by message_id, one transaction: a crash leaves all or nothing (invariant 3).
        Returns how many messages were new.
        """
        full_text = full_text or {}
        sid = session["session_id"]
        with self._tx(sid) as conn:
            self._upsert_session(conn, session)
            added = 0
            ids = [m.message_id for m in messages]
            known = {r["message_id"] for r in conn.execute(  # this session's only (issue 35)
                "SELECT message_id FROM messages WHERE session_id = %s AND message_id = ANY(%s)"
                " UNION SELECT message_id FROM tombstones WHERE session_id = %s"
                " AND message_id = ANY(%s)", (sid, ids, sid, ids))
            } if messages else set()
            messages = [m for m in messages if m.message_id not in known]  # a re-flush: cheap
            if messages:
                texts = [full_text.get(m.message_id, m.content) for m in messages]
                cur = conn.execute(
                    "INSERT INTO messages (message_id, session_id, role, content, token_count,"
                    " tool_calls, file_refs, memory_refs, created_at, seq, fts, item)"
                    " SELECT t.message_id, t.session_id, t.role, t.content, t.token_count,"
                    " t.tool_calls::json, t.file_refs::json, t.memory_refs::json,"
                    " t.created_at::timestamp, t.seq, t.fts::tsvector, t.item::json"
                    " FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::int[],"
                    " %s::text[], %s::text[], %s::text[], %s::text[], %s::int[], %s::text[],"
                    " %s::text[])"
                    " AS t(message_id, session_id, role, content, token_count, tool_calls,"
                    " file_refs, memory_refs, created_at, seq, fts, item)"
                    " WHERE NOT EXISTS (SELECT 1 FROM tombstones WHERE session_id = t.session_id"
                    " AND message_id = t.message_id)"
                    " ON CONFLICT DO NOTHING RETURNING seq, content",
                    ([m.message_id for m in messages], [sid] * len(messages),
                     [m.role for m in messages], texts, [m.token_count for m in messages],
                     [m.tool_calls or None for m in messages],
                     [_json_list(m.file_refs) for m in messages],
                     [_json_list(m.memory_refs) for m in messages],
                     [_ts(m.created_at) for m in messages], [m.seq for m in messages],
                     [fts_vector(t) for t in texts], [m.item_json or None for m in messages]))
                inserted = cur.fetchall()
                added = len(inserted)
                _insert_index(conn, recall_index_rows(  # issue 31
                    sid, [(r["seq"], r["content"]) for r in inserted]))
            self._recount(conn, sid)
            return added

    def forget(self, sid: str, targets: Sequence[Forgotten],
               memories: bool = True) -> list[Forgotten]:
        """Tombstone and delete, and (``memories``) the memories only these messages stated;
        returns the targets that were not forgotten before.

        The session's write lock orders this against a racing flush: the flush either
        commits first (and its rows are deleted here) or finds the tombstones (invariant 4).
        """
        if not targets:
            with self._tx(sid) as conn:
                self._recount(conn, sid)
            return []
        with self._tx(sid) as conn:
            rows = conn.execute(
                "INSERT INTO tombstones (message_id, session_id, seq)"
                " SELECT t.id, %s, t.seq FROM unnest(%s::text[], %s::int[]) AS t(id, seq)"
                " ON CONFLICT DO NOTHING RETURNING message_id",
                (sid, [t.message_id for t in targets], [t.seq for t in targets])).fetchall()
            gone = conn.execute("DELETE FROM messages WHERE session_id = %s AND"
                                " message_id = ANY(%s) RETURNING seq, content",
                                (sid, [t.message_id for t in targets])).fetchall()
            if gone:  # issue 31
                index = recall_index_rows(sid, [(r["seq"], r["content"]) for r in gone])
                conn.execute("DELETE FROM recall_index WHERE session_id = %s AND (term, seq) IN"
                             " (SELECT * FROM unnest(%s::text[], %s::int[]))",
                             (sid, [r[1] for r in index], [r[2] for r in index]))
                if conn.execute("DELETE FROM message_vectors WHERE session_id = %s AND"
                                " seq = ANY(%s)", (sid, [r["seq"] for r in gone])).rowcount:
                    self._bump_vectors(conn, sid)
            self._recount(conn, sid)
            if memories:
                self._forget_derived(conn, sid, [t.seq for t in targets])
        new = {r["message_id"] for r in rows}
        fresh, seen = [], set()
        for t in targets:  # in the caller's order, each once, as SQLite's loop gives them
            if t.message_id in new and t.message_id not in seen:
                seen.add(t.message_id)
                fresh.append(t)
        return fresh

    def purge(self, sid: str) -> None:
        with self._tx(sid) as conn:
            conn.execute("INSERT INTO tombstones (message_id, session_id, seq)"
                         " SELECT message_id, session_id, seq FROM messages WHERE session_id=%s"
                         " ON CONFLICT DO NOTHING", (sid,))
            conn.execute("DELETE FROM messages WHERE session_id=%s", (sid,))
            conn.execute("DELETE FROM recall_index WHERE session_id=%s", (sid,))
            conn.execute("DELETE FROM message_vectors WHERE session_id=%s", (sid,))
            self._bump_vectors(conn, sid)
            conn.execute("UPDATE sessions SET status='deleted', summary='', message_count=0,"
                         " total_tokens=0 WHERE session_id=%s", (sid,))

    def _forget_derived(self, conn: psycopg.Connection[Any], sid: str,
                        seqs: Sequence[int] | None) -> None:
        """Drop the memories said only in these messages (``seqs`` None: the whole session);
        what they superseded is current again. Explicit memories are never derived."""
        if seqs is None:
            rows = conn.execute("DELETE FROM memory_sources WHERE session_id=%s"
                                " RETURNING memory_id", (sid,)).fetchall()
        else:
            rows = conn.execute("DELETE FROM memory_sources WHERE session_id=%s AND seq = ANY(%s)"
                                " RETURNING memory_id", (sid, list(seqs))).fetchall()
        touched = sorted({r["memory_id"] for r in rows})
        if not touched:
            return
        gone = conn.execute(
            "DELETE FROM memories m WHERE memory_id = ANY(%s) AND kind != 'explicit' AND NOT EXISTS"
            " (SELECT 1 FROM memory_sources s WHERE s.memory_id = m.memory_id)"
            " RETURNING memory_id", (touched,)).fetchall()
        if gone:
            conn.execute("UPDATE memories SET superseded_by=NULL WHERE superseded_by = ANY(%s)",
                         ([r["memory_id"] for r in gone],))

    def forget_session_memories(self, sid: str) -> None:
        """Drop the memories said only in this session (it is being deleted)."""
        with self._tx(sid) as conn:
            self._forget_derived(conn, sid, None)

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
        Reads this session's postings only (``SQLArchive._recall``, issue 31), as SQLite."""
        return self._recall(sid, query, after_seq, before_seq, limit, within,
                            RECALL_MAX_POSTINGS, near, near_weight)

    def search(self, query: str, user_id: str | None = None, limit: int = 20) -> list[SearchHit]:
        match = ts_query(query)
        if not match:
            return []
        sql = (
            "SELECT m.session_id, m.seq, m.role, m.content, s.title"
            " FROM messages m JOIN sessions s ON s.session_id = m.session_id"
            " WHERE m.fts @@ %s::tsquery AND s.status != 'deleted'"
        )
        args: list[Any] = [match]
        if user_id is not None:
            sql += " AND s.user_id = %s"
            args.append(user_id)
        sql += " ORDER BY m.created_at DESC, m.session_id, m.seq DESC LIMIT %s"
        return ranked_hits(query, self._query(sql, [*args, SEARCH_MAX_MATCHES]), limit)



def _configure(conn: psycopg.Connection[Any]) -> None:
    """Each pooled connection: ISO dates in UTC (CURRENT_TIMESTAMP as SQLite's), and
    timestamps and JSON loaded as text."""
    conn.execute("SET datestyle = 'ISO, YMD'")
    conn.execute("SET timezone = 'UTC'")
    for name in ("timestamp", "json"):
        conn.adapters.register_loader(name, _TextLoader)


def migrate(conn: psycopg.Connection[Any], where: str = "archive") -> int:
    """Bring the schema up to SCHEMA_VERSION in place, one step at a time, each in the same
    transaction as its version bump; concurrent openers wait on an advisory lock. Returns the
    version found (0: a new database)."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        row = conn.execute("SELECT max(version) AS v FROM schema_version").fetchone()
        found = int(row["v"] or 0) if row else 0
        if found > SCHEMA_VERSION:
            raise BackendUnavailableError(
                f"archive {where} has schema version {found}, newer than this hermes-redis "
                f"understands ({SCHEMA_VERSION}); upgrade hermes-redis")
        for version in range(found + 1, SCHEMA_VERSION + 1):
            conn.execute(MIGRATIONS[version])
            if version == 9:
                _index_for_recall(conn)
            conn.execute("DELETE FROM schema_version")
            conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (version,))
    return found


def _insert_index(conn: psycopg.Connection[Any], rows: list[tuple[str, str, int, int, int]]) -> None:
    """``recall_index`` rows in one statement."""
    if rows:
        conn.execute("INSERT INTO recall_index SELECT * FROM unnest(%s::text[], %s::text[],"
                     " %s::int[], %s::int[], %s::int[]) ON CONFLICT DO NOTHING",
                     [list(col) for col in zip(*rows, strict=True)])


def _index_for_recall(conn: psycopg.Connection[Any]) -> None:
    """Schema 9 (issue 31): ``recall_index`` from every archived message, in the
    migration's transaction."""
    with conn.cursor(name="hermes_recall_index") as cur:  # server-side: any archive size
        cur.execute("SELECT session_id, seq, content FROM messages ORDER BY session_id, seq")
        while batch := cur.fetchmany(2000):
            _insert_index(conn, [r for row in batch for r in recall_index_rows(
                row["session_id"], [(row["seq"], row["content"])])])


def schema_version(conn: psycopg.Connection[Any]) -> int:
    """The schema version of the database ``conn`` is on (0: not created yet)."""
    exists = conn.execute("SELECT to_regclass('schema_version') IS NOT NULL AS e").fetchone()
    if not exists or not _value(exists):
        return 0
    row = conn.execute("SELECT max(version) AS v FROM schema_version").fetchone()
    return int(_value(row) or 0) if row else 0


def probe(url: str, timeout: float = 5.0) -> tuple[str, int, bool]:
    """(server version, schema version, whether this user may write the archive's tables),
    read without writing anything: what ``doctor`` reports."""
    where = redact_url(url)
    try:
        with psycopg.connect(url, connect_timeout=max(1, round(timeout))) as conn:
            info = conn.info.parameter_status("server_version") or "?"
            version = schema_version(conn)
            row = conn.execute("SELECT has_table_privilege('messages', 'INSERT, UPDATE, DELETE')"
                               " AND has_table_privilege('sessions', 'INSERT, UPDATE')"
                               ).fetchone() if version else (True,)
            return info, version, bool(row and _value(row))
    except psycopg.Error as err:
        text = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise BackendUnavailableError(f"cannot reach the archive at {where} ({text})") from None


def _value(row: Any) -> Any:
    return next(iter(row.values())) if isinstance(row, dict) else row[0]
