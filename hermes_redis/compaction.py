"""The one owner of moving sessions between the tiers: flush to the archive, compact the
hot tier, load an expired session back, and the two-tier writes of forget, clear, status
changes and delete.

Flush and compaction are safe to crash at any point and to run again, from any number of
workers: flush is idempotent by message_id (invariant 3) and acknowledges only what the
archive committed; compaction installs its summary by compare-and-set and trims only
archived messages (invariant 2).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from hermes_redis import metrics
from hermes_redis.archive import ArchiveStore, Forgotten
from hermes_redis.config import Config
from hermes_redis.errors import HermesError, NotFoundError, StateError, ValidationError
from hermes_redis.hot import HotStore
from hermes_redis.memories import MemoryBook
from hermes_redis.models import Message, SessionMeta
from hermes_redis.summarizers import Summarizer
from hermes_redis.tokens import Tokenizer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CompactResult:
    summarized_upto: int
    trimmed: int
    summary_tokens: int
    kept: int


def split_turns(messages: list[Message]) -> list[list[Message]]:
    """A turn starts at a user message and runs until the next one."""
    turns: list[list[Message]] = []
    for m in messages:
        if m.role == "user" or not turns:
            turns.append([m])
        else:
            turns[-1].append(m)
    return turns


class Maintainer:
    def __init__(self, config: Config, hot: HotStore, cold: ArchiveStore,
                 summarizer: Summarizer, tokenizer: Tokenizer,
                 book: MemoryBook | None = None) -> None:
        self.config, self.hot, self.cold, self.summarizer = config, hot, cold, summarizer
        self.tokenizer = tokenizer
        self.book = book  # extracts durable facts after each flush; None: extraction is off

    @property
    def ttl(self) -> int:
        return self.config.session.ttl

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
        self.hot.ack_flush(sid, upto, self.ttl, tool_ids)
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

    def maintain(self, sid: str) -> tuple[int, int]:
        """What a flush job does, and the in-process path without workers: archive the
        backlog, then compact if over the caps. Returns (messages archived, messages trimmed
        from the hot tier)."""
        added = self.flush(sid)
        if not self.needs_compaction(sid):
            return added, 0
        result = self._compact(sid, force=False)
        return added, result.trimmed if result else 0

    # --- the session as a whole --------------------------------------------------------------
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

    def _hydrate(self, sid: str, row: Mapping[str, Any]) -> None:
        """The hot tier rebuilt from the archive: counters from the archived messages and the
        newest unsummarized ones (at most ``max_messages``); everything in it is archived."""
        count, tokens, max_seq = self.cold.stats(sid)
        meta = SessionMeta.from_row(row)
        last = max(meta.last_seq, max_seq)
        meta = replace(meta, total_tokens=tokens, message_count=count, last_seq=last,
                       flushed_seq=last)
        newest = self.cold.newest(sid, meta.summary_seq, self.config.session.max_messages)
        self.hot.hydrate(sid, meta, newest, self.ttl)

    def forget(self, sid: str, doomed: list[Message], memories: bool = True) -> int:
        """Remove ``doomed`` from both tiers and from the summary: the archive first
        (tombstones stop in-flight flushes), then the hot tier (invariant 4). ``memories``:
        also the persistent memories only they stated (a clear keeps them)."""
        if not doomed:
            return 0
        targets = [Forgotten(m.message_id, m.seq, m.token_count) for m in doomed]
        self.cold.forget(sid, targets, memories)
        self.hot.forget(sid, [(t.message_id, t.seq, t.token_count) for t in targets])
        self.hot.memories_changed(self.load(sid).user_id)
        self.scrub(sid, [t.seq for t in targets])  # a summary must not remember it
        return len(targets)

    def pop(self, sid: str) -> Message | None:
        """Forget and return the newest message, archive first (an in-flight flush skips it),
        then the hot tier; a concurrent pop that took it first makes this look again."""
        user = self.load(sid).user_id
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
                self.scrub(sid, [target.seq])  # a summary must not remember it
                return newest

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

    def clear(self, sid: str) -> None:
        """Empty the context (hot turns and summary) from the newest seq on; every message
        is archived first and stays there."""
        self.load(sid)
        self.flush(sid)
        self.hot.compact(sid, None, "", None)
        meta = self.load(sid)
        self.hot.set_fields(sid, SessionMeta.changes(cleared_seq=meta.summary_seq))
        meta = self.load(sid)
        self.cold.write(meta.to_row(sid), [])
        self.cold.set_summary(sid, "", meta.summary_seq, force=True)

    def set_status(self, sid: str, status: str, allowed_from: tuple[str, ...]) -> None:
        """Archive the backlog, then move the session to ``status`` in both tiers."""
        meta = self.load(sid)
        if meta.status not in allowed_from:
            raise StateError(f"session {sid} is {meta.status}; cannot make it {status}")
        self.flush(sid)
        self.hot.set_fields(sid, SessionMeta.changes(status=status))
        self.cold.write(replace(meta, status=status).to_row(sid), [])
        self.cold.set_status(sid, status)

    def delete(self, sid: str, purge: bool) -> None:
        """Archive the backlog, mark the session deleted and drop its hot keys; ``purge``
        also removes its archived rows."""
        row = self.cold.session(sid)
        user = row["user_id"] if row is not None else None
        if self.hot.meta(sid) is not None or row is None or row["status"] != "deleted":
            meta = self.load(sid)
            user = meta.user_id
            self.flush(sid)
            self.cold.write(meta.to_row(sid), [])
            self.cold.set_status(sid, "deleted")
        self.cold.forget_session_memories(sid)  # what only this session stated goes with it
        if user:
            self.hot.memories_changed(user)
        if purge:
            self.cold.purge(sid)
        self.hot.drop(sid)

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

    def sweep(self, enqueue: Callable[[str], None], grace: float = 30.0) -> list[str]:
        """Re-enqueue sessions whose backlog is older than ``grace`` seconds or whose hot tier
        is over its cap: correctness never depends on a job surviving."""
        stale = set(self.hot.backlog_sessions(time.time() - grace))
        cap = self.config.session.max_messages
        for sid in self.hot.session_ids():
            if self.hot.length(sid) > cap and self.needs_compaction(sid):
                stale.add(sid)
        metrics.RETRIES.inc(len(stale))
        for sid in sorted(stale):
            try:
                enqueue(sid)
            except HermesError as err:  # the queue cannot take it (Redis full): do it here
                log.warning("%s; maintaining session %s in this process", err, sid)
                self.maintain(sid)
        return sorted(stale)

    def needs_compaction(self, sid: str) -> bool:
        meta = self.hot.meta(sid)
        if meta is None:
            return False
        live = self._unsummarized(sid, meta)
        return len(live) > self.config.session.max_messages or self._tokens(live) > self._token_cap()

    def compact(self, sid: str, force: bool = False) -> CompactResult | None:
        """Archive the backlog, then apply the configured strategy (``force``: even under
        the caps); None when there is nothing to do."""
        self.flush(sid)
        return self._compact(sid, force)

    def _compact(self, sid: str, force: bool) -> CompactResult | None:
        for _ in range(3):  # another worker may move the summary meanwhile
            meta = self.hot.meta(sid)
            if meta is None:
                return None
            gone = self.cold.tombstoned(sid)  # forgotten, maybe not yet out of the hot tier
            live = [m for m in self._unsummarized(sid, meta) if m.message_id not in gone]
            over = len(live) > self.config.session.max_messages
            if not (force or over or self._tokens(live) > self._token_cap()):
                return None
            kept = self._kept(live, force)
            folded = live[: len(live) - len(kept)]
            if not folded:
                return None
            old_seq = meta.summary_seq
            new_seq = folded[-1].seq
            summary = self._summarize(meta.summary, folded)
            trimmed = self.hot.compact(sid, old_seq, summary, new_seq, meta)
            if trimmed == -2:
                continue
            if trimmed == -1:
                return None
            metrics.COMPACTIONS.inc()
            self.sync_summary(sid)
            raced = {m: s for m, s in self.cold.tombstoned(sid).items() if m not in gone}
            if raced:  # a forget landed while this summary was being written
                self.scrub(sid, list(raced.values()))
            tokens = self.tokenizer.count(summary) if summary else 0
            return CompactResult(new_seq, trimmed, tokens, len(kept))
        return None

    def scrub(self, sid: str, seqs: list[int]) -> None:
        """After a forget: rebuild the summary from what remains if it covers any of ``seqs``
        (invariant 4). Compare-and-set on the text, so a compaction racing this either sees
        the new summary or is redone, and this retries over a summary it raced."""
        for _ in range(5):
            meta = self.hot.meta(sid)
            upto = meta.summary_seq if meta else 0
            if meta is None or not meta.summary or min(seqs, default=upto + 1) > upto:
                return
            gone = self.cold.tombstoned(sid)
            remaining = [m for m in self.history(sid, upto) if m.message_id not in gone]
            summary = self.summarizer.summarize(
                "", remaining, self.config.session.compression.summary_max_tokens)
            if self.hot.compact(sid, upto, summary, upto, meta) != -2:
                self.sync_summary(sid)
                return

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

    def _summarize(self, previous: str, folded: list[Message]) -> str:
        c = self.config.session.compression
        if not (c.enabled and c.summarize_older) or c.strategy == "rolling_window":
            return previous
        with metrics.SUMMARIZER_SECONDS.labels(self.summarizer.name).time():
            return self.summarizer.summarize(previous, folded, c.summary_max_tokens)

    def _kept(self, live: list[Message], force: bool) -> list[Message]:
        """The newest messages the strategy keeps verbatim: whole turns, within both caps."""
        s = self.config.session
        if not s.compression.enabled or s.compression.strategy == "rolling_window":
            kept = live[-s.max_messages :]
            while kept and self._tokens(kept) > self._token_cap():
                kept = kept[1:]
            return kept
        keep_turns = 1 if s.compression.strategy == "summary" else s.compression.keep_recent
        turns = split_turns(live)
        if force and len(turns) <= keep_turns:
            keep_turns = max(1, len(turns) - 1)
        kept_turns = turns[-keep_turns:]
        while len(kept_turns) > 1 and (
            sum(len(t) for t in kept_turns) > s.max_messages
            or self._tokens([m for t in kept_turns for m in t]) > self._token_cap()
        ):
            kept_turns = kept_turns[1:]
        return [m for t in kept_turns for m in t]

    def _unsummarized(self, sid: str, meta: SessionMeta) -> list[Message]:
        summary_seq = meta.summary_seq
        return [m for m in self.hot.messages(sid) if m.seq > summary_seq]

    def _token_cap(self) -> int:
        return int(self.config.context_budget * self.config.session.compression.threshold)

    @staticmethod
    def _tokens(messages: list[Message]) -> int:
        return sum(m.token_count for m in messages)
