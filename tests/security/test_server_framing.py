"""Issue 44, finding 1: the console could be framed (clickjacking).

A real ``hermes-redis serve`` (keyless, loopback). Every /ui and /docs response, refusals and
404s included, carries ``Content-Security-Policy`` with ``frame-ancestors 'none'`` under
``default-src 'self'``, and ``X-Frame-Options: DENY``; and the pages themselves hold no
inline script, style or handler, so that policy does not break them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from tests.http_server import ServeProcess, serve_config
from tests.redis_server import RedisServer


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory,
           redis_server: RedisServer) -> Iterator[ServeProcess]:
    proc = ServeProcess(serve_config(tmp_path_factory.mktemp("frame"), redis_server.url)).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def sid(server: ServeProcess) -> str:
    r = httpx.post(server.url + "/v1/sessions", json={"title": "framed"}, timeout=30)
    assert r.status_code == 201, r.text
    sid = str(r.json()["session_id"])
    r = httpx.post(f"{server.url}/v1/sessions/{sid}/messages",
                   json={"role": "user", "content": "hello"}, timeout=30)
    assert r.status_code == 201, r.text
    return sid


def _policy(r: httpx.Response) -> dict[str, str]:
    csp = r.headers.get("content-security-policy", "")
    return {part.split()[0]: part.strip() for part in csp.split(";") if part.strip()}


PAGES = ["/ui", "/ui/", "/ui/health", "/ui/keys", "/ui/sessions/{sid}",
         "/ui/sessions/{sid}/context", "/ui/sessions/{sid}/confirm?action=archive",
         "/ui/users/local/memories", "/ui/static/ui.css", "/ui/static/ui.js",
         "/ui/nowhere", "/ui/sessions/nope", "/docs", "/docs/static/swagger-ui.css",
         "/docs/static/nope.js"]


@pytest.mark.parametrize("path", PAGES)
def test_every_console_and_docs_response_forbids_framing(server: ServeProcess, sid: str,
                                                         path: str) -> None:
    r = httpx.get(server.url + path.format(sid=sid), timeout=30)
    assert r.headers.get("x-frame-options") == "DENY", (path, r.status_code)
    policy = _policy(r)
    assert policy.get("frame-ancestors") == "frame-ancestors 'none'", (path, policy)
    assert policy.get("default-src") == "default-src 'self'", (path, policy)
    # nothing inline is allowed anywhere in the policy
    assert "unsafe" not in r.headers["content-security-policy"]


def test_refusals_and_posts_carry_the_headers_too(server: ServeProcess, sid: str) -> None:
    r = httpx.get(server.url + "/ui/", headers={"Host": f"evil.example:{server.port}"},
                  timeout=30)
    assert r.status_code == 421 and r.headers.get("x-frame-options") == "DENY"
    r = httpx.post(f"{server.url}/ui/sessions/{sid}/act", data={"action": "archive"},
                   timeout=30)
    assert 400 <= r.status_code < 500, r.text  # no CSRF token
    assert r.headers.get("x-frame-options") == "DENY"
    assert "frame-ancestors 'none'" in r.headers["content-security-policy"]


def test_the_api_is_left_as_it_was(server: ServeProcess, sid: str) -> None:
    r = httpx.get(f"{server.url}/v1/sessions/{sid}", timeout=30)
    assert r.status_code == 200 and "content-security-policy" not in r.headers


INLINE = [re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.I),  # a script with no src
          re.compile(r"<style\b", re.I), re.compile(r"\sstyle\s*=", re.I),
          re.compile(r"\son[a-z]+\s*=", re.I), re.compile(r"javascript:", re.I)]


@pytest.mark.parametrize("path", [p for p in PAGES if "static" not in p])
def test_the_pages_satisfy_their_own_policy(server: ServeProcess, sid: str, path: str) -> None:
    """No inline script, style block, style attribute or handler: default-src 'self' would
    block them, so the page would break (or the policy would have to be weakened)."""
    r = httpx.get(server.url + path.format(sid=sid), timeout=30, follow_redirects=True)
    for pattern in INLINE:
        assert not pattern.search(r.text), (path, pattern.pattern, pattern.search(r.text))
