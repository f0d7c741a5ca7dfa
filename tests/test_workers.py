"""The cold tier and the workers: flush, compaction, TTL and resume (invariants 2, 3, 5, 6)."""

import subprocess
import sys
import time

import pytest
from redis import Redis
from rq import Queue

from hermes_redis import SessionMemory
from hermes_redis.jobs.worker import HermesWorker, run
from tests.fault.conftest import wait_for
from tests.helpers import archive_rows, converse

FACTS = ["access token 30 min", "refresh token 7 d", "bcrypt + salt", "PostgreSQL 16"]


def decisions(i: int) -> tuple[str, str]:
    """The first exchanges settle FACTS (the summaries must keep them), then small talk."""
    if i < len(FACTS):
        return (f"Turn {i}: shall we decide on {FACTS[i]}?",
                f"We decided to use {FACTS[i]} for the auth service.")
    return f"thanks, that looks good ({i})", "you're welcome, happy to help"


def test_200_turns_burst_worker_done_criterion(config_factory, redis_kind):
    with SessionMemory(config_factory(redis_kind)) as mem:
        sid = mem.create_session(user_id="alice")
        converse(mem, sid, 200, decisions)
        assert len(Queue(mem.config.redis.queue, connection=mem.queue.connection)) == 1  # deduplicated
        run(mem, burst=True)
        rows = archive_rows(mem.config, sid)
        assert len(rows) == 400 and len({r[0] for r in rows}) == 400
        assert sorted(r[1] for r in rows) == list(range(1, 401))
        info = mem.info(sid)
        assert info.backlog == 0 and info.message_count == 400
        assert info.hot_count <= mem.config.session.max_messages  # hybrid keeps the newest turns
        assert info.hot_count == 20  # keep_recent = 10 turns of 2 messages
        ctx = mem.context(sid)  # 400 short messages fit the default budget: every one, verbatim
        assert ctx.summary == "" and [m.seq for m in ctx.messages] == list(range(1, 401))
        assert ctx.tokens <= ctx.budget
        small = mem.context(sid, budget=2000)  # past the threshold: summary + newest turns
        assert small.summary and small.tokens <= 2000
        assert "PostgreSQL 16" in small.summary and "30 min" in small.summary
        assert small.messages[-1].seq == 400
        before = ctx.as_dict()
        mem.hot.drop(sid)  # the session's Redis keys are gone (TTL, FLUSHDB, a new Redis…)
        after = mem.resume(sid).as_dict()
        assert after == before
        assert len(mem.messages(sid)) == 400


@pytest.mark.parametrize("strategy", ["rolling_window", "summary", "hybrid"])
def test_compaction_strategies(config_factory, strategy):
    cfg = config_factory("memory", max_messages=12,
                         compression={"strategy": strategy, "keep_recent": 3})
    with SessionMemory(cfg) as mem:
        sid = mem.create_session()
        converse(mem, sid, 30, decisions)
        info = mem.info(sid)
        assert len(mem.context(sid).messages) == 60  # the whole session fits the default budget
        assert len(mem.cold.messages(sid)) == 60  # nothing leaves the archive
        assert info.hot_count <= 12
        mem.compact(sid)  # compress now: Redis keeps the strategy's own shape
        hot = {"rolling_window": 12, "summary": 2, "hybrid": 6}[strategy]
        assert mem.info(sid).hot_count == hot
        assert mem.cold.session(sid)["summary"] == mem.info(sid).summary  # stored in both tiers
        ctx = mem.context(sid, budget=500)  # it does not fit 500 tokens: the strategy's shape
        seqs = [m.seq for m in ctx.messages]
        assert ctx.tokens <= 500 and seqs == list(range(seqs[0], 61))  # the newest, no holes
        if strategy == "rolling_window":  # the newest that fit, read past the hot tier
            assert ctx.summary == "" and len(ctx.messages) > hot
        else:
            assert "PostgreSQL 16" in ctx.summary
        if strategy == "summary":  # everything but the newest turn summarized
            assert seqs == [59, 60]


def test_compaction_never_trims_unarchived(config_factory, redis_kind):
    with SessionMemory(config_factory(redis_kind, max_messages=4)) as mem:
        sid = mem.create_session()
        converse(mem, sid, 10, decisions)  # no worker: nothing archived yet
        assert mem.maintainer.needs_compaction(sid)
        mem.hot.compact(sid, None, "premature", None)  # even a forced summary cannot trim
        assert mem.hot.length(sid) == 20
        run(mem, burst=True)
        assert len(mem.cold.messages(sid)) == 20


