"""The HTTP API over a real ``hermes-redis serve`` subprocess, a private redis-server and a
temp archive: every route, bad input, errors, metrics. No keys here (open, loopback-only
mode: the caller sees every user); tests/test_http_auth.py covers keys."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hermes_redis import SessionMemory
from hermes_redis.core import config as config_mod
from hermes_redis.core.models import new_message_id
from tests.http_server import ServeProcess, serve_config
from tests.redis_server import RedisServer

MAX_CONTENT = 4096


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer) -> Path:
    return serve_config(tmp_path_factory.mktemp("http"), redis_server.url,
                        limits={"max_content_bytes": MAX_CONTENT},
                        server={"max_body_bytes": 65536})


@pytest.fixture(scope="module")
def server(config_path: Path) -> Iterator[ServeProcess]:
    proc = ServeProcess(config_path).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def http(server: ServeProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


def new_session(http: httpx.Client, user: str = "alice", **body: object) -> str:
    r = http.post("/v1/sessions", json={"user_id": user, **body})
    assert r.status_code == 201, r.text
    return str(r.json()["session_id"])


def error_of(r: httpx.Response, status: int, code: str) -> str:
    """The error's message, after checking status, code and the one-line JSON shape."""
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    assert body["error"]["code"] == code, body
    message = str(body["error"]["message"])
    assert message and "\n" not in message and "Traceback" not in message
    return message


# --- the contract -------------------------------------------------------------------------------
def test_openapi_is_3_1_and_lists_every_route(http: httpx.Client) -> None:
    spec = http.get("/openapi.json").json()
    assert spec["openapi"].startswith("3.1")
    routes = {(m.upper(), p) for p, ops in spec["paths"].items() for m in ops}
    sid = "/v1/sessions/{session_id}"
    expected = {
        ("POST", "/v1/sessions"), ("GET", "/v1/sessions"), ("GET", sid), ("DELETE", sid),
        ("POST", f"{sid}/messages"), ("GET", f"{sid}/messages"), ("GET", f"{sid}/context"),
        ("POST", f"{sid}/forget"), ("POST", f"{sid}/clear"), ("POST", f"{sid}/archive"),
        ("POST", f"{sid}/restore"), ("POST", f"{sid}/compact"), ("POST", "/v1/memories"),
        ("GET", "/v1/memories"), ("DELETE", "/v1/memories/{memory_id}"), ("GET", "/v1/search"),
        ("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/metrics"),
    }
    assert expected <= routes, expected - routes
    docs = http.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()


def test_health_and_readiness(http: httpx.Client) -> None:
    assert http.get("/healthz").json() == {"status": "ok"}
    assert http.get("/readyz").json() == {"status": "ready"}


def test_serve_says_it_runs_without_auth_on_loopback(server: ServeProcess) -> None:
    out = server.output()
    assert "no API keys" in out and "loopback only" in out and f"127.0.0.1:{server.port}" in out


# --- sessions -----------------------------------------------------------------------------------
def test_create_session_answers_201_with_its_info(http: httpx.Client) -> None:
    r = http.post("/v1/sessions", json={"user_id": "carol", "title": "设计评审"})
    assert r.status_code == 201
    info = r.json()
    assert info["user_id"] == "carol" and info["title"] == "设计评审"
    assert info["status"] == "active" and info["message_count"] == 0
    assert http.get(f"/v1/sessions/{info['session_id']}").json()["session_id"] == info["session_id"]


def test_create_session_with_own_id_and_duplicate_is_refused(http: httpx.Client) -> None:
    sid = "own_" + new_message_id()[:12]
    assert new_session(http, session_id=sid) == sid
    message = error_of(http.post("/v1/sessions", json={"session_id": sid}), 422, "invalid")
    assert "already exists" in message


def test_default_user_without_keys(http: httpx.Client) -> None:
    r = http.post("/v1/sessions", json={})
    assert r.status_code == 201 and r.json()["user_id"] == "default"


