"""The offline summarizer keeps what matters; the chat summarizer talks to a real HTTP
endpoint and falls back to the offline one when it fails."""

import datetime as dt
import re
import time
from http.server import BaseHTTPRequestHandler
from typing import ClassVar

import pytest

from hermes_redis import SessionMemory
from hermes_redis.context.summarizers import (
    SUMMARIZERS,
    ChatSummarizer,
    ExtractiveSummarizer,
    chat_prompt,
    parse_summary,
    provider,
)
from hermes_redis.core import config
from hermes_redis.core.models import Message
from hermes_redis.core.tokens import get_tokenizer
from tests.helpers import chat_model, serve

TOK = get_tokenizer("cl100k_base")


def msgs(*pairs):
    return [Message("s", i + 1, role, text, TOK.count(text)) for i, (role, text) in enumerate(pairs)]


def at(day: int, month: int = 5, year: int = 2023) -> float:
    return dt.datetime(year, month, day, 14, 0, tzinfo=dt.UTC).timestamp()


def dated(*triples, start=1):
    """(when, role, text) as messages said at ``when``."""
    return [Message("s", start + i, role, text, TOK.count(text), created_at=when)
            for i, (when, role, text) in enumerate(triples)]


def fold(summarizer, messages, max_tokens, batch=40, previous=""):
    """Fold ``messages`` in batches, as compaction does."""
    for i in range(0, len(messages), batch):
        previous = summarizer.summarize(previous, messages[i:i + batch], max_tokens)
    return previous


def test_extractive_keeps_decisions_numbers_paths_and_open_items():
    history = msgs(
        ("user", "帮我写一个 FastAPI 的用户认证接口"),
        ("assistant", "We decided: access token 30 min, refresh token 7 d. Sounds fun!"),
        ("user", "How do we store passwords?"),
        ("assistant", "Use bcrypt + salt, see app/auth/security.py. Nice weather today."),
        ("assistant", "Open question: rate limiting per IP?"),
    )
    text = ExtractiveSummarizer(TOK).summarize("", history, 500)
    sections = parse_summary(text)
    assert any("FastAPI" in t for t in sections["Goal"])  # was "Discussed": the user's request
    assert any("30 min" in t for t in sections["Decisions"])
    assert any("bcrypt" in t for t in sections["Decisions"])
    assert "app/auth/security.py" in sections["Files"]
    assert any("rate limiting" in t for t in sections["Open items"])
    assert "weather" not in text and "fun" not in text


def test_extractive_summary_is_running_and_bounded():
    first = ExtractiveSummarizer(TOK).summarize("", msgs(("assistant", "We chose PostgreSQL 16.")), 300)
    many = msgs(*[("assistant", f"Fact {i}: port {8000 + i} is used by service{i}.") for i in range(200)])
    second = ExtractiveSummarizer(TOK).summarize(first, many, 300)
    assert TOK.count(second) <= 300
    assert "PostgreSQL 16" in second  # decisions outlive facts when space runs out


_Handler = chat_model("Decisions:\n- use JWT")


@pytest.fixture
def endpoint():
    with serve(_Handler) as url:
        yield url


def test_chat_summarizer_calls_the_endpoint(endpoint):
    chat = ChatSummarizer("tiny", endpoint, "k-123", 5, ExtractiveSummarizer(TOK))
    assert chat.summarize("", msgs(("user", "pick auth")), 200) == "Decisions:\n- use JWT"
    call = _Handler.seen[-1]
    assert call["model"] == "tiny" and call["auth"] == "Bearer k-123"
    assert "pick auth" in call["messages"][-1]["content"]


def test_chat_summarizer_falls_back_offline():
    chat = ChatSummarizer("tiny", "http://127.0.0.1:1/v1", None, 1, ExtractiveSummarizer(TOK))
    out = chat.summarize("", msgs(("assistant", "We decided to use Redis 7.")), 200)
    assert "Redis 7" in out


