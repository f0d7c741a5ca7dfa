"""Redis-specific behaviour of the hot tier: key layout, the retry path of append, TTL."""

import re
import socket
import threading
import time
from pathlib import Path

import pytest
import redis
from redis.connection import AbstractConnection

from hermes_redis.core.models import META_FIELDS, Message, SessionMeta
from hermes_redis.store.hot import ClusterHot
from hermes_redis.store.hot import base as hot


@pytest.mark.stack("default", reason="the single Redis's key layout; a cluster shards the index "
                  "keys per slot (tests/test_cluster.py holds each script's keys to one slot)")
def test_keys_of_a_session_share_one_hash_tag(rmem, redis_client):
    sid = rmem.create_session()
    rmem.append(sid, "user", "hi")
    prefix = rmem.config.redis.key_prefix
    keys = {k.decode() for k in redis_client.keys(f"{prefix}:*")}
    assert keys == {f"{prefix}:{{{sid}}}:meta", f"{prefix}:{{{sid}}}:msgs", f"{prefix}:{{{sid}}}:ids",
                    f"{prefix}:sessions", f"{prefix}:backlog", f"{prefix}:run-id"}


def test_a_retried_append_is_not_stored_twice(rmem):
    hot = rmem.hot
    sid = "retry-me"
    hot.create(sid, SessionMeta.new("u", "", time.time()), 0)
    msg = Message(sid, 0, "user", "once", 1)
    keys = [hot.meta_key(sid), hot.list_key(sid), hot.index_key(sid), hot.backlog_key(sid),
            hot.full_key(sid), hot.ids_key(sid)]
    args = [repr(time.time()), sid, "", 0, 1, msg.pack(), 1, msg.message_id, ""]
    first = hot._scripts["append"](keys=keys, args=args)
    args[3] = 1  # the reply was lost: the client sends it again
    again = hot._scripts["append"](keys=keys, args=args)
    assert first[1] == again[1] == 1
    assert hot.length(sid) == 1 and hot.meta(sid).message_count == 1


@pytest.mark.stack("default", reason="one Redis's script cache; tests/test_cluster.py flushes "
                  "each primary's")
def test_an_append_or_read_after_redis_lost_its_scripts_loads_them_and_stores_once(rmem, redis_client):
    sid = rmem.create_session()
    rmem.append(sid, "user", "before")
    redis_client.script_flush()  # as a restarted Redis: NOSCRIPT on the next EVALSHA
    stored = rmem.append(sid, "assistant", "after the flush")
    assert stored.seq == 2
    assert [m.content for m in rmem.messages(sid)] == ["before", "after the flush"]
    assert rmem.hot.meta(sid).message_count == 2
    redis_client.script_flush()  # the read pipeline's bare EVALSHA: loaded and sent again
    assert [m.content for m in rmem.context(sid).messages] == ["before", "after the flush"]


def test_unarchived_keys_have_no_ttl_and_archived_ones_do(config_factory):
    from hermes_redis import SessionMemory

    with SessionMemory(config_factory("redis", ttl=100)) as mem:
        sid = mem.create_session()
        assert mem.hot.ttl_left(sid) is not None  # nothing to archive yet: may expire
        mem.append(sid, "user", "hi")
        assert mem.hot.ttl_left(sid) is None
        mem.context(sid)  # reading renews the TTL but cannot set one on unarchived keys
        assert mem.hot.ttl_left(sid) is None
        mem.flush(sid)
        assert 0 < mem.hot.ttl_left(sid) <= 100
        assert mem.info(sid).backlog == 0


def test_prefixes_isolate_deployments(config_factory, tmp_path):
    """Two deployments on one Redis, each with its own prefix (and its own archive)."""
    from hermes_redis import SessionMemory
    from tests import stack

    b_config = config_factory("redis").with_overrides(
        archive=stack.separate_archive(str(tmp_path / "b.db")))
    with SessionMemory(config_factory("redis")) as a, SessionMemory(b_config) as b:
        sid = a.create_session()
        a.append(sid, "user", "only in a")
        assert sid not in [s.session_id for s in b.list_sessions()]
        assert b.hot.meta(sid) is None and a.hot.meta(sid) is not None


