"""The cold tier: a SQLite archive that is the durable record of every session.

The ``sessions`` and ``messages`` tables keep the Hermes schema (tools written for it
keep working) plus a ``seq`` column, tombstones, persistent memories and FTS5 search.
WAL mode and a busy timeout let workers, the CLI and agents use one file at once.
"""

from __future__ import annotations

import datetime
import itertools
import os
import re
import sqlite3
import threading
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from hermes_redis.archive_sql import SQLArchive, _json_list, _ts, rare_terms
from hermes_redis.errors import BackendUnavailableError
from hermes_redis.models import Memory, Message
from hermes_redis.models import parse_ts as parse_ts  # where the tests and callers import it

# 1: the seed's tables; 2: sessions.cleared_seq; 3: the listing indexes (user, status, time);
# 4: messages.item (a framework's structured message, JSON text, NULL for none);
# 5: memories.seq/kind/topic/superseded_by and memory_sources (extracted memories);
# 6: fts_terms (every term the full-text index holds, for search's prefix expansion).
# Upgraded in place on open (PRAGMA user_version).
SCHEMA_VERSION = 6
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
CREATE TABLE IF NOT EXISTS fts_terms (term TEXT PRIMARY KEY) WITHOUT ROWID;
"""
# Recall leaves out query terms found in more archived messages than this: their postings
# would cost more to rank than they say (BM25 weighs them near zero), and with them left
# out a recall over a million messages costs about what it costs over a thousand.
RECALL_MAX_POSTINGS = 10_000
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

# CJK text has no spaces between words; index each character so any substring is a phrase.
_CJK_CHARS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_CJK = re.compile(f"([{_CJK_CHARS}])")
# What _TOKENS finds in fts_text(text), in one pass: a run of letters and digits other than
# CJK characters, or one CJK character.
_FTS_TOKEN = re.compile(f"[^\\W_{_CJK_CHARS}]+|[{_CJK_CHARS}]")


def fts_text(text: str) -> str:
    return _CJK.sub(r" \1 ", text)


def fts_tokens(text: str) -> list[str]:
    """The tokens FTS5 indexes ``text`` under (unicode61 with each CJK character on its own,
    as ``fts_text`` spaces them), lower-cased."""
    return _FTS_TOKEN.findall(text.lower())


def _spaced(tokens: list[str]) -> str:
    """Tokens as one string, each after a space: a phrase's tokens, the last one a prefix,
    occur in order in a text exactly where ``_spaced(phrase)`` is a substring of
    ``_spaced(text)`` (tokens hold no spaces), so ``str.find`` does the scan in C."""
    return " " + " ".join(tokens)


def fts_query(query: str) -> str:
    """Each word of the query as a quoted prefix phrase (``auth`` finds "authentication",
    as the hot-tier scan does); user text is never FTS syntax."""
    phrases = []
    for word in query.split():
        parts = [p.replace('"', '""') for p in fts_text(word).split()]
        if parts and _TOKENS.search(word):  # a word of punctuation only has nothing to match
            phrases.append('"' + " ".join(parts) + '"*')
    return " AND ".join(phrases)


def fts_terms(texts: Iterable[str]) -> set[str]:
    """The terms FTS5's unicode61 indexes ``texts`` under, as ``fts_terms`` keeps them: each
    token lower-cased, and also without its diacritics (unicode61 removes them from Latin
    letters), so a prefix lookup finds every term the index may hold for it."""
    words = " ".join(set(" ".join(texts).split()))  # each word once: tokens never span a space
    if words.isascii():  # the common case, in C: bytes.translate then split
        return {t.decode() for t in set(words.encode().translate(_ASCII_TOKEN_BYTES).split())}
    out = set(fts_tokens(words))
    out.update([plain for plain in map(_without_diacritics, out) if plain])
    return out


# ASCII letters and digits lower-cased, every other byte a space: what _TOKENS finds in ASCII
_ASCII_TOKEN_BYTES = bytes(c if chr(c).isalnum() else 32 for c in range(256)).lower()


def _without_diacritics(token: str) -> str:
    if token.isascii():
        return token
    return "".join(c for c in unicodedata.normalize("NFD", token) if not unicodedata.combining(c))


def expanded_match(query: str, terms_with_prefix: Callable[[str], list[str] | None]) -> str:
    """``fts_query(query)`` with each phrase's final prefix replaced by the exact terms
    ``terms_with_prefix(prefix)`` returns (None: too many, keep the prefix query). An ASCII
    prefix only: unicode61 folds other letters in ways a lookup would have to copy. The
    same rows match either way; '' when some word can match nothing."""
    phrases = []
    for word in query.split():
        tokens = fts_tokens(word)
        if not tokens:
            continue
        head, last = tokens[:-1], tokens[-1]
        terms = terms_with_prefix(last) if last.isascii() else None
        if terms is None:
            phrases.append('"' + " ".join(tokens) + '"*')
        elif not terms:
            return ""
        else:
            phrases.append("(" + " OR ".join('"' + " ".join([*head, t]) + '"' for t in terms)
                           + ")")
    return " AND ".join(phrases)


def fts_matches(query: str, text: str) -> bool:
    """Whether the archive's ``MATCH fts_query(query)`` would find ``text``: every query
    word's tokens appear consecutively in it, the last as a prefix (unicode61: lower-cased
    runs of letters and digits, each CJK character on its own). The hot tier's search uses
    it, so a message gives the same hits before and after it is archived."""
    wants = [_spaced(w) for w in map(fts_tokens, query.split()) if w]
    if not wants:
        return False  # fts_query(query) is empty: the archive finds nothing either
    spaced = _spaced(fts_tokens(text))
    return all(want in spaced for want in wants)


_TOKENS = re.compile(r"[^\W_]+")


def ranked_hits(query: str, rows: Sequence[Mapping[str, Any]], limit: int) -> list[SearchHit]:
    """The best ``limit`` of ``rows`` (messages that match ``query``, with their session's
    title) by BM25 over the rows themselves: a query word said more often, in a shorter
    message, ranks higher; ties newest first (``rows`` come newest first). Both archives
    rank a search this way, so they give the same hits in the same order."""
    wants = [_spaced(w) for w in map(fts_tokens, query.split()) if w]
    docs = [fts_tokens(r["content"]) for r in rows]
    if not docs or not wants:
        return []
    k1, b = 1.2, 0.75
    mean = sum(map(len, docs)) / len(docs) or 1.0
    scores: list[tuple[float, int]] = []
    for i, tokens in enumerate(docs):
        norm = k1 * (1 - b + b * len(tokens) / mean)
        spaced = _spaced(tokens)
        score = 0.0
        for want in wants:
            tf = _occurrences(spaced, want)
            score += tf * (k1 + 1) / (tf + norm)
        scores.append((-score, i))
    return [SearchHit(rows[i]["session_id"], rows[i]["seq"], rows[i]["role"],
                      snippet(rows[i]["content"], query), rows[i]["title"] or "", -neg)
            for neg, i in sorted(scores)[:limit]]


def _occurrences(spaced: str, want: str) -> int:
    """How many times ``want`` occurs in ``spaced``, overlapping ones too ("a a" is twice
    in "a a a", as the token scan counted it)."""
    count, at = 0, spaced.find(want)
    while at >= 0:
        count += 1
        at = spaced.find(want, at + 1)
    return count


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


_MONTH = ("january", "february", "march", "april", "may", "june", "july", "august",
          "september", "october", "november", "december")
_MONTHS = {name: i for i, m in enumerate(_MONTH, 1) for name in (m, m[:3])}
_MONTH_RE = "(" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DATES = (  # (pattern, group order as day, month, year)
    (re.compile(r"\b(\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?" + _MONTH_RE + r",?\s+(\d{4})\b", re.I),
     (1, 2, 3)),
    (re.compile(r"\b" + _MONTH_RE + r"\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})\b", re.I), (2, 1, 3)),
    (re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})(?!\d)"), (3, 2, 1)),  # and 2023-10-13T09:30
    (re.compile(r"(\d{4})\s*年\s*(\d{1,2})\s*月\s*(\d{1,2})\s*[日号]"), (3, 2, 1)),
)
_DAYS_AGO = (  # (pattern, days before today; None: the number the pattern holds)
    (re.compile(r"\b(?:the )?day before yesterday\b|前天", re.I), 2),
    (re.compile(r"\byesterday\b|昨天|昨日", re.I), 1),
    (re.compile(r"\btoday\b|今天|今日", re.I), 0),
    (re.compile(r"\b(\d{1,3}) days? ago\b|(\d{1,3})\s*天(?:以)?前", re.I), None),
)
DAY = 86_400


def named_day(query: str, now: float | None = None) -> tuple[float, float] | None:
    """The span of the first day ``query`` names as Unix seconds, a day wider on each side
    (the archive keeps UTC, the user meant their own day): a calendar date ("13 October
    2023", "October 13, 2023", "2023-10-13", "2023年10月13日") or, given ``now``, a day
    counted back from it ("today", "yesterday", "3 days ago", "昨天", "3天前"). None when
    it names no valid day."""
    found: list[tuple[int, datetime.date]] = []
    for pattern, (d, m, y) in _DATES:
        match = pattern.search(query)
        if match is None:
            continue
        month = match.group(m)
        try:
            found.append((match.start(), datetime.date(
                int(match.group(y)), int(month) if month.isdigit() else _MONTHS[month.lower()],
                int(match.group(d)))))
        except ValueError:  # 31 February, month 13
            continue
    if now is not None:
        today = datetime.datetime.fromtimestamp(now, datetime.UTC).date()
        for pattern, back in _DAYS_AGO:
            match = pattern.search(query)
            if match is not None:
                days = back if back is not None else int(match.group(1) or match.group(2))
                found.append((match.start(), today - datetime.timedelta(days=days)))
    if not found:
        return None
    day = min(found)[1]
    start = datetime.datetime.combine(day, datetime.time(), datetime.UTC).timestamp()
    return start - DAY, start + 2 * DAY


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
    def session_ids_like(self, prefix: str, limit: int = 6) -> list[str]: ...
    def count_ids_like(self, prefix: str) -> int: ...
    def neighbours(self, sids: Sequence[str]) -> set[str]: ...
    def messages(self, sid: str, after_seq: int = 0,
                 upto_seq: int | None = None) -> list[Message]: ...
    def first(self, sid: str, after_seq: int, limit: int) -> list[Message]: ...
    def before(self, sid: str, before_seq: int, after_seq: int,
               limit: int) -> Iterator[Message]: ...
    def recall(self, sid: str, query: str, after_seq: int, before_seq: int,
               limit: int, within: tuple[float, float] | None = None) -> Iterator[Message]: ...
    def newest(self, sid: str, after_seq: int, limit: int) -> list[Message]: ...
    def stats(self, sid: str) -> tuple[int, int, int]: ...
    def turn_starts(self, sid: str, upto_seq: int, within: int) -> tuple[int, int]: ...
    def reseat_needed(self, sid: str, messages: Sequence[Message]) -> tuple[int, int]: ...
    def high_seqs(self, sids: Sequence[str]) -> dict[str, int]: ...
    def tombstoned(self, sid: str) -> dict[str, int]: ...
    def memories(self, user_id: str, superseded: bool = False) -> list[Memory]: ...
    def search(self, query: str, user_id: str | None = None,
               limit: int = 20) -> list[SearchHit]:
        """The best ``limit`` of the newest SEARCH_MAX_MATCHES matching messages, ranked by
        ``ranked_hits``."""


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
            terms = fts_terms(content for _, content in added) - self._known_terms
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

    # --- search ----------------------------------------------------------------------------
    def recall(self, sid: str, query: str, after_seq: int, before_seq: int,
               limit: int, within: tuple[float, float] | None = None) -> Iterator[Message]:
        """The session's messages in after_seq < seq < before_seq that share words with
        ``query``, best BM25 rank first (any word may match; CJK by character pairs), each
        followed by the message after it (the reply that usually holds the answer).
        ``within``: only messages created in that span (Unix seconds, end excluded)."""
        terms = self._rare(recall_terms(query))
        if not terms:
            return iter(())
        span = " AND m.created_at >= ? AND m.created_at < ?" if within else ""
        rows = self._read(
            "SELECT m.* FROM messages_fts JOIN messages m ON m.rowid = messages_fts.rowid"
            " WHERE messages_fts MATCH ? AND m.session_id=? AND m.seq>? AND m.seq<?" + span +
            " ORDER BY bm25(messages_fts) LIMIT ?",
            (" OR ".join(terms), sid, after_seq, before_seq,
             *(map(_ts, within) if within else ()), limit))
        return self._with_replies(sid, rows, before_seq)

    def _rare(self, terms: list[str]) -> list[str]:
        """``terms`` less those in more than RECALL_MAX_POSTINGS messages. A phrase costs the
        postings of all its words."""
        return rare_terms(terms, self._postings, RECALL_MAX_POSTINGS)

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
    """(query, parameters) pairs that run each of ``sql``'s ``IN ({})`` over ``values`` 500 at
    a time, after the fixed ``args``."""
    lists = sql.count("{}")
    for i in range(0, len(values), 500):
        chunk = list(values[i : i + 500])
        yield sql.replace("{}", ",".join("?" * len(chunk))), [*args, *chunk * lists]


