"""Issue 35, part 5: no existence oracle. A user's API key choosing a session id learns
nothing of other users' ids: ``POST /v1/sessions {"session_id": X}`` answers alike whether
another user has X, had it (purged), or never had it, because a user key's chosen ids live
in that user's namespace (``scoped_session_id``). Admin keys keep ids exactly."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hermes_redis.core.models import scoped_session_id, user_namespace
from tests.http_server import ServeProcess, cli, serve_config
from tests.redis_server import RedisServer


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer) -> Path:
    return serve_config(tmp_path_factory.mktemp("oracle"), redis_server.url)


@pytest.fixture(scope="module")
def keys(config_path: Path) -> dict[str, str]:
    def make(*args: str) -> str:
        return str(json.loads(cli(config_path, "key", "create", *args, "--json").stdout)["key"])

    return {"alice": make("--user", "alice"), "bob": make("--user", "bob"), "admin": make("--admin")}


@pytest.fixture(scope="module")
def server(config_path: Path, keys: dict[str, str]) -> Iterator[ServeProcess]:
    proc = ServeProcess(config_path).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def as_(server: ServeProcess, keys: dict[str, str]) -> Iterator[dict[str, httpx.Client]]:
    clients = {who: httpx.Client(base_url=server.url, timeout=30,
                                 headers={"Authorization": f"Bearer {key}"})
               for who, key in keys.items()}
    yield clients
    for c in clients.values():
        c.close()


def shape(reply: httpx.Response, asked: str) -> tuple[int, Any]:
    """What the answer says, less what differs between any two creations (times, the id
    where it is the asked one in the caller's namespace)."""
    body = reply.json()
    if reply.status_code == 201:
        body = {k: v for k, v in body.items() if k not in ("created_at", "updated_at")}
        body["session_id"] = body["session_id"].replace(asked, "<asked>")
    return reply.status_code, body


def test_another_users_ids_answer_alike_exists_existed_or_never(
        as_: dict[str, httpx.Client]) -> None:
    alice, bob = as_["alice"], as_["bob"]
    made = alice.post("/v1/sessions", json={"session_id": "project-x"})
    assert made.status_code == 201
    gone = alice.post("/v1/sessions", json={"session_id": "project-y"}).json()["session_id"]
    assert alice.delete(f"/v1/sessions/{gone}", params={"purge": "true"}).status_code == 204
    answers = {name: shape(bob.post("/v1/sessions", json={"session_id": name}), name)
               for name in ("project-x", "project-y", "project-z")}  # has, had, never
    assert len({json.dumps(a, sort_keys=True) for a in answers.values()}) == 1, answers
    assert answers["project-x"][0] == 201
    # Alice's ids as the server returned them: Bob asking for them learns nothing either
    theirs = made.json()["session_id"]
    for name in (theirs, gone):
        reply = bob.post("/v1/sessions", json={"session_id": name})
        assert reply.status_code == 201, reply.text
        assert reply.json()["session_id"] == user_namespace("bob") + name
    assert bob.get(f"/v1/sessions/{theirs}").status_code == 404
    assert alice.get(f"/v1/sessions/{theirs}").json()["message_count"] == 0  # untouched


def test_a_users_own_ids_are_stable_and_its_own_duplicate_is_refused(
        as_: dict[str, httpx.Client]) -> None:
    alice = as_["alice"]
    sid = alice.post("/v1/sessions", json={"session_id": "notes"}).json()["session_id"]
    assert sid == scoped_session_id("alice", "notes") == user_namespace("alice") + "notes"
    for asked in ("notes", sid):  # the returned id names the same session
        again = alice.post("/v1/sessions", json={"session_id": asked})
        assert again.status_code == 422 and "already exists" in again.text
    too_long = alice.post("/v1/sessions", json={"session_id": "x" * 60})
    assert too_long.status_code == 422 and "at most 50" in too_long.text


def test_an_admin_key_keeps_the_id_it_chose(as_: dict[str, httpx.Client]) -> None:
    made = as_["admin"].post("/v1/sessions", json={"session_id": "ops-import-1",
                                                   "user_id": "carol"})
    assert made.status_code == 201 and made.json()["session_id"] == "ops-import-1"