def test_flush_is_idempotent_after_a_partial_write(config_factory, redis_kind):
    with SessionMemory(config_factory(redis_kind)) as mem:
        sid = mem.create_session()
        converse(mem, sid, 20, decisions)
        half = mem.hot.messages(sid)[:17]
        mem.cold.write(mem.hot.meta(sid).to_row(sid), half)  # crash before the ack
        assert mem.flush(sid) == 23
        assert mem.flush(sid) == 0
        rows = archive_rows(mem.config, sid)
        assert len(rows) == 40 and len({r[1] for r in rows}) == 40
        assert mem.cold.session(sid)["message_count"] == 40


def test_ttl_waits_for_the_archive(config_factory):
    with SessionMemory(config_factory("redis", ttl=1)) as mem:
        sid = mem.create_session()
        mem.append(sid, "user", "unarchived turn")
        time.sleep(2.5)  # workers down for longer than the TTL
        assert mem.hot.length(sid) == 1 and mem.info(sid).backlog == 1
        run(mem, burst=True)
        ttl = mem.hot.ttl_left(sid)
        assert ttl is not None or mem.hot.meta(sid) is None  # archived, so it may expire now
        deadline = time.monotonic() + 10
        while mem.hot.meta(sid) is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert mem.hot.meta(sid) is None  # expired once archived
        assert [m.content for m in mem.messages(sid)] == ["unarchived turn"]
        assert mem.context(sid).messages[0].content == "unarchived turn"  # rebuilt from the archive
        m = mem.append(sid, "user", "after expiry")
        assert m.seq == 2


def test_ttl_memory_backend(config_factory):
    with SessionMemory(config_factory("memory", ttl=1)) as mem:
        sid = mem.create_session()
        mem.append(sid, "user", "hello")
        time.sleep(1.3)
        assert mem.hot.meta(sid) is None  # inline flush archived it, so it may expire
        assert mem.context(sid).messages[0].content == "hello"


def test_sweep_recovers_a_lost_job(config_factory, redis_kind):
    with SessionMemory(config_factory(redis_kind)) as mem:
        sid = mem.create_session()
        converse(mem, sid, 3, decisions)
        Queue(mem.config.redis.queue, connection=mem.queue.connection).empty()  # the job is lost
        assert mem.sweep(grace=0) == [sid]
        run(mem, burst=True)
        assert len(mem.cold.messages(sid)) == 6


def test_background_worker_process_flushes(config_factory, tmp_path, redis_kind):
    import yaml

    cfg = config_factory(redis_kind)
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump({
        "redis": {"url": cfg.redis.url, "key_prefix": cfg.redis.key_prefix,
                  "queue": cfg.redis.queue, "queue_url": cfg.redis.queue_url},
        "archive": {"path": str(cfg.archive_path), "url": cfg.archive.url},
    }))
    proc = subprocess.Popen([sys.executable, "-m", "workers"], env={
        "HERMES_CONFIG": str(path), "PATH": "/usr/bin:/bin"})
    try:
        with SessionMemory(cfg) as mem:
            sid = mem.create_session()
            converse(mem, sid, 5, decisions)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and mem.info(sid).backlog:
                time.sleep(0.05)
            assert mem.info(sid).backlog == 0
            assert len(mem.cold.messages(sid)) == 10
    finally:
        proc.kill()
        proc.wait()


def test_a_stopping_worker_does_not_wait_on_its_command_listener(redis_url):
    """RQ's listener thread read with a 60 s wait, and RQ waits for it on the way out: a
    worker told to stop took up to a minute to exit (seen in CI as a worker alive 60 s after
    SIGTERM). Put the listener where that race left it — unsubscribed, waiting — then stop."""
    worker = HermesWorker(["q"], connection=Redis.from_url(redis_url))
    worker.subscribe()
    try:
        worker.pubsub.unsubscribe()
        assert wait_for(lambda: not worker.pubsub.subscribed, 10)  # the listener is waiting
        started = time.monotonic()
        worker.unsubscribe()
        waited = time.monotonic() - started
    finally:
        worker.connection.close()
    assert waited < 30, f"the worker's teardown waited {waited:.0f} s on its listener"
    assert not worker.pubsub_thread.is_alive()
