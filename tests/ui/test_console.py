"""The /ui console and /docs in Debian's chromium, against a real ``hermes-redis serve``
with data made through the library: every view loads and shows what the library says,
actions change both tiers, a user key sees only its user's sessions, and no request leaves
the server. Pass 1 only (one browser run is enough; the server's stack is the library's)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hermes_redis.core.config import load as load_config
from hermes_redis.session_memory import SessionMemory
from tests.http_server import ServeProcess, cli, serve_config
from tests.redis_server import RedisServer
from tests.ui.browser import Page, browser

pytestmark = pytest.mark.stack("default", reason="the browser tests run once, in pass 1")
WINDOW = 4000


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer) -> Path:
    # a small window, so a test can fill more than 80 % of it
    return serve_config(tmp_path_factory.mktemp("ui"), redis_server.url,
                        model={"context_window": WINDOW, "reply_reserve": 500})


@pytest.fixture(scope="module")
def mem(config_path: Path) -> Iterator[SessionMemory]:
    m = SessionMemory(load_config(config_path))
    yield m
    m.close()


@pytest.fixture(scope="module")
def data(mem: SessionMemory) -> dict[str, str]:
    """Two users' sessions: alice's with archived and unarchived turns, a tool call, file
    refs, a memory stated in a message; bob's with a secret."""
    alice = mem.create_session("alice", "Trip to Lisbon")
    for i in range(4):
        mem.append(alice, "user", f"Turn {i}: what about the zebracrossing museum?")
        mem.append(alice, "assistant", f"Answer {i}: it opens at nine.",
                   tool_calls=[{"name": "lookup", "arguments": "{}"}] if i == 1 else None,
                   file_refs=["plans/lisbon.md"] if i == 2 else None)
    mem.flush(alice)  # archived now: the next turn stays in Redis only
    mem.append(alice, "user", "Book the quietest hotel please")
    mem.remember("alice", "Alice prefers quiet hotels", session_id=alice)
    bob = mem.create_session("bob", "Bob's secret")
    mem.append(bob, "user", "the zebracrossing password is hunter2")
    return {"alice": alice, "bob": bob}


@pytest.fixture(scope="module")
def server(config_path: Path, data: dict[str, str]) -> Iterator[ServeProcess]:
    proc = ServeProcess(config_path).start()  # loopback, no keys: open
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    with browser() as b:
        yield b


@pytest.fixture
def page(chromium: Any, server: ServeProcess) -> Iterator[Page]:
    p = Page(chromium, server.url)
    yield p
    assert p.foreign() == [], "requests left the server"
    p.close()


def texts(page: Page, selector: str) -> list[str]:
    return [t.strip() for t in page.page.locator(selector).all_inner_texts()]


