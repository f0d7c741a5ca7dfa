"""API keys over a real server: no key, wrong key, another user's key (404), admin, revoked
key (401); the key CLI; only hashes stored; keys never in logs or errors; no keys means
loopback only."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from hermes_redis.core.config import load as load_config
from hermes_redis.server.auth import KEY_CACHE_SECONDS
from tests.helpers import archive_dump, archive_query
from tests.http_server import ServeProcess, cli, serve_config
from tests.redis_server import RedisServer


def within_key_cache(request: Callable[[], httpx.Response]) -> tuple[int, str]:
    """``code(request())`` once a key change has reached the server: a checked key (or "no
    keys exist") is trusted for KEY_CACHE_SECONDS, then asked again."""
    deadline = time.monotonic() + KEY_CACHE_SECONDS + 0.5
    while True:
        reply = request()
        if reply.status_code == 401 or time.monotonic() > deadline:
            return code(reply)
        time.sleep(0.05)


def make_key(config: Path, *args: str) -> dict[str, str]:
    out = cli(config, "key", "create", *args, "--json")
    return dict(json.loads(out.stdout))


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer) -> Path:
    return serve_config(tmp_path_factory.mktemp("auth"), redis_server.url)


@pytest.fixture(scope="module")
def keys(config_path: Path) -> dict[str, dict[str, str]]:
    return {"alice": make_key(config_path, "--user", "alice"),
            "bob": make_key(config_path, "--user", "bob"),
            "admin": make_key(config_path, "--admin"),
            "doomed": make_key(config_path, "--user", "bob")}


@pytest.fixture(scope="module")
def server(config_path: Path, keys: dict[str, dict[str, str]]) -> Iterator[ServeProcess]:
    # 0.0.0.0 is allowed once keys exist; requests still go to 127.0.0.1
    proc = ServeProcess(config_path, "--host", "0.0.0.0").start()
    yield proc
    proc.stop()


def client(server: ServeProcess, token: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=server.url, headers=headers, timeout=30)


@pytest.fixture(scope="module")
def alice(server: ServeProcess, keys: dict[str, dict[str, str]]) -> Iterator[httpx.Client]:
    with client(server, keys["alice"]["key"]) as c:
        yield c


@pytest.fixture(scope="module")
def bob(server: ServeProcess, keys: dict[str, dict[str, str]]) -> Iterator[httpx.Client]:
    with client(server, keys["bob"]["key"]) as c:
        yield c


@pytest.fixture(scope="module")
def admin(server: ServeProcess, keys: dict[str, dict[str, str]]) -> Iterator[httpx.Client]:
    with client(server, keys["admin"]["key"]) as c:
        yield c


@pytest.fixture(scope="module")
def alice_session(alice: httpx.Client) -> str:
    r = alice.post("/v1/sessions", json={"title": "alice's secret plans"})
    assert r.status_code == 201
    sid = str(r.json()["session_id"])
    assert alice.post(f"/v1/sessions/{sid}/messages",
                      json={"role": "user", "content": "the zebra password is hunter2"}).status_code == 201
    return sid


def code(r: httpx.Response) -> tuple[int, str]:
    return r.status_code, str(r.json()["error"]["code"])


def test_no_key_is_401_on_every_v1_route(server: ServeProcess, alice_session: str) -> None:
    with client(server, None) as anon:
        for method, path in [("GET", "/v1/sessions"), ("POST", "/v1/sessions"),
                             ("GET", f"/v1/sessions/{alice_session}"),
                             ("GET", f"/v1/sessions/{alice_session}/context"),
                             ("GET", "/v1/search?q=zebra"), ("GET", "/v1/memories")]:
            r = anon.request(method, path, json={} if method == "POST" else None)
            assert code(r) == (401, "unauthorized"), (method, path, r.text)
            assert "Authorization: Bearer" in r.json()["error"]["message"]
        assert anon.get("/healthz").status_code == 200
        assert anon.get("/openapi.json").status_code == 200


