"""The messages every section appends: the bench conversation, cycled to any length.

Real sizes, not a fixed string: short user questions, long assistant answers with code,
tool output. ``payloads`` packs them exactly as ``SessionMemory.append`` stores them
(``Message.pack``), for the raw baselines and the bulk-built histories.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator

from bench import conversation
from hermes_redis.core.models import Message
from hermes_redis.core.tokens import Tokenizer


@functools.lru_cache(maxsize=1)
def messages() -> tuple[tuple[str, str], ...]:
    return conversation.build().messages


def cycle(n: int, roles: tuple[str, ...] | None = None) -> list[tuple[str, str]]:
    """The first ``n`` messages of the conversation repeated, optionally of some roles only."""
    pool = [m for m in messages() if roles is None or m[0] in roles]
    return [pool[i % len(pool)] for i in range(n)]


class Counter:
    """Token counts by text; building a big history needs each distinct text counted once."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self._seen: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        n = self._seen.get(text)
        if n is None:
            n = self._seen[text] = self.tokenizer.count(text)
        return n


def packed(sid: str, items: list[tuple[str, str]], count: Counter, first_seq: int = 1
           ) -> Iterator[tuple[Message, bytes]]:
    now = time.time()
    for i, (role, text) in enumerate(items):
        m = Message(sid, first_seq + i, role, text, count(text), created_at=now + i * 1e-3)
        yield m, m.pack()
