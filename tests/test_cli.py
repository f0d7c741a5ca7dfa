"""The ``hermes-redis`` CLI as a user sees it: through click's runner and as real
subprocesses, against the test Redis and a real SQLite file."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from hermes_redis import SessionMemory
from hermes_redis.cli import cli
from hermes_redis.render import width
from tests.helpers import chat, isolated_config
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
    assert re.search(r"^Token usage: \d+ / 200K \(<1%\)$", out, re.M), out
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
                               "opening": [], "recalled": []}
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
    assert re.search(rf"^Token usage: \d+ / 1K \({pct}%\)$", result.stdout, re.M), result.stdout
    warning = result.stdout.strip().splitlines()[-1]
    assert warning.startswith(f"⚠ context is {pct}% full: run `hermes-redis session forget")
    data = json.loads(CliRunner().invoke(cli, ["--config", str(path), "info", sid, "--json"]).stdout)
    assert data["warning"] == warning


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


def test_worker_refuses_the_memory_backend(tmp_path: Path, redis_url: str) -> None:
    path = isolated_config(tmp_path, redis_url, backend="memory")
    result = CliRunner().invoke(cli, ["--config", str(path), "worker", "--burst"])
    assert result.exit_code == 2
    assert "needs memory.session.backend: redis" in one_error_line(result.stderr)


def test_server_stop_when_not_running(run: Run, cfg: Path) -> None:
    result = run("server", "stop")
    assert result.exit_code == 0
    assert "is not running" in result.stdout


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
