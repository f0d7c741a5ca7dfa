"""The hot tier: each session's newest messages plus a meta hash.

One small interface (``base.HotStore``), three backends: ``RedisHot`` (shared between
processes, atomic steps in the Lua scripts of ``lua/``), ``ClusterHot`` (the same on a Redis
Cluster) and ``MemoryHot`` (one process, same rules). Nothing above this package knows which
one it talks to.
"""

from hermes_redis.store.hot.base import (
    DEDUPE_WINDOW,
    MEANS_HELD,
    MEMORIES_CACHE_TTL,
    USER_LOCK_SECONDS,
    Appended,
    ArchiveCheckNeeded,
    HotRead,
    HotStore,
    mean_tokens,
    page_for,
    page_size,
)
from hermes_redis.store.hot.cluster import SLOTS, ClusterHot, slot_tag
from hermes_redis.store.hot.memory import MemoryHot
from hermes_redis.store.hot.redis import RedisHot

__all__ = ["DEDUPE_WINDOW", "MEANS_HELD", "MEMORIES_CACHE_TTL", "SLOTS", "USER_LOCK_SECONDS",
           "Appended", "ArchiveCheckNeeded", "ClusterHot", "HotRead", "HotStore", "MemoryHot",
           "RedisHot", "mean_tokens", "page_for", "page_size", "slot_tag"]
