"""RQ jobs. Each takes only a session id: the worker process owns the SessionMemory,
built from its config (``$HERMES_CONFIG``) once, and every job is safe to run twice."""

from __future__ import annotations

import logging
import os
import time

from prometheus_client import REGISTRY

from hermes_redis.core import metrics
from hermes_redis.session_memory import SessionMemory

log = logging.getLogger(__name__)

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


def _count(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


def flush_session(session_id: str) -> dict[str, int]:
    """Archive the session's backlog, then compact it if the hot tier is over its caps. Logs
    one INFO line per job: the session, what it did and how long it took (a failure: WARNING).
    Compactions and extracted memories are this process's counters' growth: a worker runs one
    job at a time."""
    started = time.perf_counter()
    before = _count("hermes_compactions_total"), _count("hermes_extracted_memories_total")
    try:
        added, trimmed = memory().maintain(session_id)
    except Exception as err:
        metrics.JOB_FAILURES.inc()
        log.warning("flush %s failed after %.3f s: %s", session_id,
                    time.perf_counter() - started, " ".join(str(err).split()))
        raise
    compacted = _count("hermes_compactions_total") > before[0]
    extracted = int(_count("hermes_extracted_memories_total") - before[1])
    done = [f"archived {added}"]
    if compacted:
        done.append(f"compacted (trimmed {trimmed} from Redis)")
    if extracted:
        done.append(f"extracted {extracted} memor{'y' if extracted == 1 else 'ies'}")
    level = logging.INFO if added or compacted or extracted else logging.DEBUG  # no-op: quiet
    log.log(level, "flush %s: %s in %.3f s", session_id, ", ".join(done),
            time.perf_counter() - started)
    return {"archived": added, "trimmed": trimmed}
