"""The hot tier's interface: what the rest of the system needs from it, in plain types,
and the helpers its backends share."""

from __future__ import annotations

import logging
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, NamedTuple, TypeVar

import msgpack

from hermes_redis.core.models import META_FIELDS, Message, SessionMeta

_pack_command: Callable[[tuple[Any, ...]], bytes] | None
try:  # hiredis, a dependency on CPython: packs a command in C, 7x faster than redis-py's packer
    from hiredis import pack_command as _pack_command
except ImportError:  # pragma: no cover - other Pythons
    _pack_command = None

T = TypeVar("T")
Dedupe = bool | Literal["checked"]
LUA_DIR = Path(__file__).with_name("lua")
log = logging.getLogger(__name__)

MEMORIES_CACHE_TTL = 3600  # a cached memory list lives at most this long (seconds)
USER_LOCK_SECONDS = 30  # a user's memory lock: how long a dead holder keeps it, and a waiter waits
# Newest entries (plus the batch) a retried append also searches (append.lua): sessions
# appended to before the id map (``{sid}:ids``) existed. The map itself has no window.
DEDUPE_WINDOW = 64
MEANS_HELD = 10_000  # sessions whose mean message size a process remembers to size its reads
# Entries of up to DECODED_BYTES decoded once per process, the last DECODED_HELD kept (at most
# ≈ 10 MB): every context() of an agent's loop reads mostly the page the one before it read,
# and decoding it (msgpack, a Message per entry) was a fifth of the read. The entry's bytes are
# the key, so a changed entry is a new one; a Message is immutable, so sharing one is safe.
DECODED_HELD = 2048
DECODED_BYTES = 2048
_decode = lru_cache(maxsize=DECODED_HELD)(Message.unpack)
_STATUS = META_FIELDS.index("status")  # a meta without one: no session


class Appended(NamedTuple):
    """What ``HotStore.append`` did: the seqs, whether the caller enqueues a flush, and
    whether an earlier attempt held the ids already (``earlier``: nothing was stored, the
    seqs are that attempt's, 0 for an id it lacks)."""

    seqs: list[int]
    enqueue: bool
    earlier: bool = False


class ArchiveCheckNeeded(Exception):
    """A deduplicating append found none of its ids in the hot id map, which lacks the
    session's archived messages: look in the archive, then append with ``dedupe="checked"``."""


def _packed(commands: list[tuple[Any, ...]]) -> bytes | None:
    """``commands`` in Redis's protocol, packed by hiredis (None without it)."""
    return b"".join(map(_pack_command, commands)) if _pack_command is not None else None


def page_size(budget: int, meta: SessionMeta) -> int:
    """About as many messages as the budget holds at the session's mean size (its counters),
    plus a margin, so one read usually does (read.lua computes the same)."""
    return page_for(budget, mean_tokens(meta))


def mean_tokens(meta: SessionMeta) -> float:
    """Tokens per message by the session's counters (64 for an empty session)."""
    count = meta.message_count
    return max(1, meta.total_tokens) / count if count > 0 else 64


def page_for(budget: int, mean: float) -> int:
    return max(16, min(1024, int(budget / (mean + 4) * 1.25) + 8))


@dataclass(frozen=True)
class HotRead:
    """One ``HotStore.read``: the meta, the newest page (entries, size asked for) and the
    user's cached memories with their cache generation."""

    meta: SessionMeta | None
    entries: list[Any]
    size: int
    memories: list[str] | None
    memories_gen: int

    @property
    def first(self) -> tuple[list[Any], int]:
        return self.entries, self.size


