"""The MCP tools as an MCP client sees them: the SDK's own client talking to ``hermes-redis mcp``
spawned as a real subprocess (stdio), and to ``mcp_asgi_app`` routed at ``/mcp`` under uvicorn
(streamable HTTP); results are checked against the library's state on the same Redis and
archive."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import uvicorn
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextContent
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route

from hermes_redis import SessionMemory
from hermes_redis.server.mcp import build_mcp, mcp_asgi_app
from tests.helpers import isolated_config
from tests.redis_server import free_port

TOOLS = {"create_session", "append", "context", "remember", "recall", "info", "forget",
         "list_sessions", "continue_session", "fork_session"}  # issue 30


@pytest.fixture
def cfg(tmp_path: Path, redis_url: str) -> Path:
    return isolated_config(tmp_path, redis_url)


@pytest.fixture
def cmem(cfg: Path) -> Iterator[SessionMemory]:
    """The library side: the same Redis prefix and archive the MCP server uses."""
    memory = SessionMemory.from_config(cfg)
    yield memory
    memory.close()


def hermes_redis_argv() -> list[str]:
    """The console script a user's MCP client runs (``python -m`` when it is not installed)."""
    script = Path(sys.executable).parent / "hermes-redis"
    found = str(script) if script.exists() else shutil.which("hermes-redis")
    return [found] if found else [sys.executable, "-m", "hermes_redis.cli"]


def stdio_server(cfg: Path, *args: str) -> StdioServerParameters:
    command, *rest = hermes_redis_argv()
    return StdioServerParameters(command=command, args=[*rest, "--config", str(cfg), "mcp", *args],
                                 env=dict(os.environ))


def run_client(server: Any, body: Callable[[Client], Awaitable[None]]) -> None:
    async def main() -> None:
        with anyio.fail_after(60):
            async with Client(server) as client:
                await body(client)

    anyio.run(main)


def ok(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, text_of(result)
    assert result.structured_content is not None
    return result.structured_content


def text_of(result: CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, TextContent))


def error_line(result: CallToolResult) -> str:
    """The tool error's message: one line, no traceback, with the tool's prefix taken off."""
    assert result.is_error, result
    text = text_of(result)
    assert "\n" not in text and "Traceback" not in text, text
    prefix = "Error executing tool "
    assert text.startswith(prefix), text
    return text.split(": ", 1)[1]


def other_users_session(cmem: SessionMemory) -> str:
    sid = cmem.create_session(user_id="bob")
    cmem.append(sid, "user", "bob's secret plan uses MySQL")
    return sid


# --- stdio -------------------------------------------------------------------------------------
def test_stdio_lists_the_tools_an_agent_can_act_on(cfg: Path) -> None:
    async def body(client: Client) -> None:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == TOOLS
        for tool in tools.values():
            assert tool.description and len(tool.description) > 40, tool.name
        append = tools["append"].input_schema
        assert append["required"] == ["session_id", "role", "content"]
        assert append["properties"]["role"]["enum"] == ["user", "assistant", "system", "tool"]
        assert set(tools["forget"].input_schema["properties"]) == {"session_id", "last", "keyword"}
        assert tools["context"].annotations and tools["context"].annotations.read_only_hint
        assert tools["forget"].annotations and tools["forget"].annotations.destructive_hint

    run_client(stdio_server(cfg), body)


def test_stdio_tools_act_on_the_library_state(cfg: Path, cmem: SessionMemory) -> None:
    seen: dict[str, Any] = {}

    async def body(client: Client) -> None:
        made = ok(await client.call_tool("create_session", {"user_id": "alice"}))
        sid = seen["sid"] = made["session_id"]
        assert cmem.info(sid).user_id == "alice"

        first = ok(await client.call_tool("append", {"session_id": sid, "role": "user",
                                                      "content": "帮我写一个 FastAPI 的 JWT 认证接口"}))
        reply = ok(await client.call_tool("append", {"session_id": sid, "role": "assistant",
                                                      "content": "好的：用 JWT，数据库用 MySQL。"}))
        stored = cmem.messages(sid)
        assert [(m.seq, m.role, m.token_count) for m in stored] == [
            (first["seq"], "user", first["token_count"]), (reply["seq"], "assistant", reply["token_count"])]
        assert [first["seq"], reply["seq"]] == [1, 2]
        assert first["token_count"] == cmem.tokenizer.count(stored[0].content)

        memory = ok(await client.call_tool("remember", {"text": "项目用 PostgreSQL", "session_id": sid}))
        assert memory["user_id"] == "alice"
        assert [m.content for m in cmem.memories("alice")] == ["项目用 PostgreSQL"]

        result = await client.call_tool("context", {"session_id": sid, "query": ""})
        got = ok(result)
        lib = cmem.context(sid, query="")
        assert got["tokens"] == lib.tokens and got["budget"] == lib.budget
        assert got["window"] == lib.window and got["usage"] == round(lib.usage, 4)
        assert got["chat"] == lib.as_chat()
        text = text_of(result)
        assert text.startswith("Token usage: ")
        assert "项目用 PostgreSQL" in text
        assert "[user #1] 帮我写一个 FastAPI 的 JWT 认证接口" in text
        assert "[assistant #2] 好的：用 JWT，数据库用 MySQL。" in text
        assert got["text"] in text

        small = ok(await client.call_tool("context", {"session_id": sid, "budget": 40}))
        assert small["budget"] == 40 and small["tokens"] <= 40

        hits = ok(await client.call_tool("recall", {"query": "FastAPI"}))["hits"]
        assert [(h["session_id"], h["seq"]) for h in hits] == [(sid, 1)]

        info = ok(await client.call_tool("info", {"session_id": sid}))
        assert (info["message_count"], info["total_tokens"]) == (2, cmem.info(sid).total_tokens)
        assert info["context"]["tokens"] == cmem.context(sid, query=None, touch=False).tokens
        assert "redis_url" not in info and "archive_path" not in info

        listed = ok(await client.call_tool("list_sessions", {"user_id": "alice"}))["sessions"]
        assert [s["session_id"] for s in listed] == [sid]

        forgot = ok(await client.call_tool("forget", {"session_id": sid, "keyword": "mysql"}))
        assert (forgot["forgotten"], forgot["message_count"]) == (1, 1)
        assert [m.role for m in cmem.messages(sid)] == ["user"]
        forgot = ok(await client.call_tool("forget", {"session_id": sid, "last": 1}))
        assert forgot["forgotten"] == 1 and cmem.messages(sid) == []

    run_client(stdio_server(cfg), body)
    assert cmem.info(seen["sid"]).message_count == 0


