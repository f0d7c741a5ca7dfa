"""Compaction: fold a session's older hot turns into its summary and trim them from the hot
tier, and rebuild a summary that covers forgotten messages.

Safe to crash and to race: the summary is installed by compare-and-set, and only archived
messages are trimmed (invariant 2); a summary never remembers a forgotten message
(invariant 4).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from hermes_redis.context.summarizers import Summarizer
from hermes_redis.core import metrics
from hermes_redis.core.config import Config
from hermes_redis.core.errors import HermesError
from hermes_redis.core.models import CompactResult, Message, SessionMeta
from hermes_redis.core.tokens import Tokenizer
from hermes_redis.store.archive import ArchiveStore
from hermes_redis.store.hot import HotStore
from hermes_redis.tiers.flush import Flusher
from hermes_redis.tiers.read import Reader, split_turns

log = logging.getLogger(__name__)


class Compactor:
    def __init__(self, config: Config, hot: HotStore, cold: ArchiveStore, summarizer: Summarizer,
                 tokenizer: Tokenizer, flusher: Flusher, reader: Reader) -> None:
        self.config, self.hot, self.cold, self.summarizer = config, hot, cold, summarizer
        self.tokenizer, self.flusher, self.reader = tokenizer, flusher, reader

    def maintain(self, sid: str) -> tuple[int, int]:
        """What a flush job does, and the in-process path without workers: archive the
        backlog, then compact if over the caps. Returns (messages archived, messages trimmed
        from the hot tier)."""
        added = self.flusher.flush(sid)
        if not self.needs_compaction(sid):
            return added, 0
        result = self._compact(sid, force=False)
        return added, result.trimmed if result else 0

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
        self.flusher.flush(sid)
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
            self.flusher.sync_summary(sid)
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
            remaining = [m for m in self.reader.history(sid, upto) if m.message_id not in gone]
            summary = self.summarizer.summarize(
                "", remaining, self.config.session.compression.summary_max_tokens)
            if self.hot.compact(sid, upto, summary, upto, meta) != -2:
                self.flusher.sync_summary(sid)
                return

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
