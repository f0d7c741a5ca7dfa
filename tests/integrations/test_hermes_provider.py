"""The Hermes Agent memory provider and context engine (issue 41), driven as Hermes drives
them, on both doors: library mode (a SessionMemory on Redis) and remote mode (the HTTP
client of a real `hermes-redis serve`). Hermes itself runs in tests/hermes_agent/."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_redis import SessionMemory
from hermes_redis.core import config as config_mod
from hermes_redis.integrations.hermes_agent import session as lineage
from hermes_redis.integrations.hermes_agent.engine import HermesRedisContextEngine
from hermes_redis.integrations.hermes_agent.ids import session_id_for
from hermes_redis.integrations.hermes_agent.provider import HermesRedisMemoryProvider
from hermes_redis.integrations.hermes_agent.settings import Settings, forget_api
from hermes_redis.integrations.hermes_agent.turns import CONTEXT_MARK, clean
from tests.http_server import ServeProcess, serve_config
from tests.redis_server import RedisServer

DOORS = ("library", "remote")
RUN = f"{time.time_ns() % 10**6:06d}"  # this run's ids: both doors share one store


def hid(name: str, settings: Settings | None = None) -> str:
    """A Hermes-style session id of this run and door (both doors share one store)."""
    return f"{name}{RUN}{'r' if settings is not None and settings.remote else 'l'}"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory,
           redis_server: RedisServer) -> Iterator[tuple[ServeProcess, Path]]:
    config = serve_config(tmp_path_factory.mktemp("hermes-provider"), redis_server.url)
    proc = ServeProcess(config).start()
    yield proc, config
    proc.stop()


@pytest.fixture
def settings(request: pytest.FixtureRequest, served: tuple[ServeProcess, Path]) -> Iterator[Settings]:
    proc, config = served
    s = Settings(url=proc.url) if request.param == "remote" else Settings(config=str(config))
    yield s
    forget_api(s)


@pytest.fixture
def mem(served: tuple[ServeProcess, Path]) -> Iterator[SessionMemory]:
    """The same store, read directly: what the provider wrote."""
    m = SessionMemory(config_mod.load(served[1]))
    yield m
    m.close()


def provider(settings: Settings, home: Path, hermes_id: str, **kwargs: Any) -> HermesRedisMemoryProvider:
    p = HermesRedisMemoryProvider(settings)
    p.get_tool_schemas()  # Hermes asks for the tools before initialize
    p.initialize(hermes_id, hermes_home=str(home), platform="cli", **kwargs)
    return p


def turn(i: int, tool: bool = False) -> list[dict[str, Any]]:
    """One Hermes turn as its message list holds it (a tool exchange when ``tool``)."""
    out: list[dict[str, Any]] = [{"role": "user", "content": f"question {i} about topic{i}"}]
    if tool:
        out += [{"role": "assistant", "content": "", "tool_calls": [
                    {"id": f"call_{i}", "type": "function",
                     "function": {"name": "terminal", "arguments": json.dumps({"cmd": "ls"})}}]},
                {"role": "tool", "tool_call_id": f"call_{i}", "content": f"file{i}.txt"}]
    out.append({"role": "assistant", "content": f"answer {i} about topic{i}",
                "finish_reason": "stop"})
    return out


def run(p: HermesRedisMemoryProvider, history: list[dict[str, Any]], turns: range,
        tool_every: int = 3) -> list[dict[str, Any]]:
    """Hermes' loop: each turn appended to ``history``, then sync_turn with the whole list."""
    for i in turns:
        history += turn(i, tool=i % tool_every == 0)
        p.sync_turn(history[-1]["content"], history[-1]["content"], session_id=p.hermes_id,
                    messages=[{"role": "system", "content": "You are Hermes."}, *history])
    return history


def stored(mem: SessionMemory, sid: str) -> list[Any]:
    return mem.messages(sid)


@pytest.mark.parametrize("settings", DOORS, indirect=True)
def test_every_turn_is_stored_once_in_order_with_its_tool_calls(
        settings: Settings, mem: SessionMemory, tmp_path: Path) -> None:
    user = f"u{time.time_ns()}"
    p = provider(settings, tmp_path, hid("20261207_100000_aaaaaa", settings), user_id=user)
    history = run(p, [], range(1, 7))
    p.sync_turn("", "", messages=[{"role": "system", "content": "x"}, *history])  # a replay
    assert p.flush(10)
    got = stored(mem, p.sid)
    assert [(m.role, m.item) for m in got] == [
        (m["role"], {k: v for k, v in m.items() if k != "finish_reason"}) for m in history]
    assert [m.seq for m in got] == list(range(1, len(history) + 1))  # contiguous, once each
    assert p.sid == hid("20261207_100000_aaaaaa", settings)  # Hermes' id is valid: kept
    assert "topic3" not in p.prefetch("topic3")  # Hermes holds all of it: not recalled
    assert mem.info(p.sid).user_id == user
    p.shutdown()


