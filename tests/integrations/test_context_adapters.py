"""The adapters hand the framework the budgeted context (issue 30): while the session fits,
exactly the stored items; past that, one system item (memories, summary, dated recalled
excerpts) and the newest items as added, within the budget, never a call apart from its
output. And a 200-turn agent run with the SDK's scripted model and a worker: every model
input within the budget, a fact from turn 3 recalled at turn 200."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from hermes_redis import SessionMemory
from hermes_redis.core.items import render
from hermes_redis.core.models import PARTS
from hermes_redis.core.tokens import MESSAGE_OVERHEAD
from hermes_redis.integrations.langchain import HermesChatMessageHistory
from hermes_redis.integrations.openai_agents import HermesSession, links
from hermes_redis.jobs.worker import run as run_worker

pytestmark = pytest.mark.anyio
set_tracing_disabled(True)

WORDS = (
    "harbor", "violet", "engine", "maple", "quartz", "lantern", "meadow", "copper", "falcon",
    "river", "canvas", "pepper", "summit", "willow", "cobalt", "thunder", "garnet", "prairie",
    "velvet", "glacier", "orchard", "marble", "tundra", "saffron", "beacon",
)


def small(config_factory: Any, backend: str = "redis", window: int = 2000) -> SessionMemory:
    """A SessionMemory whose default budget (window less the reply) is small: 1,500 tokens."""
    return SessionMemory(config_factory(backend, max_messages=12).with_overrides(
        model={"context_window": window, "reply_reserve": 500}))


def filler(rng: random.Random, n: int = 14) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def tokens_of(mem: SessionMemory, item: Any) -> int:
    """An item as the context counts it: its text and the per-message overhead."""
    text = item["content"] if isinstance(item, dict) and item.get("role") == "system" and \
        isinstance(item.get("content"), str) else render(item, 1 << 30)
    return mem.tokenizer.count(text) + MESSAGE_OVERHEAD


def no_half_pairs(items: list[Any]) -> None:
    made = set().union(*(links(i)[0] for i in items))
    answered = set().union(*(links(i)[1] for i in items))
    assert made == answered, (made, answered)


async def test_a_short_session_is_exactly_what_was_added(config_factory, backend):
    mem = small(config_factory, backend)
    mem.create_session(user_id="alice", session_id="short")
    mem.remember("alice", "Alice drinks green tea")  # memories do not change a session that fits
    session = HermesSession("short", memory=mem, user_id="alice")
    items = [{"role": "user", "content": "hi"},
             {"type": "function_call", "name": "f", "arguments": "{}", "call_id": "c1"},
             {"type": "function_call_output", "call_id": "c1", "output": "ok"},
             {"role": "assistant", "content": "hello"}]
    await session.add_items(items)
    assert await session.get_items() == items
    history = HermesChatMessageHistory("short-lc", memory=mem, user_id="alice")
    added = [HumanMessage("hi"), AIMessage("hello")]
    history.add_messages(added)
    assert history.messages == added
    mem.close()


def long_session(mem: SessionMemory, write: Any, turns: int = 60) -> None:
    rng = random.Random(7)
    for turn in range(turns):
        write(turn, f"question {turn}: {filler(rng)}", f"answer {turn}: {filler(rng, 30)}")
        if turn % 10 == 9:
            maintain(mem)
    maintain(mem)


def maintain(mem: SessionMemory) -> None:
    """A burst worker on Redis; the memory backend maintains as it appends."""
    if mem.queue is not None:
        run_worker(mem, burst=True)


@pytest.mark.parametrize("budget", [None, 700])
async def test_openai_session_past_its_budget(config_factory, backend, budget):
    mem = small(config_factory, backend)
    session = HermesSession("long", memory=mem, user_id="alice", budget=budget)
    added: list[Any] = []

    def write(turn: int, question: str, answer: str) -> None:
        turn_items = [{"role": "user", "content": question}]
        if turn % 4 == 0:
            turn_items += [{"type": "function_call", "name": "lookup", "call_id": f"c{turn}",
                            "arguments": json.dumps({"q": question})},
                           {"type": "function_call_output", "call_id": f"c{turn}",
                            "output": answer}]
        turn_items.append({"role": "assistant", "content": answer})
        session._store.add([{"role": "user" if "role" in i and i["role"] == "user" else
                             ("tool" if i.get("type") == "function_call_output" else "assistant"),
                             "content": "", "item": i} for i in turn_items])
        added.extend(turn_items)

    long_session(mem, write)
    mem.remember("alice", "Alice's team ships on Thursdays")
    limit = budget or mem.config.context_budget
    items = await session.get_items()
    system, newest = items[0], items[1:]
    assert system["role"] == "system" and "Summary of the earlier conversation" in system["content"]
    assert "Thursdays" in system["content"]
    assert sum(tokens_of(mem, i) for i in items) <= limit
    assert newest == added[-len(newest):]  # the newest items exactly as added
    assert newest[-1] == added[-1] and any(i.get("role") == "user" for i in newest)
    no_half_pairs(newest)
    ctx = mem.context("long", budget)
    assert sum(ctx.parts[p] for p in PARTS) == ctx.tokens <= limit and not ctx.whole
    assert await session.get_items(limit=3) == added[-3:]  # a limit: stored items, as today
    raw = HermesSession("long", memory=mem, raw=True)
    assert await raw.get_items() == added
    mem.close()


async def test_langchain_history_past_its_budget(config_factory, backend):
    mem = small(config_factory, backend)
    history = HermesChatMessageHistory("long-lc", memory=mem, user_id="bob", budget=600)
    added: list[Any] = []

    def write(turn: int, question: str, answer: str) -> None:
        msgs: list[Any] = [HumanMessage(question)]
        if turn % 3 == 0:
            msgs += [AIMessage("", tool_calls=[{"name": "lookup", "args": {"q": question},
                                                "id": f"t{turn}", "type": "tool_call"}]),
                     ToolMessage(answer, tool_call_id=f"t{turn}")]
        msgs.append(AIMessage(answer))
        history.add_messages(msgs)
        added.extend(msgs)

    long_session(mem, write)
    got = history.messages
    assert isinstance(got[0], SystemMessage) and "Summary" in str(got[0].content)
    newest = got[1:]
    assert newest == added[-len(newest):] and newest[-1] == added[-1]
    total = mem.tokenizer.count_message(str(got[0].content)) + sum(
        mem.tokenizer.count(render(m.model_dump(), 1 << 30) if not isinstance(m.content, str)
                            else m.content) + MESSAGE_OVERHEAD for m in newest)
    assert total <= 600 + 8 * len(newest)  # the tool calls' rendering is what the context counts
    ids = {c["id"] for m in newest if isinstance(m, AIMessage) for c in m.tool_calls}
    assert ids == {m.tool_call_id for m in newest if isinstance(m, ToolMessage)}
    assert HermesChatMessageHistory("long-lc", memory=mem, raw=True).messages == added
    mem.close()


@function_tool
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"notes on {topic}: " + " ".join(WORDS[:12])


async def test_two_hundred_turns_stay_within_the_budget_and_recall_turn_3(config_factory):
    mem = small(config_factory, "redis")
    budget = mem.config.context_budget
    session = HermesSession("agent-200", memory=mem, user_id="carol")
    model = ScriptedModel()
    agent = Agent(name="helper", model=model, tools=[lookup])
    rng = random.Random(3)
    fact = "My locker combination at the Zurich office is 4417."
    seen = 0
    for turn in range(1, 201):
        question = fact if turn == 3 else f"Turn {turn}: {filler(rng, 10)}?"
        if turn == 200:
            question = "What is my locker combination at the Zurich office?"
        if turn % 7 == 0:
            model.enqueue([function_call("lookup", json.dumps({"topic": filler(rng, 2)}),
                                         call_id=f"call_{turn}")])
        model.enqueue([assistant_message("4417" if turn == 200 else f"noted: {filler(rng, 12)}")])
        result = await Runner.run(agent, question, session=session,
                                  run_config=session.run_config())
        for call in model.calls[seen:]:
            items = list(call.input)
            start = max(i for i, it in enumerate(items) if it.get("role") == "user")
            history, this_turn = items[:start], items[start:]
            assert this_turn[0]["content"] == question
            assert sum(tokens_of(mem, i) for i in history) <= budget, turn
            no_half_pairs(history)
        seen = len(model.calls)
        if turn % 10 == 0:
            run_worker(mem, burst=True)
    assert result.final_output == "4417"
    last = model.calls[-1].input
    assert last[0]["role"] == "system"
    recalled = last[0]["content"].split("Earlier excerpts from this conversation")[1]
    assert "4417" in recalled  # recalled for the question asked, under its date
    assert not any("4417" in json.dumps(i) for i in last[1:-1])  # not verbatim: through recall
    assert mem.info("agent-200").summary
    mem.close()


def test_a_context_read_after_an_append_holds_it_while_a_worker_runs(config_factory, tmp_path):
    """Invariant: whatever the worker process is doing (archiving, compacting, extracting),
    the context read right after an acknowledged append contains it; the progress fields
    never run ahead of what was appended and only move forward."""
    import os
    import subprocess
    import sys
    import time

    from tests.helpers import write_config

    cfg = config_factory("redis", max_messages=8).with_overrides(
        model={"context_window": 1200, "reply_reserve": 200})
    path = write_config(cfg, tmp_path / "worker.yml")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen([sys.executable, "-m", "workers"],
                                  env={**env, "HERMES_CONFIG": str(path)},
                                  stdout=out, stderr=subprocess.STDOUT)
    rng = random.Random(11)
    try:
        with SessionMemory(cfg) as mem:
            sid = mem.create_session(user_id="erin")
            before = (0, 0, 0)
            for i in range(150):
                stored = mem.append(sid, "user" if i % 2 == 0 else "assistant",
                                    f"message {i}: {filler(rng, 20)}")
                ctx = mem.context(sid)
                assert ctx.messages[-1].message_id == stored.message_id, i
                now = (ctx.archived_through, ctx.summarized_through, ctx.extracted_through)
                assert all(b <= n <= stored.seq for b, n in zip(before, now, strict=True)), (before, now)
                assert sum(ctx.parts.values()) == ctx.tokens <= ctx.budget
                before = now
            deadline = time.monotonic() + 30
            while (mem.info(sid).backlog or not mem.info(sid).summary_seq) and \
                    time.monotonic() < deadline:
                time.sleep(0.05)
            ctx = mem.context(sid)
            assert ctx.archived_through == ctx.extracted_through == stored.seq  # it caught up
            assert 0 < ctx.summarized_through < stored.seq and ctx.summary, log.read_text()[-3000:]
    finally:
        worker.terminate()
        worker.wait(10)