def test_wrong_or_malformed_key_is_401_and_never_echoed(server: ServeProcess,
                                                        keys: dict[str, dict[str, str]]) -> None:
    real = keys["alice"]["key"]
    for header in [f"Bearer {real}x", "Bearer hrk_000000000000_guess", f"Basic {real}", "Bearer"]:
        r = httpx.get(server.url + "/v1/sessions", headers={"Authorization": header})
        assert code(r) == (401, "unauthorized"), header
        assert real not in r.text and "guess" not in r.text


def test_a_user_key_acts_for_its_own_user(alice: httpx.Client, alice_session: str) -> None:
    info = alice.get(f"/v1/sessions/{alice_session}").json()
    assert info["user_id"] == "alice"
    listed = alice.get("/v1/sessions").json()["sessions"]
    assert {s["user_id"] for s in listed} == {"alice"}
    assert code(alice.post("/v1/sessions", json={"user_id": "bob"})) == (403, "forbidden")
    assert code(alice.get("/v1/sessions", params={"user_id": "bob"})) == (403, "forbidden")
    assert code(alice.get("/v1/search", params={"q": "x", "user_id": "bob"})) == (403, "forbidden")


def test_another_users_session_answers_404_like_an_unknown_one(bob: httpx.Client,
                                                               alice_session: str) -> None:
    unknown = bob.get("/v1/sessions/0000000000deadbeef")
    assert code(unknown) == (404, "not_found")
    sid = alice_session
    calls = [("GET", f"/v1/sessions/{sid}", None),
             ("DELETE", f"/v1/sessions/{sid}", None),
             ("POST", f"/v1/sessions/{sid}/messages", {"role": "user", "content": "intrusion"}),
             ("GET", f"/v1/sessions/{sid}/messages", None),
             ("GET", f"/v1/sessions/{sid}/context", None),
             ("POST", f"/v1/sessions/{sid}/forget", {"last": 1}),
             ("POST", f"/v1/sessions/{sid}/clear", None),
             ("POST", f"/v1/sessions/{sid}/archive", None),
             ("POST", f"/v1/sessions/{sid}/restore", None),
             ("POST", f"/v1/sessions/{sid}/compact", None),
             ("POST", "/v1/memories", {"text": "mine now", "session_id": sid})]
    for method, path, body in calls:
        r = bob.request(method, path, json=body)
        assert code(r) == (404, "not_found"), (method, path, r.text)
        assert r.json()["error"]["message"] == f"no session {sid}; list your sessions to find its id"
        assert "alice" not in r.text
    # nothing bob did changed alice's session
    assert bob.get("/v1/sessions").json()["sessions"] == [] or all(
        s["session_id"] != sid for s in bob.get("/v1/sessions").json()["sessions"])
    assert bob.get("/v1/search", params={"q": "zebra"}).json()["hits"] == []


def test_memories_are_scoped_to_the_keys_user(alice: httpx.Client, bob: httpx.Client) -> None:
    r = alice.post("/v1/memories", json={"text": "alice likes green"})
    assert r.status_code == 201 and r.json()["user_id"] == "alice"
    memory_id = r.json()["memory_id"]
    assert code(bob.get("/v1/memories", params={"user_id": "alice"})) == (403, "forbidden")
    assert code(bob.post("/v1/memories", json={"user_id": "alice", "text": "x"})) == (403, "forbidden")
    assert bob.get("/v1/memories").json()["memories"] == []
    assert code(bob.delete(f"/v1/memories/{memory_id}")) == (404, "not_found")
    assert [m["content"] for m in alice.get("/v1/memories").json()["memories"]] == ["alice likes green"]
    assert alice.delete(f"/v1/memories/{memory_id}").status_code == 204


