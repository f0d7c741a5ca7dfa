"""The contract suite's one fixture: ``api``, a ``SessionAPI`` of each kind. The library on
the redis backend (on cluster+pg: the Redis Cluster with a PostgreSQL archive), the library
on the in-process memory backend (default stack only: it has no second stack), and a
``HermesClient`` of a real ``hermes-redis serve`` process on this run's stack."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from hermes_redis.client import HermesClient
from hermes_redis.core.api import SessionAPI
from hermes_redis.core.config import Config
from hermes_redis.session_memory import SessionMemory
from tests import stack
from tests.http_server import ServeProcess, serve_config
from tests.redis_server import RedisServer

KINDS = ["redis", "http"] if stack.SECOND else ["redis", "memory", "http"]


@pytest.fixture(scope="session")
def contract_server(tmp_path_factory: pytest.TempPathFactory,
                    redis_server: RedisServer) -> Iterator[ServeProcess]:
    """One open server (no API keys: the caller may act for any user, as the library does)
    for the whole suite; each test keeps to users and sessions of its own."""
    proc = ServeProcess(serve_config(tmp_path_factory.mktemp("contract"), redis_server.url))
    yield proc.start()
    proc.stop()


@pytest.fixture(params=KINDS)
def api(request: pytest.FixtureRequest,
        config_factory: Callable[..., Config]) -> Iterator[SessionAPI]:
    """The same API, in-process or over HTTP: every test of the suite runs on each."""
    mem: SessionAPI
    if request.param == "http":
        server: ServeProcess = request.getfixturevalue("contract_server")
        mem = HermesClient(server.url)
    else:
        mem = SessionMemory(config_factory(request.param))
    with mem:
        yield mem


@pytest.fixture
def user() -> str:
    """A user no other test has: listings, memories and searches see this test's data only."""
    return f"u-{uuid.uuid4().hex[:12]}"
