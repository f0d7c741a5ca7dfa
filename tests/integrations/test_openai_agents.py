"""``HermesSession`` against a real Redis and archive.

The protocol tests are ported from the OpenAI Agents SDK's own session tests
(openai-agents 0.24.0 sdist: ``tests/memory/test_session.py`` and the protocol parts of
``tests/extensions/memory/test_redis_session.py``, MIT licence), rewritten for HermesSession.
The agent runs use the SDK's scripted test model (``agents.testing.ScriptedModel``, shipped
in the wheel since 0.24), with tool calls, over several turns, while a worker archives and
compacts between them: the SDK must still read back exactly the items it stored.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, SessionSettings, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from hermes_redis import SessionMemory
from hermes_redis.core.errors import ValidationError
from hermes_redis.integrations.openai_agents import HermesSession, role_of
from hermes_redis.jobs.worker import run as run_worker

pytestmark = pytest.mark.anyio
set_tracing_disabled(True)  # no trace export: the tests run offline


def same(got: Any, want: Any) -> bool:
    """Equal including key order and int/float/bool distinctions."""
    return json.dumps(got, ensure_ascii=False) == json.dumps(want, ensure_ascii=False)


class Recording(HermesSession):
    """A HermesSession that remembers what the SDK handed it, to compare with what it reads."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.added: list[Any] = []

    async def add_items(self, items: list[Any]) -> None:
        await super().add_items(items)
        self.added += json.loads(json.dumps(items))

    async def pop_item(self) -> Any | None:
        popped = await super().pop_item()
        if popped is not None:
            self.added.pop()
        return popped


def _run_sync(agent: Agent, data: Any, **kwargs: Any) -> Any:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return Runner.run_sync(agent, data, **kwargs)
    finally:
        loop.close()


async def run_agent(method: str, agent: Agent, data: Any, **kwargs: Any) -> Any:
    """Runner.run, run_sync (in a thread with its own loop) or run_streamed, as the SDK tests do."""
    if method == "run":
        return await Runner.run(agent, data, **kwargs)
    if method == "run_sync":
        return await asyncio.to_thread(_run_sync, agent, data, **kwargs)
    result = Runner.run_streamed(agent, data, **kwargs)
    async for _ in result.stream_events():
        pass
    return result


# --- ported from tests/memory/test_session.py ---------------------------------------------------
@pytest.mark.parametrize("method", ["run", "run_sync", "run_streamed"])
async def test_session_memory_basic_functionality(mem, method):
    session = HermesSession("test_session_123", memory=mem)
    model = ScriptedModel()
    agent = Agent(name="test", model=model)
    model.enqueue([assistant_message("San Francisco")])
    first = await run_agent(method, agent, "What city is the Golden Gate Bridge in?", session=session)
    assert first.final_output == "San Francisco"
    model.enqueue([assistant_message("California")])
    second = await run_agent(method, agent, "What state is it in?", session=session)
    assert second.final_output == "California"
    assert len(model.calls[-1].input) > 1  # the history went to the model


@pytest.mark.parametrize("method", ["run", "run_streamed"])
async def test_session_memory_different_sessions(mem, method):
    model = ScriptedModel()
    agent = Agent(name="test", model=model)
    cats, dogs = HermesSession("session_1", memory=mem), HermesSession("session_2", memory=mem)
    model.enqueue([assistant_message("I like cats")])
    await run_agent(method, agent, "I like cats", session=cats)
    model.enqueue([assistant_message("I like dogs")])
    await run_agent(method, agent, "I like dogs", session=dogs)
    model.enqueue([assistant_message("Yes, you mentioned cats")])
    result = await run_agent(method, agent, "What did I say I like?", session=cats)
    assert result.final_output == "Yes, you mentioned cats"
    sent = json.dumps(model.calls[-1].input)
    assert "I like cats" in sent and "I like dogs" not in sent


async def test_session_direct_operations(mem):
    session = HermesSession("direct_test", memory=mem)
    assert await session.get_items() == []
    items = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there!"}]
    await session.add_items(items)
    assert await session.get_items() == items
    await session.clear_session()
    assert await session.get_items() == []
    await session.add_items([])  # nothing to store: no session is made either
    assert await session.get_items() == []