def test_admin_sees_every_user(admin: httpx.Client, bob: httpx.Client, alice_session: str) -> None:
    bob_sid = bob.post("/v1/sessions", json={}).json()["session_id"]
    users = {s["user_id"] for s in admin.get("/v1/sessions").json()["sessions"]}
    assert {"alice", "bob"} <= users
    assert admin.get(f"/v1/sessions/{alice_session}").json()["user_id"] == "alice"
    assert admin.get(f"/v1/sessions/{bob_sid}").status_code == 200
    hits = admin.get("/v1/search", params={"q": "zebra"}).json()["hits"]
    assert [h["session_id"] for h in hits] == [alice_session]
    assert admin.post("/v1/memories", json={"user_id": "bob", "text": "by admin"}).status_code == 201
    assert [m["content"] for m in bob.get("/v1/memories").json()["memories"]] == ["by admin"]


def test_a_revoked_key_is_401_within_a_second(server: ServeProcess, config_path: Path,
                                              keys: dict[str, dict[str, str]]) -> None:
    doomed = keys["doomed"]
    with client(server, doomed["key"]) as c:
        assert c.get("/v1/sessions").status_code == 200
        out = cli(config_path, "key", "revoke", doomed["key_id"])
        revoked = time.monotonic()
        assert f"Revoked key {doomed['key_id']}" in out.stdout
        assert within_key_cache(lambda: c.get("/v1/sessions")) == (401, "unauthorized")
        assert time.monotonic() - revoked <= KEY_CACHE_SECONDS + 0.5
        time.sleep(KEY_CACHE_SECONDS)  # and it stays refused: a bad key is never trusted
        assert code(c.get("/v1/sessions")) == (401, "unauthorized")
    again = cli(config_path, "key", "revoke", doomed["key_id"], check=False)
    assert again.returncode != 0 and "no active key" in again.stderr


def test_key_list_and_storage_show_no_secret(config_path: Path, keys: dict[str, dict[str, str]],
                                             server: ServeProcess) -> None:
    listed = json.loads(cli(config_path, "key", "list", "--json").stdout)
    assert {k["key_id"] for k in listed} >= {k["key_id"] for k in keys.values()}
    text = cli(config_path, "key", "list").stdout
    assert "(admin)" in text and "alice" in text
    cfg = load_config(config_path)
    dump = archive_dump(cfg)
    rows = archive_query(cfg, "SELECT key_hash FROM api_keys")
    for k in keys.values():
        assert k["key"] not in dump and k["key"] not in text and k["key"] not in json.dumps(listed)
        assert (hashlib.sha256(k["key"].encode()).hexdigest(),) in rows
    log = server.output()
    assert log and all(k["key"] not in log for k in keys.values())


def test_key_create_needs_exactly_one_of_user_or_admin(config_path: Path) -> None:
    for args in ([], ["--user", "a", "--admin"]):
        out = cli(config_path, "key", "create", *args, check=False)
        assert out.returncode == 2 and "exactly one of --user U or --admin" in out.stderr
    plain = cli(config_path, "key", "create", "--user", "carol")
    assert "shown only now" in plain.stdout and plain.stdout.strip().splitlines()[-1].startswith("hrk_")


def test_no_keys_means_loopback_only(tmp_path: Path, redis_server: RedisServer) -> None:
    config = serve_config(tmp_path, redis_server.url)
    out = cli(config, "serve", "--host", "0.0.0.0", "--port", "1", check=False, timeout=60)
    assert out.returncode != 0
    assert "refusing to listen on 0.0.0.0 with no API keys" in out.stderr
    assert "Traceback" not in out.stderr


def test_several_workers_need_the_redis_backend(tmp_path: Path, redis_server: RedisServer) -> None:
    config = serve_config(tmp_path, redis_server.url, memory={"session": {"backend": "memory"}})
    out = cli(config, "serve", "--workers", "2", "--port", "1", check=False, timeout=60)
    assert out.returncode == 2 and "needs memory.session.backend: redis" in out.stderr


