"""Redis unavailable at start, and restarted (killed and stopped) under load.

Documented behaviour (docs/reliability.md): every call retries ``redis.retries`` times on
a dropped connection (append safely: a retry finds its own earlier attempt by
message_id), then raises BackendUnavailableError, one line naming the redacted URL.
With AOF ``appendfsync always``, nothing acknowledged is lost across a restart.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import pytest
from click.testing import CliRunner
from rq import Queue, Worker

from hermes_redis import SessionMemory
from hermes_redis.cli.main import cli
from hermes_redis.core.errors import BackendUnavailableError
from tests.fault.conftest import (
    REPO,
    Acked,
    audit,
    burst,
    child_env,
    figures,
    spawn_worker,
    stop,
    wait_for,
)
from tests.redis_server import free_port


@pytest.fixture
def blackhole():
    """A port on 127.0.0.1 that completes the TCP handshake and then never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    yield sock.getsockname()[1]
    sock.close()


@pytest.mark.parametrize("where", ["refused", "blackhole"])
def test_unavailable_at_start_is_a_clear_error_not_a_hang(tmp_path, fault_config, blackhole,
                                                          where):
    port = free_port() if where == "refused" else blackhole
    url = f"redis://app:hunter2@127.0.0.1:{port}/0"
    cfg, path = fault_config(url=url)
    cfg = cfg.with_overrides(redis={"socket_timeout": 0.5, "retries": 2})
    from tests.helpers import write_config

    write_config(cfg, path)
    started = time.monotonic()
    with pytest.raises(BackendUnavailableError) as err:
        SessionMemory(cfg)
    took = time.monotonic() - started
    msg = str(err.value)
    assert "\n" not in msg and "hunter2" not in msg
    assert f"cannot reach Redis at redis://app:***@127.0.0.1:{port}/0" in msg
    assert took < 0.5 * 3 + 10, f"took {took:.1f}s"  # bounded by the timeouts, never a hang
    result = CliRunner().invoke(cli, ["--config", str(path), "session", "list"])
    assert result.exit_code == BackendUnavailableError.exit_code
    assert result.output.startswith("Error: cannot reach Redis") and "Traceback" not in result.output
    proc = subprocess.run([sys.executable, "-m", "workers", "--burst"], cwd=REPO,
                          env=child_env(path), capture_output=True, text=True, timeout=60)
    assert proc.returncode == BackendUnavailableError.exit_code, proc.stderr
    assert "Traceback" not in proc.stderr and "cannot reach Redis" in proc.stderr
    assert "hunter2" not in proc.stderr + proc.stdout
    figures(f"unavailable_at_start_{where}", seconds=round(took, 2), hang=False)


def test_redis_restarted_under_load_loses_nothing_acknowledged(own_redis, fault_config,
                                                               tmp_path):
    cfg, path = fault_config(url=own_redis.url, max_messages=30,
                             compression={"keep_recent": 4})
    cfg = cfg.with_overrides(redis={"socket_timeout": 1.0})
    from tests.helpers import write_config

    write_config(cfg, path)
    setup = SessionMemory(cfg)
    sids = [setup.create_session(user_id="alice") for _ in range(3)]
    log = tmp_path / "worker.log"
    worker = spawn_worker(path, log)
    queue = Queue(cfg.redis.queue, connection=setup.hot.client)
    assert wait_for(lambda: Worker.count(queue=queue) > 0, 30)  # up before the first outage
    acked: list[Acked] = []
    errors: list[str] = []
    halt = threading.Event()
    lock = threading.Lock()

    def agent(n: int) -> None:
        mem = SessionMemory(cfg)
        i = 0
        while not halt.is_set() and i < 600:
            sid = sids[(n + i) % len(sids)]
            role = "user" if i % 2 == 0 else "assistant"
            try:
                m = mem.append(sid, role, f"agent {n} message {i}: we use Redis 7 with AOF.")
                with lock:
                    acked.append(Acked.of(m))
                i += 1
                if i % 10 == 0:
                    ctx = mem.context(sid, budget=400)
                    assert ctx.tokens <= 400
            except BackendUnavailableError as err:
                with lock:
                    errors.append(str(err))
                time.sleep(0.1)  # what an agent does: wait and try again
        mem.close()

    threads = [threading.Thread(target=agent, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    faults = 0
    try:
        for kill in (True, False, True):
            assert wait_for(lambda n=faults: len(acked) > 150 * (n + 1), 60)
            own_redis.stop(kill=kill)  # SIGKILL, then a clean SIGTERM, then SIGKILL again
            faults += 1
            time.sleep(1.0)
            own_redis.start()
        assert wait_for(lambda: len(acked) > 150 * (faults + 1), 60)
        survived = worker.poll() is None
    finally:
        halt.set()
        for t in threads:
            t.join(60)
        stop(worker)
    assert errors, "the outages were too short to be seen"
    assert survived, f"the worker died with Redis:\n{log.read_text()[-3000:]}"
    for text in errors:
        assert "\n" not in text and "cannot reach Redis at" in text, text
    burst(path, tmp_path / "burst.log")
    totals = audit(setup, acked, ambiguous_ok=True)
    assert totals["lost"] == 0 and totals["duplicated"] == 0
    figures("redis_restart", acknowledged=len(acked), restarts=faults,
            failed_calls=len(errors), worker_survived=survived, **totals)
    setup.close()