def test_context_is_one_round_trip_and_no_sqlite_in_the_common_case(config_factory, monkeypatch):
    """A session the hot tier holds whole: meta, page, TTL and the user's cached memories
    come in one call, sent in one write (no SCRIPT EXISTS before it); the archive is not
    read."""
    from hermes_redis import SessionMemory

    with SessionMemory(config_factory("redis")) as mem:
        sid = mem.create_session(user_id="ann")
        mem.remember("ann", "prefers tabs")
        for i in range(10):
            mem.append(sid, "user", f"question {i}")
            mem.append(sid, "assistant", f"answer {i}")
        mem.context(sid)  # learns the session's user, caches the memories
        trips: list[str] = []
        sql: list[str] = []
        client = mem.hot.client
        pipeline, execute_command = client.pipeline, client.execute_command

        def counted_pipeline(*a, **k):  # type: ignore[no-untyped-def]
            pipe = pipeline(*a, **k)
            run = pipe.execute
            pipe.execute = lambda *x, **y: trips.append("pipeline") or run(*x, **y)
            return pipe

        client.pipeline = counted_pipeline
        client.execute_command = lambda *a, **k: trips.append(str(a[0])) or execute_command(*a, **k)
        send = AbstractConnection.send_packed_command
        monkeypatch.setattr(AbstractConnection, "send_packed_command",
                            lambda self, *a, **k: trips.append("send") or send(self, *a, **k))
        read = mem.cold._read
        mem.cold._read = lambda q, args=(): sql.append(q) or read(q, args)  # type: ignore[method-assign]
        ctx = mem.context(sid)
        # one round trip, sent in one write per node it touches: on one Redis a MULTI of the
        # TTL script and the native reads, written on the connection directly; on a cluster
        # the user's cache is in another slot, maybe on another primary, so the read script
        # (which reads the page itself there) and the cache's GETs are pipelined
        calls, sends = [t for t in trips if t != "send"], trips.count("send")
        nodes = 2 if isinstance(mem.hot, ClusterHot) else 1
        assert calls == (["pipeline"] if nodes == 2 else []) and 1 <= sends <= nodes
        assert sql == []
        assert ctx.memories == ("prefers tabs",) and len(ctx.messages) == 20


def test_a_read_cut_off_midway_leaves_no_reply_on_the_connection(config_factory, monkeypatch):
    """The read's MULTI is read off the connection directly: a failure between its replies
    drops that connection (retried on a fresh one), so no later command reads a reply meant
    for the read. (The connection is the thread's own, out of redis-py's pool, whose check
    for data waiting would not see replies still in flight anyway.)"""
    from hermes_redis import SessionMemory

    with SessionMemory(config_factory("single")) as mem:
        sid = mem.create_session(user_id="ann")
        mem.append(sid, "user", "hello")
        real = AbstractConnection.read_response
        calls = {"n": 0}

        def flaky(self, *a, **k):  # type: ignore[no-untyped-def]
            calls["n"] += 1
            if calls["n"] == 2:  # after MULTI's OK, before the script's QUEUED
                raise redis.ConnectionError("connection reset mid-read")
            return real(self, *a, **k)

        monkeypatch.setattr(AbstractConnection, "read_response", flaky)
        assert [m.content for m in mem.context(sid).messages] == ["hello"]
        monkeypatch.setattr(AbstractConnection, "read_response", real)
        client = mem.hot.client
        client.set(f"{mem.hot.prefix}:probe", "v")
        assert client.get(f"{mem.hot.prefix}:probe") == b"v"  # its own reply, not QUEUED
        assert mem.hot.meta(sid).message_count == 1


def test_a_process_that_guesses_a_short_page_reads_on(config_factory):
    """On one Redis the read's page is sized by the session's mean message as this process
    last read it; a process that never read the session guesses 64 tokens. A short guess
    costs one more page, never a message."""
    from hermes_redis import SessionMemory

    cfg = config_factory("single")
    with SessionMemory(cfg) as mem:
        sid = mem.create_session(user_id="ann")
        mem.append_many(sid, [{"role": "user", "content": f"m{i}"} for i in range(200)])
    with SessionMemory(cfg) as fresh:
        first = fresh.hot.read(sid, None, 8000)
        assert len(first.entries) == first.size < 200  # the guess: 155 entries
        assert fresh.hot.read(sid, None, 8000).size >= 200  # now sized by the mean
    with SessionMemory(cfg) as other:
        assert [m.content for m in other.context(sid, budget=8000).messages] == [
            f"m{i}" for i in range(200)]


