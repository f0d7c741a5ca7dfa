"""The server's Prometheus metrics: requests and latency per route template."""

import os
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from hermes_redis.core.metrics import REGISTRY as LIBRARY
from hermes_redis.core.metrics import BacklogCollector
from hermes_redis.session_memory import SessionMemory


class Metrics:
    """Requests and latency per route template; per process, or summed over uvicorn workers
    when ``PROMETHEUS_MULTIPROC_DIR`` is set (``serve --workers N`` sets it)."""

    def __init__(self, mem: SessionMemory) -> None:
        self.registry = CollectorRegistry()
        self.multiprocess = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        self.requests = Counter("hermes_http_requests", "HTTP requests",
                                ("method", "route", "status"), registry=self.registry)
        self.latency = Histogram("hermes_http_request_duration_seconds", "HTTP request latency",
                                 ("method", "route"), registry=self.registry,
                                 buckets=(.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5,
                                          1, 2.5, 5, 10))
        self.backlog = BacklogCollector(mem)
        if not self.multiprocess:
            self.registry.register(self.backlog)
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count one request and its latency (the labelled children looked up once each)."""
        children = self._children.get((method, route, status))
        if children is None:
            children = (self.requests.labels(method, route, str(status)),
                        self.latency.labels(method, route))
            self._children[(method, route, status)] = children
        children[0].inc()
        children[1].observe(seconds)

    def render(self) -> bytes:
        """HTTP metrics, the backlog, and the library's own counters (appends, flushes…)."""
        if not self.multiprocess:
            return generate_latest(self.registry) + generate_latest(LIBRARY)
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        registry.register(self.backlog)
        return generate_latest(registry)
