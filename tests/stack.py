"""Which stack the suite runs on, and the config sections that put a test there.

``HERMES_TEST_STACK`` (read here, at import, before tests/conftest.py clears every HERMES_*
variable) picks it:

* ``default`` (unset): the hot tier on the private single redis-server, the archive in a
  SQLite file per test; the ``backend`` suites also run on the in-process memory backend,
  and the ``PG_ARCHIVE_MODULES`` / ``CLUSTER_MODULES`` slices on the other two.
* ``cluster+pg``: every config a test builds for the shared test Redis (``make_config``,
  ``config_factory("redis")``, ``rmem``, ``helpers.isolated_config``,
  ``http_server.serve_config`` and so the CLI, HTTP and worker subprocesses) puts the hot
  tier on the private three-primary Redis Cluster instead, its RQ queue on the single
  redis-server, and every archive in a fresh schema of the private PostgreSQL. A test that
  brings its own Redis (one it kills, a password or TLS one) keeps it and gets the
  PostgreSQL archive. A test that is about one stack only says so with
  ``@pytest.mark.stack("default", reason=...)`` and is skipped on the other.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from tests.postgres_server import PostgresServer

STACKS = ("default", "cluster+pg")
NAME = os.environ.get("HERMES_TEST_STACK", "").strip() or "default"
if NAME not in STACKS:
    raise SystemExit(f"HERMES_TEST_STACK={NAME!r}: use one of {', '.join(STACKS)}")
SECOND = NAME == "cluster+pg"


@dataclass
class Servers:
    """The second stack's servers, started once per run by conftest's ``stack`` fixture."""

    redis_url: str    # the single test redis-server: RQ's queue
    cluster_url: str  # any node of the test Redis Cluster
    postgres: PostgresServer


ACTIVE: Servers | None = None
_schema: str | None = None  # this test's PostgreSQL schema: one per test, as one SQLite file


def new_test() -> None:
    """Start the next test on a schema of its own (conftest calls it before each test)."""
    global _schema
    _schema = None


def sections(redis_url: str | None) -> dict[str, dict[str, Any]]:
    """Config overrides that put a test config built for ``redis_url`` on this run's stack:
    none on the default stack; on cluster+pg the cluster (when ``redis_url`` is the shared
    test Redis) and always this test's PostgreSQL schema for the archive (every config a test
    builds shares it, as they share the test's SQLite file on the default stack)."""
    if not SECOND:
        return {}
    if ACTIVE is None:
        raise RuntimeError("HERMES_TEST_STACK=cluster+pg but its servers are not started "
                           "(tests/conftest.py's session fixture `stack` starts them)")
    global _schema
    if _schema is None:
        _schema = ACTIVE.postgres.new_schema()
    out: dict[str, dict[str, Any]] = {"archive": {"url": _schema}}
    if redis_url == ACTIVE.redis_url:
        out["redis"] = {"url": ACTIVE.cluster_url, "queue_url": ACTIVE.redis_url}
    return out


def separate_archive(path: str) -> dict[str, Any]:
    """The ``archive`` section of a second deployment in the same test, with an archive of
    its own: the SQLite file ``path``, and on cluster+pg a schema other than the test's."""
    if not SECOND or ACTIVE is None:
        return {"path": path}
    return {"path": path, "url": ACTIVE.postgres.new_schema()}


def merge(data: dict[str, Any], redis_url: str | None) -> dict[str, Any]:
    """``data`` (config sections, as written to a YAML file) with ``sections`` laid over."""
    for name, values in sections(redis_url).items():
        data[name] = {**data.get(name, {}), **values}
    return data
