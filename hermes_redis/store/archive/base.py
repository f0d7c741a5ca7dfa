"""What the rest of hermes-redis asks of a cold tier (``ArchiveStore``), and the schema and
limits both archives share."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from hermes_redis.core.models import Memory, Message, SearchHit

# 1: the seed's tables; 2: sessions.cleared_seq; 3: the listing indexes (user, status, time);
# 4: messages.item (a framework's structured message, JSON text, NULL for none);
# 5: memories.seq/kind/topic/superseded_by and memory_sources (extracted memories);
# 6: fts_terms (every term the full-text index holds, for search's prefix expansion);
# 7: messages and tombstones keyed (session_id, message_id): an id names a message within
# its session only, so one reused in another session never shadows nor deletes it (issue 35);
# 8: sessions.parent_session_id/forked_at_seq (the lineage of a continued or forked session);
# 9: recall_index, recall's own postings keyed (session_id, term, seq), so one session's
# recall reads that session's rows only, whatever the archive holds (issue 31);
# 10: message_vectors, memories.vec/vec_model and sessions.vector_version: embeddings for
# recall by meaning (issue 31), each stored with the key of the model that made it.
# Upgraded in place on open (PRAGMA user_version).
SCHEMA_VERSION = 10
# Columns added after version 1, by table: added in place to an older archive.
ADDED_COLUMNS = {
    "sessions": {"cleared_seq": "INTEGER DEFAULT 0", "parent_session_id": "TEXT",
                 "forked_at_seq": "INTEGER", "vector_version": "INTEGER DEFAULT 0"},
    "messages": {"item": "JSON"},
    "memories": {"seq": "INTEGER", "kind": "TEXT DEFAULT 'explicit'", "topic": "TEXT",
                 "superseded_by": "TEXT", "vec": "BLOB", "vec_model": "TEXT"},
}
SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (session_id TEXT PRIMARY KEY, user_id TEXT, title TEXT,
  created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP, updated_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
  total_tokens INTEGER DEFAULT 0, message_count INTEGER DEFAULT 0,
  status TEXT DEFAULT 'active', summary TEXT,
  summary_seq INTEGER DEFAULT 0, last_seq INTEGER DEFAULT 0, cleared_seq INTEGER DEFAULT 0,
  parent_session_id TEXT, forked_at_seq INTEGER);
CREATE TABLE IF NOT EXISTS messages (message_id TEXT NOT NULL,
  session_id TEXT NOT NULL REFERENCES sessions(session_id),
  role TEXT NOT NULL, content TEXT NOT NULL, token_count INTEGER, tool_calls JSON,
  file_refs JSON, memory_refs JSON, created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
  seq INTEGER NOT NULL, item JSON, PRIMARY KEY (session_id, message_id));
CREATE INDEX IF NOT EXISTS idx_messages_session ON messages(session_id, created_at);
CREATE UNIQUE INDEX IF NOT EXISTS idx_messages_seq ON messages(session_id, seq);
CREATE INDEX IF NOT EXISTS idx_sessions_user ON sessions(user_id, updated_at);
CREATE INDEX IF NOT EXISTS idx_sessions_user_page ON sessions(user_id, status, updated_at, session_id);
CREATE INDEX IF NOT EXISTS idx_sessions_page ON sessions(status, updated_at, session_id);
CREATE TABLE IF NOT EXISTS tombstones (message_id TEXT NOT NULL, session_id TEXT NOT NULL,
  seq INTEGER, forgotten_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
  PRIMARY KEY (session_id, message_id));
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
CREATE TABLE IF NOT EXISTS fts_terms (term TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS recall_index (session_id TEXT NOT NULL, term TEXT NOT NULL,
  seq INTEGER NOT NULL, tf INTEGER NOT NULL, dl INTEGER NOT NULL,
  PRIMARY KEY (session_id, term, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS message_vectors (session_id TEXT NOT NULL, seq INTEGER NOT NULL,
  model TEXT NOT NULL, vec BLOB NOT NULL, PRIMARY KEY (session_id, seq)) WITHOUT ROWID;
"""
# Recall leaves out query terms found in more of the session's archived messages than this:
# their postings would cost more to rank than they say (BM25 weighs them low), and with them
# left out a recall in a 200,000-message session costs what it costs in a 200-message one.
# It counts at most this many + 1 postings a term and ranks at most that many a kept term, of
# that session only. 256 (issue 31 part 2; 10,000 before): a recall of four common words at
# 100,000 turns read 4 × 10,001 index entries and ranked 10,001, ten times a 100-turn one;
# the LoCoMo quality bench held (docs/benchmarks.md, "Recall scoped to its session").
RECALL_MAX_POSTINGS = 256
# Search ranks at most this many matches, the newest archived: a word found in more
# messages than this ranks its newest ones, so a search costs about the same over a
# million messages as over a thousand (FTS5's bm25() and ts_rank cost O(matches)).
SEARCH_MAX_MATCHES = 2_000
# FTS5 answers a prefix phrase ("deploy"*) by merging the postings of every term with that
# prefix: O(matches), however few rows are asked for. Search looks the prefix up in
# fts_terms instead and asks for the exact terms (lazy, newest first), when there are at most
# this many; a shorter, commoner prefix keeps FTS5's own prefix query.
SEARCH_MAX_EXPANSION = 64
KNOWN_TERMS_HELD = 100_000  # terms a process remembers it put in fts_terms

