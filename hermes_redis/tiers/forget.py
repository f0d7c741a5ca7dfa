"""Taking messages and sessions away in both tiers: forget, pop, clear and delete.

The archive goes first (its tombstones stop in-flight flushes from bringing a message back),
then the hot tier, then the summary is rebuilt if it covered what went (invariant 4).
"""

from __future__ import annotations

from hermes_redis.core.models import Message, SessionMeta
from hermes_redis.store.archive import ArchiveStore, Forgotten
from hermes_redis.store.hot import HotStore
from hermes_redis.tiers.compaction import Compactor
from hermes_redis.tiers.flush import Flusher
from hermes_redis.tiers.load import Loader
from hermes_redis.tiers.read import Reader, split_turns


class Forgetter:
    def __init__(self, hot: HotStore, cold: ArchiveStore, loader: Loader, reader: Reader,
                 flusher: Flusher, compactor: Compactor) -> None:
        self.hot, self.cold, self.loader, self.reader = hot, cold, loader, reader
        self.flusher, self.compactor = flusher, compactor

    def forget_last(self, sid: str, n: int) -> int:
        """Forget the session's last ``n`` turns (a turn starts at a user message)."""
        self.loader.load(sid)
        turns = split_turns(self.reader.history(sid))
        return self.forget(sid, [m for t in turns[-n:] for m in t])

    def forget_matching(self, sid: str, needle: str) -> int:
        """Forget every message whose content, lowercased, contains ``needle``."""
        self.loader.load(sid)
        return self.forget(sid, [m for m in self.reader.history(sid)
                                 if needle in m.content.lower()])

    def forget(self, sid: str, doomed: list[Message], memories: bool = True) -> int:
        """Remove ``doomed`` from both tiers and from the summary: the archive first
        (tombstones stop in-flight flushes), then the hot tier (invariant 4). ``memories``:
        also the persistent memories only they stated (a clear keeps them)."""
        if not doomed:
            return 0
        targets = [Forgotten(m.message_id, m.seq, m.token_count) for m in doomed]
        self.cold.forget(sid, targets, memories)
        self.hot.forget(sid, [(t.message_id, t.seq, t.token_count) for t in targets])
        self.hot.memories_changed(self.loader.load(sid).user_id)
        self.compactor.scrub(sid, [t.seq for t in targets])  # a summary must not remember it
        return len(targets)

    def pop(self, sid: str) -> Message | None:
        """Forget and return the newest message, archive first (an in-flight flush skips it),
        then the hot tier; a concurrent pop that took it first makes this look again."""
        user = self.loader.load(sid).user_id
        while True:
            newest = next(iter(self.hot.tail(sid, page_size=4)), None)
            if newest is None:  # nothing hot (cleared, or expired and rebuilt): the archive's
                newest = next(iter(self.cold.newest(sid, 0, 1)), None)
            if newest is None:
                return None
            target = Forgotten(newest.message_id, newest.seq, newest.token_count)
            self.cold.forget(sid, [target])  # and the memories only it stated
            if self.hot.pop(sid, (target.message_id, target.seq, target.token_count)) \
                    or self.hot.meta(sid) is None:
                self.hot.memories_changed(user)
                self.compactor.scrub(sid, [target.seq])  # a summary must not remember it
                return newest

    def clear(self, sid: str, history: bool = False) -> None:
        """Empty the context (hot turns and summary) from the newest seq on; every message
        is archived first and stays there, unless ``history``: then every message is
        forgotten first (the memories they stated stay: this is a /clear, not a forget)."""
        self.loader.load(sid)
        if history:
            self.forget(sid, self.reader.history(sid), memories=False)
        self.flusher.flush(sid)
        self.hot.compact(sid, None, "", None)
        meta = self.loader.load(sid)
        self.hot.set_fields(sid, SessionMeta.changes(cleared_seq=meta.summary_seq))
        meta = self.loader.load(sid)
        self.cold.write(meta.to_row(sid), [])
        self.cold.set_summary(sid, "", meta.summary_seq, force=True)

    def delete(self, sid: str, purge: bool) -> None:
        """Archive the backlog, mark the session deleted and drop its hot keys; ``purge``
        also removes its archived rows."""
        row = self.cold.session(sid)
        user = row["user_id"] if row is not None else None
        if self.hot.meta(sid) is not None or row is None or row["status"] != "deleted":
            meta = self.loader.load(sid)
            user = meta.user_id
            self.flusher.flush(sid)
            self.cold.write(meta.to_row(sid), [])
            self.cold.set_status(sid, "deleted")
        self.cold.forget_session_memories(sid)  # what only this session stated goes with it
        if user:
            self.hot.memories_changed(user)
        if purge:
            self.cold.purge(sid)
        self.hot.drop(sid)
