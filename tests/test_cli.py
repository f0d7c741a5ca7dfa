"""The ``hermes-redis`` CLI as a user sees it: through click's runner and as real
subprocesses, against the test Redis and a real SQLite file."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from hermes_redis import SessionMemory
from hermes_redis.cli.main import cli
from hermes_redis.cli.render import plural, width
from tests import http_server
from tests.helpers import archive_query, chat, isolated_config, write_config
from tests.redis_server import free_port

Run = Callable[..., Result]


@pytest.fixture
def cfg(tmp_path: Path, redis_url: str) -> Path:
    return isolated_config(tmp_path, redis_url)


@pytest.fixture
def cmem(cfg: Path) -> Iterator[SessionMemory]:
    """The Python side of a test: the same Redis prefix and archive the CLI uses."""
    memory = SessionMemory.from_config(cfg)
    yield memory
    memory.close()


@pytest.fixture
def run(cfg: Path) -> Run:
    def invoke(*args: str, config: Path | None = None, **kwargs: Any) -> Result:
        return CliRunner().invoke(cli, ["--config", str(config or cfg), *args], **kwargs)

    return invoke


def subprocess_cli(*args: str, config: Path | None = None, cwd: Path | None = None,
                   env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "hermes_redis.cli"]
    if config is not None:
        argv += ["--config", str(config)]
    return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=60, cwd=cwd,
                          env={**os.environ, **(env or {})}, check=False)


def one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    assert lines[0].startswith("Error: ")
    return lines[0]


# --- help and errors ---------------------------------------------------------------------------
def test_help_needs_no_redis(tmp_path: Path) -> None:
    dead = isolated_config(tmp_path, f"redis://127.0.0.1:{free_port()}/0")
    for args in ([], ["session"], ["session", "forget"], ["info"], ["search"], ["worker"]):
        result = CliRunner().invoke(cli, ["--config", str(dead), *args, "--help"])
        assert result.exit_code == 0, result.output
        assert "Usage:" in result.stdout


def test_unreachable_redis_is_one_line(tmp_path: Path) -> None:
    dead = isolated_config(tmp_path, f"redis://127.0.0.1:{free_port()}/0")
    result = CliRunner().invoke(cli, ["--config", str(dead), "session", "list"])
    assert result.exit_code == 5
    assert "cannot reach Redis" in one_error_line(result.stderr)


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # not on the CLI's stderr
        pass


@pytest.fixture
def http_port() -> Iterator[int]:
    """A real HTTP server (not Redis) on a free port: what a mistyped redis.url often hits."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_a_port_that_is_not_redis_is_one_line(tmp_path: Path, http_port: int) -> None:
    """Issue 45: an HTTP server's "<" was a 70-line InvalidResponse traceback; the one line
    names the file the URL came from."""
    url = f"redis://127.0.0.1:{http_port}/0"
    config = isolated_config(tmp_path, url)
    result = CliRunner().invoke(cli, ["--config", str(config), "session", "list"])
    assert result.exit_code == 5
    assert one_error_line(result.stderr) == (f"Error: {url} answered but is not a Redis server; "
                                             f"check redis.url in {config}")
    proc = subprocess_cli("session", "list", config=config)
    assert proc.returncode == 5 and "answered but is not a Redis server" in one_error_line(
        proc.stderr)
    doctor = CliRunner().invoke(cli, ["--config", str(config), "doctor"])
    assert f"FAIL  redis    {url} answered but is not a Redis server -> check redis.url in " \
           f"{config}" in doctor.stdout, doctor.stdout


def test_the_redis_hint_names_where_the_url_came_from(tmp_path: Path, http_port: int) -> None:
    """Issue 45: redis.url set in the file no longer says "or set HERMES_REDIS_URL"; the
    variable is named when it set the URL."""
    dead_url = f"redis://127.0.0.1:{free_port()}/0"
    dead = isolated_config(tmp_path, dead_url)
    result = CliRunner().invoke(cli, ["--config", str(dead), "session", "list"])
    line = one_error_line(result.stderr)
    assert line.endswith(f"; check that it runs or fix redis.url in {dead}"), line
    assert "HERMES_REDIS_URL" not in line
    doctor = CliRunner().invoke(cli, ["--config", str(dead), "doctor"])
    assert f"-> start Redis or fix redis.url in {dead}" in doctor.stdout, doctor.stdout
    http_url = f"redis://127.0.0.1:{http_port}/0"
    result = CliRunner().invoke(cli, ["--config", str(dead), "session", "list"],
                                env={"HERMES_REDIS_URL": http_url})
    assert one_error_line(result.stderr).endswith("is not a Redis server; check $HERMES_REDIS_URL")
    result = CliRunner().invoke(cli, ["--config", str(dead), "session", "list"],
                                env={"HERMES_REDIS_URL": dead_url})
    assert one_error_line(result.stderr).endswith("; check that it runs or fix $HERMES_REDIS_URL")


@pytest.mark.parametrize("text, expect", [
    ("memory: [unclosed", "invalid YAML"),
    ("redis:\n  ulr: redis://x\n", "unknown key 'redis.ulr'"),
    ("memory:\n  session:\n    ttl: soon\n", "memory.session.ttl must be int"),
])
def test_bad_config_is_one_line(tmp_path: Path, text: str, expect: str) -> None:
    path = tmp_path / "bad.yml"
    path.write_text(text)
    result = CliRunner().invoke(cli, ["--config", str(path), "session", "list"])
    assert result.exit_code == 2
    assert expect in one_error_line(result.stderr)


def test_missing_config_file_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["--config", str(tmp_path / "nope.yml"), "info", "x"])
    assert result.exit_code == 2
    assert "not found" in one_error_line(result.stderr)


def test_hermes_config_env_picks_the_file(cfg: Path, cmem: SessionMemory) -> None:
    sid = chat(cmem)
    result = CliRunner().invoke(cli, ["session", "list", "--json"], env={"HERMES_CONFIG": str(cfg)})
    assert result.exit_code == 0, result.output
    assert [s["session_id"] for s in json.loads(result.stdout)] == [sid]


