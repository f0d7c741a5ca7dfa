"""Redis goes back in time: it restarts from an older snapshot after the archive moved on.

The archive already holds seqs that Redis has forgotten, so new appends get those seqs
again. The flush must not drop them (``INSERT OR IGNORE`` on ``(session_id, seq)`` would):
it puts the archived messages Redis lost back into the hot list, renumbers the new ones
past the archive's highest seq, in order, and archives them. Every acknowledged append
ends up archived exactly once, in acknowledgement order, and appends continue above.
"""

from __future__ import annotations

import shutil

import pytest
import redis

from hermes_redis import SessionMemory
from tests.conftest import make_config
from tests.fault.conftest import figures
from tests.helpers import archive_query
from tests.redis_server import RedisServer


@pytest.fixture
def snapshot_redis():
    """A redis-server that persists only when told to (SAVE), so a test can restore an old dump."""
    server = RedisServer(aof=False).start()
    yield server
    server.cleanup()


def archived(mem: SessionMemory, sid: str) -> list[tuple[str, int]]:
    return [(str(r[0]), int(r[1])) for r in archive_query(
        mem.config, "SELECT message_id, seq FROM messages WHERE session_id=? ORDER BY seq", (sid,))]


@pytest.mark.parametrize("snapshot", ["after_flush", "before_flush"])
def test_restart_from_an_older_snapshot_loses_and_reuses_nothing(tmp_path, snapshot_redis,
                                                                  snapshot):
    srv = snapshot_redis
    cfg = make_config(tmp_path, "redis", srv.url, max_messages=500)
    mem = SessionMemory(cfg)
    sid = mem.create_session(user_id="alice")
    acked: list[str] = []

    def turns(n: int, label: str) -> None:
        for i in range(n):
            acked.append(mem.append(sid, "user", f"{label} question {i}").message_id)
            acked.append(mem.append(sid, "assistant", f"{label} answer {i}").message_id)

    turns(3, "early")
    if snapshot == "after_flush":
        mem.flush(sid)
    redis.Redis(port=srv.port).save()
    old = tmp_path / "old.rdb"
    shutil.copy(srv.dir / "dump.rdb", old)
    turns(4, "middle")  # acknowledged and archived, then forgotten by Redis
    mem.flush(sid)
    assert len(archived(mem, sid)) == 14

    srv.stop(kill=True)
    shutil.copy(old, srv.dir / "dump.rdb")
    srv.start()
    assert mem.hot.meta(sid).last_seq == 6  # Redis really went back in time

    turns(3, "late")  # these get seqs 7.. again: the archive holds 7..14 already
    mem.flush(sid)

    rows = archived(mem, sid)
    ids = [r[0] for r in rows]
    figures(f"time_travel_{snapshot}", appended=len(acked), archived=len(set(ids)),
            lost=len(set(acked) - set(ids)), duplicated=len(ids) - len(set(ids)))
    assert ids == acked  # every acknowledged append, exactly once, in order
    assert [r[1] for r in rows] == list(range(1, 21))  # no seq reused, none skipped
    assert [m.message_id for m in mem.messages(sid)] == acked  # both tiers agree
    hot = mem.hot.messages(sid)
    assert [m.seq for m in hot] == list(range(1, 21))  # the lost middle is back in Redis
    meta = mem.hot.meta(sid)
    assert (meta.last_seq, meta.message_count) == (20, 20)
    assert mem.append(sid, "user", "after").seq == 21  # appends continue above the archive
    mem.flush(sid)
    assert [r[1] for r in archived(mem, sid)] == list(range(1, 22))
    ctx = mem.context(sid)
    assert [m.message_id for m in ctx.messages][:20] == acked
    mem.close()


def test_reseat_contract_on_both_stores(mem):
    """The hot store's part alone: gap back in place, the rest renumbered after it."""
    sid = mem.create_session(user_id="bob")
    first = [mem.append(sid, "user", f"m{i}") for i in range(4)]
    mem.flush(sid)
    gap = [m for m in mem.cold.messages(sid) if m.seq >= 3]  # as if Redis had lost 3 and 4
    assert mem.hot.reseat(sid, 3, 4, gap) == 2
    seqs = [(m.message_id, m.seq) for m in mem.hot.messages(sid)]
    assert seqs == [(first[0].message_id, 1), (first[1].message_id, 2),
                    (first[2].message_id, 3), (first[3].message_id, 4),
                    (first[2].message_id, 5), (first[3].message_id, 6)]
    assert mem.hot.meta(sid).last_seq == 6
    assert mem.hot.reseat("no-such-session", 1, 1, []) == -1


def test_a_process_that_starts_after_the_rollback_restores_redis_before_any_append(
        tmp_path, snapshot_redis):
    """The first process to connect after a restart checks the hot tier against the archive:
    the turns Redis forgot come back and appends continue above, with nothing renumbered."""
    srv = snapshot_redis
    cfg = make_config(tmp_path, "redis", srv.url, max_messages=500)
    mem = SessionMemory(cfg)
    sid = mem.create_session(user_id="alice")
    early = [mem.append(sid, "user", f"early {i}").message_id for i in range(4)]
    mem.flush(sid)
    redis.Redis(port=srv.port).save()
    shutil.copy(srv.dir / "dump.rdb", tmp_path / "old.rdb")
    later = [mem.append(sid, "user", f"later {i}").message_id for i in range(5)]
    mem.flush(sid)
    mem.close()
    srv.stop(kill=True)
    shutil.copy(tmp_path / "old.rdb", srv.dir / "dump.rdb")
    srv.start()

    agent = SessionMemory(cfg)  # a process started after the rollback
    assert [m.seq for m in agent.hot.messages(sid)] == list(range(1, 10))
    assert [m.message_id for m in agent.context(sid).messages] == early + later
    m = agent.append(sid, "user", "after")
    assert m.seq == 10
    agent.flush(sid)
    assert [r[0] for r in archived(agent, sid)] == [*early, *later, m.message_id]
    assert not SessionMemory(cfg).hot.restarted()  # the check runs once per restart
    agent.close()