@pytest.mark.parametrize("settings", DOORS, indirect=True)
def test_a_retried_write_stores_nothing_twice(settings: Settings, mem: SessionMemory,
                                              tmp_path: Path) -> None:
    p = provider(settings, tmp_path, hid("20261207_100001_bbbbbb", settings))
    run(p, [], range(1, 3))
    assert p.flush(10)
    assert p.writer is not None
    item = ("turn", p.sid, p.user_id, [
        {"role": "user", "content": "once", "message_id": "ab" * 16}])
    p.writer.put(item)
    p.writer.put(item)  # what a retry after a lost reply sends: the same ids
    assert p.flush(10)
    assert [m.content for m in stored(mem, p.sid)].count("once") == 1
    p.shutdown()


@pytest.mark.parametrize("settings", DOORS, indirect=True)
def test_gateway_processes_share_one_session_with_contiguous_seqs(
        settings: Settings, mem: SessionMemory, tmp_path: Path) -> None:
    key = f"agent:main:telegram:dm:{time.time_ns()}"
    a = provider(settings, tmp_path / "a", hid("20261207_100002_cccccc", settings), gateway_session_key=key,
                 user_id="tg-42")
    b = provider(settings, tmp_path / "b", hid("20261207_100003_dddddd", settings), gateway_session_key=key,
                 user_id="tg-42")
    assert a.sid == b.sid == session_id_for("", key)
    ha: list[dict[str, Any]] = []
    hb: list[dict[str, Any]] = []
    for i in range(1, 9):
        run(a if i % 2 else b, ha if i % 2 else hb, range(i, i + 1))
    assert a.flush(10) and b.flush(10)
    got = stored(mem, a.sid)
    assert [m.seq for m in got] == list(range(1, len(got) + 1))
    assert len(got) == len(ha) + len(hb)
    assert mem.info(a.sid).user_id == "tg-42"
    a.shutdown()
    b.shutdown()


@pytest.mark.parametrize("settings", DOORS, indirect=True)
def test_prefetch_brings_memories_and_other_sessions_within_its_budget(
        settings: Settings, mem: SessionMemory, tmp_path: Path) -> None:
    user = f"u{time.time_ns()}"
    old = provider(settings, tmp_path, hid("20261207_100004_eeeeee", settings), user_id=user)
    old.sync_turn("", "", messages=[
        {"role": "user", "content": "my staging database password is hunter2-zebra"},
        {"role": "assistant", "content": "Noted."}])
    old.on_memory_write("add", "user", "The user's dog is called Rex")
    assert old.flush(10)
    mem.flush(old.sid)
    old.shutdown()
    new = provider(settings, tmp_path, hid("20261207_100005_ffffff", settings), user_id=user)
    block = new.system_prompt_block()
    assert "dog is called Rex" in block
    assert new.system_prompt_block() == block  # the same text all session: prompt caches hold
    text = new.prefetch("what is the staging database password?", session_id="")
    assert "hunter2-zebra" in text and old.sid in text
    assert "Rex" not in text  # already in the system prompt: not sent twice
    assert new.tokenizer.count(text) <= new.settings.prefetch_tokens
    tight = HermesRedisMemoryProvider(Settings(**{**settings.__dict__, "prefetch_tokens": 5}))
    tight.initialize(hid("20261207_100006_gggggg", settings), hermes_home=str(tmp_path), user_id=user)
    assert tight.prefetch("staging database password") == ""  # nothing fits in 5 tokens
    other = provider(settings, tmp_path, hid("20261207_100007_hhhhhh", settings), user_id="someone-else")
    assert "hunter2" not in other.prefetch("staging database password")
    for p in (new, tight, other):
        p.shutdown()