def test_a_public_server_stays_closed_when_every_key_is_revoked(tmp_path: Path,
                                                                redis_server: RedisServer) -> None:
    config = serve_config(tmp_path, redis_server.url)
    only = make_key(config, "--admin")
    proc = ServeProcess(config, "--host", "0.0.0.0").start()
    try:
        cli(config, "key", "revoke", only["key_id"])
        r = httpx.get(proc.url + "/v1/sessions")
        assert code(r) == (401, "unauthorized")
    finally:
        proc.stop()


def test_a_loopback_server_turns_auth_on_when_a_key_appears(tmp_path: Path,
                                                            redis_server: RedisServer) -> None:
    config = serve_config(tmp_path, redis_server.url)
    proc = ServeProcess(config).start()
    try:
        assert httpx.get(proc.url + "/v1/sessions").status_code == 200
        key = make_key(config, "--user", "dora")
        assert within_key_cache(lambda: httpx.get(proc.url + "/v1/sessions")) == \
            (401, "unauthorized")
        r = httpx.get(proc.url + "/v1/sessions", headers={"Authorization": f"Bearer {key['key']}"})
        assert r.status_code == 200
    finally:
        proc.stop()


def mcp_call(c: httpx.Client, tool: str, args: dict[str, object]) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": tool, "arguments": args}}
    return c.post("/mcp", json=body, headers={"Accept": "application/json, text/event-stream"})


def test_mcp_at_slash_mcp_takes_the_same_keys_and_scopes(server: ServeProcess, alice: httpx.Client,
                                                        bob: httpx.Client, admin: httpx.Client,
                                                        alice_session: str) -> None:
    with client(server, None) as anonymous:
        r = mcp_call(anonymous, "info", {"session_id": alice_session})
        assert code(r) == (401, "unauthorized")
    with client(server, "hr_not_a_key") as wrong:
        assert code(mcp_call(wrong, "info", {"session_id": alice_session}))[0] == 401
    mine = mcp_call(alice, "context", {"session_id": alice_session, "query": ""})
    assert mine.status_code == 200 and "zebra password" in mine.text, mine.text
    theirs = mcp_call(bob, "context", {"session_id": alice_session, "query": ""}).json()
    assert theirs["result"]["isError"] is True
    assert f"no session {alice_session}" in theirs["result"]["content"][0]["text"]
    assert "zebra" not in json.dumps(theirs)
    everyone = mcp_call(admin, "context", {"session_id": alice_session, "query": ""})
    assert "zebra password" in everyone.text


def test_a_checked_key_is_trusted_for_the_cache_time_only() -> None:
    """Auth asks the archive once per key per KEY_CACHE_SECONDS; a bad key every time."""
    from hermes_redis.server.auth import Auth
    from hermes_redis.server.errors import ApiError
    from hermes_redis.store.api_keys import ApiKey

    class Keys:
        def __init__(self) -> None:
            self.asked, self.valid = 0, {"hrk_good"}

        def check(self, token: str) -> ApiKey | None:
            self.asked += 1
            return ApiKey("k1", "alice", 0.0) if token in self.valid else None

        def active(self) -> int:
            self.asked += 1
            return len(self.valid)

    keys = Keys()
    auth = Auth(keys, require_keys=False, ttl=0.2)  # type: ignore[arg-type]
    assert auth.principal("Bearer hrk_good").user_id == "alice"
    assert auth.principal("Bearer hrk_good").user_id == "alice"
    assert keys.asked == 1
    keys.valid.clear()  # revoked: still trusted until the cache time is up, then refused
    assert auth.principal("Bearer hrk_good").user_id == "alice"
    time.sleep(0.25)
    for _ in range(2):
        with pytest.raises(ApiError) as err:
            auth.principal("Bearer hrk_good")
        assert err.value.status == 401 and "hrk_good" not in err.value.message
    assert keys.asked == 3
    assert auth.principal(None).user_id is None  # no keys left: open (loopback), cached too
    assert auth.principal(None).user_id is None and keys.asked == 4
