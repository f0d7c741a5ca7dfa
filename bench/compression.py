"""Compression: tokens sent to the model per strategy, and how many planted facts survive.

The conversation fits the default budget whole, and then every strategy sends all of it
(invariant 6); so the strategies are compared at an 8,000-token budget, where they differ.

The conversation of ``bench/conversation.py`` is appended turn by turn to a SessionMemory
on the in-process ``memory`` backend, where flush and compaction run inline after each
append exactly as an RQ worker would run them; then ``context()`` is what the model gets.
"""

from __future__ import annotations

import time
from pathlib import Path

from bench import conversation
from bench.common import Section, num, open_memory, verdict

STRATEGIES = ("none", "rolling_window", "summary", "hybrid")
TARGET_SAVING = 0.40
BUDGET = 8_000  # a third of the conversation: the strategies have to choose
TARGET_FACTS = 0.90
OTHER_SEEDS = (1, 2, 3, 42, 99)


def settings(strategy: str) -> dict[str, object]:
    """``none`` keeps every message verbatim; the others use the shipped defaults."""
    if strategy == "none":
        return {"max_messages": 1_000_000, "compression": {"enabled": False}}
    return {"compression": {"enabled": True, "strategy": strategy}}


def run_strategy(strategy: str, conv: conversation.Conversation, workdir: Path) -> dict[str, float]:
    mem = open_memory(None, workdir, backend="memory", **settings(strategy))
    try:
        sid = mem.create_session("bench")
        started = time.perf_counter()
        for role, text in conv.messages:
            mem.append(sid, role, text)
        seconds = time.perf_counter() - started
        ctx = mem.context(sid, None if strategy == "none" else BUDGET)
        sent = "\n".join(m["content"] for m in ctx.as_chat())
        survived = conv.survived(sent)
        return {"tokens": ctx.tokens, "messages": len(ctx.messages),
                "summary_tokens": mem.tokenizer.count(ctx.summary) if ctx.summary else 0,
                "facts": len(survived), "seconds": seconds,
                "lost": [f.needle for f in conv.facts if f not in survived]}  # type: ignore[dict-item]
    finally:
        mem.close()


def run(workdir: Path, quick: bool = False) -> Section:
    conv = conversation.build()
    results = {s: run_strategy(s, conv, workdir) for s in STRATEGIES}
    base = results["none"]["tokens"]
    n_facts = len(conv.facts)
    sec = Section(
        f"Compression — {conv.turns}-turn conversation ({len(conv.messages)} messages), "
        f"{n_facts} facts planted in turns 1–{conv.planted_until_turn}",
        ["strategy", "tokens sent", "vs none", "kept messages", "summary tokens",
         "facts kept", "append+compact µs/msg"])
    for s in STRATEGIES:
        r = results[s]
        sec.add(s, num(r["tokens"]), f"{r['tokens'] / base:.0%}" if base else "n/a",
                int(r["messages"]), num(r["summary_tokens"]),
                f"{int(r['facts'])}/{n_facts} ({r['facts'] / n_facts:.0%})",
                f"{r['seconds'] / len(conv.messages) * 1e6:,.0f}")
    h = results["hybrid"]
    saving = 1 - h["tokens"] / base if base else 0.0
    kept = h["facts"] / n_facts
    sec.note(f"hybrid sends {saving:.0%} fewer tokens than none (target ≥ {TARGET_SAVING:.0%}: "
             f"{verdict(saving >= TARGET_SAVING)}) and keeps {kept:.0%} of planted facts "
             f"(target ≥ {TARGET_FACTS:.0%}: {verdict(kept >= TARGET_FACTS)}).")
    kinds: dict[str, list[int]] = {}
    for f in conv.facts:
        kinds.setdefault(f.kind, [0, 0])[1] += 1
        kinds[f.kind][0] += f.needle not in h["lost"]  # type: ignore[operator]
    sec.note("hybrid by kind: " + ", ".join(f"{k} {a}/{b}" for k, (a, b) in kinds.items()))
    if not quick:
        sweep = []
        for seed in OTHER_SEEDS:
            other = conversation.build(seed=seed)
            hy = run_strategy("hybrid", other, workdir)
            no = run_strategy("none", other, workdir)
            sweep.append((1 - hy["tokens"] / no["tokens"], hy["facts"] / len(other.facts)))
        sec.note(f"Same generator, {len(OTHER_SEEDS)} other seeds (other filler, other fact "
                 f"positions): hybrid saves {_span([s for s, _ in sweep])} of tokens and keeps "
                 f"{_span([k for _, k in sweep])} of facts.")
    if h["lost"]:
        sec.note("hybrid lost: " + ", ".join(f"`{x}`" for x in h["lost"]))  # type: ignore[union-attr]
    sec.note("Defaults: max_messages 50, keep_recent 10 turns, summary_max_tokens 2000, "
             f"offline extractive summarizer; context() at {BUDGET:,} tokens (none: the "
             "default budget, which holds every message), recall for the newest user message.")
    return sec


def _span(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.0%}" if f"{lo:.0%}" == f"{hi:.0%}" else f"{lo:.0%}–{hi:.0%}"


if __name__ == "__main__":
    from bench.common import scratch_dir

    print(run(scratch_dir()).render())

