"""What goes to the model: memories and summary first, then the newest turns that fit.

Reads the hot list backwards page by page and stops at the budget, so the cost grows
with the budget, never with the length of the history (invariant 6).
"""

from __future__ import annotations

from collections.abc import Sequence

from hermes_redis.hot import HotStore, Meta
from hermes_redis.models import Context, Message, memories_text, summary_text
from hermes_redis.tokens import MESSAGE_OVERHEAD, Tokenizer


def build_context(hot: HotStore, sid: str, meta: Meta, memories: Sequence[str], budget: int,
                  window: int, tokenizer: Tokenizer) -> Context:
    summary = meta.get("summary", "")
    summary_seq = int(meta.get("summary_seq", "0"))
    kept_memories, used = _fit_memories(memories, budget, tokenizer)
    if summary:
        room = budget - used - MESSAGE_OVERHEAD - tokenizer.count(summary_text(""))
        if tokenizer.count(summary) > room:
            summary = tokenizer.cap(summary, max(room, 0), "the archive") if room > 16 else ""
        cost = tokenizer.count_message(summary_text(summary)) if summary else 0
        if used + cost > budget:
            summary, cost = "", 0
        used += cost
    picked: list[Message] = []
    for m in hot.tail(sid, page_size=_page_size(budget, meta)):
        if m.seq <= summary_seq:
            break
        cost = m.token_count + MESSAGE_OVERHEAD
        if used + cost > budget:
            break
        picked.append(m)
        used += cost
    picked.reverse()
    while picked and picked[0].role == "tool":  # a tool result without its call confuses models
        used -= picked.pop(0).token_count + MESSAGE_OVERHEAD
    first = picked[0].seq if picked else summary_seq + 1
    return Context(sid, tuple(picked), summary, tuple(kept_memories), used, budget, window, first)


def _page_size(budget: int, meta: Meta) -> int:
    """About as many messages as the budget holds at the session's mean size (its counters),
    plus a margin, so one read usually does; entries past the budget are never decoded."""
    count = int(meta.get("message_count", "0") or 0)
    mean = max(1, int(meta.get("total_tokens", "0") or 0)) / count if count > 0 else 64
    return max(16, min(1024, int(budget / (mean + MESSAGE_OVERHEAD) * 1.25) + 8))


def _fit_memories(memories: Sequence[str], budget: int, tokenizer: Tokenizer) -> tuple[list[str], int]:
    """Newest memories win when they do not all fit in a quarter of the budget."""
    kept: list[str] = []
    for memory in reversed(memories):
        trial = [memory, *kept]
        if tokenizer.count_message(memories_text(trial)) > budget // 4:
            break
        kept = trial
    return kept, tokenizer.count_message(memories_text(kept)) if kept else 0
