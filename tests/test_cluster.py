"""Redis Cluster as the hot tier: one slot per script, listing and sweeps over every shard,
the RQ queue on its own Redis. The behaviour suite runs on the cluster too (conftest
``CLUSTER_MODULES``): a script that touched two slots would fail there with CROSSSLOT."""

from __future__ import annotations

import time
import uuid

import pytest
import redis
from redis.crc import key_slot

from hermes_redis import SessionMemory
from hermes_redis.core.errors import ConfigError
from hermes_redis.jobs.worker import run
from hermes_redis.store.hot import SLOTS, ClusterHot, RedisHot, slot_tag


@pytest.fixture
def cmem(config_factory):  # type: ignore[no-untyped-def]
    memory = SessionMemory(config_factory("cluster"))
    yield memory
    memory.close()


def node_of(hot: ClusterHot, sid: str) -> str:
    return str(hot.client.nodes_manager.slots_cache[key_slot(hot.meta_key(sid).encode())][0].name)


def sessions_on_every_node(mem: SessionMemory, per_node: int = 2) -> dict[str, list[str]]:
    """Create sessions until every primary holds ``per_node`` of them."""
    hot = mem.hot
    assert isinstance(hot, ClusterHot)
    nodes: dict[str, list[str]] = {name: [] for name, _, _ in hot.primaries()}
    while min(map(len, nodes.values())) < per_node:
        sid = mem.create_session(user_id="u")
        nodes[node_of(hot, sid)].append(sid)
    return nodes


def test_the_slot_table_covers_every_slot():
    tags = [slot_tag(s) for s in range(SLOTS)]
    assert all(key_slot(t.encode()) == s for s, t in enumerate(tags))
    assert len(set(tags)) == SLOTS and max(map(len, tags)) <= 8


def test_every_key_a_script_gets_is_in_the_session_slot(cmem):
    hot = cmem.hot
    assert isinstance(hot, ClusterHot)
    for _ in range(200):
        sid = uuid.uuid4().hex
        keys = [hot.meta_key(sid), hot.list_key(sid), hot.index_key(sid), hot.backlog_key(sid),
                hot.full_key(sid), hot.ids_key(sid)]
        assert len({key_slot(k.encode()) for k in keys}) == 1
    user = [hot.memories_key("alice"), hot.memories_gen_key("alice")]
    assert len({key_slot(k.encode()) for k in user}) == 1


def test_the_cluster_refuses_a_script_over_two_slots(cmem):
    """What makes the suite on the cluster a proof: the standalone layout (global index and
    backlog) fails there, so no script of ours touches two slots."""
    sid = cmem.create_session()
    hot = cmem.hot
    keys = [hot.meta_key(sid), hot.list_key(sid), RedisHot.index_key(hot),
            RedisHot.backlog_key(hot), hot.full_key(sid)]
    node = hot.client.get_node_from_key(hot.meta_key(sid))
    plain = hot.client.get_redis_connection(node)  # redis-py's own check would refuse first
    with pytest.raises(redis.ResponseError, match="same slot"):  # CROSSSLOT
        plain.eval("return redis.call('ZCARD', KEYS[3])", len(keys), *keys)
    assert plain.eval("return redis.call('ZCARD', KEYS[3])", 3, hot.meta_key(sid),
                      hot.list_key(sid), hot.index_key(sid)) == 1


def test_sweep_and_a_worker_find_the_backlog_on_every_shard(cmem):
    nodes = sessions_on_every_node(cmem)
    sids = [sid for group in nodes.values() for sid in group]
    for sid in sids:
        cmem.append(sid, "user", f"hello from {sid[:6]}")
    assert sorted(cmem.hot.backlog_sessions(time.time())) == sorted(sids)
    assert set(cmem.hot.session_ids()) == set(sids)
    queue = cmem.queue.connection
    assert not isinstance(queue, redis.RedisCluster)  # RQ queues on redis.queue_url
    queue.delete(f"rq:queue:{cmem.config.redis.queue}")  # every flush job is lost
    assert cmem.sweep(grace=0) == sorted(sids)
    run(cmem, burst=True)
    assert cmem.hot.backlog_sessions(time.time()) == []
    for sid in sids:
        assert [m.content for m in cmem.cold.messages(sid)] == [f"hello from {sid[:6]}"]


def test_listing_is_newest_first_across_nodes_and_unindex_reaches_every_slot(cmem):
    sids = [sid for group in sessions_on_every_node(cmem, 1).values() for sid in group]
    for sid in sids:
        cmem.append(sid, "user", "hi")
        time.sleep(0.002)
    assert cmem.hot.session_ids() == sids[::-1]
    cmem.hot.unindex(sids[:2])
    assert cmem.hot.session_ids() == sids[:1:-1]


