"""The one owner of every write that touches both tiers, composed of one module per
responsibility:

- ``load``: create a session in both tiers, load an expired one back from the archive
- ``append``: the two-tier write of an append (memory book → hot append → archive source)
- ``flush``: archive the backlog; renumber after Redis went back in time
- ``compaction``: fold older turns into the summary, trim them from the hot tier, scrub
- ``forget``: forget, pop, clear and delete in both tiers
- ``lineage``: a session that continues or forks another (issue 30)
- ``status``: archive/restore in both tiers, ``info``, the backlog's size and age
- ``read`` and ``search``: reading across the tiers (never writing)

Flush and compaction are safe to crash at any point and to run again, from any number of
workers: flush is idempotent by message_id (invariant 3) and acknowledges only what the
archive committed; compaction installs its summary by compare-and-set and trims only
archived messages (invariant 2).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hermes_redis.context.summarizers import Summarizer
from hermes_redis.core.config import Config
from hermes_redis.core.models import CompactResult, Message, SearchHit, SessionMeta
from hermes_redis.core.tokens import Tokenizer
from hermes_redis.memory.book import MemoryBook
from hermes_redis.store.archive import ArchiveStore
from hermes_redis.store.hot import HotStore
from hermes_redis.store.vectors import VectorIndex
from hermes_redis.tiers import search as search_mod
from hermes_redis.tiers.append import Appender, MemoryPressure
from hermes_redis.tiers.compaction import Compactor
from hermes_redis.tiers.flush import Flusher
from hermes_redis.tiers.forget import Forgetter
from hermes_redis.tiers.lineage import Lineage
from hermes_redis.tiers.load import Loader
from hermes_redis.tiers.read import Owners, Reader, split_turns
from hermes_redis.tiers.status import Status

__all__ = ["Maintainer", "MemoryPressure", "split_turns"]


class Maintainer:
    def __init__(self, config: Config, hot: HotStore, cold: ArchiveStore,
                 summarizer: Summarizer, tokenizer: Tokenizer, book: MemoryBook,
                 vectors: VectorIndex | None = None) -> None:
        self.hot, self.cold = hot, cold
        self.loader = Loader(config, hot, cold)
        self.read = Reader(hot, cold, vectors)
        self.owners = Owners(hot, cold)
        extract = config.memory.persistent.auto_extract
        self.flusher = Flusher(config, hot, cold, book if extract else None, vectors)
        self.compactor = Compactor(config, hot, cold, summarizer, tokenizer, self.flusher,
                                   self.read)
        self.forgetter = Forgetter(hot, cold, self.loader, self.read, self.flusher,
                                   self.compactor)
        self.status = Status(hot, cold, self.loader, self.flusher)
        self.appender = Appender(config, hot, cold, tokenizer, book, self.loader, self.read)
        self.pressure: MemoryPressure = self.appender.pressure
        self.lineage = Lineage(config, hot, cold, tokenizer, self.loader, self.read, self.flusher)

    # --- writes to both tiers ----------------------------------------------------------------
    def create(self, sid: str, meta: SessionMeta, own_id: bool) -> None:
        self.loader.create(sid, meta, own_id)

    def load(self, sid: str) -> SessionMeta:
        return self.loader.load(sid)

    def append(self, sid: str, checked: list[dict[str, Any]], dedupe: bool,
               user_id: str | None) -> tuple[list[Message], bool]:
        return self.appender.append(sid, checked, dedupe, user_id)

    def flush(self, sid: str) -> int:
        return self.flusher.flush(sid)

    def catch_up(self) -> list[str]:
        return self.flusher.catch_up()

    def maintain(self, sid: str) -> tuple[int, int]:
        return self.compactor.maintain(sid)

    def compact(self, sid: str, force: bool = False) -> CompactResult | None:
        return self.compactor.compact(sid, force)

    def needs_compaction(self, sid: str) -> bool:
        return self.compactor.needs_compaction(sid)

    def sweep(self, enqueue: Callable[[str], None], grace: float = 30.0) -> list[str]:
        return self.compactor.sweep(enqueue, grace)

    def forget(self, sid: str, doomed: list[Message], memories: bool = True) -> int:
        return self.forgetter.forget(sid, doomed, memories)

    def forget_last(self, sid: str, n: int) -> int:
        return self.forgetter.forget_last(sid, n)

    def forget_matching(self, sid: str, needle: str) -> int:
        return self.forgetter.forget_matching(sid, needle)

    def pop(self, sid: str) -> Message | None:
        return self.forgetter.pop(sid)

    def clear(self, sid: str, history: bool = False) -> None:
        self.forgetter.clear(sid, history)

    def delete(self, sid: str, purge: bool) -> None:
        self.forgetter.delete(sid, purge)

    def continue_session(self, sid: str, new_sid: str) -> None:
        self.lineage.continue_session(sid, new_sid)

    def fork(self, sid: str, new_sid: str, at_seq: int | None) -> int:
        return self.lineage.fork(sid, new_sid, at_seq)

    def set_status(self, sid: str, status: str, allowed_from: tuple[str, ...]) -> None:
        self.status.set_status(sid, status, allowed_from)

    # --- reads across both tiers -------------------------------------------------------------
    def history(self, sid: str, upto_seq: int | None = None, after_seq: int = 0,
                limit: int | None = None) -> list[Message]:
        return self.read.history(sid, upto_seq, after_seq, limit)

    def search(self, query: str, user_id: str | None, limit: int) -> list[SearchHit]:
        return search_mod.search(self.hot, self.cold, query, user_id, limit)
