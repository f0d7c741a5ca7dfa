"""Invariant 7: bad input gets a one-line error that says what to do, and writes nothing.

"Nothing" is checked at the storage level: every Redis key of the test's prefix and queue
(dumped byte for byte) and the archive's row counts are the same before and after.
"""

from __future__ import annotations

import logging

import msgpack
import pytest

from hermes_redis import SessionMemory
from hermes_redis.core import config
from hermes_redis.core.errors import ConfigError, HermesError, ValidationError
from tests.fault.conftest import figures
from tests.helpers import archive_query


def snapshot(mem: SessionMemory) -> tuple[dict[bytes, bytes | None], tuple[int, ...]]:
    client, queue = mem.hot.client, mem.queue.connection  # one Redis, or cluster + queue
    dump = {k: client.dump(k) for k in client.scan_iter(
        match=f"{mem.config.redis.key_prefix}*", count=1000)}
    dump.update({k: queue.dump(k) for k in queue.scan_iter(
        match=f"rq:*{mem.config.redis.queue}*", count=1000)})
    counts = tuple(archive_query(mem.config, f"SELECT count(*) FROM {t}")[0][0]
                   for t in ("sessions", "messages", "tombstones", "memories"))
    return dump, counts


@pytest.fixture
def seeded(rmem: SessionMemory) -> tuple[SessionMemory, str]:
    sid = rmem.create_session(user_id="alice", session_id="victim")
    rmem.append(sid, "user", "keep me: we use PostgreSQL 16")
    rmem.flush(sid)
    rmem.append(sid, "assistant", "noted, unflushed reply")
    return rmem, sid


BAD_SESSION_IDS = [
    "a*b", "a{b", "a}b", "a:b", "a b", "x" * 65, "", "victim\n", "victim:meta",
    "{victim}", "../victim", "victim*", "t:{victim}:msgs", "*", "名字", None, 42,
]


def one_line(err: BaseException) -> str:
    text = str(err)
    assert text and "\n" not in text, f"not one line: {text!r}"
    assert "Traceback" not in text
    return text


APPEND_CASES = [
    ({"role": "robot", "content": "x"}, "unknown role"),
    ({"role": "User", "content": "x"}, "unknown role"),
    ({"role": None, "content": "x"}, "unknown role"),
    ({"role": "user", "content": ""}, "empty"),
    ({"role": "user", "content": " \n\t "}, "empty"),
    ({"role": "user", "content": None}, "must be text"),
    ({"role": "user", "content": 42}, "must be text"),
    ({"role": "user", "content": "x" * 2049}, "over the limit"),
    ({"role": "user", "content": "é" * 1025}, "over the limit"),  # 2050 bytes
    ({"role": "user", "content": b"\xff\xfe bad"}, "UTF-8"),
    ({"role": "user", "content": b"\xc3\x28"}, "UTF-8"),
    ({"role": "user", "content": "lone \ud800 surrogate"}, "UTF-8"),
    ({"role": "user", "content": "x", "tool_calls": "{not json"}, "tool_calls is not valid JSON"),
    ({"role": "user", "content": "x", "tool_calls": "42"}, "tool_calls must be a JSON list"),
    ({"role": "user", "content": "x", "tool_calls": '"str"'}, "tool_calls must be a JSON list"),
    ({"role": "user", "content": "x", "tool_calls": [object()]}, "tool_calls cannot be stored"),
    ({"role": "user", "content": "x", "tool_calls": 7}, "tool_calls must be a JSON list"),
    ({"role": "user", "content": "x", "file_refs": "[1"}, "file_refs is not valid JSON"),
    ({"role": "user", "content": "x", "file_refs": "[1, 2]"}, "file_refs must be a list"),
    ({"role": "user", "content": "x", "file_refs": [1]}, "file_refs must be a list"),
    ({"role": "user", "content": "x", "file_refs": {"a": "b"}}, "file_refs must be a list"),
    ({"role": "user", "content": "x", "memory_refs": "nope"}, "memory_refs is not valid JSON"),
    ({"role": "user", "content": "x", "memory_refs": [None]}, "memory_refs must be a list"),
]


@pytest.fixture
def small_limit(config_factory):  # type: ignore[no-untyped-def]
    mem = SessionMemory(config_factory("redis").with_overrides(
        limits={"max_content_bytes": 2048}))
    sid = mem.create_session(user_id="alice", session_id="victim")
    mem.append(sid, "user", "keep me")
    yield mem, sid
    mem.close()


def test_bad_appends_are_clear_errors_and_write_nothing(small_limit):
    mem, sid = small_limit
    before = snapshot(mem)
    for kwargs, needle in APPEND_CASES:
        with pytest.raises(ValidationError) as err:
            mem.append(sid, **kwargs)
        assert needle in one_line(err.value), (kwargs, str(err.value))
    assert snapshot(mem) == before
    assert [m.content for m in mem.messages(sid)] == ["keep me"]
    figures("bad_appends", cases=len(APPEND_CASES), writes=0)