def test_every_view_loads_and_shows_what_the_library_says(page: Page, mem: SessionMemory,
                                                          data: dict[str, str]) -> None:
    sid = data["alice"]
    info = mem.info(sid)
    page.goto("/ui/")
    row = page.page.locator(f"tr[data-session='{sid}']")
    assert row.count() == 1
    cells = row.locator("td").all_inner_texts()
    assert cells[1:4] == ["alice", info.status, "Trip to Lisbon"]
    assert [int(cells[5]), int(cells[6])] == [info.message_count, info.total_tokens]
    page.shot("sessions")

    page.goto("/ui/?q=zebracrossing")
    hits = mem.search("zebracrossing")
    links = page.page.locator("#hits li a")
    assert links.count() == len(hits) > 0
    assert page.page.locator("#hits mark").first.inner_text().lower() == "zebracrossing"
    page.shot("search")
    href = links.first.get_attribute("href")
    assert href == f"/ui/sessions/{hits[0].session_id}?at={hits[0].seq}#m{hits[0].seq}"

    page.goto(f"/ui/sessions/{sid}")
    history = mem.messages(sid)
    seqs = [int(s) for s in page.page.locator("#messages tr[data-seq]").evaluate_all(
        "rows => rows.map(r => r.dataset.seq)")]
    assert seqs == [m.seq for m in history]
    tiers = dict(zip(seqs, page.page.locator("#messages tr[data-seq]").evaluate_all(
        "rows => rows.map(r => r.dataset.tier)"), strict=True))
    info = mem.info(sid)
    assert {s for s, t in tiers.items() if t == "redis"} == {m.seq for m in history
                                                             if m.seq > info.flushed_seq}
    assert "plans/lisbon.md" in page.page.inner_text("#messages")
    assert "lookup" in page.page.inner_text("#messages")
    page.shot("session")

    page.goto(f"/ui/sessions/{sid}/context?budget=8k")
    ctx = mem.context(sid, 8000, touch=False)
    tokens = {p: int(t) for p, t in zip(
        page.page.locator("#parts tr[data-part]").evaluate_all("r => r.map(x => x.dataset.part)"),
        page.page.locator("#parts tr[data-part]").evaluate_all("r => r.map(x => x.dataset.tokens)"),
        strict=True)}
    assert list(tokens) == ["memories", "opening", "summary", "recalled", "newest"]
    assert sum(tokens.values()) == ctx.tokens
    assert f"<b>{ctx.tokens}</b>" in page.page.inner_html("#totals")
    assert "Alice prefers quiet hotels" in page.page.inner_text("#text-memories")
    assert ctx.messages[-1].content in page.page.inner_text("#text-newest")
    assert page.page.locator("#usage-warning").count() == 0
    page.shot("context")
    page.goto(f"/ui/sessions/{sid}/context?budget=120")  # a tiny budget: still under it
    small = mem.context(sid, 120, touch=False)
    assert f"<b>{small.tokens}</b>" in page.page.inner_html("#totals") and small.tokens <= 120

    page.goto("/ui/users/alice/memories")
    current = [m.content for m in mem.memories("alice")]
    assert current and all(c in page.page.inner_text("#current") for c in current)
    assert f"session {sid[:12]}" in page.page.inner_text("#current")
    page.shot("memories")

    page.goto("/ui/health")
    checks = texts(page, "#checks li")
    assert checks and all(re.match(r"(ok|warn|fail) ", c) for c in checks)
    assert "MiB" in page.page.inner_text("#redis-memory")
    backlog = mem.backlog()
    assert f"{backlog[1]} message(s) in {backlog[0]} session(s)" in page.page.inner_text("#backlog")
    page.shot("health")

    page.goto("/ui/keys")
    assert "No keys" in page.page.inner_text("#keys")
    page.shot("keys")


def test_the_usage_warning_shows_past_80_percent_of_the_window(page: Page,
                                                              mem: SessionMemory) -> None:
    sid = mem.create_session("erin", "long")
    for i in range(24):
        mem.append(sid, "user" if i % 2 == 0 else "assistant",
                   f"part {i}: " + " ".join(f"word{j}" for j in range(120)))
    for budget, name in ((WINDOW, "window"), (2000, "2k")):
        ctx = mem.context(sid, budget, touch=False)
        page.goto(f"/ui/sessions/{sid}/context?budget={name}")
        shown = page.page.locator("#usage-warning")
        assert shown.count() == (1 if ctx.usage > 0.8 else 0), (name, ctx.usage)
        if ctx.usage > 0.8:
            assert f"fills {100 * ctx.usage:.0f} % of the model's {WINDOW}-token window" in \
                shown.inner_text()
    assert mem.context(sid, WINDOW, touch=False).usage > 0.8  # the warning was seen


def test_docs_load_offline(page: Page) -> None:
    page.goto("/docs")
    page.page.wait_for_selector(".swagger-ui .info .title")
    assert "hermes-redis" in page.page.inner_text(".swagger-ui .info .title")
    assert page.page.locator(".opblock").count() > 5
    page.shot("docs")
    assert page.requests and page.foreign() == []


def test_pages_name_no_other_host(server: ServeProcess, data: dict[str, str]) -> None:
    """The HTML of /docs and every /ui page names no host but the server's (link, script,
    style or image)."""
    sid = data["alice"]
    for path in ("/docs", "/ui/", f"/ui/sessions/{sid}", f"/ui/sessions/{sid}/context",
                 "/ui/users/alice/memories", "/ui/health", "/ui/keys"):
        html = httpx.get(server.url + path, timeout=30).text
        assert re.findall(r"(?:src|href)\s*=\s*[\"']?(?:https?:)?//", html) == [], path


