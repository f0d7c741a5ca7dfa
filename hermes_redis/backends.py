"""Build the hot store and the job dispatcher a config asks for. Connection handling lives
here and only here: one pool from one URL, timeouts set once."""

from __future__ import annotations

from collections.abc import Callable

import redis

from hermes_redis import embedded
from hermes_redis.config import Config
from hermes_redis.errors import BackendUnavailableError, ConfigError
from hermes_redis.hot import HotStore, MemoryHot, RedisHot, redact_url

FLUSH_JOB = "workers.jobs.flush_session"


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
    return store


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
