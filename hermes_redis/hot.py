"""The hot tier: each session's newest messages plus a meta hash.

One small interface, two backends: ``RedisHot`` (shared between processes, atomic
steps in Lua scripts beside this file) and ``MemoryHot`` (one process, same rules).
Nothing above this module knows which one it talks to.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import msgpack
import redis
from redis.crc import key_slot

from hermes_redis.errors import BackendUnavailableError, NotFoundError, StateError
from hermes_redis.models import META_FIELDS, Message, SessionMeta

_pack_command: Callable[[tuple[Any, ...]], bytes] | None
try:  # hiredis, a dependency on CPython: packs a command in C, 7x faster than redis-py's packer
    from hiredis import pack_command as _pack_command
except ImportError:  # pragma: no cover - other Pythons
    _pack_command = None

T = TypeVar("T")
LUA_DIR = Path(__file__).with_name("lua")
log = logging.getLogger(__name__)

MEMORIES_CACHE_TTL = 3600  # a cached memory list lives at most this long (seconds)
USER_LOCK_SECONDS = 30  # a user's memory lock: how long a dead holder keeps it, and a waiter waits
DEDUPE_WINDOW = 64  # newest entries (plus the batch) a retried append searches (append.lua)
MEANS_HELD = 10_000  # sessions whose mean message size a process remembers to size its reads
# Entries of up to DECODED_BYTES decoded once per process, the last DECODED_HELD kept (at most
# ≈ 10 MB): every context() of an agent's loop reads mostly the page the one before it read,
# and decoding it (msgpack, a Message per entry) was a fifth of the read. The entry's bytes are
# the key, so a changed entry is a new one; a Message is immutable, so sharing one is safe.
DECODED_HELD = 2048
DECODED_BYTES = 2048
_decode = lru_cache(maxsize=DECODED_HELD)(Message.unpack)
_STATUS = META_FIELDS.index("status")  # a meta without one: no session


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
    store what it can do (``needs_worker``, ``url``, ``queue_connection``), never its class."""

    name: str
    url: str | None = None  # where it lives, password redacted; None in-process
    needs_worker = False  # True: turns reach the archive through RQ workers, not in-process
    warnings: tuple[str, ...] | list[str] = ()  # what the connect check found unsafe but allowed

    def queue_connection(self) -> Any:
        """The Redis connection RQ's queue and workers use; None where there are no workers."""
        return None

    @abstractmethod
    def create(self, sid: str, meta: SessionMeta, ttl: int) -> bool:
        """Create the session; False if it exists already."""

    @abstractmethod
    def append(self, msgs: Sequence[Message], now: float, title: str,
               full_texts: Mapping[str, str] | None = None,
               dedupe: bool = False) -> tuple[list[int], bool]:
        """Store ``msgs`` (one session's, in order) with the next consecutive seqs, atomically;
        returns (their seqs, whether a flush must be enqueued). ``full_texts`` maps the
        message_id of a capped tool result to its uncapped text, kept until it is archived.
        ``dedupe``: if the newest entries hold these message_ids already (an earlier attempt
        landed), return their seqs and store nothing."""

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


