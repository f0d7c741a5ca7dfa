"""``JobQueue``: the RQ queue that carries flush jobs from the library to the workers.

It names the job by its import path (``FLUSH_JOB``), library code in ``hermes_redis.jobs``;
deduplication happens in the append script, so a session has at most one job queued."""

from __future__ import annotations

from typing import Any

import redis

from hermes_redis.core.errors import BackendUnavailableError

FLUSH_JOB = "hermes_redis.jobs.tasks.flush_session"


class JobQueue:
    """The named RQ queue on ``connection`` (``where`` is its redacted URL, for errors).
    ``owned``: the connection is the queue's own (``redis.queue_url``), closed with it."""

    def __init__(self, name: str, connection: Any, where: str, owned: bool = False) -> None:
        from rq import Queue

        self.name = name
        self.connection = connection
        self.where = where
        self._owned = owned
        self._queue = Queue(name, connection=connection)

    def enqueue_flush(self, sid: str) -> None:
        """Queue a flush of ``sid``; BackendUnavailableError when Redis refuses it."""
        try:
            self._queue.enqueue_call(FLUSH_JOB, args=(sid,), result_ttl=0, failure_ttl=86_400,
                                     description=f"flush {sid}")
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError) as err:
            # ResponseError: a Redis at maxmemory refuses the job (OOM, or ExecAbortError)
            raise BackendUnavailableError(
                f"cannot enqueue a flush on {self.where} ({err}); the sweep will retry it"
            ) from None

    def failed_count(self) -> int:
        """Flush jobs in RQ's failed registry."""
        from rq.registry import FailedJobRegistry

        return int(FailedJobRegistry(self.name, connection=self.connection).count)

    def queued(self) -> int:
        return len(self._queue)

    def workers(self) -> list[Any]:
        """The live RQ workers that serve this queue."""
        from rq import Worker

        return [w for w in Worker.all(connection=self.connection) if self.name in w.queue_names()]

    def close(self) -> None:
        if self._owned:
            self.connection.close()
