"""Hermes Agent's ``state.db`` into hermes-redis: every session (title, user, times) and every
message in order with its tool calls — the rows Hermes marked compacted or inactive
included — read in pages, so memory stays bounded whatever the file's size.

Each Hermes session becomes the hermes-redis session ``ids.session_id_for`` names, its
messages carrying the ids the memory provider gives them (``turns.rows``, counted over the
session's messages in order). A session already stored is skipped; one whose stored
messages are the first of its rows (an import cut short) gets the rest. So a second run
adds nothing."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermes_redis.core.api import SessionAPI
from hermes_redis.core.errors import NotFoundError, ValidationError
from hermes_redis.integrations.hermes_agent.ids import Occurrences, session_id_for
from hermes_redis.integrations.hermes_agent.turns import ROLES, row_of

PAGE = 64  # messages read, and appended, at a time


@dataclass
class Report:
    """What an import did."""

    sessions: int = 0  # created
    resumed: int = 0  # an earlier import's rest appended
    skipped: int = 0  # stored already
    messages: int = 0
    problems: list[str] = field(default_factory=list)

    def line(self) -> str:
        text = (f"imported {self.sessions} session{'s' * (self.sessions != 1)} and "
                f"{self.messages} message{'s' * (self.messages != 1)}; "
                f"{self.skipped} already there")
        if self.resumed:
            text += f", {self.resumed} completed"
        if self.problems:
            text += f"; {len(self.problems)} not imported (see above)"
        return text


def open_state(path: str | Path) -> sqlite3.Connection:
    """``path`` read-only (Hermes may be running); a ValidationError of one line if it is not
    a Hermes ``state.db``."""
    p = Path(path)
    if not p.is_file():
        raise ValidationError(f"{p}: no such file (Hermes keeps it at $HERMES_HOME/state.db)")
    try:
        db = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
        db.row_factory = sqlite3.Row
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.DatabaseError as err:
        raise ValidationError(f"{p}: not an SQLite database ({err})") from None
    if not {"sessions", "messages"} <= names:
        raise ValidationError(f"{p}: not a Hermes state.db (no sessions and messages tables)")
    return db


def _messages(db: sqlite3.Connection, hermes_id: str) -> Iterator[dict[str, Any]]:
    """The session's rows in order, as Hermes messages with their time."""
    last = -1
    while True:
        page = db.execute("SELECT id, role, content, tool_call_id, tool_calls, tool_name, "
                          "timestamp FROM messages WHERE session_id=? AND id>? ORDER BY id "
                          "LIMIT ?", (hermes_id, last, PAGE)).fetchall()
        if not page:
            return
        for r in page:
            last = r["id"]
            if r["role"] not in ROLES:
                continue
            m: dict[str, Any] = {"role": r["role"], "content": r["content"] or ""}
            if r["tool_calls"]:
                with contextlib.suppress(ValueError):
                    m["tool_calls"] = json.loads(r["tool_calls"])
            if r["tool_call_id"]:
                m["tool_call_id"] = r["tool_call_id"]
            if r["role"] == "tool" and r["tool_name"]:
                m["name"] = r["tool_name"]
            m["_at"] = r["timestamp"]
            yield m


def import_state(api: SessionAPI, path: str | Path, user_id: str | None = None,
                 progress: Callable[[str], None] | None = None) -> Report:
    """Import every session of the ``state.db`` at ``path`` (``user_id``: the owner of all;
    else each session's user, else "default")."""
    db = open_state(path)
    report = Report()
    try:
        total = db.execute("SELECT count(*) FROM sessions").fetchone()[0]
        done = 0
        cursor = db.execute("SELECT id, user_id, title, started_at FROM sessions "
                            "ORDER BY started_at, id")
        while True:
            batch = cursor.fetchmany(PAGE)
            if not batch:
                break
            for s in batch:
                _one(api, db, s, user_id, report)
                done += 1
                if progress and (done % 25 == 0 or done == total):
                    progress(f"{done}/{total} sessions, {report.messages} messages")
    finally:
        db.close()
    return report


def _rows(namespace: str, messages: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Rows with the provider's ids (``turns.rows``), counted as they stream by."""
    seen = Occurrences(namespace)
    for m in messages:
        at = m.pop("_at", None)
        row = row_of(m, seen.id_for(str(m["role"]), m.get("content"), m.get("tool_call_id"),
                                    m.get("tool_calls")))
        if isinstance(at, int | float) and not isinstance(at, bool) and 0 <= at < 253402300800:
            row["created_at"] = at
        if "content" not in row and not isinstance(m.get("content"), list):
            row["content"] = "(empty)"  # Hermes keeps empty replies; a message needs text
        yield row


def _one(api: SessionAPI, db: sqlite3.Connection, s: sqlite3.Row, user_id: str | None,
         report: Report) -> None:
    hermes_id = str(s["id"])
    sid = session_id_for(hermes_id)
    owner = user_id or s["user_id"] or "default"
    namespace = f"{sid}/{hermes_id}/0"  # what the provider counts this session's ids in
    stream = _rows(namespace, _messages(db, hermes_id))
    try:
        stored = [m.message_id for m in api.messages(sid)]
    except NotFoundError:
        stored = None
    if stored is None:
        try:
            api.create_session(user_id=owner, title=str(s["title"] or "")[:200], session_id=sid)
        except ValidationError as err:
            report.problems.append(f"session {hermes_id}: {err}")
            return
        report.sessions += 1
        first: list[dict[str, Any]] = []
    else:
        prefix = [next(stream, None) for _ in stored]
        if any(r is None or r["message_id"] != mid for r, mid in zip(prefix, stored,
                                                                       strict=True)):
            report.skipped += 1  # written another way (the provider, by hand): left alone
            return
        nxt = next(stream, None)
        if nxt is None:
            report.skipped += 1
            return
        first = [nxt]
        report.resumed += 1
    page = first
    for row in stream:
        page.append(row)
        if len(page) == PAGE:
            api.append_many(sid, page)
            report.messages += len(page)
            page = []
    if page:
        api.append_many(sid, page)
        report.messages += len(page)
