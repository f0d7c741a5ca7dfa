"""Issue 35, part 2: every query text is de-duplicated and capped (MAX_QUERY_TERMS distinct
terms, MAX_QUERY_BYTES; past the byte cap a ValidationError, HTTP 422), so no door (search,
recall, memory search, MCP recall) pays per word: a 30,000-word query answers at once and
the server's memory does not grow. The figures are printed (``-s``) for docs/reliability.md."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hermes_redis import SessionMemory
from hermes_redis.core.config import load as load_config
from hermes_redis.core.errors import ValidationError
from hermes_redis.core.text import MAX_QUERY_BYTES, MAX_QUERY_TERMS, check_query, recall_terms
from tests.http_server import ServeProcess, serve_config
from tests.redis_server import RedisServer

HUGE = " ".join(["a"] * 30_000)  # 60 KB: the 30,000-word query (a+a+…)
AT_CAP = " ".join(f"w{i}" for i in range(MAX_QUERY_BYTES // 6))[:MAX_QUERY_BYTES - 6] + " alpha"
# The machine is shared (load average 20 on 2 cores seen): the bounds asserted are loose
# (a query past the cap costs at most twice a one-word query plus SECONDS; the refusal at
# most SECONDS, 20x the 100 ms target); the printed figures are what docs/reliability.md
# records. Before the fix the 30,000-word search did not answer within 60 s.
SECONDS = 2.0
RSS_BYTES = 10 * 1024 * 1024


# --- the rule, on the library ----------------------------------------------------------------
def test_a_query_keeps_each_word_once_and_at_most_the_term_cap() -> None:
    assert check_query("Deploy deploy DEPLOY the plan plan") == "Deploy the plan"
    many = " ".join(f"word{i}" for i in range(100))
    kept = check_query(many).split()
    assert kept == [f"word{i}" for i in range(MAX_QUERY_TERMS)]
    one_long = "-".join(f"t{i}" for i in range(100))  # one word, 100 terms: its first 32 kept
    assert check_query(one_long) == "-".join(f"t{i}" for i in range(MAX_QUERY_TERMS))
    assert check_query("用户认证" * 20) == ("用户认证" * 8)  # CJK: one term a character
    assert len(recall_terms(" ".join(f"topic{i}" for i in range(500)))) == MAX_QUERY_TERMS
    assert len(recall_terms("认" + "证书管理系统" * 2000)) <= MAX_QUERY_TERMS


def test_a_query_past_the_byte_cap_is_refused_in_one_line() -> None:
    check_query("x" * MAX_QUERY_BYTES)
    with pytest.raises(ValidationError, match=f"over the limit of {MAX_QUERY_BYTES}"):
        check_query("x" * (MAX_QUERY_BYTES + 1))
    with pytest.raises(ValidationError, match="must be text"):
        check_query(["a"])


def test_every_library_door_takes_the_rule(mem: SessionMemory) -> None:
    sid = mem.create_session("u")
    mem.append(sid, "user", "alpha beta")
    mem.remember("u", "alpha is our codename")
    mem.flush(sid)
    for door in (lambda q: mem.search(q), lambda q: mem.context(sid, query=q),
                 lambda q: mem.memories("u", query=q)):
        with pytest.raises(ValidationError, match="over the limit"):
            door(HUGE)
        door(AT_CAP)
    assert [h.seq for h in mem.search(AT_CAP)] == []  # its first 32 terms: w0…w31 match nothing
    assert [h.seq for h in mem.search("alpha " * 600)] == [1]


# --- every door of a real server ------------------------------------------------------------
@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer) -> Path:
    return serve_config(tmp_path_factory.mktemp("qcost"), redis_server.url)


@pytest.fixture(scope="module")
def seeded(config_path: Path) -> str:
    """A session whose 2,000 archived messages all hold the word (the issue's worst case)."""
    with SessionMemory(load_config(config_path)) as mem:
        sid = mem.create_session("default")
        for start in range(0, 2000, 500):
            mem.append_many(sid, [{"role": "user", "content": f"alpha note {i}"}
                                  for i in range(start, start + 500)])
        mem.flush(sid)
        mem.remember("default", "alpha is the codename")
        return sid


@pytest.fixture(scope="module")
def server(config_path: Path, seeded: str) -> Iterator[ServeProcess]:
    proc = ServeProcess(config_path).start()
    yield proc
    proc.stop()


def rss(server: ServeProcess) -> int:
    assert server.proc is not None
    for line in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def mcp(client: httpx.Client, tool: str, **arguments: Any) -> dict[str, Any]:
    reply = client.post("/mcp", headers={"Accept": "application/json, text/event-stream"},
                        json={"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                              "params": {"name": tool, "arguments": arguments}})
    text = reply.text
    if "data:" in text:  # an event stream: its one message
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
    return dict(json.loads(text)["result"])


def doors(sid: str) -> dict[str, Callable[[httpx.Client, str], tuple[int, str]]]:
    def search(c: httpx.Client, q: str) -> tuple[int, str]:
        r = c.get("/v1/search", params={"q": q})
        return r.status_code, r.text

    def recall(c: httpx.Client, q: str) -> tuple[int, str]:
        r = c.get(f"/v1/sessions/{sid}/context", params={"query": q})
        return r.status_code, r.text

    def memories(c: httpx.Client, q: str) -> tuple[int, str]:
        r = c.get("/v1/memories", params={"user_id": "default", "query": q})
        return r.status_code, r.text

    def mcp_recall(c: httpx.Client, q: str) -> tuple[int, str]:
        result = mcp(c, "recall", query=q)
        return (422 if result.get("isError") else 200), json.dumps(result)

    return {"search": search, "recall": recall, "memories": memories, "mcp recall": mcp_recall}


def timed(door: Callable[[httpx.Client, str], tuple[int, str]], client: httpx.Client,
          query: str) -> tuple[float, int, str]:
    started = time.perf_counter()
    status, body = door(client, query)
    return time.perf_counter() - started, status, body


def test_a_30000_word_query_answers_at_once_on_every_door(server: ServeProcess,
                                                          seeded: str) -> None:
    """Each door: the 30,000-word query (422 over HTTP, a tool error over MCP) within
    SECONDS, and a query at the byte cap (its first 32 terms) about what a one-word query
    costs; the server's RSS grows by at most RSS_BYTES over the rounds."""
    with httpx.Client(base_url=server.url, timeout=60) as client:
        for name, door in doors(seeded).items():
            assert door(client, "alpha")[0] == 200, name  # warm: imports, caches, pools
            before = rss(server)
            base = huge = cap = 0.0
            for _ in range(5):
                took, status, body = timed(door, client, "alpha")
                base = max(base, took)
                took, status, body = timed(door, client, HUGE)
                huge = max(huge, took)
                assert status == 422 and f"limit of {MAX_QUERY_BYTES}" in body, (name, body[:300])
                took, status, body = timed(door, client, AT_CAP)
                cap = max(cap, took)
                assert status == 200, (name, body[:300])
            grown = rss(server) - before
            print(f"\n{name}: worst of 5 — one word {base * 1000:.0f} ms, 30,000 words"
                  f" {huge * 1000:.0f} ms, 4 KiB {cap * 1000:.0f} ms; RSS +{grown / 1e6:.1f} MB")
            assert huge <= SECONDS and cap <= 2 * base + SECONDS, (name, base, huge, cap)
            assert grown <= RSS_BYTES, (name, grown)
    assert "Traceback" not in server.output()
