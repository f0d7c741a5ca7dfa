"""Invariant 2 against the clock and Redis' memory limit: workers down for longer than
the TTL lose nothing, and a Redis that runs out of memory refuses appends clearly
instead of evicting unarchived turns."""

from __future__ import annotations

import time

from hermes_redis import SessionMemory
from hermes_redis.core.errors import BackendUnavailableError
from tests.fault.conftest import Acked, audit, burst, figures
from tests.helpers import write_config
from tests.redis_server import RedisServer


def test_workers_down_longer_than_ttl(fault_config, tmp_path):
    cfg, path = fault_config(ttl=1, max_messages=8, compression={"keep_recent": 2})
    mem = SessionMemory(cfg)
    acked: list[Acked] = []
    sids = [mem.create_session(user_id="alice") for _ in range(6)]
    for k, sid in enumerate(sids):
        for i in range(20):
            role = "user" if i % 2 == 0 else "assistant"
            acked.append(Acked.of(mem.append(sid, role, f"s{k} m{i}: PostgreSQL 16 decided.")))
            if k % 2 and i == 9:
                mem.flush(sid)  # half of these sessions are partly archived
    deadline = time.monotonic() + 3.5  # the workers are down for 3.5 TTLs
    reads = 0
    while time.monotonic() < deadline:
        for sid in sids[:3]:
            mem.context(sid)  # reading renews the TTL only for fully archived sessions
            reads += 1
        time.sleep(0.2)
    for sid in sids:
        meta = mem.hot.meta(sid)
        assert meta is not None, "unarchived turns expired"
        assert mem.hot.ttl_left(sid) is None
        unflushed = [a for a in acked if a.session_id == sid and a.seq > meta.flushed_seq]
        assert {a.message_id for a in unflushed} <= {m.message_id for m in mem.hot.messages(sid)}
    burst(path, tmp_path / "burst.log")
    totals = audit(mem, acked)
    for sid in sids:  # archived: may expire now (with a 1 s TTL, on a busy machine, may have)
        assert mem.hot.ttl_left(sid) is not None or mem.hot.meta(sid) is None
    time.sleep(2.2)
    assert all(mem.hot.meta(sid) is None for sid in sids)  # expired once archived
    totals_after = audit(mem, acked)  # the archive alone holds everything
    assert totals_after["lost"] == 0
    for sid in sids:  # and a session comes back from the archive on next use
        ctx = mem.context(sid)
        assert ctx.messages and ctx.tokens <= ctx.budget
        nxt = mem.append(sid, "user", "back after expiry")
        assert nxt.seq == 21
    figures("ttl_workers_down", ttl_seconds=1, down_seconds=3.5, reads=reads, **totals)
    mem.close()


def test_redis_out_of_memory_refuses_appends_and_evicts_nothing(tmp_path, fault_config):
    server = RedisServer(aof=False, extra=["--maxmemory", "4mb",
                                           "--maxmemory-policy", "volatile-lru"]).start()
    try:
        cfg, path = fault_config(url=server.url, ttl=1)
        mem = SessionMemory(cfg)
        sid = mem.create_session(user_id="alice")
        acked: list[Acked] = []
        err = None
        for i in range(2000):
            try:
                acked.append(Acked.of(mem.append(sid, "user", f"{i} " + "lorem ipsum dolor " * 1200)))
            except BackendUnavailableError as e:
                err = e
                break
        assert err is not None, "Redis never ran out of memory"
        assert "\n" not in str(err) and "out of memory" in str(err), str(err)
        assert mem.hot.length(sid) == len(acked)  # nothing evicted
        import redis

        redis.Redis.from_url(server.url).config_set("maxmemory", "0")
        write_config(cfg, path)
        burst(path, tmp_path / "burst.log")
        totals = audit(mem, acked)
        figures("redis_oom", refused=1, **totals)
        mem.close()
    finally:
        server.cleanup()