def test_actions_change_both_tiers(page: Page, mem: SessionMemory) -> None:
    sid = mem.create_session("carol", "to be trimmed")
    for i in range(3):
        mem.append(sid, "user", f"question {i}")
        mem.append(sid, "assistant", f"answer {i}")
    mem.flush(sid)
    before = mem.info(sid)
    last_turn = [m.seq for m in mem.messages(sid)][-2:]

    page.goto(f"/ui/sessions/{sid}")
    page.page.click("#forget-last")
    assert [int(s) for s in page.page.locator("#doomed tr[data-seq]").evaluate_all(
        "r => r.map(x => x.dataset.seq)")] == last_turn  # the confirmation shows what goes
    page.shot("confirm")
    page.page.click("#confirm")
    assert "forgot 2 message(s)" in page.page.inner_text("#note")
    after = mem.info(sid)
    assert [m.seq for m in mem.messages(sid)] == [m.seq for m in mem.messages(sid)
                                                  if m.seq not in last_turn]
    assert not set(last_turn) & {m.seq for m in mem.messages(sid)}
    assert after.hot_count == before.hot_count - 2  # Redis
    assert after.archived_count == before.archived_count - 2  # the archive

    page.page.click("#compact")
    page.page.click("#confirm")
    assert mem.info(sid).summary_seq > 0
    page.page.click("#archive")
    page.page.click("#confirm")
    assert mem.info(sid).status == "archived"
    assert page.page.inner_text("#status") == "archived"
    page.page.click("#restore")
    page.page.click("#confirm")
    assert mem.info(sid).status == "active"


def test_writes_need_the_csrf_token_and_change_nothing_without_it(
        server: ServeProcess, mem: SessionMemory, data: dict[str, str]) -> None:
    sid = data["bob"]
    with httpx.Client(base_url=server.url, timeout=30) as c:
        c.get("/ui/")  # the CSRF cookie
        token = c.cookies.get("hermes_ui_csrf")
        assert token
        url = f"/ui/sessions/{sid}/act"
        refused = c.post(url, data={"action": "archive"})
        assert refused.status_code == 403 and "CSRF token is missing" in refused.text
        assert refused.headers["content-type"].startswith("text/html")
        assert c.post(url, data={"action": "archive", "csrf": token},
                      headers={"Origin": "http://evil.example"}).status_code == 403
        assert mem.info(sid).status == "active"
        r = c.post(url, data={"action": "nonsense", "csrf": token})
        assert r.status_code == 422 and "unknown action" in r.text


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory,
          redis_server: RedisServer) -> Iterator[tuple[ServeProcess, dict[str, str], dict[str, str],
                                                       SessionMemory]]:
    """A server with keys: alice's and an admin's, and a session each for alice and bob."""
    path = serve_config(tmp_path_factory.mktemp("ui-keys"), redis_server.url)
    keys = {who: json.loads(cli(path, "key", "create", *args, "--json").stdout)["key"]
            for who, args in (("alice", ("--user", "alice")), ("admin", ("--admin",)))}
    m = SessionMemory(load_config(path))
    sids = {"alice": m.create_session("alice", "alice's own"),
            "bob": m.create_session("bob", "bob's private")}
    m.append(sids["bob"], "user", "bob's zebracrossing secret")
    m.append(sids["alice"], "user", "alice's zebracrossing note")
    proc = ServeProcess(path).start()
    yield proc, keys, sids, m
    proc.stop()
    m.close()


def log_in(page: Page, key: str) -> None:
    page.goto("/ui/")
    assert page.page.url.startswith(page.base + "/ui/login")
    page.page.fill("input[name=key]", key)
    page.page.click("button[type=submit]")