def test_unknown_and_invalid_session_ids(http: httpx.Client) -> None:
    message = error_of(http.get("/v1/sessions/nosuchsession"), 404, "not_found")
    assert "no session nosuchsession" in message
    error_of(http.get("/v1/sessions/bad$id"), 422, "invalid")
    error_of(http.post("/v1/sessions/nosuchsession/messages",
                       json={"role": "user", "content": "hi"}), 404, "not_found")
    error_of(http.get("/v1/sessions/nosuchsession/context"), 404, "not_found")


def test_list_sessions_pages_with_a_cursor(http: httpx.Client) -> None:
    made = {new_session(http, user="pager") for _ in range(5)}
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, object] = {"user_id": "pager", "limit": 2}
        if cursor:
            params["cursor"] = cursor
        body = http.get("/v1/sessions", params=params).json()
        pages += 1
        assert len(body["sessions"]) <= 2
        seen += [s["session_id"] for s in body["sessions"]]
        cursor = body["next_cursor"]
        if not cursor:
            break
    assert pages == 3 and len(seen) == 5 and set(seen) == made
    error_of(http.get("/v1/sessions", params={"cursor": "not-a-cursor"}), 422, "invalid")
    error_of(http.get("/v1/sessions", params={"status": "gone"}), 422, "invalid")
    error_of(http.get("/v1/sessions", params={"limit": 0}), 422, "invalid")


def test_list_sessions_filters_by_status(http: httpx.Client) -> None:
    sid = new_session(http, user="lister")
    other = new_session(http, user="lister")
    assert http.post(f"/v1/sessions/{sid}/archive").status_code == 200
    active = {s["session_id"] for s in http.get(
        "/v1/sessions", params={"user_id": "lister"}).json()["sessions"]}
    archived = {s["session_id"] for s in http.get(
        "/v1/sessions", params={"user_id": "lister", "status": "archived"}).json()["sessions"]}
    every = {s["session_id"] for s in http.get(
        "/v1/sessions", params={"user_id": "lister", "status": "all"}).json()["sessions"]}
    assert active == {other} and archived == {sid} and every == {sid, other}


def test_delete_answers_204_and_the_session_stops_taking_messages(http: httpx.Client) -> None:
    sid = new_session(http)
    http.post(f"/v1/sessions/{sid}/messages", json={"role": "user", "content": "to be deleted"})
    r = http.delete(f"/v1/sessions/{sid}")
    assert r.status_code == 204 and r.content == b""
    assert http.get(f"/v1/sessions/{sid}").json()["status"] == "deleted"
    error_of(http.post(f"/v1/sessions/{sid}/messages", json={"role": "user", "content": "x"}),
             409, "conflict")


# --- messages -----------------------------------------------------------------------------------
def test_append_one_message(http: httpx.Client) -> None:
    sid = new_session(http)
    r = http.post(f"/v1/sessions/{sid}/messages",
                  json={"role": "user", "content": "帮我写一个 FastAPI 的用户认证接口",
                        "file_refs": ["app/auth.py"]})
    assert r.status_code == 201
    m = r.json()
    assert m["seq"] == 1 and m["token_count"] > 0 and m["file_refs"] == ["app/auth.py"]
    assert len(m["message_id"]) == 32


def test_every_reply_holds_each_value_exactly(http: httpx.Client) -> None:
    """Replies are rendered by orjson, which refuses integers over 64 bits: those replies go
    through json, so an item comes back as it was sent on every route that shows it."""
    sid = new_session(http)
    item = {"big": 2**70, "small": -(2**63), "text": "记住 é", "f": 0.1, "nested": [[], {}]}
    r = http.post(f"/v1/sessions/{sid}/messages", json={"role": "user", "content": "hi",
                                                        "item": item})
    assert r.status_code == 201 and r.json()["item"] == item
    assert http.get(f"/v1/sessions/{sid}/messages").json()["messages"][0]["item"] == item
    assert http.get(f"/v1/sessions/{sid}/context").json()["messages"][0]["item"] == item
    assert "记住 é" in r.text  # UTF-8, not \u escapes, as before