class MemoryHot(HotStore):
    """In-process hot tier: lost on restart, same rules as Redis (TTL waits for the archive)."""

    name = "memory"

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._meta: dict[str, dict[str, str]] = {}  # each hash, as Redis would hold it
        self._lists: dict[str, list[Message]] = {}
        self._expires: dict[str, float] = {}
        self._index: dict[str, float] = {}
        self._dirty: dict[str, float] = {}
        self._full: dict[tuple[str, str], str] = {}  # (session_id, message_id) -> text
        self._memories: dict[str, list[str]] = {}
        self._memories_gen: dict[str, int] = {}
        self._memories_lock = threading.Lock()

    def cached_memories(self, user_id: str) -> tuple[list[str] | None, int]:
        with self._lock:
            cached = self._memories.get(user_id)
            return (None if cached is None else list(cached)), self._memories_gen.get(user_id, 0)

    def cache_memories(self, user_id: str, gen: int, memories: list[str]) -> None:
        with self._lock:
            if self._memories_gen.get(user_id, 0) == gen:
                self._memories[user_id] = list(memories)

    def memories_changed(self, user_id: str) -> None:
        with self._lock:
            self._memories_gen[user_id] = self._memories_gen.get(user_id, 0) + 1
            self._memories.pop(user_id, None)

    @contextmanager
    def user_lock(self, user_id: str) -> Iterator[None]:
        with self._memories_lock:  # one process: one lock for every user is enough
            yield

    def _hash(self, sid: str) -> dict[str, str] | None:
        deadline = self._expires.get(sid)
        if deadline is not None and deadline <= time.time():
            self._meta.pop(sid, None)
            self._lists.pop(sid, None)
            self._expires.pop(sid, None)
        return self._meta.get(sid)

    def _expire(self, sid: str, ttl: int) -> None:
        meta = self._meta[sid]
        if ttl > 0 and int(meta["flushed_seq"]) >= int(meta["last_seq"]):
            self._expires[sid] = time.time() + ttl
        else:
            self._expires.pop(sid, None)

    def create(self, sid: str, meta: SessionMeta, ttl: int) -> bool:
        with self._lock:
            if self._hash(sid) is not None:
                return False
            self._meta[sid] = meta.to_hash()
            self._lists[sid] = []
            self._index[sid] = meta.updated_at
            self._expire(sid, ttl)
            return True

    def append(self, msgs: Sequence[Message], now: float, title: str,
               full_texts: Mapping[str, str] | None = None,
               dedupe: bool = False) -> tuple[list[int], bool]:
        sid = msgs[0].session_id
        with self._lock:
            meta = self._hash(sid)
            if meta is None:
                raise NotFoundError("NOSESSION")
            if meta["status"] != "active":
                raise StateError(f"STATUS {meta['status']}")
            if dedupe:
                window = {m.message_id: m.seq
                          for m in self._lists[sid][-(DEDUPE_WINDOW + len(msgs)):]}
                if any(m.message_id in window for m in msgs):
                    return [window.get(m.message_id, 0) for m in msgs], False
            first = int(meta["last_seq"]) + 1
            seqs = list(range(first, first + len(msgs)))
            self._lists[sid].extend(m.with_seq(seq) for m, seq in zip(msgs, seqs, strict=True))
            meta["last_seq"] = str(seqs[-1])
            meta["message_count"] = str(int(meta["message_count"]) + len(msgs))
            meta["total_tokens"] = str(int(meta["total_tokens"]) + sum(m.token_count for m in msgs))
            meta["updated_at"] = repr(now)
            if title and not meta["title"]:
                meta["title"] = title
            for message_id, text in (full_texts or {}).items():
                if text:
                    self._full[(sid, message_id)] = text
            self._index[sid] = now
            self._dirty.setdefault(sid, now)
            self._expires.pop(sid, None)
            enqueue = "pending" not in meta
            meta.setdefault("pending", repr(now))
            return seqs, enqueue

    def meta(self, sid: str) -> SessionMeta | None:
        with self._lock:
            meta = self._hash(sid)
            if meta is None:
                return None
            return SessionMeta.from_hash(meta)

    def page(self, sid: str, skip: int, count: int) -> list[Message]:
        with self._lock:
            items = self._lists.get(sid, []) if self._hash(sid) is not None else []
            end = len(items) - skip
            return list(items[max(0, end - count) : max(0, end)])

    def length(self, sid: str) -> int:
        with self._lock:
            return len(self._lists.get(sid, [])) if self._hash(sid) is not None else 0

    def full_texts(self, sid: str, message_ids: list[str]) -> dict[str, str]:
        with self._lock:
            return {m: self._full[(sid, m)] for m in message_ids if (sid, m) in self._full}

    def ack_flush(self, sid: str, upto_seq: int, ttl: int, archived_ids: list[str]) -> int:
        with self._lock:
            meta = self._hash(sid)
            if meta is None:
                return -1
            for mid in archived_ids:
                self._full.pop((sid, mid), None)
            flushed = max(int(meta["flushed_seq"]), upto_seq)
            meta["flushed_seq"] = str(flushed)
            bound = min(flushed, int(meta["summary_seq"]))  # summarized and archived: trim
            self._lists[sid] = [m for m in self._lists[sid] if m.seq > bound]
            left = int(meta["last_seq"]) - flushed
            if left <= 0:
                self._dirty.pop(sid, None)
                self._expire(sid, ttl)
            return left

    def reseat(self, sid: str, first: int, high: int, gap: list[Message]) -> int:
        with self._lock:
            meta = self._hash(sid)
            if meta is None:
                return -1
            items = self._lists[sid]
            moved = [m for m in items if m.seq >= first]
            renumbered = [m.with_seq(high + i) for i, m in enumerate(moved, 1)]
            self._lists[sid] = [m for m in items if m.seq < first] + list(gap) + renumbered
            meta["last_seq"] = str(max(int(meta["last_seq"]), high + len(moved)))
            meta["message_count"] = str(int(meta["message_count"]) + len(gap))
            meta["total_tokens"] = str(int(meta["total_tokens"]) + sum(m.token_count for m in gap))
            return len(moved)

    def compact(self, sid: str, expected_seq: int | None, summary: str, new_seq: int | None,
                expected: SessionMeta | None = None) -> int:
        with self._lock:
            meta = self._hash(sid)
            if meta is None:
                return -1
            current = int(meta["summary_seq"])
            target = int(meta["last_seq"]) if new_seq is None else new_seq
            if expected_seq is not None and (expected_seq != current or target < current):
                return -2
            if expected is not None and (meta["summary"], meta.get("forgets", "0")) != (
                    expected.summary, str(expected.forgets)):
                return -2
            meta["summary"], meta["summary_seq"] = summary, str(target)
            bound = min(target, int(meta["flushed_seq"]))
            items = self._lists[sid]
            keep = [m for m in items if m.seq > bound]
            self._lists[sid] = keep
            return len(items) - len(keep)

    def forget(self, sid: str, targets: list[tuple[str, int, int]]) -> int:
        with self._lock:
            meta = self._hash(sid)
            if meta is None:
                return 0
            fresh = [t for t in targets if f"forgot:{t[0]}" not in meta]
            for mid, _, _ in fresh:
                meta[f"forgot:{mid}"] = "1"
            for mid, _, _ in targets:
                self._full.pop((sid, mid), None)
            if fresh:
                meta["forgets"] = str(int(meta.get("forgets", "0")) + 1)
            drop = {seq for _, seq, _ in targets}
            items = self._lists[sid]
            self._lists[sid] = [m for m in items if m.seq not in drop]
            meta["message_count"] = str(int(meta["message_count"]) - len(fresh))
            meta["total_tokens"] = str(int(meta["total_tokens"]) - sum(t[2] for t in fresh))
            return len(items) - len(self._lists[sid])

    def pop(self, sid: str, target: tuple[str, int, int]) -> bool:
        with self._lock:
            meta = self._hash(sid)
            if meta is None or f"forgot:{target[0]}" in meta:
                return False
            self.forget(sid, [target])
            return True

    def hydrate(self, sid: str, meta: SessionMeta, messages: list[Message], ttl: int) -> bool:
        with self._lock:
            if self._hash(sid) is not None:
                return False
            self._meta[sid] = meta.to_hash()
            self._lists[sid] = list(messages)
            self._index[sid] = meta.updated_at
            self._expire(sid, ttl)
            return True

    def set_fields(self, sid: str, fields: Mapping[str, str]) -> None:
        with self._lock:
            meta = self._hash(sid)
            if meta is not None:
                meta.update(fields)

    def clear_pending(self, sid: str) -> None:
        with self._lock:
            meta = self._hash(sid)
            if meta is not None:
                meta.pop("pending", None)

    def drop(self, sid: str) -> None:
        with self._lock:
            for m in self._lists.get(sid, []):
                self._full.pop((sid, m.message_id), None)
            for table in (self._meta, self._lists, self._expires, self._index, self._dirty):
                table.pop(sid, None)

    def read(self, sid: str, ttl: int | None, budget: int, user_id: str | None = None) -> HotRead:
        with self._lock:
            cached, gen = self.cached_memories(user_id) if user_id is not None else (None, 0)
            meta = self.meta(sid)
            if meta is None:
                return HotRead(None, [], 0, cached, gen)
            if ttl is not None and meta.status == "active":
                self._expire(sid, ttl)
            size = page_size(budget, meta)
            return HotRead(meta, self._entries(sid, 0, size), size, cached, gen)

    def ttl_left(self, sid: str) -> int | None:
        with self._lock:
            deadline = self._expires.get(sid) if self._hash(sid) is not None else None
            return None if deadline is None else max(0, round(deadline - time.time()))

    def session_ids(self) -> list[str]:
        with self._lock:
            return [s for s, _ in sorted(self._index.items(), key=lambda kv: -kv[1])]

    def unindex(self, sids: list[str]) -> None:
        with self._lock:
            for sid in sids:
                self._index.pop(sid, None)

    def backlog_sessions(self, older_than: float) -> list[str]:
        with self._lock:
            return [s for s, since in self._dirty.items() if since <= older_than]


