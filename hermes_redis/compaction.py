"""Moving turns between the tiers: flush to the archive, compact the hot tier.

Both are safe to crash at any point and to run again, from any number of workers:
flush is idempotent by message_id (invariant 3) and acknowledges only what the archive
committed; compaction installs its summary by compare-and-set and trims only archived
messages (invariant 2).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from hermes_redis import metrics
from hermes_redis.archive import ArchiveStore
from hermes_redis.config import Config
from hermes_redis.errors import HermesError, StateError
from hermes_redis.hot import HotStore, Meta
from hermes_redis.models import Message
from hermes_redis.summarizers import Summarizer
from hermes_redis.tokens import Tokenizer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CompactResult:
    summarized_upto: int
    trimmed: int
    summary_tokens: int
    kept: int


def session_row(sid: str, meta: Meta) -> dict[str, Any]:
    return {
        "session_id": sid,
        "user_id": meta.get("user_id", ""),
        "title": meta.get("title", ""),
        "created_at": float(meta.get("created_at", "0")),
        "updated_at": float(meta.get("updated_at", "0")),
        "status": meta.get("status", "active"),
        "summary": meta.get("summary", ""),
        "summary_seq": int(meta.get("summary_seq", "0")),
        "last_seq": int(meta.get("last_seq", "0")),
        "cleared_seq": int(meta.get("cleared_seq", "0") or 0),
    }


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
    def __init__(self, config: Config, hot: HotStore, archive: ArchiveStore,
                 summarizer: Summarizer, tokenizer: Tokenizer) -> None:
        self.config, self.hot, self.archive, self.summarizer = config, hot, archive, summarizer
        self.tokenizer = tokenizer

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
        flushed = int(meta["flushed_seq"])
        pending: list[Message] = []
        for m in self.hot.tail(sid, page_size=256):
            if m.seq <= flushed:
                break
            pending.append(m)
        pending.reverse()
        first, high = self.archive.reseat_needed(sid, pending) if pending else (0, 0)
        if first:
            return self._reseat(sid, first, high, again)
        tool_ids = [m.message_id for m in pending if m.role == "tool"]
        full = self.hot.full_texts(sid, tool_ids) if self.config.session.save_tool_results else {}
        added = self.archive.write(session_row(sid, meta), pending, full)
        metrics.FLUSHES.inc()
        if added:
            metrics.ARCHIVED.inc(added)
            metrics.FLUSH_LAG.observe(max(0.0, time.time() - pending[0].created_at))
        self.sync_summary(sid, (meta["summary"], int(meta["summary_seq"])))
        # Seqs up to last_seq that the tail no longer holds were forgotten: nothing left to archive.
        upto = max(pending[-1].seq if pending else 0, int(meta["last_seq"]))
        self.hot.ack_flush(sid, upto, self.ttl, tool_ids)
        return added

    def catch_up(self) -> list[str]:
        """After Redis restarted: every hot session whose seq is behind the archive's (an
        older snapshot, a lagging replica) gets the archived messages it lost back and its
        seq moved past them, before anyone appends. Returns those sessions."""
        sids = self.hot.session_ids()
        behind: list[str] = []
        for i in range(0, len(sids), 1000):
            chunk = sids[i:i + 1000]
            high = self.archive.high_seqs(chunk)
            for sid, meta in zip(chunk, self.hot.metas(chunk), strict=True):
                if meta is not None and high.get(sid, 0) > int(meta["last_seq"]):
                    first = int(meta["last_seq"]) + 1
                    gap = self.archive.messages(sid, after_seq=first - 1, upto_seq=high[sid])
                    self.hot.reseat(sid, first, high[sid], gap)
                    metrics.RESEATS.inc()
                    behind.append(sid)
        if behind:
            log.warning("Redis came back behind the archive: %d session(s) restored from it "
                        "(seqs continue above the archive's)", len(behind))
        return behind

    def _reseat(self, sid: str, first: int, high: int, again: bool) -> int:
        """Renumber the hot entries from ``first`` on past ``high`` and archive them."""
        if not again:  # reseated once in this flush and still colliding: never loop
            raise StateError(f"session {sid}: seqs still collide with the archive after renumbering;"
                             " run `hermes-redis doctor`")
        metrics.RESEATS.inc()
        gap = self.archive.messages(sid, after_seq=first - 1, upto_seq=high)
        moved = self.hot.reseat(sid, first, high, gap)
        log.warning("session %s: Redis went back in time (seq %d reused, the archive holds up to %d);"
                    " %d message(s) renumbered after it, %d restored from the archive",
                    sid, first, high, max(moved, 0), len(gap))
        return self.flush(sid, again=False)

    def maintain(self, sid: str) -> tuple[int, int]:
        """What a flush job does: archive the backlog, then compact if over the caps.
        Returns (messages archived, messages trimmed from the hot tier)."""
        added = self.flush(sid)
        if not self.needs_compaction(sid):
            return added, 0
        result = self.compact(sid)
        return added, result.trimmed if result else 0

    def needs_compaction(self, sid: str) -> bool:
        meta = self.hot.meta(sid)
        if meta is None:
            return False
        live = self._live(sid, meta)
        return len(live) > self.config.session.max_messages or self._tokens(live) > self._token_cap()

    def compact(self, sid: str, force: bool = False) -> CompactResult | None:
        """Apply the configured strategy; None when there is nothing to do."""
        self.flush(sid)
        for _ in range(3):  # another worker may move the summary meanwhile
            meta = self.hot.meta(sid)
            if meta is None:
                return None
            gone = self.archive.tombstoned(sid)  # forgotten, maybe not yet out of the hot tier
            live = [m for m in self._live(sid, meta) if m.message_id not in gone]
            over = len(live) > self.config.session.max_messages
            if not (force or over or self._tokens(live) > self._token_cap()):
                return None
            kept = self._kept(live, force)
            folded = live[: len(live) - len(kept)]
            if not folded:
                return None
            old_seq = int(meta["summary_seq"])
            new_seq = folded[-1].seq
            summary = self._summarize(meta["summary"], folded)
            trimmed = self.hot.compact(sid, old_seq, summary, new_seq, meta)
            if trimmed == -2:
                continue
            if trimmed == -1:
                return None
            metrics.COMPACTIONS.inc()
            self.sync_summary(sid)
            raced = {m: s for m, s in self.archive.tombstoned(sid).items() if m not in gone}
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
            upto = int(meta["summary_seq"]) if meta else 0
            if meta is None or not meta["summary"] or min(seqs, default=upto + 1) > upto:
                return
            gone = self.archive.tombstoned(sid)
            remaining = [m for m in self.history(sid, upto) if m.message_id not in gone]
            summary = self.summarizer.summarize(
                "", remaining, self.config.session.compression.summary_max_tokens)
            if self.hot.compact(sid, upto, summary, upto, meta) != -2:
                self.sync_summary(sid)
                return

    def history(self, sid: str, upto_seq: int | None = None, after_seq: int = 0) -> list[Message]:
        """Archived and hot messages with ``after_seq < seq <= upto_seq`` in seq order, each
        once (a message being flushed is in both tiers)."""
        # The hot tier first: a message trimmed from it meanwhile was archived before the trim,
        # so the archive read after it has it (the other order could miss it in both).
        hot = [m for m in self.hot.messages(sid)
               if m.seq > after_seq and (upto_seq is None or m.seq <= upto_seq)]
        by_seq = {m.seq: m for m in self.archive.messages(sid, after_seq, upto_seq)}
        for m in hot:
            by_seq.setdefault(m.seq, m)
        return [by_seq[s] for s in sorted(by_seq)]

    def sync_summary(self, sid: str, wrote: tuple[str, int] | None = None) -> None:
        """Give the archive the hot tier's summary. Every writer re-reads after writing, so
        concurrent writers converge on the newest one (``wrote``: what was just written)."""
        for _ in range(5):
            meta = self.hot.meta(sid)
            if meta is None:
                return
            now = (meta["summary"], int(meta["summary_seq"]))
            if now == wrote:
                return
            self.archive.set_summary(sid, now[0], now[1], force=True)
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

    def _live(self, sid: str, meta: Meta) -> list[Message]:
        summary_seq = int(meta["summary_seq"])
        return [m for m in self.hot.messages(sid) if m.seq > summary_seq]

    def _token_cap(self) -> int:
        return int(self.config.context_budget * self.config.session.compression.threshold)

    @staticmethod
    def _tokens(messages: list[Message]) -> int:
        return sum(m.token_count for m in messages)


def sweep(maintainer: Maintainer, enqueue: Any, grace: float = 30.0) -> list[str]:
    """Re-enqueue sessions whose backlog is older than ``grace`` seconds or whose hot tier
    is over its cap: correctness never depends on a job surviving."""
    hot = maintainer.hot
    stale = set(hot.backlog_sessions(time.time() - grace))
    cap = maintainer.config.session.max_messages
    for sid in hot.session_ids():
        if hot.length(sid) > cap and maintainer.needs_compaction(sid):
            stale.add(sid)
    metrics.RETRIES.inc(len(stale))
    for sid in sorted(stale):
        try:
            enqueue(sid)
        except HermesError as err:  # the queue cannot take it (Redis full): do it here instead
            log.warning("%s; maintaining session %s in this process", err, sid)
            maintainer.maintain(sid)
    return sorted(stale)
