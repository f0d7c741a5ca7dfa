"""Issue 35, part 3: one depth limit (MAX_JSON_DEPTH nested objects and arrays) for ``item``
and ``tool_calls`` on every door. Deeper is a ValidationError (library), 422 (HTTP) or a
tool error (MCP), never a 500, never a traceback in the log; nothing is stored."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hermes_redis import SessionMemory
from hermes_redis.core.config import load as load_config
from hermes_redis.core.errors import ValidationError
from hermes_redis.core.models import MAX_JSON_DEPTH
from tests.http_server import ServeProcess, serve_config
from tests.redis_server import RedisServer


def nested(depth: int) -> Any:
    """``depth`` arrays inside each other around one object: {"type": "x"} at the bottom
    counts as one more level."""
    value: Any = {"type": "x"}
    for _ in range(depth - 1):
        value = [value]
    return value


def nested_text(depth: int) -> str:
    """The same as JSON text, built without recursion (json.dumps would overflow)."""
    return "[" * (depth - 1) + '{"type":"x"}' + "]" * (depth - 1)


# --- the library --------------------------------------------------------------------------
@pytest.mark.parametrize("field", ["item", "tool_calls"])
def test_the_library_refuses_past_the_limit_and_stores_at_it(mem: SessionMemory,
                                                            field: str) -> None:
    sid = mem.create_session("u")
    stored = mem.append(sid, "assistant", "ok", **{field: nested(MAX_JSON_DEPTH)})
    assert stored.seq == 1
    for deep in (nested(MAX_JSON_DEPTH + 1), nested(900), nested(5000),
                 nested_text(MAX_JSON_DEPTH + 1), nested_text(900), nested_text(100_000)):
        if field == "item" and isinstance(deep, str):
            continue  # an item string is a string: JSON text only for tool_calls
        with pytest.raises(ValidationError, match=f"{field} nests deeper than {MAX_JSON_DEPTH}"):
            mem.append(sid, "assistant", "deep", **{field: deep})
        with pytest.raises(ValidationError, match=r"messages\[1\]: .*nests deeper"):
            mem.append_many(sid, [{"role": "user", "content": "fine"},
                                  {"role": "assistant", "content": "deep", field: deep}])
    assert mem.info(sid).message_count == 1


# --- a real server ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer) -> Path:
    return serve_config(tmp_path_factory.mktemp("depth"), redis_server.url)


@pytest.fixture(scope="module")
def server(config_path: Path) -> Iterator[ServeProcess]:
    proc = ServeProcess(config_path).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def sid(config_path: Path) -> str:
    with SessionMemory(load_config(config_path)) as mem:
        return mem.create_session("default")


def post(client: httpx.Client, path: str, body: str) -> httpx.Response:
    return client.post(path, content=body.encode(), headers={"Content-Type": "application/json"})


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 900, 1000, 5000, 100_000])
def test_http_append_past_the_limit_is_422_with_no_traceback(server: ServeProcess, sid: str,
                                                           depth: int) -> None:
    deep = nested_text(depth)
    one_item = '{"role": "assistant", "content": "x", "item": ' + deep + "}"
    one_calls = '{"role": "assistant", "content": "x", "tool_calls": ' + deep + "}"
    batch = '{"messages": [{"role": "user", "content": "x"}, ' + one_calls + "]}"
    with httpx.Client(base_url=server.url, timeout=60) as client:
        before = client.get(f"/v1/sessions/{sid}").json()["message_count"]
        for body in (one_item, one_calls, batch):
            reply = post(client, f"/v1/sessions/{sid}/messages", body)
            assert reply.status_code == 422, (depth, reply.text[:300])
            assert "nests deeper than" in reply.json()["error"]["message"]
        assert client.get(f"/v1/sessions/{sid}").json()["message_count"] == before
    assert "Traceback" not in server.output() and "RecursionError" not in server.output()


def test_http_append_at_the_limit_is_stored(server: ServeProcess, sid: str) -> None:
    body = json.dumps({"role": "assistant", "content": "x", "item": nested(MAX_JSON_DEPTH),
                       "tool_calls": nested(MAX_JSON_DEPTH)})
    with httpx.Client(base_url=server.url, timeout=60) as client:
        reply = post(client, f"/v1/sessions/{sid}/messages", body)
        assert reply.status_code == 201, reply.text[:300]


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 1000, 100_000])
def test_mcp_with_deep_arguments_is_an_error_not_a_500(server: ServeProcess, sid: str,
                                                       depth: int) -> None:
    call = ('{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "append",'
            ' "arguments": {"session_id": "' + sid + '", "role": "user", "content": '
            + nested_text(depth) + "}}}")
    with httpx.Client(base_url=server.url, timeout=60) as client:
        reply = client.post("/mcp", content=call.encode(), headers={
            "Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
        assert reply.status_code < 500, reply.text[:300]
        text = reply.text
        if "data:" in text:
            text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
        answer = json.loads(text)
        assert "error" in answer or answer["result"].get("isError"), text[:300]
        assert client.get(f"/v1/sessions/{sid}/messages").status_code == 200
    assert "Traceback" not in server.output()