def test_bad_session_ids_are_refused_by_every_call(seeded):
    mem, sid = seeded
    before = snapshot(mem)
    calls = [
        lambda s: mem.create_session(session_id=s),
        lambda s: mem.append(s, "user", "injected"),
        lambda s: mem.context(s), lambda s: mem.info(s), lambda s: mem.messages(s),
        lambda s: mem.forget_last(s, 1), lambda s: mem.forget_keyword(s, "keep"),
        lambda s: mem.clear(s), lambda s: mem.archive(s), lambda s: mem.restore(s),
        lambda s: mem.delete(s), lambda s: mem.compact(s), lambda s: mem.flush(s),
        lambda s: mem.resolve(s), lambda s: mem.remember("alice", "x", session_id=s),
    ]
    n = 0
    for bad in BAD_SESSION_IDS:
        for i, call in enumerate(calls):
            if bad is None and i in (0, 14):
                continue  # session_id=None means "make one up" / "no session"
            with pytest.raises(ValidationError, match="invalid session id") as err:
                call(bad)
            one_line(err.value)
            n += 1
    assert snapshot(mem) == before
    assert [m.content for m in mem.messages(sid)] == [
        "keep me: we use PostgreSQL 16", "noted, unflushed reply"]
    figures("bad_session_ids", ids=len(BAD_SESSION_IDS), calls=n, writes=0)


def test_other_bad_arguments(seeded):
    mem, sid = seeded
    before = snapshot(mem)
    cases = [
        (lambda: mem.create_session(user_id=""), "user_id"),
        (lambda: mem.create_session(user_id="a\nb"), "user_id"),
        (lambda: mem.create_session(user_id="x" * 129), "user_id"),
        (lambda: mem.create_session(user_id="alice", session_id="victim"), "already exists"),
        (lambda: mem.context(sid, budget=0), "budget"),
        (lambda: mem.context(sid, budget=-5), "budget"),
        (lambda: mem.context(sid, budget="100"), "budget"),
        (lambda: mem.forget_last(sid, 0), "positive integer"),
        (lambda: mem.forget_last(sid, True), "positive integer"),
        (lambda: mem.forget_keyword(sid, "  "), "keyword is empty"),
        (lambda: mem.search("   "), "query is empty"),
        (lambda: mem.list_sessions(status="gone"), "unknown status"),
        (lambda: mem.remember("alice", ""), "empty"),
    ]
    for call, needle in cases:
        with pytest.raises(ValidationError) as err:
            call()
        assert needle in one_line(err.value)
    assert snapshot(mem) == before


@pytest.mark.parametrize("prefix", ["a:b", "x*", "{evil}", "a b", "", "x" * 33, "a\nb",
                                    "hermes:{victim}", "ok?", "tab\t"])
def test_key_prefix_injection_is_refused(tmp_path, prefix):
    path = tmp_path / "c.yml"
    path.write_text(f"redis:\n  key_prefix: {prefix!r}\n".replace("'", '"'))
    with pytest.raises(ConfigError) as err:
        config.load(path)
    assert "redis.key_prefix" in one_line(err.value) and str(path) in str(err.value)


def test_key_prefix_injection_through_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("HERMES_KEY_PREFIX", "a:{b}*")
    with pytest.raises(ConfigError) as err:
        config.load(None)
    assert "redis.key_prefix" in one_line(err.value)
    assert "HERMES_KEY_PREFIX" in str(err.value)


CONFIG_CASES = [
    ("surprise: 1\n", "unknown key 'surprise'"),
    ("memory:\n  session:\n    max_mesages: 3\n", "unknown key 'memory.session.max_mesages'"),
    ("memory:\n  session:\n    compression:\n      enabeld: true\n", "compression.enabeld"),
    ("redis:\n  password: x\n", "unknown key 'redis.password'"),
    ("memory:\n  session:\n    ttl: soon\n", "memory.session.ttl must be int"),
    ("memory:\n  session:\n    ttl: 1.5\n", "memory.session.ttl must be int"),
    ("memory:\n  session:\n    ttl: true\n", "memory.session.ttl must be int"),
    ("memory:\n  session:\n    ttl: -1\n", "memory.session.ttl must be 0"),
    ("memory:\n  session:\n    ttl: [1]\n", "memory.session.ttl must be int"),
    ("memory:\n  session:\n    max_messages: 0\n", "max_messages must be at least 1"),
    ("memory:\n  session:\n    auto_title: maybe\n", "auto_title must be bool"),
    ("memory:\n  session:\n    backend: mongo\n", "memory.session.backend"),
    ("memory:\n  session: 5\n", "memory.session must be a mapping"),
    ("memory: []\n", "memory must be a mapping"),
    ("redis:\n  url: 5\n", "redis.url must be str"),
    ("redis:\n  socket_timeout: -1\n", "redis.socket_timeout must be positive"),
    ("model:\n  context_window: big\n", "model.context_window must be int"),
    ("- a\n- b\n", "top level must be a mapping"),
    ("just a string\n", "top level must be a mapping"),
    ("42\n", "top level must be a mapping"),
    ("a: [\n", "invalid YAML"),
    ("a: b: c\n", "invalid YAML"),
    ("\tredis: {}\n", "invalid YAML"),
]


