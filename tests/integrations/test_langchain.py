"""``HermesChatMessageHistory`` against a real Redis and archive.

The interface tests are ported from langchain-core's own chat-history tests (langchain-core
1.8.1 sdist: ``tests/unit_tests/chat_history/test_chat_history.py``, MIT licence), rewritten
for HermesChatMessageHistory; the rest checks that every message type comes back equal,
including after a worker archived and compacted the session.
"""

from __future__ import annotations

import pytest
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    messages_to_dict,
)

from hermes_redis import SessionMemory
from hermes_redis.integrations.langchain import HermesChatMessageHistory
from hermes_redis.jobs.worker import run as run_worker

EVERY_KIND: list[BaseMessage] = [
    SystemMessage("You are a weather bot.", id="s1"),
    HumanMessage("東京の天気は？", additional_kwargs={"lang": "ja"}, name="alice"),
    AIMessage("", tool_calls=[{"name": "get_weather", "args": {"city": "東京", "days": 2},
                               "id": "call_1", "type": "tool_call"}],
              usage_metadata={"input_tokens": 10, "output_tokens": 3, "total_tokens": 13},
              response_metadata={"model_name": "scripted", "finish_reason": "tool_calls"}),
    ToolMessage('{"sky": "晴", "temp_c": 21.5}', tool_call_id="call_1", artifact={"raw": [1, 2.5]}),
    FunctionMessage(name="legacy_fn", content="legacy result"),
    ChatMessage(role="critic", content="be brief"),
    AIMessage([{"type": "text", "text": "晴れ, 21.5°C"}], id="a2"),
    AIMessageChunk(content="partial"),
]


# --- ported from tests/unit_tests/chat_history/test_chat_history.py -----------------------------
@pytest.mark.anyio
async def test_history_initialization_and_isolation(mem):
    history = HermesChatMessageHistory("hist_1", memory=mem)
    history.add_messages([HumanMessage(content="Hello")])
    assert await history.aget_messages() == [HumanMessage(content="Hello")]
    other = HermesChatMessageHistory("hist_2", memory=mem)
    await other.aadd_messages([HumanMessage(content="World")])
    assert history.messages == [HumanMessage(content="Hello")]
    await history.aclear()
    assert history.messages == []
    assert other.messages == [HumanMessage(content="World")]


def test_add_message_and_add_messages(mem):
    history = HermesChatMessageHistory("add_test", memory=mem)
    history.add_message(HumanMessage(content="Hello"))
    assert history.messages == [HumanMessage(content="Hello")]
    history.add_message(HumanMessage(content="World"))
    history.add_messages([HumanMessage(content="Hello"), HumanMessage(content="World")])
    assert history.messages == [HumanMessage(content=t) for t in ("Hello", "World") * 2]
    history.add_user_message("as text")
    history.add_ai_message("reply")
    assert history.messages[-2:] == [HumanMessage(content="as text"), AIMessage(content="reply")]


@pytest.mark.anyio
async def test_async_interface(mem):
    history = HermesChatMessageHistory("async_test", memory=mem)
    await history.aadd_messages([HumanMessage(content="Hello"), HumanMessage(content="World")])
    assert await history.aget_messages() == [HumanMessage(content="Hello"),
                                             HumanMessage(content="World")]
    await history.aadd_messages([HumanMessage(content="!")])
    assert await history.aget_messages() == [HumanMessage(content="Hello"),
                                             HumanMessage(content="World"),
                                             HumanMessage(content="!")]
    await history.aclear()
    assert await history.aget_messages() == []


# --- ours -------------------------------------------------------------------------------------
def test_every_message_type_round_trips(mem):
    history = HermesChatMessageHistory("kinds", memory=mem, user_id="alice")
    history.add_messages(EVERY_KIND)
    back = history.messages
    assert back == EVERY_KIND
    assert [type(m) for m in back] == [type(m) for m in EVERY_KIND]
    assert messages_to_dict(back) == messages_to_dict(EVERY_KIND)
    stored = mem.messages("kinds")
    assert [m.role for m in stored] == ["system", "user", "assistant", "tool", "tool", "assistant",
                                        "assistant", "assistant"]
    assert stored[2].content == 'get_weather({"city": "東京", "days": 2})'
    assert stored[6].content == "晴れ, 21.5°C"
    assert mem.info("kinds").user_id == "alice"


def test_a_new_history_is_empty_and_clear_forgets_for_good(mem):
    history = HermesChatMessageHistory("fresh", memory=mem)
    assert history.messages == []
    history.clear()  # nothing to clear: no error, no session made
    history.add_messages([HumanMessage("remember that I like tea"), AIMessage("noted")])
    mem.flush("fresh")
    history.clear()
    assert history.messages == [] and mem.cold.messages("fresh") == []
    assert [m.content for m in mem.memories("default")] == ["I like tea"]  # memories stay


def test_messages_from_other_writers_read_as_messages(mem):
    mem.create_session(session_id="mixed")
    mem.append("mixed", "user", "typed")
    mem.append("mixed", "assistant", "answered")
    mem.append("mixed", "system", "note")
    assert HermesChatMessageHistory("mixed", memory=mem).messages == [
        HumanMessage("typed"), AIMessage("answered"), SystemMessage("note")]


def test_history_survives_archive_compaction_and_expiry(config_factory):
    mem = SessionMemory(config_factory("redis", max_messages=4, compression={"keep_recent": 1}))
    history = HermesChatMessageHistory("long", memory=mem)
    added: list[BaseMessage] = []
    for turn in range(8):
        turn_msgs = [HumanMessage(f"question {turn} about PostgreSQL"), *EVERY_KIND[2:4],
                     AIMessage(f"answer {turn}")]
        history.add_messages(turn_msgs)
        added += turn_msgs
        run_worker(mem, burst=True)
        assert history.messages == added
    info = mem.info("long")
    assert info.summary and info.hot_count <= 4 < info.message_count == len(added)
    mem.hot.drop("long")
    assert history.messages == added
    mem.close()
