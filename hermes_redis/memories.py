"""Persistent memories as the user sees them: one current memory per fact and per topic.

Every way a memory arrives (``remember``, a plain-word trigger, extraction after a flush)
goes through ``MemoryBook.add``: a near-duplicate of a current memory adds its message as
one more source of that memory instead of a second copy; a memory on the topic of a current
one ("we use MySQL", then "no MySQL, PostgreSQL") supersedes it, and the old one is kept as
history. The hot tier's cached list is dropped after every change the archive committed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from hermes_redis import extraction
from hermes_redis.archive import ArchiveStore
from hermes_redis.hot import HotStore
from hermes_redis.models import Memory, Message
from hermes_redis.tokens import Tokenizer

log = logging.getLogger(__name__)


class MemoryBook:
    def __init__(self, cold: ArchiveStore, hot: HotStore, tokenizer: Tokenizer, max_extracted: int,
                 extractor: extraction.Extractor | None = None) -> None:
        self.cold, self.hot, self.tokenizer = cold, hot, tokenizer
        self.max_extracted = max_extracted
        self.extractor = extractor or extraction.RuleExtractor()

    def add(self, user_id: str, content: str, session_id: str | None = None,
            seq: int | None = None, kind: str = "explicit",
            current: list[Memory] | None = None) -> tuple[str | None, bool]:
        """Store ``content`` for ``user_id`` unless a current memory says the same; returns
        the memory that holds it (None: an extracted memory whose message was forgotten
        meanwhile) and whether it is new. Under the user's lock (``hot.user_lock``), so that
        processes adding one fact at once store it once. ``current``: the user's current
        memories, read by a caller that holds the lock and adds several (kept up to date
        here)."""
        if current is None:
            with self.hot.user_lock(user_id):
                return self.add(user_id, content, session_id, seq, kind,
                                self.cold.memories(user_id))
        memories = current
        same = next((m for m in memories if extraction.near_duplicate(m.content, content)), None)
        if same is not None:
            if session_id is not None and seq is not None:
                self.cold.add_source(same.memory_id, session_id, seq)
            return same.memory_id, False
        topic = extraction.topic_of(content)
        replaced = [m.memory_id for m in memories if topic is not None and m.topic == topic]
        memory_id = self.cold.remember(user_id, content, self.tokenizer.count(content),
                                       session_id, seq=seq, kind=kind, topic=topic,
                                       supersedes=replaced)
        if memory_id is None:
            return None, False
        if kind == "extracted":
            self.cold.drop_oldest_extracted(user_id, self.max_extracted)
        self.hot.memories_changed(user_id)  # after the commit: the next read loads it
        if current is not None:
            current[:] = [m for m in current if m.memory_id not in replaced]
            stored = self.cold.memory(memory_id)
            if stored is not None:
                current.append(stored)
        return memory_id, True

    def extract(self, user_id: str, messages: Sequence[Message]) -> list[str]:
        """Store the durable facts the user stated in ``messages`` (archived ones); returns
        the memories they went to, new or already there."""
        facts = self.extractor.extract([m for m in messages if not m.memory_refs])  # triggers: stored
        if not facts:
            return []
        sid = messages[0].session_id
        made = []
        with self.hot.user_lock(user_id):  # the extractor (maybe a remote model) ran unlocked
            current = self.cold.memories(user_id)
            for fact in facts:
                memory_id, _ = self.add(user_id, fact.content, sid, fact.seq, "extracted",
                                        current)
                if memory_id is not None:
                    made.append(memory_id)
        return made
