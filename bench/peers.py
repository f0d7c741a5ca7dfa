"""Peer-library workloads: what a user would pick instead of hermes-redis.

Each runs the same append/read-context loop as ``bench/peer_compare.py`` runs on
hermes-redis, through the peer's public API, the way its users call it:

* ``openai-agents RedisSession`` — ``agents.extensions.memory.redis_session.RedisSession``
  (async; ``add_items`` / ``get_items(limit=n)``).
* ``langchain RedisChatMessageHistory`` —
  ``langchain_community.chat_message_histories.RedisChatMessageHistory`` (sync;
  ``add_user_message`` / ``add_ai_message`` / ``messages``). This is the LangChain class that
  works on plain Redis (one LIST per session). The newer ``langchain_redis`` class needs
  RediSearch and RedisJSON (``FT.CREATE`` in its constructor) and fails on plain
  redis-server. ``messages`` has no limit: reading the newest ``n`` means fetching the whole
  list and slicing, as its users must.

These packages are not project dependencies; ``scripts/bench.sh`` installs them into the
bench venv from ``bench/requirements.txt``. This module imports none of hermes_redis.
Each run uses a fresh uuid-keyed session, measures its Redis footprint, then deletes it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
import warnings
from collections.abc import Callable
from typing import Any

OPENAI_AGENTS = "openai-agents RedisSession"
LANGCHAIN = "langchain RedisChatMessageHistory"

PEERS: list[str] = [OPENAI_AGENTS, LANGCHAIN]

clock = time.perf_counter_ns


def _import_openai_agents() -> Any:
    from agents.extensions.memory.redis_session import RedisSession

    return RedisSession


def _import_langchain() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # langchain-community warns that it is being sunset
        from langchain_community.chat_message_histories import RedisChatMessageHistory

    return RedisChatMessageHistory


_IMPORTERS: dict[str, Callable[[], Any]] = {
    OPENAI_AGENTS: _import_openai_agents,
    LANGCHAIN: _import_langchain,
}


def available() -> dict[str, str | None]:
    """Each peer's name mapped to None if importable, else why not."""
    out: dict[str, str | None] = {}
    for name, importer in _IMPORTERS.items():
        try:
            importer()
        except Exception as exc:  # ImportError, or a peer's own optional-dependency error
            out[name] = f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
        else:
            out[name] = None
    return out


def version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    dist = {OPENAI_AGENTS: "openai-agents", LANGCHAIN: "langchain-community"}[name]
    try:
        return dist_version(dist)
    except PackageNotFoundError:
        return "not installed"


def _footprint(redis_url: str, keys: list[str]) -> int:
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        return sum(int(client.memory_usage(k, samples=0) or 0) for k in keys)
    finally:
        client.close()


async def _run_openai_agents(redis_url: str, items: list[tuple[str, str]], context_every: int,
                             context_n: int) -> dict[str, Any]:
    session_cls = _import_openai_agents()
    session = session_cls.from_url(f"peerbench-{uuid.uuid4().hex}", url=redis_url)
    append_us: list[float] = []
    read_us: list[float] = []
    returned: list[int] = []
    try:
        if not await session.ping():  # connect outside the timed loop
            raise ConnectionError(f"openai-agents RedisSession cannot reach {redis_url}")
        start = clock()
        for i, (role, text) in enumerate(items, 1):
            item = {"role": "user" if role == "user" else "assistant", "content": text}
            t0 = clock()
            await session.add_items([item])
            append_us.append((clock() - t0) / 1000)
            if context_every > 0 and i % context_every == 0:
                t0 = clock()
                got = await session.get_items(limit=context_n)
                read_us.append((clock() - t0) / 1000)
                returned.append(len(got))
        total = (clock() - start) / 1e9
        keys = [session._session_key, session._messages_key, session._counter_key]
        footprint = _footprint(redis_url, keys)
    finally:
        try:
            await session.clear_session()
        finally:
            await session.close()
    return {"append_us": append_us, "read_us": read_us, "seconds": total,
            "returned": returned, "bytes": footprint}


def _run_langchain(redis_url: str, items: list[tuple[str, str]], context_every: int,
                   context_n: int) -> dict[str, Any]:
    history_cls = _import_langchain()
    history = history_cls(session_id=f"peerbench-{uuid.uuid4().hex}", url=redis_url)
    client = getattr(history, "redis_client", None)
    if client is None:  # its constructor only logs connection errors
        raise ConnectionError(f"langchain RedisChatMessageHistory cannot reach {redis_url}")
    append_us: list[float] = []
    read_us: list[float] = []
    returned: list[int] = []
    try:
        client.ping()  # connect outside the timed loop
        start = clock()
        for i, (role, text) in enumerate(items, 1):
            add = history.add_user_message if role == "user" else history.add_ai_message
            t0 = clock()
            add(text)
            append_us.append((clock() - t0) / 1000)
            if context_every > 0 and i % context_every == 0:
                t0 = clock()
                got = history.messages[-context_n:]
                read_us.append((clock() - t0) / 1000)
                returned.append(len(got))
        total = (clock() - start) / 1e9
        footprint = _footprint(redis_url, [history.key])
    finally:
        try:
            history.clear()
        finally:
            client.close()
    return {"append_us": append_us, "read_us": read_us, "seconds": total,
            "returned": returned, "bytes": footprint}


def run_peer(name: str, redis_url: str, items: list[tuple[str, str]], context_every: int = 2,
             context_n: int = 20) -> dict[str, Any]:
    """Append each (role, text) to a fresh session; after every ``context_every`` appends,
    read the newest ``context_n`` messages (what an agent sends to the model next).

    Returns per-op latencies in µs ('append_us', 'read_us'), the loop's wall 'seconds',
    how many messages each read 'returned', and the session's Redis 'bytes' at the end.
    """
    if name == OPENAI_AGENTS:
        return asyncio.run(_run_openai_agents(redis_url, items, context_every, context_n))
    if name == LANGCHAIN:
        return _run_langchain(redis_url, items, context_every, context_n)
    raise ValueError(f"unknown peer {name!r}; expected one of {PEERS}")