async def test_pop_item(mem):
    session = HermesSession("pop_test", memory=mem)
    assert await session.pop_item() is None
    items = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there!"},
             {"role": "user", "content": "How are you?"}]
    await session.add_items(items)
    assert len(await session.get_items()) == 3
    assert await session.pop_item() == items[2]
    after = await session.get_items()
    assert len(after) == 2 and after[-1]["content"] == "Hi there!"
    assert await session.pop_item() == items[1]
    assert await session.pop_item() == items[0]
    assert await session.pop_item() is None
    assert await session.get_items() == []


async def test_pop_only_affects_its_session(mem):
    one, two = HermesSession("session_1", memory=mem), HermesSession("session_2", memory=mem)
    await one.add_items([{"role": "user", "content": "Session 1 message"}])
    await two.add_items([{"role": "user", "content": "Session 2 message 1"},
                         {"role": "user", "content": "Session 2 message 2"}])
    assert (await two.pop_item())["content"] == "Session 2 message 2"
    assert [i["content"] for i in await one.get_items()] == ["Session 1 message"]
    assert [i["content"] for i in await two.get_items()] == ["Session 2 message 1"]


async def test_get_items_with_limit(mem):
    session = HermesSession("count_test", memory=mem)
    items = [{"role": r, "content": f"{w} {i}"} for i in range(1, 4)
             for r, w in (("user", "Message"), ("assistant", "Response"))]
    await session.add_items(items)
    assert await session.get_items() == items
    assert await session.get_items(limit=2) == items[-2:]
    assert await session.get_items(limit=4) == items[-4:]
    assert await session.get_items(limit=10) == items
    assert await session.get_items(limit=0) == []


@pytest.mark.parametrize("method", ["run", "run_sync", "run_streamed"])
async def test_list_input_is_appended_to_the_history(mem, method):
    session = HermesSession("test_validation", memory=mem)
    model = ScriptedModel()
    agent = Agent(name="test", model=model)
    history = [{"role": "user", "content": "Earlier message"},
               {"role": "assistant", "content": "Saved reply"}]
    await session.add_items(history)
    new = [{"role": "user", "content": "Test message"}]
    model.enqueue([assistant_message("This should run")])
    await run_agent(method, agent, new, session=session)
    assert model.calls[-1].input == history + new


async def test_session_input_callback_prepares_the_input(mem):
    session = HermesSession("session_cb", memory=mem)
    model = ScriptedModel()
    agent = Agent(name="test", model=model)
    history = [{"role": "user", "content": "Hello there."},
               {"role": "assistant", "content": "Hi, I'm here to assist you."}]
    await session.add_items(history)

    def only_user(old: list[Any], new: list[Any]) -> list[Any]:
        return [item for item in old if item["role"] == "user"] + new

    new = [{"role": "user", "content": "What your name?"}]
    model.enqueue([assistant_message("I'm gpt-4o")])
    await Runner.run(agent, new, session=session,
                     run_config=RunConfig(session_input_callback=only_user))
    assert model.calls[-1].input == [history[0], new[0]]


async def test_repeating_history_in_the_callback_does_not_grow_the_session(mem):
    session = HermesSession("session_repeat", memory=mem)
    model = ScriptedModel()
    agent = Agent(name="test", model=model)

    def repeat_first(old: list[Any], new: list[Any]) -> list[Any]:
        return new if not old else [*old, old[0], *new]

    for turn in range(3):
        model.enqueue([assistant_message(f"assistant {turn}")])
        await Runner.run(agent, f"user {turn}", session=session,
                         run_config=RunConfig(session_input_callback=repeat_first))
    stored = await session.get_items()
    assert [i["content"] for i in stored if i.get("role") == "user"] == ["user 0", "user 1", "user 2"]
    assert len(stored) == 6


async def test_unicode_special_characters_and_injection(mem):
    session = HermesSession("unicode_test", memory=mem)
    items = [{"role": "user", "content": "こんにちは"}, {"role": "assistant", "content": "😊👍"},
             {"role": "user", "content": "Привет"}, {"role": "user", "content": "O'Reilly"},
             {"role": "assistant", "content": "DROP TABLE sessions;"},
             {"role": "user", "content": '"SELECT * FROM users WHERE name = "admin";"'},
             {"role": "assistant", "content": "Robert'); DROP TABLE students;--"},
             {"role": "user", "content": '{"malicious": "json"}'},
             {"role": "assistant", "content": "\\n\\t\\r Special escapes"},
             {"role": "assistant", "content": "Line1\nLine2\tTabbed"}]
    await session.add_items(items)
    assert same(await session.get_items(), items)


