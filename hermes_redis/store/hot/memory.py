"""``MemoryHot``: the hot tier in one process, lost on restart, with the same rules as Redis."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from hermes_redis.core import metrics
from hermes_redis.core.errors import ConflictError, NotFoundError, StateError
from hermes_redis.core.models import Message, SessionMeta
from hermes_redis.store.hot.base import (
    Appended,
    ArchiveCheckNeeded,
    Dedupe,
    HotRead,
    HotStore,
    forgotten_id,
    page_size,
)


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
        # message_id -> seq of each session's messages (append.lua's id map), less those
        # trimmed (archived; meta "ids_from" is the highest) or forgotten
        self._ids: dict[str, dict[str, int]] = {}
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
            self._ids.pop(sid, None)
        return self._meta.get(sid)

    def _trimmed(self, sid: str, gone: list[Message]) -> None:
        """Archived messages left the list: their ids leave the map, the archive answers."""
        meta, ids = self._meta[sid], self._ids.get(sid, {})
        for m in gone:
            ids.pop(m.message_id, None)
        high = max((m.seq for m in gone), default=0)
        if high > int(meta.get("ids_from", "0")):
            meta["ids_from"] = str(high)

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
            self._ids[sid] = {}
            self._index[sid] = meta.updated_at
            self._expire(sid, ttl)
            return True

    def append(self, msgs: Sequence[Message], now: float, title: str,
               full_texts: Mapping[str, str] | None = None,
               dedupe: Dedupe = False) -> Appended:
        sid = msgs[0].session_id
        with self._lock:
            meta = self._hash(sid)
            if meta is None:
                raise NotFoundError("NOSESSION")
            if meta["status"] != "active":
                raise StateError(f"STATUS {meta['status']}")
            held = self._ids.setdefault(sid, {})
            if dedupe:
                found = [held.get(m.message_id, 0) for m in msgs]
                if any(found):  # an earlier attempt; enqueue again while its flush is pending
                    return Appended(found, "pending" in meta, True)
                for m in msgs:
                    if f"forgot:{m.message_id}" in meta:
                        raise ConflictError(forgotten_id(sid, m.message_id))
                if dedupe is True and int(meta.get("ids_from", "0")) > 0:
                    raise ArchiveCheckNeeded()
            first = int(meta["last_seq"]) + 1
            seqs = list(range(first, first + len(msgs)))
            held.update((m.message_id, seq) for m, seq in zip(msgs, seqs, strict=True))
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
            metrics.APPENDS.inc(len(msgs))  # issue 35: stored, not a same-id answer
            meta.setdefault("pending", repr(now))
            return Appended(seqs, enqueue)

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
            self._trimmed(sid, [m for m in self._lists[sid] if m.seq <= bound])
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
            self._ids.setdefault(sid, {}).update(
                (m.message_id, m.seq) for m in [*gap, *renumbered])
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
            self._trimmed(sid, [m for m in items if m.seq <= bound])
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
                self._ids.get(sid, {}).pop(mid, None)
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
            if meta.last_seq > 0:  # the map starts empty: the archive answers for these
                self._meta[sid]["ids_from"] = str(meta.last_seq)
            self._ids[sid] = {}
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
            for table in (self._meta, self._lists, self._expires, self._index, self._dirty,
                          self._ids):
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


