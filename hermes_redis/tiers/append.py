"""The append path's writes, in the one order that is safe to fail at any step: the memories a
message asks for in plain words first (the memory book), then the hot append, then the
archive's record that the stored message is their source. A hot append that fails takes back
the memories it made, so a refused message leaves nothing behind.

``MemoryPressure`` refuses appends before anything is written once Redis is nearly full.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from hermes_redis.context import tool_results
from hermes_redis.core.config import Config
from hermes_redis.core.errors import (
    BackendUnavailableError,
    ConflictError,
    HermesError,
    NotFoundError,
    StateError,
)
from hermes_redis.core.models import Message, new_message_id
from hermes_redis.core.tokens import Tokenizer
from hermes_redis.memory.book import MemoryBook
from hermes_redis.store.archive import ArchiveStore
from hermes_redis.store.hot import Appended, ArchiveCheckNeeded, HotStore
from hermes_redis.tiers.load import Loader
from hermes_redis.tiers.read import Reader

log = logging.getLogger(__name__)


class Appender:
    def __init__(self, config: Config, hot: HotStore, cold: ArchiveStore, tokenizer: Tokenizer,
                 book: MemoryBook, loader: Loader, read: Reader) -> None:
        self.config, self.hot, self.cold, self.tokenizer, self.book = (
            config, hot, cold, tokenizer, book)
        self.loader, self.read = loader, read
        self.pressure = MemoryPressure(hot, config.redis.memory_warn, config.redis.memory_limit)

    def append(self, sid: str, checked: list[dict[str, Any]], dedupe: bool,
               user_id: str | None) -> tuple[list[Message], bool]:
        """Store validated messages (``checked``: each one's fields, as ``append`` takes them)
        with the next seqs; returns them and whether the session now needs a flush job.
        ``dedupe``: some carry the caller's message_id (a retry, at any time while the message
        exists, returns the stored ones as stored; one whose body differs is a ConflictError);
        ``user_id``: the session's user if known (else read, only when a trigger needs it)."""
        msgs, full = self._messages(sid, checked)
        # a trigger with nothing to remember refuses them all
        facts = self.book.triggered(msgs) if self.config.memory.persistent.triggers else {}
        self.pressure.check()
        first_user = next((m.content for m in msgs if m.role == "user"), None)
        title = self._title(first_user) if first_user and self.config.session.auto_title else ""
        made: list[str] = []
        if facts:
            user = user_id or self.loader.load(sid).user_id
            msgs, made = self.book.remember_triggered(user, msgs, facts,
                                                      self.config.limits.max_content_bytes)
        try:
            done = self._hot_append(msgs, title, full, dedupe)
            earlier = self._earlier(sid, msgs, done.seqs, full) if done.earlier else None
        except BaseException:
            self.book.undo(made)  # the message was not stored: neither is what it asked
            raise
        if earlier is not None:  # an earlier attempt stored them; its flush may still be owed
            self.book.undo(made)
            return earlier, done.enqueue
        if facts:
            self.book.cite(msgs, done.seqs, facts)
        self.pressure.appended(msgs)
        return [m.with_seq(seq) for m, seq in zip(msgs, done.seqs, strict=True)], done.enqueue

    def _hot_append(self, msgs: list[Message], title: str, full: dict[str, str],
                    dedupe: bool) -> Appended:
        sid = msgs[0].session_id
        try:
            return self._append_once(msgs, title, full, dedupe)
        except NotFoundError:
            self.loader.load(sid)  # rebuilds an expired session from the archive
            return self._append_once(msgs, title, full, dedupe)
        except ConflictError:
            raise
        except StateError:
            status = self.loader.load(sid).status
            raise StateError(f"session {sid} is {status}; "
                             + ("restore it first" if status == "archived" else
                                "start a new session")) from None

    def _append_once(self, msgs: list[Message], title: str, full: dict[str, str],
                     dedupe: bool) -> Appended:
        """The hot id map answers a retry; once it lacks the session's archived messages
        (trimmed, or the keys expired and came back), the archive does."""
        try:
            return self.hot.append(msgs, time.time(), title, full, dedupe)
        except ArchiveCheckNeeded:
            sid = msgs[0].session_id
            found, gone = self.cold.by_ids(sid, [m.message_id for m in msgs])
            if gone:
                raise ConflictError(f"message_id {sorted(gone)[0]} was forgotten in session "
                                    f"{sid}; a forgotten message is not stored again: send it "
                                    "with a new message_id") from None
            if found:
                return Appended([found[m.message_id].seq if m.message_id in found else 0
                                 for m in msgs], False, True)
            return self.hot.append(msgs, time.time(), title, full, "checked")

    def _earlier(self, sid: str, msgs: list[Message], seqs: list[int],
                 full: dict[str, str]) -> list[Message]:
        """The messages an earlier attempt stored under these ids, as stored; a ConflictError
        naming the stored seq when the retry says something else."""
        if not all(seqs):
            at = next(s for s in seqs if s)
            raise ConflictError(f"these message_ids are partly stored already (one at seq {at}) "
                                "by another batch: give each new message its own message_id",
                                seq=at)
        low, high = min(seqs), max(seqs)
        stored = {m.seq: m for m in self.read.history(sid, upto_seq=high, after_seq=low - 1)}
        return [self._same(m, seq, stored.get(seq), full) for m, seq in zip(msgs, seqs, strict=True)]

    @staticmethod
    def _same(m: Message, seq: int, was: Message | None, full: dict[str, str]) -> Message:
        if was is None or was.message_id != m.message_id:  # forgotten meanwhile
            raise ConflictError(f"message_id {m.message_id} was stored at seq {seq} and is "
                                "gone now: send it with a new message_id", seq=seq)
        differs = next((name for name, a, b in (
            ("role", was.role, m.role), ("tool_calls", was.tool_calls, m.tool_calls),
            ("file_refs", was.file_refs, m.file_refs), ("item", was.item_json, m.item_json))
            if a != b), None)
        if differs is None and was.content not in (m.content, full.get(m.message_id)):
            differs = "content"
        if differs is not None:
            raise ConflictError(f"message_id {m.message_id} is stored at seq {seq} with "
                                f"another {differs}: a retry must send the same message "
                                "(or use a new message_id)", seq=seq)
        return was

    def _messages(self, sid: str,
                  checked: list[dict[str, Any]]) -> tuple[list[Message], dict[str, str]]:
        """The Messages to store (tokens counted by ``Tokenizer.count_many``; a tool result over
        ``tool_result_max_tokens`` capped) and the full texts of the capped ones."""
        s = self.config.session
        limit = s.tool_result_max_tokens
        counts = self.tokenizer.count_many([c["content"] for c in checked])
        now = round(time.time(), 6)
        msgs: list[Message] = []
        full: dict[str, str] = {}
        for c, tokens in zip(checked, counts, strict=True):
            content, message_id = c["content"], c["message_id"] or new_message_id()
            if c["role"] == "tool" and tokens > limit:
                if s.save_tool_results:
                    full[message_id] = content
                where = "the archive" if s.save_tool_results else "nowhere (not saved)"
                content = (tool_results.summarize(content, limit, self.tokenizer, where)
                           if s.tool_result_summarize
                           else self.tokenizer.cap(content, limit, where))
                tokens = self.tokenizer.count(content)
            msgs.append(Message.new(sid, 0, c["role"], content, tokens, message_id,
                                    c["tool_calls"], c["file_refs"], c["memory_refs"],
                                    now if c["created_at"] is None else c["created_at"], c["item"]))
        return msgs, full

    def _title(self, content: str) -> str:
        limit = self.config.limits.max_title_chars
        first = " ".join(content[: 4 * limit].split())
        return first if len(first) <= limit else first[: limit - 1] + "…"