def test_append_a_turn_in_one_request_is_idempotent_by_message_id(http: httpx.Client) -> None:
    sid = new_session(http)
    turn = [{"role": "user", "content": "weather?", "message_id": new_message_id()},
            {"role": "assistant", "content": "calling", "message_id": new_message_id(),
             "tool_calls": [{"name": "weather", "arguments": {"city": "Paris"}}]},
            {"role": "tool", "content": "18C", "message_id": new_message_id()}]
    first = http.post(f"/v1/sessions/{sid}/messages", json={"messages": turn})
    assert first.status_code == 201
    stored = first.json()["messages"]
    assert [m["seq"] for m in stored] == [1, 2, 3]
    assert stored[1]["tool_calls"] == [{"name": "weather", "arguments": {"city": "Paris"}}]
    again = http.post(f"/v1/sessions/{sid}/messages", json={"messages": turn})
    assert again.status_code == 201
    assert [m["seq"] for m in again.json()["messages"]] == [1, 2, 3]
    assert http.get(f"/v1/sessions/{sid}").json()["message_count"] == 3


def test_list_messages_by_seq_range(http: httpx.Client) -> None:
    sid = new_session(http)
    http.post(f"/v1/sessions/{sid}/messages",
              json={"messages": [{"role": "user" if i % 2 == 0 else "assistant",
                                  "content": f"message {i}"} for i in range(7)]})
    everything = http.get(f"/v1/sessions/{sid}/messages").json()["messages"]
    assert [m["seq"] for m in everything] == list(range(1, 8))
    page = http.get(f"/v1/sessions/{sid}/messages", params={"after_seq": 3, "limit": 2}).json()
    assert [m["seq"] for m in page["messages"]] == [4, 5]
    assert [m["content"] for m in page["messages"]] == ["message 3", "message 4"]
    error_of(http.get(f"/v1/sessions/{sid}/messages", params={"after_seq": -1}), 422, "invalid")


def test_context_fits_the_budget_and_recalls_for_the_query(http: httpx.Client) -> None:
    sid = new_session(http)
    msgs = []
    for i in range(30):
        msgs.append({"role": "user", "content": f"question {i} " + "filler words " * 30})
        msgs.append({"role": "assistant", "content": f"answer {i} " + "more filler " * 30})
    msgs[10]["content"] = "we chose PostgreSQL over MySQL for the billing service"
    http.post(f"/v1/sessions/{sid}/messages", json={"messages": msgs})
    whole = http.get(f"/v1/sessions/{sid}/context").json()
    assert len(whole["messages"]) == 60 and whole["tokens"] <= whole["budget"]
    assert http.post(f"/v1/sessions/{sid}/compact").status_code == 200  # archived: recallable
    small = http.get(f"/v1/sessions/{sid}/context", params={"budget": 600,
                                                              "query": "PostgreSQL billing"}).json()
    assert small["budget"] == 600 and 0 < small["tokens"] <= 600
    assert len(small["messages"]) < 60
    assert any("PostgreSQL" in m["content"] for m in small["recalled"])
    assert set(small) >= {"messages", "summary", "recalled", "memories", "tokens", "budget",
                          "window", "usage"}
    error_of(http.get(f"/v1/sessions/{sid}/context", params={"budget": 0}), 422, "invalid")
    error_of(http.get(f"/v1/sessions/{sid}/context", params={"budget": "lots"}), 422, "invalid")