@dataclass(frozen=True)
class Forgotten:
    message_id: str
    seq: int
    token_count: int


class ArchiveStore(Protocol):
    """What the rest of hermes-redis asks of a cold tier: ``Archive`` (SQLite, embedded) and
    ``archive_pg.PostgresArchive`` both answer it, and ``tests/test_archive.py`` holds each to
    the same behaviour. ``store.open.open_archive(config)`` picks one."""

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
    def add_source(self, memory_id: str, session_id: str, seq: int,
                   message_id: str | None = None) -> None: ...
    def move_sources(self, sid: str, moves: Sequence[tuple[int, int, Sequence[str]]]) -> None: ...
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
    def session_ids_like(self, prefix: str, limit: int = 6,
                         user_id: str | None = None) -> list[str]: ...  # issue 34: user_id
    def count_ids_like(self, prefix: str, user_id: str | None = None) -> int: ...
    def neighbours(self, sids: Sequence[str]) -> set[str]: ...
    def messages(self, sid: str, after_seq: int = 0,
                 upto_seq: int | None = None) -> list[Message]: ...
    def first(self, sid: str, after_seq: int, limit: int) -> list[Message]: ...
    def before(self, sid: str, before_seq: int, after_seq: int,
               limit: int) -> Iterator[Message]: ...
    def recall(self, sid: str, query: str, after_seq: int, before_seq: int,
               limit: int, within: tuple[float, float] | None = None,
               near: Sequence[int] = (), near_weight: float = 1.0) -> Iterator[Message]: ...
    # issue 31: vectors, each stored with the key of the model that made it
    def put_vectors(self, sid: str, model: str, rows: Sequence[tuple[int, bytes]]) -> int: ...
    def unembedded(self, sid: str, model: str, newest: int) -> list[tuple[int, str]]: ...
    def vectors(self, sid: str, model: str, after_seq: int = 0) -> list[tuple[int, bytes]]: ...
    def vector_version(self, sid: str) -> int: ...
    def put_memory_vectors(self, model: str, rows: Sequence[tuple[str, bytes]]) -> None: ...
    def memory_vectors(self, user_id: str, model: str) -> dict[str, bytes]: ...
    def unembedded_memories(self, user_id: str, model: str, limit: int) -> list[tuple[str, str]]: ...
    def newest(self, sid: str, after_seq: int, limit: int) -> list[Message]: ...
    def stats(self, sid: str) -> tuple[int, int, int]: ...
    def turn_starts(self, sid: str, upto_seq: int, within: int) -> tuple[int, int]: ...
    def reseat_needed(self, sid: str, messages: Sequence[Message]) -> tuple[int, int]: ...
    def high_seqs(self, sids: Sequence[str]) -> dict[str, int]: ...
    def tombstoned(self, sid: str) -> dict[str, int]: ...
    def by_ids(self, sid: str, message_ids: Sequence[str]) -> tuple[dict[str, Message], set[str]]:
        """The session's archived messages with these ids (by id), and those of the ids its
        tombstones hold (forgotten): where a retried append looks once the hot keys are gone."""
    def memories(self, user_id: str, superseded: bool = False) -> list[Memory]: ...
    def search(self, query: str, user_id: str | None = None,
               limit: int = 20) -> list[SearchHit]:
        """The best ``limit`` of the newest SEARCH_MAX_MATCHES matching messages, ranked by
        ``ranked_hits``."""
