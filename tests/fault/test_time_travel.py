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


def _said_on_a_reused_seq(tmp_path, srv, first: str, second: str):  # type: ignore[no-untyped-def]
    """``first`` archived as seq 2, then Redis rolled back to before it; ``second`` appended
    (Redis gives it seq 2 again). Returns (mem, sid, the first message, the second)."""
    mem = SessionMemory(make_config(tmp_path, "redis", srv.url, max_messages=500))
    sid = mem.create_session(user_id="alice")
    mem.append(sid, "user", "early question")
    mem.flush(sid)
    redis.Redis(port=srv.port).save()
    shutil.copy(srv.dir / "dump.rdb", tmp_path / "old.rdb")
    earlier = mem.append(sid, "user", first)
    mem.flush(sid)
    srv.stop(kill=True)
    shutil.copy(tmp_path / "old.rdb", srv.dir / "dump.rdb")
    srv.start()
    said = mem.append(sid, "user", second)
    assert said.seq == earlier.seq == 2  # Redis reused it
    return mem, sid, earlier, said


def test_a_fact_remembered_on_a_reused_seq_stays_with_the_message_that_said_it(
        tmp_path, snapshot_redis):
    """A trigger appended while Redis hands out a seq the archive holds: the memory's source
    is the new message wherever the flush renumbers it, never the archived message that
    held the seq (invariant 4: forgetting the one that said it forgets the memory)."""
    mem, sid, innocent, said = _said_on_a_reused_seq(
        tmp_path, snapshot_redis, "middle question", "Remember that my cat is called Miso.")
    (memory_id,) = said.memory_refs
    mem.flush(sid)
    refs = {m.message_id: (m.seq, m.memory_refs) for m in mem.cold.messages(sid)}
    assert refs[innocent.message_id] == (2, ())  # not cited by what reused its seq
    assert refs[said.message_id] == (3, (memory_id,))

    mem.forget_keyword(sid, "middle question")
    assert mem.cold.memory(memory_id) is not None  # the innocent message was not its source
    mem.forget_keyword(sid, "Miso")
    assert mem.cold.memory(memory_id) is None  # the one that said it was
    mem.close()


def test_a_fact_said_twice_across_a_reused_seq_keeps_both_sources(tmp_path, snapshot_redis):
    """The archived message and the one that reused its seq said the same fact: one memory,
    and forgetting either message alone keeps it."""
    mem, sid, before, again = _said_on_a_reused_seq(
        tmp_path, snapshot_redis, "Remember that my cat is called Miso.",
        "Remember: my cat is called Miso.")
    (memory_id,) = before.memory_refs
    assert again.memory_refs == (memory_id,)  # the same fact, one memory
    mem.flush(sid)
    refs = {m.message_id: (m.seq, m.memory_refs) for m in mem.cold.messages(sid)}
    assert refs == {**refs, before.message_id: (2, (memory_id,)),
                    again.message_id: (3, (memory_id,))}
    mem.forget_keyword(sid, "remember:")
    assert mem.cold.memory(memory_id) is not None  # still said by the archived message
    mem.forget_keyword(sid, "remember that")
    assert mem.cold.memory(memory_id) is None
    mem.close()