class HotStore(ABC):
    """What the rest of the system needs from the hot tier, in plain types. Callers ask a
    store what it can do (``needs_worker``, ``url``), never its class."""

    name: str
    url: str | None = None  # where it lives, password redacted; None in-process
    needs_worker = False  # True: turns reach the archive through RQ workers, not in-process
    warnings: tuple[str, ...] | list[str] = ()  # what the connect check found unsafe but allowed

    @abstractmethod
    def create(self, sid: str, meta: SessionMeta, ttl: int) -> bool:
        """Create the session; False if it exists already."""

    @abstractmethod
    def append(self, msgs: Sequence[Message], now: float, title: str,
               full_texts: Mapping[str, str] | None = None,
               dedupe: Dedupe = False) -> Appended:
        """Store ``msgs`` (one session's, in order) with the next consecutive seqs, atomically;
        returns their seqs and whether a flush must be enqueued. ``full_texts`` maps the
        message_id of a capped tool result to its uncapped text, kept until it is archived.
        ``dedupe``: if the session's id map holds any of these message_ids (an earlier
        attempt landed), return those seqs (``earlier``) and store nothing; an id forgotten
        in the session is a ConflictError; ArchiveCheckNeeded when the map lacks archived
        messages and ``dedupe`` is not ``"checked"`` (the caller looked there)."""

    @abstractmethod
    def full_texts(self, sid: str, message_ids: list[str]) -> dict[str, str]:
        """The uncapped texts kept for those of ``message_ids`` that have one (until archived)."""

    @abstractmethod
    def meta(self, sid: str) -> SessionMeta | None:
        """The session's meta; None when the store does not hold it (never created, expired,
        dropped)."""

    def metas(self, sids: list[str]) -> list[SessionMeta | None]:
        """``meta`` of many sessions (one round trip on Redis)."""
        return [self.meta(sid) for sid in sids]

    @abstractmethod
    def page(self, sid: str, skip: int, count: int) -> list[Message]:
        """Up to ``count`` messages ending ``skip`` messages before the newest, oldest first."""

    @abstractmethod
    def length(self, sid: str) -> int:
        """How many messages the hot list holds (0 for no session)."""

    @abstractmethod
    def ack_flush(self, sid: str, upto_seq: int, ttl: int, archived_ids: list[str]) -> int:
        """Mark seq <= upto_seq archived; returns the backlog left (-1: no such session)."""

    @abstractmethod
    def reseat(self, sid: str, first: int, high: int, gap: list[Message]) -> int:
        """Redis reused seqs the archive holds (it went back in time): put ``gap`` (the archived
        messages with seq ``first``..``high``) back and renumber every entry from seq ``first``
        on to follow ``high``, in order, atomically; appends continue above. Returns how many
        were renumbered (-1: no such session)."""

    @abstractmethod
    def compact(self, sid: str, expected_seq: int | None, summary: str, new_seq: int | None,
                expected: SessionMeta | None = None) -> int:
        """Install a summary covering seq <= new_seq (None: up to the newest) and trim what it
        covers and is archived. ``expected_seq`` None skips the compare-and-set; ``expected``,
        the meta the summary was built from, also fails it when the summary text or the forget
        count moved since (a forget meanwhile: the summary may hold what it removed).
        Returns trimmed count, -1 if the session is gone, -2 if the summary moved meanwhile."""

    @abstractmethod
    def forget(self, sid: str, targets: list[tuple[str, int, int]]) -> int:
        """Remove (message_id, seq, tokens) targets, and the full texts of tool results not yet
        archived; idempotent per message_id."""

    @abstractmethod
    def pop(self, sid: str, target: tuple[str, int, int]) -> bool:
        """Forget one (message_id, seq, tokens) target, atomically: True for the one call that
        forgot it, False when it was forgotten already (a concurrent pop got it)."""

    @abstractmethod
    def hydrate(self, sid: str, meta: SessionMeta, messages: list[Message], ttl: int) -> bool:
        """Load a session back from the archive (``meta`` and its newest ``messages``, all
        archived, so it gets ``ttl``); False, changing nothing, when the store holds it."""

    @abstractmethod
    def set_fields(self, sid: str, fields: Mapping[str, str]) -> None:
        """Overwrite meta ``fields`` (``SessionMeta.changes``) of a session the store holds."""

    @abstractmethod
    def clear_pending(self, sid: str) -> None:
        """Note that a flush has started: the next append enqueues another one."""

    @abstractmethod
    def drop(self, sid: str) -> None:
        """Remove the session's hot keys (the archive keeps its record)."""

    @abstractmethod
    def ttl_left(self, sid: str) -> int | None:
        """Seconds until expiry; None when it will not expire."""

    @abstractmethod
    def session_ids(self) -> list[str]:
        """Every session in the hot index, newest first (may include expired ones)."""

    @abstractmethod
    def unindex(self, sids: list[str]) -> None:
        """Drop ``sids`` from the session index (entries whose keys expired)."""

    @abstractmethod
    def backlog_sessions(self, older_than: float) -> list[str]:
        """Sessions holding unarchived messages since before ``older_than``."""

    def messages(self, sid: str) -> list[Message]:
        """The whole list in one read: a length then a page would miss the oldest entries
        when appends land in between (and forget would miss them)."""
        return self.page(sid, 0, sys.maxsize)

    def tail(self, sid: str, page_size: int = 64,
             first: tuple[list[Any], int] | None = None) -> Iterator[Message]:
        """Newest first, paging backwards; an entry is decoded only when the caller reaches
        it, so a reader that stops early (``context()``) pays for what it uses. ``first``:
        the newest page already read (its entries, the size asked for), from ``read``."""
        skip, newest = 0, sys.maxsize
        while True:
            if first is not None:
                (entries, asked), first = first, None
            else:
                entries, asked = self._entries(sid, skip, page_size), page_size
            for entry in reversed(entries):
                m = self._entry(sid, entry)
                if m is not None and m.seq < newest:  # appends between pages shift the window
                    newest = m.seq
                    yield m
            if len(entries) < asked:
                return
            skip += asked

    @abstractmethod
    def read(self, sid: str, ttl: int | None, budget: int, user_id: str | None = None) -> HotRead:
        """What ``context()`` needs, in one step (one round trip on Redis): the meta (None:
        no session), the newest page of the list sized for ``budget`` (``page_size``), and
        ``user_id``'s cached persistent memories (None: not cached). Unless ``ttl`` is None,
        an active session's TTL is renewed, and only a fully archived session gets one
        (invariant 2): activity renews it, unarchived turns never expire."""

    @abstractmethod
    def cached_memories(self, user_id: str) -> tuple[list[str] | None, int]:
        """The user's persistent memories as cached (None: not cached) and the cache's
        generation, for ``cache_memories``."""

    @abstractmethod
    def cache_memories(self, user_id: str, gen: int, memories: list[str]) -> None:
        """Cache ``memories`` unless they changed since generation ``gen`` was read."""

    @abstractmethod
    def memories_changed(self, user_id: str) -> None:
        """Drop the user's cached memories (after the archive committed a change)."""

    @abstractmethod
    def user_lock(self, user_id: str) -> AbstractContextManager[None]:
        """Held while the user's memories are read, compared and written (``MemoryBook``):
        two processes adding one fact at once would each find it missing and store it twice."""

    def _entries(self, sid: str, skip: int, count: int) -> list[Any]:
        """The stored entries ``page`` would return, not yet decoded."""
        return self.page(sid, skip, count)

    def _entry(self, sid: str, entry: Any) -> Message | None:
        """One stored entry as a Message; None when it cannot be read."""
        return entry

    def memory_use(self) -> tuple[int, int] | None:
        """(bytes used, the maxmemory limit, 0 for none); None where there is no limit to meet."""
        return None

    def restarted(self) -> bool:
        """True once per server restart or failover, for the first process to ask (it then
        checks the hot tier against the archive); an in-process store never restarts."""
        return False

    def ping(self) -> None:  # noqa: B027 - optional hook, nothing to check in-process
        """Raise BackendUnavailableError when the store cannot be reached."""

    def close(self) -> None:  # noqa: B027 - optional hook, nothing to release in-process
        """Release connections."""



def _oldest(pairs: list[Any]) -> float:
    return min((float(score) for _, score in pairs), default=0.0)


def _memories(raw: bytes | None) -> list[str] | None:
    return None if raw is None else [str(m) for m in msgpack.unpackb(raw, raw=False)]


def _meta(values: Sequence[bytes | None]) -> SessionMeta | None:
    """The meta from the hash's META_FIELDS values, read by name (HMGET): the scripts'
    bookkeeping fields (a ``forgot:`` mark per forgotten message) are never read back."""
    raw = {name: v.decode("utf-8", "replace")
           for name, v in zip(META_FIELDS, values, strict=True) if v is not None}
    return SessionMeta.from_hash(raw) if "status" in raw else None


def forgotten_id(sid: str, message_id: str) -> str:
    """The ConflictError's text for a retry of a message forgotten in its session."""
    return (f"message_id {message_id[:40]} was forgotten in session {sid}; a forgotten message "
            "is not stored again: send it with a new message_id")


def _first_line(err: BaseException) -> str:
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    return text[:200]