# --- changing a session -------------------------------------------------------------------------
def _chat(http: httpx.Client, sid: str, turns: int) -> None:
    msgs = []
    for i in range(turns):
        msgs += [{"role": "user", "content": f"turn {i} about MySQL" if i == 1 else f"turn {i}"},
                 {"role": "assistant", "content": f"reply {i}"}]
    assert http.post(f"/v1/sessions/{sid}/messages", json={"messages": msgs}).status_code == 201


def test_forget_last_turns_and_keyword(http: httpx.Client) -> None:
    sid = new_session(http)
    _chat(http, sid, 4)
    assert http.post(f"/v1/sessions/{sid}/forget", json={"last": 1}).json() == {"forgotten": 2}
    assert http.post(f"/v1/sessions/{sid}/forget", json={"keyword": "mysql"}).json() == {"forgotten": 1}
    contents = [m["content"] for m in http.get(f"/v1/sessions/{sid}/messages").json()["messages"]]
    assert contents == ["turn 0", "reply 0", "reply 1", "turn 2", "reply 2"]
    for body in ({}, {"last": 1, "keyword": "x"}):
        message = error_of(http.post(f"/v1/sessions/{sid}/forget", json=body), 422, "invalid")
        assert "exactly one" in message
    error_of(http.post(f"/v1/sessions/{sid}/forget", json={"last": 0}), 422, "invalid")
    error_of(http.post(f"/v1/sessions/{sid}/forget", json={"last": "two"}), 422, "invalid")
    assert http.get(f"/v1/sessions/{sid}").json()["message_count"] == 5


def test_clear_archive_restore_compact(http: httpx.Client) -> None:
    sid = new_session(http)
    _chat(http, sid, 30)
    compacted = http.post(f"/v1/sessions/{sid}/compact")
    assert compacted.status_code == 200
    body = compacted.json()
    assert body["compaction"] is not None and body["compaction"]["summarized_upto"] > 0
    assert body["summary"] and body["archived_count"] == 60

    archived = http.post(f"/v1/sessions/{sid}/archive").json()
    assert archived["status"] == "archived"
    error_of(http.get(f"/v1/sessions/{sid}/context"), 409, "conflict")
    error_of(http.post(f"/v1/sessions/{sid}/archive"), 409, "conflict")
    assert http.post(f"/v1/sessions/{sid}/restore").json()["status"] == "active"

    cleared = http.post(f"/v1/sessions/{sid}/clear").json()
    assert cleared["message_count"] == 60  # the archive keeps them
    ctx = http.get(f"/v1/sessions/{sid}/context").json()
    assert ctx["messages"] == [] and ctx["summary"] == ""


# --- memories and search ------------------------------------------------------------------------
def test_memories_add_list_query_delete(http: httpx.Client) -> None:
    sid = new_session(http, user="mona")
    r = http.post("/v1/memories", json={"user_id": "mona", "text": "项目用 PostgreSQL，不用 MySQL",
                                        "session_id": sid})
    assert r.status_code == 201
    memory_id = r.json()["memory_id"]
    http.post("/v1/memories", json={"user_id": "mona", "text": "prefers tabs"})
    listed = http.get("/v1/memories", params={"user_id": "mona"}).json()["memories"]
    assert [m["content"] for m in listed] == ["项目用 PostgreSQL，不用 MySQL", "prefers tabs"]
    found = http.get("/v1/memories", params={"user_id": "mona", "query": "tabs"}).json()["memories"]
    assert [m["content"] for m in found] == ["prefers tabs"]
    http.post(f"/v1/sessions/{sid}/messages", json={"role": "user", "content": "hello"})
    assert "项目用 PostgreSQL，不用 MySQL" in http.get(f"/v1/sessions/{sid}/context").json()["memories"]

    assert http.delete(f"/v1/memories/{memory_id}").status_code == 204
    after = http.get("/v1/memories", params={"user_id": "mona"}).json()["memories"]
    assert [m["content"] for m in after] == ["prefers tabs"]
    # the per-user cache in Redis was dropped: the context no longer carries it
    assert http.get(f"/v1/sessions/{sid}/context").json()["memories"] == ["prefers tabs"]
    error_of(http.delete(f"/v1/memories/{memory_id}"), 404, "not_found")
    error_of(http.post("/v1/memories", json={"text": "whose?"}), 422, "invalid")
    error_of(http.get("/v1/memories"), 422, "invalid")
    error_of(http.post("/v1/memories", json={"user_id": "mona", "text": "  "}), 422, "invalid")


