"""Full-text search over both tiers: CJK text findable, ranked hits, filters, and the CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_redis import SessionMemory
from hermes_redis.cli.main import cli
from hermes_redis.core.errors import ValidationError
from hermes_redis.core.text import fts_matches, fts_text, fts_tokens
from tests.helpers import isolated_config


def fill(mem: SessionMemory, user: str = "alice") -> str:
    sid = mem.create_session(user_id=user)
    mem.append(sid, "user", "帮我写一个 FastAPI 的用户认证接口")
    mem.append(sid, "assistant", "好的：用 JWT，登录后签发 access token 和 refresh token。")
    mem.append(sid, "user", "認証のテストも追加してください")
    mem.append(sid, "assistant", "사용자 인증 테스트를 추가했습니다")
    return sid


def test_cjk_is_found_in_the_hot_backlog_and_then_in_the_archive(rmem: SessionMemory) -> None:
    sid = fill(rmem)
    [hot] = rmem.search("认证")  # no worker ran: the message exists only in Redis
    assert (hot.session_id, hot.seq, hot.tier) == (sid, 1, "hot")
    assert "用户认证接口" in hot.snippet

    rmem.flush(sid)
    [cold] = rmem.search("认证")
    assert (cold.session_id, cold.seq, cold.tier) == (sid, 1, "archive")
    assert cold.title == "帮我写一个 FastAPI 的用户认证接口" and cold.score > 0


@pytest.mark.parametrize("query, seqs", [
    ("认证", [1]), ("认证接口", [1]), ("用户认证", [1]), ("FastAPI 认证", [1]),
    ("認証", [3]), ("인증", [4]), ("jwt", [2]), ("REFRESH token", [2]),
])
def test_words_and_cjk_substrings_match(mem: SessionMemory, query: str, seqs: list[int]) -> None:
    sid = fill(mem)
    mem.flush(sid)
    assert sorted(h.seq for h in mem.search(query)) == seqs


@pytest.mark.parametrize("query, seqs", [
    ('"', []), ("AND", []), ("OR x", []), ("NEAR(", []), ("*", []), ("(", []), ("a:b", []),
    ("-", []), ("？", []), ("JWT AND", []),  # AND is a word to find, not an operator
    ('"refresh', [2]), ("(FastAPI)", [1]), ("认证*", [1]), ("access-token", [2]),
    ("refresh:token", [2]), ("NEAR(jwt", []), ("token OR", []),
])
def test_fts_syntax_in_queries_is_plain_text(mem: SessionMemory, query: str,
                                             seqs: list[int]) -> None:
    """Quotes, operators and brackets are punctuation in the user's words: never an FTS
    error, never an operator; the words around them are matched as written."""
    sid = fill(mem)
    mem.flush(sid)
    assert sorted(h.seq for h in mem.search(query)) == seqs


@pytest.mark.parametrize("query, seqs", [
    ("jwt -", [2]), ("认证 ？", [1]), ("token ...", [2]), ("refresh —", [2]), ("-", []),
    ("! ?", []),
])
def test_a_word_without_letters_is_ignored_in_both_tiers(rmem: SessionMemory, query: str,
                                                         seqs: list[int]) -> None:
    """A punctuation-only word has nothing to match: the hot scan and the archive both skip
    it (the archive found nothing for "jwt -", and the hot scan matched every message for
    "-"), so a hit does not change when its message is archived."""
    sid = fill(rmem)
    hot = sorted(h.seq for h in rmem.search(query))
    rmem.flush(sid)
    assert hot == seqs
    assert sorted(h.seq for h in rmem.search(query)) == seqs


def test_hits_are_ranked_and_limited(mem: SessionMemory) -> None:
    sid = mem.create_session(user_id="alice")
    mem.append(sid, "user", "deploy notes: " + "unrelated words here " * 30 + "redis once")
    mem.append(sid, "assistant", "redis redis redis: cache in redis")
    for i in range(5):
        mem.append(sid, "user", f"filler {i} about redis")
    mem.flush(sid)
    hits = mem.search("redis")
    assert hits[0].seq == 2 and hits[-1].seq == 1
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert len(mem.search("redis", limit=3)) == 3


def test_user_filter_deleted_and_forgotten(mem: SessionMemory) -> None:
    a = fill(mem, "alice")
    b = fill(mem, "bob")
    mem.flush(a)
    mem.flush(b)
    assert {h.session_id for h in mem.search("认证")} == {a, b}
    assert {h.session_id for h in mem.search("认证", user_id="bob")} == {b}
    mem.delete(b)
    assert {h.session_id for h in mem.search("认证")} == {a}
    mem.forget_keyword(a, "认证")
    assert mem.search("认证") == []
    with pytest.raises(ValidationError, match=r"^search query is empty: give at least one word$"):
        mem.search("   ")


def test_cli_search_table_and_json(tmp_path: Path, redis_url: str) -> None:
    path = isolated_config(tmp_path, redis_url)
    with SessionMemory.from_config(path) as mem:
        sid = fill(mem)
        mem.flush(sid)

    def run(*args: str) -> tuple[int, str, str]:
        result = CliRunner().invoke(cli, ["--config", str(path), "search", *args])
        return result.exit_code, result.stdout, result.stderr

    code, out, _ = run("认证")
    assert code == 0
    header, row = out.splitlines()
    assert header.split() == ["SESSION", "SEQ", "ROLE", "TITLE", "SNIPPET"]
    assert row.startswith(sid[:8]) and "帮我写一个 FastAPI 的用户认证接口" in row

    code, out, _ = run("token", "--json", "--user", "alice", "--limit", "5")
    [hit] = json.loads(out)
    assert hit["session_id"] == sid and hit["seq"] == 2 and hit["role"] == "assistant"
    assert hit["tier"] == "archive" and "refresh token" in hit["snippet"]

    assert run("kubernetes") == (0, "No messages match 'kubernetes'.\n", "")
    assert json.loads(run("kubernetes", "--json")[1]) == []
    code, _, err = run("")
    assert code == 2 and err.strip() == "Error: search query is empty: give at least one word"


_TEXT = st.text(st.sampled_from([*"aAbÉéüß_-.,!? 12", "认", "证", "カ", "한", "İ", "\u0301"]),
                max_size=40)


@settings(max_examples=500, deadline=None)
@given(text=_TEXT, query=_TEXT)
def test_tokens_and_matches_are_those_of_the_spaced_text(text: str, query: str) -> None:
    """fts_tokens is one regex pass over what the index sees (fts_text: each CJK character
    spaced out, then unicode61's letter/digit runs, lower-cased); fts_matches finds a query
    exactly where a scan of those tokens does (each word's tokens in a row, the last a
    prefix): the hot tier and the archive give the same hits."""
    def tokens(t: str) -> list[str]:
        return re.findall(r"[^\W_]+", fts_text(t).lower())

    assert fts_tokens(text) == tokens(text)
    have, wants = tokens(text), [w for w in map(tokens, query.split()) if w]
    scanned = bool(wants) and all(
        any(have[i:i + len(w) - 1] == w[:-1] and have[i + len(w) - 1].startswith(w[-1])
            for i in range(len(have) - len(w) + 1)) for w in wants)
    assert fts_matches(query, text) == scanned
