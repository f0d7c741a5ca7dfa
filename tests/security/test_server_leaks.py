"""Issue 35, finding 7: the small leaks of ``hermes-redis serve``.

- an unauthenticated ``/readyz`` named the Redis URL when Redis was down;
- ``{"last": true}`` in forget was taken as 1 (and forgot a turn);
- idle and slow-header connections were never reaped.
All against a real server process.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.http_server import ServeProcess, serve_config
from tests.redis_server import RedisServer

HEADER_TIMEOUT = 1.0
KEEP_ALIVE = 1.0
SLACK = 1.5  # scheduling on a loaded machine


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory,
           redis_server: RedisServer) -> Iterator[ServeProcess]:
    path = serve_config(tmp_path_factory.mktemp("leaks"), redis_server.url,
                        server={"header_timeout": HEADER_TIMEOUT,
                                "keep_alive_timeout": KEEP_ALIVE})
    proc = ServeProcess(path).start()
    yield proc
    proc.stop()


def test_readyz_names_no_address_when_redis_is_down(tmp_path: Path) -> None:
    redis = RedisServer().start()
    path = serve_config(tmp_path, redis.url)
    proc = ServeProcess(path).start()
    try:
        assert httpx.get(proc.url + "/readyz", timeout=30).status_code == 200
        redis.stop(kill=True)
        r = httpx.get(proc.url + "/readyz", timeout=30)
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "unavailable"
        assert "redis://" not in r.text and str(redis.port) not in r.text, r.text
        assert "127.0.0.1" not in r.text, r.text
        assert "not ready" in proc.output()  # the reason is in the log, for the operator
    finally:
        proc.stop()
        redis.cleanup()


def _mcp_forget(url: str, sid: str, last: object) -> dict[str, object]:
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "forget", "arguments": {"session_id": sid, "last": last}}}
    r = httpx.post(url + "/mcp", json=call, timeout=30,
                   headers={"Accept": "application/json, text/event-stream"})
    assert r.status_code == 200, r.text
    result: dict[str, object] = r.json()["result"]
    return result


def test_forget_takes_an_integer_only(server: ServeProcess) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as c:
        sid = c.post("/v1/sessions", json={}).json()["session_id"]
        turns = [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"},
                 {"role": "user", "content": "q2"}, {"role": "assistant", "content": "a2"}]
        assert c.post(f"/v1/sessions/{sid}/messages",
                      json={"messages": turns}).status_code == 201
        for wrong in (True, False, "1", 1.0, 1.5, [1], {"n": 1}):
            r = c.post(f"/v1/sessions/{sid}/forget", json={"last": wrong})
            assert r.status_code == 422, (wrong, r.text)
            assert r.json()["error"]["code"] == "invalid"
            assert "last" in r.json()["error"]["message"]
        for wrong in (True, "x", 1.5):
            result = _mcp_forget(server.url, sid, wrong)
            assert result.get("isError") is True, (wrong, result)
        assert len(c.get(f"/v1/sessions/{sid}/messages").json()["messages"]) == 4
        r = c.post(f"/v1/sessions/{sid}/forget", json={"last": 1})
        assert r.status_code == 200 and r.json() == {"forgotten": 2}, r.text
        assert [m["content"] for m in c.get(f"/v1/sessions/{sid}/messages").json()[
            "messages"]] == ["q1", "a1"]


def _closed_within(sock: socket.socket, seconds: float) -> tuple[bool, bytes]:
    """(whether the server closed the connection within ``seconds``, what it sent)."""
    sock.settimeout(0.2)
    got = b""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            return True, got
        if not chunk:
            return True, got
        got += chunk
    return False, got


def _connect(server: ServeProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=5)


def test_a_connection_that_sends_nothing_is_reaped(server: ServeProcess) -> None:
    with _connect(server) as sock:
        start = time.monotonic()
        closed, got = _closed_within(sock, HEADER_TIMEOUT + SLACK)
        assert closed and got == b"", got
        assert time.monotonic() - start >= HEADER_TIMEOUT * 0.9


def test_a_slow_request_head_is_reaped(server: ServeProcess) -> None:
    with _connect(server) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        start = time.monotonic()
        closed = False
        while time.monotonic() - start < HEADER_TIMEOUT + SLACK + 2:  # a header line every 0.2 s
            try:
                sock.sendall(b"X-Slow: a\r\n")
            except OSError:
                closed = True
                break
            done, got = _closed_within(sock, 0.2)
            if done:
                closed = True
                assert b"200" not in got, got
                break
        assert closed, "a head dribbled a line at a time was never cut off"
        assert time.monotonic() - start <= HEADER_TIMEOUT + SLACK


def test_an_idle_keep_alive_connection_is_reaped_and_prompt_ones_are_served(
        server: ServeProcess) -> None:
    with _connect(server) as sock:
        for _ in range(3):  # a head in pieces, within the deadline, is served
            sock.sendall(b"GET /healthz HTTP/1.1\r\n")
            time.sleep(HEADER_TIMEOUT / 4)
            sock.sendall(b"Host: 127.0.0.1\r\n\r\n")
            sock.settimeout(10)
            answer = b""
            while not answer.endswith(b"}"):  # head and body may come apart
                chunk = sock.recv(65536)
                assert chunk, answer
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 200"), answer
        start = time.monotonic()
        closed, got = _closed_within(sock, KEEP_ALIVE + SLACK)
        assert closed and got == b"", got
        assert time.monotonic() - start >= KEEP_ALIVE * 0.9


def test_a_request_head_over_64_kb_is_refused(server: ServeProcess) -> None:
    with _connect(server) as sock:
        head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Big: " + b"a" * 70_000
        with contextlib.suppress(OSError):  # closed while sending: refused all the same
            sock.sendall(head)
        closed, got = _closed_within(sock, SLACK)
        assert closed, "a 70 KB header line was read on"
        assert got == b"" or got.startswith(b"HTTP/1.1 431"), got[:200]
    assert httpx.get(server.url + "/healthz", timeout=10).status_code == 200
