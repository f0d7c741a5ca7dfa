"""scripts/demo.py, what ``bash scripts/run.sh`` shows a newcomer (issue 34), run as a real
process on a private Redis: the compacted context at 2,000 tokens as its parts, recall of the
early fact, the memory a 记住 turn stored, the usage line — and a second run reuses its one
session instead of leaving another behind."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_redis import SessionMemory
from hermes_redis.store import embedded
from tests.helpers import isolated_config, write_config
from tests.redis_server import RedisServer, free_port

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from demo_chat import PORT, QUESTION, REMEMBER  # noqa: E402

PART = re.compile(r"^  (memories|opening|summary|recalled|newest)\s+([\d,]+) tokens\s+\d+%", re.M)


def demo_process(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "demo.py"), str(config)],
                          capture_output=True, text=True, timeout=180, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})  # this checkout's code


def demo(config: Path) -> str:
    done = demo_process(config)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert " INFO " not in done.stderr, "the worker's INFO line lands in the demo's output"
    return done.stdout


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer) -> tuple[Path, str, str]:
    if redis_server.proc is None:
        redis_server.start()
    config = isolated_config(tmp_path_factory.mktemp("demo"), redis_server.url)
    return config, demo(config), demo(config)


def test_the_context_is_shown_as_its_parts_within_the_budget(runs: tuple[Path, str, str]) -> None:
    _, out, _ = runs
    total = re.search(r"What the model gets at a 2,000-token window \(([\d,]+) tokens", out)
    assert total, out
    parts = {name: int(tokens.replace(",", "")) for name, tokens in PART.findall(out)}
    assert list(parts) == ["memories", "opening", "summary", "recalled", "newest"], out
    assert all(parts.values()), f"every part has tokens once compacted: {parts}"
    assert sum(parts.values()) == int(total.group(1).replace(",", "")) <= 2000
    appended = re.search(r"appended (\d+) messages \(([\d,]+) tokens\)", out)
    assert appended and int(appended.group(2).replace(",", "")) > 2000, "the history must not fit"
    assert re.search(r"compacted: the summary covers #1–#\d+", out)


def test_the_early_fact_is_recalled_for_the_question(runs: tuple[Path, str, str]) -> None:
    _, out, _ = runs
    recall = out.split("\nRecall:", 1)[1].split("\n\n", 1)[0]
    assert QUESTION[:40] in recall
    assert re.search(rf"brought back #\d+ \((user|assistant)\), said \d+ messages earlier: .*{PORT}",
                     recall), recall


def test_the_remember_turn_became_a_memory(runs: tuple[Path, str, str]) -> None:
    config, out, _ = runs
    memory = out.split("\nMemory:", 1)[1].split("\n\n", 1)[0]
    stored = REMEMBER.split("：", 1)[1].rstrip("。")
    assert "[trigger] from #" in memory and stored in memory, memory
    with SessionMemory.from_config(config) as mem:
        assert [m.content for m in mem.memories("demo")] == [stored]


def test_the_usage_line_is_shown(runs: tuple[Path, str, str]) -> None:
    _, out, _ = runs
    usage = re.search(r"^  Token usage: ([\d,]+) / 2,000 \((\d+)%\): memories \d+, summary \d+, "
                      r"recalled \d+, verbatim", out, re.M)
    assert usage, out  # issue 45: exact, not "2K / 2K (82%)"
    assert round(int(usage.group(1).replace(",", "")) / 20) == int(usage.group(2))
    assert "\n  Session demo-session · " in out, "the session id whole, not demo-ses"


def test_the_next_steps_say_why_info_shows_another_window(runs: tuple[Path, str, str]) -> None:
    config, out, _ = runs
    assert f"(info measures usage against model.context_window in {config}, 200K tokens: not " \
           "the 2,000 this demo set)" in out, out
    assert "redis-server keeps running" not in out, "a configured Redis is not the demo's"


def test_the_demo_says_the_embedded_redis_keeps_running(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "data"
    monkeypatch.setenv("HERMES_DATA_DIR", str(data))  # the tests' own would win over the file
    config = write_config({"archive": {"data_dir": str(data), "path": str(tmp_path / "m.db")}},
                          tmp_path / "config.yml")
    try:
        out = demo(config)
    finally:
        stopped = embedded.stop(data)
    assert stopped, "the demo left the embedded redis-server running"
    assert (f"\nThe embedded redis-server keeps running (data in {data}) for the commands above; "
            "stop it with: bash scripts/run.sh server stop\n") in out, out


def test_a_bad_config_or_redis_is_one_line(tmp_path: Path) -> None:
    """Issue 45: ``bash scripts/run.sh`` printed a traceback where the CLI gives one line."""
    bad = tmp_path / "bad.yml"
    bad.write_text("memory: [unclosed\n")
    dead = isolated_config(tmp_path, f"redis://127.0.0.1:{free_port()}/0")
    for config, code, text in [(bad, 2, f"Error: {bad}: invalid YAML at line 2"),
                               (dead, 5, "Error: cannot reach Redis at redis://127.0.0.1:")]:
        done = demo_process(config)
        assert done.returncode == code, done.stderr
        assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith(text), done.stderr
        assert done.stdout == ""


def test_a_second_run_reuses_its_session(runs: tuple[Path, str, str]) -> None:
    config, first, second = runs
    # timings may differ, and so may what tokens go where and the TTL left
    strip = re.compile(r"\d+\.\d+ s|\d+%|[\d,]+ tokens|[\d,]+ / 2,000|TTL: [^(]*\(")
    assert strip.sub("", first) == strip.sub("", second)
    with SessionMemory.from_config(config) as mem:
        sessions = mem.list_sessions(status="all")
        assert [s.session_id for s in sessions] == ["demo-session"]
        assert mem.info("demo-session").message_count == 59