class MemoryPressure:
    """Back-pressure before Redis is full. An INFO round trip every ``every`` bytes of
    appended text or ``interval`` seconds, and before every append once past ``warn`` of
    maxmemory (a warning at most once a minute). Past ``limit``, appends are refused
    before anything is written, so workers keep the headroom they need to drain.

    Counted in bytes, not messages: an INFO and its parse cost about two appends, and at
    every 64 messages that was 3 % of an append's time with messages of 300 bytes."""

    def __init__(self, hot: HotStore, warn: float, limit: float, every: int = 256 * 1024,
                 interval: float = 5.0) -> None:
        self.hot, self.warn, self.limit = hot, warn, limit
        self.every, self.interval = every, interval
        self._count, self._next, self._warned, self._near = 0, 0.0, -60.0, False

    def check(self) -> None:
        """Raise BackendUnavailableError when Redis is past ``limit`` of maxmemory."""
        now = time.monotonic()
        if not self._near and self._count < self.every and now < self._next:
            return
        self._count, self._next = 0, now + self.interval
        try:
            use = self.hot.memory_use()
        except HermesError:
            return  # the append itself reports an unreachable Redis
        if use is None or not use[1]:
            self._near = False
            return
        share = use[0] / use[1]
        self._near = share >= self.warn
        url = self.hot.url or "in-process"
        if share >= self.limit:
            raise BackendUnavailableError(
                f"Redis at {url} is nearly out of memory ({share:.0%} of maxmemory, over "
                f"redis.memory_limit {self.limit:.0%}), nothing was written; start a worker to "
                "archive the backlog or raise maxmemory")
        if self._near and now - self._warned >= 60.0:
            self._warned = now
            log.warning("Redis at %s uses %.0f%% of maxmemory (%d of %d MiB): appends are refused "
                        "past %.0f%%; start workers to drain the backlog, or raise maxmemory",
                        url, 100 * share, use[0] >> 20, use[1] >> 20, 100 * self.limit)

    def appended(self, msgs: Sequence[Message]) -> None:
        """Count what ``msgs`` add (their text, and a hundred bytes each for the rest)."""
        self._count += sum(len(m.content) + len(m.tool_calls) + len(m.item_json) + 100
                           for m in msgs)
