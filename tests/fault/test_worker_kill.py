"""Workers killed with SIGKILL at random points while they flush and compact, 20 times,
with agents appending all along. After every kill nothing acknowledged is missing from
both tiers together (invariant 2); after a sweep every message is archived exactly once,
counters are exact and the two tiers hold the same summary (invariants 3, 5)."""

from __future__ import annotations

import random
import threading
import time

from rq import Queue
from rq.registry import StartedJobRegistry

from hermes_redis import SessionMemory
from tests.fault.conftest import Acked, audit, burst, figures, sigkill, spawn_worker, wait_for
from tests.helpers import archive_query

KILLS = 20


def test_sigkill_workers_20_times(fault_config, tmp_path):
    cfg, path = fault_config(max_messages=20, compression={"keep_recent": 3})
    mem = SessionMemory(cfg)
    sids = [mem.create_session(user_id="alice") for _ in range(3)]
    acked: list[Acked] = []
    halt = threading.Event()
    rng = random.Random(5)

    def agent() -> None:
        with SessionMemory(cfg) as own:
            i = 0
            # at most 6,000 (about 95K tokens a session): however long a loaded machine takes
            # to kill 20 workers, each session still fits the default budget's threshold
            while not halt.is_set() and i < 6_000:
                sid = sids[i % 3]
                role = "user" if (i // 3) % 2 == 0 else "assistant"
                text = f"message {i}: we decided Priya ships PostgreSQL 16 on day {i % 30}. " \
                    + "detail " * (i % 50)
                acked.append(Acked.of(own.append(sid, role, text)))
                i += 1
                time.sleep(0.01)

    appender = threading.Thread(target=agent)
    appender.start()
    queue = Queue(cfg.redis.queue, connection=mem.hot.client)
    started = StartedJobRegistry(queue=queue)
    mid_job = 0
    problems: list[str] = []
    t0 = time.monotonic()
    try:
        for k in range(KILLS):
            log = tmp_path / f"worker{k}.log"
            dead = set(started.get_job_ids())  # jobs abandoned by workers killed before
            worker = spawn_worker(path, log)
            wait_for(lambda d=dead: set(started.get_job_ids()) - d, 5, 0.01)  # a job began
            time.sleep(rng.uniform(0.0, 0.3))
            busy = bool(set(started.get_job_ids()) - dead)
            sigkill(worker)
            mid_job += busy
            # with no worker alive, both tiers together must hold every acked message
            snapshot = list(acked)
            hot = {m.message_id for s in sids for m in mem.hot.messages(s)}
            archived = {r[0] for r in archive_query(cfg, "SELECT message_id FROM messages")}
            missing = [a for a in snapshot if a.message_id not in hot | archived]
            if missing:
                problems.append(f"kill {k}: {len(missing)} acked messages in neither tier")
    finally:
        halt.set()
        appender.join(30)
    assert not problems, "\n".join(problems)
    killed_in = time.monotonic() - t0
    burst(path, tmp_path / "burst.log")
    totals = audit(mem, acked)
    for sid in sids:
        ctx = mem.context(sid)  # fits the default budget: the whole session, verbatim
        assert ctx.summary == "" and ctx.tokens <= ctx.budget
        assert [m.seq for m in ctx.messages] == list(range(1, mem.info(sid).last_seq + 1))
        ctx = mem.context(sid, budget=2000)  # past the threshold: the compacted summary
        assert ctx.summary and ctx.tokens <= ctx.budget
        assert mem.hot.length(sid) <= 2 * cfg.session.max_messages
    figures("worker_sigkill", kills=KILLS, kills_mid_job=mid_job, seconds_killing=round(
        killed_in, 1), seconds_total=round(time.monotonic() - t0, 1), **totals)
    mem.close()
