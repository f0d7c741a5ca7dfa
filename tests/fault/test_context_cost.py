"""Invariant 6 under a long unarchived history (workers down): ``context()`` stays within
its budget and reads a number of hot entries that grows with the budget, not the history."""

from __future__ import annotations

import pytest

from hermes_redis import SessionMemory
from hermes_redis.context.assembly import FOLD_MAX_MESSAGES
from tests.fault.conftest import figures


@pytest.mark.parametrize("history", [100, 3000])
def test_context_cost_follows_the_budget(config_factory, history):
    mem = SessionMemory(config_factory("redis", max_messages=10_000))
    sid = mem.create_session()
    pipe_msgs = [("user" if i % 2 == 0 else "assistant", f"message {i} " + "word " * 30)
                 for i in range(history)]
    for role, text in pipe_msgs:
        mem.append(sid, role, text)
    read: list[int] = []
    client = mem.hot.client
    lrange = client.lrange

    def counted(*args: object) -> list[bytes]:
        items = lrange(*args)
        read.append(len(items))
        return items

    client.lrange = counted  # type: ignore[method-assign]
    for budget in (200, 2000):
        read.clear()
        ctx = mem.context(sid, budget=budget)
        assert ctx.tokens <= budget
        assert ctx.messages[-1].content.startswith(f"message {history - 1} ")
        seqs = [m.seq for m in ctx.messages]
        assert seqs == list(range(history - len(seqs) + 1, history + 1))  # newest, no holes
        entries = sum(read)
        # ~38 tokens a message: the newest that fit, plus the unsummarized turns folded into
        # the summary at read time (at most context.FOLD_MAX_MESSAGES of them)
        assert entries <= budget // 30 + FOLD_MAX_MESSAGES + 64, (budget, entries)
        figures(f"context_cost_h{history}_b{budget}", history=history, budget=budget,
                tokens=ctx.tokens, hot_entries_read=entries)
    mem.close()