def test_a_remote_server_asked_without_a_key_names_the_option_and_the_variable(
        tmp_path: Path, redis_url: str) -> None:
    config = http_server.serve_config(tmp_path, redis_url)
    made = http_server.cli(config, "key", "create", "--user", "alice", "--json")
    key = json.loads(made.stdout)["key"]
    server = http_server.ServeProcess(config).start()
    try:
        bare = CliRunner().invoke(cli, ["--server", server.url, "session", "list"])
        assert bare.exit_code == 6
        assert one_error_line(bare.stderr) == (
            f"Error: {server.url} needs an API key: pass --api-key KEY or set HERMES_API_KEY "
            "(`hermes-redis key create --user U` on the server's host makes one)")
        wrong = CliRunner().invoke(cli, ["--server", server.url, "--api-key", "hk_wrong", "info", "x"])
        assert wrong.exit_code == 6 and "invalid or revoked API key" in one_error_line(wrong.stderr)
        keyed = CliRunner().invoke(cli, ["--server", server.url, "session", "list", "--json"],
                                   env={"HERMES_API_KEY": key})
        assert keyed.exit_code == 0 and json.loads(keyed.stdout) == [], keyed.output

        def remote(*args: str, **kwargs: Any) -> Result:  # create, append, import: over HTTP too
            return CliRunner().invoke(cli, ["--server", server.url, "--api-key", key, *args],
                                      **kwargs)

        sid = remote("session", "create", "--title", "remote").stdout.strip()
        assert remote("session", "append", sid, "--role", "user", input="hi\n").exit_code == 0
        source = tmp_path / "two.jsonl"
        source.write_text('{"role": "user", "content": "a"}\n{"role": "tool", "content": "b"}\n')
        made = json.loads(remote("session", "import", str(source), "--json").stdout)
        assert made["messages"] == 2 and remote("session", "import", str(source), "--session",
                                                sid).exit_code == 0
        with SessionMemory.from_config(config) as local:
            assert [m.content for m in local.messages(sid)] == ["hi", "a", "b"]
            assert local.info(sid).user_id == local.info(made["session_id"]).user_id == "alice"
    finally:
        server.stop()


# --- prefixes ----------------------------------------------------------------------------------
def test_session_ids_accept_a_unique_prefix(run: Run, cmem: SessionMemory) -> None:
    for sid in ("abc-1", "abc-2", "xyz-1"):
        cmem.create_session(user_id="carol", session_id=sid)
        cmem.append(sid, "user", f"hello {sid}")
    unique = run("info", "xy", "--json")
    assert unique.exit_code == 0 and json.loads(unique.stdout)["session_id"] == "xyz-1"
    exact = run("info", "abc-1", "--json")
    assert json.loads(exact.stdout)["session_id"] == "abc-1"

    ambiguous = run("session", "archive", "abc")
    assert ambiguous.exit_code == 3
    line = one_error_line(ambiguous.stderr)
    assert "'abc' matches 2 sessions" in line and "abc-1" in line and "abc-2" in line
    assert cmem.info("abc-1").status == "active"  # nothing changed

    unknown = run("info", "zzz")
    assert unknown.exit_code == 3
    assert "no session matches 'zzz'" in one_error_line(unknown.stderr)

    invalid = run("session", "resume", "a b")
    assert invalid.exit_code == 2
    assert "invalid session id" in one_error_line(invalid.stderr)


# --- session list ------------------------------------------------------------------------------
def test_list_shows_both_tiers_newest_first_with_cjk_aligned(run: Run, cmem: SessionMemory) -> None:
    old = chat(cmem, user="张三")
    cmem.flush(old)
    hot = cmem.hot
    hot.client.delete(hot.meta_key(old), hot.list_key(old))  # type: ignore[attr-defined]
    new = chat(cmem, user="bob", title_text="Plan the Q3 launch email")

    result = run("session", "list")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["ID", "TITLE", "USER", "STATUS", "MESSAGES", "UPDATED"]
    assert lines[1].startswith(new[:8]) and lines[2].startswith(old[:8])
    assert "帮我写一个 FastAPI" in lines[2] and "张三" in lines[2]
    user_col = {width(line[: line.index(user)]) for line, user in
                [(lines[0], "USER"), (lines[1], "bob"), (lines[2], "张三")]}
    assert len(user_col) == 1, result.stdout  # the CJK title did not push the column

    data = json.loads(run("session", "list", "--json").stdout)
    assert [d["session_id"] for d in data] == [new, old]
    assert data[1]["tier"] == "archive"

    info = run("info", old[:8]).stdout  # measuring the context reloads it from the archive
    assert "Messages:    4 total: 0 hot (not loaded), 4 archived" in info
    assert "TTL:         had expired from Redis; reloaded from the archive" in info
    assert re.search(r"^Token usage: \d+ / 200K", info, re.M), info
    assert hot.meta(old) is not None
    assert data[1]["message_count"] == 4 and "hot_count" not in data[0]


def test_list_filters_by_user_and_status(run: Run, cmem: SessionMemory) -> None:
    a = chat(cmem, user="alice")
    b = chat(cmem, user="bob")
    cmem.archive(b)

    def ids(*args: str) -> list[str]:
        result = run("session", "list", "--json", *args)
        assert result.exit_code == 0, result.output
        return [s["session_id"] for s in json.loads(result.stdout)]

    assert ids() == [a]
    assert ids("--status", "archived") == [b]
    assert set(ids("--status", "all")) == {a, b}
    assert ids("--status", "all", "--user", "bob") == [b]
    assert ids("--user", "nobody") == []
    assert run("session", "list", "--user", "nobody").stdout == "No active sessions for user nobody.\n"
    assert run("session", "list", "--status", "bogus").exit_code == 2


# --- info --------------------------------------------------------------------------------------
def test_info_shows_both_tiers(run: Run, cmem: SessionMemory) -> None:
    sid = chat(cmem)
    before = run("info", sid[:10])
    assert before.exit_code == 0, before.output
    out = before.stdout
    assert f"Session:     {sid}" in out
    assert "Title:       帮我写一个 FastAPI 的用户认证接口" in out
    assert "Messages:    4 total: 4 hot (Redis), 0 archived" in out
    assert re.search(r"^Token usage: \d+ / 200K \(<1%\): verbatim \d+$", out, re.M), out
    assert "TTL:         no expiry: 4 messages not yet archived" in out
    assert "Backlog:     4 messages not yet archived (seq 1–4)" in out
    assert "Encoding:    cl100k_base" in out
    assert f"Backend:     redis {cmem.hot.url}" in out  # type: ignore[attr-defined]
    assert "⚠" not in out

    cmem.flush(sid)
    after = run("info", sid).stdout
    assert "Messages:    4 total: 4 hot (Redis), 4 archived" in after
    assert "Backlog:     0 (everything is archived)" in after
    assert re.search(r"^TTL:         (59m \d+s|1h) left", after, re.M), after
    assert cmem.hot.ttl_left(sid) is not None


def test_info_json_is_complete(run: Run, cmem: SessionMemory) -> None:
    sid = chat(cmem)
    data = json.loads(run("info", sid, "--json").stdout)
    ctx = cmem.context(sid)
    assert data["session_id"] == sid and data["user_id"] == "alice"
    assert data["message_count"] == 4 and data["hot_count"] == 4 and data["backlog"] == 4
    assert data["context"] == {"tokens": ctx.tokens, "window": 200_000,
                               "budget": cmem.config.context_budget,
                               "usage": round(ctx.tokens / 200_000, 4),
                               "shape": "4 messages verbatim from #1", "first_seq": 1,
                               "opening": [], "recalled": [],
                               "parts": ctx.parts, "whole": True,  # issue 30
                               "archived_through": 0, "summarized_through": 0,
                               "extracted_through": 0}
    assert sum(ctx.parts.values()) == ctx.tokens
    assert data["turns"] == 2 and data["warning"] is None and data["backend"] == "redis"
    assert data["encoding"].startswith("cl100k_base")

    cmem.archive(sid)
    archived = json.loads(run("info", sid, "--json").stdout)
    assert archived["status"] == "archived" and archived["context"] is None
    assert "Token usage: n/a (session is archived)" in run("info", sid).stdout