@pytest.mark.parametrize("settings", DOORS, indirect=True)
def test_memory_writes_are_mirrored_and_the_tools_answer_json(
        settings: Settings, mem: SessionMemory, tmp_path: Path) -> None:
    user = f"u{time.time_ns()}"
    p = provider(settings, tmp_path, hid("20261207_100008_iiiiii", settings), user_id=user)
    run(p, [], range(1, 5))
    p.on_memory_write("add", "memory", "Prefers answers in French")
    assert p.flush(10)
    assert [m.content for m in mem.memories(user)] == ["Prefers answers in French"]
    p.on_memory_write("remove", "memory", "Prefers answers in French")
    assert p.flush(10)
    assert mem.memories(user) == []
    names = {t["name"] for t in p.get_tool_schemas()}
    assert names == {"hermes_redis_search", "hermes_redis_recall", "hermes_redis_remember"}
    mem.flush(p.sid)
    hits = json.loads(p.handle_tool_call("hermes_redis_search", {"query": "topic3"}))["hits"]
    assert {h["seq"] for h in hits} >= {m.seq for m in stored(mem, p.sid) if "topic3" in m.content}
    got = json.loads(p.handle_tool_call("hermes_redis_recall", {"seq": 5, "before": 1,
                                                                "after": 1}))
    assert [m["seq"] for m in got["messages"]] == [4, 5, 6]
    assert json.loads(p.handle_tool_call("hermes_redis_remember", {"text": "Lives in Lyon"}))[
        "memory_id"]
    assert "error" in json.loads(p.handle_tool_call("hermes_redis_recall", {"seq": "x"}))
    stranger = mem.create_session(user_id="mallory")
    refused = json.loads(p.handle_tool_call("hermes_redis_recall",
                                            {"session_id": stranger, "seq": 1}))
    assert "not found" in refused["error"]  # another user's session is not shown
    p.shutdown()


@pytest.mark.parametrize("settings", DOORS, indirect=True)
def test_session_switches_follow_hermes(settings: Settings, mem: SessionMemory,
                                        tmp_path: Path) -> None:
    p = provider(settings, tmp_path, hid("20261207_100009_jjjjjj", settings))
    history = run(p, [], range(1, 4))
    first = p.sid
    # a compression moves Hermes to a new id: the same conversation goes on
    p.on_session_switch(hid("20261207_100010_kkkkkk", settings), parent_session_id=p.hermes_id,
                        reset=False, reason="compression")
    assert p.sid == first
    assert lineage.resolve(str(tmp_path), hid("20261207_100010_kkkkkk", settings), None) == first
    history = run(p, history[-2:], range(4, 5))
    assert p.flush(10)
    assert len(stored(mem, first)) == 3 * 2 + 2 + 2  # turn 3 had a tool exchange; no repeat
    # /branch forks it, with its lineage
    p.on_session_switch(hid("20261207_100011_llllll", settings),
                        parent_session_id=hid("20261207_100010_kkkkkk", settings), reason="branch")
    assert p.sid != first and mem.info(p.sid).parent_session_id == first
    # /new starts another
    p.on_session_switch(hid("20261207_100012_mmmmmm", settings), parent_session_id="", reset=True,
                        reason="new_session")
    assert p.sid == hid("20261207_100012_mmmmmm", settings)
    p.shutdown()


def test_hermes_goes_on_while_redis_is_away_and_the_turns_arrive_once(
        tmp_path: Path) -> None:
    server = RedisServer().start()
    try:
        config = serve_config(tmp_path, server.url)
        settings = Settings(config=str(config))
        p = provider(settings, tmp_path, hid("20261207_100013_nnnnnn"))
        history = run(p, [], range(1, 3))
        assert p.flush(10)
        server.stop(kill=True)
        started = time.monotonic()
        history = run(p, history, range(3, 6))
        p.prefetch("question 4")
        assert p.prefetch("question 4") == ""  # the second read gives up at once
        p.system_prompt_block()
        assert time.monotonic() - started < 20  # each hook within its bound (2 s)
        assert not p.flush(0.5)  # still queued
        server.start()
        assert p.flush(30)
        m = SessionMemory(config_mod.load(config))
        try:
            got = m.messages(p.sid)
            assert [x.seq for x in got] == list(range(1, len(history) + 1))
            assert [x.item["content"] for x in got] == [h["content"] for h in history]
            assert got[5].content == 'called terminal({"cmd": "ls"})'  # what search reads
        finally:
            m.close()
        p.shutdown()
        forget_api(settings)
    finally:
        server.stop()
        server.cleanup()


def test_a_full_queue_drops_and_counts(tmp_path: Path) -> None:
    settings = Settings(redis="redis://127.0.0.1:9/0", queue_max=2)  # nothing listens there
    p = provider(settings, tmp_path, hid("20261207_100014_oooooo"))
    run(p, [], range(1, 6))
    assert p.writer is not None and p.writer.dropped == 3
    p.shutdown()
    forget_api(settings)