def test_providers_are_registered_by_name():
    endpoint = config.Summarizer(base_url="http://127.0.0.1:1/v1", api_key="k-1", timeout=3.0)
    offline = ExtractiveSummarizer(TOK)
    assert provider("default", endpoint.base_url) == "offline"  # no model named
    assert provider("tiny", None) == provider("tiny", "") == "offline"  # no endpoint to ask
    assert provider("tiny", endpoint.base_url) == "chat"
    assert SUMMARIZERS["offline"]("default", endpoint, offline) is offline
    chat = SUMMARIZERS["chat"]("tiny", endpoint, offline)
    assert isinstance(chat, ChatSummarizer) and chat.name == "chat:tiny"
    assert (chat.base_url, chat.api_key, chat.timeout, chat.fallback) == (
        "http://127.0.0.1:1/v1", "k-1", 3.0, offline)
    with pytest.raises(ValueError, match="base_url"):
        SUMMARIZERS["chat"]("tiny", config.Summarizer(), offline)


def test_configured_chat_summarizer_is_used_for_compaction(config_factory, endpoint):
    cfg = config_factory("memory", max_messages=4,
                         compression={"summary_model": "tiny", "keep_recent": 1})
    cfg = cfg.with_overrides(summarizer={"base_url": endpoint})
    with SessionMemory(cfg) as mem:
        sid = mem.create_session()
        for i in range(4):
            mem.append(sid, "user", f"q{i}")
            mem.append(sid, "assistant", f"a{i}")
        assert mem.info(sid).summary == "Decisions:\n- use JWT"  # the compaction asked the model
        ctx = mem.context(sid)  # the whole session fits the default budget: all of it, verbatim
    assert ctx.summary == "" and [m.content for m in ctx.messages][:2] == ["q0", "a0"]


def test_extractive_keeps_versions_whole_names_first_and_skips_code():
    history = msgs(
        ("assistant", "Priya owns the rollout. We will use Next.js 14 for the frontend."),
        ("assistant", "```\nfor i in range(10):\n    print(i)\n```\nThat loop is only an example."),
        ("assistant", "The cache TTL is 300 seconds."),
        ("assistant", "Update: the cache TTL is 600 seconds."),
    )
    text = ExtractiveSummarizer(TOK).summarize("", history, 500)
    assert "Priya" in text and "Next.js 14" in text
    assert "print(i)" not in text
    assert "300 seconds" in text and "600 seconds" in text  # a changed value is not a duplicate


def test_extractive_keeps_cjk_decisions_and_open_items():
    history = msgs(("user", "我们决定使用 PostgreSQL，不用 MySQL。缓存之后再说！"),
                   ("assistant", "好的。TODO: add tests for src/auth/login.py"))
    sections = parse_summary(ExtractiveSummarizer(TOK).summarize("", history, 300))
    assert any("PostgreSQL" in t and "MySQL" in t for t in sections["Decisions"])
    assert any("缓存" in t for t in sections["Open items"])
    assert any("src/auth/login.py" in t for t in sections["Open items"])
    assert "src/auth/login.py" in sections["Files"]


def test_lines_carry_their_date_and_speaker():
    history = dated(
        (at(8), "system", "Conversation session 1, 1:56 pm on 8 May, 2023"),
        (at(8), "user", "Caroline: I went to a LGBTQ support group yesterday and it was powerful."),
        (at(8), "assistant", "Melanie: I painted that lake sunrise last year, it hangs in the hall."),
        (at(25), "assistant", "We moved the nightly backup to 03:00 UTC on db-2."),
    )
    text = ExtractiveSummarizer(TOK).summarize("", history, 500)
    lines = text.splitlines()
    assert "8 May 2023:" in lines and "25 May 2023:" in lines
    assert lines.index("8 May 2023:") < lines.index("25 May 2023:")  # one heading per date
    may8 = lines[lines.index("8 May 2023:") + 1 : lines.index("25 May 2023:")]
    assert any(ln.startswith("- Caroline: ") and "support group" in ln and "7 May" in ln
               for ln in may8)  # "yesterday" is resolved against the message's date
    assert any(ln.startswith("- Melanie: ") and "2022" in ln for ln in may8)
    assert any(ln.startswith("- assistant: ") and "03:00 UTC" in ln for ln in lines)
    assert "session 1" not in text  # the heading already says when
    assert text.count("8 May 2023") == 1


