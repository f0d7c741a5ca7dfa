"""The worker entry point: an RQ worker on the hermes queue that also sweeps periodically."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator

import redis
from rq import SimpleWorker

from hermes_redis.core import metrics
from hermes_redis.core.errors import BackendUnavailableError
from hermes_redis.jobs import tasks as jobs
from hermes_redis.session_memory import SessionMemory

log = logging.getLogger(__name__)

LISTEN_EVERY = 1.0  # seconds the command listener waits per read: its stop waits as long at most


class HermesWorker(SimpleWorker):
    """RQ's SimpleWorker (jobs run in the worker process), whose command listener (the
    thread that takes ``rq`` shutdown/kill commands) wakes every ``LISTEN_EVERY`` seconds.
    RQ reads with a 60 s wait and, on the way out, waits for that thread (redis-py 8 joins
    it): a worker told to stop took up to a minute to exit."""

    def subscribe(self) -> None:
        self.pubsub = self.connection.pubsub()
        self.pubsub.subscribe(**{self.pubsub_channel_name: self.handle_payload})
        self.pubsub_thread = self.pubsub.run_in_thread(
            sleep_time=LISTEN_EVERY, daemon=True,
            exception_handler=self._pubsub_exception_handler)  # type: ignore[assignment]  # RQ: None


def run(memory: SessionMemory, burst: bool = False, sweep_every: float = 30.0,
        metrics_port: int = 0) -> bool:
    """Process flush jobs until stopped (``burst``: until the queue is empty).

    Every run sweeps first with no grace, so a worker started after a crash recovers at once
    what the dead one left (a job it had dequeued, a session whose flush flag it never cleared).
    """
    if memory.queue is None:
        raise SystemExit("the worker needs the redis backend (memory.session.backend: redis)")
    jobs.bind(memory)
    with job_log():
        return _run(memory, burst, sweep_every, metrics_port)


def _run(memory: SessionMemory, burst: bool, sweep_every: float, metrics_port: int) -> bool:
    queue = memory.queue
    assert queue is not None  # run() checked
    if metrics_port:
        metrics.watch(memory)
        metrics.serve(metrics_port)
    stop = threading.Event()
    memory.sweep(grace=0)
    if not burst:
        threading.Thread(target=_sweeper, args=(memory, sweep_every, stop), daemon=True).start()
    delay = 1.0
    try:
        while True:  # RQ quits when Redis drops mid-job; a long-running worker starts again
            try:
                worker = HermesWorker([queue.name], connection=queue.connection)
                return bool(worker.work(burst=burst, logging_level="WARNING"))
            except (redis.ConnectionError, redis.TimeoutError, BackendUnavailableError) as err:
                if burst:
                    raise BackendUnavailableError(
                        f"lost Redis at {memory.hot.url} during the burst; run it again"
                    ) from None
                log.warning("lost Redis (%s); the worker starts again in %.0fs", err, delay)
                time.sleep(delay)
                delay = min(delay * 2, 30.0)
    finally:
        stop.set()


@contextlib.contextmanager
def job_log() -> Iterator[None]:
    """While the worker runs, the library's INFO lines (one per job) on stderr, unless INFO
    shows already (``-v``, a host application's config): a worker says what it does. Undone
    on the way out (an in-process caller's logging is as it was)."""
    logger = logging.getLogger("hermes_redis")
    if logger.isEnabledFor(logging.INFO):
        yield
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s",
                                           "%Y-%m-%d %H:%M:%S"))
    saved = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False  # a root handler (some library's) would print each line twice
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


def _sweeper(memory: SessionMemory, every: float, stop: threading.Event) -> None:
    while not stop.wait(every):
        try:
            memory.sweep(grace=every)
        except Exception as err:  # the sweeper must outlive a Redis blip
            log.warning("sweep failed: %s", err)
