"""Prometheus metrics (prometheus-client), one set per process.

Counters and histograms count what this process did (appends, flushes, compactions,
summarizer calls). The shared state (backlog, oldest unarchived turn, failed jobs) is read
from Redis when scraped, so every worker and server reports the same figures for it.
``hermes-redis worker --metrics-port P`` serves them; the HTTP server serves ``/metrics``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client import Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector

log = logging.getLogger(__name__)

APPENDS = Counter("hermes_appended_messages", "Messages appended by this process.")
FLUSHES = Counter("hermes_flushes", "Flushes of a session's backlog into the archive.")
ARCHIVED = Counter("hermes_archived_messages", "Messages a flush wrote to the archive.")
FLUSH_LAG = Histogram("hermes_flush_lag_seconds",
                      "From a message's append to its arrival in the archive.",
                      buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600))
COMPACTIONS = Counter("hermes_compactions", "Summaries installed by compaction.")
JOB_FAILURES = Counter("hermes_job_failures", "Flush jobs that raised (the sweep retries them).")
RETRIES = Counter("hermes_sweep_requeues", "Sessions the sweep enqueued again (a lost or slow job).")
EXTRACTED = Counter("hermes_extracted_memories",
                    "Durable facts extraction stored after a flush (new memories or new sources).")
RESEATS = Counter("hermes_reseats", "Flushes that met seqs reused by a Redis gone back in time.")
SUMMARIZER_SECONDS = Histogram("hermes_summarizer_seconds", "Time to fold messages into a summary.",
                               ["summarizer"],
                               buckets=(0.001, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60))
SUMMARIZER_FALLBACKS = Counter("hermes_summarizer_fallbacks",
                               "Remote summaries that failed and fell back to the offline one.")
# issue 31: embeddings (off the request path but for one query vector per context())
EMBEDDED = Counter("hermes_embedded_texts", "Texts the embedding provider turned into vectors.")
EMBED_FAILURES = Counter("hermes_embedding_failures",
                         "Embedding calls that failed (vectors are filled in by a later flush).")
EMBED_SECONDS = Histogram("hermes_embedding_seconds", "Time of one embedding call (all batches).",
                          buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30))


class BacklogCollector(Collector):
    """What the hot tier holds unarchived, and RQ's failed jobs, read at scrape time: every
    worker and server reports the same values (take ``max`` across them, not ``sum``)."""

    def __init__(self, mem: Any) -> None:
        self.mem = mem

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            sessions, messages, oldest = self.mem.backlog()
            failed = self.mem.failed_jobs()
        except Exception as err:  # a scrape must not fail because Redis blinked
            log.warning("metrics: %s", err)
            return
        yield GaugeMetricFamily("hermes_backlog_sessions",
                                "Sessions holding messages not yet archived", value=sessions)
        yield GaugeMetricFamily("hermes_backlog_messages",
                                "Messages in the hot tier not yet archived", value=messages)
        yield GaugeMetricFamily("hermes_oldest_unarchived_age_seconds",
                                "Age of the oldest message not yet archived (0: none)",
                                value=oldest or 0.0)
        yield GaugeMetricFamily("hermes_failed_jobs", "Jobs in RQ's failed registry",
                                value=failed)


def watch(mem: Any) -> None:
    """Report ``mem``'s backlog in this process's default registry (worker processes)."""
    REGISTRY.register(BacklogCollector(mem))


def serve(port: int, host: str = "127.0.0.1") -> None:
    """Serve ``/metrics`` on ``host:port`` from a background thread."""
    start_http_server(port, addr=host)