@pytest.mark.parametrize(("text", "needle"), CONFIG_CASES)
def test_broken_config_files(tmp_path, text, needle):
    path = tmp_path / "config.yml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        SessionMemory.from_config(path)
    msg = one_line(err.value)
    assert needle in msg and str(path) in msg


def test_config_file_that_is_not_text(tmp_path):
    path = tmp_path / "config.yml"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError) as err:
        config.load(path)
    assert str(path) in one_line(err.value)


def test_config_path_is_a_directory(tmp_path):
    with pytest.raises(ConfigError) as err:
        config.load(tmp_path)
    assert str(tmp_path) in one_line(err.value)


def test_redis_url_that_is_not_a_url(tmp_path):
    path = tmp_path / "config.yml"
    path.write_text("redis:\n  url: 'http://user:hunter2@127.0.0.1:1'\n")
    with pytest.raises(HermesError) as err:
        SessionMemory.from_config(path)
    msg = one_line(err.value)
    assert "redis.url" in msg and "hunter2" not in msg


def test_corrupted_hot_entries_are_reported_and_skipped(seeded, caplog, tmp_path):
    mem, sid = seeded
    client = mem.hot.client
    key = mem.hot.list_key(sid)
    good = client.lrange(key, 0, -1)
    client.rpush(key, b"\xc1 not msgpack")                    # invalid msgpack byte
    client.rpush(key, msgpack.packb([99, 1, "x"]))            # a wire version we do not know
    client.rpush(key, b"")                                    # empty
    client.lpush(key, b"\x9a\x01\xcf")                        # truncated header at the head
    client.rpush(key, good[-1][:20])                          # truncated entry
    with caplog.at_level(logging.ERROR, logger="hermes_redis.store.hot"):
        ctx = mem.context(sid)
        info = mem.info(sid)
        history = mem.messages(sid)
    assert [m.content for m in ctx.messages] == [
        "keep me: we use PostgreSQL 16", "noted, unflushed reply"]
    assert ctx.tokens <= ctx.budget
    assert info.message_count == 2
    assert [m.seq for m in history] == [1, 2]
    assert sum("corrupted" in r.getMessage() for r in caplog.records) >= 5
    assert mem.flush(sid) == 1  # the good message is archived despite its neighbours
    for i in range(6):  # compaction and forget walk the list (in Lua) past the bad entries
        mem.append(sid, "user", f"question {i} about Redis?")
        mem.append(sid, "assistant", f"answer {i}: we decided to use Redis 7.")
    assert mem.forget_keyword(sid, "unflushed") == 1
    mem.flush(sid)
    result = mem.compact(sid)
    assert result is not None and result.trimmed > 0
    ctx = mem.context(sid)  # the whole session fits the default budget: verbatim
    assert ctx.summary == "" and ctx.tokens <= ctx.budget and len(ctx.messages) == 13
    ctx = mem.context(sid, budget=200)  # past the threshold: the summary the compaction wrote
    assert ctx.summary and ctx.tokens <= ctx.budget
    mem.search("PostgreSQL")
    seqs = [m.seq for m in mem.messages(sid)]
    assert seqs == [1, *range(3, 15)]
    assert mem.info(sid).message_count == 13
    figures("corrupted_entries", injected=5, crashes=0)


@pytest.mark.parametrize("blob", ["x", "ab12", "é"])
def test_one_huge_token_does_not_stall_the_worker(config_factory, blob):
    """A 1 MB message with no spaces (a hash dump, minified code) must not make the
    summarizer quadratic: compaction is the worker's job and must finish."""
    import time

    mem = SessionMemory(config_factory("redis", max_messages=4,
                                       compression={"keep_recent": 1}))
    sid = mem.create_session()
    limit = mem.config.limits.max_content_bytes
    started = time.monotonic()
    mem.append(sid, "user", blob * (limit // len(blob.encode()) - 1))
    for i in range(4):
        mem.append(sid, "user", f"follow-up {i}")
    mem.flush(sid)
    result = mem.compact(sid)
    took = time.monotonic() - started
    assert result is not None and result.trimmed >= 1
    assert took < 120, f"append + compaction of a 1 MB token took {took:.1f}s"  # quadratic: ~30 min
    mem.close()
