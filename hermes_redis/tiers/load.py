"""A session coming into the hot tier: created in both tiers at once, or loaded back from the
archive after its hot keys expired (never a deleted one)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from hermes_redis.core.config import Config
from hermes_redis.core.errors import NotFoundError, StateError, ValidationError
from hermes_redis.core.models import SessionMeta
from hermes_redis.store.archive import ArchiveStore
from hermes_redis.store.hot import HotRead, HotStore


class Loader:
    def __init__(self, config: Config, hot: HotStore, cold: ArchiveStore) -> None:
        self.config, self.hot, self.cold = config, hot, cold

    def create(self, sid: str, meta: SessionMeta, own_id: bool) -> None:
        """The session in the hot tier, then its archive row (so it is listed and found by
        prefix before its first flush). ``own_id``: the caller chose the id, which may be
        that of a deleted and purged session of the same user (see ``reuse``)."""
        if own_id and (row := self.cold.session(sid)) is not None:
            self.reuse(sid, row, meta.user_id)
        if not self.hot.create(sid, meta, self.config.session.ttl):
            raise ValidationError(f"session {sid} already exists; pick another id")
        self.cold.write(meta.to_row(sid), [])

    def reuse(self, sid: str, row: Mapping[str, Any], user_id: str) -> None:
        """Free the id of a deleted and purged session of the same user for a new session;
        any other existing id is an error that says why."""
        if row["status"] != "deleted":
            raise ValidationError(f"session {sid} already exists; pick another id")
        if (row["user_id"] or "") != user_id:  # another process may still map the id to its user
            raise ValidationError(f"session id {sid} belonged to another user; pick another id")
        kept = self.cold.stats(sid)[0]
        if kept:
            raise ValidationError(f"session {sid} was deleted but the archive keeps its {kept} "
                                  f"message(s); purge them (`hermes-redis session delete {sid} "
                                  "--purge`) to reuse the id")
        if not self.cold.reclaim(sid):  # another process took the id meanwhile
            raise ValidationError(f"session {sid} already exists; pick another id")
        self.hot.drop(sid)

    def load(self, sid: str) -> SessionMeta:
        """The session's live meta, loading it back into the hot tier from the archive after
        it expired; NotFoundError for no such session, StateError for a deleted one."""
        meta = self.hot.meta(sid)
        if meta is not None:
            return meta
        row = self.cold.session(sid)
        if row is None:
            raise NotFoundError(f"no session {sid}; see `hermes-redis session list`")
        if row["status"] == "deleted":  # a deleted session is never loaded back into Redis
            raise StateError(f"session {sid} is deleted; start a new session")
        self._hydrate(sid, row)
        meta = self.hot.meta(sid)
        if meta is None:
            raise NotFoundError(f"session {sid} vanished while loading; retry")
        return meta

    def read(self, sid: str, ttl: int | None, budget: int,
             user_id: str | None) -> tuple[HotRead, SessionMeta]:
        """``HotStore.read`` of a live session and its meta; an expired one is loaded back
        from the archive first, then read again (its status is the caller's to check)."""
        read = self.hot.read(sid, ttl, budget, user_id)
        if read.meta is not None:
            return read, read.meta
        self.load(sid)
        read = self.hot.read(sid, ttl, budget, user_id)
        return read, read.meta or self.load(sid)

    def _hydrate(self, sid: str, row: Mapping[str, Any]) -> None:
        """The hot tier rebuilt from the archive: counters from the archived messages and the
        newest unsummarized ones (at most ``max_messages``); everything in it is archived."""
        count, tokens, max_seq = self.cold.stats(sid)
        meta = SessionMeta.from_row(row)
        last = max(meta.last_seq, max_seq)
        meta = replace(meta, total_tokens=tokens, message_count=count, last_seq=last,
                       flushed_seq=last)
        newest = self.cold.newest(sid, meta.summary_seq, self.config.session.max_messages)
        self.hot.hydrate(sid, meta, newest, self.config.session.ttl)
