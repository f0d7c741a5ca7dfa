"""The health view's figures: live numbers from the library on each request, and the
doctor's checks, which cost an archive integrity check, run in the background at most once
every ``DOCTOR_EVERY`` seconds (the page says how old they are)."""

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from hermes_redis.cli import doctor
from hermes_redis.core.errors import HermesError
from hermes_redis.session_memory import SessionMemory

DOCTOR_EVERY = 10.0  # seconds between two runs of the doctor's checks
FIRST_WAIT = 5.0  # how long the first page waits for the first run


@dataclass
class Live:
    """What the hot tier and the queue say right now (None: could not be read)."""

    used: int | None = None
    maxmemory: int | None = None
    workers: int | None = None
    backlog_sessions: int | None = None
    backlog_messages: int | None = None
    backlog_age: float | None = None
    failed_jobs: int | None = None
    queued: int | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def share(self) -> float | None:
        if self.used is None or not self.maxmemory:
            return None
        return self.used / self.maxmemory


def live(mem: SessionMemory) -> Live:
    out = Live()
    try:
        use = mem.hot.memory_use()
        if use is not None:
            out.used, out.maxmemory = use
    except HermesError as err:
        out.errors.append(f"Redis memory: {err}")
    try:
        out.backlog_sessions, out.backlog_messages, out.backlog_age = mem.backlog()
    except HermesError as err:
        out.errors.append(f"backlog: {err}")
    try:
        out.failed_jobs = mem.failed_jobs()
        if mem.queue is not None:
            out.workers = len(mem.queue.workers())
            out.queued = mem.queue.queued()
    except Exception as err:  # RQ's own errors: shown, not a 500
        out.errors.append(f"queue: {err}")
    return out


class DoctorChecks:
    """The doctor's checks of one config, refreshed in a background thread."""

    def __init__(self, mem: SessionMemory) -> None:
        self.mem = mem
        self.checks: list[doctor.Check] = []
        self.at = 0.0  # time.time() of the last run (0: none yet)
        self._lock = threading.Lock()
        self._running: threading.Thread | None = None
        self._done = threading.Event()

    def _run(self) -> None:
        try:
            checks = doctor.run(self.mem.config)
        except Exception as err:  # a broken check is shown as one
            checks = [doctor.Check("doctor", doctor.FAIL, f"the checks failed to run: {err}")]
        self.checks, self.at = checks, time.time()
        self._done.set()

    def current(self) -> tuple[list[doctor.Check], float]:
        """The latest checks and when they ran; starts a new run when they are stale."""
        with self._lock:
            stale = time.time() - self.at > DOCTOR_EVERY
            if stale and (self._running is None or not self._running.is_alive()):
                self._running = threading.Thread(target=self._run, daemon=True,
                                                 name="hermes-ui-doctor")
                self._running.start()
        if not self.at:
            self._done.wait(FIRST_WAIT)
        return self.checks, self.at


def as_dict(checks: list[doctor.Check]) -> list[dict[str, Any]]:
    return [c.as_dict() for c in checks]
