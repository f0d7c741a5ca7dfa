"""Peer-library workloads for comparison benchmarks.

Runs the same append/read-context loop as our own benchmark against two peer
Redis-backed session stores, using their public APIs the way a user would:

* ``openai-agents RedisSession`` — ``agents.extensions.memory.RedisSession``
  (async; ``add_items`` / ``get_items(limit=n)``).
* ``langchain RedisChatMessageHistory`` —
  ``langchain_community.chat_message_histories.RedisChatMessageHistory``
  (sync; ``add_user_message`` / ``messages``). This is the LangChain class that
  works on plain Redis: it stores one LIST per session. The newer
  ``langchain_redis.RedisChatMessageHistory`` needs RediSearch + RedisJSON
  (it runs ``FT.INFO``/``FT.CREATE`` in its constructor) and fails on plain
  redis-server. ``messages`` has no limit, so reading the newest ``n`` items
  means fetching the whole list and slicing, as a user of that API must.

These packages are not project dependencies; install them in a separate venv::

    pip install 'openai-agents[redis]' langchain-community redis hiredis

Each run uses a fresh uuid-keyed session and deletes its keys afterwards.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
import warnings
from collections.abc import Callable
from typing import Any

OPENAI_AGENTS = "openai-agents RedisSession"
LANGCHAIN = "langchain RedisChatMessageHistory"

PEERS: list[str] = [OPENAI_AGENTS, LANGCHAIN]


def _import_openai_agents() -> Any:
    from agents.extensions.memory.redis_session import RedisSession

    return RedisSession


def _import_langchain() -> Any:
    with warnings.catch_warnings():
        # langchain-community warns on import that it is being sunset.
        warnings.simplefilter("ignore")
        from langchain_community.chat_message_histories import RedisChatMessageHistory

    return RedisChatMessageHistory


_IMPORTERS: dict[str, Callable[[], Any]] = {
    OPENAI_AGENTS: _import_openai_agents,
    LANGCHAIN: _import_langchain,
}


def available() -> dict[str, str | None]:
    """Map each peer name to None if importable, else the import error text."""
    out: dict[str, str | None] = {}
    for name, importer in _IMPORTERS.items():
        try:
            importer()
        except Exception as exc:  # ImportError, or a peer's own optional-dep error
            out[name] = f"{type(exc).__name__}: {exc}"
        else:
            out[name] = None
    return out


def _percentile(sorted_ns: list[int], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of sorted ns samples, in µs."""
    if not sorted_ns:
        return math.nan
    pos = (len(sorted_ns) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_ns) - 1)
    val = sorted_ns[lo] + (sorted_ns[hi] - sorted_ns[lo]) * (pos - lo)
    return val / 1000.0


def _summarize(append_ns: list[int], read_ns: list[int], total_ns: int) -> dict[str, float]:
    """Turn raw per-op latencies and loop wall time into the result dict."""
    append_ns.sort()
    read_ns.sort()
    n_ops = len(append_ns) + len(read_ns)
    return {
        "append_p50_us": _percentile(append_ns, 50),
        "append_p99_us": _percentile(append_ns, 99),
        "read_p50_us": _percentile(read_ns, 50),
        "read_p99_us": _percentile(read_ns, 99),
        "ops_per_s": n_ops / (total_ns / 1e9) if total_ns > 0 else math.nan,
    }


async def _run_openai_agents(
    redis_url: str, texts: list[str], context_every: int, context_n: int
) -> dict[str, float]:
    """Workload on openai-agents RedisSession (own client via from_url)."""
    redis_session_cls = _import_openai_agents()
    session = redis_session_cls.from_url(f"peerbench-{uuid.uuid4().hex}", url=redis_url)
    append_ns: list[int] = []
    read_ns: list[int] = []
    clock = time.perf_counter_ns
    try:
        if not await session.ping():  # open the connection outside the timed loop
            raise ConnectionError(f"openai-agents RedisSession cannot reach {redis_url}")
        start = clock()
        for i, text in enumerate(texts, 1):
            t0 = clock()
            await session.add_items([{"role": "user", "content": text}])
            append_ns.append(clock() - t0)
            if context_every > 0 and i % context_every == 0:
                t0 = clock()
                items = await session.get_items(limit=context_n)
                read_ns.append(clock() - t0)
                if not items:
                    raise RuntimeError("peer returned an empty context")
        total = clock() - start
    finally:
        try:
            await session.clear_session()
        finally:
            await session.close()
    return _summarize(append_ns, read_ns, total)


def _run_langchain(
    redis_url: str, texts: list[str], context_every: int, context_n: int
) -> dict[str, float]:
    """Workload on langchain-community RedisChatMessageHistory (plain Redis LIST)."""
    history_cls = _import_langchain()
    history = history_cls(session_id=f"peerbench-{uuid.uuid4().hex}", url=redis_url)
    client = getattr(history, "redis_client", None)
    if client is None:  # the constructor only logs connection errors
        raise ConnectionError(f"langchain RedisChatMessageHistory cannot reach {redis_url}")
    append_ns: list[int] = []
    read_ns: list[int] = []
    clock = time.perf_counter_ns
    try:
        client.ping()  # open the connection outside the timed loop
        start = clock()
        for i, text in enumerate(texts, 1):
            t0 = clock()
            history.add_user_message(text)
            append_ns.append(clock() - t0)
            if context_every > 0 and i % context_every == 0:
                t0 = clock()
                items = history.messages[-context_n:]
                read_ns.append(clock() - t0)
                if not items:
                    raise RuntimeError("peer returned an empty context")
        total = clock() - start
    finally:
        try:
            history.clear()
        finally:
            client.close()
    return _summarize(append_ns, read_ns, total)


def run_peer(
    name: str,
    redis_url: str,
    texts: list[str],
    context_every: int = 1,
    context_n: int = 20,
) -> dict[str, float]:
    """Append each text as a user message to a fresh session; after every
    `context_every` appends, read the newest `context_n` items (what an agent
    would send to the model).

    Returns {'append_p50_us', 'append_p99_us', 'read_p50_us', 'read_p99_us',
    'ops_per_s'}; ops_per_s is (appends + reads) / wall time of the whole loop.
    context_every <= 0 disables reads (read percentiles are then NaN).
    """
    if name == OPENAI_AGENTS:
        return asyncio.run(_run_openai_agents(redis_url, texts, context_every, context_n))
    if name == LANGCHAIN:
        return _run_langchain(redis_url, texts, context_every, context_n)
    raise ValueError(f"unknown peer {name!r}; expected one of {PEERS}")
