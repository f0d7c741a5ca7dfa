"""A real ``hermes-redis serve`` subprocess for the HTTP tests: its own config file (private
Redis URL, key prefix, queue, archive) and a free port; started, killed and restarted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx

from tests import stack
from tests.helpers import write_config
from tests.redis_server import free_port

ROOT = Path(__file__).resolve().parent.parent


def serve_config(directory: Path, redis_url: str, **extra: dict[str, object]) -> Path:
    """A config.yml isolated to one server: its own key prefix, queue and archive file, on
    this run's stack (tests/stack.py)."""
    tag = uuid.uuid4().hex[:10]
    data: dict[str, object] = {
        "redis": {"url": redis_url, "key_prefix": f"h{tag}", "queue": f"q{tag}"},
        "archive": {"data_dir": str(directory / "data"), "path": str(directory / "memory.db")},
    }
    stack.merge(data, redis_url)
    # issue 33: one process unless a test asks for more (`serve`'s default is one per core;
    # a SIGKILLed manager would leave its workers behind)
    data["server"] = {"workers": 1}
    for section, values in extra.items():
        data[section] = {**data.get(section, {}), **values}  # type: ignore[dict-item]
    return write_config(data, directory / "config.yml")


def cli(config: Path, *args: str, check: bool = True, env: dict[str, str] | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``hermes-redis --config CONFIG ARGS`` as a user would."""
    return subprocess.run([sys.executable, "-m", "hermes_redis.cli", "--config", str(config), *args],
                          capture_output=True, text=True, check=check, cwd=ROOT, timeout=timeout,
                          env={**os.environ, **(env or {})})


class ServeProcess:
    def __init__(self, config: Path, *extra: str, port: int | None = None) -> None:
        self.config, self.extra = config, list(extra)
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = config.parent / f"serve-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120) -> ServeProcess:
        args = [sys.executable, "-m", "hermes_redis.cli", "--config", str(self.config), "serve",
                "--port", str(self.port), *self.extra]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited with {self.proc.returncode}: {self.output()}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"serve did not answer within {timeout}s: {self.output()}")

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def kill(self) -> None:
        """SIGKILL: no shutdown handler runs."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
            self.proc = None
