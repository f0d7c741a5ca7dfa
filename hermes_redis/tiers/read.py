"""Reading across the tiers: a session's history (archived and hot, each message once, in seq
order), its newest messages, its turns, and a page of the session listing with live counts.
Nothing here writes."""

from __future__ import annotations

import base64
import json
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

from hermes_redis.core.errors import AmbiguousIdError, NotFoundError, ValidationError
from hermes_redis.core.models import Message, SessionInfo, SessionMeta
from hermes_redis.store.archive import ArchiveStore
from hermes_redis.store.hot import HotStore
from hermes_redis.store.vectors import VectorIndex


def split_turns(messages: list[Message]) -> list[list[Message]]:
    """A turn starts at a user message and runs until the next one."""
    turns: list[list[Message]] = []
    for m in messages:
        if m.role == "user" or not turns:
            turns.append([m])
        else:
            turns[-1].append(m)
    return turns


class Reader:
    def __init__(self, hot: HotStore, cold: ArchiveStore,
                 vectors: VectorIndex | None = None) -> None:
        self.hot, self.cold = hot, cold
        self.vectors = vectors  # issue 31: None: recall by words only

    def history(self, sid: str, upto_seq: int | None = None, after_seq: int = 0,
                limit: int | None = None) -> list[Message]:
        """Archived and hot messages with ``after_seq < seq <= upto_seq`` in seq order, each
        once (a message being flushed is in both tiers); ``limit``: the first ``limit`` of
        them, reading at most that many from the archive."""
        # The hot tier first: a message trimmed from it meanwhile was archived before the trim,
        # so the archive read after it has it (the other order could miss it in both).
        hot = [m for m in self.hot.messages(sid)
               if m.seq > after_seq and (upto_seq is None or m.seq <= upto_seq)]
        archived = (self.cold.messages(sid, after_seq, upto_seq) if limit is None
                    else [m for m in self.cold.first(sid, after_seq, limit)
                          if upto_seq is None or m.seq <= upto_seq])
        by_seq = {m.seq: m for m in archived}
        for m in hot:
            by_seq.setdefault(m.seq, m)
        merged = [by_seq[s] for s in sorted(by_seq)]
        return merged if limit is None else merged[:limit]

    def newest(self, sid: str, n: int) -> list[Message]:
        """The last ``n`` messages of the history in seq order: the hot list's tail (a suffix
        of the history), then, when it holds fewer, the archived ones before it."""
        hot: list[Message] = []
        for m in self.hot.tail(sid, page_size=min(n, 256)):
            hot.append(m)
            if len(hot) == n:
                break
        hot.reverse()
        if len(hot) < n:
            below = hot[0].seq if hot else 2**63 - 1
            older = list(self.cold.before(sid, below, 0, n - len(hot)))
            hot = older[::-1] + hot
        return hot

    # the archive alone, for the context's older conversation (``context.history``)
    def first(self, sid: str, after_seq: int, limit: int) -> list[Message]:
        return self.cold.first(sid, after_seq, limit)

    def before(self, sid: str, before_seq: int, after_seq: int, limit: int) -> Iterator[Message]:
        return self.cold.before(sid, before_seq, after_seq, limit)

    def recall(self, sid: str, query: str, after_seq: int, before_seq: int, limit: int,
               within: tuple[float, float] | None = None) -> Iterator[Message]:
        """Best first: by words, fused with the nearest by meaning when embeddings are on
        (not within a named day: the day's messages are found by words)."""
        if self.vectors is None:
            return self.cold.recall(sid, query, after_seq, before_seq, limit, within)
        near = [] if within is not None else self.vectors.nearest(sid, query, after_seq,
                                                                  before_seq, limit)
        return self.cold.recall(sid, query, after_seq, before_seq, limit, within, near,
                                self.vectors.weight)

    def turns(self, sid: str) -> tuple[int, int]:
        """(turns in the stored history, turns the summary covers), counted by the archive's
        index plus the hot tier's unarchived messages; a turn starts at a user message."""
        meta = self.hot.meta(sid)
        if meta is None:
            row = self.cold.session(sid)
            if row is None:
                raise NotFoundError(f"no session {sid}; see `hermes-redis session list`")
            meta = SessionMeta.from_row(row)
            within = 2**63 - 1  # not in the hot tier: the archive holds all of it
        else:
            within = meta.flushed_seq
        archived, covered = self.cold.turn_starts(sid, meta.summary_seq, within)
        turns, first = archived, None
        for m in self.hot.tail(sid, page_size=256) if within < 2**63 - 1 else ():
            if m.seq <= within:
                break
            starts = m.role == "user"
            if not starts and not archived:  # the history's first message starts a turn too
                first = self._first_seq(sid) if first is None else first
                starts = m.seq == first
            if starts:
                turns += 1
                covered += m.seq <= meta.summary_seq
        return turns, covered

    def _first_seq(self, sid: str) -> int:
        seqs = [m.seq for m in self.cold.first(sid, 0, 1) + self.hot.page(sid, 0, 1 << 30)[:1]]
        return min(seqs, default=0)

    def resolve(self, prefix: str, user_id: str | None = None) -> str:
        """A full session id from a unique prefix (as typed on the command line); with
        ``user_id``, among that user's sessions only: no other's is matched or counted."""
        if user_id is None and (self.cold.session(prefix) is not None
                                or self.hot.meta(prefix) is not None):
            return prefix
        # every session has an archive row; issue 34: only user_id's
        found = self.cold.session_ids_like(prefix, user_id=user_id)
        if prefix in found:
            return prefix
        if not found:
            raise NotFoundError(f"no session matches {prefix!r}; see `hermes-redis session list`")
        if len(found) > 1:
            shown = ", ".join(found[:5])
            count = self.cold.count_ids_like(prefix, user_id=user_id)
            raise AmbiguousIdError(f"{prefix!r} matches {count} sessions ({shown}); type more")
        return found[0]

    def sessions(self, user_id: str | None, status: str | None, limit: int | None,
                 cursor: str | None) -> tuple[list[SessionInfo], str | None]:
        """One page of the listing, newest activity first, live counts from the hot tier, and
        the cursor of the next page (None: the last). An index range in the archive and one
        hot round trip."""
        after = cursor_key(cursor) if cursor is not None else None
        rows = self.cold.sessions_page(user_id, status, -1 if limit is None else limit + 1, after)
        more = limit is not None and len(rows) > limit
        rows = rows[:limit] if limit is not None else rows
        sids = [r["session_id"] for r in rows]
        infos = []
        for sid, row, meta in zip(sids, rows, self.hot.metas(sids), strict=True):
            if meta is not None:
                infos.append(SessionInfo.of(sid, meta))
            else:
                infos.append(SessionInfo.of(sid, SessionMeta.from_row(row), tier="archive",
                                            archived_count=int(row["message_count"] or 0)))
        return infos, cursor_of(rows[-1]) if more and rows else None


