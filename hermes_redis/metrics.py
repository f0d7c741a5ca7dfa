"""Prometheus metrics (prometheus-client), one set per process.

Counters and histograms count what this process did (appends, flushes, compactions,
summarizer calls). The shared state (backlog, oldest unarchived turn, failed jobs) is read
from Redis when scraped, so every worker and server reports the same figures for it.
``hermes-redis worker --metrics-port P`` serves them; the HTTP server serves ``/metrics``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector

APPENDS = Counter("hermes_appended_messages", "Messages appended by this process.")
FLUSHES = Counter("hermes_flushes", "Flushes of a session's backlog into the archive.")
ARCHIVED = Counter("hermes_archived_messages", "Messages a flush wrote to the archive.")
FLUSH_LAG = Histogram("hermes_flush_lag_seconds",
                      "From a message's append to its arrival in the archive.",
                      buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600))
COMPACTIONS = Counter("hermes_compactions", "Summaries installed by compaction.")
JOB_FAILURES = Counter("hermes_job_failures", "Flush jobs that raised (the sweep retries them).")
RETRIES = Counter("hermes_sweep_requeues", "Sessions the sweep enqueued again (a lost or slow job).")
RESEATS = Counter("hermes_reseats", "Flushes that met seqs reused by a Redis gone back in time.")
SUMMARIZER_SECONDS = Histogram("hermes_summarizer_seconds", "Time to fold messages into a summary.",
                               ["summarizer"],
                               buckets=(0.001, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60))
SUMMARIZER_FALLBACKS = Counter("hermes_summarizer_fallbacks",
                               "Remote summaries that failed and fell back to the offline one.")


class StateCollector(Collector):
    """Backlog, oldest unarchived age and failed jobs, read from Redis at scrape time."""

    def __init__(self, hot: Any, queue: str) -> None:
        self.hot, self.queue = hot, queue

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from rq.registry import FailedJobRegistry

        client = self.hot.client
        try:
            size = int(client.zcard(self.hot.backlog_key()))
            oldest = client.zrange(self.hot.backlog_key(), 0, 0, withscores=True)
            failed = FailedJobRegistry(self.queue, connection=client).count
        except Exception:  # a scrape must not fail because Redis blinked
            return
        age = max(0.0, time.time() - float(oldest[0][1])) if oldest else 0.0
        yield GaugeMetricFamily("hermes_backlog_sessions", "Sessions holding unarchived messages.",
                                value=size)
        yield GaugeMetricFamily("hermes_oldest_unarchived_seconds",
                                "Age of the oldest backlog not yet archived.", value=age)
        yield GaugeMetricFamily("hermes_failed_jobs", "Jobs in RQ's failed registry.", value=failed)


_registered: set[tuple[str, str]] = set()


def watch(hot: Any, queue: str) -> None:
    """Report the shared Redis state of ``hot`` in this process's metrics (once per key space)."""
    key = (getattr(hot, "prefix", ""), queue)
    if key in _registered or not hasattr(hot, "backlog_key"):
        return
    _registered.add(key)
    REGISTRY.register(StateCollector(hot, queue))


def serve(port: int, host: str = "127.0.0.1") -> None:
    """Serve ``/metrics`` on ``host:port`` from a background thread."""
    start_http_server(port, addr=host)