def test_small_talk_is_dropped_and_kept_lines_are_compressed():
    history = dated(
        (at(8), "user", "Caroline: Hey Mel! Good to see you! How are you?"),
        (at(8), "assistant", "Melanie: Hey Caroline! Thanks! Totally agree! That's awesome!"),
        (at(8), "user", "Caroline: You'd be a great counselor! I'm so proud of you."),
        (at(8), "assistant", "Melanie: Wow, yeah, I signed up for a pottery class on Tuesday, you know."),
        (at(8), "user", "Caroline: Thank you so much, talk to you soon!"),
    )
    text = ExtractiveSummarizer(TOK).summarize("", history, 500)
    body = [ln for ln in text.splitlines() if ln.startswith("- ")]
    assert len(body) == 1 and "pottery class" in body[0]
    for chatter in ("Hey", "Good to see", "How are you", "Thanks", "agree", "awesome",
                    "counselor", "proud", "Wow", "yeah", "you know", "talk to you"):
        assert chatter not in text


def _timeline(days: int = 30, per_day: int = 20):
    """A long chat: every day two people swap small talk and a few facts, each fact with a
    word of its own (``item<day>x<k>``)."""
    out = []
    for d in range(days):
        when = at(1, 1) + d * 86400 * 3
        for k in range(per_day):
            who = "Ana" if k % 2 else "Ben"
            if k % 4 == 0:
                text = f"{who}: I bought a new item{d}x{k} at the Rivermarket store for 12 dollars."
            else:
                text = f"{who}: That's so great, I'm really happy for you!"
            out.append((when, "user" if k % 2 else "assistant", text))
    return dated(*out)