def test_search_finds_hot_and_archived_messages(http: httpx.Client) -> None:
    sid = new_session(http, user="sam")
    http.post(f"/v1/sessions/{sid}/messages",
              json={"role": "user", "content": "how do JWT refresh tokens rotate"})
    hot = http.get("/v1/search", params={"q": "JWT refresh", "user_id": "sam"}).json()["hits"]
    assert [(h["session_id"], h["seq"]) for h in hot] == [(sid, 1)]
    http.post(f"/v1/sessions/{sid}/archive")  # flushes to the archive
    archived = http.get("/v1/search", params={"q": "JWT refresh", "user_id": "sam"}).json()["hits"]
    assert [(h["session_id"], h["seq"], h["tier"]) for h in archived] == [(sid, 1, "archive")]
    assert http.get("/v1/search", params={"q": "JWT", "user_id": "nobody"}).json()["hits"] == []
    error_of(http.get("/v1/search", params={"q": "  "}), 422, "invalid")
    assert "NUL" in error_of(http.get("/v1/search", params={"q": "a\x00b"}), 422, "invalid")
    error_of(http.get("/v1/search"), 422, "invalid")


# --- bad input: one clear line, the right status, nothing changed -------------------------------
def test_malformed_json_is_400(http: httpx.Client) -> None:
    sid = new_session(http)
    r = http.post(f"/v1/sessions/{sid}/messages", content=b'{"role": "user", "content":',
                  headers={"content-type": "application/json"})
    assert "not valid JSON" in error_of(r, 400, "malformed_json")
    assert http.get(f"/v1/sessions/{sid}").json()["message_count"] == 0


@pytest.mark.parametrize(("body", "words"), [
    ({"role": "user", "content": 42}, "content"),
    ({"role": "user"}, "content"),
    ({"role": "bot", "content": "hi"}, "unknown role 'bot'"),
    ({"role": "user", "content": "   "}, "content is empty"),
    ({"role": "user", "content": "hi", "colour": "red"}, "colour"),
    ({"role": "user", "content": "hi", "message_id": "xyz"}, "invalid message_id"),
    ({"role": "user", "content": "hi", "file_refs": "notalist"}, "file_refs"),
    ({"messages": [{"role": "user", "content": "ok"}, {"role": "user", "content": 5}]},
     "messages[1]: content must be text"),
    ({"messages": []}, "messages is empty"),
    ([1, 2], "body"),
])
def test_bad_messages_are_422_naming_the_problem(http: httpx.Client, body: object, words: str) -> None:
    sid = new_session(http)
    message = error_of(http.post(f"/v1/sessions/{sid}/messages", json=body), 422, "invalid")
    assert words in message
    assert http.get(f"/v1/sessions/{sid}").json()["message_count"] == 0


