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
import sqlite3
from collections.abc import Iterator

import pytest
import redis

from hermes_redis import SessionMemory
from hermes_redis.hot import ClusterHot
from tests.conftest import make_config
from tests.fault.conftest import figures
from tests.redis_cluster import ClusterServers
from tests.test_cluster import sessions_on_every_node


@pytest.fixture
def snapshot_cluster() -> Iterator[ClusterServers]:
    """A three-primary cluster that persists only when told to (SAVE)."""
    cluster = ClusterServers(aof=False).start()
    yield cluster
    cluster.cleanup()


def archived(mem: SessionMemory, sid: str) -> list[tuple[str, int]]:
    db = sqlite3.connect(mem.config.archive_path)
    try:
        return db.execute("SELECT message_id, seq FROM messages WHERE session_id=? ORDER BY seq",
                          (sid,)).fetchall()
    finally:
        db.close()


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