def test_info_warns_past_80_percent(tmp_path: Path, redis_url: str) -> None:
    path = isolated_config(tmp_path, redis_url, model={"context_window": 1000, "reply_reserve": 0})
    with SessionMemory.from_config(path) as mem:
        sid = mem.create_session(user_id="alice")
        for i in range(6):
            mem.append(sid, "user", f"question {i}: " + "lorem ipsum " * 40)
            mem.append(sid, "assistant", f"answer {i}: " + "dolor sit " * 40)
        usage = mem.context(sid).usage
    assert usage > 0.8
    result = CliRunner().invoke(cli, ["--config", str(path), "info", sid])
    pct = round(usage * 100)
    assert re.search(rf"^Token usage: \d+ / 1,000 \({pct}%\): (summary \d+, )?(recalled \d+, )?"
                     r"verbatim \d+$", result.stdout, re.M), result.stdout
    warning = result.stdout.strip().splitlines()[-1]
    assert warning == (f"⚠ context is {pct}% full: /remember what matters (`hermes-redis memory "
                       f"add TEXT --user alice`), then /clear (`hermes-redis session clear "
                       f"{sid[:8]}`) to start afresh; the archive keeps every turn")
    data = json.loads(CliRunner().invoke(cli, ["--config", str(path), "info", sid, "--json"]).stdout)
    assert data["warning"] == warning


def test_the_usage_line_splits_the_context_into_summary_recall_and_verbatim(
        tmp_path: Path, redis_url: str) -> None:
    """Past the threshold the context fills its budget with a summary, recalled excerpts and
    the newest turns: the usage line says how much each takes, and the parts add up."""
    path = isolated_config(tmp_path, redis_url, model={"context_window": 1000, "reply_reserve": 0},
                           memory={"session": {"backend": "redis",
                                               "compression": {"keep_recent": 2}}})
    with SessionMemory.from_config(path) as mem:
        sid = mem.create_session(user_id="dana")
        for i in range(6):
            mem.append(sid, "user", f"Step {i}: explain blue-green deploys again, " + "in detail " * 30)
            mem.append(sid, "assistant", f"Answer {i}: two environments, switch traffic; "
                       + "roll back " * 30)
        mem.compact(sid)
        mem.remember("dana", "deploys go out on Tuesdays", session_id=sid)
        ctx = mem.context(sid, touch=False)
    assert ctx.summary and ctx.recalled and ctx.memories  # every part is there
    out = CliRunner().invoke(cli, ["--config", str(path), "info", sid]).stdout
    usage = re.search(r"^Token usage: (\d+) / 1,000 \(\d+%\): memories (\d+), summary (\d+), "
                      r"recalled (\d+), verbatim (\d+)$", out, re.M)
    assert usage, out
    total, *parts = (int(n) for n in usage.groups())
    assert total == ctx.tokens == sum(parts)
    assert parts[1] > 0 and parts[2] > 0 and parts[3] >= sum(m.token_count for m in ctx.messages)
    resumed = CliRunner().invoke(cli, ["--config", str(path), "session", "resume", sid,
                                       "--query", ""]).stdout  # no recall: the rest verbatim
    head = resumed.splitlines()
    usage = re.match(r"Token usage: (\d+) / 1,000 \(\d+%\): memories (\d+), summary (\d+), "
                     r"verbatim (\d+); ", head[1])
    assert usage, head[1]
    total, *parts = (int(n) for n in usage.groups())
    assert total == sum(parts) > 800
    assert head[2].startswith("⚠ context is") and "/clear" in head[2]
    assert "forget" not in out + resumed


def test_info_shows_summary_coverage_and_ttl_never(tmp_path: Path, redis_url: str) -> None:
    path = isolated_config(tmp_path, redis_url, memory={"session": {
        "backend": "redis", "ttl": 0, "compression": {"keep_recent": 2}}})
    with SessionMemory.from_config(path) as mem:
        sid = mem.create_session(user_id="alice")
        for i in range(5):
            mem.append(sid, "user", f"question {i} about deployment")
            mem.append(sid, "assistant", f"answer {i}: use blue-green deploys")
        result = mem.compact(sid)
    assert result is not None and result.summarized_upto == 6
    out = CliRunner().invoke(cli, ["--config", str(path), "info", sid]).stdout
    assert re.search(r"^Summary:     covers seq 1–6 \(turns 1–3 of 5\), \d+ tokens", out, re.M), out
    assert "TTL:         never" in out


# --- resume ------------------------------------------------------------------------------------
def test_resume_prints_the_context_of_the_latest_active_session(run: Run,
                                                               cmem: SessionMemory) -> None:
    first = chat(cmem, user="alice")
    cmem.remember("alice", "项目用 PostgreSQL，不用 MySQL", session_id=first)
    latest = chat(cmem, user="bob", title_text="Plan the Q3 launch email")

    result = run("session", "resume")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"Session {latest}")
    assert "[user #1] Plan the Q3 launch email" in result.stdout

    mine = run("session", "resume", "--user", "alice").stdout
    assert mine.startswith(f"Session {first}")
    assert "- 项目用 PostgreSQL，不用 MySQL" in mine
    assert "[assistant #2] 好的，用 JWT" in mine

    data = json.loads(run("session", "resume", first[:8], "--json").stdout)
    ctx = cmem.context(first)
    assert data["session_id"] == first and data["tokens"] == ctx.tokens
    assert [m["seq"] for m in data["messages"]] == [1, 2, 3, 4]
    assert data["memories"] == ["项目用 PostgreSQL，不用 MySQL"]
    assert data["chat"] == ctx.as_chat()

    cmem.archive(first)
    refused = run("session", "resume", first)
    assert refused.exit_code == 4
    assert "archived" in one_error_line(refused.stderr)


def test_resume_without_sessions_is_a_clear_error(run: Run) -> None:
    result = run("session", "resume")
    assert result.exit_code == 3
    assert "no active session" in one_error_line(result.stderr)


# --- changing sessions -------------------------------------------------------------------------
def test_forget_last_turns_then_keyword(run: Run, cmem: SessionMemory) -> None:
    sid = chat(cmem, turns=3)
    cmem.flush(sid)  # both tiers hold every message
    result = run("session", "forget", sid[:8], "--last", "1")
    assert result.exit_code == 0, result.output
    assert "Forgot 2 messages in the last 1 turn" in result.stdout
    assert [m.seq for m in cmem.messages(sid)] == [1, 2, 3, 4]

    result = run("session", "forget", sid, "--keyword", "mysql")
    assert "Forgot 1 message containing 'mysql'" in result.stdout
    assert "3 messages" in result.stdout
    remaining = cmem.messages(sid)
    assert [m.seq for m in remaining] == [1, 2, 4]
    assert not any("MySQL" in m.content for m in remaining)
    assert not any("MySQL" in m.content for m in cmem.context(sid).messages)
    info = cmem.info(sid)
    assert info.message_count == 3 == info.archived_count == info.hot_count
    assert info.total_tokens == sum(m.token_count for m in remaining)

    nothing = run("session", "forget", sid, "--keyword", "kubernetes")
    assert nothing.exit_code == 0 and "Nothing forgotten" in nothing.stdout


