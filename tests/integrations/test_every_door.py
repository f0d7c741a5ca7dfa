"""One session, every door (issue 30): a session written through any door (the library, HTTP,
MCP, the OpenAI Agents adapter, the LangChain adapter) reads back through every other door
without an error, each message's text under its role; an item of a foreign shape is
rendered as text, never handed to a framework that cannot read it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from mcp import Client

from hermes_redis import SessionMemory
from hermes_redis.client import HermesClient
from hermes_redis.core import config as config_mod
from hermes_redis.integrations.langchain import HermesChatMessageHistory
from hermes_redis.integrations.openai_agents import HermesSession, is_sdk_item
from hermes_redis.server.mcp import build_mcp
from tests.http_server import ServeProcess, serve_config
from tests.redis_server import RedisServer

DOORS = ("library", "http", "mcp", "openai", "langchain")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory,
           redis_server: RedisServer) -> Iterator[tuple[ServeProcess, Path]]:
    config = serve_config(tmp_path_factory.mktemp("every-door"), redis_server.url)
    proc = ServeProcess(config).start()
    yield proc, config
    proc.stop()


class Doors:
    """Each door over the same Redis and archive: the library, the HTTP server's client, the
    MCP tools (in-process), and the two adapters."""

    def __init__(self, mem: SessionMemory, remote: HermesClient) -> None:
        self.mem, self.remote = mem, remote

    def mcp(self, tool: str, **args: Any) -> dict[str, Any]:
        async def call() -> dict[str, Any]:
            async with Client(build_mcp(self.mem)) as client:
                result = await client.call_tool(tool, args)
                assert not result.is_error, result
                assert result.structured_content is not None
                return result.structured_content

        return anyio.run(call)

    def write(self, door: str, sid: str, word: str) -> None:
        """A user question and an answer holding ``word`` (plus a tool call where the door
        has them), through ``door``, into a session it creates."""
        if door == "library":
            self.mem.create_session(user_id="alice", session_id=sid)
            self.mem.append(sid, "user", f"library asks {word}")
            self.mem.append(sid, "assistant", "", item={"kind": "note", "text": f"noted {word}"})
        elif door == "http":
            self.remote.create_session(user_id="alice", session_id=sid)
            self.remote.append_many(sid, [
                {"role": "user", "content": f"http asks {word}"},
                {"role": "tool", "content": f"http tool {word}", "item": {"result": [1, 2]}}])
        elif door == "mcp":
            self.mem.create_session(user_id="alice", session_id=sid)
            self.mcp("append", session_id=sid, role="user", content=f"mcp asks {word}")
            self.mcp("append", session_id=sid, role="assistant", content=f"mcp answers {word}")
        elif door == "openai":
            session = HermesSession(sid, memory=self.mem, user_id="alice")
            anyio.run(session.add_items, [
                {"role": "user", "content": f"sdk asks {word}"},
                {"type": "function_call", "name": "look", "arguments": "{}", "call_id": "c1"},
                {"type": "function_call_output", "call_id": "c1", "output": f"sdk tool {word}"},
                {"role": "assistant", "content": [{"type": "output_text", "text": f"sdk {word}",
                                                   "annotations": []}]}])
        else:
            HermesChatMessageHistory(sid, memory=self.mem, user_id="alice").add_messages([
                HumanMessage(f"langchain asks {word}"),
                AIMessage("", tool_calls=[{"name": "look", "args": {}, "id": "t1",
                                           "type": "tool_call"}]),
                ToolMessage(f"langchain tool {word}", tool_call_id="t1"),
                AIMessage(f"langchain {word}")])

    def read(self, door: str, sid: str) -> list[str]:
        """Every text ``door`` hands over for the session, by each of its reads."""
        texts: list[str] = []
        if door == "library":
            texts += [m.content for m in self.mem.messages(sid)]
            texts += [c["content"] for c in self.mem.context(sid).as_chat()]
        elif door == "http":
            texts += [m.content for m in self.remote.messages(sid)]
            texts += [c["content"] for c in self.remote.context(sid).as_chat()]
        elif door == "mcp":
            texts.append(self.mcp("context", session_id=sid)["text"])
            texts.append(json.dumps(self.mcp("info", session_id=sid)))
        elif door == "openai":
            for raw in (False, True):
                items = anyio.run(HermesSession(sid, memory=self.mem, raw=raw).get_items)
                assert all(is_sdk_item(i) for i in items), items  # nothing the SDK cannot read
                texts += [json.dumps(i, ensure_ascii=False) for i in items]
        else:
            for raw in (False, True):
                got = HermesChatMessageHistory(sid, memory=self.mem, raw=raw).messages
                assert all(isinstance(m, BaseMessage) for m in got)
                texts += [str(m.content) for m in got]
                texts += [json.dumps(m.tool_calls) for m in got if isinstance(m, AIMessage)]
        return texts


@pytest.fixture(scope="module")
def doors(served: tuple[ServeProcess, Path]) -> Iterator[Doors]:
    proc, config = served
    with HermesClient(proc.url) as remote, SessionMemory(config_mod.load(config)) as mem:
        yield Doors(mem, remote)


@pytest.mark.parametrize("reader", DOORS)
@pytest.mark.parametrize("writer", DOORS)
def test_a_session_written_through_one_door_reads_through_every_other(
        doors: Doors, writer: str, reader: str) -> None:
    sid = f"door-{writer}-{reader}"
    word = f"w{DOORS.index(writer)}x{DOORS.index(reader)}zebra"
    doors.write(writer, sid, word)
    texts = doors.read(reader, sid)
    assert sum(word in t for t in texts) >= 1, texts
    asked = f"{'sdk' if writer == 'openai' else writer} asks {word}"
    assert any(asked in t for t in texts), (asked, texts)  # the user's words, under its role


def test_foreign_items_are_text_under_their_role(doors: Doors) -> None:
    sid = "door-foreign"
    doors.write("openai", sid, "kiwi")
    history = HermesChatMessageHistory(sid, memory=doors.mem).messages
    assert [type(m).__name__ for m in history] == ["HumanMessage", "AIMessage", "AIMessage",
                                                   "AIMessage"]
    assert history[0].content == "sdk asks kiwi" and history[1].content == "look({})"
    doors.write("langchain", "door-foreign-lc", "fig")
    items = anyio.run(HermesSession("door-foreign-lc", memory=doors.mem).get_items)
    assert items == [{"role": "user", "content": "langchain asks fig"},
                     {"role": "assistant", "content": "look({})"},
                     {"role": "assistant", "content": "langchain tool fig"},
                     {"role": "assistant", "content": "langchain fig"}]
    own = HermesChatMessageHistory("door-foreign-lc", memory=doors.mem).messages
    assert isinstance(own[2], ToolMessage)  # its own door still reads its own objects