def test_stdio_bad_input_is_a_one_line_tool_error_and_changes_nothing(cfg: Path,
                                                                       cmem: SessionMemory) -> None:
    sid = cmem.create_session(user_id="alice")
    cmem.append(sid, "user", "keep me")
    before = (cmem.info(sid).message_count, cmem.info(sid).total_tokens, cmem.memories("alice"))
    missing = uuid.uuid4().hex

    async def body(client: Client) -> None:
        cases: list[tuple[str, dict[str, Any], str]] = [
            ("append", {"session_id": sid, "role": "robot", "content": "x"},
             "unknown role 'robot': use one of user, assistant, system, tool"),
            ("append", {"session_id": sid, "role": "user", "content": "   "},
             "content is empty: send at least one non-blank character"),
            ("append", {"session_id": missing, "role": "user", "content": "hello"},
             f"no session {missing}; list your sessions to find its id"),
            ("append", {"session_id": "../etc", "role": "user", "content": "hello"},
             "invalid session id '../etc': use 1-64 characters of letters, digits, '_' or '-'"),
            ("context", {"session_id": sid, "budget": 0},
             "budget must be a positive number of tokens, not 0"),
            ("forget", {"session_id": sid, "last": 1, "keyword": "keep"},
             "give exactly one of last (a number of turns) or keyword"),
            ("forget", {"session_id": sid}, "give exactly one of last (a number of turns) or keyword"),
            ("forget", {"session_id": sid, "last": 0}, "number of turns must be a positive integer, not 0"),
            ("remember", {"text": "no owner"}, "say whose memory this is: give user_id or session_id"),
            ("recall", {"query": "  "}, "search query is empty: give at least one word"),
            ("info", {"session_id": missing}, f"no session {missing}; list your sessions to find its id"),
        ]
        for tool, args, message in cases:
            assert error_line(await client.call_tool(tool, args)) == message, (tool, args)
        # The server keeps serving after errors.
        assert ok(await client.call_tool("info", {"session_id": sid}))["message_count"] == 1

    run_client(stdio_server(cfg), body)
    after = (cmem.info(sid).message_count, cmem.info(sid).total_tokens, cmem.memories("alice"))
    assert after == before
    assert [m.content for m in cmem.messages(sid)] == ["keep me"]


def test_stdio_user_scope_reports_another_users_session_as_missing(cfg: Path,
                                                                    cmem: SessionMemory) -> None:
    bob = other_users_session(cmem)
    mine = cmem.create_session(user_id="alice")
    missing = uuid.uuid4().hex

    async def body(client: Client) -> None:
        calls: list[tuple[str, dict[str, Any]]] = [
            ("append", {"role": "user", "content": "hi"}), ("context", {}), ("info", {}),
            ("forget", {"last": 1}), ("remember", {"text": "x"}),
        ]
        for tool, args in calls:
            theirs = error_line(await client.call_tool(tool, {"session_id": bob, **args}))
            absent = error_line(await client.call_tool(tool, {"session_id": missing, **args}))
            assert theirs == absent.replace(missing, bob), tool
            assert theirs.startswith(f"no session {bob}"), theirs
        listed = ok(await client.call_tool("list_sessions", {"status": "all"}))["sessions"]
        assert [s["session_id"] for s in listed] == [mine]
        assert ok(await client.call_tool("recall", {"query": "MySQL"}))["hits"] == []
        refused = error_line(await client.call_tool("create_session", {"user_id": "bob"}))
        assert refused == "this server is scoped to user 'alice': leave user_id out"
        made = ok(await client.call_tool("create_session", {}))
        assert made["user_id"] == "alice" and cmem.info(made["session_id"]).user_id == "alice"
        ok(await client.call_tool("append", {"session_id": mine, "role": "user", "content": "mine"}))

    run_client(stdio_server(cfg, "--user", "alice"), body)
    assert [m.content for m in cmem.messages(bob)] == ["bob's secret plan uses MySQL"]
    assert cmem.memories("bob") == [] and cmem.memories("alice") == []
    assert [m.content for m in cmem.messages(mine)] == ["mine"]


