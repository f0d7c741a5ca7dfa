"""The operator's view: `doctor`, a worker stopped with SIGTERM mid-job, and back-pressure
as Redis fills up. Real processes, real signals, real redis-servers."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import ClassVar

import pytest
import redis
from click.testing import CliRunner
from rq import Worker

from hermes_redis import SessionMemory
from hermes_redis.cli.main import cli
from hermes_redis.core.errors import BackendUnavailableError
from tests.fault.conftest import burst, figures, spawn_worker, stop, wait_for
from tests.helpers import archive_query, write_config
from tests.redis_server import RedisServer, free_port


def doctor(path, *args):  # type: ignore[no-untyped-def]
    result = CliRunner().invoke(cli, ["--config", str(path), "doctor", *args])
    assert "Traceback" not in result.output
    return result


def lines_of(result, name):  # type: ignore[no-untyped-def]
    return [line for line in result.output.splitlines() if line.split()[1:2] == [name]]


def test_doctor_passes_a_safe_deployment_and_fails_without_a_worker(tmp_path, fault_config):
    cfg, path = fault_config()
    mem = SessionMemory(cfg)
    sid = mem.create_session(user_id="alice")
    mem.append(sid, "user", "hello")  # no worker yet: a backlog of one session

    alone = doctor(path)
    assert alone.exit_code == 1
    (workers,) = lines_of(alone, "workers")
    assert workers.startswith("FAIL") and "hermes-redis worker" in workers
    (backlog,) = lines_of(alone, "backlog")
    assert "1 session(s) hold unarchived turns" in backlog
    assert all(line.startswith("OK") for line in lines_of(alone, "redis"))

    worker = spawn_worker(path, tmp_path / "worker.log")
    try:
        assert wait_for(lambda: doctor(path).exit_code == 0, 60, 0.5), doctor(path).output
        report = doctor(path, "--json")
        data = json.loads(report.output)
        assert data["ok"] is True
        names = {c["name"] for c in data["checks"]}
        assert {"redis", "memory", "archive", "workers", "backlog", "jobs"} <= names
        assert all(c["status"] == "ok" for c in data["checks"]), data
        from hermes_redis.store.archive import SCHEMA_VERSION

        assert f"schema version {SCHEMA_VERSION}" in next(c["detail"] for c in data["checks"]
                                                          if c["name"] == "archive")
    finally:
        stop(worker)
    mem.close()


def test_doctor_names_an_evicting_redis_a_corrupt_archive_and_an_unreachable_one(tmp_path,
                                                                                 fault_config):
    lru = RedisServer(aof=False, extra=["--maxmemory-policy", "allkeys-lru"]).start()
    try:
        cfg, path = fault_config(url=lru.url)
        result = doctor(path)
        assert result.exit_code == 1
        policy = [line for line in lines_of(result, "redis") if "maxmemory-policy" in line]
        assert policy[0].startswith("FAIL") and "allkeys-lru" in policy[0]
        assert "noeviction" in policy[0]
        assert any("persists nothing" in line for line in lines_of(result, "redis"))
    finally:
        lru.cleanup()

    cfg, _ = fault_config()
    cfg = cfg.with_overrides(archive={"url": None})  # a SQLite file to break, on every stack
    path = write_config(cfg, tmp_path / "sqlite-archive.yml")
    cfg.archive_path.parent.mkdir(parents=True, exist_ok=True)
    cfg.archive_path.write_bytes(b"this is not a database" * 100)
    (archive,) = lines_of(doctor(path), "archive")
    assert archive.startswith("FAIL") and "restore it from a backup" in archive

    cfg, path = fault_config(url=f"redis://:s3cret@127.0.0.1:{free_port()}/0")
    result = doctor(path)
    assert result.exit_code == 1
    (line,) = lines_of(result, "redis")
    assert line.startswith("FAIL") and "s3cret" not in result.output


class _SlowModel(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint that takes its time: the job is mid-flight meanwhile."""

    asked: ClassVar[threading.Event] = threading.Event()
    delay = 3.0

    def do_POST(self):  # http.server's naming
        self.rfile.read(int(self.headers["Content-Length"]))
        _SlowModel.asked.set()
        time.sleep(self.delay)
        data = json.dumps({"choices": [{"message": {"content": "Decisions:\n- slow and sure"}}]})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(data.encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def slow_model():
    _SlowModel.asked.clear()
    server = HTTPServer(("127.0.0.1", 0), _SlowModel)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()


@pytest.mark.parametrize("signals", [1, 2])
def test_sigterm_mid_job_finishes_it_or_hands_it_back(tmp_path, fault_config, slow_model, signals):
    """One SIGTERM: the worker finishes the job it holds (the summary lands), then exits 0.
    A second one stops it at once; the next worker picks the session up. Nothing is lost."""
    cfg, path = fault_config(max_messages=4, compression={"summary_model": "tiny",
                                                          "keep_recent": 1})
    cfg = cfg.with_overrides(summarizer={"base_url": slow_model, "timeout": 30})
    write_config(cfg, path)
    mem = SessionMemory(cfg)
    sid = mem.create_session(user_id="alice")
    acked = [mem.append(sid, role, f"{role} {i}").message_id
             for i in range(6) for role in ("user", "assistant")]
    log = tmp_path / "worker.log"
    worker = spawn_worker(path, log)
    try:
        assert _SlowModel.asked.wait(30), log.read_text()  # the job is waiting on the model
        worker.send_signal(signal.SIGTERM)
        if signals == 2:  # RQ ignores a second signal within a second of handling the first,
            # which a loaded machine may do late: wait until it has (it records the time)
            def handled() -> bool:
                return any(w.pid == worker.pid and w.shutdown_requested_date
                           for w in Worker.all(connection=mem.queue.connection))

            assert wait_for(handled, 30), log.read_text()
            time.sleep(1.3)
            worker.send_signal(signal.SIGTERM)
        try:
            rc = worker.wait(60)
        except subprocess.TimeoutExpired:  # SIGABRT: faulthandler writes every thread's stack
            worker.send_signal(signal.SIGABRT)
            worker.wait(10)
            pytest.fail(f"the worker did not exit 60 s after SIGTERM: {log.read_text()}")
    finally:
        stop(worker)
    if signals == 1:
        assert rc == 0, log.read_text()
        assert mem.info(sid).summary == "Decisions:\n- slow and sure"  # the job finished
    else:
        assert "cold shut down" in log.read_text()
        assert mem.info(sid).summary == "", log.read_text()  # stopped mid-job, nothing half-done
        burst(path, tmp_path / "burst.log")  # the session is handed to the next worker
    ids = [r[0] for r in archive_query(cfg, "SELECT message_id FROM messages WHERE session_id=? "
                                       "ORDER BY seq", (sid,))]
    figures(f"sigterm_x{signals}", appended=len(acked), archived=len(set(ids)),
            lost=len(set(acked) - set(ids)), duplicated=len(ids) - len(set(ids)))
    assert ids == acked
    mem.close()


def test_near_maxmemory_appends_warn_then_fail_cleanly_and_work_again_once_drained(
        tmp_path, fault_config, caplog):
    server = RedisServer(aof=False, extra=["--maxmemory", "8mb"]).start()
    try:
        cfg, path = fault_config(url=server.url, max_messages=8)
        cfg = cfg.with_overrides(redis={"memory_warn": 0.7})
        mem = SessionMemory(cfg)
        sid = mem.create_session(user_id="alice")
        stored, err = 0, None
        with caplog.at_level(logging.WARNING, logger="hermes_redis.session_memory"):
            for i in range(20_000):
                try:
                    mem.append(sid, "user", f"{i} " + "lorem ipsum dolor " * 50)
                    stored += 1
                except BackendUnavailableError as e:
                    err = e
                    break
        warned = [r for r in caplog.records if "of maxmemory" in r.getMessage()]
        assert warned, "no warning before Redis filled up"
        assert err is not None and "\n" not in str(err)
        assert "nearly out of memory" in str(err) and "redis.memory_limit 95%" in str(err)
        meta = mem.hot.meta(sid)
        assert meta.message_count == stored == mem.hot.length(sid)  # nothing half-written
        write_config(cfg, path)
        burst(path, tmp_path / "burst.log")  # a worker archives and compacts: memory comes back
        mem.append(sid, "user", "after the drain")
        figures("near_maxmemory", appended=stored + 1, refused=1, warned_at_share=0.7,
                hot_after_drain=mem.hot.length(sid))
        assert mem.messages(sid)[-1].content == "after the drain"
        assert len(mem.messages(sid)) == stored + 1
        mem.close()
    finally:
        server.cleanup()


def test_a_restarted_redis_is_told_apart_by_doctor(tmp_path, fault_config):
    """doctor reads a live Redis each time: stop it and the redis check fails, start it and
    it passes again (no cached verdict)."""
    own = RedisServer().start()
    try:
        cfg, path = fault_config(url=own.url)
        SessionMemory(cfg).close()
        assert all(line.startswith("OK") for line in lines_of(doctor(path), "redis"))
        own.stop()
        assert lines_of(doctor(path), "redis")[0].startswith("FAIL")
        own.start()
        assert all(line.startswith("OK") for line in lines_of(doctor(path), "redis"))
        redis.Redis(port=own.port).ping()
    finally:
        own.cleanup()


def test_worker_metrics_report_flushes_compactions_and_the_shared_backlog(tmp_path, fault_config):
    import urllib.request

    from prometheus_client import generate_latest

    from hermes_redis.core import metrics
    from tests.fault.conftest import spawn

    cfg, path = fault_config(max_messages=6, compression={"keep_recent": 1})
    mem = SessionMemory(cfg)
    before = metrics.APPENDS._value.get()
    sid = mem.create_session(user_id="alice")
    for i in range(10):
        mem.append(sid, "user", f"We picked PostgreSQL {i}.")
        mem.append(sid, "assistant", f"Noted, version {i}.")
    assert metrics.APPENDS._value.get() - before == 20  # this process appended 20
    assert b"hermes_appended_messages_total" in generate_latest()
    port = free_port()
    worker = spawn(["-m", "hermes_redis.cli", "--config", str(path), "worker",
                    "--metrics-port", str(port)], path, tmp_path / "worker.log")

    def scrape() -> dict[str, float]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                text = r.read().decode()
        except OSError:
            return {}
        return {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
                if line.startswith("hermes_") and " " in line}

    try:
        assert wait_for(lambda: scrape().get("hermes_archived_messages_total", 0) >= 20, 60), \
            (tmp_path / "worker.log").read_text()
        assert wait_for(lambda: scrape().get("hermes_backlog_sessions") == 0, 30)
        got: dict[str, float] = {}
        assert wait_for(lambda: bool(got.update(scrape()) or got), 30)  # a slow scrape is {}
        assert got["hermes_flushes_total"] >= 1 and got["hermes_compactions_total"] >= 1
        assert got['hermes_summarizer_seconds_count{summarizer="extractive"}'] >= 1
        assert got["hermes_failed_jobs"] == 0 and got["hermes_job_failures_total"] == 0
        assert got["hermes_flush_lag_seconds_count"] >= 1
        assert got["hermes_oldest_unarchived_age_seconds"] == 0
    finally:
        stop(worker)
    mem.close()