def _facts_by_third(text: str, days: int = 30) -> list[int]:
    kept = [sum(f"item{d}x" in text for d in range(t * days // 3, (t + 1) * days // 3))
            for t in range(3)]
    return kept


def test_summary_covers_the_folded_range_evenly():
    text = fold(ExtractiveSummarizer(TOK), _timeline(), 600)
    assert TOK.count(text) <= 600
    thirds = _facts_by_third(text)
    assert min(thirds) >= 6 and max(thirds) <= 2 * min(thirds), thirds
    assert "1 January 2023:" in text and "29 March 2023:" in text  # first and last days


def test_an_outgrown_summary_resummarizes_its_older_lines_instead_of_dropping_them():
    s = ExtractiveSummarizer(TOK)
    history = _timeline(days=12)
    first = fold(s, history[:120], 2000)  # six days, roomy: the lines verbatim
    assert "bought new item0x0 at Rivermarket store for 12 dollars" in first
    text = fold(s, history[120:], 260, previous=first)  # twelve days in far less room
    assert TOK.count(text) <= 260
    assert "1 January 2023:" in text  # the oldest date is still there...
    assert "item0x" in text and "bought new item0x0 at" not in text  # ...compressed
    assert sum(f"item{d}x" in text for d in range(6)) >= 5  # older days kept, not dropped


def test_shrink_fits_keeps_even_coverage_and_is_fast():
    s = ExtractiveSummarizer(TOK)
    text = fold(s, _timeline(), 2000)
    started = time.perf_counter()
    small = s.shrink(text, 500)
    elapsed = time.perf_counter() - started
    assert TOK.count(small) <= 500 < TOK.count(text)
    thirds = _facts_by_third(small)
    assert min(thirds) >= 3 and max(thirds) <= 2 * min(thirds), thirds
    assert elapsed < 0.1
    assert s.shrink(text, 5000) == text and s.shrink(small, 500) == small


def test_a_summary_in_the_old_section_format_is_folded_in():
    old = "Decisions:\n- use JWT\nFiles:\n- app/auth/jwt.py\nOpen items:\n- key rotation?"
    text = ExtractiveSummarizer(TOK).summarize(old, msgs(("assistant", "We chose Redis 7.")), 300)
    sections = parse_summary(text)
    assert "use JWT" in sections["Decisions"] and "app/auth/jwt.py" in sections["Files"]
    assert "key rotation?" in sections["Open items"]
    assert any("Redis 7" in t for t in sections["Decisions"])


def test_chat_prompt_is_structured_and_incremental():
    history = dated((at(8), "user", "Caroline: I went to the support group."),
                    (at(9), "assistant", "Noted: we'll use PostgreSQL."))
    prompt = chat_prompt("Goal: plan the week", history, 400)
    for heading in ("Goal:", "Decisions:", "Facts:", "Files:", "Open items:"):
        assert heading in prompt
    assert "Previous summary:\nGoal: plan the week" in prompt
    assert "8 May 2023, Caroline: I went to the support group." in prompt
    assert "9 May 2023, assistant: Noted: we'll use PostgreSQL." in prompt


class _Failing(BaseHTTPRequestHandler):
    calls: ClassVar[list[str]] = []

    def do_POST(self):  # http.server's naming
        _Failing.calls.append(self.path)
        self.send_response(500)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def failing_endpoint():
    _Failing.calls.clear()
    with serve(_Failing) as url:
        yield url


def test_chat_summarizer_cools_down_after_a_failure(failing_endpoint):
    chat = ChatSummarizer("tiny", failing_endpoint, None, 5, ExtractiveSummarizer(TOK), cooldown=60)
    first = chat.summarize("", msgs(("assistant", "We decided to use Redis 7.")), 200)
    second = chat.summarize(first, msgs(("assistant", "We chose PostgreSQL 16.")), 200)
    assert len(_Failing.calls) == 1  # not called again within the cooldown
    assert "Redis 7" in second and "PostgreSQL 16" in second  # the offline summary meanwhile
    again = ChatSummarizer("tiny", failing_endpoint, None, 5, ExtractiveSummarizer(TOK), cooldown=0)
    again.summarize("", msgs(("user", "a")), 200)
    again.summarize("", msgs(("user", "b")), 200)
    assert len(_Failing.calls) == 3  # without a cooldown every call tries the endpoint


def test_one_long_day_is_covered_evenly_and_decisions_survive():
    history = []
    for i in range(60):
        history.append(("user", f"Can you fix the failing test in tests/test_mod{i}.py? "
                                f"KeyError on line {i * 3}."))
        history.append(("assistant", f"The bug is in src/pkg/mod{i}.py: the cache key uses user_id. "
                                     f"Fixed it and bumped the version to v1.{i}."))
        history.append(("tool", "ok"))
        if i == 5:
            history.append(("user", "We will use PostgreSQL 16, not MySQL. "
                                    "TODO: migrate the schema by Friday."))
    text = fold(ExtractiveSummarizer(TOK), msgs(*history), 600)
    assert TOK.count(text) <= 600
    assert "PostgreSQL 16" in text and "MySQL" in text and "migrate schema by Friday" in text
    assert "Goal: Can you fix the failing test in tests/test_mod0.py?" in text
    body = text.split("\n", 2)[2]  # without the goal and the file list
    kept = {int(a or b) if (a or b) else int(c) // 3
            for a, b, c in re.findall(r"mod(\d+)\.py|\bv1\.(\d+)\b|\bline (\d+)\b", body)}
    thirds = [sum(t * 20 <= i < (t + 1) * 20 for i in kept) for t in range(3)]
    assert min(thirds) >= 8, (thirds, sorted(kept))  # not only the newest part of the day
