"""Issue 44, finding 1, in Debian's chromium: a page on another port of the same host frames
/ui (the confirm page of an archive, the keys page of a keyless server) and clicks where
the button would be. Before the fix the click archived the session; now the frame renders
nothing of /ui and the click changes nothing. And the console and /docs, under their
policy, still work with no violation reported."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.http_server import ServeProcess, serve_config
from tests.redis_server import RedisServer
from tests.ui.browser import Page, browser

pytestmark = pytest.mark.stack("default", reason="the browser tests run once, in pass 1")


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer) -> Path:
    return serve_config(tmp_path_factory.mktemp("framing"), redis_server.url)


@pytest.fixture(scope="module")
def server(config_path: Path) -> Iterator[ServeProcess]:
    proc = ServeProcess(config_path).start()  # loopback, no keys: open
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    with browser() as b:
        yield b


class Framer:
    """The attacker's page, on its own port of 127.0.0.1: one full-size iframe of ``target``."""

    def __init__(self) -> None:
        self.target = ""
        framer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = (f'<!doctype html><title>win a prize</title><body style="margin:0">'
                        f'<iframe id="victim" src="{framer.target}" width="1200" height="800" '
                        f'style="border:0"></iframe></body>').encode()
                self.send_response(200)
                self.send_header("content-type", "text/html; charset=utf-8")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def framer() -> Iterator[Framer]:
    f = Framer()
    yield f
    f.close()


def _session(server: ServeProcess, title: str) -> str:
    r = httpx.post(server.url + "/v1/sessions", json={"title": title}, timeout=30)
    assert r.status_code == 201, r.text
    return str(r.json()["session_id"])


def _frame_and_click(chromium: Any, framer: Framer, target: str) -> tuple[str, list[str]]:
    """Load the framing page, click all over the frame; the frame's rendered text, and
    what the browser reported."""
    framer.target = target
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    messages: list[str] = []
    page.on("console", lambda m: messages.append(m.text))
    try:
        page.goto(framer.url)
        page.wait_for_timeout(1500)  # the frame loads (or is blocked)
        frame = next(f for f in page.frames if f is not page.main_frame)
        try:
            text = frame.evaluate("document.body ? document.body.innerText : ''")
        except Exception:  # an error page of another origin: nothing of /ui to read
            text = ""
        for x in range(40, 1200, 120):  # where the button would be, and everywhere else
            for y in range(40, 800, 80):
                page.mouse.click(x, y)
        page.wait_for_timeout(500)
        return str(text), messages
    finally:
        context.close()


def test_a_framed_confirm_page_renders_nothing_and_a_click_archives_nothing(
        chromium: Any, framer: Framer, server: ServeProcess) -> None:
    sid = _session(server, "not to be archived")
    text, messages = _frame_and_click(
        chromium, framer, f"{server.url}/ui/sessions/{sid}/confirm?action=archive")
    assert "Yes, do it" not in text and "Confirm" not in text, text
    assert any("frame-ancestors" in m or "X-Frame-Options" in m for m in messages) or \
        text == "", messages
    r = httpx.get(f"{server.url}/v1/sessions/{sid}", timeout=30)
    assert r.status_code == 200 and r.json().get("status") != "archived", r.text
    # the same page, opened directly, works: the click there does archive
    page = Page(chromium, server.url)
    try:
        page.goto(f"/ui/sessions/{sid}/confirm?action=archive")
        page.page.click("#confirm")
        page.page.wait_for_load_state()
    finally:
        page.close()
    assert httpx.get(f"{server.url}/v1/sessions/{sid}", timeout=30).json()["status"] == "archived"


def test_a_framed_keys_page_makes_no_key(chromium: Any, framer: Framer,
                                         server: ServeProcess) -> None:
    text, _ = _frame_and_click(chromium, framer, f"{server.url}/ui/keys")
    assert "Keys" not in text, text
    # still keyless: an unauthenticated call is answered
    assert httpx.get(f"{server.url}/v1/sessions", timeout=30).status_code == 200


@pytest.mark.parametrize("path", ["/ui/", "/ui/health", "/ui/keys", "/ui/sessions/{sid}",
                                  "/ui/sessions/{sid}/context", "/docs"])
def test_the_console_and_docs_work_under_their_policy(chromium: Any, server: ServeProcess,
                                                      path: str) -> None:
    sid = _session(server, "policy")
    httpx.post(f"{server.url}/v1/sessions/{sid}/messages",
               json={"role": "user", "content": "hello"}, timeout=30)
    page = Page(chromium, server.url)
    messages: list[str] = []
    page.page.on("console", lambda m: messages.append(m.text))
    try:
        page.goto(path.format(sid=sid))
        if path == "/docs":
            page.page.wait_for_selector(".swagger-ui .info .title")
            assert page.page.locator(".opblock").count() > 5
        page.page.wait_for_timeout(300)
        assert [m for m in messages if "Content Security Policy" in m] == []
        assert page.foreign() == []
    finally:
        page.close()