def test_a_user_key_sees_only_its_user(chromium: Any, keyed: Any) -> None:
    proc, keys, sids, m = keyed
    page = Page(chromium, proc.url)
    try:
        log_in(page, keys["alice"])
        assert page.page.url == proc.url + "/ui/"
        shown = page.page.locator("tr[data-session]").evaluate_all("r => r.map(x => x.dataset.session)")
        assert sids["alice"] in shown and sids["bob"] not in shown
        page.goto("/ui/?q=zebracrossing")
        assert "bob's" not in page.page.inner_text("#hits")
        assert "alice's" in page.page.inner_text("#hits")

        unknown = "0" * 32
        r1 = page.goto(f"/ui/sessions/{sids['bob']}")
        other = page.page.inner_text("#error")
        r2 = page.goto(f"/ui/sessions/{unknown}")
        assert (r1.status, other.replace(sids["bob"], "ID")) == (
            r2.status, page.page.inner_text("#error").replace(unknown, "ID"))
        assert r1.status == 404
        for path in (f"/ui/sessions/{sids['bob']}/context",
                     f"/ui/sessions/{sids['bob']}/confirm?action=archive"):
            assert page.goto(path).status == 404
        page.goto("/ui/")
        token = next(c["value"] for c in page.context.cookies() if c["name"] == "hermes_ui_csrf")
        r = page.page.request.post(proc.url + f"/ui/sessions/{sids['bob']}/act",
                                   form={"action": "archive", "csrf": token})
        assert r.status == 404
        assert m.info(sids["bob"]).status == "active"
        assert page.goto("/ui/keys").status == 403
        assert page.goto("/ui/users/bob/memories").status == 403
        assert all(keys["alice"] not in u for u in page.requests)  # never in a URL
    finally:
        page.close()
    assert keys["alice"] not in proc.output()  # nor in the log


def test_an_admin_key_sees_everyone_and_manages_keys(chromium: Any, keyed: Any) -> None:
    proc, keys, sids, _m = keyed
    page = Page(chromium, proc.url)
    try:
        page.goto("/ui/login")
        page.page.fill("input[name=key]", "hrk_wrong_key")
        page.page.click("button[type=submit]")
        assert "invalid or revoked" in page.page.inner_text("#error")
        assert "hrk_wrong_key" not in page.page.content()
        log_in(page, keys["admin"])
        shown = page.page.locator("tr[data-session]").evaluate_all("r => r.map(x => x.dataset.session)")
        assert {sids["alice"], sids["bob"]} <= set(shown)
        page.goto("/ui/keys")
        page.page.fill("input[name=user_id]", "dave")
        page.page.click("#create-key")
        new = page.page.inner_text("#new-key").strip()
        assert new.startswith("hrk_")
        with httpx.Client(base_url=proc.url, timeout=30) as c:
            assert c.get("/v1/sessions", headers={"Authorization": f"Bearer {new}"}).status_code == 200
        page.goto("/ui/keys")
        assert new not in page.page.content()  # shown once
        key_id = new.split("_")[1]
        page.page.once("dialog", lambda d: d.accept())
        page.page.click(f"tr[data-key='{key_id}'] button")
        assert f"revoked key {key_id}" in page.page.inner_text("#note")
        assert page.foreign() == []
    finally:
        page.close()


@pytest.mark.parametrize("path", [
    "/ui/?status=bogus", "/ui/?cursor=garbage", "/ui/sessions/has%20space",
    "/ui/sessions/" + "x" * 300 + "/context", "/ui/sessions/{sid}/confirm?action=zap",
    "/ui/sessions/{sid}/confirm?action=forget-last&n=0", "/ui/sessions/{sid}/context?budget=lots",
    "/ui/sessions/{sid}?after=99999999999999999999"])
def test_bad_input_is_one_line_on_a_4xx_page(server: ServeProcess, data: dict[str, str],
                                             path: str) -> None:
    r = httpx.get(server.url + path.format(sid=data["alice"]), timeout=30)
    assert 400 <= r.status_code < 500
    assert re.search(r'<p class="error" id="error">[^<\n]+</p>', r.text)


def test_the_wheel_carries_the_templates_and_the_stylesheet() -> None:
    """Every file the console serves matches the package-data patterns in pyproject.toml."""
    import fnmatch
    import tomllib

    root = Path(__file__).resolve().parent.parent.parent
    data = tomllib.loads((root / "pyproject.toml").read_text())
    patterns = data["tool"]["setuptools"]["package-data"]["hermes_redis.server.ui"]
    ui = root / "hermes_redis" / "server" / "ui"
    files = [p.relative_to(ui).as_posix() for d in ("templates", "static")
             for p in (ui / d).rglob("*") if p.is_file()]
    assert files and all(any(fnmatch.fnmatch(f, pat) for pat in patterns) for f in files)
