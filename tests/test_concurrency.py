"""Invariant 1 and 5 under real concurrency: several OS processes append to one session."""

import multiprocessing as mp

from hermes_redis import SessionMemory


def _run(config, sid: str, target, n: int) -> None:  # type: ignore[no-untyped-def]
    """Four real OS processes running ``target(config, sid, worker, n)`` at once."""
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=target, args=(config, sid, w, n)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0


def _appender(config, sid: str, worker: int, n: int) -> None:
    mem = SessionMemory(config)
    for i in range(n):
        mem.append(sid, "user" if i % 2 == 0 else "assistant", f"p{worker} m{i}")
    mem.close()


def test_four_processes_append_2000_messages_to_one_session(config_factory, redis_kind):
    config = config_factory(redis_kind)
    mem = SessionMemory(config)
    sid = mem.create_session(user_id="load")
    _run(config, sid, _appender, 500)
    msgs = mem.messages(sid)
    assert [m.seq for m in msgs] == list(range(1, 2001))
    assert len({m.message_id for m in msgs}) == 2000
    for w in range(4):  # each process's own messages stay in its order
        own = [int(m.content.split("m")[1]) for m in msgs if m.content.startswith(f"p{w} ")]
        assert own == list(range(500))
    info = mem.info(sid)
    assert info.message_count == 2000
    assert info.total_tokens == sum(m.token_count for m in msgs)
    mem.close()


def _turns(config, sid: str, worker: int, n: int) -> None:
    mem = SessionMemory(config)
    for i in range(n):
        mem.append_many(sid, [{"role": "user", "content": f"p{worker} t{i} q"},
                              {"role": "assistant", "content": f"p{worker} t{i} call",
                               "tool_calls": [{"name": "grep"}]},
                              {"role": "tool", "content": f"p{worker} t{i} result"},
                              {"role": "assistant", "content": f"p{worker} t{i} answer"}])
    mem.close()


def test_turns_from_four_processes_stay_whole(config_factory, redis_kind):
    """append_many: each 4-message turn gets 4 consecutive seqs, whoever else appends."""
    config = config_factory(redis_kind)
    mem = SessionMemory(config)
    sid = mem.create_session(user_id="load")
    _run(config, sid, _turns, 100)
    msgs = mem.messages(sid)
    assert [m.seq for m in msgs] == list(range(1, 1601))
    for start in range(0, 1600, 4):  # every block of four is one turn, in order
        block = [m.content.rsplit(" ", 1) for m in msgs[start:start + 4]]
        assert len({head for head, _ in block}) == 1, block
        assert [tail for _, tail in block] == ["q", "call", "result", "answer"]
    info = mem.info(sid)
    assert info.message_count == 1600 and info.total_tokens == sum(m.token_count for m in msgs)
    mem.close()
