"""scripts/demo.py, what ``bash scripts/run.sh`` shows a newcomer (issue 34), run as a real
process on a private Redis: the compacted context at 2,000 tokens as its parts, recall of the
early fact, the memory a 记住 turn stored, the usage line — and a second run reuses its one
session instead of leaving another behind."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_redis import SessionMemory
from tests.helpers import isolated_config
from tests.redis_server import RedisServer

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from demo_chat import PORT, QUESTION, REMEMBER  # noqa: E402

PART = re.compile(r"^  (memories|opening|summary|recalled|newest)\s+([\d,]+) tokens\s+\d+%", re.M)


def demo(config: Path) -> str:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "demo.py"), str(config)],
                          capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
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
    assert re.search(r"^  Token usage: .* / 2K \(\d+%\): memories \d+, summary \d+, recalled \d+, "
                     r"verbatim", out, re.M), out


def test_a_second_run_reuses_its_session(runs: tuple[Path, str, str]) -> None:
    config, first, second = runs
    # timings may differ, and so may what tokens go where and the TTL left
    strip = re.compile(r"\d+\.\d+ s|\d+%|[\d,]+ tokens|\b\dK\b|TTL: [^(]*\(")
    assert strip.sub("", first) == strip.sub("", second)
    with SessionMemory.from_config(config) as mem:
        sessions = mem.list_sessions(status="all")
        assert [s.session_id for s in sessions] == ["demo-session"]
        assert mem.info("demo-session").message_count == 59