class Owners:
    """The user each session belongs to. Sessions never change user, so the newest ``size``
    are cached (threads share it: the HTTP server's pool); knowing it lets the next read fetch
    the user's cached memories in the same round trip as the session."""

    def __init__(self, hot: HotStore, cold: ArchiveStore, size: int = 10_000) -> None:
        self.hot, self.cold, self.size = hot, cold, size
        self._users: OrderedDict[str, str] = OrderedDict()  # session id -> its user
        self._lock = threading.Lock()
        self.known = self._users.get  # the cached user, else None; no round trip

    def note(self, sid: str, user: str) -> None:
        with self._lock:  # another thread's trim between these steps: a KeyError
            self._users[sid] = user
            self._users.move_to_end(sid)
            while len(self._users) > self.size:
                self._users.popitem(last=False)

    def drop(self, sid: str) -> None:
        self._users.pop(sid, None)

    def of(self, sid: str) -> str:
        """The session's user, from the cache, else the hot tier, else the archive (neither
        loads it); NotFoundError when no tier knows the session."""
        user = self._users.get(sid)
        if user is None:
            meta = self.hot.meta(sid)
            row = self.cold.session(sid) if meta is None else None
            if meta is None and row is None:
                raise NotFoundError(f"no session {sid}; see `hermes-redis session list`")
            user = meta.user_id if meta is not None else (row or {}).get("user_id") or ""
            self.note(sid, user)
        return user


def cursor_of(row: dict[str, Any]) -> str:
    raw = json.dumps([row["updated_at"], row["session_id"]]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def cursor_key(cursor: str) -> tuple[str, str]:
    """The (updated_at, session_id) a cursor stands for; a bad one is a ValidationError."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        updated, sid = json.loads(raw)
        if isinstance(updated, str) and isinstance(sid, str):
            return updated, sid
    except (ValueError, TypeError):
        pass
    raise ValidationError(f"cursor {cursor[:40]!r} is not one a listing returned; "
                          "pass the next_cursor of the previous page")
