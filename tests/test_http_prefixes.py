"""Session id prefixes over HTTP and MCP, against a real ``hermes-redis serve`` process: a
unique prefix of one of the caller's own sessions works wherever a session id does; an
ambiguous one is 409 ``ambiguous_id`` naming the caller's candidates only; a prefix only
another user's session has is the very 404 an unknown id gets; no error hint is a CLI command
(issue 34)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextContent

from tests.http_server import ServeProcess, cli, serve_config
from tests.redis_server import RedisServer

# Ids chosen by the admin key, so that prefixes are shared across users on purpose.
ALICE = {"one": "pfxsolo0a1", "twin1": "pfxtwin0a1", "twin2": "pfxtwin0a2", "mixed": "pfxmix0a1",
         "mcp": "pfxmcp0a1"}
BOB = {"theirs": "pfxbob0b1", "mixed1": "pfxmix0b1", "mixed2": "pfxmix0b2", "twin": "pfxtwin0b1"}


def make_key(config: Path, *args: str) -> str:
    return str(json.loads(cli(config, "key", "create", *args, "--json").stdout)["key"])


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory,
           redis_server: RedisServer) -> Iterator[tuple[ServeProcess, dict[str, str]]]:
    config = serve_config(tmp_path_factory.mktemp("prefixes"), redis_server.url)
    keys = {"alice": make_key(config, "--user", "alice"), "bob": make_key(config, "--user", "bob"),
            "admin": make_key(config, "--admin")}
    proc = ServeProcess(config).start()
    with httpx.Client(base_url=proc.url, timeout=30,
                      headers={"Authorization": f"Bearer {keys['admin']}"}) as admin:
        for user, sids in (("alice", ALICE), ("bob", BOB)):
            for sid in sids.values():
                made = admin.post("/v1/sessions", json={"user_id": user, "session_id": sid})
                assert made.status_code == 201, made.text
    yield proc, keys
    proc.stop()


def as_user(served: tuple[ServeProcess, dict[str, str]], who: str) -> httpx.Client:
    proc, keys = served
    return httpx.Client(base_url=proc.url, timeout=30,
                        headers={"Authorization": f"Bearer {keys[who]}"})


def error(reply: httpx.Response) -> tuple[int, str, str]:
    body = reply.json()["error"]
    return reply.status_code, body["code"], body["message"]


def test_a_unique_prefix_works_on_every_session_route(served: Any) -> None:
    sid, prefix = ALICE["one"], ALICE["one"][:7]
    with as_user(served, "alice") as alice:
        assert alice.get(f"/v1/sessions/{prefix}").json()["session_id"] == sid
        for path in ("/messages",):  # the fast append path (a user key resolves via its owner check)
            got = alice.post(f"/v1/sessions/{prefix}{path}", json={"role": "user", "content": "hi"})
            assert got.status_code == 201 and got.json()["session_id"] == sid, got.text
        batch = alice.post(f"/v1/sessions/{prefix}/messages",
                           json={"messages": [{"role": "assistant", "content": "hello"}]})
        assert [m["session_id"] for m in batch.json()["messages"]] == [sid]
        listed = alice.get(f"/v1/sessions/{prefix}/messages").json()["messages"]
        assert [m["content"] for m in listed] == ["hi", "hello"]
        assert alice.get(f"/v1/sessions/{prefix}/context").json()["session_id"] == sid
        mem = alice.post("/v1/memories", json={"text": "likes tea", "session_id": prefix})
        assert mem.status_code == 201 and mem.json()["session_id"] == sid, mem.text
        assert alice.post(f"/v1/sessions/{prefix}/forget", json={"last": 1}).json()["forgotten"] >= 1
        assert alice.post(f"/v1/sessions/{prefix}/archive").json()["status"] == "archived"
        assert alice.post(f"/v1/sessions/{prefix}/restore").json()["status"] == "active"
        assert alice.post(f"/v1/sessions/{prefix}/clear").json()["session_id"] == sid
        assert alice.post(f"/v1/sessions/{prefix}/compact").status_code == 200
        alice.post(f"/v1/sessions/{prefix}/messages", json={"role": "user", "content": "oops"})
        pop = alice.post(f"/v1/sessions/{prefix}/pop")
        assert pop.status_code == 200 and "oops" in pop.text, pop.text
        gone = alice.delete(f"/v1/sessions/{prefix}")
        assert gone.status_code == 204
        assert alice.get(f"/v1/sessions/{sid}").json()["status"] == "deleted"


def test_a_keyless_server_resolves_a_prefix_on_the_fast_append_path(
        tmp_path: Path, redis_server: RedisServer) -> None:
    proc = ServeProcess(serve_config(tmp_path, redis_server.url)).start()
    try:
        with httpx.Client(base_url=proc.url, timeout=30) as c:
            sids = [c.post("/v1/sessions", json={"session_id": s}).json()["session_id"]
                    for s in ("kless0one", "kless0two", "klessalone")]
            one = c.post("/v1/sessions/klessal/messages", json={"role": "user", "content": "x"})
            assert one.status_code == 201 and one.json()["session_id"] == "klessalone", one.text
            exact = c.post("/v1/sessions/kless0one/messages", json={"role": "user", "content": "y"})
            assert exact.status_code == 201 and exact.json()["session_id"] == "kless0one"
            status, code, message = error(c.post("/v1/sessions/kless0/messages",
                                                 json={"role": "user", "content": "z"}))
            assert (status, code) == (409, "ambiguous_id")
            assert sids[0] in message and sids[1] in message and "2 sessions" in message
            status, code, message = error(c.post("/v1/sessions/nope/messages",
                                                 json={"role": "user", "content": "z"}))
            assert (status, code) == (404, "not_found") and "hermes-redis" not in message
            counts = {s: c.get(f"/v1/sessions/{s}").json()["message_count"] for s in sids}
            assert counts == {"kless0one": 1, "kless0two": 0, "klessalone": 1}
    finally:
        proc.stop()


def test_an_ambiguous_prefix_is_409_with_the_callers_candidates_only(served: Any) -> None:
    with as_user(served, "alice") as alice:
        status, code, message = error(alice.get("/v1/sessions/pfxtwin"))
        assert (status, code) == (409, "ambiguous_id"), message
        assert ALICE["twin1"] in message and ALICE["twin2"] in message
        assert BOB["twin"] not in message and "2 sessions" in message  # bob's is not counted
        appended = error(alice.post("/v1/sessions/pfxtwin/messages",
                                    json={"role": "user", "content": "x"}))
        assert appended[:2] == (409, "ambiguous_id")
        # bob's two "pfxmix0b" sessions do not make alice's "pfxmix" ambiguous
        assert alice.get("/v1/sessions/pfxmix").json()["session_id"] == ALICE["mixed"]
    with as_user(served, "admin") as admin:  # an admin key sees every user's
        status, code, message = error(admin.get("/v1/sessions/pfxmix"))
        assert (status, code) == (409, "ambiguous_id") and "3 sessions" in message
    with as_user(served, "bob") as bob:
        assert bob.get("/v1/sessions/pfxtwin").json()["session_id"] == BOB["twin"]


def test_another_users_prefix_is_the_same_404_as_an_unknown_one(served: Any) -> None:
    with as_user(served, "alice") as alice:
        for theirs, unknown in ((BOB["theirs"][:6], "pfxzzz"), (BOB["theirs"], "pfxbob0zz")):
            got, absent = alice.get(f"/v1/sessions/{theirs}"), alice.get(f"/v1/sessions/{unknown}")
            assert got.status_code == absent.status_code == 404
            assert got.json()["error"]["message"] == \
                absent.json()["error"]["message"].replace(unknown, theirs)
            assert "hermes-redis" not in got.text and "list your sessions" in got.text
            wrote = alice.post(f"/v1/sessions/{theirs}/messages",
                               json={"role": "user", "content": "intrusion"})
            assert wrote.status_code == 404 and wrote.json() == got.json()
    with as_user(served, "bob") as bob:  # nothing of bob's changed
        assert bob.get(f"/v1/sessions/{BOB['theirs']}").json()["message_count"] == 0


def call(served: Any, who: str, tool: str, args: dict[str, Any]) -> CallToolResult:
    proc, keys = served
    out: list[CallToolResult] = []

    async def main() -> None:
        client = httpx2.AsyncClient(headers={"Authorization": f"Bearer {keys[who]}"}, timeout=30)
        with anyio.fail_after(60):
            async with Client(streamable_http_client(proc.url + "/mcp", http_client=client)) as c:
                out.append(await c.call_tool(tool, args))

    anyio.run(main)
    return out[0]


def text(result: CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, TextContent))


def test_mcp_tools_take_a_prefix_among_the_callers_sessions(served: Any) -> None:
    sid = ALICE["mcp"]
    got = call(served, "alice", "info", {"session_id": sid[:7]})
    assert not got.is_error and got.structured_content is not None, text(got)
    assert got.structured_content["session_id"] == sid
    ctx = call(served, "alice", "context", {"session_id": sid[:7]})
    assert ctx.structured_content is not None and ctx.structured_content["session_id"] == sid
    twin = call(served, "alice", "info", {"session_id": "pfxtwin"})
    assert twin.is_error and "2 sessions" in text(twin) and BOB["twin"] not in text(twin)
    theirs = call(served, "alice", "append", {"session_id": BOB["theirs"][:6], "role": "user",
                                              "content": "intrusion"})
    absent = call(served, "alice", "append", {"session_id": "pfxzzz", "role": "user",
                                              "content": "intrusion"})
    assert theirs.is_error and absent.is_error
    assert text(theirs) == text(absent).replace("pfxzzz", BOB["theirs"][:6])
    assert "hermes-redis" not in text(theirs), text(theirs)
