"""Persistent memories as the user sees them: one current memory per fact and per topic.

Every way a memory arrives (``remember``, a plain-word trigger, extraction after a flush)
goes through ``MemoryBook.add``: a near-duplicate of a current memory adds its message as
one more source of that memory instead of a second copy; a memory on the topic of a current
one ("we use MySQL", then "no MySQL, PostgreSQL") supersedes it, and the old one is kept as
history. The hot tier's cached list is dropped after every change the archive committed.

The book also keeps each memory's sources: a plain-word trigger's memory is cited by the
message that asked for it (``remember_triggered``, then ``cite`` once the message has its
seq), and forgetting a memory (``forget``) makes what it superseded current again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from hermes_redis.core.embeddings import fuse
from hermes_redis.core.errors import BackendUnavailableError, NotFoundError
from hermes_redis.core.models import Memory, Message, check_content
from hermes_redis.core.text import relevant
from hermes_redis.core.tokens import Tokenizer
from hermes_redis.memory import extraction
from hermes_redis.memory.triggers import trigger_fact
from hermes_redis.store.archive import ArchiveStore
from hermes_redis.store.hot import HotStore
from hermes_redis.store.vectors import VectorIndex

log = logging.getLogger(__name__)


class MemoryBook:
    def __init__(self, cold: ArchiveStore, hot: HotStore, tokenizer: Tokenizer, max_extracted: int,
                 extractor: extraction.Extractor | None = None,
                 vectors: VectorIndex | None = None) -> None:
        self.cold, self.hot, self.tokenizer = cold, hot, tokenizer
        self.max_extracted = max_extracted
        self.extractor = extractor or extraction.RuleExtractor()
        self.vectors = vectors  # issue 31: memories found by meaning too; None: by words

    def remember(self, user_id: str, text: str, session_id: str | None) -> str:
        """Store ``text`` as an explicit memory of a user the archive knows (a session or an
        API key of theirs), committed before this returns; returns the memory that holds it."""
        if not self.cold.knows_user(user_id):
            raise NotFoundError(f"no user {user_id[:80]}: they have no session and no API key; "
                                "create a session for them first (or check the spelling)")
        memory_id, _ = self.add(user_id, text, session_id)
        assert memory_id is not None  # only an extracted memory can be refused
        if self.vectors is not None:  # extracted and triggered ones: after their flush
            self.vectors.fill_memories(user_id)
        return memory_id

    def memories(self, user_id: str, query: str | None, superseded: bool) -> list[Memory]:
        """The user's current memories, oldest first (``superseded``: with the ones newer
        memories replaced); with ``query``, only those sharing a distinctive word with it,
        best match first."""
        rows = self.cold.memories(user_id, superseded=superseded)
        if query is None:
            return rows
        by_words = relevant(rows, query, key=lambda m: m.content)
        if self.vectors is None:
            return by_words
        near = self.vectors.nearest_memories(user_id, query, limit=20)
        by_id = {m.memory_id: m for m in rows}
        return [by_id[i] for i in fuse([[m.memory_id for m in by_words], near], len(rows))
                if i in by_id]

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

    def forget(self, memory_id: str, user_id: str | None = None) -> None:
        """Delete one memory (of ``user_id`` when given: another user's answers NotFoundError
        like a missing one); what it superseded is current again, and the user's cached
        memories are dropped after the commit, so the next read reloads them."""
        found = self.cold.memory(memory_id)
        if found is None or (user_id is not None and found.user_id != user_id):
            raise NotFoundError(f"no memory {memory_id[:80]}; list the user's memories for its id")
        self.cold.forget_memory(memory_id)
        self.hot.memories_changed(found.user_id)

    def current(self, user_id: str, gen: int | None) -> list[str]:
        """The user's current memories as the context shows them: the hot tier's cached list,
        else read from the archive and cached (``gen``: the cache generation already read,
        None when not yet). An archive that cannot be read gives none (logged)."""
        try:
            if gen is None:
                cached, gen = self.hot.cached_memories(user_id)
                if cached is not None:
                    return cached
            memories = [m.content for m in self.cold.memories(user_id)]
        except BackendUnavailableError as err:  # the hot tier alone still gives a context
            log.warning("%s; context built without persistent memories", err)
            return []
        self.hot.cache_memories(user_id, gen, memories)
        return memories

    @staticmethod
    def triggered(messages: Sequence[Message]) -> dict[int, str]:
        """What user messages ask to remember in plain words ("记住：…", "remember that …"),
        by position (a trigger with nothing to remember is a ValidationError)."""
        facts = {i: trigger_fact(m.content) for i, m in enumerate(messages) if m.role == "user"}
        return {i: f for i, f in facts.items() if f}

    def remember_triggered(self, user_id: str, messages: Sequence[Message], facts: dict[int, str],
                           max_bytes: int) -> tuple[list[Message], list[str]]:
        """Store each fact as the user's memory, and have its message cite it in
        ``memory_refs`` (so ``append`` reports what it recorded: an agent can say "已记录").
        Returns the messages and the memories that are new (what ``undo`` takes back)."""
        sid = messages[0].session_id
        made: list[str] = []
        out = list(messages)
        for i, fact in facts.items():
            text = check_content(fact, max_bytes).strip()
            memory_id, new = self.add(user_id, text, sid, kind="trigger")
            assert memory_id is not None  # only an extracted memory can be refused
            if new:
                made.append(memory_id)
            out[i] = replace(out[i], memory_refs=(*out[i].memory_refs, memory_id))
        return out, made

    def cite(self, messages: Sequence[Message], seqs: Sequence[int], facts: dict[int, str]) -> None:
        """Record the stored messages (now with ``seqs``) as the sources of the memories their
        triggers made: the memory is the last one each cites, and forgetting the message
        forgets it."""
        for i in facts:
            m = messages[i]
            self.cold.add_source(m.memory_refs[-1], m.session_id, seqs[i], m.message_id)

    def undo(self, made: Sequence[str]) -> None:
        """The messages were not stored: neither is what they asked to remember."""
        for memory_id in made:
            self.forget(memory_id)
