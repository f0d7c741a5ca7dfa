"""memory: Redis bytes per stored message against the payload it carries.

Measured with ``MEMORY USAGE key SAMPLES 0`` (exact) on the session that the append
benchmark filled through ``SessionMemory.append``, next to the raw list of the same payloads
that the baseline pushed. The per-session keys (meta hash, index and backlog entries) are
reported apart: they do not grow with the history.
"""

from __future__ import annotations

from typing import Any

import redis

from bench.common import Section, num, times


def usage(client: redis.Redis, key: str) -> int:
    return int(client.memory_usage(key, samples=0) or 0)


def run(server: Any, one: dict[str, Any]) -> Section:
    client = redis.Redis.from_url(server.url)
    try:
        list_key, raw_key, meta_key = one["list_key"], one["scratch_key"], one["meta_key"]
        n = int(client.llen(list_key))
        n_raw = int(client.llen(raw_key))
        payload = sum(len(x) for x in client.lrange(list_key, 0, -1)) / n
        raw_payload = sum(len(x) for x in client.lrange(raw_key, 0, -1)) / n_raw
        per_msg = usage(client, list_key) / n
        raw_per_msg = usage(client, raw_key) / n_raw
        meta = usage(client, meta_key)
    finally:
        client.close()
    sec = Section("memory — Redis bytes per stored message",
                  ["what", "bytes", "vs payload"])
    sec.add("payload (Message.pack, mean)", num(payload), "1.00×")
    sec.add("hermes-redis session list, per message", num(per_msg), times(per_msg / payload))
    sec.add("raw RPUSH list of the same payloads, per message", num(raw_per_msg),
            times(raw_per_msg / raw_payload))
    sec.add("per session, once: meta hash", num(meta), "")
    sec.note(f"{n:,} messages appended through SessionMemory.append (the append benchmark's "
             "session); MEMORY USAGE … SAMPLES 0. The index and backlog sorted sets add one "
             "small entry per session, not per message.")
    return sec