def test_mcp_command_with_a_broken_config_fails_in_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text("memory: [not, a, mapping\n", encoding="utf-8")
    proc = subprocess.run([*hermes_redis_argv(), "--config", str(broken), "mcp"], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL, check=False)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and str(broken) in lines[0], proc.stderr
    assert proc.stdout == ""  # stdout is the protocol channel: nothing else may be written there


def test_every_tool_is_documented_with_its_arguments(cfg: Path, cmem: SessionMemory) -> None:
    docs = (Path(__file__).parent.parent / "docs" / "mcp.md").read_text(encoding="utf-8")
    rows = {line.split("|")[1].strip(" `"): line for line in docs.splitlines()
            if line.startswith("| `")}
    tools = anyio.run(build_mcp(cmem).list_tools)
    assert {t.name for t in tools} == set(rows) == TOOLS
    for tool in tools:
        for arg in tool.input_schema["properties"]:
            assert f"`{arg}" in rows[tool.name], (tool.name, arg)


# --- streamable HTTP ---------------------------------------------------------------------------
@contextlib.contextmanager
def uvicorn_thread(app: Any) -> Iterator[str]:
    """``app`` served by uvicorn on a free loopback port; yields its base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


def user_from_test_header(request: Request | None) -> str | None:
    """Stands in for the HTTP server's auth, which maps the request's key to its user."""
    assert request is not None
    return request.headers.get("x-test-user")


def test_streamable_http_routed_at_mcp_scopes_each_request(cfg: Path, cmem: SessionMemory) -> None:
    bob = other_users_session(cmem)
    served = SessionMemory.from_config(cfg)
    mcp = mcp_asgi_app(served, user_id=user_from_test_header)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with mcp.lifespan():
            yield

    host_app = Starlette(routes=[Route("/mcp", endpoint=mcp)], lifespan=lifespan)

    def client_for(url: str, user: str | None) -> Any:
        headers = {"x-test-user": user} if user else {}
        return streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers, timeout=30))

    made: dict[str, str] = {}
    try:
        with uvicorn_thread(host_app) as base:
            async def as_alice(client: Client) -> None:
                assert {t.name for t in (await client.list_tools()).tools} == TOOLS
                sid = made["sid"] = ok(await client.call_tool("create_session", {}))["session_id"]
                got = ok(await client.call_tool("append", {"session_id": sid, "role": "user",
                                                           "content": "over HTTP"}))
                assert got["seq"] == 1
                theirs = error_line(await client.call_tool("context", {"session_id": bob}))
                assert theirs == f"no session {bob}; list your sessions to find its id"

            async def as_admin(client: Client) -> None:
                got = ok(await client.call_tool("context", {"session_id": bob, "query": ""}))
                assert "bob's secret plan" in got["text"]

            run_client(client_for(f"{base}/mcp", "alice"), as_alice)
            run_client(client_for(f"{base}/mcp", None), as_admin)

            # On loopback, a page on another origin (DNS rebinding) is refused by its Host.
            listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            accept = {"Accept": "application/json, text/event-stream"}
            direct = httpx2.post(f"{base}/mcp", headers=accept, json=listing)
            assert direct.status_code == 200 and "create_session" in direct.text, direct.text
            rebound = httpx2.post(f"{base}/mcp", headers={**accept, "Host": "evil.example:80"},
                                  json=listing)
            assert rebound.status_code == 421, rebound.text
    finally:
        served.close()
    assert cmem.info(made["sid"]).user_id == "alice"
    assert [m.content for m in cmem.messages(made["sid"])] == ["over HTTP"]
    assert [m.content for m in cmem.messages(bob)] == ["bob's secret plan uses MySQL"]


def test_streamable_http_app_serves_on_its_own(cfg: Path, cmem: SessionMemory) -> None:
    """As the top-level ASGI app (no host app), its own lifespan runs the session manager."""
    served = SessionMemory.from_config(cfg)
    sid = cmem.create_session(user_id="carol")
    try:
        with uvicorn_thread(mcp_asgi_app(served, user_id="carol")) as base:
            async def body(client: Client) -> None:
                info = ok(await client.call_tool("info", {"session_id": sid}))
                assert info["user_id"] == "carol" and info["message_count"] == 0
                empty = ok(await client.call_tool("context", {"session_id": sid}))
                assert (empty["text"], empty["tokens"]) == ("(empty: the session has no messages yet)", 0)

            run_client(f"{base}/mcp", body)
    finally:
        served.close()