@pytest.mark.parametrize("settings", DOORS, indirect=True)
def test_compress_hands_back_the_budgeted_context_and_the_turn_in_flight(
        settings: Settings, mem: SessionMemory, tmp_path: Path) -> None:
    p = provider(settings, tmp_path, hid("20261207_100015_pppppp", settings))
    history = run(p, [], range(1, 121))
    engine = HermesRedisContextEngine()
    engine.update_model("m", 64_000)
    engine.threshold_tokens = 3_000  # a small window, so the session is past it
    engine.on_session_start(p.hermes_id, hermes_home=str(tmp_path))
    clone = copy.deepcopy(engine)  # Hermes copies the engine per agent
    inflight = [{"role": "user", "content": "what did we say about topic7?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "call_x", "type": "function",
                     "function": {"name": "terminal", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "call_x", "content": "ok"}]
    messages = [{"role": "system", "content": "You are Hermes."}, *history, *inflight]
    assert p.on_pre_compress(messages) == ""
    mem.compact(p.sid)  # what the worker does beside Hermes: a summary of the older turns
    out = clone.compress(messages, current_tokens=90_000)
    assert out[0] == {"role": "system", "content": "You are Hermes."}
    assert out[1]["role"] == "user" and out[1]["content"].startswith(CONTEXT_MARK)
    assert out[-3:] == inflight  # the turn in flight exactly as Hermes holds it
    calls = {c["id"] for m in out for c in m.get("tool_calls") or []}
    answers = [m["tool_call_id"] for m in out if m["role"] == "tool"]
    assert set(answers) == calls and len(answers) == len(set(answers))  # pairs intact
    assert clone._cost(out) <= engine.threshold_tokens
    assert len(out) < len(messages)
    newest = out[2:-3]
    assert newest[-1] == clean(history[-1])  # the newest stored turns, as Hermes sent them
    assert clone.compression_count == 1 and engine.compression_count == 0
    kept = next(m.seq for m in mem.messages(p.sid) if m.item == newest[0])
    assert p.held_from is not None and p.held_from <= kept
    recalled = p.prefetch("topic7")  # compressed away: now recalled, with its seq
    assert "(this conversation, #" in recalled and "topic7" in recalled
    p.shutdown()


def test_compress_without_hermes_redis_keeps_the_newest_messages(tmp_path: Path) -> None:
    settings = Settings(redis="redis://127.0.0.1:9/0")
    p = provider(settings, tmp_path, hid("20261207_100016_qqqqqq"))
    engine = HermesRedisContextEngine()
    engine.update_model("m", 64_000)
    engine.threshold_tokens = 600
    engine.on_session_start(p.hermes_id, hermes_home=str(tmp_path))
    history = [m for i in range(1, 60) for m in turn(i, tool=i % 3 == 0)]
    started = time.monotonic()
    out = engine.compress([*history, {"role": "user", "content": "and now?"}])
    assert time.monotonic() - started < 20
    assert out[-1] == {"role": "user", "content": "and now?"}
    assert engine.fallbacks == 1 and 1 < len(out) < len(history)
    assert out[-2] == clean(history[-1]) and out[0]["role"] != "tool"
    p.shutdown()
    forget_api(settings)


def test_what_is_queued_at_exit_is_written_by_the_next_process(tmp_path: Path) -> None:
    server = RedisServer().start()
    try:
        config = serve_config(tmp_path, server.url)
        settings = Settings(config=str(config))
        p = provider(settings, tmp_path, hid("20261207_100017_rrrrrr"))
        history = run(p, [], range(1, 3))
        assert p.flush(10)
        server.stop(kill=True)
        history = run(p, history, range(3, 5))
        p.shutdown()  # Hermes exits while Redis is away: the two turns are spooled
        assert len(list((tmp_path / "hermes-redis" / "spool").glob("*.jsonl"))) == 1
        server.start()
        forget_api(settings)
        later = provider(settings, tmp_path, hid("20261207_100017_rrrrrr"))  # hermes --resume
        assert later.flush(30)
        m = SessionMemory(config_mod.load(config))
        try:
            assert [x.item["content"] for x in m.messages(later.sid)] == \
                [h["content"] for h in history]
        finally:
            m.close()
        assert list((tmp_path / "hermes-redis" / "spool").glob("*.jsonl")) == []
        later.shutdown()
        forget_api(settings)
    finally:
        server.stop()
        server.cleanup()


@pytest.mark.parametrize("settings", DOORS, indirect=True)
def test_the_same_words_where_hermes_cut_its_list_are_stored_again(
        settings: Settings, mem: SessionMemory, tmp_path: Path) -> None:
    """A later process whose list Hermes cut in place counts ids afresh: a turn with the same
    words as an old one gets the old one's ids. It is a new turn, not a retry: stored."""
    hermes_id = hid("20261207_100018_ssssss", settings)
    said = [{"role": "user", "content": "ok"}, {"role": "assistant", "content": "fine"}]
    first = provider(settings, tmp_path, hermes_id)
    first.sync_turn("ok", "fine", messages=list(said))
    assert first.flush(10)
    first.shutdown()
    time.sleep(2.5)  # older than the clock slack: a store of another turn, not this one's try
    later = provider(settings, tmp_path, hermes_id)  # hermes --resume after the cut
    later.sync_turn("ok", "fine", messages=list(said))
    assert later.flush(10)
    assert [m.content for m in stored(mem, later.sid)] == ["ok", "fine", "ok", "fine"]
    later.shutdown()