def test_a_memory_remembered_elsewhere_reaches_the_next_context(config_factory):
    """The memory cache is per user in Redis: another process's remember() invalidates it."""
    from hermes_redis import SessionMemory

    config = config_factory("redis")
    with SessionMemory(config) as reader, SessionMemory(config) as writer:
        sid = reader.create_session(user_id="bo")
        reader.append(sid, "user", "hello")
        assert reader.context(sid).memories == ()
        assert reader.context(sid).memories == ()  # now from the cache
        writer.remember("bo", "项目用 PostgreSQL，不用 MySQL")
        assert reader.context(sid).memories == ("项目用 PostgreSQL，不用 MySQL",)
        # a reader that read the generation before a change cannot cache the stale list over it
        _, gen = reader.hot.cached_memories("bo")
        writer.remember("bo", "answers in English")
        reader.hot.cache_memories("bo", gen, ["stale"])
        assert reader.context(sid).memories == ("项目用 PostgreSQL，不用 MySQL", "answers in English")


def test_two_processes_remembering_one_fact_at_once_store_it_once(config_factory):
    """Each remember() reads the user's memories, finds no near-duplicate, then writes: two
    processes doing it at once both wrote (68 duplicates in 100 facts, before the user's
    memory lock in Redis)."""
    from hermes_redis import SessionMemory

    config = config_factory("redis")
    with SessionMemory(config) as one, SessionMemory(config) as two:
        one.create_session(user_id="cy")
        for i in range(40):
            start = threading.Barrier(2)

            def add(mem: SessionMemory, fact: str = f"my dog number {i} is called Rex{i}",
                    start: threading.Barrier = start) -> None:
                start.wait()
                mem.remember("cy", fact)

            both = [threading.Thread(target=add, args=(m,)) for m in (one, two)]
            for t in both:
                t.start()
            for t in both:
                t.join()
        contents = [m.content for m in one.memories("cy")]
        assert len(contents) == len(set(contents)) == 40
        assert not one.hot.client.exists(one.hot.memories_lock_key("cy"))  # released


def test_a_read_takes_the_meta_by_name_not_the_forgot_marks(rmem):
    """Each forgotten message leaves a 'forgot:' mark in the meta hash (so a forget never
    counts twice). A read asks for the meta's fields by name: 300 pops of a session cost
    its reads nothing (with HGETALL the script copied every mark: 208 µs a read, not 48)."""
    sid = rmem.create_session()
    rmem.append_many(sid, [{"role": "user", "content": f"m{i}"} for i in range(310)])
    for _ in range(300):
        rmem.pop(sid)
    keys = [rmem.hot.meta_key(sid), rmem.hot.list_key(sid), rmem.hot.ids_key(sid)]
    values = rmem.hot._read(keys, [-1, 4000], [], 64)[0]
    assert len(values) == len(META_FIELDS)
    assert len(rmem.hot.client.hkeys(keys[0])) > 300  # the marks are there
    meta = rmem.hot.meta(sid)
    assert meta is not None and meta.message_count == 10 and meta.forgets == 300
    assert [m.content for m in rmem.context(sid).messages] == [f"m{i}" for i in range(10)]


def test_a_read_decodes_only_the_entries_it_has_not_seen(rmem):
    """An agent's every context() reads mostly the page the read before it read: those entries
    are decoded once per process (keyed by their bytes and the session), entries over
    DECODED_BYTES every time, so the held Messages stay small."""
    sid = rmem.create_session()
    rmem.append_many(sid, [{"role": "user", "content": f"m{i}"} for i in range(6)])
    rmem.context(sid)
    before = hot._decode.cache_info()
    rmem.context(sid)
    after = hot._decode.cache_info()
    assert (after.hits - before.hits, after.misses - before.misses) == (6, 0)
    big = rmem.append(sid, "assistant", "x " * hot.DECODED_BYTES)
    held = hot._decode.cache_info().currsize
    assert rmem.context(sid).messages[-1].message_id == big.message_id
    assert hot._decode.cache_info().currsize == held  # read, decoded, not held
    # the same bytes under another session id are another Message
    entry = rmem.hot.client.lindex(rmem.hot.list_key(sid), 0)
    other = rmem.hot._entry("another-session", entry)
    assert other is not None and other.session_id == "another-session"
    assert rmem.hot._entry(sid, entry).session_id == sid


def test_the_read_script_names_the_meta_fields_the_model_has():
    """read.lua returns the values of its FIELDS list, which hot._meta names by META_FIELDS."""
    script = (Path(__file__).parents[1] / "hermes_redis" / "store" / "hot" / "lua" / "read.lua").read_text()
    listed = re.search(r"^local FIELDS = \{(.*?)\}", script, re.M | re.S)
    assert listed is not None
    assert tuple(re.findall(r"'(\w+)'", listed.group(1))) == META_FIELDS


