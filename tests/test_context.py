"""What the model sees past the threshold: opening turns, summary, recalled excerpts, newest
turns; within the budget at every budget (invariant 6)."""

from __future__ import annotations

import datetime as dt
import json
import math
import sys
import time

import pytest

from hermes_redis import SessionMemory
from hermes_redis.core.config import Config
from hermes_redis.core.errors import ConfigError, ValidationError
from hermes_redis.core.tokens import MESSAGE_OVERHEAD

TASK = "Task: build a billing service in Go with a PostgreSQL 16 database."
OLD_FACT = "The staging database password rotates every 45 days, by the vault cron job."
GAP_FACT = "We moved the deploy window to Thursday 14:00 UTC for the billing service."


def build(mem: SessionMemory, turns: int = 120, big_tool: bool = True) -> str:
    sid = mem.create_session()
    mem.append(sid, "user", TASK)
    mem.append(sid, "assistant", "Understood: Go, PostgreSQL 16, a billing service.")
    for i in range(turns):
        if i == 3:
            mem.append(sid, "user", OLD_FACT)
        elif i == turns - 15:
            mem.append(sid, "user", GAP_FACT)
        else:
            mem.append(sid, "user", f"step {i}: refactor the invoice module, part {i}")
        mem.append(sid, "assistant", f"done with part {i}; " + "details " * (5 + i % 40))
        if big_tool and i % 37 == 5:
            mem.append(sid, "tool", "log line\n" * 3000)
    return sid


def fact_long_ago(mem: SessionMemory, fact: str = OLD_FACT) -> str:
    """The task, ``fact``, then 150 turns of unrelated work."""
    sid = mem.create_session()
    mem.append(sid, "user", TASK)
    mem.append(sid, "user", fact)
    for i in range(150):
        mem.append(sid, "user", f"step {i}: refactor the invoice module")
        mem.append(sid, "assistant", "details " * 20)
    return sid


def sent_tokens(mem: SessionMemory, chat: list[dict[str, str]]) -> int:
    return sum(mem.tokenizer.count(m["content"]) + MESSAGE_OVERHEAD for m in chat)


@pytest.mark.parametrize("strategy", ["rolling_window", "summary", "hybrid"])
def test_context_never_exceeds_its_budget(config_factory, strategy):
    mem = SessionMemory(config_factory("memory", compression={"strategy": strategy}))
    sid = build(mem)
    for budget in (30, 60, 200, 700, 2000, 6000, 30000, None):
        for query in (None, "", "how often does the staging password rotate?"):
            ctx = mem.context(sid, budget, query=query)
            assert ctx.tokens <= ctx.budget, (budget, query)
            assert sent_tokens(mem, ctx.as_chat()) <= ctx.tokens  # the count is not optimistic
            assert ctx.messages and ctx.messages[-1].seq == mem.info(sid).last_seq
            seqs = [m.seq for m in ctx.messages]
            assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
            assert all(m.seq < ctx.first_seq for m in (*ctx.opening, *ctx.recalled))
    mem.close()


def test_query_recalls_an_old_message_in_seq_order_with_its_date(config_factory):
    mem = SessionMemory(config_factory("memory"))
    sid = mem.create_session()
    day = dt.datetime(2024, 3, 5, 10, tzinfo=dt.UTC).timestamp()
    mem.append(sid, "user", TASK, created_at=day)  # the opening turn: kept anyway
    mem.append(sid, "user", OLD_FACT, created_at=day)
    for i in range(150):
        mem.append(sid, "user", f"step {i}: refactor the invoice module", created_at=day + 86400)
        mem.append(sid, "assistant", f"done with part {i}; " + "details " * 20)
    ctx = mem.context(sid, 1500, query="How often does the staging password rotate?")
    assert [m.content for m in ctx.recalled][:1] == [OLD_FACT]
    assert [m.seq for m in ctx.recalled] == sorted(m.seq for m in ctx.recalled)
    text = "\n".join(m["content"] for m in ctx.as_chat())
    assert "5 March 2024:" in text and OLD_FACT in text
    assert ctx.as_dict()["recalled"][0]["content"] == OLD_FACT
    assert not mem.context(sid, 1500, query="").recalled  # "" asks for no recall
    mem.close()
    off = SessionMemory(config_factory("memory", compression={"recall": False}))
    sid = fact_long_ago(off)
    assert not off.context(sid, 1500, query="staging password rotate").recalled
    off.close()


