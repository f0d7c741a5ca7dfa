"""prefix: how often the context's text before the newest turns stays byte-identical from one
call to the next, the part a provider's prompt cache can reuse (issue 30).

A 200-turn conversation (user ≈ 40 tokens, assistant ≈ 120) at a budget of 8,000 tokens
(the configured window less the reply), two persistent memories, a worker compacting after
every turn (the in-process burst the tests use: flush, then compaction when over the caps).
After each turn, ``context()`` at the default query (the newest user message), and its
``Context.prefix_text()``: memories, opening, summary and recalled excerpts as ``as_chat``
sends them. Reported: the share of consecutive calls (from the first that is not the whole
session) whose prefix is byte-identical, and why the others changed.

    .venv/bin/python -m bench.prefix [--turns 200] [--budget 8000]
"""

from __future__ import annotations

import argparse
import random
from collections import Counter
from pathlib import Path

from bench.common import make_config, scratch_dir, start_redis
from hermes_redis import SessionMemory
from hermes_redis.core.models import Context
from hermes_redis.jobs.worker import run as run_worker

WORDS = ("deploy", "cache", "shard", "replica", "latency", "budget", "schema", "index", "query",
         "tenant", "billing", "invoice", "quota", "rollout", "canary", "metric", "alert", "trace",
         "span", "queue", "retry", "backoff", "lease", "token", "session", "archive", "summary",
         "window")


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)) + "."


def why(before: Context, after: Context) -> str:
    """The first part of the prefix that differs between two consecutive contexts."""
    if before.memories != after.memories:
        return "memories"
    if before.opening != after.opening:
        return "opening"
    if before.summary != after.summary:
        return ("summary (stored)" if before.summarized_through != after.summarized_through
                else "summary (read-time fold)")
    return "recalled"


def measure(redis_url: str, workdir: Path, turns: int, budget: int) -> tuple[int, int, Counter[str]]:
    """(identical consecutive prefixes, consecutive pairs compared, causes of the changes)."""
    cfg = make_config(redis_url, workdir).with_overrides(
        model={"context_window": budget + 8192, "reply_reserve": 8192})
    rng = random.Random(30)
    same, pairs, causes = 0, 0, Counter[str]()
    with SessionMemory(cfg) as mem:
        sid = mem.create_session(user_id="bench")
        mem.remember("bench", "The team deploys on Tuesdays")
        mem.remember("bench", "Billing runs in the eu-west region")
        previous: Context | None = None
        for turn in range(turns):
            mem.append_many(sid, [
                {"role": "user", "content": f"Turn {turn}: {sentence(rng, 30)}"},
                {"role": "assistant", "content": " ".join(sentence(rng, 12) for _ in range(8))}])
            run_worker(mem, burst=True)
            ctx = mem.context(sid, budget)
            if previous is not None and not previous.whole:
                pairs += 1
                if previous.prefix_text() == ctx.prefix_text():
                    same += 1
                else:
                    causes[why(previous, ctx)] += 1
            previous = ctx
    return same, pairs, causes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--budget", type=int, default=8000)
    args = parser.parse_args()
    server = start_redis()
    try:
        same, pairs, causes = measure(server.url, scratch_dir(), args.turns, args.budget)
    finally:
        server.cleanup()
    share = same / pairs if pairs else 0.0
    print(f"{args.turns} turns at {args.budget:,} tokens: {same} of {pairs} consecutive "
          f"contexts kept their prefix byte-identical ({share:.0%})")
    for cause, n in causes.most_common():
        print(f"  changed by {cause}: {n}")


if __name__ == "__main__":
    main()
