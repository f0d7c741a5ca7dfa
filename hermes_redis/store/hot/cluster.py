"""``ClusterHot``: the hot tier on a Redis Cluster, one slot per script."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from typing import Any, TypeVar

import redis
from redis.crc import key_slot

from hermes_redis.store.hot.base import (
    _oldest,
)
from hermes_redis.store.hot.redis import RedisHot

T = TypeVar("T")

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
                 origin: str = "") -> None:
        super().__init__(client, prefix, url, retries, origin)
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
