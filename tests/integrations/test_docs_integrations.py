"""docs/integrations.md runs as written (issue 30): every ```python block, in order, in a
fresh process whose config (``$HERMES_CONFIG``) is a private Redis and archive, as a reader
who followed the page would run it; a ```text block right after a block is its exact
output. A block under ``<!-- not run: … -->`` (it needs an API key) is only compiled."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import isolated_config

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "integrations.md"
BLOCK = re.compile(r"(<!-- not run: [^>]*-->\n)?```python\n(.*?)^```\n(?:\n```text\n(.*?)^```\n)?",
                   re.S | re.M)


def blocks() -> list[tuple[bool, str, str | None]]:
    """(runs, code, its output or None) of each python block of the page."""
    return [(not m.group(1), m.group(2), m.group(3)) for m in BLOCK.finditer(PAGE.read_text("utf-8"))]


def test_the_page_has_examples_and_distinct_session_ids() -> None:
    text = PAGE.read_text("utf-8")
    assert len(blocks()) >= 3 and "OPENAI_API_KEY" in text and "pip install -e '.[" in text
    ids = re.findall(r'(?:HermesSession|HermesChatMessageHistory)\("([^"]+)"', text)
    assert len(ids) == len(set(ids)) >= 3, ids


def test_every_example_runs_as_written(tmp_path: Path, redis_url: str) -> None:
    config = isolated_config(tmp_path, redis_url)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HERMES_", "OPENAI_"))}
    env.update(HERMES_CONFIG=str(config), PYTHONPATH=str(ROOT))
    for runs, code, output in blocks():
        compile(code, str(PAGE), "exec")
        if not runs:
            continue
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=env, cwd=tmp_path, timeout=300)
        assert done.returncode == 0, f"{code}\n---\n{done.stderr[-3000:]}"
        if output is not None:
            assert done.stdout == output, f"{code}\n--- printed:\n{done.stdout}"


@pytest.mark.parametrize("runs,code,output", blocks())
def test_no_example_needs_a_key_unless_it_says_so(runs: bool, code: str, output: str | None) -> None:
    assert runs or "OPENAI_API_KEY" not in code  # the marker above says why it is not run
    assert not runs or "ScriptedModel" in code or "Agent(" not in code  # an agent run is offline