@pytest.mark.parametrize(("path", "raw", "words"), [
    ("/v1/sessions", b'{"title": "\\ud800"}', "title is not valid UTF-8"),
    ("/v1/sessions", b'{"user_id": "\\udfff"}', "user_id is not valid UTF-8"),
    ("messages", b'{"role": "user", "content": "\\ud800"}', "content is not valid UTF-8"),
    ("messages", b'{"role": "user", "content": "ok", "file_refs": ["\\ud800"]}', "file_refs[0]"),
    ("messages", b'{"role": "user", "content": "\xed\xa0\x80"}', "content is not valid UTF-8"),
    ("messages", b'{"role": "user", "content": "ok", "tool_calls": [NaN]}', "NaN is not a JSON number"),
    ("messages", b'{"role": "user", "content": "ok", "tool_calls": [1e400]}', "1e400 is out of range"),
    ("messages", b'{"role": "user", "content": "ok", "created_at": Infinity}', "Infinity"),
    ("/v1/memories", b'{"user_id": "u", "text": "\\ud800"}', "text is not valid UTF-8"),
])
def test_json_that_storage_cannot_hold_is_422_not_500(http: httpx.Client, path: str, raw: bytes,
                                                      words: str) -> None:
    sid = new_session(http)
    url = f"/v1/sessions/{sid}/messages" if path == "messages" else path
    r = http.post(url, content=raw, headers={"content-type": "application/json"})
    assert words in error_of(r, 422, "invalid")
    assert http.get(f"/v1/sessions/{sid}").json()["message_count"] == 0


def test_json_in_any_utf_is_read_as_json_reads_it(http: httpx.Client) -> None:
    """JSON over HTTP is UTF-8, but what Python's json accepts (a BOM, UTF-16) still is."""
    sid = new_session(http)
    for text in ("héllo ✓", "hello"):  # ASCII in UTF-16 is also valid UTF-8, with NULs
        body = json.dumps({"role": "user", "content": text}, ensure_ascii=False)
        for raw in (b"\xef\xbb\xbf" + body.encode(), body.encode("utf-16"),
                    body.encode("utf-16-le"), body.encode("utf-32-le")):
            r = http.post(f"/v1/sessions/{sid}/messages", content=raw,
                          headers={"content-type": "application/json"})
            assert r.status_code == 201, r.text
            assert r.json()["content"] == text


def test_a_missing_field_reads_as_a_sentence(http: httpx.Client) -> None:
    """Issue 45: "content is required: the text" said nothing of what to send."""
    sid = new_session(http)
    url = f"/v1/sessions/{sid}/messages"
    assert error_of(http.post(url, json={"role": "user"}), 422, "invalid") == (
        'content is required: the message text, as in {"role": "user", "content": "hello"}')
    assert error_of(http.post(url, json={"content": "hi"}), 422, "invalid").startswith(
        "role is required: who said it, one of ")


def test_numbers_past_sqlite_integers_are_422(http: httpx.Client) -> None:
    sid = new_session(http)
    r = http.get(f"/v1/sessions/{sid}/messages", params={"after_seq": 2**80})
    assert "after_seq" in error_of(r, 422, "invalid")