@pytest.mark.parametrize("args", [[], ["--last", "1", "--keyword", "x"], ["--last", "0"],
                                  ["--last", "two"]])
def test_forget_needs_exactly_one_valid_option(run: Run, cmem: SessionMemory,
                                               args: list[str]) -> None:
    sid = chat(cmem)
    result = run("session", "forget", sid, *args)
    assert result.exit_code == 2
    assert "see `hermes-redis session forget --help`" in one_error_line(result.stderr)
    assert cmem.info(sid).message_count == 4


def test_clear_keeps_history_and_memories(run: Run, cmem: SessionMemory) -> None:
    sid = chat(cmem)
    cmem.remember("alice", "prefers short answers", session_id=sid)
    result = run("session", "clear", sid)
    assert result.exit_code == 0, result.output
    assert "archive keeps its 4 messages" in result.stdout
    ctx = cmem.context(sid)
    assert ctx.messages == () and ctx.summary == ""
    assert ctx.memories == ("prefers short answers",)
    assert len(cmem.messages(sid)) == 4
    assert "left the context (cleared)" in run("info", sid).stdout


def test_archive_restore_delete_and_purge(run: Run, cmem: SessionMemory) -> None:
    sid = chat(cmem)
    assert run("session", "archive", sid).exit_code == 0
    assert cmem.info(sid).status == "archived"
    assert run("session", "archive", sid).exit_code == 4  # already archived
    assert "Restored" in run("session", "restore", sid[:6]).stdout
    assert cmem.info(sid).status == "active" and len(cmem.context(sid).messages) == 4

    kept = run("session", "delete", sid)
    assert kept.exit_code == 0 and "archive keeps its 4 messages" in kept.stdout
    assert cmem.hot.meta(sid) is None
    assert cmem.info(sid).status == "deleted" and len(cmem.messages(sid)) == 4
    assert run("session", "restore", sid).exit_code == 4

    other = chat(cmem)
    purged = run("session", "delete", other, "--purge")
    assert "purged its 4 archived messages" in purged.stdout
    assert cmem.messages(other) == [] and cmem.info(other).message_count == 0
    listed = json.loads(run("session", "list", "--status", "deleted", "--json").stdout)
    assert {s["session_id"] for s in listed} == {sid, other}


def test_compact_command(tmp_path: Path, redis_url: str) -> None:
    path = isolated_config(tmp_path, redis_url,
                        memory={"session": {"backend": "redis", "compression": {"keep_recent": 1}}})
    with SessionMemory.from_config(path) as mem:
        sid = chat(mem, turns=3)
        out = CliRunner().invoke(cli, ["--config", str(path), "session", "compact", sid]).stdout
        assert "the summary covers seq 1–4" in out
        assert mem.info(sid).summary


def test_export_jsonl_and_markdown(run: Run, cmem: SessionMemory, tmp_path: Path) -> None:
    sid = chat(cmem)
    cmem.flush(sid)
    cmem.append(sid, "tool", "42 rows", tool_calls=None, file_refs=["app/auth.py"])
    lines = run("session", "export", sid).stdout.splitlines()
    rows = [json.loads(line) for line in lines]
    assert [r["seq"] for r in rows] == [1, 2, 3, 4, 5]
    assert rows[0]["content"] == "帮我写一个 FastAPI 的用户认证接口"
    assert rows[4]["file_refs"] == ["app/auth.py"]

    target = tmp_path / "chat.md"
    result = run("session", "export", sid, "--format", "markdown", "--output", str(target))
    assert result.exit_code == 0 and "Wrote 5 messages" in result.stdout
    text = target.read_text(encoding="utf-8")
    assert text.startswith("# 帮我写一个 FastAPI 的用户认证接口\n")
    assert "## 1 · user ·" in text and "Files: `app/auth.py`" in text

    bad = run("session", "export", sid, "-o", str(tmp_path / "no" / "dir" / "x.md"))
    assert bad.exit_code == 1 and "Traceback" not in bad.output


# --- worker and server -------------------------------------------------------------------------
def test_worker_burst_archives_the_backlog(run: Run, cmem: SessionMemory) -> None:
    sid = chat(cmem)
    assert cmem.info(sid).backlog == 4
    result = run("worker", "--burst")
    assert result.exit_code == 0, result.output
    info = cmem.info(sid)
    assert info.backlog == 0 and info.archived_count == 4


def test_serve_on_a_busy_port_is_one_line_with_its_own_exit_code(run: Run) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run("serve", "--port", str(port))
    assert result.exit_code == 7, result.output
    assert one_error_line(result.stderr) == (f"Error: port {port} on 127.0.0.1 is in use by "
                                             "another process; pick another with --port")
    assert "Serving" not in result.output


def test_worker_refuses_the_memory_backend(tmp_path: Path, redis_url: str) -> None:
    path = isolated_config(tmp_path, redis_url, backend="memory")
    result = CliRunner().invoke(cli, ["--config", str(path), "worker", "--burst"])
    assert result.exit_code == 2
    assert "needs memory.session.backend: redis" in one_error_line(result.stderr)


def test_server_stop_when_not_running(run: Run, cfg: Path) -> None:
    result = run("server", "stop")
    assert result.exit_code == 0
    assert "is not running" in result.stdout


def doctor_checks(config: Path) -> tuple[int, dict[str, dict[str, str]]]:
    """doctor's exit code and its checks by name (the last of a name)."""
    result = CliRunner().invoke(cli, ["--config", str(config), "doctor", "--json"])
    assert "Traceback" not in result.output
    return result.exit_code, {c["name"]: c for c in json.loads(result.stdout)["checks"]}


def test_doctor_fails_without_a_worker_whatever_the_redis(run: Run, cfg: Path,
                                                          tmp_path: Path) -> None:
    """Embedded Redis stopped or running, a configured one reachable or not: no worker is
    a failure each time, and each fix fits the state it names."""
    tag = tmp_path.name[-8:]
    own = write_config({"redis": {"key_prefix": f"e{tag}", "queue": f"q{tag}"},
                        "archive": {"data_dir": str(tmp_path / "data"),
                                    "path": str(tmp_path / "memory.db")}}, tmp_path / "own.yml")
    code, checks = doctor_checks(own)
    assert code == 1
    assert checks["embedded"]["status"] == "warn" and "stopped" in checks["embedded"]["detail"]
    assert checks["embedded"]["fix"] == "start it now: `hermes-redis server start`"
    assert checks["workers"]["status"] == "fail" and "is stopped" in checks["workers"]["detail"]
    assert "`hermes-redis worker`" in checks["workers"]["fix"]
    assert not (tmp_path / "data" / "redis.sock").exists()  # doctor started nothing

    started = run("server", "start", config=own)
    try:
        assert started.exit_code == 0 and started.stdout.startswith("Started the embedded Redis")
        assert "already runs" in run("server", "start", config=own).stdout
        code, checks = doctor_checks(own)
        assert code == 1 and checks["embedded"]["status"] == "ok"
        assert checks["workers"]["status"] == "fail"
        assert checks["workers"]["detail"].startswith(f"no worker serves queue 'q{tag}'")
    finally:
        assert "Stopped" in run("server", "stop", config=own).stdout

    code, checks = doctor_checks(cfg)  # the configured Redis, no worker on its queue
    assert code == 1 and checks["workers"]["status"] == "fail"
    assert checks["workers"]["fix"] == "start one: `hermes-redis worker`"
    dead = isolated_config(tmp_path, f"redis://127.0.0.1:{free_port()}/0")
    code, checks = doctor_checks(dead)
    assert code == 1 and checks["redis"]["status"] == "fail"
    assert checks["workers"]["status"] == "fail" and "cannot be reached" in checks["workers"]["detail"]
    assert run("server", "start").exit_code == 2  # redis.url is configured: nothing to start


