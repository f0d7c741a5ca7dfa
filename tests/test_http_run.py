"""``bash scripts/run.sh serve`` on the embedded default: one command starts the server and a
worker (what is appended gets archived without a second terminal), and Ctrl-C stops both."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.helpers import write_config
from tests.http_server import ROOT
from tests.redis_server import free_port


def test_run_sh_serve_starts_the_server_and_a_worker(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {**os.environ, "HERMES_DATA_DIR": str(data)}  # embedded Redis and archive in here
    env.pop("HERMES_REDIS_URL", None)
    port = free_port()
    log = tmp_path / "run.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(["bash", "scripts/run.sh", "serve", "--port", str(port)], cwd=ROOT,
                                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120  # setup.sh is a no-op once .venv is installed
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        else:
            raise AssertionError(log.read_text())
        sid = httpx.post(url + "/v1/sessions", json={}).json()["session_id"]
        r = httpx.post(f"{url}/v1/sessions/{sid}/messages",
                       json={"messages": [{"role": "user", "content": "archive me"},
                                          {"role": "assistant", "content": "done"}]})
        assert r.status_code == 201
        deadline = time.monotonic() + 30
        info = httpx.get(f"{url}/v1/sessions/{sid}").json()
        while info["flushed_seq"] < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
            info = httpx.get(f"{url}/v1/sessions/{sid}").json()
        assert info["flushed_seq"] == 2 and info["archived_count"] == 2, info  # the worker ran
        text = log.read_text()
        assert "Worker listening" in text and "loopback only" in text
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C sends to the foreground group
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        subprocess.run([str(ROOT / ".venv/bin/hermes-redis"), "server", "stop"], env=env,
                       capture_output=True, check=False, timeout=30)
    # A zombie has exited; it stays listed only until PID 1 reaps it, and a
    # container's PID 1 may never do so. Only living processes count.
    listing = subprocess.run(["ps", "-o", "pid=,stat=,cmd=", "-g", str(proc.pid)],
                             capture_output=True, text=True).stdout
    rows = [line.split(None, 2) for line in listing.splitlines() if line.strip()]
    alive = [" ".join(row) for row in rows if not row[1].startswith("Z")]
    assert alive == [], "the server or worker outlived Ctrl-C:\n" + "\n".join(alive)


def test_the_serve_banner_names_the_console(tmp_path: Path) -> None:
    """Issue 45: the banner said only "Docs at /docs"; it names /ui, which the README links."""
    config = write_config({"memory": {"session": {"backend": "memory"}},
                           "archive": {"data_dir": str(tmp_path / "data"),
                                       "path": str(tmp_path / "memory.db")}},
                          tmp_path / "config.yml")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "hermes_redis.cli", "--config", str(config),
                             "serve", "--port", str(port)], cwd=ROOT, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)},  # this checkout's code
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert proc.stderr is not None
        banner = proc.stderr.readline()
    finally:
        proc.terminate()
        proc.wait(30)
    assert banner.startswith(f"Serving hermes-redis on http://127.0.0.1:{port} (1 worker)"), banner
    assert banner.rstrip().endswith(f"The console at http://127.0.0.1:{port}/ui/, API docs at "
                                    "/docs."), banner
    assert "/ui" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_run_sh_with_redis_away_is_one_line(tmp_path: Path) -> None:
    """Issue 45: ``bash scripts/run.sh`` (the demo) and ``run.sh serve`` give the CLI's one
    line for an unreachable Redis: not a traceback, and not a line from the worker and another
    from the server."""
    env = {**os.environ, "HERMES_DATA_DIR": str(tmp_path / "data"),
           "HERMES_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    for args in ([], ["serve", "--port", str(free_port())]):
        done = subprocess.run(["bash", "scripts/run.sh", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 5, (args, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: cannot reach Redis at "), (args, lines)