def test_oversized_content_is_413_and_stores_nothing(http: httpx.Client) -> None:
    sid = new_session(http)
    big = "x" * (MAX_CONTENT + 1)
    message = error_of(http.post(f"/v1/sessions/{sid}/messages", json={"role": "user", "content": big}),
                       413, "too_large")
    assert f"over the limit of {MAX_CONTENT}" in message and "limits.max_content_bytes" in message
    batch = {"messages": [{"role": "user", "content": "fine"}, {"role": "assistant", "content": big}]}
    assert "messages[1]" in error_of(http.post(f"/v1/sessions/{sid}/messages", json=batch),
                                     413, "too_large")
    # CJK: fewer characters than bytes; the byte count decides
    cjk = "字" * (MAX_CONTENT // 3 + 1)
    error_of(http.post(f"/v1/sessions/{sid}/messages", json={"role": "user", "content": cjk}),
             413, "too_large")
    assert http.get(f"/v1/sessions/{sid}").json()["message_count"] == 0
    ok = http.post(f"/v1/sessions/{sid}/messages", json={"role": "user", "content": "x" * MAX_CONTENT})
    assert ok.status_code == 201


def test_request_body_over_the_server_limit_is_413(http: httpx.Client) -> None:
    sid = new_session(http)
    body = json.dumps({"messages": [{"role": "user", "content": "y" * 4000}] * 20}).encode()
    assert len(body) > 65536
    r = http.post(f"/v1/sessions/{sid}/messages", content=body,
                  headers={"content-type": "application/json"})
    assert "server.max_body_bytes" in error_of(r, 413, "too_large")

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it streams
        for i in range(0, len(body), 8192):
            yield body[i : i + 8192]

    streamed = http.post(f"/v1/sessions/{sid}/messages", content=chunks(),
                         headers={"content-type": "application/json"})
    error_of(streamed, 413, "too_large")
    assert http.get(f"/v1/sessions/{sid}").json()["message_count"] == 0


def test_unknown_route_and_method_answer_json(http: httpx.Client) -> None:
    error_of(http.get("/v1/nothing-here"), 404, "not_found")
    error_of(http.put("/v1/sessions"), 405, "method_not_allowed")


# --- one state with the library, and metrics ----------------------------------------------------
def test_http_and_library_see_one_state(http: httpx.Client, config_path: Path) -> None:
    sid = new_session(http, user="shared")
    http.post(f"/v1/sessions/{sid}/messages", json={"role": "user", "content": "from HTTP"})
    with SessionMemory(config_mod.load(config_path)) as mem:
        assert [m.content for m in mem.messages(sid)] == ["from HTTP"]
        mem.append(sid, "assistant", "from the library")
    contents = [m["content"] for m in http.get(f"/v1/sessions/{sid}/messages").json()["messages"]]
    assert contents == ["from HTTP", "from the library"]


def _metric(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        if head.split("{")[0] != name:
            continue
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            return float(value)
    raise AssertionError(f"no {name} {labels} in /metrics")


def test_metrics_count_requests_per_route_template_and_the_backlog(http: httpx.Client) -> None:
    route = "/v1/sessions/{session_id}/messages"
    before = http.get("/metrics").text
    try:
        start = _metric(before, "hermes_http_requests_total", route=route, status="201")
    except AssertionError:
        start = 0.0
    sid = new_session(http, user="metered")
    for i in range(3):
        http.post(f"/v1/sessions/{sid}/messages", json={"role": "user", "content": f"m{i}"})
    text = http.get("/metrics").text
    assert _metric(text, "hermes_http_requests_total", route=route, status="201") == start + 3
    assert _metric(text, "hermes_http_request_duration_seconds_count", route=route) >= 3
    assert _metric(text, "hermes_http_request_duration_seconds_bucket", route=route, le="+Inf") >= 3
    assert sid not in text  # templates, not ids: bounded label values
    # no worker runs in these tests: what was appended waits in the hot tier
    assert _metric(text, "hermes_backlog_messages") >= 3
    assert _metric(text, "hermes_backlog_sessions") >= 1
    assert _metric(text, "hermes_oldest_unarchived_age_seconds") > 0
    assert _metric(text, "hermes_appended_messages_total") >= 3  # the library's own counters
    assert _metric(text, "hermes_failed_jobs") == 0


def test_two_workers_serve_one_state_and_sum_their_metrics(tmp_path: Path,
                                                           redis_server: RedisServer) -> None:
    proc = ServeProcess(serve_config(tmp_path, redis_server.url), "--workers", "2").start()
    try:
        with httpx.Client(base_url=proc.url, timeout=30) as c:
            sid = new_session(c, user="duo")
            for i in range(20):  # new connections: spread over both worker processes
                r = httpx.post(f"{proc.url}/v1/sessions/{sid}/messages",
                               json={"role": "user", "content": f"m{i}"})
                assert r.status_code == 201
            seqs = [m["seq"] for m in c.get(f"/v1/sessions/{sid}/messages").json()["messages"]]
            assert seqs == list(range(1, 21))
            text = c.get("/metrics").text
            route = "/v1/sessions/{session_id}/messages"
            assert _metric(text, "hermes_http_requests_total", route=route, status="201") == 20
        assert "2 workers" in proc.output()
    finally:
        proc.stop()
