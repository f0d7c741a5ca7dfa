"""adapters: the framework adapters' cost per call, against the frameworks' own Redis stores.

A conversation of T turns, 4 SDK items each (user message, function call, its output, the
assistant's reply), stored the way the Agents SDK does it: one ``add_items`` of the user
item, one of the run's three new items, and a ``get_items`` before each run. Measured for
``HermesSession`` (hermes-redis in-process: Redis hot tier, SQLite archive, no worker, so
every get_items reads the whole history from both tiers) and the SDK's ``RedisSession``
(redis.asyncio, a Redis list per session) on the same redis-server. Then the same for
``HermesChatMessageHistory.add_messages`` / ``messages``.

LangChain's own Redis history (``langchain-redis`` ``RedisChatMessageHistory``) is not
measured: it stores messages with RedisJSON and lists them with RediSearch, modules a plain
redis-server (what these benchmarks and the tests start) does not have; it needs Redis Stack.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import Section, median, open_memory, quiet_gc, us


def turn_items(i: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    user = [{"role": "user", "content": f"What is the weather in city {i}? Answer briefly."}]
    run = [
        {"type": "function_call", "name": "get_weather", "arguments": f'{{"city": "city {i}"}}',
         "call_id": f"call_{i}", "id": f"fc_{i}", "status": "completed"},
        {"type": "function_call_output", "call_id": f"call_{i}",
         "output": f'{{"city": "city {i}", "sky": "sunny", "temp_c": 21.5}}'},
        {"id": f"msg_{i}", "type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": f"City {i}: sunny, 21.5°C.",
                      "annotations": [], "logprobs": []}]},
    ]
    return user, run


async def converse(session: Any, turns: int) -> tuple[list[float], list[float]]:
    """Per-call seconds of add_items and get_items over ``turns`` SDK-shaped turns."""
    adds, gets = [], []
    for i in range(turns):
        user, run = turn_items(i)
        t0 = time.perf_counter()
        await session.get_items()
        gets.append(time.perf_counter() - t0)
        for batch in (user, run):
            t0 = time.perf_counter()
            await session.add_items(batch)
            adds.append(time.perf_counter() - t0)
    return adds, gets


def run(server: Any, workdir: Path, quick: bool = False) -> Section:
    from agents.extensions.memory.redis_session import RedisSession
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    from hermes_redis.integrations.langchain import HermesChatMessageHistory
    from hermes_redis.integrations.openai_agents import HermesSession

    turns = 25 if quick else 100
    mem = open_memory(server.url, workdir)
    sec = Section(f"adapters — {turns} turns of 4 items, per call (median)",
                  ["store", "add (one call)", "read the history", "history at the end"])
    try:
        async def sdk() -> None:
            ours = HermesSession(f"bench-{uuid.uuid4().hex[:8]}", memory=mem)
            theirs = RedisSession.from_url(f"bench-{uuid.uuid4().hex[:8]}", url=server.url)
            with quiet_gc():
                a, g = await converse(ours, turns)
                b, h = await converse(theirs, turns)
            n = len(await ours.get_items())
            sec.add("HermesSession (hermes-redis)", us(1e6 * median(a)), us(1e6 * median(g)), f"{n} items")
            sec.add("agents RedisSession", us(1e6 * median(b)), us(1e6 * median(h)),
                    f"{len(await theirs.get_items())} items")
            await theirs.close()

        asyncio.run(sdk())
        history = HermesChatMessageHistory(f"bench-{uuid.uuid4().hex[:8]}", memory=mem)
        adds, reads = [], []
        with quiet_gc():
            for i in range(turns):
                batch = [HumanMessage(f"weather in city {i}?"),
                         AIMessage("", tool_calls=[{"name": "get_weather", "args": {"city": i},
                                                    "id": f"c{i}"}]),
                         ToolMessage("sunny, 21.5°C", tool_call_id=f"c{i}"),
                         AIMessage(f"City {i}: sunny.")]
                t0 = time.perf_counter()
                history.add_messages(batch)
                adds.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                got = history.messages
                reads.append(time.perf_counter() - t0)
        sec.add("HermesChatMessageHistory", us(1e6 * median(adds)), us(1e6 * median(reads)),
                f"{len(got)} messages")
        sec.add("langchain-redis RedisChatMessageHistory", "not run", "not run",
                "needs Redis Stack (RedisJSON + RediSearch)")
    finally:
        mem.close()
    sec.note("Same redis-server (loopback TCP), no worker: hermes-redis appends atomically in "
             "one Lua round trip per call and reads the whole history from Redis and the SQLite "
             "archive; RedisSession is one RPUSH pipeline and one LRANGE. The read grows with the "
             "history for both; hermes-redis also tokenizes, archives and makes it searchable.")
    return sec
