"""A session's status and counters across the tiers: moving it between active and archived
(in both tiers), what ``info`` shows, and how far the archive lags behind the hot tier."""

from __future__ import annotations

import time
from dataclasses import replace

from hermes_redis.core.errors import NotFoundError, StateError
from hermes_redis.core.models import Message, SessionInfo, SessionMeta
from hermes_redis.store.archive import ArchiveStore
from hermes_redis.store.hot import HotStore
from hermes_redis.tiers.flush import Flusher
from hermes_redis.tiers.load import Loader


class Status:
    def __init__(self, hot: HotStore, cold: ArchiveStore, loader: Loader,
                 flusher: Flusher) -> None:
        self.hot, self.cold, self.loader, self.flusher = hot, cold, loader, flusher

    def set_status(self, sid: str, status: str, allowed_from: tuple[str, ...]) -> None:
        """Archive the backlog, then move the session to ``status`` in both tiers."""
        meta = self.loader.load(sid)
        if meta.status not in allowed_from:
            raise StateError(f"session {sid} is {meta.status}; cannot make it {status}")
        self.flusher.flush(sid)
        self.hot.set_fields(sid, SessionMeta.changes(status=status))
        self.cold.write(replace(meta, status=status).to_row(sid), [])
        self.cold.set_status(sid, status)

    def info(self, sid: str) -> SessionInfo:
        """The session's counters, status and tiers, from the hot tier when it is loaded, else
        from its archive row; it neither loads the session nor renews its TTL."""
        meta = self.hot.meta(sid)
        archived, _, _ = self.cold.stats(sid)
        if meta is not None:
            return SessionInfo.of(sid, meta, hot_count=self.hot.length(sid), archived_count=archived,
                                  ttl_left=self.hot.ttl_left(sid))
        row = self.cold.session(sid)
        if row is None:
            raise NotFoundError(f"no session {sid}; see `hermes-redis session list`")
        return SessionInfo.of(sid, SessionMeta.from_row(row), archived_count=archived, tier="archive")

    def backlog(self) -> tuple[int, int, float | None]:
        """(sessions holding unarchived messages, those messages, age in seconds of the oldest
        one or None). The age comes from the oldest backlog session's first unarchived
        message id (ids are time-ordered; a caller-chosen id can skew it)."""
        now = time.time()
        sids = self.hot.backlog_sessions(now)
        metas = self.hot.metas(sids) if sids else []
        count = sum(m.backlog for m in metas if m)
        oldest: float | None = None
        for sid, meta in zip(sids, metas, strict=True):
            if meta is None:
                continue
            first = self.first_unarchived(sid, meta)
            if first is not None:
                oldest = max(0.0, now - int(first.message_id[:12], 16) / 1000)
            break
        return len(sids), count, oldest

    def first_unarchived(self, sid: str, meta: SessionMeta) -> Message | None:
        """The session's oldest unarchived message in the hot list. Unarchived messages are
        its newest ``backlog`` seqs, so with none forgotten it is the entry that many from
        the end: one read, however long the list grew while the workers were down. A
        forget among them puts an archived entry there: then the tail is walked to it."""
        at = self.hot.page(sid, max(0, meta.backlog - 1), 1)
        if at and at[0].seq > meta.flushed_seq:
            return at[0]
        first = None
        for m in self.hot.tail(sid, page_size=256):
            if m.seq <= meta.flushed_seq:
                break
            first = m
        return first
