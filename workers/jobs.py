"""RQ jobs. Each takes only a session id: the worker process owns the SessionMemory,
built from its config (``$HERMES_CONFIG``) once, and every job is safe to run twice."""

from __future__ import annotations

import os

from hermes_redis import metrics
from hermes_redis.session_memory import SessionMemory

_memory: SessionMemory | None = None


def bind(memory: SessionMemory) -> None:
    """Use this SessionMemory for jobs run in this process (the worker entry point calls it)."""
    global _memory
    _memory = memory


def memory() -> SessionMemory:
    global _memory
    if _memory is None:
        _memory = SessionMemory.from_config(os.environ.get("HERMES_CONFIG"))
    return _memory


def flush_session(session_id: str) -> dict[str, int]:
    """Archive the session's backlog, then compact it if the hot tier is over its caps."""
    try:
        added, trimmed = memory().maintain(session_id)
    except Exception:
        metrics.JOB_FAILURES.inc()
        raise
    return {"archived": added, "trimmed": trimmed}
