"""Build the hot store and the job dispatcher a config asks for. Connection handling lives
here and only here: one pool from one URL, timeouts set once."""

from __future__ import annotations

import logging
from collections.abc import Callable

import redis

from hermes_redis import embedded
from hermes_redis.config import Config
from hermes_redis.errors import BackendUnavailableError, ConfigError
from hermes_redis.hot import HotStore, MemoryHot, RedisHot, redact_url

FLUSH_JOB = "workers.jobs.flush_session"
log = logging.getLogger(__name__)


def redis_url(config: Config) -> str:
    """The configured URL, or the embedded private Redis (started on first use)."""
    return config.redis.url or embedded.ensure_running(config.data_dir)


def connect(url: str, config: Config) -> redis.Redis:
    timeout = config.redis.socket_timeout
    try:
        client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout,
                                      health_check_interval=30, retry=None)
    except ValueError as err:
        raise ConfigError(f"{config.source}: redis.url {redact_url(url)!r} is not a Redis URL "
                          f"({err}); use redis://host:port/db, rediss://… or unix:///path") from None
    return client


def open_hot(config: Config) -> HotStore:
    if config.session.backend == "memory":
        return MemoryHot()
    url = redis_url(config)
    store = RedisHot(connect(url, config), config.redis.key_prefix, url, config.redis.retries)
    store.ping()
    check_server(store, config)
    return store


def check_server(store: RedisHot, config: Config) -> None:
    """Refuse a Redis that may evict keys without a TTL (``allkeys-*`` policies): an evicted
    session loses acknowledged turns before a worker archives them. ``noeviction`` and the
    ``volatile-*`` policies are safe: a session with unarchived turns has no TTL (invariant
    2), so only archived sessions can be evicted, and they rebuild from the archive.
    ``redis.allow_eviction: true`` accepts the risk, loudly.
    A Redis that does not allow CONFIG (managed services) is used, with a warning saying
    what could not be checked; one that persists nothing gets a warning."""
    try:
        settings = _settings(store, ("maxmemory-policy", "appendonly", "save"))
    except redis.ResponseError as err:
        log.warning("cannot read the configuration of Redis at %s (%s): make sure its "
                    "maxmemory-policy is noeviction and it persists (AOF)", store.url, err)
        return
    except (redis.ConnectionError, redis.TimeoutError) as err:
        raise BackendUnavailableError(f"cannot reach Redis at {store.url} ({err})") from None
    policy = settings.get("maxmemory-policy", "")
    if policy.startswith("allkeys-"):
        if not config.redis.allow_eviction:
            raise ConfigError(
                f"Redis at {store.url} evicts keys under memory pressure (maxmemory-policy "
                f"{policy}): acknowledged turns could be lost before a worker archives them. "
                "Run `CONFIG SET maxmemory-policy noeviction` (or a volatile-* policy; and set it "
                "in redis.conf), or "
                f"set redis.allow_eviction: true in {config.source} to accept the risk")
        log.warning("RISK ACCEPTED (redis.allow_eviction): Redis at %s evicts keys "
                    "(maxmemory-policy %s); turns not yet archived can be lost", store.url, policy)
    if settings.get("appendonly") == "no" and not settings.get("save", "").strip():
        log.warning("Redis at %s persists nothing (no AOF, no RDB snapshots): a restart loses "
                    "every turn not yet archived; enable appendonly yes", store.url)


def _settings(store: RedisHot, names: tuple[str, ...]) -> dict[str, str]:
    """CONFIG GET of each name, in one round trip (one name a call: Redis 6 takes one)."""
    pipe = store.client.pipeline(transaction=False)
    for name in names:
        pipe.config_get(name)
    out: dict[str, str] = {}
    for reply in pipe.execute():
        out.update({_text(k): _text(v) for k, v in reply.items()})
    return out


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")


def rq_dispatcher(store: RedisHot, queue_name: str) -> Callable[[str], None]:
    """Enqueue a flush job on RQ. Deduplication happens in the append script."""
    from rq import Queue

    queue = Queue(queue_name, connection=store.client)

    def enqueue(sid: str) -> None:
        try:
            queue.enqueue_call(FLUSH_JOB, args=(sid,), result_ttl=0, failure_ttl=86_400,
                               description=f"flush {sid}")
        except (redis.ConnectionError, redis.TimeoutError) as err:
            raise BackendUnavailableError(
                f"cannot enqueue a flush on {store.url} ({err}); the sweep will retry it"
            ) from None

    return enqueue
