"""Hermes Agent's plugins (issue 41), library mode on the bench Redis: what each hook costs
on Hermes' threads. A user with a 2,000-turn conversation (tool calls every fifth turn,
archived) and 20 earlier conversations holding facts; ``prefetch`` asks about a fact of each
in turn, ``compress`` builds the context Hermes gets at its default threshold (50 % of a
128,000-token window), ``sync_turn`` is what the agent thread pays per turn (a queue put).
No LLM call is made on the agent's thread by either plugin: the summary is the worker's."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from bench.common import Section, make_config, percentile, quiet_gc, timed, us
from hermes_redis import SessionMemory
from hermes_redis.integrations.hermes_agent.engine import HermesRedisContextEngine
from hermes_redis.integrations.hermes_agent.provider import HermesRedisMemoryProvider
from hermes_redis.integrations.hermes_agent.settings import Settings, forget_api
from hermes_redis.integrations.hermes_agent.turns import rows
from tests.model_server import ModelServer
from tests.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[1]
HERMES_PYTHON = ROOT / ".venv-hermes" / "bin" / "python"  # scripts/hermes_venv.sh
PROBE = """
import json, sys, time
sys.path.insert(0, sys.argv[2])
from bench.hermes_agent import conversation
from agent.context_compressor import ContextCompressor
c = ContextCompressor(model="summary", base_url=sys.argv[1], api_key="x", provider="custom",
                      config_context_length=128000, quiet_mode=True)
messages = conversation(200)
t = time.perf_counter()
out = c.compress(messages)
print(json.dumps({"seconds": time.perf_counter() - t, "out": len(out)}))
"""

TURNS = 2000


def turn(i: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "user", "content": f"step {i}: how do we handle "
                                  f"the invoice export for tenant {i % 37}?"}]
    if i % 5 == 0:
        out += [{"role": "assistant", "content": "", "tool_calls": [
            {"id": f"c{i}", "type": "function",
             "function": {"name": "terminal", "arguments": '{"cmd": "make export"}'}}]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": f"exported {i * 7} rows"}]
    out.append({"role": "assistant", "content": f"For tenant {i % 37} the export runs nightly; "
                f"step {i} writes a CSV with currency codes next to each amount."})
    return out


def conversation(turns: int) -> list[dict[str, Any]]:
    """Hermes' list for a ``turns``-turn conversation and a new question."""
    return [{"role": "system", "content": "You are Hermes."},
            *[m for i in range(1, turns + 1) for m in turn(i)],
            {"role": "user", "content": "and what about tenant 12's export?"}]


def hermes_compressor(tokens: Any) -> tuple[float, int, int, int] | None:
    """Hermes' own ContextCompressor on the 200-turn conversation, its model a recording
    server: (agent-thread seconds, LLM calls, their input tokens, messages left); None
    without .venv-hermes."""
    if not HERMES_PYTHON.exists():
        return None
    with ModelServer() as model:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
        env["HERMES_HOME"] = str(Path(model.url.split("//")[1].replace(":", "_")).name)
        done = subprocess.run([str(HERMES_PYTHON), "-c", PROBE, model.url, str(ROOT)],
                              capture_output=True, text=True, env=env, timeout=300,
                              cwd=ROOT)
        if done.returncode != 0:
            return None
        got = json.loads(done.stdout.strip().splitlines()[-1])
        bodies = model.chat_bodies()
        sent = sum(tokens.count(str(m.get("content", ""))) for b in bodies for m in b["messages"])
        return got["seconds"], len(bodies), sent, got["out"]


def run(server: RedisServer, workdir: Path, quick: bool) -> Section:
    n_turns = 400 if quick else TURNS
    config = make_config(server.url, workdir)
    path = workdir / "hermes-bench.yml"
    path.write_text(yaml.safe_dump({
        "redis": {"url": server.url, "key_prefix": config.redis.key_prefix,
                  "queue": config.redis.queue},
        "archive": {"data_dir": str(config.data_dir), "path": str(config.archive_path)}}))
    mem = SessionMemory(config)
    user = "bench-user"
    history = [m for i in range(1, n_turns + 1) for m in turn(i)]
    sid = "20261207_090000_bench1"
    mem.create_session(user_id=user, session_id=sid)
    batch = rows(f"{sid}/bench/0", history)
    for i in range(0, len(batch), 64):
        mem.append_many(sid, batch[i:i + 64])
    facts = []
    for k in range(20):
        other = mem.create_session(user_id=user)
        fact = f"the staging secret for project{k} is zebra-{k}-{k * 13}"
        mem.append_many(other, [{"role": "user", "content": f"note: {fact}"},
                                {"role": "assistant", "content": "Noted."}])
        mem.flush(other)
        facts.append(f"what is the staging secret for project{k}?")
    mem.flush(sid)
    mem.compact(sid)

    settings = Settings(config=str(path), user_id=user)
    p = HermesRedisMemoryProvider(settings)
    p.initialize("20261207_090001_benchp", hermes_home=str(workdir / "home"), user_id=user)
    p.sid = sid  # the provider serves the 2,000-turn conversation
    found = sum(f"zebra-{k}-{k * 13}" in p.prefetch(q) for k, q in enumerate(facts))
    queries = iter(facts * 20)
    with quiet_gc():
        pre, _ = timed(lambda: p.prefetch(next(queries)), 100)
    engine = HermesRedisContextEngine()
    engine.update_model("bench", 128_000)
    engine.on_session_start(p.hermes_id)
    messages = conversation(n_turns)
    out = engine.compress(messages)
    with quiet_gc():
        comp, _ = timed(lambda: engine.compress(messages), 20)
    small = history[-6:]
    with quiet_gc():
        sync, _ = timed(lambda: p.sync_turn("", "", messages=small), 200)
    p.flush(30)
    p.shutdown()
    forget_api(settings)
    mem.close()

    sec = Section(f"Hermes Agent plugins, library mode ({n_turns:,}-turn conversation, "
                  "20 earlier ones)", ["hook (Hermes' thread)", "p50", "p95", "target"])
    sec.add("prefetch(query): memories + recalled excerpts ≤ 800 tokens", us(percentile(pre, 50)),
            us(percentile(pre, 95)), "p50 ≤ 20 ms")
    sec.add(f"compress(): {len(messages):,} messages → {len(out)}", us(percentile(comp, 50)),
            us(percentile(comp, 95)), "p50 ≤ 50 ms")
    sec.add("sync_turn(): a queue put", us(percentile(sync, 50)), us(percentile(sync, 95)),
            "returns at once")
    peer = hermes_compressor(engine.tokenizer)
    if peer is not None:
        seconds, calls, sent, left = peer
        sec.add(f"Hermes' own compressor, 200 turns: {calls} LLM call(s), {sent:,} input tokens, "
                f"{left} messages left", us(seconds * 1e6), "", "(its model answers at once)")
        sec.note("Hermes' compressor sends the span to its model on the agent's thread on every "
                 "compression; with a real model that call takes seconds. hermes-redis keeps the "
                 "whole session while it fits and otherwise the worker's summary, recalled "
                 "excerpts and the newest turns, with every turn still in the archive")
    else:
        sec.note("Hermes' own compressor: skipped (no .venv-hermes: bash scripts/hermes_venv.sh)")
    sec.note(f"prefetch found the fact of the session asked about for {found} of 20 questions")
    sec.note(f"compress keeps {engine._cost(out):,} tokens of {engine._cost(messages):,} "
             f"(threshold {engine.threshold_tokens:,}); LLM calls on the agent thread: 0")
    return sec
