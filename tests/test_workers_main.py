"""``python -m workers``: every option does what it says, as a real process (issue 34: its
``--help`` used to start a worker that ran forever and ignored every argument but --burst)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from hermes_redis import SessionMemory
from tests.helpers import auth_chat, converse, isolated_config
from tests.redis_server import free_port

ROOT = Path(__file__).resolve().parent.parent


def workers(*args: str, env: dict[str, str] | None = None, timeout: float = 60,
            cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workers", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env={**os.environ, **(env or {})})


def test_help_prints_usage_and_exits_at_once(tmp_path: Path) -> None:
    # a config naming a Redis nobody runs: --help must not try it
    bad = tmp_path / "bad.yml"
    bad.write_text("redis:\n  url: redis://127.0.0.1:1/0\n")
    started = time.monotonic()
    done = workers("--help", env={"HERMES_CONFIG": str(bad)}, timeout=30)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 30
    for option in ("--config", "--burst", "--metrics-port", "-v"):
        assert option in done.stdout
    assert done.stdout.startswith("usage: python -m workers")


def test_a_bad_option_is_one_usage_error_and_exit_2() -> None:
    done = workers("--metrics-port", "99999")
    assert done.returncode == 2
    assert "99999 is not a port" in done.stderr
    assert "Traceback" not in done.stderr
    done = workers("--nosuch")
    assert done.returncode == 2 and "unrecognized arguments: --nosuch" in done.stderr


def test_config_and_burst_archive_the_backlog(tmp_path: Path, redis_url: str) -> None:
    """--config names the deployment (not $HERMES_CONFIG, which points elsewhere), --burst
    archives what is there and exits 0; -v logs to stderr."""
    config = isolated_config(tmp_path, redis_url)
    with SessionMemory.from_config(config) as mem:
        sid = mem.create_session()
        converse(mem, sid, 3, auth_chat())
        assert mem.info(sid).backlog == 6
        done = workers("--config", str(config), "--burst", "-v",
                       env={"HERMES_CONFIG": str(tmp_path / "missing.yml")})
        assert done.returncode == 0, done.stderr
        assert "Burst done" in done.stdout
        assert mem.info(sid).backlog == 0
        assert len(mem.cold.messages(sid)) == 6


def test_a_missing_config_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    done = workers("--config", str(tmp_path / "missing.yml"), "--burst")
    assert done.returncode == 2
    assert done.stderr.startswith("Error: ") and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_the_memory_backend_is_refused(tmp_path: Path, redis_url: str) -> None:
    config = isolated_config(tmp_path, redis_url, backend="memory")
    done = workers("--config", str(config), "--burst")
    assert done.returncode == 2
    assert "needs memory.session.backend: redis" in done.stderr


def test_metrics_port_serves_metrics(tmp_path: Path, redis_url: str) -> None:
    config = isolated_config(tmp_path, redis_url)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "workers", "--config", str(config),
                             "--metrics-port", str(port)], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        body = ""
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    body = r.read().decode()
                break
            except OSError:
                time.sleep(0.1)
        died = proc.stderr.read() if proc.poll() is not None and proc.stderr else ""
        assert "hermes_backlog_messages" in body, died
    finally:
        proc.terminate()
        proc.wait(timeout=60)