def test_memory_backend_cli_reads_the_archive(tmp_path: Path, redis_url: str) -> None:
    path = isolated_config(tmp_path, redis_url, backend="memory")
    with SessionMemory.from_config(path) as mem:
        sid = chat(mem)  # the memory backend archives inline
    data = json.loads(CliRunner().invoke(cli, ["--config", str(path), "info", sid[:8],
                                               "--json"]).stdout)
    assert data["tier"] == "archive" and data["archived_count"] == 4 and data["backend"] == "memory"


# --- real subprocesses -------------------------------------------------------------------------
def test_subprocess_reads_and_scripts_with_json(cfg: Path, cmem: SessionMemory,
                                                tmp_path: Path) -> None:
    sid = chat(cmem)
    listed = subprocess_cli("session", "list", "--json", config=cfg, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)[0]["session_id"] == sid
    info = subprocess_cli("info", sid[:8], cwd=tmp_path, env={"HERMES_CONFIG": str(cfg)})
    assert info.returncode == 0, info.stderr
    assert "Title:       帮我写一个 FastAPI 的用户认证接口" in info.stdout
    found = subprocess_cli("search", "认证", "--json", config=cfg, cwd=tmp_path)
    assert [(h["session_id"], h["seq"]) for h in json.loads(found.stdout)] == [(sid, 1)]
    forgot = subprocess_cli("session", "forget", sid[:8], "--keyword", "MYSQL", config=cfg,
                            cwd=tmp_path)
    assert forgot.returncode == 0 and "Forgot 1 message" in forgot.stdout


