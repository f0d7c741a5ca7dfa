"""Flush: copy a session's unarchived messages from the hot tier into the archive.

Safe to crash at any point and to run again, from any number of workers: idempotent by
message_id (invariant 3), and the hot tier is told only what the archive committed. When Redis
went back in time (a restart from an older snapshot, a failover to a lagging replica) the hot
entries are renumbered past the archive (``reseat``, ``catch_up``): no message is ever dropped.
"""

from __future__ import annotations

import logging
import time

from hermes_redis.core import metrics
from hermes_redis.core.config import Config
from hermes_redis.core.errors import HermesError, StateError
from hermes_redis.core.models import Message
from hermes_redis.memory.book import MemoryBook
from hermes_redis.store.archive import ArchiveStore
from hermes_redis.store.hot import HotStore
from hermes_redis.store.vectors import VectorIndex

log = logging.getLogger(__name__)


class Flusher:
    def __init__(self, config: Config, hot: HotStore, cold: ArchiveStore,
                 book: MemoryBook | None, vectors: VectorIndex | None = None) -> None:
        self.config, self.hot, self.cold = config, hot, cold
        self.book = book  # extracts durable facts after each flush; None: extraction is off
        self.vectors = vectors  # issue 31: embeds what was archived; None: embeddings are off

    def flush(self, sid: str, again: bool = True) -> int:
        """Copy the session's unarchived messages into the archive; returns how many were new.
        Never drops one: a message whose seq the archive already holds for another message
        (Redis went back in time) is renumbered past the archive's highest first."""
        self.hot.clear_pending(sid)  # appends from now on enqueue a new flush
        meta = self.hot.meta(sid)
        if meta is None:
            return 0
        flushed = meta.flushed_seq
        pending: list[Message] = []
        for m in self.hot.tail(sid, page_size=256):
            if m.seq <= flushed:
                break
            pending.append(m)
        pending.reverse()
        first, high = self.cold.reseat_needed(sid, pending) if pending else (0, 0)
        if first:
            return self._reseat(sid, pending, first, high, again)
        tool_ids = [m.message_id for m in pending if m.role == "tool"]
        full = self.hot.full_texts(sid, tool_ids) if self.config.session.save_tool_results else {}
        added = self.cold.write(meta.to_row(sid), pending, full)
        if added and self.book is not None:
            self._extract(sid, meta.user_id, pending)  # before the ack: a crash extracts again
        metrics.FLUSHES.inc()
        if added:
            metrics.ARCHIVED.inc(added)
            metrics.FLUSH_LAG.observe(max(0.0, time.time() - pending[0].created_at))
        self.sync_summary(sid, (meta.summary, meta.summary_seq))
        # Seqs up to last_seq that the tail no longer holds were forgotten: nothing left to archive.
        upto = max(pending[-1].seq if pending else 0, meta.last_seq)
        self.hot.ack_flush(sid, upto, self.config.session.ttl, tool_ids)
        if self.vectors is not None:  # after the ack: embeddings never hold up archiving
            self.vectors.fill(sid)
            self.vectors.fill_memories(meta.user_id)
        return added

    def _extract(self, sid: str, user_id: str, archived: list[Message]) -> None:
        """Store the facts the user stated in these archived messages; a failure is logged
        and never holds up the flush (the messages are safe in the archive)."""
        assert self.book is not None
        try:
            metrics.EXTRACTED.inc(len(self.book.extract(user_id, archived)))
        except HermesError as err:
            log.warning("session %s: memory extraction skipped: %s", sid, err)

    def catch_up(self) -> list[str]:
        """After Redis restarted: every hot session whose seq is behind the archive's (an
        older snapshot, a lagging replica) gets the archived messages it lost back and its
        seq moved past them, before anyone appends. Returns those sessions."""
        sids = self.hot.session_ids()
        behind: list[str] = []
        for i in range(0, len(sids), 1000):
            chunk = sids[i:i + 1000]
            high = self.cold.high_seqs(chunk)
            for sid, meta in zip(chunk, self.hot.metas(chunk), strict=True):
                if meta is not None and high.get(sid, 0) > meta.last_seq:
                    first = meta.last_seq + 1
                    gap = self.cold.messages(sid, after_seq=first - 1, upto_seq=high[sid])
                    self.hot.reseat(sid, first, high[sid], gap)
                    metrics.RESEATS.inc()
                    behind.append(sid)
        if behind:
            log.warning("Redis came back behind the archive: %d session(s) restored from it "
                        "(seqs continue above the archive's)", len(behind))
        return behind

    def _reseat(self, sid: str, pending: list[Message], first: int, high: int,
                again: bool) -> int:
        """Renumber the hot entries from ``first`` on past ``high`` and archive them. The
        memories they are the source of move with them first: a crash in between finds the
        same collision and the same new seqs."""
        if not again:  # reseated once in this flush and still colliding: never loop
            raise StateError(f"session {sid}: seqs still collide with the archive after renumbering;"
                             " run `hermes-redis doctor`")
        metrics.RESEATS.inc()
        moving = [m for m in pending if m.seq >= first]
        self.cold.move_sources(sid, [(m.seq, high + i, m.memory_refs)
                                     for i, m in enumerate(moving, 1) if m.memory_refs])
        gap = self.cold.messages(sid, after_seq=first - 1, upto_seq=high)
        moved = self.hot.reseat(sid, first, high, gap)
        log.warning("session %s: Redis went back in time (seq %d reused, the archive holds up to %d);"
                    " %d message(s) renumbered after it, %d restored from the archive",
                    sid, first, high, max(moved, 0), len(gap))
        return self.flush(sid, again=False)

    def sync_summary(self, sid: str, wrote: tuple[str, int] | None = None) -> None:
        """Give the archive the hot tier's summary. Every writer re-reads after writing, so
        concurrent writers converge on the newest one (``wrote``: what was just written)."""
        for _ in range(5):
            meta = self.hot.meta(sid)
            if meta is None:
                return
            now = (meta.summary, meta.summary_seq)
            if now == wrote:
                return
            self.cold.set_summary(sid, now[0], now[1], force=True)
            wrote = now