async def test_concurrent_access(rmem):
    session = HermesSession("concurrent_test", memory=rmem)

    async def add(start: int) -> None:
        await session.add_items([{"role": "user", "content": f"Message {start + i}"} for i in range(5)])

    await asyncio.gather(add(0), add(5), add(10))
    contents = [i["content"] for i in await session.get_items()]
    assert sorted(contents) == sorted(f"Message {i}" for i in range(15))
    for start in (0, 5, 10):  # each add_items is one atomic step: its items stay together
        at = contents.index(f"Message {start}")
        assert contents[at:at + 5] == [f"Message {start + i}" for i in range(5)]


async def test_session_settings(mem):
    assert HermesSession("s_default", memory=mem).session_settings == SessionSettings()
    session = HermesSession("s_limit", memory=mem, session_settings=SessionSettings(limit=3))
    await session.add_items([{"role": "user", "content": f"Message {i}"} for i in range(5)])
    assert [i["content"] for i in await session.get_items()] == ["Message 2", "Message 3", "Message 4"]
    assert [i["content"] for i in await session.get_items(limit=2)] == ["Message 3", "Message 4"]


async def test_runner_session_settings_override(mem):
    session = HermesSession("s_override", memory=mem, session_settings=SessionSettings(limit=100))
    await session.add_items([{"role": "user", "content": f"Turn {i}"} for i in range(10)])
    model = ScriptedModel()
    agent = Agent(name="test", model=model)
    model.enqueue([assistant_message("ok")])
    await Runner.run(agent, "New question", session=session,
                     run_config=RunConfig(session_settings=SessionSettings(limit=2)))
    assert [i["content"] for i in model.calls[-1].input] == ["Turn 8", "Turn 9", "New question"]


# --- ours: roles, items, agent runs with a worker --------------------------------------------------
def test_roles_of_sdk_items():
    assert role_of({"role": "developer", "content": "x"}) == "system"
    assert role_of({"type": "function_call", "name": "f", "arguments": "{}", "call_id": "c"}) == "assistant"
    assert role_of({"type": "function_call_output", "call_id": "c", "output": "x"}) == "tool"
    assert role_of({"type": "computer_call_output", "call_id": "c", "output": {}}) == "tool"
    assert role_of({"type": "reasoning", "id": "r", "summary": []}) == "assistant"


async def test_sdk_items_are_stored_exactly_and_rendered(mem):
    session = HermesSession("items", memory=mem)
    items = [
        {"role": "user", "content": [{"type": "input_text", "text": "weather in 東京?"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "look it up"}]},
        {"type": "function_call", "name": "get_weather", "arguments": '{"city":"東京"}',
         "call_id": "call_1", "id": "fc_1", "status": "completed"},
        {"type": "function_call_output", "call_id": "call_1", "output": '{"temp": 21.5, "sky": "晴"}'},
        {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "晴れ, 21.5°C", "annotations": [], "logprobs": []}]},
    ]
    await session.add_items(items)
    assert same(await session.get_items(), items)
    stored = mem.messages("items")
    assert [m.role for m in stored] == ["user", "assistant", "assistant", "tool", "assistant"]
    assert [m.content for m in stored] == ["weather in 東京?", "look it up",
                                           'get_weather({"city":"東京"})',
                                           '{"temp": 21.5, "sky": "晴"}', "晴れ, 21.5°C"]
    assert mem.info("items").user_id == "default" and mem.info("items").title == "weather in 東京?"
    with pytest.raises(ValidationError):
        await session.add_items(["not an item"])
    assert len(await session.get_items()) == 5


async def test_a_message_appended_by_other_means_reads_as_an_item(mem):
    mem.create_session(user_id="bob", session_id="mixed")
    mem.append("mixed", "user", "typed into the CLI")
    session = HermesSession("mixed", memory=mem, user_id="bob")
    await session.add_items([{"role": "assistant", "content": "seen"}])
    assert await session.get_items() == [{"role": "user", "content": "typed into the CLI"},
                                         {"role": "assistant", "content": "seen"}]


