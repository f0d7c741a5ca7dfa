"""docs/clients.md runs (issue 33.6): its Python blocks with this Python, its curl blocks with
bash, its JavaScript block with node (when node ≥ 18 and the built TypeScript client are
here), each against a real ``hermes-redis serve``; and the Python client's typed errors for
an unreachable server, a non-JSON error page and a server older than the client."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from hermes_redis.client import HermesClient
from hermes_redis.core.errors import BackendUnavailableError, BadReplyError
from tests.http_server import ServeProcess, serve_config
from tests.redis_server import RedisServer, free_port

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "clients.md"
TS = ROOT / "clients" / "typescript"
TURN = ("Our API signs JWTs with RS256; rotate keys monthly.", "Noted: RS256, monthly rotation.")


def blocks(lang: str) -> list[str]:
    found = re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert found, f"docs/clients.md has no {lang} block"
    return found


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory,
           redis_server: RedisServer) -> Iterator[ServeProcess]:
    proc = ServeProcess(serve_config(tmp_path_factory.mktemp("docs-clients"),
                                     redis_server.url)).start()
    yield proc
    proc.stop()


def _run(args: list[str], url: str, cwd: Path = ROOT) -> str:
    env = {**os.environ, "HERMES_URL": url}
    env.pop("HERMES_API_KEY", None)
    done = subprocess.run(args, capture_output=True, text=True, cwd=cwd, env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _sessions_with_turn(url: str) -> list[str]:
    """Sessions of alice holding exactly the doc's turn, in order."""
    with HermesClient(url) as client:
        page = client.list_sessions(user_id="alice", limit=None)
        return [s.session_id for s in page
                if tuple(m.content for m in client.messages(s.session_id)) == TURN]


def test_python_blocks_run(server: ServeProcess) -> None:
    before = len(_sessions_with_turn(server.url))
    for code in blocks("python"):
        out = _run([sys.executable, "-c", code], server.url).splitlines()
        seq, tokens = out[0].split()
        assert seq == "2" and int(tokens) > 0
        assert all(text in out[1] for text in TURN)
        assert any("RS256" in line for line in out[2:])  # search found the turn
    assert len(_sessions_with_turn(server.url)) == before + len(blocks("python"))


def test_curl_blocks_run(server: ServeProcess) -> None:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    for code in blocks("bash"):
        out = [json.loads(line) for line in _run(["bash", "-euo", "pipefail", "-c", code],
                                                 server.url).splitlines() if line.strip()]
        first, many, ctx, search = out
        assert first["seq"] == 1 and [m["seq"] for m in many["messages"]] == [2]
        assert tuple(m["content"] for m in ctx["messages"]) == TURN
        assert any(hit["session_id"] == first["session_id"] for hit in search["hits"])


def _node_major() -> int:
    node = shutil.which("node")
    if node is None:
        return 0
    version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout
    found = re.match(r"v(\d+)", version)
    return int(found.group(1)) if found else 0


def test_javascript_block_runs(server: ServeProcess, tmp_path: Path) -> None:
    if _node_major() < 18:
        pytest.skip("node >= 18 is not installed")
    if not (TS / "dist" / "index.js").exists():
        pytest.skip("the TypeScript client is not built (bash clients/typescript/test.sh, or "
                    "npm ci && npm run build in clients/typescript)")
    (tmp_path / "node_modules").mkdir()
    (tmp_path / "node_modules" / "hermes-redis").symlink_to(TS)
    before = len(_sessions_with_turn(server.url))
    for code in blocks("js"):
        script = tmp_path / "example.mjs"
        script.write_text(code)
        out = _run(["node", str(script)], server.url, cwd=tmp_path).splitlines()
        seq, tokens = out[0].split()
        assert seq == "2" and int(tokens) > 0
        assert any("RS256" in line for line in out[2:])
    assert len(_sessions_with_turn(server.url)) == before + len(blocks("js"))


# --- bad input: one typed error with one clear line ------------------------------------------
@pytest.fixture
def fake() -> Iterator[Callable[[Callable[[BaseHTTPRequestHandler], None]], str]]:
    """A stand-in at a URL: ``answer(handler)`` writes each reply (HTTP/1.0, so a body may
    run to the close as a proxy's page does)."""
    servers: list[ThreadingHTTPServer] = []

    def start(answer: Callable[[BaseHTTPRequestHandler], None]) -> str:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                answer(self)

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                answer(self)

            def log_message(self, *args: object) -> None:
                pass

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        servers.append(httpd)
        return f"http://127.0.0.1:{httpd.server_address[1]}"

    yield start
    for httpd in servers:
        httpd.shutdown()
        httpd.server_close()


def _json(status: int, body: object, length: bool = True) -> Callable[[BaseHTTPRequestHandler], None]:
    def answer(h: BaseHTTPRequestHandler) -> None:
        data = json.dumps(body).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        if length:
            h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)
    return answer


def test_unreachable_server_is_one_typed_line() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with HermesClient(url) as client, pytest.raises(BackendUnavailableError) as err:
        client.create_session(user_id="alice")
    assert f"cannot reach hermes-redis at {url}" in str(err.value)
    assert "\n" not in str(err.value)


def test_non_json_error_page_is_one_typed_line(fake: Callable[..., str]) -> None:
    def page(h: BaseHTTPRequestHandler) -> None:
        h.send_response(502)
        h.send_header("Content-Type", "text/html")
        h.end_headers()  # no Content-Length: the page runs to the close
        h.wfile.write(b"<html><body>502 Bad Gateway</body></html>")

    url = fake(page)
    with HermesClient(url) as client:
        for call in (lambda: client.create_session(user_id="alice"),
                     lambda: client.context("s1"), lambda: client.append("s1", "user", "hi")):
            with pytest.raises(BadReplyError) as err:
                call()
            assert "answered 502 with no hermes-redis JSON error" in str(err.value)
            assert "\n" not in str(err.value)


@pytest.mark.parametrize("length", [True, False])
def test_older_server_schema_mismatch_is_one_typed_line(fake: Callable[..., str],
                                                        length: bool) -> None:
    # an older server: it answers, but without fields this client reads
    url = fake(_json(201, {"session_id": "s1", "seq": 1, "role": "user"}, length))
    with HermesClient(url) as client:
        assert client.create_session(user_id="alice") == "s1"
        for name, call in (("append", lambda: client.append("s1", "user", "hi")),
                           ("context", lambda: client.context("s1")),
                           ("info", lambda: client.info("s1")),
                           ("search", lambda: client.search("x"))):
            with pytest.raises(BadReplyError) as err:
                call()
            text = str(err.value)
            assert f"answered {name}() without what this client reads" in text, text
            assert "older hermes-redis" in text and "\n" not in text


def test_a_wrong_call_is_still_the_callers_error(fake: Callable[..., str]) -> None:
    """Only errors after a reply are blamed on the server: a bad call stays a TypeError."""
    url = fake(_json(201, {"session_id": "s1"}))
    with HermesClient(url) as client, pytest.raises(TypeError):
        client.append("s1", "user", "hi", no_such_option=1)  # type: ignore[call-arg]


def test_older_server_without_a_route_is_one_typed_line(fake: Callable[..., str]) -> None:
    url = fake(_json(404, {"error": {"code": "not_found",
                                     "message": "no route POST /v1/sessions; see /docs"}}))
    with HermesClient(url) as client, pytest.raises(BadReplyError) as err:
        client.create_session(user_id="alice")
    assert "the server is older than this client; upgrade it" in str(err.value)