class RedisHot(HotStore):
    """Redis hot tier. Keys of one session share the hash tag ``{session_id}``."""

    name = "redis"
    needs_worker = True

    def __init__(self, client: redis.Redis, prefix: str, url: str, retries: int = 3,
                 queue: redis.Redis | None = None) -> None:
        self.client: Any = client  # redis-py's stubs type replies as bytes | str
        self.queue = queue  # redis.queue_url's Redis; None: RQ shares the hot tier's
        self.retries = retries
        self.warnings: list[str] = []  # what check_server found unsafe but allowed (info shows it)
        self.prefix = prefix
        self._means: dict[str, float] = {}  # session -> tokens per message, as last read
        self._requests: dict[tuple[Any, ...], tuple[list[Any], bytes | None]] = {}  # reads, packed
        self.url = redact_url(url)
        self._lanes = threading.local()  # each thread's connection for _exchange
        self._lanes_held: weakref.WeakSet[Any] = weakref.WeakSet()
        self._scripts: dict[str, Any] = {
            p.stem: client.register_script(p.read_text()) for p in sorted(LUA_DIR.glob("*.lua"))
        }

    # --- key layout: one function per key -------------------------------------------------
    def meta_key(self, sid: str) -> str:
        return f"{self.prefix}:{{{sid}}}:meta"

    def list_key(self, sid: str) -> str:
        return f"{self.prefix}:{{{sid}}}:msgs"

    def index_key(self, sid: str = "") -> str:
        """The session index (one global zset; per slot on a cluster, ``ClusterHot``)."""
        return f"{self.prefix}:sessions"

    def memories_key(self, user_id: str) -> str:
        return f"{self.prefix}:{{user:{user_id}}}:memories"

    def memories_gen_key(self, user_id: str) -> str:
        return f"{self.prefix}:{{user:{user_id}}}:memories-gen"

    def memories_lock_key(self, user_id: str) -> str:
        return f"{self.prefix}:{{user:{user_id}}}:memories-lock"

    def backlog_key(self, sid: str = "") -> str:
        """Sessions holding unarchived messages (one global zset; per slot on a cluster)."""
        return f"{self.prefix}:backlog"

    def full_key(self, sid: str) -> str:
        return f"{self.prefix}:{{{sid}}}:full"

    # --- operations ---------------------------------------------------------------------------
    def _call(self, fn: Callable[[], T]) -> T:
        """Every operation but append is idempotent, so a dropped connection is retried."""
        return self._retrying(lambda _n: fn())

    def _retrying(self, fn: Callable[[int], T]) -> T:
        """``fn(attempt)``; a dropped connection or a timeout is tried again ``retries`` times,
        50 ms · 2ⁿ⁻¹ apart (at most 1 s); wrong credentials are not retried. What cannot be
        done is a BackendUnavailableError saying what to check. (A loop, not redis-py's
        ``Retry`` in a context manager: every Redis call pays this, and that cost 2 µs more.)"""
        attempt = 0
        while True:
            try:
                return fn(attempt)
            except redis.AuthenticationError as err:  # a ConnectionError: caught first
                raise BackendUnavailableError(
                    f"Redis at {self.url} rejected the credentials ({_first_line(err)}); "
                    "check the user and password in redis.url") from None
            except (redis.ConnectionError, redis.TimeoutError) as err:
                if attempt >= self.retries:
                    raise BackendUnavailableError(
                        f"cannot reach Redis at {self.url} ({_first_line(err)}); "
                        "check that it runs or set HERMES_REDIS_URL") from None
                attempt += 1
                time.sleep(min(1.0, 0.025 * 2 ** attempt))
            except redis.exceptions.NoPermissionError as err:
                raise BackendUnavailableError(
                    f"Redis at {self.url} refused the command ({_first_line(err)}); check the "
                    "ACL user") from None
            except redis.ResponseError as err:
                # Redis 7 refuses a script up front (OutOfMemoryError); Redis 6 fails it at its
                # first write (a ResponseError naming OOM). Either way nothing was written.
                if not isinstance(err, redis.exceptions.OutOfMemoryError) and "OOM" not in str(err):
                    raise
                raise BackendUnavailableError(
                    f"Redis at {self.url} is out of memory (maxmemory), nothing was written; "
                    "start a worker to archive the backlog or raise maxmemory (keep a "
                    "noeviction policy)") from None

    def queue_connection(self) -> Any:
        return self.client if self.queue is None else self.queue

    def restarted(self) -> bool:
        def run() -> bool:
            run_id = str(self.client.info("server").get("run_id", ""))
            seen = self.client.getset(f"{self.prefix}:run-id", run_id)
            return (seen.decode() if isinstance(seen, bytes) else seen) != run_id

        return bool(self._call(run))

    def memory_use(self) -> tuple[int, int] | None:
        info = self._call(lambda: self.client.info("memory"))
        return int(info.get("used_memory", 0)), int(info.get("maxmemory", 0))

    def ping(self) -> None:
        self._call(self.client.ping)

    def close(self) -> None:
        for conn in list(self._lanes_held):
            conn.disconnect()
        self.client.close()
        if self.queue is not None:
            self.queue.close()

    def create(self, sid: str, meta: SessionMeta, ttl: int) -> bool:
        return self.hydrate(sid, meta, [], ttl)

    def append(self, msgs: Sequence[Message], now: float, title: str,
               full_texts: Mapping[str, str] | None = None,
               dedupe: bool = False) -> tuple[list[int], bool]:
        sid = msgs[0].session_id
        keys = [self.meta_key(sid), self.list_key(sid), self.index_key(sid), self.backlog_key(sid),
                self.full_key(sid)]
        full = full_texts or {}
        args: list[Any] = [repr(now), sid, title, 0, len(msgs)]
        for m in msgs:
            args += [m.pack(), m.token_count, m.message_id, full.get(m.message_id, "")]

        def attempt(n: int) -> Any:
            args[3] = 1 if n or dedupe else 0  # a retry first looks for an earlier attempt
            return self._evalsha("append", keys, args)

        try:
            enqueue, *seqs = self._retrying(attempt)
        except redis.ResponseError as err:
            text = str(err)
            if text.startswith("NOSESSION"):
                raise NotFoundError("NOSESSION") from None
            if text.startswith("STATUS"):
                raise StateError(text) from None
            raise
        return [int(s) for s in seqs], bool(enqueue)

    def meta(self, sid: str) -> SessionMeta | None:
        return _meta(self._call(lambda: self.client.hmget(self.meta_key(sid), META_FIELDS)))

    def read(self, sid: str, ttl: int | None, budget: int, user_id: str | None = None) -> HotRead:
        keys = [self.meta_key(sid), self.list_key(sid)]
        cache = [] if user_id is None else [self.memories_key(user_id), self.memories_gen_key(user_id)]
        args = [-1 if ttl is None else ttl, budget]
        page = page_for(budget, self._means.get(sid, 64))
        got = self._call(lambda: self._read(keys, args, cache, page))
        if not got:
            return HotRead(None, [], 0, None, 0)
        values, entries, size, *memories = got
        cached, gen = (_memories(memories[0]), int(memories[1] or 0)) if cache else (None, 0)
        meta = _meta(values)
        if meta is not None:
            if len(self._means) >= MEANS_HELD and sid not in self._means:
                self._means.clear()  # a hint: losing it costs one read a second page
            self._means[sid] = mean_tokens(meta)
        return HotRead(meta, list(entries), int(size), cached, gen)

    def _read(self, keys: list[str], args: list[Any], cache: list[str],
              page: int) -> list[Any]:
        """``[meta values, the newest page entries, page, cache values…]`` (``[]``: no
        session) in one MULTI: touch.lua renews the TTL (unless ``args[0]`` is -1), then the
        meta, the page and the memory ``cache`` keys are read natively, so the snapshot is
        atomic and Lua does only the conditional TTL (the whole read in Lua was 20 µs in
        Redis, this is 10 µs here). ``page`` is sized by the session's mean as this process
        last read it; the reader pages on when it is short."""
        meta, entries = keys
        touch = args[0] >= 0
        request = (meta, args[0], page, *cache)  # the same bytes for every read of a loop
        found = self._requests.get(request)
        if found is None:
            commands = [("MULTI",),
                        *([("EVALSHA", self._scripts["touch"].sha, 2, meta, entries, args[0])]
                          if touch else []),
                        ("HMGET", meta, *META_FIELDS), ("LRANGE", entries, -page, -1),
                        *(("GET", key) for key in cache), ("EXEC",)]
            if len(self._requests) >= MEANS_HELD:
                self._requests.clear()
            found = self._requests[request] = (commands, _packed(commands))
        commands, packed = found

        def run() -> list[Any]:
            replies = self._exchange(commands, packed)  # EXEC's replies, errors in place
            if touch and isinstance(replies[0], Exception):
                raise replies[0]  # NOSCRIPT: _reloading loads the scripts and sends it again
            return list(replies[touch:])

        values, page_entries, *cached = self._reloading(run)
        if values[_STATUS] is None:
            return []
        return [values, page_entries, page, *cached]

    def _exchange(self, commands: list[tuple[Any, ...]], packed: bytes | None = None) -> Any:
        """The reply to the last of ``commands``, all packed by hiredis (or ``packed``, their
        bytes packed before), sent in one write on this thread's connection and read off it
        directly: redis-py's call costs the client ≈ 3 µs more and its transaction pipeline
        more than a read saves. The replies before the last (MULTI's OK, QUEUED) are read and
        dropped. An error reply to the last is raised with the connection in step; any other
        failure drops the connection, so no reply is ever left unread on it."""
        conn = self._lane()
        in_step = False
        try:
            conn.send_packed_command([packed or _packed(commands)
                                      or b"".join(conn.pack_commands(commands))])
            for _ in commands[:-1]:
                conn.read_response()
            in_step = True
            return conn.read_response()
        except BaseException as err:
            if not (in_step and isinstance(err, redis.ResponseError)):
                conn.disconnect()
            raise

    def _lane(self) -> Any:
        """This thread's connection for ``_exchange``: made with the pool's settings and held
        out of it. A check-out and check-in cost ≈ 9 µs a call (a poll for unread data, two
        locks, observability hooks), and ``_exchange`` never leaves a reply unread, so there
        is nothing for the poll to find. A forked child makes its own; a thread's closes when
        the thread ends, every thread's by ``close()``."""
        conn = getattr(self._lanes, "conn", None)
        if conn is None or conn.pid != os.getpid():
            pool = self.client.connection_pool
            conn = self._lanes.conn = pool.connection_class(**pool.connection_kwargs)
            self._lanes_held.add(conn)
        return conn

    def _evalsha(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """Script ``name`` by a bare EVALSHA (redis-py's ``Script`` call costs the client a
        quarter more, its ``execute_command`` ≈ 3 µs more than ``_exchange``)."""
        command = ("EVALSHA", self._scripts[name].sha, len(keys), *keys, *args)
        return self._reloading(lambda: self._exchange([command]))

    def _reloading(self, fn: Callable[[], T]) -> T:
        """``fn``, sent again after loading the scripts (on every primary of a cluster) when
        Redis lacks one (restarted, SCRIPT FLUSH): NOSCRIPT ran nothing."""
        try:
            return fn()
        except redis.exceptions.NoScriptError:
            self._load_scripts()
            return fn()

    def _load_scripts(self) -> None:
        """SCRIPT LOAD every script (a cluster client sends it to every primary). Pipelines
        queue a bare EVALSHA: redis-py's ``Script`` on a pipeline costs a SCRIPT EXISTS round
        trip before each one, and a cluster pipeline refuses it."""
        for script in self._scripts.values():
            self.client.script_load(script.script)

    def cached_memories(self, user_id: str) -> tuple[list[str] | None, int]:
        raw, gen = self._call(lambda: self.client.mget(
            [self.memories_key(user_id), self.memories_gen_key(user_id)]))
        return _memories(raw), int(gen or 0)

    def cache_memories(self, user_id: str, gen: int, memories: list[str]) -> None:
        keys = [self.memories_key(user_id), self.memories_gen_key(user_id)]
        args = [gen, msgpack.packb(memories), MEMORIES_CACHE_TTL]
        self._call(lambda: self._scripts["cache_memories"](keys=keys, args=args))

    @contextmanager
    def user_lock(self, user_id: str) -> Iterator[None]:
        """redis-py's lock (a token under SET NX PX, freed by a script that checks it): a
        holder that dies frees it after USER_LOCK_SECONDS."""
        lock = self.client.lock(self.memories_lock_key(user_id), timeout=USER_LOCK_SECONDS,
                                sleep=0.01, blocking_timeout=USER_LOCK_SECONDS)
        if not self._call(lock.acquire):
            raise BackendUnavailableError(
                f"the memories of user {user_id[:80]} stayed locked for {USER_LOCK_SECONDS} s "
                "by another process; retry")
        try:
            yield
        finally:
            with suppress(redis.exceptions.LockError):  # expired meanwhile: not ours to free
                self._call(lock.release)

    def memories_changed(self, user_id: str) -> None:
        def run() -> None:
            pipe = self.client.pipeline(transaction=True)
            pipe.incr(self.memories_gen_key(user_id))
            pipe.expire(self.memories_gen_key(user_id), 7 * 86400)
            pipe.delete(self.memories_key(user_id))
            pipe.execute()

        self._call(run)

    def metas(self, sids: list[str]) -> list[SessionMeta | None]:
        def run() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for sid in sids:
                pipe.hmget(self.meta_key(sid), META_FIELDS)
            return list(pipe.execute())

        return [_meta(values) for values in self._call(run)] if sids else []

    def page(self, sid: str, skip: int, count: int) -> list[Message]:
        decoded = (self._entry(sid, entry) for entry in self._entries(sid, skip, count))
        return [m for m in decoded if m is not None]

    def _entries(self, sid: str, skip: int, count: int) -> list[Any]:
        if count <= 0:
            return []
        end = -1 - skip
        key = self.list_key(sid)
        return list(self._call(partial(self.client.lrange, key, end - count + 1, end)))

    def _entry(self, sid: str, entry: Any) -> Message | None:
        try:
            return (_decode if len(entry) <= DECODED_BYTES else Message.unpack)(sid, entry)
        except Exception as err:  # a corrupted entry must never break a read
            log.error("session %s: skipping corrupted hot entry %r: %s", sid, entry[:24], err)
            return None

    def length(self, sid: str) -> int:
        return int(self._call(lambda: self.client.llen(self.list_key(sid))))

    def full_texts(self, sid: str, message_ids: list[str]) -> dict[str, str]:
        if not message_ids:
            return {}
        raw = self._call(lambda: self.client.hmget(self.full_key(sid), message_ids))
        return {m: v.decode() for m, v in zip(message_ids, raw, strict=True) if v is not None}

    def ack_flush(self, sid: str, upto_seq: int, ttl: int, archived_ids: list[str]) -> int:
        keys = [self.meta_key(sid), self.list_key(sid), self.backlog_key(sid), self.full_key(sid)]
        args = [upto_seq, ttl, sid, *archived_ids]
        return int(self._call(lambda: self._scripts["ack_flush"](keys=keys, args=args)))

    def compact(self, sid: str, expected_seq: int | None, summary: str, new_seq: int | None,
                expected: SessionMeta | None = None) -> int:
        args = [
            "*" if expected_seq is None else expected_seq,
            summary,
            "last" if new_seq is None else new_seq,
            *([] if expected is None else [expected.summary, expected.forgets]),
        ]
        keys = [self.meta_key(sid), self.list_key(sid)]
        return int(self._call(lambda: self._scripts["compact"](keys=keys, args=args)))

    def forget(self, sid: str, targets: list[tuple[str, int, int]]) -> int:
        keys = [self.meta_key(sid), self.list_key(sid), self.full_key(sid)]
        args = [x for target in targets for x in target]
        return int(self._call(lambda: self._scripts["forget"](keys=keys, args=args)))

    def pop(self, sid: str, target: tuple[str, int, int]) -> bool:
        keys = [self.meta_key(sid), self.list_key(sid), self.full_key(sid)]
        return bool(self._call(lambda: self._scripts["pop"](keys=keys, args=list(target))))

    def hydrate(self, sid: str, meta: SessionMeta, messages: list[Message], ttl: int) -> bool:
        keys = [self.meta_key(sid), self.list_key(sid), self.index_key(sid)]
        fields = meta.to_hash()
        flat = [x for kv in fields.items() for x in kv]
        args = [ttl, fields["updated_at"], sid, len(fields), *flat, *(m.pack() for m in messages)]
        return bool(self._call(lambda: self._scripts["hydrate"](keys=keys, args=args)))

    def reseat(self, sid: str, first: int, high: int, gap: list[Message]) -> int:
        keys = [self.meta_key(sid), self.list_key(sid)]
        args = [first, high, sum(m.token_count for m in gap), *(m.pack() for m in gap)]
        return int(self._call(lambda: self._scripts["reseat"](keys=keys, args=args)))

    def set_fields(self, sid: str, fields: Mapping[str, str]) -> None:
        if not fields:
            return
        args = [x for kv in fields.items() for x in kv]
        self._call(lambda: self._scripts["set_fields"](keys=[self.meta_key(sid)], args=args))

    def clear_pending(self, sid: str) -> None:
        self._call(lambda: self.client.hdel(self.meta_key(sid), "pending"))

    def drop(self, sid: str) -> None:
        def run() -> None:
            pipe = self.client.pipeline(transaction=False)
            for key in (self.meta_key(sid), self.list_key(sid), self.full_key(sid)):
                pipe.delete(key)  # one key a DEL: a cluster pipeline takes no multi-key DEL
            pipe.zrem(self.index_key(sid), sid)
            pipe.zrem(self.backlog_key(sid), sid)
            pipe.execute()

        self._call(run)

    def ttl_left(self, sid: str) -> int | None:
        left = int(self._call(lambda: self.client.ttl(self.meta_key(sid))))
        return None if left < 0 else left

    def session_ids(self) -> list[str]:
        raw = self._call(lambda: self.client.zrevrange(self.index_key(), 0, -1))
        return [s.decode() for s in raw]

    def unindex(self, sids: list[str]) -> None:
        if sids:
            self._call(lambda: self.client.zrem(self.index_key(), *sids))

    def backlog_sessions(self, older_than: float) -> list[str]:
        raw = self._call(lambda: self.client.zrangebyscore(self.backlog_key(), "-inf", older_than))
        return [s.decode() for s in raw]

    def backlog_summary(self) -> tuple[int, float]:
        """(sessions holding unarchived messages, when the oldest of them got its first one;
        0.0 for none), for ``doctor``."""
        def run() -> tuple[int, float]:
            pipe = self.client.pipeline(transaction=False)
            pipe.zcard(self.backlog_key())
            pipe.zrange(self.backlog_key(), 0, 0, withscores=True)
            size, oldest = pipe.execute()
            return int(size), _oldest(oldest)

        return self._call(run)


SLOTS = 16384  # Redis Cluster's hash slots
_slot_tags: list[str] = []  # slot -> a hash tag that hashes to it, built on first use


def slot_tag(slot: int) -> str:
    """A short string whose CRC16 lands in ``slot``: the hash tag of that slot's index, backlog
    and run-id keys, so a script updates the index of its session's own slot (no CROSSSLOT)."""
    if not _slot_tags:
        table = [""] * SLOTS
        left, n = SLOTS, 0
        while left:
            tag = f"s{n}"
            slot_of = key_slot(tag.encode())
            if not table[slot_of]:
                table[slot_of] = tag
                left -= 1
            n += 1
        _slot_tags[:] = table
    return _slot_tags[slot]


class ClusterHot(RedisHot):
    """Redis Cluster hot tier. A session's keys share the tag ``{session_id}``; the session
    index and the backlog are one zset per hash slot, tagged with ``slot_tag(slot)``, so every
    script touches one slot. Listing reads every slot's zset, pipelined per node. RQ cannot
    use a cluster: its queue lives on ``redis.queue_url``."""

    def __init__(self, client: Any, prefix: str, url: str, retries: int = 3,
                 queue: redis.Redis | None = None) -> None:
        super().__init__(client, prefix, url, retries, queue)
        self._keys_of_every_slot: dict[str, list[str]] = {}
        self._load_scripts()

    def _evalsha(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """By redis-py's cluster client, which routes it to the slot's primary."""
        sha = self._scripts[name].sha
        return self._reloading(
            lambda: self.client.execute_command("EVALSHA", sha, len(keys), *keys, *args))

    def _slot_key(self, slot: int, name: str) -> str:
        return f"{self.prefix}:{{{slot_tag(slot)}}}:{name}"

    def _on_nodes(self, fn: Callable[[], T]) -> T:
        """``fn`` talks to nodes directly (not through redis-py's routing): when a node cannot
        be reached, reload the topology before ``_call`` retries, so a failover is followed."""
        def run() -> T:
            try:
                return fn()
            except (redis.ConnectionError, redis.TimeoutError):
                with suppress(redis.RedisError):
                    self.client.nodes_manager.initialize()
                raise

        return self._call(run)

    def index_key(self, sid: str = "") -> str:
        return self._slot_key(self._slot_of(sid), "sessions")

    def backlog_key(self, sid: str = "") -> str:
        return self._slot_key(self._slot_of(sid), "backlog")

    def _slot_of(self, sid: str) -> int:
        if not sid:  # a global key would land in some other slot: CROSSSLOT in a script
            raise ValueError("on a cluster the index and backlog are per slot: pass the session id")
        return key_slot(self.meta_key(sid).encode())

    def _every_slot(self, name: str, *command: Any) -> list[Any]:
        """``command[0] key *command[1:]`` on each slot's ``name`` zset (a raw command: redis-py's
        helpers cost a third more Python per call): one plain pipeline per primary
        for the slots it serves (a cluster pipeline costs ~10x more Python per command). While
        slots move (MOVED, ASK) it falls back to redis-py's cluster pipeline, which follows
        them. The replies of all slots, concatenated."""
        keys = self._keys_of_every_slot.get(name)
        if keys is None:
            keys = self._keys_of_every_slot[name] = [self._slot_key(s, name) for s in range(SLOTS)]

        def per_node() -> list[Any]:
            by_node: dict[str, list[int]] = {}
            for slot, nodes in self.client.nodes_manager.slots_cache.items():
                by_node.setdefault(nodes[0].name, []).append(slot)
            if sum(map(len, by_node.values())) < SLOTS:
                raise redis.exceptions.ClusterDownError("not every slot is served")
            out: list[Any] = []
            for node_name, slots in by_node.items():
                node = self.client.get_node(node_name=node_name)
                pipe = self.client.get_redis_connection(node).pipeline(transaction=False)
                for slot in slots:
                    pipe.execute_command(command[0], keys[slot], *command[1:])
                out += [item for reply in pipe.execute() for item in reply]
            return out

        def via_cluster() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for key in keys:
                pipe.execute_command(command[0], key, *command[1:])
            return [item for reply in pipe.execute() for item in reply]

        try:
            return self._on_nodes(per_node)
        except (redis.exceptions.ResponseError, redis.exceptions.ClusterError):  # slots moved
            self.client.nodes_manager.initialize()
            return self._call(via_cluster)

    def _read(self, keys: list[str], args: list[Any], cache: list[str],
              page: int) -> list[Any]:
        """The memory cache is in the user's slot, not the session's: one pipeline of the
        script, which reads its own page (a cluster pipeline takes no MULTI), and the cache's
        GETs (one round trip per node)."""
        def run() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            pipe.execute_command("EVALSHA", self._scripts["read"].sha, len(keys), *keys, *args)
            for key in cache:  # a cluster pipeline refuses MGET
                pipe.get(key)
            return list(pipe.execute())

        got = self._reloading(run)
        return [*got[0], *got[1:]] if got[0] else []

    def session_ids(self) -> list[str]:
        pairs = self._every_slot("sessions", "ZRANGE", 0, -1, "WITHSCORES")
        return [sid.decode() for sid, _ in sorted(pairs, key=lambda p: -float(p[1]))]

    def unindex(self, sids: list[str]) -> None:
        def run() -> None:
            pipe = self.client.pipeline(transaction=False)
            for sid in sids:
                pipe.zrem(self.index_key(sid), sid)
            pipe.execute()

        if sids:
            self._call(run)

    def backlog_sessions(self, older_than: float) -> list[str]:
        return [s.decode() for s in self._every_slot("backlog", "ZRANGEBYSCORE", "-inf",
                                                     repr(older_than))]

    def backlog_summary(self) -> tuple[int, float]:
        pairs = self._every_slot("backlog", "ZRANGE", 0, -1, "WITHSCORES")
        return len(pairs), _oldest(pairs)

    def primaries(self) -> list[tuple[str, redis.Redis, int]]:
        """(host:port, a client of that node, the lowest slot it serves) per primary."""
        owned: dict[str, int] = {}
        for slot, nodes in sorted(self.client.nodes_manager.slots_cache.items()):
            if nodes:
                owned.setdefault(nodes[0].name, slot)
        out = []
        for node in self.client.get_primaries():
            if node.name in owned:
                out.append((node.name, self.client.get_redis_connection(node), owned[node.name]))
        return out

    def restarted(self) -> bool:
        """True once per restart or failover of any primary: each primary keeps the run_id it
        was seen with under a key of a slot it serves (a replica that takes over inherits the
        old one, a restart from an older snapshot an older one). ``catch_up`` then checks every
        session, of every node, against the archive."""
        def run() -> bool:
            changed = False
            for _name, node, slot in self.primaries():
                run_id = str(node.info("server").get("run_id", ""))
                seen = node.getset(self._slot_key(slot, "run-id"), run_id)
                changed |= (seen.decode() if isinstance(seen, bytes) else seen) != run_id
            return changed

        return bool(self._on_nodes(run))

    def memory_use(self) -> tuple[int, int] | None:
        """The fullest primary's (used, maxmemory): appends fail on the first node that fills."""
        def run() -> tuple[int, int]:
            nodes = [self.client.get_redis_connection(n) for n in self.client.get_primaries()]
            uses = [(int(i.get("used_memory", 0)), int(i.get("maxmemory", 0)))
                    for i in (node.info("memory") for node in nodes)]  # not primaries(): its
            # slot map costs ~10 ms to sort, and this runs every 64 appends
            return max(uses, key=lambda u: u[0] / u[1] if u[1] else 0.0)

        return self._on_nodes(run)

    def ping(self) -> None:
        self._call(lambda: self.client.ping(target_nodes=self.client.PRIMARIES))


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


def redact_url(url: str) -> str:
    """The URL with any password replaced, safe for errors and ``info``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    netloc = f"{user}:***@{host}" if user else f":***@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _first_line(err: BaseException) -> str:
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    return text[:200]