async def test_a_purged_session_id_starts_over(mem):
    session = HermesSession("reused", memory=mem)
    await session.add_items([{"role": "user", "content": "old"}])
    mem.delete("reused", purge=True)
    assert await session.get_items() == []
    await session.add_items([{"role": "user", "content": "new"}])
    assert await session.get_items() == [{"role": "user", "content": "new"}]
    mem.delete("reused")  # deleted, archive kept: the adapter says to purge, stores nothing
    with pytest.raises(ValidationError, match="--purge"):
        await session.add_items([{"role": "user", "content": "refused"}])
    assert await session.get_items() == [{"role": "user", "content": "new"}]


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return json.dumps({"city": city, "sky": "晴", "temp_c": 21.5, "wind": [3, 4.5]}, ensure_ascii=False)


async def test_agent_runs_with_tools_while_a_worker_archives_and_compacts(config_factory):
    mem = SessionMemory(config_factory("redis", max_messages=6, compression={"keep_recent": 1}))
    session = Recording("agent-run", memory=mem, user_id="alice")
    model = ScriptedModel()
    agent = Agent(name="weather", model=model, tools=[get_weather])
    cities = ["Tokyo", "Paris", "Lima", "Oslo", "Cairo", "Quito"]
    for turn, city in enumerate(cities):
        model.enqueue([function_call("get_weather", {"city": city}, call_id=f"call_{turn}")])
        model.enqueue([assistant_message(f"{city}: sunny, 21.5°C")])
        history = await session.get_items()
        result = await Runner.run(agent, f"What is the weather in {city}?", session=session)
        assert result.final_output == f"{city}: sunny, 21.5°C"
        first_call = model.calls[-2].input
        assert same(first_call[:len(history)], history)  # the model saw the whole history
        run_worker(mem, burst=True)  # archive and compact between turns
        assert same(await session.get_items(), session.added)
        if turn == 2:
            mem.hot.drop("agent-run")  # the hot keys expired: rebuilt from the archive
    info = mem.info("agent-run")
    assert info.backlog == 0 and info.summary  # archived, and older turns summarized
    assert info.hot_count <= 6 < info.message_count == len(session.added) == 6 * 4
    stored = await session.get_items()
    assert same(stored, session.added)
    outputs = [i for i in stored if i.get("type") == "function_call_output"]
    assert [json.loads(o["output"])["city"] for o in outputs] == cities
    assert "Tokyo" in mem.context("agent-run", budget=400).summary  # compaction used the renderings
    assert same(await session.pop_item(), stored[-1])
    assert same(await session.get_items(), stored[:-1])
    await session.clear_session()
    assert await session.get_items() == [] and mem.messages("agent-run") == []
    model.enqueue([assistant_message("fresh start")])
    await Runner.run(agent, "hello again", session=session)
    assert model.calls[-1].input == [{"role": "user", "content": "hello again"}]
    mem.close()


async def test_streamed_agent_run_with_tools(mem):
    session = Recording("streamed", memory=mem)
    model = ScriptedModel()
    agent = Agent(name="weather", model=model, tools=[get_weather])
    for city in ("Tokyo", "Paris"):
        model.enqueue([function_call("get_weather", {"city": city}, call_id=f"c_{city}")])
        model.enqueue([assistant_message(f"{city} is sunny")])
        result = await run_agent("run_streamed", agent, f"Weather in {city}?", session=session)
        assert result.final_output == f"{city} is sunny"
    assert same(await session.get_items(), session.added) and len(session.added) == 8


async def test_the_session_works_through_http_too(tmp_path, redis_server):
    from hermes_redis.client import HermesClient
    from tests.http_server import ServeProcess, serve_config

    proc = ServeProcess(serve_config(tmp_path, redis_server.url)).start()
    try:
        with HermesClient(proc.url) as remote:
            session = Recording("remote-run", memory=remote)
            model = ScriptedModel()
            agent = Agent(name="weather", model=model, tools=[get_weather])
            model.enqueue([function_call("get_weather", {"city": "Tokyo"}, call_id="c1")])
            model.enqueue([assistant_message("sunny")])
            await Runner.run(agent, "Weather in Tokyo?", session=session)
            assert same(await session.get_items(), session.added) and len(session.added) == 4
            stored = await session.get_items()
            assert same(await session.pop_item(), stored[-1])
            assert same(await session.get_items(), stored[:-1])
            await session.clear_session()
            assert await session.get_items() == []
    finally:
        proc.stop()
