"""Connections to Redis, made here and only here: one pool from one URL, timeouts set once,
and the server's safety settings (eviction, persistence) checked on connect."""

from __future__ import annotations

import logging
from typing import Any

import redis

from hermes_redis.core.config import Config
from hermes_redis.core.errors import BackendUnavailableError, ConfigError
from hermes_redis.core.urls import redact_url
from hermes_redis.store import embedded
from hermes_redis.store.hot import ClusterHot, RedisHot

log = logging.getLogger(__name__)


def redis_url(config: Config) -> str:
    """The configured URL, or the embedded private Redis (started on first use)."""
    return config.redis.url or embedded.ensure_running(config.data_dir)


def url_origin(config: Config) -> str:
    """Where the configured Redis URL came from, as a hint names it: ``$HERMES_REDIS_URL``,
    or ``redis.url in config.yml``."""
    return config.origin("redis.url", "HERMES_REDIS_URL")


def connect(url: str, config: Config) -> redis.Redis:
    timeout = config.redis.socket_timeout
    try:
        client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout,
                                      health_check_interval=30, retry=None)
    except ValueError as err:
        raise ConfigError(f"{config.source}: redis.url {redact_url(url)!r} is not a Redis URL "
                          f"({err}); use redis://host:port/db, rediss://… or unix:///path") from None
    return client


def connect_cluster(url: str, config: Config) -> Any:
    """A ``RedisCluster`` from one node's URL; it finds the other nodes itself."""
    from redis.cluster import RedisCluster
    from redis.exceptions import RedisClusterException

    timeout = config.redis.socket_timeout
    try:
        return RedisCluster.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout,
                                     health_check_interval=30)
    except ValueError as err:
        raise ConfigError(f"{config.source}: redis.url {redact_url(url)!r} is not a Redis URL "
                          f"({err}); use redis://host:port of any cluster node") from None
    except (redis.RedisError, RedisClusterException) as err:
        raise BackendUnavailableError(f"cannot reach a Redis Cluster at {redact_url(url)} "
                                      f"({str(err).splitlines()[0]}); check redis.url and "
                                      "redis.cluster") from None


def is_cluster(client: redis.Redis) -> bool:
    """INFO cluster says cluster_enabled:1 (False when it cannot be asked)."""
    try:
        return int(client.info("cluster").get("cluster_enabled", 0)) == 1
    except redis.RedisError:
        return False  # unreachable: the ping names the problem; INFO refused: not a cluster


def check_server(store: RedisHot, config: Config) -> None:
    """Refuse a Redis that may evict keys without a TTL (``allkeys-*`` policies): an evicted
    session loses acknowledged turns before a worker archives them. ``noeviction`` and the
    ``volatile-*`` policies are safe: a session with unarchived turns has no TTL (invariant
    2), so only archived sessions can be evicted, and they rebuild from the archive.
    ``redis.allow_eviction: true`` accepts the risk, loudly.
    A Redis that does not allow CONFIG (managed services) is used, with a warning saying
    what could not be checked; one that persists nothing gets a warning."""
    nodes = ([(f"{store.url} (node {name})", client) for name, client, _ in store.primaries()]
             if isinstance(store, ClusterHot) else [(str(store.url), store.client)])
    for where, client in nodes:  # on a cluster, every primary
        try:
            findings = redis_safety(client, config)
        except (redis.ConnectionError, redis.TimeoutError) as err:
            raise BackendUnavailableError(f"cannot reach Redis at {where} ({err})") from None
        for status, detail, fix in findings:
            if status == "fail":
                raise ConfigError(f"Redis at {where} {detail}: {fix}")
            if status == "warn" and f"{detail}; {fix}" not in store.warnings:
                log.warning("Redis at %s %s; %s", where, detail, fix)
                store.warnings.append(f"{detail}; {fix}")


def redis_safety(client: redis.Redis, config: Config) -> list[tuple[str, str, str]]:
    """(status ok|warn|fail, what was found, the fix) for eviction and persistence."""
    try:
        settings = _settings(client, ("maxmemory-policy", "appendonly", "appendfsync", "save"))
    except redis.ResponseError as err:
        return [("warn", f"does not allow CONFIG ({err}), so its eviction policy and persistence "
                 "could not be checked", "make sure its maxmemory-policy is noeviction and it "
                 "persists (AOF)")]
    out: list[tuple[str, str, str]] = []
    policy = settings.get("maxmemory-policy", "")
    if not policy.startswith("allkeys-"):
        out.append(("ok", f"keeps unarchived turns (maxmemory-policy {policy})", ""))
    elif config.redis.allow_eviction:
        out.append(("warn", f"evicts keys (maxmemory-policy {policy}), RISK ACCEPTED by "
                    "redis.allow_eviction", "turns not yet archived can be lost; use noeviction"))
    else:
        out.append((
            "fail", f"evicts keys under memory pressure (maxmemory-policy {policy}), so "
            "acknowledged turns could be lost before a worker archives them",
            "run `CONFIG SET maxmemory-policy noeviction` (or a volatile-* policy; and set it in "
            f"redis.conf), or set redis.allow_eviction: true in {config.source} to accept the risk"))
    if settings.get("appendonly") == "yes":
        out.append(("ok", f"persists (AOF, appendfsync {settings.get('appendfsync', '?')})", ""))
    elif settings.get("save", "").strip():
        out.append(("warn", "persists RDB snapshots only: a crash loses the turns since the last "
                    "snapshot that are not yet archived", "enable appendonly yes"))
    else:
        out.append(("warn", "persists nothing (no AOF, no RDB snapshots): a restart loses every "
                    "turn not yet archived", "enable appendonly yes"))
    return out


def _settings(client: redis.Redis, names: tuple[str, ...]) -> dict[str, str]:
    """CONFIG GET of each name, in one round trip (one name a call: Redis 6 takes one)."""
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.config_get(name)
    out: dict[str, str] = {}
    for reply in pipe.execute():
        out.update({_text(k): _text(v) for k, v in reply.items()})
    return out


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")
