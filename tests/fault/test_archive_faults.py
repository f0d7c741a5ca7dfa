"""The archive in trouble: locked by another process, disk full, file removed.

Each is a clear one-line error; the hot tier keeps every unarchived turn (and keeps it
from expiring); once the problem is gone the flush resumes and the audit finds every
message exactly once (invariants 2, 3, 5, 7).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_redis import SessionMemory
from hermes_redis.core.errors import BackendUnavailableError
from hermes_redis.jobs.worker import run
from hermes_redis.store.archive import Archive
from tests.fault.conftest import Acked, audit, figures
from tests.helpers import Say, converse


def lorem(size: int = 40) -> Say:
    """Long messages numbered in the order they are appended, two per exchange."""

    def say(i: int) -> tuple[str, str]:
        def text(n: int) -> str:
            return f"message {n}: we decided on PostgreSQL 16 and JWT. " + "lorem ipsum " * size

        return text(2 * i), text(2 * i + 1)

    return say


def talk(mem: SessionMemory, sid: str, n: int, size: int = 40) -> list[Acked]:
    """``n`` (even) alternating messages, as the agent was told they landed."""
    return [Acked.of(m) for m in converse(mem, sid, n // 2, lorem(size))]


def hot_keeps(mem: SessionMemory, sid: str, acked: list[Acked]) -> None:
    """Everything not archived is still in Redis and cannot expire."""
    meta = mem.hot.meta(sid)
    assert meta is not None and meta.last_seq > meta.flushed_seq
    hot = {m.message_id for m in mem.hot.messages(sid)}
    flushed = meta.flushed_seq
    assert {a.message_id for a in acked if a.seq > flushed} <= hot
    assert mem.hot.ttl_left(sid) is None  # persisted while unarchived (invariant 2)
    ctx = mem.context(sid)  # agents keep working meanwhile
    assert ctx.messages and ctx.messages[-1].message_id == acked[-1].message_id


def one_line(err: BaseException, *needles: str) -> str:
    text = str(err)
    assert "\n" not in text, text
    for needle in needles:
        assert needle in text, text
    return text


@pytest.fixture
def amem(config_factory, tmp_path):  # type: ignore[no-untyped-def]
    def factory(path: Path, **session: object) -> SessionMemory:
        cfg = config_factory("redis", ttl=2, **session).with_overrides(
            archive={"path": str(path), "url": None})  # SQLite file faults, on either hot tier
        return SessionMemory(cfg, archive=Archive(cfg.archive_path, busy_timeout=0.3))

    made: list[SessionMemory] = []
    yield lambda path, **kw: made.append(factory(path, **kw)) or made[-1]
    for m in made:
        m.close()


LOCKER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
db.execute("COMMIT")
"""


def test_archive_locked_by_another_process(amem, tmp_path):
    mem = amem(tmp_path / "memory.db")
    sid = mem.create_session(user_id="alice")
    acked = talk(mem, sid, 10)
    mem.flush(sid)
    locker = subprocess.Popen([sys.executable, "-c", LOCKER, str(mem.config.archive_path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert locker.stdout is not None and locker.stdout.readline().strip() == b"locked"
    try:
        acked += talk(mem, sid, 30)
        for _ in range(3):
            with pytest.raises(BackendUnavailableError) as err:
                mem.flush(sid)
            one_line(err.value, "database is locked", "another process", str(mem.cold.path))
        assert mem.sweep(grace=0) == [sid]
        run(mem, burst=True)  # the worker's job fails the same way, and the turns stay
        hot_keeps(mem, sid, acked)
    finally:
        assert locker.stdin is not None
        locker.stdin.close()
        locker.wait(10)
    mem.sweep(grace=0)
    run(mem, burst=True)
    totals = audit(mem, acked)
    figures("archive_locked", faults=4, **totals)


def fill(directory: Path) -> Path:
    """Write a filler file until the filesystem is full."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        for size in (65536, 4096, 512, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler


@pytest.fixture
def tiny_fs(tmp_path):
    """A 3 MB tmpfs (root only); skipped where mounting is not allowed."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tiny tmpfs needs root and mount(8)")
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)],
                         capture_output=True, text=True, check=False)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_disk_full_on_a_tiny_filesystem(amem, tiny_fs):
    mem = amem(tiny_fs / "memory.db")
    sid = mem.create_session(user_id="alice")
    acked = talk(mem, sid, 10)
    mem.flush(sid)
    filler = fill(tiny_fs)
    acked += talk(mem, sid, 200, size=60)
    faults = 0
    for _ in range(3):
        with pytest.raises(BackendUnavailableError) as err:
            mem.flush(sid)
        one_line(err.value, "disk is full", str(mem.cold.path))
        faults += 1
    hot_keeps(mem, sid, acked)
    filler.unlink()  # free space: the flush resumes
    mem.sweep(grace=0)
    run(mem, burst=True)
    assert sqlite3.connect(mem.cold.path).execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    totals = audit(mem, acked)
    figures("disk_full_tmpfs", faults=faults, **totals)


def test_disk_full_as_a_size_limited_file(amem, tmp_path):
    """Runs everywhere: SQLite's max_page_count caps the file like a full disk would."""
    mem = amem(tmp_path / "memory.db")
    sid = mem.create_session(user_id="alice")
    acked = talk(mem, sid, 10)
    mem.flush(sid)
    conn = mem.cold._connect()
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count={pages + 2}")
    acked += talk(mem, sid, 200, size=60)
    with pytest.raises(BackendUnavailableError) as err:
        mem.flush(sid)
    one_line(err.value, "full", str(mem.cold.path))
    hot_keeps(mem, sid, acked)
    conn.execute("PRAGMA max_page_count=1073741823")
    assert mem.flush(sid) == 200
    totals = audit(mem, acked)
    figures("disk_full_page_limit", faults=1, **totals)


def test_archive_moved_away_then_restored(amem, tmp_path):
    path = tmp_path / "memory.db"
    mem = amem(path)
    sid = mem.create_session(user_id="alice")
    acked = talk(mem, sid, 10)
    mem.flush(sid)
    aside = tmp_path / "aside"
    aside.mkdir()
    moved = [p for p in tmp_path.glob("memory.db*")]
    for p in moved:
        p.rename(aside / p.name)
    acked += talk(mem, sid, 20)
    with pytest.raises(BackendUnavailableError) as err:
        mem.flush(sid)
    one_line(err.value, "removed or replaced", str(path))
    with pytest.raises(BackendUnavailableError) as err:  # and it stays refused, no new file
        mem.flush(sid)
    one_line(err.value, str(path))
    assert not path.exists()
    hot_keeps(mem, sid, acked)
    for p in moved:
        (aside / p.name).rename(p)
    mem.sweep(grace=0)
    run(mem, burst=True)
    totals = audit(mem, acked)
    figures("archive_removed", faults=2, **totals)
