"""The load test of issue 5: 8 agent processes append 1000 messages each to a mix of 4
shared sessions while 2 worker processes flush and compact and a reader process calls
``context()`` in a loop. Every message is archived exactly once, seqs are gap-free per
session, counters are exact, no context is over its budget (invariants 1, 2, 3, 5, 6)."""

from __future__ import annotations

import json
import time

from hermes_redis import SessionMemory
from tests.fault.conftest import Acked, audit, burst, figures, spawn, spawn_worker, stop

AGENTS = 8
PER_AGENT = 1000
BUDGET = 1500


def test_8_agents_2_workers_1_reader(fault_config, tmp_path):
    cfg, path = fault_config(max_messages=50, compression={"keep_recent": 10})
    mem = SessionMemory(cfg)
    sids = [mem.create_session(user_id=f"user{i % 2}") for i in range(4)]
    logs = tmp_path / "logs"
    logs.mkdir()
    stop_file = tmp_path / "stop-reader"
    started = time.monotonic()
    workers = [spawn_worker(path, logs / f"worker{i}.log") for i in range(2)]
    reader = spawn(["-m", "tests.fault.agent", "read", "--config", str(path), "--sessions",
                    ",".join(sids), "--budget", str(BUDGET), "--stop", str(stop_file),
                    "--out", str(tmp_path / "reader.json")], path, logs / "reader.log")
    agents = [
        spawn(["-m", "tests.fault.agent", "append", "--config", str(path), "--sessions",
               ",".join(sids), "--count", str(PER_AGENT), "--seed", str(n),
               "--out", str(tmp_path / f"agent{n}.jsonl")], path, logs / f"agent{n}.log")
        for n in range(AGENTS)
    ]
    try:
        for n, proc in enumerate(agents):
            assert proc.wait(600) == 0, (logs / f"agent{n}.log").read_text()[-3000:]
        appended_in = time.monotonic() - started
        # the running workers drain the backlog by themselves
        drained = False
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if all(mem.info(s).backlog == 0 for s in sids):
                drained = True
                break
            time.sleep(0.2)
        stop_file.touch()
        assert reader.wait(60) == 0, (logs / "reader.log").read_text()[-3000:]
    finally:
        stop_file.touch()
        for proc in [*agents, *workers, reader]:
            stop(proc)
    for i in range(len(workers)):
        text = (logs / f"worker{i}.log").read_text()
        assert "Traceback" not in text, text[-3000:]
    burst(path, logs / "burst.log")  # compaction the running workers may not have finished
    acked = []
    for n in range(AGENTS):
        for line in (tmp_path / f"agent{n}.jsonl").read_text().splitlines():
            sid, mid, seq, tokens = json.loads(line)
            acked.append(Acked(sid, mid, seq, tokens))
    assert len(acked) == AGENTS * PER_AGENT
    totals = audit(mem, acked)
    report = json.loads((tmp_path / "reader.json").read_text())
    assert report["calls"] > 0
    assert report["over_budget"] == 0 and report["holes"] == 0, report
    for sid in sids:
        ctx = mem.context(sid, budget=BUDGET)
        assert ctx.summary and ctx.tokens <= BUDGET
        assert mem.hot.length(sid) <= 2 * cfg.session.max_messages
    figures("load", agents=AGENTS, per_agent=PER_AGENT, sessions=len(sids), workers=2,
            drained_by_workers=drained, seconds_appending=round(appended_in, 1),
            seconds_total=round(time.monotonic() - started, 1), context_calls=report["calls"],
            context_over_budget=report["over_budget"], max_context_tokens=report["max_tokens"],
            **totals)
    mem.close()
