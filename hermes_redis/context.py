"""What goes to the model: the whole session while it fits, the best of it when it does not.

The seed's resume rule (invariant 6): while every message since the last clear fits in
``compression.threshold`` × the budget, the context *is* that history, verbatim, with the
older part read from the archive (``max_messages`` bounds what Redis keeps, not what the
model sees). Past that: relevant memories (their share), the summary (its share), and the
newest turns that fit, read from the hot list backwards page by page; the newest user
message is always in, capped if it alone is too big. Either way the cost grows with the
budget, never with the length of the history.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from hermes_redis.hot import HotStore, Meta
from hermes_redis.models import Context, Message, memories_text, summary_text
from hermes_redis.tokens import MESSAGE_OVERHEAD, Tokenizer

# every message with seq > the argument, in seq order; None when the archive cannot be read
History = Callable[[int], list[Message] | None]


def build_context(hot: HotStore, sid: str, meta: Meta, memories: Sequence[str], budget: int,
                  window: int, tokenizer: Tokenizer, *, history: History | None = None,
                  threshold: float = 1.0, summary_share: float = 0.25) -> Context:
    kept_memories, used = _fit_memories(memories, budget, tokenizer)
    whole = _whole(meta, history, budget, used, threshold)
    if whole is not None:
        cost = sum(m.token_count + MESSAGE_OVERHEAD for m in whole)
        first = whole[0].seq if whole else int(meta.get("last_seq", "0") or 0) + 1
        return Context(sid, tuple(whole), "", tuple(kept_memories), used + cost, budget, window,
                       first)
    summary_seq = int(meta.get("summary_seq", "0"))
    summary, cost = _fit_summary(meta.get("summary", ""), int(budget * summary_share), tokenizer)
    if used + cost > budget:
        summary, cost = "", 0
    used += cost
    picked = _newest(hot, sid, meta, summary_seq, budget - used, tokenizer)
    used += sum(m.token_count + MESSAGE_OVERHEAD for m in picked)
    first = picked[0].seq if picked else summary_seq + 1
    return Context(sid, tuple(picked), summary, tuple(kept_memories), used, budget, window, first)


def _whole(meta: Meta, history: History | None, budget: int, used: int,
           threshold: float) -> list[Message] | None:
    """Every message since the last clear, when the session's counters say it fits within
    ``threshold`` × the budget (checked again on what was read); None when it does not."""
    if history is None:
        return None
    room = min(int(budget * threshold), budget - used)
    count = int(meta.get("message_count", "0") or 0)
    if int(meta.get("total_tokens", "0") or 0) + count * MESSAGE_OVERHEAD > room:
        return None
    messages = history(int(meta.get("cleared_seq", "0") or 0))
    if messages is None or sum(m.token_count + MESSAGE_OVERHEAD for m in messages) > room:
        return None
    return messages


def _fit_summary(summary: str, room: int, tokenizer: Tokenizer) -> tuple[str, int]:
    """The summary within its share of the budget (capped and re-counted), and its cost."""
    if not summary:
        return "", 0
    room -= MESSAGE_OVERHEAD + tokenizer.count(summary_text(""))
    if room <= 16:
        return "", 0
    if tokenizer.count(summary) > room:
        summary = tokenizer.cap(summary, room, "the archive")
    return (summary, tokenizer.count_message(summary_text(summary))) if summary else ("", 0)


def _newest(hot: HotStore, sid: str, meta: Meta, summary_seq: int, room: int,
            tokenizer: Tokenizer) -> list[Message]:
    """The newest messages after the summary that fit ``room``, oldest first. The newest turn
    (from the newest user message on) is always in, its big messages capped to fit."""
    picked: list[Message] = []  # newest first while reading
    used = 0
    tail = iter(hot.tail(sid, page_size=_page_size(room, meta)))
    for m in tail:
        if m.seq <= summary_seq:
            break
        cost = m.token_count + MESSAGE_OVERHEAD
        if used + cost > room:
            if not any(p.role == "user" for p in picked):  # the newest turn does not fit
                turn = [*picked, m]
                for older in tail if m.role != "user" else ():
                    if older.seq <= summary_seq:
                        break
                    turn.append(older)
                    if older.role == "user":
                        break
                if turn[-1].role == "user":
                    return _fit_turn(turn[::-1], room, tokenizer)
            break
        picked.append(m)
        used += cost
    picked.reverse()
    while picked and picked[0].role == "tool":  # a tool result without its call confuses models
        picked.pop(0)
    return picked


def _fit_turn(turn: list[Message], room: int, tokenizer: Tokenizer) -> list[Message]:
    """The newest turn within ``room``: the small messages stay whole and the big ones share
    what is left equally, each capped (head and tail kept). Water-filling: the total fits."""
    costs = sorted(m.token_count + MESSAGE_OVERHEAD for m in turn)
    left, level = room, room
    for i, c in enumerate(costs):
        if c * (len(costs) - i) > left:
            level = left // (len(costs) - i)
            break
        left -= c
    out = []
    for m in turn:
        capped = _capped(m, level, tokenizer)
        if capped is not None:
            out.append(capped)
    return out


def _capped(m: Message, room: int, tokenizer: Tokenizer) -> Message | None:
    """``m`` within ``room`` tokens including its overhead (head and tail kept); None when
    there is no room at all."""
    limit = room - MESSAGE_OVERHEAD
    if m.token_count <= limit:
        return m
    if limit < 8:
        return None
    content = tokenizer.cap(m.content, limit, "the archive")
    return replace(m, content=content, token_count=tokenizer.count(content)) if content else None


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
