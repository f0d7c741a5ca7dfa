"""Logs at INFO (issue 34), read from real processes: a burst worker logs one line per job
(the session, what it did, how long it took); a server logs at startup whether auth is on
and how many keys exist, and when the first key turns auth on."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import httpx

from hermes_redis import SessionMemory
from tests.helpers import isolated_config
from tests.http_server import ServeProcess, cli, serve_config
from tests.redis_server import RedisServer

JOB = re.compile(r"flush (\S+): (.+) in (\d+\.\d{3}) s$")


def job_lines(stderr: str) -> dict[str, list[str]]:
    """Each logged job's session -> what its jobs did, in order."""
    found: dict[str, list[str]] = {}
    for line in stderr.splitlines():
        m = JOB.search(line)
        if m and "INFO" in line:
            found.setdefault(m.group(1), []).append(m.group(2))
            assert 0 <= float(m.group(3)) < 60, line
    return found


def archived(done: list[str]) -> int:
    return sum(int(d.split(",")[0].removeprefix("archived ")) for d in done)


def test_a_burst_worker_logs_each_job_with_what_it_did(tmp_path: Path, redis_url: str) -> None:
    config = isolated_config(tmp_path, redis_url, memory={
        "session": {"backend": "redis", "max_messages": 6,
                    "compression": {"keep_recent": 2}},
        "persistent": {"auto_extract": True}})
    with SessionMemory.from_config(config) as mem:
        long, short = mem.create_session(user_id="ann"), mem.create_session(user_id="ann")
        for i in range(6):
            mem.append(long, "user", f"question {i} about the deployment")
            mem.append(long, "assistant", f"answer {i}")
        mem.append(short, "user", "I prefer a functional style.")
        done = cli(config, "worker", "--burst")  # no -v: a worker logs its jobs anyway
        jobs = job_lines(done.stderr)
        assert set(jobs) == {long, short}, done.stderr
        assert archived(jobs[long]) == 12 and archived(jobs[short]) == 1, jobs  # each once
        compactions = [d for d in jobs[long] if "compacted (trimmed" in d]
        assert compactions, jobs[long]
        trimmed = sum(int(re.search(r"trimmed (\d+)", d).group(1))  # type: ignore[union-attr]
                      for d in compactions)
        assert trimmed == 12 - mem.info(long).hot_count > 0
        facts = len(mem.memories("ann"))
        said = [d for d in jobs[short] if "extracted" in d]
        assert facts >= 1 and said == [f"archived 1, extracted {facts} memor"
                                       + ("y" if facts == 1 else "ies")], jobs[short]
        assert not any("extracted" in d for d in jobs[long])
        assert "Burst done" in done.stdout and "flush" not in done.stdout  # logs: stderr only
        again = cli(config, "worker", "--burst")
        assert job_lines(again.stderr) == {}  # nothing to do: no job, no line


def test_the_server_logs_whether_auth_is_on_and_how_many_keys(tmp_path: Path,
                                                              redis_server: RedisServer) -> None:
    config = serve_config(tmp_path, redis_server.url)
    proc = ServeProcess(config).start()
    try:
        assert "no API keys: keyless, on loopback only" in proc.output()
        cli(config, "key", "create", "--user", "ann", "--json")
        deadline = time.monotonic() + 10
        while "auth is on: 1 active API key now" not in proc.output():
            assert time.monotonic() < deadline, proc.output()
            httpx.get(proc.url + "/v1/sessions", timeout=5)  # a keyless request asks again
            time.sleep(0.2)
    finally:
        proc.stop()
    key = json.loads(cli(config, "key", "create", "--admin", "--json").stdout)["key"]
    proc = ServeProcess(config).start()
    try:
        assert "auth is on: 2 active API keys" in proc.output(), proc.output()
        assert key not in proc.output()
    finally:
        proc.stop()
