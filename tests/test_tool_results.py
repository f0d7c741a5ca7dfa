"""Oversized tool results: summarized by kind within the limit; the archive keeps them whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hermes_redis.context.tool_results import kind_of, summarize
from hermes_redis.core.tokens import get_tokenizer

TOK = get_tokenizer("cl100k_base")
REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("module", ["session_memory.py", "store/archive/sqlite.py", "context/assembly.py"])
def test_code_becomes_its_outline(module):
    src = (REPO / "hermes_redis" / module).read_text()
    out = summarize(src, 2000, TOK, "the archive")
    assert kind_of(src) == "code" and TOK.count(out) <= 2000 < TOK.count(src)
    assert out.startswith("[tool result: code,")
    defs = [line.strip() for line in src.splitlines() if line.lstrip().startswith("def ")]
    assert sum(1 for d in defs if d in out) >= len(defs) // 2  # signatures, not a head and tail


def test_json_becomes_its_shape_with_short_values():
    data = {"items": [{"id": i, "name": f"n{i}"} for i in range(3000)], "total": 3000,
            "next": "cursor-abc"}
    out = summarize(json.dumps(data), 200, TOK, "the archive")
    assert TOK.count(out) <= 200
    assert "3000 items" in out and "total: 3000" in out and '"cursor-abc"' in out


def test_logs_keep_their_ends_and_every_error():
    lines = [f"2026-12-03 10:00:{i % 60:02d} INFO step {i} ok" for i in range(3000)]
    lines[1700] = "2026-12-03 10:28:00 ERROR disk full on /var/lib/redis"
    out = summarize("\n".join(lines), 300, TOK, "the archive")
    assert TOK.count(out) <= 300 and "disk full on /var/lib/redis" in out
    assert lines[0] in out and lines[-1] in out


def test_other_text_keeps_head_and_tail():
    text = "word " * 5000
    out = summarize(text, 100, TOK, "the archive")
    assert kind_of(text) == "text" and TOK.count(out) <= 100 and "tokens cut" in out


def test_an_oversized_result_is_summarized_in_context_and_whole_in_the_archive(mem):
    src = (REPO / "hermes_redis" / "store" / "archive" / "sqlite.py").read_text()
    sid = mem.create_session()
    mem.append(sid, "user", "show me archive.py")
    m = mem.append(sid, "tool", src)
    assert m.token_count <= mem.config.session.tool_result_max_tokens
    assert m.content.startswith("[tool result: code,") and "def write(" in m.content
    mem.flush(sid)
    assert mem.cold.messages(sid)[-1].content == src  # the full text can be fetched


def test_the_seeds_key_path_works_and_a_conflict_is_an_error(tmp_path):
    from hermes_redis.core import config as config_mod
    from hermes_redis.core.errors import ConfigError

    path = tmp_path / "c.yml"
    path.write_text("advanced:\n  context_management:\n    tool_result_max_tokens: 500\n"
                    "    tool_result_summarize: false\n")
    cfg = config_mod.load(path)
    assert cfg.session.tool_result_max_tokens == 500 and cfg.session.tool_result_summarize is False
    path.write_text("memory:\n  session:\n    tool_result_max_tokens: 900\n"
                    "advanced:\n  context_management:\n    tool_result_max_tokens: 500\n")
    with pytest.raises(ConfigError, match="differ: keep one"):
        config_mod.load(path)


def test_a_tool_result_forgotten_before_its_archive_leaves_no_full_text(rmem):
    """Redis keeps an oversized result's full text until the archive has it (the in-process
    backend archives at once). A pop or a forget first must take it too: no flush would
    ever delete it, and it has no TTL."""
    mem = rmem
    src = (REPO / "hermes_redis" / "store" / "archive" / "sqlite.py").read_text()
    sid = mem.create_session()
    mem.append(sid, "user", "show me archive.py")
    ids = [mem.append(sid, "tool", src + f"\n# copy {i}").message_id for i in range(2)]
    assert set(mem.hot.full_texts(sid, ids)) == set(ids)  # kept: nothing is archived yet
    popped = mem.pop(sid)
    assert popped is not None and popped.message_id == ids[1]
    assert set(mem.hot.full_texts(sid, ids)) == {ids[0]}
    assert mem.forget_last(sid, 1) == 2  # the turn: the question and the other result
    assert mem.hot.full_texts(sid, ids) == {}