def test_the_backlog_age_reads_one_entry_not_the_list(rmem, monkeypatch):
    """Metrics ask for the age of the oldest unarchived message on every scrape, and with the
    workers down a session's list only grows: the message is found by its position (one
    entry read), or, when a forget moved it, by walking the tail to it."""
    sid = rmem.create_session()
    rmem.append_many(sid, [{"role": "user", "content": f"m{i}"} for i in range(200)])
    first = rmem.hot.page(sid, 199, 1)[0]
    asked: list[int] = []
    page = rmem.hot.page
    monkeypatch.setattr(rmem.hot, "page", lambda s, skip, count: asked.append(count)
                        or page(s, skip, count))
    monkeypatch.setattr(rmem.hot, "messages", lambda s: pytest.fail("read the whole list"))
    sessions, messages, age = rmem.backlog()
    assert (sessions, messages, asked) == (1, 200, [1]) and first.seq == 1
    assert age == pytest.approx(time.time() - int(first.message_id[:12], 16) / 1000, abs=30)
    monkeypatch.undo()
    assert rmem.forget_keyword(sid, "m0") == 1  # seq 1: no entry is 200th from the end now
    meta = rmem.hot.meta(sid)
    assert meta is not None and meta.backlog == 200
    found = rmem._first_unarchived(sid, meta)
    assert found is not None and found.seq == 2


def test_set_fields_never_recreates_a_gone_session(rmem):
    """The check and the write are one script now (EXISTS then HSET raced an expiry and could
    recreate a hash of just these fields, with no TTL); this pins the semantics, not the race."""
    sid = rmem.create_session()
    rmem.hot.drop(sid)
    rmem.hot.set_fields(sid, {"status": "archived"})
    assert not rmem.hot.client.exists(rmem.hot.meta_key(sid))
    live = rmem.create_session()
    rmem.hot.set_fields(live, {"status": "archived", "title": "t"})
    assert rmem.hot.meta(live).status == "archived" and rmem.hot.meta(live).title == "t"


def test_memory_hot_drop_forgets_full_texts(config_factory):
    from hermes_redis import SessionMemory

    with SessionMemory(config_factory("memory", save_tool_results=True)) as mem:
        sid = mem.create_session()
        hot = mem.hot
        msg = Message(sid, 0, "tool", "capped", 1)
        hot.append([msg], time.time(), "", {msg.message_id: "the whole text"})
        assert hot.full_texts(sid, [msg.message_id])
        hot.drop(sid)
        assert hot._full == {}


def test_a_redis_that_may_evict_is_refused_unless_accepted(tmp_path, caplog):
    """maxmemory-policy allkeys-lru could evict unarchived turns: a clear startup error that
    names the policy and the fix; redis.allow_eviction accepts it, loudly."""
    import logging

    from hermes_redis import SessionMemory
    from hermes_redis.core.errors import ConfigError
    from tests.conftest import make_config
    from tests.redis_server import RedisServer

    server = RedisServer(aof=False, extra=["--maxmemory-policy", "allkeys-lru",
                                            "--save", ""]).start()
    try:
        config = make_config(tmp_path, "redis", server.url)
        with pytest.raises(ConfigError, match=r"maxmemory-policy allkeys-lru.*noeviction.*"
                                              r"redis\.allow_eviction"):
            SessionMemory(config)
        accepted = config.with_overrides(redis={"allow_eviction": True})
        with caplog.at_level(logging.WARNING), SessionMemory(accepted) as mem:
            assert "RISK ACCEPTED" in caplog.text and "persists nothing" in caplog.text
            sid = mem.create_session()
            mem.append(sid, "user", "works anyway")
    finally:
        server.cleanup()


def test_info_shows_that_redis_persists_nothing(tmp_path):
    """A Redis with neither AOF nor RDB is used, and `info` says what a restart would cost."""
    from hermes_redis import SessionMemory
    from hermes_redis.cli.render import report_lines, session_report
    from tests.conftest import make_config
    from tests.redis_server import RedisServer

    bare = RedisServer(aof=False).start()
    safe = RedisServer(aof=True).start()
    try:
        for server, expect in ((bare, True), (safe, False)):
            with SessionMemory(make_config(tmp_path, "redis", server.url)) as mem:
                sid = mem.create_session()
                report = session_report(mem, sid)
            lines = [ln for ln in report_lines(report) if ln.startswith("Warning: Redis")]
            assert bool(lines) is expect, lines
            if expect:
                assert "persists nothing" in lines[0] and "appendonly yes" in lines[0]
                assert report.as_dict()["redis_warnings"]
    finally:
        bare.cleanup()
        safe.cleanup()


