"""The worker entry point: an RQ worker on the hermes queue that also sweeps periodically."""

from __future__ import annotations

import logging
import threading

from rq import SimpleWorker

from hermes_redis.hot import RedisHot
from hermes_redis.session_memory import SessionMemory
from workers import jobs

log = logging.getLogger(__name__)


def run(memory: SessionMemory, burst: bool = False, sweep_every: float = 30.0) -> bool:
    """Process flush jobs until stopped (``burst``: until the queue is empty).

    A burst run sweeps first with no grace, so a burst after a crash recovers everything.
    """
    if not isinstance(memory.hot, RedisHot):
        raise SystemExit("the worker needs the redis backend (memory.session.backend: redis)")
    jobs.bind(memory)
    stop = threading.Event()
    if burst:
        memory.sweep(grace=0)
    else:
        threading.Thread(target=_sweeper, args=(memory, sweep_every, stop), daemon=True).start()
    worker = SimpleWorker([memory.config.redis.queue], connection=memory.hot.client)
    try:
        return bool(worker.work(burst=burst, logging_level="WARNING"))
    finally:
        stop.set()


def _sweeper(memory: SessionMemory, every: float, stop: threading.Event) -> None:
    while not stop.wait(every):
        try:
            memory.sweep(grace=every)
        except Exception as err:  # the sweeper must outlive a Redis blip
            log.warning("sweep failed: %s", err)