@pytest.mark.parametrize("asked", ["What did we pick for the cache on 17 March 2024?",
                                   "what cache did we choose on March 17th, 2024",
                                   "2024-03-17 的 cache 方案是什么？", "2024年3月17日选了哪个 cache？"])
def test_a_query_that_names_a_day_recalls_that_day_first(config_factory, asked):
    """The same words on thirty days, more than the budget holds: the day the question names
    is recalled, though its message ranks last by words alone (the longest)."""
    mem = SessionMemory(config_factory("memory"))
    sid = mem.create_session()
    mem.append(sid, "user", TASK)
    start = dt.datetime(2024, 3, 1, 9, tzinfo=dt.UTC).timestamp()
    for d in range(30):
        name = "option " + "zq" + chr(97 + d % 26) + chr(97 + d // 26)
        said = f"cache decision: we go with {name}"
        if d == 16:  # 17 March
            said = f"after a long talk about budgets, latency and the team, the cache decision: {name}"
        mem.append(sid, "user", said, created_at=start + d * 86_400)
    for i in range(120):
        mem.append(sid, "user", f"step {i}: refactor the invoice module",
                   created_at=start + 40 * 86_400)
    picked = "option zqqa"
    ctx = mem.context(sid, 400, query=asked)
    assert picked in " ".join(m.content for m in ctx.recalled)
    assert len(ctx.recalled) < 30  # the budget holds some, not all
    undated = mem.context(sid, 400, query="which cache did we pick?")
    assert undated.recalled and picked not in " ".join(m.content for m in undated.recalled)
    mem.close()


@pytest.mark.parametrize("asked", ["which cache did we pick yesterday?", "昨天选了哪个 cache？",
                                   "the cache we chose 1 day ago"])
def test_a_query_that_says_yesterday_recalls_that_day_first(config_factory, asked):
    """Days counted back from now: the cache chosen yesterday, among thirty days of them."""
    mem = SessionMemory(config_factory("memory"))
    sid = mem.create_session()
    mem.append(sid, "user", TASK)
    now = time.time()
    for back in range(30, 0, -1):
        name = "option zq" + chr(97 + back % 26) + chr(97 + back // 26)
        said = f"cache decision: we go with {name}"
        if back == 1:
            said = f"after a long talk about budgets, latency and the team, the cache decision: {name}"
        mem.append(sid, "user", said, created_at=now - back * 86_400)
    for i in range(120):
        mem.append(sid, "user", f"step {i}: refactor the invoice module", created_at=now)
    recalled = " ".join(m.content for m in mem.context(sid, 400, query=asked).recalled)
    assert "option zqba" in recalled
    undated = mem.context(sid, 400, query="which cache did we pick?")
    assert "option zqba" not in " ".join(m.content for m in undated.recalled)
    mem.close()


def test_named_day_reads_the_common_date_forms():
    from hermes_redis.core.text import DAY, named_day
    start = dt.datetime(2023, 10, 13, tzinfo=dt.UTC).timestamp()
    for text in ("on 13 October 2023?", "October 13, 2023", "Oct. 13th 2023", "the 13th of oct 2023",
                 "2023-10-13", "at 2023-10-13T09:30Z", "2023年10月13日", "2023 年 10 月 13 号"):
        assert named_day(text) == (start - DAY, start + 2 * DAY), text
    assert named_day("on 3 June, 2023 and then 2024-01-01") == named_day("3 June 2023")
    for text in ("31 February 2023", "2023-13-01", "May I ask about 2023?", "October 2023", ""):
        assert named_day(text) is None, text
    now = start + 12 * 3600  # noon, 13 October 2023 (UTC)
    for text, back in (("what did we say today?", 0), ("yesterday's plan", 1), ("昨天的方案", 1),
                       ("the day before yesterday", 2), ("前天", 2), ("3 days ago", 3),
                       ("12 days ago", 12), ("3天前", 3), ("13 天以前", 13)):
        assert named_day(text, now) == (start - (back + 1) * DAY, start - (back - 2) * DAY), text
    assert named_day("yesterday") is None  # no now, no day to count back from
    assert named_day("yesterday, not on 1 May 2023", now) == named_day("12 October 2023")


def test_recall_finds_cjk_words_inside_sentences(config_factory):
    mem = SessionMemory(config_factory("memory"))
    sid = mem.create_session()
    mem.append(sid, "user", TASK)
    mem.append(sid, "user", "记住：我们这个项目用 PostgreSQL，不用 MySQL。")
    for i in range(120):
        mem.append(sid, "user", f"第{i}步：继续重构发票模块")
        mem.append(sid, "assistant", "好的，" + "细节 " * 30)
    ctx = mem.context(sid, 1200, query="项目用什么数据库？")
    assert any("PostgreSQL" in m.content for m in ctx.recalled)
    mem.close()


def test_opening_turn_stays_verbatim(config_factory):
    mem = SessionMemory(config_factory("memory"))
    sid = build(mem, big_tool=False)
    ctx = mem.context(sid, 2000)
    assert [m.content for m in ctx.opening][:1] == [TASK]
    assert ctx.as_chat()[0]["content"] == TASK
    mem.close()
    none = SessionMemory(config_factory("memory", compression={"keep_first": 0}))
    sid = build(none, big_tool=False)
    assert none.context(sid, 2000).opening == ()
    none.close()


def test_a_small_budget_still_gets_a_summary_of_everything_older(config_factory):
    """The workers summarized for the default budget; a smaller one folds the turns between
    the stored summary and its first verbatim turn in (here the GAP_FACT turn)."""
    mem = SessionMemory(config_factory("memory", max_messages=50,
                                       compression={"keep_recent": 20, "recall": False}))
    sid = build(mem, big_tool=False)
    stored = mem.info(sid).summary_seq
    ctx = mem.context(sid, 800)
    gap_seq = next(m.seq for m in mem.messages(sid) if m.content == GAP_FACT)
    assert stored < gap_seq < ctx.first_seq  # the stored summary does not cover it
    assert "Thursday 14:00 UTC" in ctx.summary
    mem.close()


def test_created_at_is_kept_and_checked(config_factory):
    mem = SessionMemory(config_factory("memory"))
    sid = mem.create_session()
    m = mem.append(sid, "user", "hello", created_at=1_700_000_000.25)
    assert m.created_at == 1_700_000_000.25
    assert mem.messages(sid)[0].created_at == 1_700_000_000.25
    for bad in (-1, math.nan, math.inf, "yesterday", True):
        with pytest.raises(ValidationError, match="created_at must be Unix seconds"):
            mem.append(sid, "user", "hello", created_at=bad)  # type: ignore[arg-type]
    assert len(mem.messages(sid)) == 1
    mem.close()


@pytest.mark.parametrize("compression", [{"recall_share": 0.8}, {"recall_share": -0.1},
                                         {"keep_first": -1}])
def test_context_shares_are_checked(compression):
    with pytest.raises(ConfigError, match="compression"):
        Config().with_overrides(memory={"session": {"compression": compression}})


def test_a_forgotten_turn_leaves_the_read_time_summary(config_factory):
    """Invariant 4 through the fold cache: the next read no longer summarizes it."""
    mem = SessionMemory(config_factory("memory", max_messages=50,
                                       compression={"keep_recent": 20, "recall": False}))
    sid = build(mem, big_tool=False)
    assert "Thursday 14:00 UTC" in mem.context(sid, 800).summary
    assert mem.forget_keyword(sid, "deploy window") == 1
    ctx = mem.context(sid, 800)
    assert ctx.summary and "Thursday" not in ctx.summary
    assert "Thursday" not in "\n".join(m["content"] for m in ctx.as_chat())
    mem.close()


def test_resume_and_info_show_what_was_recalled(tmp_path, config_factory):
    from click.testing import CliRunner

    from hermes_redis.cli.main import cli
    from hermes_redis.cli.render import context_shape, session_report

    mem = SessionMemory(config_factory("memory"))
    sid = fact_long_ago(mem)
    mem.append(sid, "user", "Remind me: when does the staging password rotate?")
    ctx = mem.context(sid, 1500)  # the query defaults to the newest user message
    assert OLD_FACT in [m.content for m in ctx.recalled]
    shape = context_shape(ctx)
    assert "1 opening + summary + " in shape and "recalled (#2" in shape, shape
    report = session_report(mem, sid)
    assert report.as_dict()["context"]["recalled"] == []  # the default budget: all verbatim
    mem.close()
    path = tmp_path / "config.yml"
    cfg = config_factory("memory")
    path.write_text(
        "memory:\n  session:\n    backend: memory\n"
        f"archive:\n  path: {cfg.archive_path}\n  data_dir: {cfg.archive.data_dir}\n"
        f"  url: {json.dumps(cfg.archive.url)}\n",  # null, or the cluster+pg stack's schema
        encoding="utf-8")
    out = CliRunner().invoke(cli, ["--config", str(path), "session", "resume", sid,
                                   "--budget", "1500", "--query", "staging password"])
    assert out.exit_code == 0, out.output
    assert "recalled (#2" in out.output and "Earlier excerpts from this conversation" in out.output
    assert OLD_FACT in out.output


def test_recall_leaves_out_words_that_are_everywhere(config_factory, monkeypatch):
    """A word in more messages than RECALL_MAX_POSTINGS costs more than it says: it is left
    out of the query, unless every word is that common (then the rarest stays)."""
    from hermes_redis.store.archive import base

    mem = SessionMemory(config_factory("memory"))
    sid = mem.create_session()
    for i in range(40):
        mem.append(sid, "user", f"invoice step {i}")
        mem.append(sid, "assistant", "ok")
    mem.append(sid, "user", "the zebra invoice is special")
    monkeypatch.setattr(base, "RECALL_MAX_POSTINGS", 10)
    # this stack's archive module (archive_pg imports the constant by value)
    monkeypatch.setattr(sys.modules[type(mem.cold).__module__], "RECALL_MAX_POSTINGS", 10)
    # issue 31: rarity is the session's own (recall_index); "invoice" alone still recalls
    hits = mem.cold.recall(sid, "invoice zebra", 0, 10**9, 5)
    assert [m.content for m in hits] == ["the zebra invoice is special"]
    assert len(list(mem.cold.recall(sid, "invoice", 0, 10**9, 5))) > 0
    mem.close()


def test_the_memories_are_counted_once_per_read_when_they_fit():
    """Every context() with persistent memories counts their text: once when it fits the
    memory share (it was twice), and what is reported is that count."""
    from hermes_redis.context.assembly import _fit_memories
    from hermes_redis.core.tokens import get_tokenizer

    tok = get_tokenizer("cl100k_base")
    counted: list[str] = []

    class Counting:
        def count_message(self, text: str) -> int:
            counted.append(text)
            return tok.count_message(text)

    memories = ["we deploy on Fridays", "the staging password rotates every 45 days"]
    kept, used = _fit_memories(memories, 4000, Counting())  # type: ignore[arg-type]
    assert kept == memories and len(counted) == 1
    assert used == tok.count_message(counted[0])