def test_a_repeated_forget_is_a_no_op(rmem):
    """forget is idempotent per message_id: sending it again (a retry after a dropped
    reply) changes nothing and does not fail."""
    sid = rmem.create_session()
    m = rmem.append(sid, "user", "forget me")
    target = [(m.message_id, m.seq, m.token_count)]
    assert rmem.hot.forget(sid, target) == 1
    before = rmem.hot.meta(sid)
    rmem.hot.forget(sid, target)
    assert rmem.hot.meta(sid) == before


def test_each_thread_appends_on_its_own_connection_which_close_closes(config_factory):
    """``_exchange`` runs on a connection per thread, held out of redis-py's pool: threads
    never share one mid-reply, a finished thread's is let go, and ``close()`` closes all."""
    import gc

    from hermes_redis import SessionMemory

    mem = SessionMemory(config_factory("single"))
    sid = mem.create_session()
    lanes: dict[int, object] = {}
    start = threading.Barrier(4)

    def add(k: int) -> None:
        start.wait()
        for i in range(25):
            mem.append(sid, "user", f"t{k} m{i}")
        lanes[k] = mem.hot._lane()

    threads = [threading.Thread(target=add, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(c) for c in lanes.values()}) == 4
    assert [m.seq for m in mem.messages(sid)] == list(range(1, 101))
    assert mem.hot.meta(sid).message_count == 100
    held = lanes[0]
    lanes.clear()
    gc.collect()
    assert held in mem.hot._lanes_held and len(mem.hot._lanes_held) == 1  # the threads' are gone
    mine = mem.hot._lane()
    mem.append(sid, "user", "from the main thread")
    assert mine._sock is not None
    mem.close()
    assert mine._sock is None and held._sock is None


def test_a_forked_child_appends_on_a_connection_of_its_own(config_factory):
    import multiprocessing
    import os

    from hermes_redis import SessionMemory

    with SessionMemory(config_factory("single")) as mem:
        sid = mem.create_session()
        mem.append(sid, "user", "parent first")
        parent_lane = mem.hot._lane()

        def child() -> None:
            ok = mem.hot._lane().pid == os.getpid() and mem.hot._lane() is not parent_lane
            for i in range(10):
                mem.append(sid, "assistant", f"child {i}")
            os._exit(0 if ok else 3)

        proc = multiprocessing.get_context("fork").Process(target=child)
        proc.start()
        proc.join(60)
        assert proc.exitcode == 0
        mem.append(sid, "user", "parent again")
        assert mem.hot._lane() is parent_lane
        assert [m.seq for m in mem.messages(sid)] == list(range(1, 13))


def test_memory_pressure_asks_redis_by_bytes_appended_not_by_messages(rmem, monkeypatch):
    """An INFO costs about two appends: small messages ask rarely (every 64 messages was 13
    INFOs in these 800 appends), one big message makes the next append ask. (The 5 s clock,
    the other reason to ask, is set out of reach: a slow machine must not fail this.)"""
    monkeypatch.setattr(rmem.pressure, "interval", 3600.0)
    asked: list[int] = []
    use = rmem.hot.memory_use
    monkeypatch.setattr(rmem.hot, "memory_use", lambda: asked.append(1) or use())
    sid = rmem.create_session()
    rmem.append_many(sid, [{"role": "user", "content": "x" * 200} for _ in range(100)])
    for _ in range(700):
        rmem.append(sid, "user", "y" * 200)
    assert 1 <= len(asked) <= 2  # the first append's, then one at most in 240 KB
    before = len(asked)
    rmem.append(sid, "user", "z " * 150_000)
    rmem.append(sid, "user", "after a big one")
    assert len(asked) == before + 1


def test_a_test_server_whose_port_was_taken_starts_on_another() -> None:
    """The harness itself: a port picked free can be taken before redis-server binds it (by
    another test process); the first start then moves on, a restart never does."""
    from tests.redis_server import RedisServer, free_port

    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        ports = iter([taken, free_port()])
        server = RedisServer(aof=False, pick_port=lambda: next(ports))
        try:
            assert server.port == taken
            server.start()
            assert server.port != taken
            assert redis.Redis(port=server.port).info("server")["process_id"] == server.proc.pid
            port = server.port
            server.restart()
            assert server.port == port
        finally:
            server.cleanup()
