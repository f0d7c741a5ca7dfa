"""The fast append route (``FastAppend``, answered before FastAPI's stack) against the
FastAPI route it stands in for: the same status, bytes and headers for every kind of body,
with and without keys. The FastAPI route is reached by switching the fast path off."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from hermes_redis import SessionMemory
from hermes_redis.core import config as config_mod
from hermes_redis.server.app import create_app
from hermes_redis.store.api_keys import KeyStore
from tests.http_server import serve_config
from tests.redis_server import RedisServer

BODIES: list[bytes] = [
    b"not json",
    b"[1, 2]",
    b'{"role": "user"}',
    b'{"role": "user", "content": "x", "colour": "red"}',
    b'{"role": "wizard", "content": "x"}',
    b'{"role": "user", "content": "   "}',
    b'{"role": "user", "content": "x", "created_at": NaN}',
    b'{"role": "user", "content": "\\ud800"}',
    json.dumps({"role": "user", "content": "y" * 5000}).encode(),
    b'{"messages": [], "extra": 1}',
    b'{"messages": "no"}',
    json.dumps({"messages": [{"role": "user", "content": "y" * 5000}]}).encode(),
]


@pytest.fixture()
def mem(tmp_path: Path, redis_server: RedisServer) -> Iterator[SessionMemory]:
    path = serve_config(tmp_path, redis_server.url, limits={"max_content_bytes": 4096},
                        server={"max_body_bytes": 65536})
    memory = SessionMemory(config_mod.load(path))
    yield memory
    memory.close()


def pair(mem: SessionMemory, require_keys: bool = False) -> tuple[TestClient, TestClient]:
    fast = create_app(mem.config, mem=mem, require_keys=require_keys)
    slow = create_app(mem.config, mem=mem, require_keys=require_keys)
    slow.front = None  # type: ignore[attr-defined]
    # issue 35: the server answers loopback Host names only (TestClient's is "testserver")
    return TestClient(fast, base_url="http://127.0.0.1", raise_server_exceptions=False), \
        TestClient(slow, base_url="http://127.0.0.1", raise_server_exceptions=False)


def same(a: object, b: object) -> None:
    ra, rb = a, b
    assert (ra.status_code, ra.content, ra.headers.get("content-type")) == (  # type: ignore[attr-defined]
        rb.status_code, rb.content, rb.headers.get("content-type"))  # type: ignore[attr-defined]


def test_errors_are_the_same_bytes_on_both_paths(mem: SessionMemory) -> None:
    fast, slow = pair(mem)
    sid = mem.create_session("alice")
    headers = {"Content-Type": "application/json"}
    for body in BODIES:
        for path in (f"/v1/sessions/{sid}/messages", "/v1/sessions/nope/messages"):
            a = fast.post(path, content=body, headers=headers)
            b = slow.post(path, content=body, headers=headers)
            assert a.status_code >= 400, (body, a.text)
            same(a, b)
    too_big = b'{"role": "user", "content": "' + b"z" * 70000 + b'"}'
    same(fast.post(f"/v1/sessions/{sid}/messages", content=too_big),
         slow.post(f"/v1/sessions/{sid}/messages", content=too_big))


def test_a_stored_message_answers_alike_and_the_path_is_not_taken_for_other_methods(
        mem: SessionMemory) -> None:
    fast, slow = pair(mem)
    sid = mem.create_session("alice")
    a = fast.post(f"/v1/sessions/{sid}/messages", json={"role": "user", "content": "héllo"})
    b = slow.post(f"/v1/sessions/{sid}/messages", json={"role": "user", "content": "héllo"})
    assert a.status_code == b.status_code == 201
    assert a.headers["content-type"] == b.headers["content-type"] == "application/json"
    da, db = a.json(), b.json()
    assert set(da) == set(db) and da["seq"] + 1 == db["seq"] and da["content"] == "héllo"
    assert "héllo".encode() in a.content  # not \\u-escaped, as JSONResponse renders it
    batch = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}
    assert [m["seq"] for m in fast.post(f"/v1/sessions/{sid}/messages", json=batch)
            .json()["messages"]] == [3, 4]
    assert fast.get(f"/v1/sessions/{sid}/messages").json()["messages"][0]["content"] == "héllo"
    same(fast.post(f"/v1/sessions/{sid}/messages/"), slow.post(f"/v1/sessions/{sid}/messages/"))


def test_keys_are_checked_alike(mem: SessionMemory) -> None:
    fast, slow = pair(mem, require_keys=True)
    sid = mem.create_session("alice")
    bob = mem.create_session("bob")
    _, token = KeyStore(mem.cold).create("alice")
    body = {"role": "user", "content": "x"}
    for headers in ({}, {"Authorization": "Basic abc"}, {"Authorization": "Bearer wrong"}):
        same(fast.post(f"/v1/sessions/{sid}/messages", json=body, headers=headers),
             slow.post(f"/v1/sessions/{sid}/messages", json=body, headers=headers))
    auth = {"Authorization": f"Bearer {token}"}
    same(fast.post(f"/v1/sessions/{bob}/messages", json=body, headers=auth),
         slow.post(f"/v1/sessions/{bob}/messages", json=body, headers=auth))
    assert fast.post(f"/v1/sessions/{sid}/messages", json=body, headers=auth).status_code == 201