def test_a_restart_is_seen_per_primary(cmem):
    hot = cmem.hot
    assert isinstance(hot, ClusterHot)
    assert not hot.restarted()  # SessionMemory asked already: once per restart
    _, node, slot = hot.primaries()[1]
    node.set(hot._slot_key(slot, "run-id"), "an older run")  # as a restored snapshot holds
    assert hot.restarted() and not hot.restarted()


def test_a_cluster_without_queue_url_is_a_one_line_error(config_factory):
    cfg = config_factory("cluster").with_overrides(redis={"queue_url": None})
    with pytest.raises(ConfigError, match=r"redis\.queue_url") as err:
        SessionMemory(cfg)
    assert "\n" not in str(err.value)


def test_a_cluster_is_detected_and_cluster_true_needs_no_detection(config_factory):
    detected = SessionMemory(config_factory("cluster"))  # redis.cluster left false
    told = SessionMemory(config_factory("cluster").with_overrides(redis={"cluster": True}))
    assert isinstance(detected.hot, ClusterHot) and isinstance(told.hot, ClusterHot)
    detected.close()
    told.close()


def test_queue_url_moves_the_queue_of_a_standalone_redis(config_factory, redis_cluster):
    cfg = config_factory("single").with_overrides(redis={"queue_url": redis_cluster.nodes[0].url})
    mem = SessionMemory(cfg)
    assert type(mem.hot) is RedisHot
    assert mem.queue.connection is not mem.hot.client
    mem.close()


def test_listing_every_slot_costs(cmem):
    """Reading 16,384 per-slot zsets (one pipeline per primary): measured, printed."""
    sessions_on_every_node(cmem, 10)
    cmem.hot.session_ids()
    started = time.perf_counter()
    for _ in range(3):
        cmem.hot.session_ids()
        cmem.hot.backlog_sessions(time.time())
    per_read = (time.perf_counter() - started) / 6
    print(f"\nFIGURES cluster_every_slot_read: {per_read * 1000:.0f} ms")
    assert per_read < 5.0


def test_doctor_checks_every_primary_and_reads_the_backlog_of_every_slot(cmem):
    from hermes_redis.cli import doctor

    sid = cmem.create_session()
    cmem.append(sid, "user", "waiting for a worker")
    checks = doctor.run(cmem.config)
    redis_lines = [c.detail for c in checks if c.name == "redis"]
    assert len(redis_lines) == 2 * 3  # eviction and persistence, on each of 3 primaries
    (backlog,) = [c for c in checks if c.name == "backlog"]
    assert backlog.detail.startswith("1 session(s) hold unarchived turns")
    (workers,) = [c for c in checks if c.name == "workers"]
    assert workers.status == "fail"  # none runs on the queue's Redis
    alone = doctor.run(cmem.config.with_overrides(redis={"queue_url": None}))
    assert any(c.status == "fail" and "redis.queue_url" in c.fix for c in alone)


def flush_scripts(mem: SessionMemory) -> None:
    for _name, node, _slot in mem.hot.primaries():  # type: ignore[attr-defined]
        node.script_flush()


def test_a_node_that_lost_its_scripts_still_serves_appends_and_reads(cmem):
    """A restarted primary has an empty script cache: appends (EVALSHA) and the read pipeline
    (a raw EVALSHA in a cluster pipeline) load the scripts again."""
    sid = cmem.create_session(user_id="alice")
    cmem.append(sid, "user", "before")
    flush_scripts(cmem)
    cmem.append(sid, "assistant", "after the flush")
    flush_scripts(cmem)
    assert [m.content for m in cmem.context(sid).messages] == ["before", "after the flush"]


def test_cluster_true_on_a_plain_redis_is_a_one_line_error(config_factory, redis_url):
    from hermes_redis.core.errors import BackendUnavailableError

    cfg = config_factory("single").with_overrides(redis={"cluster": True, "queue_url": redis_url})
    with pytest.raises(BackendUnavailableError, match=r"redis\.cluster") as err:
        SessionMemory(cfg)
    assert "\n" not in str(err.value)


def test_the_environment_sets_cluster_and_queue_url(monkeypatch, tmp_path):
    from hermes_redis.core import config

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HERMES_REDIS_CLUSTER", "true")
    monkeypatch.setenv("HERMES_REDIS_QUEUE_URL", "redis://queue:6379/0")
    cfg = config.load()
    assert cfg.redis.cluster is True and cfg.redis.queue_url == "redis://queue:6379/0"
    assert "$HERMES_REDIS_CLUSTER" in cfg.source


def test_memory_use_is_the_fullest_primarys(cmem):  # type: ignore[no-untyped-def]
    hot = cmem.hot
    nodes = [hot.client.get_redis_connection(n) for n in hot.client.get_primaries()]
    assert len(nodes) == 3
    tight = nodes[1]
    used = int(tight.info("memory")["used_memory"])
    tight.config_set("maxmemory", used * 2)  # this primary is half full, the others unlimited
    try:
        use = hot.memory_use()
        assert use is not None and use[1] == used * 2 and use[0] > 0
    finally:
        tight.config_set("maxmemory", 0)
