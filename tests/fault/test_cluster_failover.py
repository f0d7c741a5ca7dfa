"""A Redis Cluster primary dies (SIGKILL) and comes back from an older snapshot.

The single-node version is test_time_travel.py; here only one shard goes back in time.
The first process to connect afterwards sees that primary's run_id change (a run-id key per
primary) and ``catch_up`` restores every session of that shard from the archive: nothing
archived is lost, no seq is reused, the other shards are untouched. (A replica promotion
is the same case — the replica may lag — but needs replicas and a failover timeout; this
restart-from-an-older-RDB version is the stricter and faster one.)
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator

import pytest
import redis

from hermes_redis import SessionMemory
from hermes_redis.store.hot import ClusterHot
from hermes_redis.store.open import open_hot
from tests.conftest import make_config
from tests.fault.conftest import figures
from tests.helpers import archive_query
from tests.redis_cluster import ClusterServers
from tests.test_cluster import sessions_on_every_node


@pytest.fixture
def snapshot_cluster() -> Iterator[ClusterServers]:
    """A three-primary cluster that persists only when told to (SAVE)."""
    cluster = ClusterServers(aof=False).start()
    yield cluster
    cluster.cleanup()


def archived(mem: SessionMemory, sid: str) -> list[tuple[str, int]]:
    return [(str(r[0]), int(r[1])) for r in archive_query(
        mem.config, "SELECT message_id, seq FROM messages WHERE session_id=? ORDER BY seq", (sid,))]


def test_a_primary_restarted_from_an_older_snapshot_loses_nothing_archived(
        tmp_path, snapshot_cluster, redis_url):
    cluster = snapshot_cluster
    cfg = make_config(tmp_path, "redis", cluster.url, queue_url=redis_url, max_messages=500)
    mem = SessionMemory(cfg)
    by_node = sessions_on_every_node(mem, 2)
    sids = [sid for group in by_node.values() for sid in group]
    acked: dict[str, list[str]] = {sid: [] for sid in sids}

    def turns(agent: SessionMemory, n: int, label: str) -> None:
        for sid in sids:
            for i in range(n):
                acked[sid].append(agent.append(sid, "user", f"{label} q{i}").message_id)
                acked[sid].append(agent.append(sid, "assistant", f"{label} a{i}").message_id)
            agent.flush(sid)

    turns(mem, 2, "early")
    victim_name = sorted(by_node)[1]
    victim = next(n for n in cluster.nodes if victim_name.endswith(f":{n.port}"))
    redis.Redis(port=victim.port).save()
    shutil.copy(victim.dir / "dump.rdb", tmp_path / "old.rdb")
    turns(mem, 3, "middle")  # acknowledged and archived; the victim will forget them
    mem.close()

    victim.stop(kill=True)  # SIGKILL: no shutdown save
    shutil.copy(tmp_path / "old.rdb", victim.dir / "dump.rdb")
    victim.start()
    cluster.wait_ok()
    node = redis.Redis(port=victim.port)
    prefix = cfg.redis.key_prefix
    for sid in by_node[victim_name]:  # that shard really went back in time, the others not
        assert node.hget(f"{prefix}:{{{sid}}}:meta", "last_seq") == b"4"

    agent = SessionMemory(cfg)  # the first process after the restart restores the shard
    assert isinstance(agent.hot, ClusterHot)
    for sid in sids:
        assert [m.message_id for m in agent.hot.messages(sid)] == acked[sid]
    turns(agent, 2, "late")  # seqs continue above the archive's on every shard
    lost = dup = 0
    for sid in sids:
        rows = archived(agent, sid)
        ids = [r[0] for r in rows]
        lost += len(set(acked[sid]) - set(ids))
        dup += len(ids) - len(set(ids))
        assert ids == acked[sid]
        assert [r[1] for r in rows] == list(range(1, 15))
        assert [m.message_id for m in agent.messages(sid)] == acked[sid]
    figures("cluster_primary_time_travel", sessions=len(sids),
            shard_sessions=len(by_node[victim_name]), appended=sum(map(len, acked.values())),
            lost=lost, duplicated=dup)
    assert not SessionMemory(cfg).hot.restarted()  # once per restart
    agent.close()


def test_a_replica_taking_over_a_killed_primary_triggers_catch_up(tmp_path, redis_url):
    """A real failover: the primary is SIGKILLed and its replica takes over (CLUSTER FAILOVER
    TAKEOVER, not the node timeout). The replica inherited the old primary's run-id key, so
    the next process sees the change (and would run catch_up); every acknowledged, archived
    turn is there and appends continue."""
    cluster = ClusterServers(aof=False).start()
    try:
        cfg = make_config(tmp_path, "redis", cluster.url, queue_url=redis_url)
        mem = SessionMemory(cfg)
        by_node = sessions_on_every_node(mem, 2)
        victim = cluster.nodes[2]  # not the node redis.url names: a new process connects there
        victim_name = f"127.0.0.1:{victim.port}"
        replica = cluster.add_replica(victim)
        acked: dict[str, list[str]] = {}
        for sid in (s for group in by_node.values() for s in group):
            acked[sid] = [mem.append(sid, "user", f"q{i}").message_id for i in range(5)]
            mem.flush(sid)
        assert not mem.hot.restarted()  # mem stays open: a process running through the failover
        node, primary = redis.Redis(port=replica.port), redis.Redis(port=victim.port)
        offset = primary.info("replication")["master_repl_offset"]
        deadline = time.monotonic() + 10  # the replica has every write before the kill
        while node.info("replication")["master_repl_offset"] < offset:
            assert time.monotonic() < deadline, "the replica did not catch up"
            time.sleep(0.02)

        victim.stop(kill=True)
        node.execute_command("CLUSTER FAILOVER", "TAKEOVER")
        cluster.nodes[cluster.nodes.index(victim)] = replica  # it serves those slots now
        cluster.replicas.remove(replica)
        cluster.replicas.append(victim)  # cleaned up with the rest, no longer running
        cluster.wait_ok()

        probe = open_hot(cfg)
        assert probe.restarted()  # the takeover is seen (the replica was in sync: nothing
        probe.close()  # to restore; the older-snapshot test above restores a lagging shard)
        agent = SessionMemory(cfg)
        lost = 0
        for sid, ids in acked.items():
            assert [m.message_id for m in agent.messages(sid)] == ids
            lost += len(set(ids) - {r[0] for r in archived(agent, sid)})
            assert agent.append(sid, "user", "after").seq == 6
        assert set(mem.hot.session_ids()) == set(acked)  # the running process follows it
        for sid in by_node[victim_name]:
            assert mem.append(sid, "assistant", "still here").seq == 7
        mem.close()
        figures("cluster_replica_takeover", sessions=len(acked), lost=lost,
                shard_sessions=len(by_node[victim_name]))
        agent.close()
    finally:
        cluster.cleanup()
