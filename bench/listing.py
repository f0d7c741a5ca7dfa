"""listing: the per-call cost of listing, prefix resolution, search, info, append and
context() as the number of sessions grows (issue 14's "listing at scale").

Sessions are bulk-loaded straight into the archive (one row each, two messages each, the rows
``create_session`` and a flush write), the way the context benchmark loads long histories;
then the library calls are timed against that archive and a private Redis. Each call's cost
should stay flat from the smallest to the largest count (target: within 1.5×).
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from bench.common import Section, make_config, median, percentile, quiet_gc, timed, times, us, verdict
from hermes_redis import SessionMemory
from hermes_redis.core.text import fts_text
from hermes_redis.store.archive.sqlite import _ts

TARGET = 1.5
SIZES = (10_000, 100_000, 1_000_000)
QUICK_SIZES = (1_000, 10_000)
WORDS = ("deploy", "postgres", "redis", "cluster", "review", "migration", "invoice", "backup")


def load(mem: SessionMemory, n: int) -> list[str]:
    """n sessions of 2 archived messages, 8 users, spread over a day; returns their ids."""
    mem.cold.stats("warm-up")  # creates the schema
    db = sqlite3.connect(mem.config.archive_path)
    now = time.time()
    sids = [uuid.uuid4().hex for _ in range(n)]
    sessions, messages, fts = [], [], []
    for i, sid in enumerate(sids):
        t = _ts(now - 86_400 + i * 86_400 / n)
        sessions.append((sid, f"u{i % 8}", f"session {i}", t, t, "active", 2, 20, 2))
        for seq in (1, 2):
            word = WORDS[(i + seq) % len(WORDS)]
            text = f"we talked about {word} number {i}, ticket T{i}X"
            messages.append((uuid.uuid4().hex, sid, "user" if seq == 1 else "assistant", text,
                             10, t, seq))
            fts.append(fts_text(text))
    with db:
        db.executemany("INSERT INTO sessions (session_id, user_id, title, created_at, updated_at,"
                       " status, message_count, total_tokens, last_seq) VALUES (?,?,?,?,?,?,?,?,?)",
                       sessions)
        db.executemany("INSERT INTO messages (message_id, session_id, role, content, token_count,"
                       " created_at, seq) VALUES (?,?,?,?,?,?,?)", messages)
        db.executemany("INSERT INTO messages_fts(rowid, body) VALUES (?, ?)",
                       list(enumerate(fts, start=1)))
        db.execute("INSERT INTO messages_fts(messages_fts) VALUES('optimize')")  # merged segments
        db.execute("INSERT OR IGNORE INTO fts_terms SELECT term FROM messages_vocab")  # as a flush
    db.close()
    return sids


def run(server: object, workdir: Path, quick: bool) -> Section:
    url = getattr(server, "url", None)
    sizes = QUICK_SIZES if quick else SIZES
    sec = Section("Listing at scale: per-call p50 (p99) as sessions grow",
                  ["call", *(f"{n:,} sessions" for n in sizes), "largest / smallest", "target ≤1.5×"])
    results: dict[str, list[tuple[float, float]]] = {}
    for n in sizes:
        mem = SessionMemory(make_config(url, workdir))
        sids = load(mem, n)
        probe = sids[n // 2]
        live = mem.create_session(user_id="u1")  # one in Redis too
        mem.append(live, "user", "a fresh message about backup")
        calls = _calls(mem, probe, n)
        calls["append (a live session)"] = lambda s=live, m=mem: m.append(s, "user", "and backup")
        calls["context() (a session loaded back from the archive)"] = \
            lambda p=probe, m=mem: m.context(p)
        cursor = None
        for _ in range(9):
            cursor = mem.list_sessions(limit=50, cursor=cursor).next_cursor
        calls["list, 10th page"] = lambda c=cursor, m=mem: m.list_sessions(limit=50, cursor=c)
        for name, fn in calls.items():
            fn()
            with quiet_gc():
                samples, _ = timed(fn, 20 if quick else 60)
            results.setdefault(name, []).append((median(samples), percentile(samples, 99)))
        mem.close()
    for name, cells in results.items():
        ratio = cells[-1][0] / cells[0][0]
        sec.add(name, *(f"{us(p50)} ({us(p99)})" for p50, p99 in cells), times(ratio),
                verdict(ratio <= TARGET))
    sec.note(NOTE)
    return sec


def _calls(mem: SessionMemory, probe: str, n: int) -> dict[str, Callable[[], object]]:
    return {
        "list, first page (50)": lambda: mem.list_sessions(limit=50),
        "list, one user's first page": lambda m=mem: m.list_sessions(user_id="u3", limit=50),
        "resolve an 8-char prefix": lambda p=probe: mem.resolve(p[:8]),
        "short ids of a page": lambda: mem.short_ids([i.session_id for i in mem.list_sessions(limit=50)]),
        "info": lambda p=probe: mem.info(p),
        "search, a word in 2 messages": lambda i=n // 3: mem.search(f"T{i}X", limit=20),
        "search, a word in 1/4 of all messages": lambda: mem.search("migration", limit=20),
    }


NOTE = ("Sessions bulk-loaded into the SQLite archive (2 messages each, 8 users; FTS index "
        "optimized, as its automerge keeps it); one live session in Redis. A page is an index "
        "range (`idx_sessions_page`, keyset cursor), a prefix an index range on the primary "
        "key, short ids two neighbour lookups per row; search is FTS5 over the archive plus the "
        "Redis backlog's unarchived messages only. Search ranks the newest 2,000 matches by BM25 "
        "(SEARCH_MAX_MATCHES), found through the prefix's exact terms (fts_terms), so a word in a "
        "quarter of all messages costs what 2,000 do.")
