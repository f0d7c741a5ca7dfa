"""Faults under the HTTP API: the server SIGKILLed in the middle of a stream of appends
loses no acknowledged append; Redis going away answers 503 (never 500) and the server
recovers when it is back."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hermes_redis.core.models import new_message_id
from tests.http_server import ServeProcess, serve_config
from tests.redis_server import RedisServer


def all_messages(url: str, sid: str) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    after = 0
    while True:
        page = httpx.get(f"{url}/v1/sessions/{sid}/messages",
                         params={"after_seq": after, "limit": 1000}, timeout=30).json()["messages"]
        out += page
        if len(page) < 1000:
            return out
        after = int(page[-1]["seq"])  # type: ignore[call-overload]


def test_sigkill_mid_stream_loses_no_acknowledged_append(tmp_path: Path,
                                                         redis_server: RedisServer) -> None:
    server = ServeProcess(serve_config(tmp_path, redis_server.url)).start()
    sids = [httpx.post(server.url + "/v1/sessions", json={"user_id": "fault"}).json()["session_id"]
            for _ in range(2)]
    acked: dict[str, str] = {}  # message_id -> session
    lock = threading.Lock()
    stop = threading.Event()

    def writer(n: int) -> None:
        sid = sids[n % 2]
        with httpx.Client(base_url=server.url, timeout=10) as c:
            i = 0
            while not stop.is_set():
                mid = new_message_id()
                body = ({"role": "user", "content": f"w{n} m{i}", "message_id": mid} if i % 3
                        else {"messages": [{"role": "user", "content": f"w{n} q{i}"},
                                           {"role": "assistant", "content": f"w{n} a{i}",
                                            "message_id": mid}]})
                try:
                    r = c.post(f"/v1/sessions/{sid}/messages", json=body)
                except httpx.HTTPError:
                    return  # the server is gone: this one was never acknowledged
                if r.status_code == 201:
                    with lock:
                        acked[mid] = sid
                i += 1

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    while len(acked) < 150 and time.monotonic() < deadline:
        time.sleep(0.02)
    server.kill()  # SIGKILL while the writers are mid-request
    stop.set()
    for t in threads:
        t.join(15)
    assert len(acked) >= 150, "the writers never got going"

    server.start()
    try:
        for sid in sids:
            stored = all_messages(server.url, sid)
            ids = {str(m["message_id"]) for m in stored}
            mine = {mid for mid, s in acked.items() if s == sid}
            assert mine <= ids, f"{len(mine - ids)} acknowledged appends lost"
            seqs = [int(m["seq"]) for m in stored]  # type: ignore[call-overload]
            assert seqs == sorted(set(seqs))  # no seq shared, none reordered
            info = httpx.get(f"{server.url}/v1/sessions/{sid}").json()
            assert info["message_count"] == len(stored)  # counters are true
            assert info["total_tokens"] == sum(int(m["token_count"]) for m in stored)  # type: ignore[call-overload]
    finally:
        server.stop()


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.cleanup()


def test_redis_outage_answers_503_then_recovers(tmp_path: Path, own_redis: RedisServer) -> None:
    server = ServeProcess(serve_config(tmp_path, own_redis.url, redis={"retries": 0,
                                                                       "socket_timeout": 2})).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as c:
            sid = c.post("/v1/sessions", json={}).json()["session_id"]
            assert c.post(f"/v1/sessions/{sid}/messages",
                          json={"role": "user", "content": "before"}).status_code == 201
            own_redis.stop()
            for r in (c.post(f"/v1/sessions/{sid}/messages", json={"role": "user", "content": "during"}),
                      c.get(f"/v1/sessions/{sid}/context"), c.get("/readyz")):
                assert r.status_code == 503, r.text
                assert r.json()["error"]["code"] == "unavailable"
                assert "Redis" in r.json()["error"]["message"]
            assert c.get("/healthz").status_code == 200
            own_redis.start()
            deadline = time.monotonic() + 10
            while c.get("/readyz").status_code != 200 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert c.post(f"/v1/sessions/{sid}/messages",
                          json={"role": "user", "content": "after"}).status_code == 201
            contents = [m["content"] for m in c.get(f"/v1/sessions/{sid}/messages").json()["messages"]]
            assert contents == ["before", "after"]
        assert "Traceback" not in server.output()
    finally:
        server.stop()