def test_subprocess_errors_are_one_line_without_traceback(cfg: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("model:\n  context_window: [1]\n")
    dead = isolated_config(tmp_path, f"redis://127.0.0.1:{free_port()}/0")
    cases = [
        (["info", "nosuchsession"], cfg, 3, "no session matches"),
        (["session", "list"], bad, 2, "model.context_window must be int"),
        (["session", "list"], dead, 5, "cannot reach Redis"),
        (["session", "forget", "x"], cfg, 2, "give exactly one of --last N or --keyword WORD"),
    ]
    for args, config, code, text in cases:
        proc = subprocess_cli(*args, config=config, cwd=tmp_path)
        assert proc.returncode == code, (args, proc.stderr)
        assert text in one_error_line(proc.stderr)
        assert proc.stdout == ""


def test_console_script_help_without_redis(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("hermes-redis")
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "hermes_redis.cli"]
    proc = subprocess.run([*argv, "--help"], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "HERMES_REDIS_URL": "redis://127.0.0.1:1/0"},
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "session" in proc.stdout and "search" in proc.stdout


def test_forgetting_unarchived_turns_leaves_no_phantom_backlog(run: Run, cmem: SessionMemory) -> None:
    sid = chat(cmem, turns=2)  # nothing archived yet
    assert run("session", "forget", sid, "--last", "1").exit_code == 0
    cmem.flush(sid)  # one flush must settle it, not only a later sweep
    info = cmem.info(sid)
    assert (info.message_count, info.archived_count, info.backlog) == (2, 2, 0)
    assert info.ttl_left is not None  # fully archived, so the idle keys may expire again
    assert "Backlog:     0 (everything is archived)" in run("info", sid).stdout


def test_session_pop_and_clear_history(run: Run, cmem: SessionMemory) -> None:
    sid = chat(cmem, turns=2)
    cmem.remember("alice", "项目用 PostgreSQL", session_id=sid)
    result = run("session", "pop", sid[:8])
    assert result.exit_code == 0, result.output
    assert result.output == f"Popped message 4 (assistant) from session {sid}: PostgreSQL. (answer 1)\n"
    result = run("session", "pop", sid, "--json")
    assert result.exit_code == 0 and json.loads(result.output)["seq"] == 3
    result = run("session", "clear", sid, "--history")
    assert result.exit_code == 0, result.output
    assert result.output == (f"Cleared session {sid} and forgot its 2 messages from both tiers; "
                             "persistent memories stay.\n")
    assert cmem.messages(sid) == [] and len(cmem.memories("alice")) == 1
    result = run("session", "pop", sid)
    assert result.output == f"Nothing popped: session {sid} has no messages.\n"
    assert json.loads(run("session", "pop", sid, "--json").output) is None
    result = run("session", "pop", "nosuchsession")
    assert result.exit_code == 3 and "no session matches" in result.output


# --- create, append, import ----------------------------------------------------------------------
def test_session_create_and_append_from_the_shell(run: Run, cmem: SessionMemory) -> None:
    made = run("session", "create", "--user", "erin", "--title", "shell demo")
    assert made.exit_code == 0, made.output
    sid = made.stdout.strip()
    info = cmem.info(sid)
    assert (info.user_id, info.title, info.status) == ("erin", "shell demo", "active")
    assert json.loads(run("session", "create", "--json").stdout)["user_id"] == "default"

    said = run("session", "append", sid[:10], "--role", "user", "--content", "帮我写一个接口")
    msg = cmem.messages(sid)[-1]
    assert said.stdout == (f"Appended message 1 (user, {plural(msg.token_count, 'token')}) to "
                           f"session {sid}.\n")
    piped = run("session", "append", sid, "--role", "assistant", "--json",
                input="first line\nsecond line\n")
    data = json.loads(piped.stdout)
    assert data["seq"] == 2 and data["content"] == "first line\nsecond line"  # one \n dropped
    assert [m.content for m in cmem.messages(sid)] == ["帮我写一个接口", "first line\nsecond line"]

    assert run("session", "append", sid, "--role", "robot", "--content", "x").exit_code == 2
    empty = run("session", "append", sid, "--role", "user", input="")
    assert empty.exit_code == 2 and "content is empty" in one_error_line(empty.stderr)
    assert run("session", "append", "nosuch", "--role", "user", "--content", "x").exit_code == 3
    assert cmem.info(sid).message_count == 2


def rich_session(mem: SessionMemory) -> str:
    """A session with every kind of field an export carries."""
    sid = mem.create_session(user_id="frank", title="导入导出 round trip")
    mem.append(sid, "user", "帮我读一下 app/auth.py\n\n然后改一下", created_at=1_700_000_000.5)
    mem.append(sid, "assistant", "calling a tool",
               tool_calls=[{"id": "c1", "name": "read", "arguments": {"path": "app/auth.py"}}])
    mem.append(sid, "tool", "print('hi')", file_refs=["app/auth.py", "app/main.py"])
    mem.append(sid, "assistant", "", item={"type": "message", "content": [{"text": "done ✓"}]})
    mem.append(sid, "user", "a heading quoted in a message stays text:\n"
               "## 1 · user · 2020-01-01 00:00\nthe end")
    return sid


def as_compared(messages: list[Any], *, exact: bool) -> list[tuple[Any, ...]]:
    """What a round trip keeps: role, content, seq order, tool calls and files; with JSON
    lines also the item and the time said."""
    return [(m.seq, m.role, m.content, json.loads(m.tool_calls) if m.tool_calls else None,
             m.file_refs, *((m.item, m.created_at) if exact else ())) for m in messages]


def test_export_then_import_gives_the_same_messages_in_both_tiers(
        config_factory: Callable[..., Any], backend: str, tmp_path: Path) -> None:
    cfg = config_factory(backend)
    path = write_config(cfg, tmp_path / "config.yml")
    with SessionMemory(cfg) as mem:
        sid = rich_session(mem)
        original = mem.messages(sid)
        for fmt, exact in (("jsonl", True), ("markdown", False)):
            target = tmp_path / f"out.{'md' if fmt == 'markdown' else 'jsonl'}"
            out = CliRunner().invoke(cli, ["--config", str(path), "session", "export", sid,
                                           "--format", fmt, "-o", str(target)])
            assert out.exit_code == 0, out.output
            made = CliRunner().invoke(cli, ["--config", str(path), "session", "import",
                                            str(target), "--json"])
            assert made.exit_code == 0, made.output
            data = json.loads(made.stdout)
            new = data["session_id"]
            assert new != sid and (data["messages"], data["first_seq"], data["last_seq"]) == (5, 1, 5)
            copied = mem.messages(new)
            assert as_compared(copied, exact=exact) == as_compared(original, exact=exact), fmt
            assert not {m.message_id for m in copied} & {m.message_id for m in original}
            if fmt == "markdown":
                assert [int(m.created_at) // 60 for m in copied] == [
                    int(m.created_at) // 60 for m in original]  # to the minute, truncated
                info = mem.info(new)
                assert (info.user_id, info.title) == ("frank", "导入导出 round trip")
            mem.flush(new)  # the archive holds the same messages, in order
            assert archive_query(cfg, "SELECT seq, role, content FROM messages WHERE "
                                 "session_id=? ORDER BY seq", (new,)) == [
                (m.seq, m.role, m.content) for m in original]


def test_import_onto_a_session_in_batches_and_bad_files_change_nothing(
        run: Run, cmem: SessionMemory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sid = chat(cmem, turns=1)
    rows = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"line {i}"}
            for i in range(7)]
    source = tmp_path / "seven.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    monkeypatch.setattr("hermes_redis.cli.transfer.MAX_BATCH", 3)
    added = run("session", "import", str(source), "--session", sid[:8])
    assert added.exit_code == 0, added.output
    assert added.stdout == f"Imported 7 messages from {source} into session {sid} (seq 3–9).\n"
    assert [m.content for m in cmem.messages(sid)][2:] == [r["content"] for r in rows]

    before = {i.session_id for i in cmem.list_sessions(status="all")}
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"role": "user", "content": "ok"}\n{"role": "robot", "content": "no"}\n')
    refused = run("session", "import", str(bad))
    assert refused.exit_code == 2
    assert one_error_line(refused.stderr).startswith(f"Error: {bad} line 2: unknown role 'robot'")
    prose = tmp_path / "notes.txt"
    prose.write_text("this is neither\n")
    assert "is not JSON" in run("session", "import", str(prose), "--format", "jsonl").stderr
    assert "holds no messages" in one_error_line(run("session", "import", str(prose)).stderr)
    assert {i.session_id for i in cmem.list_sessions(status="all")} == before
    both = run("session", "import", str(source), "--session", sid, "--user", "x")
    assert both.exit_code == 2 and cmem.info(sid).message_count == 9

    rows[4]["content"] = "   "  # issue 44: refused before the first batch, not in the second
    source.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    partial = run("session", "import", str(source), "--session", sid)
    assert partial.exit_code == 2
    assert one_error_line(partial.stderr) == (
        f"Error: {source} line 5: content is empty: send at least one non-blank character")
    assert cmem.info(sid).message_count == 9

    piped = run("session", "import", "-", "--user", "gina", input=json.dumps(rows[0]) + "\n")
    assert piped.exit_code == 0 and "from stdin into session" in piped.stdout


# --- issue 45: several words without quotes, the right --user help, server status -------------
def test_search_takes_several_words_without_quotes(run: Run, cmem: SessionMemory) -> None:
    sid = cmem.create_session(user_id="alice")
    cmem.append(sid, "user", "the staging password rotates every monday")
    cmem.append(sid, "assistant", "noted: staging only")
    unquoted = run("search", "staging", "password", "--json")
    assert unquoted.exit_code == 0, unquoted.output
    assert [h["seq"] for h in json.loads(unquoted.stdout)] == [1]  # every word: not #2
    assert json.loads(run("search", "staging password", "--json").stdout) == json.loads(
        unquoted.stdout)
    missing = run("search")
    assert missing.exit_code == 2 and "Missing argument 'QUERY...'" in missing.stderr


def test_memory_commands_take_the_user_and_words_as_typed(run: Run, cmem: SessionMemory) -> None:
    user = f"bob-{os.urandom(4).hex()}"
    cmem.create_session(user_id=user)  # a user the server knows
    added = run("memory", "add", "deploys", "go", "out", "on", "tuesdays", "--user", user)
    assert added.exit_code == 0, added.output
    assert [m.content for m in cmem.memories(user)] == ["deploys go out on tuesdays"]
    listed = run("memory", "list", user, "--json")
    assert listed.exit_code == 0, listed.output
    assert [m["content"] for m in json.loads(listed.stdout)] == ["deploys go out on tuesdays"]
    assert json.loads(run("memory", "list", "--user", user, "--json").stdout) == json.loads(
        listed.stdout)
    both = run("memory", "list", user, "--user", "carol")
    assert both.exit_code == 2
    assert f"two users given, '{user}' and --user 'carol': give one" in one_error_line(both.stderr)
    found = run("memory", "search", "tuesdays", "deploys", "--user", user, "--json")
    assert [m["content"] for m in json.loads(found.stdout)] == ["deploys go out on tuesdays"]
    helped = run("memory", "list", "--help").stdout
    assert "Only this user's sessions" not in helped and "Whose memories" in helped
    assert "[USER]" in helped


