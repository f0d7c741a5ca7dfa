"""The older conversation as ``context()`` reads it, through the tiers' reader: the archive,
merged with the hot tier where both hold a message, tool results capped as the hot tier
caps them.

Every read returns None when the archive cannot be read, so the hot tier alone still gives a
context (invariant 6 holds either way).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace

from hermes_redis.core.errors import BackendUnavailableError
from hermes_redis.core.models import Message
from hermes_redis.core.text import named_day
from hermes_redis.core.tokens import Tokenizer
from hermes_redis.tiers.read import Reader

log = logging.getLogger(__name__)


class SessionHistory:
    """One session's history for ``build_context`` (the ``context.History`` protocol)."""

    def __init__(self, sid: str, reader: Reader, tokenizer: Tokenizer,
                 tool_result_max_tokens: int) -> None:
        self.sid, self.reader = sid, reader
        self.tokenizer, self.limit = tokenizer, tool_result_max_tokens

    def since(self, after_seq: int) -> list[Message] | None:
        return self._read(lambda: self.reader.history(self.sid, after_seq=after_seq))

    def first(self, after_seq: int, limit: int) -> list[Message] | None:
        return self._read(lambda: self.reader.first(self.sid, after_seq, limit))

    def before(self, before_seq: int, after_seq: int, limit: int) -> Iterator[Message] | None:
        return self._lazy(lambda: self.reader.before(self.sid, before_seq, after_seq, limit))

    def recall(self, query: str, after_seq: int, before_seq: int,
               limit: int) -> Iterator[Message] | None:
        """Best rank first; when ``query`` names a day ("what did we decide on 3 March
        2026?", "… yesterday?"), the messages of that day come before the rest."""
        day = named_day(query, time.time())
        if day is None:
            return self._lazy(lambda: self.reader.recall(self.sid, query, after_seq, before_seq,
                                                            limit))

        def dated() -> Iterator[Message]:
            first = list(self.reader.recall(self.sid, query, after_seq, before_seq, limit, day))
            seen = {m.seq for m in first}
            rest = self.reader.recall(self.sid, query, after_seq, before_seq, limit)
            return itertools.chain(first, (m for m in rest if m.seq not in seen))

        return self._lazy(dated)

    def _read(self, read: Callable[[], Iterable[Message]]) -> list[Message] | None:
        messages = self._lazy(read)
        return None if messages is None else list(messages)

    def _lazy(self, read: Callable[[], Iterable[Message]]) -> Iterator[Message] | None:
        """The messages ``read`` gives, capped as in the hot tier as the caller reaches each;
        None when the archive cannot be read."""
        try:
            messages = read()
        except BackendUnavailableError as err:
            log.warning("%s; context built from the hot tier alone", err)
            return None
        return map(self._as_hot, messages)

    def _as_hot(self, m: Message) -> Message:
        """A tool result the archive keeps whole, capped as it was in the hot tier (its
        token_count is the capped one)."""
        if m.role != "tool" or len(m.content) <= self.limit or \
                self.tokenizer.count(m.content) <= self.limit:
            return m
        content = self.tokenizer.cap(m.content, self.limit, "the archive")
        return replace(m, content=content, token_count=self.tokenizer.count(content))
