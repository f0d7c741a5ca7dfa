"""``RedisHot``: the hot tier in one Redis; each atomic step is a Lua script beside this
module (``lua/``), loaded once and called by SHA."""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from functools import partial
from typing import Any, TypeVar

import msgpack
import redis

from hermes_redis.core import metrics
from hermes_redis.core.errors import BackendUnavailableError, ConflictError, NotFoundError, StateError
from hermes_redis.core.models import META_FIELDS, Message, SessionMeta
from hermes_redis.core.urls import redact_url
from hermes_redis.store.hot.base import (
    _STATUS,
    DECODED_BYTES,
    LUA_DIR,
    MEANS_HELD,
    MEMORIES_CACHE_TTL,
    USER_LOCK_SECONDS,
    Appended,
    ArchiveCheckNeeded,
    Dedupe,
    HotRead,
    HotStore,
    _decode,
    _first_line,
    _memories,
    _meta,
    _oldest,
    _packed,
    forgotten_id,
    mean_tokens,
    page_for,
)

log = logging.getLogger(__name__)

T = TypeVar("T")


class RedisHot(HotStore):
    """Redis hot tier. Keys of one session share the hash tag ``{session_id}``."""

    name = "redis"
    needs_worker = True

    def __init__(self, client: redis.Redis, prefix: str, url: str, retries: int = 3,
                 origin: str = "") -> None:
        self.client: Any = client  # redis-py's stubs type replies as bytes | str
        self.origin = origin  # where the URL came from (Config.origin), "" for the embedded
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

    def ids_key(self, sid: str) -> str:
        """message_id -> seq of the session's hot messages (append.lua): retries, any time."""
        return f"{self.prefix}:{{{sid}}}:ids"

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
            except redis.exceptions.InvalidResponse:  # e.g. an HTTP server: "got '<'"
                raise BackendUnavailableError(
                    f"{self.url} answered but is not a Redis server; check "
                    f"{self.origin or 'redis.url / HERMES_REDIS_URL'}") from None
            except (redis.ConnectionError, redis.TimeoutError) as err:
                if attempt >= self.retries:
                    fix = (f"check that it runs or fix {self.origin}" if self.origin else
                           "check that it runs (`hermes-redis server status`) or set "
                           "redis.url / HERMES_REDIS_URL")
                    raise BackendUnavailableError(
                        f"cannot reach Redis at {self.url} ({_first_line(err)}); {fix}") from None
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

    def create(self, sid: str, meta: SessionMeta, ttl: int) -> bool:
        return self.hydrate(sid, meta, [], ttl)

    def append(self, msgs: Sequence[Message], now: float, title: str,
               full_texts: Mapping[str, str] | None = None,
               dedupe: Dedupe = False) -> Appended:
        sid = msgs[0].session_id
        keys = [self.meta_key(sid), self.list_key(sid), self.index_key(sid), self.backlog_key(sid),
                self.full_key(sid), self.ids_key(sid)]
        full = full_texts or {}
        args: list[Any] = [repr(now), sid, title, 0, len(msgs)]
        for m in msgs:
            args += [m.pack(), m.token_count, m.message_id, full.get(m.message_id, "")]

        retried = False

        def attempt(n: int) -> Any:
            nonlocal retried
            retried = n > 0
            # a retry first looks for an earlier attempt
            args[3] = 2 if dedupe == "checked" else 1 if n or dedupe else 0
            return self._evalsha("append", keys, args)

        try:
            flags, *seqs = self._retrying(attempt)
            # issue 35: count what was stored (by this call, or by its own earlier attempt)
            if not int(flags) & 2 or (retried and not dedupe):
                metrics.APPENDS.inc(len(msgs))
        except redis.ResponseError as err:
            text = str(err)
            if text.startswith("NOSESSION"):
                raise NotFoundError("NOSESSION") from None
            if text.startswith("STATUS"):
                raise StateError(text) from None
            if text.startswith("FORGOTTEN"):
                raise ConflictError(forgotten_id(sid, text.split()[-1])) from None
            if text.startswith("CHECKARCHIVE"):
                raise ArchiveCheckNeeded() from None
            raise
        return Appended([int(s) for s in seqs], bool(int(flags) & 1), bool(int(flags) & 2))

    def meta(self, sid: str) -> SessionMeta | None:
        return _meta(self._call(lambda: self.client.hmget(self.meta_key(sid), META_FIELDS)))

    def read(self, sid: str, ttl: int | None, budget: int, user_id: str | None = None) -> HotRead:
        keys = [self.meta_key(sid), self.list_key(sid), self.ids_key(sid)]
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
        meta, entries, ids = keys
        touch = args[0] >= 0
        request = (meta, args[0], page, *cache)  # the same bytes for every read of a loop
        found = self._requests.get(request)
        if found is None:
            commands = [("MULTI",),
                        *([("EVALSHA", self._scripts["touch"].sha, 3, meta, entries, ids, args[0])]
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
        keys = [self.meta_key(sid), self.list_key(sid), self.backlog_key(sid), self.full_key(sid),
                self.ids_key(sid)]
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
        keys = [self.meta_key(sid), self.list_key(sid), self.ids_key(sid)]
        return int(self._call(lambda: self._scripts["compact"](keys=keys, args=args)))

    def forget(self, sid: str, targets: list[tuple[str, int, int]]) -> int:
        keys = [self.meta_key(sid), self.list_key(sid), self.full_key(sid), self.ids_key(sid)]
        args = [x for target in targets for x in target]
        return int(self._call(lambda: self._scripts["forget"](keys=keys, args=args)))

    def pop(self, sid: str, target: tuple[str, int, int]) -> bool:
        keys = [self.meta_key(sid), self.list_key(sid), self.full_key(sid), self.ids_key(sid)]
        return bool(self._call(lambda: self._scripts["pop"](keys=keys, args=list(target))))

    def hydrate(self, sid: str, meta: SessionMeta, messages: list[Message], ttl: int) -> bool:
        keys = [self.meta_key(sid), self.list_key(sid), self.index_key(sid), self.ids_key(sid)]
        fields = meta.to_hash()
        flat = [x for kv in fields.items() for x in kv]
        args = [ttl, fields["updated_at"], sid, len(fields), *flat, *(m.pack() for m in messages)]
        return bool(self._call(lambda: self._scripts["hydrate"](keys=keys, args=args)))

    def reseat(self, sid: str, first: int, high: int, gap: list[Message]) -> int:
        keys = [self.meta_key(sid), self.list_key(sid), self.ids_key(sid)]
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
            for key in (self.meta_key(sid), self.list_key(sid), self.full_key(sid),
                        self.ids_key(sid)):
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