def test_server_status_says_whether_the_embedded_redis_runs(
        run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "data"
    monkeypatch.setenv("HERMES_DATA_DIR", str(data))  # the tests' own would win over the file
    own = write_config({"archive": {"path": str(tmp_path / "memory.db")}}, tmp_path / "own.yml")
    stopped = run("server", "status", config=own)
    assert stopped.exit_code == 0, stopped.output
    assert stopped.stdout.startswith(f"The embedded Redis under {data} is not running; "
                                     "`hermes-redis server start` starts it")
    assert run("server", "start", config=own).exit_code == 0
    try:
        shown = json.loads(run("server", "status", "--json", config=own).stdout)
        pid = int((data / "redis.pid").read_text())
        assert shown == {"running": True, "data_dir": str(data), "socket": str(data / "redis.sock"),
                         "log": str(data / "redis.log"), "pid": pid, "port": 0,
                         "version": shown["version"], "in_use": True}
        os.kill(pid, 0)  # that process exists
        text = run("server", "status", config=own).stdout
        assert text.startswith(f"The embedded Redis runs: pid {pid}, Redis {shown['version']}, "
                               "port none (unix socket only), socket "), text
        assert "`hermes-redis server stop` stops it." in text
    finally:
        assert "Stopped" in run("server", "stop", config=own).stdout
    assert not json.loads(run("server", "status", "--json", config=own).stdout)["running"]
    configured = run("server", "status")  # cfg: redis.url set
    assert "Note: redis.url is configured, so the embedded Redis is not in use." in configured.stdout


# issue 44: import is all or nothing, in bounded memory
MD_HEAD = "# t\n\n- Session: `x`\n- User: ina\n\n"
GOOD = '{"role": "user", "content": "ok"}\n'
BAD_INPUTS = [
    ("latin1.jsonl", '{"role": "user", "content": "café"}\n'.encode("latin-1"),
     "latin1.jsonl line 1 is not UTF-8 (byte 0xe9 at column 33)"),
    ("utf16.jsonl", GOOD.encode("utf-16"), "utf16.jsonl is UTF-16, not UTF-8: convert it"),
    ("utf16le.jsonl", GOOD.encode("utf-16-le"), "utf16le.jsonl line 1 is not JSON"),
    ("month.md", (MD_HEAD + "## 1 · user · 2026-13-45 99:99\n\nhi\n").encode(),
     "month.md line 6: 2026-13-45 99:99 is not a date and time (YYYY-MM-DD HH:MM, local)"),
    ("year0.md", (MD_HEAD + "## 1 · user · 0000-01-01 00:00\n\nhi\n").encode(),
     "year0.md line 6: 0000-01-01 00:00 is not a date and time"),
    ("old.md", (MD_HEAD + "## 1 · user · 1000-01-01 00:00\n\nhi\n").encode(),
     "old.md line 6: 1000-01-01 00:00 is before 1970 or after 9999"),
    ("digits.jsonl", (GOOD + '{"seq": ' + "9" * 5000 + ', "role": "user", "content": "x"}\n')
     .encode(), "digits.jsonl line 2 holds a number of 5,000 digits, over 4,000"),
    ("yesterday.jsonl", (GOOD + '{"role": "user", "content": "x", "created_at": "yesterday"}\n')
     .encode(), "yesterday.jsonl line 2: created_at must be Unix seconds"),
    ("nan.jsonl", (GOOD + '{"role": "user", "content": "x", "created_at": NaN}\n').encode(),
     "nan.jsonl line 2: created_at must be Unix seconds"),
    ("inf.jsonl", (GOOD + '{"role": "tool", "content": "x", "tool_calls": [1e400]}\n').encode(),
     "inf.jsonl line 2: tool_calls cannot be stored as JSON"),
    ("huge.jsonl", (GOOD + '{"role": "user", "content": "' + "x" * 30_000_000 + '"}\n').encode(),
     "huge.jsonl line 2 is over 16,777,216 bytes, the most one message may take"),
    ("big.jsonl", ('{"role": "user", "content": "' + "x" * 2_000_000 + '"}\n').encode(),
     "big.jsonl line 1: content is 2000000 bytes, over the limit of 1048576"),
    ("bigmd.md", (MD_HEAD + "## 1 · user · -\n\n" + "y\n" * 9_000_000).encode(),
     "bigmd.md line 6: the message under this heading is over 16,777,216 bytes"),
    ("empty.jsonl", b"", "empty.jsonl holds no messages"),
    ("blank.md", b"\n \n\t\n", "blank.md holds no messages"),
    ("cut.jsonl", (GOOD + '{"role": "user", "cont').encode(), "cut.jsonl line 2 is not JSON"),
    ("deep.jsonl", (GOOD + "[" * 100_000 + "\n").encode(),
     "deep.jsonl line 2 nests too deep to be a message"),
    ("calls.md", (MD_HEAD + "## 1 · tool · -\n\nx\n\n```json\n[1,\n```\n").encode(),
     "calls.md line 6: the tool calls are not JSON"),
    ("blankmsg.md", (MD_HEAD + "## 1 · user · -\n\nhi\n\n## 2 · user · -\n\n \n").encode(),
     "blankmsg.md line 10: content is empty"),
]


def all_sessions(mem: SessionMemory) -> set[str]:
    return {i.session_id for i in mem.list_sessions(status="all", limit=None)}


@pytest.mark.parametrize("filename, data, expect", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_import_refuses_each_bad_input_in_one_line_and_makes_nothing(
        run: Run, cmem: SessionMemory, tmp_path: Path, filename: str, data: bytes,
        expect: str) -> None:
    before = all_sessions(cmem)
    path = tmp_path / filename
    path.write_bytes(data)
    result = run("session", "import", str(path))
    assert result.exit_code == 2, result.output
    assert one_error_line(result.stderr).startswith(f"Error: {tmp_path}/{expect}"), result.stderr
    assert all_sessions(cmem) == before


def test_a_heading_with_a_5000_digit_seq_is_only_a_number(run: Run, cmem: SessionMemory,
                                                          tmp_path: Path) -> None:
    path = tmp_path / "seq.md"
    path.write_text(MD_HEAD + "## 1 · user · -\n\nhi\n\n## " + "7" * 5000 + " · assistant · -"
                    "\n\nhello\n\n## 3 · user · -\n\nquoted, not a heading\n", encoding="utf-8")
    made = run("session", "import", str(path), "--json")
    assert made.exit_code == 0, made.output
    sid = json.loads(made.stdout)["session_id"]
    assert [m.content for m in cmem.messages(sid)] == [
        "hi", "hello\n\n## 3 · user · -\n\nquoted, not a heading"]
    assert cmem.info(sid).user_id == "ina"


def test_import_fuzz_truncations_random_bytes_and_encodings_never_leave_a_session(
        run: Run, cmem: SessionMemory, tmp_path: Path) -> None:
    import random

    sid = rich_session(cmem)
    cmem.append(sid, "user", "café à la crème, naïve", created_at=1_700_000_100.0)
    sources = {}
    for fmt in ("jsonl", "markdown"):
        target = tmp_path / f"src.{fmt}"
        assert run("session", "export", sid, "--format", fmt, "-o", str(target)).exit_code == 0
        sources[fmt] = target.read_bytes()
    rng = random.Random(44)
    cases: list[tuple[str, bytes]] = []
    for fmt, data in sources.items():
        step = max(1, len(data) // 60)
        cases += [(fmt, data[:cut]) for cut in range(0, len(data), step)]
        cases += [(fmt, data.decode().encode(codec)) for codec in (
            "utf-16", "utf-16-le", "utf-16-be", "utf-32", "cp1252", "gb18030", "shift_jis")
            if _encodes(data, codec)]
        cases.append((fmt, data.decode().encode("latin-1", errors="replace")))
        mangled = bytearray(data)
        for _ in range(20):
            mangled[rng.randrange(len(mangled))] = rng.randrange(256)
        cases.append((fmt, bytes(mangled)))
    cases += [("jsonl", rng.randbytes(rng.randrange(1, 4000))) for _ in range(25)]
    cases += [("markdown", rng.randbytes(rng.randrange(1, 4000))) for _ in range(25)]
    cases += [("jsonl", b'{"role": "user", "content": "x", "created_at": ' + n + b"}\n")
              for n in (b"1e999", b"-1", b"9" * 4001, b"253402300800", b"true", b'"2026-01-01"')]
    before = all_sessions(cmem)
    outcomes = {0: 0, 2: 0}
    for i, (fmt, data) in enumerate(cases):
        path = tmp_path / f"case{i}.{'md' if fmt == 'markdown' else 'jsonl'}"
        path.write_bytes(data)
        result = run("session", "import", str(path), "--json")
        assert result.exit_code in (0, 2), (i, data[:200], result.output, result.exception)
        outcomes[result.exit_code] += 1
        if result.exit_code == 2:
            one_error_line(result.stderr)
            assert all_sessions(cmem) == before, (i, data[:200])
        else:  # a cut at a message's end is a shorter, valid file
            new = json.loads(result.stdout)["session_id"]
            assert all_sessions(cmem) == before | {new}
            before.add(new)
    assert outcomes[2] > len(cases) // 2 and outcomes[0] > 3, outcomes
    for codec in ("utf-16", "utf-32", "gb18030"):  # never read as if it were UTF-8
        path = tmp_path / f"enc.{codec}.jsonl"
        path.write_bytes(sources["jsonl"].decode().encode(codec))
        assert run("session", "import", str(path)).exit_code == 2, codec


def _encodes(data: bytes, codec: str) -> bool:
    try:
        data.decode().encode(codec)
    except UnicodeEncodeError:
        return False
    return True


def _peak_rss_kb(cfg: Path, *args: str) -> tuple[int, subprocess.CompletedProcess[str]]:
    """``hermes-redis --config CFG ARGS`` in a child of a child; that child's peak RSS (KB)."""
    probe = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], "
             "capture_output=True, text=True); sys.stdout.write(r.stdout); "
             "sys.stderr.write(r.stderr); print(resource.getrusage(resource.RUSAGE_CHILDREN)"
             ".ru_maxrss, file=sys.stderr); sys.exit(r.returncode)")
    done = subprocess.run([sys.executable, "-c", probe, sys.executable, "-m", "hermes_redis.cli",
                           "--config", str(cfg), *args], capture_output=True, text=True,
                          timeout=120, check=False, cwd=Path(__file__).parents[1])
    *err, peak = done.stderr.strip().splitlines()
    return int(peak), subprocess.CompletedProcess(done.args, done.returncode, done.stdout,
                                                  "\n".join(err))


def test_import_streams_a_200_mb_file_in_bounded_memory(
        cfg: Path, cmem: SessionMemory, tmp_path: Path) -> None:
    line = json.dumps({"role": "user", "content": "word " * 20_000}) + "\n"  # 100 KB
    small = tmp_path / "small.jsonl"
    small.write_text(line * 3 + '{"role": "user"}\n')
    base, refused = _peak_rss_kb(cfg, "session", "import", str(small))
    assert refused.returncode == 2 and "small.jsonl line 4 is not a message" in refused.stderr
    big = tmp_path / "big.jsonl"
    with big.open("w") as out:
        for _ in range(2000):
            out.write(line)
        out.write('{"role": "user", "content": "x", "created_at": "yesterday"}\n')
    assert big.stat().st_size > 200_000_000
    before = all_sessions(cmem)
    peak, refused = _peak_rss_kb(cfg, "session", "import", str(big))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert refused.stderr.splitlines() == [
        f"Error: {big} line 2001: created_at must be Unix seconds (a number from 0), not "
        "'yesterday'"]
    assert peak < base + 30_000, (base, peak)  # KB: the file is 200 MB
    assert all_sessions(cmem) == before

    peaks = []  # the writing pass too: 4 MB (one batch), then 40 MB appended in batches
    for count in (40, 400):
        stored = tmp_path / f"stored{count}.jsonl"
        stored.write_text(line * count)
        peak, done = _peak_rss_kb(cfg, "session", "import", str(stored), "--json")
        assert done.returncode == 0, done.stderr
        made = json.loads(done.stdout)
        assert (made["messages"], made["first_seq"], made["last_seq"]) == (count, 1, count)
        assert cmem.info(made["session_id"]).message_count == count
        peaks.append(peak)
    assert peaks[1] < peaks[0] + 15_000, peaks  # KB: 36 MB more file, not 36 MB more memory


def test_import_through_a_server_names_its_refusal_and_leaves_no_session(
        tmp_path: Path, redis_url: str) -> None:
    config = http_server.serve_config(tmp_path, redis_url, limits={"max_content_bytes": 2000},
                                      server={"workers": 1, "max_body_bytes": 65536})
    server = http_server.ServeProcess(config).start()
    try:
        def remote(*args: str) -> Result:
            return CliRunner().invoke(cli, ["--server", server.url, *args])

        for filename, data, expect in BAD_INPUTS:  # refused before the server is asked
            if len(data) > 1_000_000 and filename != "huge.jsonl":
                continue
            path = tmp_path / filename
            path.write_bytes(data)
            refused = remote("session", "import", str(path))
            assert refused.exit_code == 2, refused.output
            assert one_error_line(refused.stderr).startswith(f"Error: {tmp_path}/{expect}")
        with SessionMemory.from_config(config) as local:
            assert local.list_sessions(status="all", limit=None) == []
        for size, expect in ((5000, "content is 5000 bytes, over the limit of 2000"),
                             (300_000, "over the limit of 65536 (server.max_body_bytes)"),
                             (10_000_000, "over the limit of 65536 (server.max_body_bytes)")):
            source = tmp_path / f"big{size}.jsonl"
            source.write_text('{"role": "user", "content": "fine"}\n'
                              + json.dumps({"role": "user", "content": "x" * size}) + "\n")
            refused = remote("session", "import", str(source))
            assert refused.exit_code == 2, refused.output
            line = one_error_line(refused.stderr)
            assert expect in line and "cannot reach" not in line, line
            assert "nothing was imported (the new session " in line and "was removed)" in line
            with SessionMemory.from_config(config) as local:
                assert local.list_sessions(status="active", limit=None) == []
                gone = local.list_sessions(status="all", limit=None)
                assert all(i.status == "deleted" and i.message_count == 0 for i in gone), gone
    finally:
        server.stop()
