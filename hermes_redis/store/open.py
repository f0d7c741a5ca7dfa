"""The stores a config asks for: the hot tier (in-process, Redis or Redis Cluster), the
archive (SQLite or PostgreSQL) and the job queue the workers read."""

from __future__ import annotations

from hermes_redis.core.config import Config
from hermes_redis.core.errors import ConfigError
from hermes_redis.core.urls import redact_url
from hermes_redis.store.archive import Archive, ArchiveStore
from hermes_redis.store.connection import (
    check_server,
    connect,
    connect_cluster,
    is_cluster,
    redis_url,
    url_origin,
)
from hermes_redis.store.hot import ClusterHot, HotStore, MemoryHot, RedisHot
from hermes_redis.store.queue import JobQueue
from hermes_redis.store.vectors import VectorIndex


def open_hot(config: Config) -> HotStore:
    if config.session.backend == "memory":
        return MemoryHot()
    store = connect_hot(config, redis_url(config), queue_required=True)
    store.ping()
    check_server(store, config)
    return store


def connect_hot(config: Config, url: str, queue_required: bool = False) -> RedisHot:
    """The Redis (or Redis Cluster) hot store at ``url``, neither pinged nor checked for safety:
    ``open_hot`` checks it; ``doctor`` inspects it and reports what ``open_hot`` would refuse.
    ``queue_required``: refuse a cluster without ``redis.queue_url`` (RQ cannot queue on one)
    before connecting to its nodes."""
    client = connect(url, config)
    origin = url_origin(config) if url == config.redis.url else ""  # "": the embedded Redis
    if not (config.redis.cluster or is_cluster(client)):
        return RedisHot(client, config.redis.key_prefix, url, config.redis.retries, origin)
    client.close()
    if queue_required and not config.redis.queue_url:
        raise ConfigError(f"{config.source}: Redis at {redact_url(url)} is a cluster and RQ "
                          "cannot queue on one: set redis.queue_url to a plain Redis "
                          "(or HERMES_REDIS_QUEUE_URL)")
    return ClusterHot(connect_cluster(url, config), config.redis.key_prefix, url,
                      config.redis.retries, origin)


def open_archive(config: Config) -> ArchiveStore:
    """The cold tier the config asks for: PostgreSQL at ``archive.url``, else the SQLite file
    at ``archive.path``. Both connect on first use."""
    if config.archive.url is None:
        return Archive(config.archive_path)
    try:
        from hermes_redis.store.archive.postgres import PostgresArchive
    except ImportError as err:
        raise ConfigError(f"{config.source}: archive.url needs the PostgreSQL driver ({err.name} "
                          "is missing); pip install 'hermes-redis[postgres]'") from None
    return PostgresArchive(config.archive.url, pool_size=config.archive.pool_size)


def open_queue(config: Config, hot: HotStore) -> JobQueue | None:
    """The RQ queue of flush jobs: on ``redis.queue_url`` when set (always with a cluster),
    else on the hot tier's own Redis; None for the in-process backend (no workers)."""
    if not isinstance(hot, RedisHot):
        return None
    url = config.redis.queue_url
    if url:
        return JobQueue(config.redis.queue, connect(url, config), redact_url(url), owned=True)
    return JobQueue(config.redis.queue, hot.client, str(hot.url))


def open_vectors(config: Config, cold: ArchiveStore) -> VectorIndex | None:
    """Recall by meaning over ``cold`` with the configured embeddings (issue 31); None for
    ``embeddings.provider: none``. A missing dependency is a ConfigError naming the extra."""
    from hermes_redis.core.embeddings import open_embedder

    embedder = open_embedder(config.embeddings)
    c = config.embeddings
    return None if embedder is None else VectorIndex(cold, embedder, c.weight, c.cache_mb << 20)
