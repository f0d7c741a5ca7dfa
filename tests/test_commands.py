"""Slash commands: what an agent loop gets back, on both backends."""

from __future__ import annotations

import re

import pytest

from hermes_redis import SessionMemory
from hermes_redis.commands import handle
from tests import helpers


def questions(i: int) -> tuple[str, str]:
    return f"问题 {i}: 数据库用 MySQL 还是 PostgreSQL？", f"answer {i}: PostgreSQL"


def chat(mem: SessionMemory, turns: int = 3, user: str = "alice") -> str:
    return helpers.chat(mem, user, turns=turns, say=questions)


@pytest.mark.parametrize("text", ["hello", "", "   ", "what is /clear?", "/usr/bin/env python",
                                  "//comment", "/ clear", "/2fa code"])
def test_ordinary_text_is_none(mem: SessionMemory, text: str) -> None:
    sid = chat(mem, 1)
    assert handle(mem, sid, text) is None
    assert mem.info(sid).message_count == 2


def test_unknown_command_lists_the_commands(mem: SessionMemory) -> None:
    reply = handle(mem, chat(mem, 1), "/frobnicate now")
    assert reply is not None and reply.startswith("Unknown command /frobnicate.")
    for name in ("/clear", "/forget-session N", "--keyword WORD", "/remember TEXT", "/compact",
                 "/info"):
        assert name in reply


@pytest.mark.parametrize("text", ["/clear now", "/forget-session", "/forget-session 0",
                                  "/forget-session -1", "/forget-session two", "/forget-session ²",
                                  "/forget-session --keyword", "/forget-session --keyword ''",
                                  "/remember", "/remember   ", "/compact please", "/info x"])
def test_malformed_commands_get_a_usage_line_and_change_nothing(mem: SessionMemory,
                                                                text: str) -> None:
    sid = chat(mem)
    before = mem.info(sid)
    reply = handle(mem, sid, text)
    assert reply is not None and reply.startswith("Usage: /")
    assert "\n" not in reply
    after = mem.info(sid)
    assert (after.message_count, after.total_tokens, after.summary_seq) == (
        before.message_count, before.total_tokens, before.summary_seq)
    assert mem.memories("alice") == []


def test_clear_empties_context_and_keeps_history_and_memories(mem: SessionMemory) -> None:
    sid = chat(mem)
    mem.remember("alice", "项目用 PostgreSQL，不用 MySQL", session_id=sid)
    reply = handle(mem, sid, "/clear")
    assert reply == ("Cleared the context. The archive keeps its 6 messages; "
                     "persistent memories are kept.")
    ctx = mem.context(sid)
    assert ctx.messages == () and ctx.summary == ""
    assert ctx.memories == ("项目用 PostgreSQL，不用 MySQL",)
    assert len(mem.messages(sid)) == 6


def test_forget_session_last_turns(mem: SessionMemory) -> None:
    sid = chat(mem)
    assert handle(mem, sid, "/forget-session 2") == (
        "Forgot 4 messages in the last 2 turns; 2 messages, "
        f"{mem.info(sid).total_tokens} tokens remain.")
    assert [m.seq for m in mem.messages(sid)] == [1, 2]
    assert handle(mem, sid, "/forget-session --last 1") == (
        "Forgot 2 messages in the last 1 turn; 0 messages, 0 tokens remain.")
    assert mem.messages(sid) == []
    assert handle(mem, sid, "/forget-session 1") == "Nothing to forget: no message in the last 1 turn."


def test_forget_session_keyword_is_case_insensitive(mem: SessionMemory) -> None:
    sid = chat(mem)
    reply = handle(mem, sid, '/forget-session --keyword "mysql"')
    assert reply is not None and reply.startswith("Forgot 3 messages containing 'mysql'")
    left = mem.messages(sid)
    assert [m.role for m in left] == ["assistant"] * 3
    assert mem.info(sid).total_tokens == sum(m.token_count for m in left)
    assert handle(mem, sid, "/forget-session --keyword=ANSWER 1") == (
        "Forgot 1 message containing 'ANSWER 1'; 2 messages, "
        f"{sum(m.token_count for m in left if m.content != 'answer 1: PostgreSQL')} tokens remain.")
    assert [m.content for m in mem.messages(sid)] == ["answer 0: PostgreSQL", "answer 2: PostgreSQL"]


def test_remember_stores_for_the_sessions_user(mem: SessionMemory) -> None:
    sid = chat(mem, 1, user="bob")
    reply = handle(mem, sid, "/remember 喜欢简短的回答")
    assert reply == "Remembered for bob: 喜欢简短的回答"
    [entry] = mem.memories("bob")
    assert entry.content == "喜欢简短的回答" and entry.session_id == sid
    other = mem.create_session(user_id="bob")
    assert mem.context(other).memories == ("喜欢简短的回答",)


def test_compact_summarizes_older_turns(config_factory, backend: str) -> None:  # type: ignore[no-untyped-def]
    with SessionMemory(config_factory(backend, compression={"keep_recent": 1})) as mem:
        sid = chat(mem, 3)
        reply = handle(mem, sid, "/compact")
        assert reply is not None and reply.startswith("Compacted: the summary now covers seq 1–4")
        assert mem.info(sid).summary
        assert handle(mem, sid, "/compact") == (
            "Nothing to compact: no turns older than the ones kept verbatim.")


def test_info_reports_usage(mem: SessionMemory) -> None:
    sid = chat(mem)
    reply = handle(mem, sid, "/INFO")
    assert reply is not None
    lines = reply.splitlines()
    assert lines[0].startswith(f"Session {sid[:8]} · 问题 0") and lines[0].endswith("· active")
    assert lines[1].startswith("Messages: 6 total: ")
    assert re.fullmatch(r"Token usage: \d+ / 200K \(<1%\): verbatim \d+", lines[2]), lines[2]
    assert not any(line.startswith("⚠") for line in lines)


def test_info_past_80_percent_advises_remember_then_clear(config_factory, backend: str) -> None:  # type: ignore[no-untyped-def]
    config = config_factory(backend).with_overrides(model={"context_window": 1000,
                                                           "reply_reserve": 0})
    with SessionMemory(config) as mem:
        sid = helpers.chat(mem, "alice", turns=6, say=lambda i: (
            f"question {i}: " + "lorem ipsum " * 40, f"answer {i}: " + "dolor sit " * 40))
        usage = mem.context(sid).usage
        assert usage > 0.8
        reply = handle(mem, sid, "/info")
    assert reply is not None
    assert reply.splitlines()[-1] == (
        f"⚠ context is {round(usage * 100)}% full: /remember what matters, then /clear to start "
        "afresh; the archive keeps every turn")
    assert "forget" not in reply


def test_library_errors_come_back_as_text(mem: SessionMemory) -> None:
    assert handle(mem, "no-such-session", "/info") == (
        "Error: no session no-such-session; see `hermes-redis session list`")
    reply = handle(mem, "bad id!", "/clear")
    assert reply is not None and reply.startswith("Error: invalid session id")
    reply = handle(mem, "gone", "/forget-session --keyword MySQL")
    assert reply == "Error: no session gone; see `hermes-redis session list`"
