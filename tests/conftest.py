"""Fixtures: one private redis-server per test run, a fresh key prefix and SQLite file per test,
and the behaviour suite parametrized over both backends."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from hermes_redis import Config, SessionMemory
from tests.redis_cluster import ClusterServers
from tests.redis_server import RedisServer

for _var in [v for v in os.environ if v.startswith("HERMES_")]:
    del os.environ[_var]  # the developer's own settings must not leak into tests
# Nothing a test starts may use the real ~/.hermes/data (embedded Redis, archive).
os.environ["HERMES_DATA_DIR"] = tempfile.mkdtemp(prefix="hermes-test-data-")


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.cleanup()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[ClusterServers]:
    """A three-primary Redis Cluster, started once per run by the first test that asks."""
    cluster = ClusterServers().start()
    yield cluster
    cluster.cleanup()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    if redis_server.proc is None:
        redis_server.start()
    return redis_server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def make_config(tmp_path: Path, backend: str, redis_url: str | None, *,
                queue_url: str | None = None, **session: object) -> Config:
    """A config isolated to this test: its own archive file, key prefix and queue.
    ``queue_url``: RQ's own Redis (a cluster's tests queue on the standalone one)."""
    tag = uuid.uuid4().hex[:10]
    return Config().with_overrides(
        memory={"session": {"backend": backend, **session}},
        redis={"url": redis_url, "key_prefix": f"t{tag}", "queue": f"q{tag}",
               "queue_url": queue_url},
        archive={"data_dir": str(tmp_path / "data"), "path": str(tmp_path / "memory.db")},
    )


@pytest.fixture
def config_factory(tmp_path: Path, redis_url: str, request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """``factory("redis" | "memory" | "cluster", **session keys)``; "cluster" is the redis
    backend on the test Redis Cluster, its RQ queue on the standalone test Redis."""
    def factory(backend: str = "redis", **session: object) -> Config:
        if backend == "cluster":
            cluster: ClusterServers = request.getfixturevalue("redis_cluster")
            return make_config(tmp_path, "redis", cluster.url, queue_url=redis_url, **session)
        return make_config(tmp_path, backend, redis_url, **session)

    return factory


CLUSTER_MODULES = {"test_session_memory", "test_concurrency", "test_workers"}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """The behaviour suite runs on both backends; these modules also on the Redis Cluster."""
    on_cluster = metafunc.module.__name__.rsplit(".", 1)[-1] in CLUSTER_MODULES
    if "backend" in metafunc.fixturenames:
        backends = ["redis", "memory", "cluster"] if on_cluster else ["redis", "memory"]
        metafunc.parametrize("backend", backends, indirect=True)
    if "redis_kind" in metafunc.fixturenames:
        metafunc.parametrize("redis_kind", ["redis", "cluster"] if on_cluster else ["redis"],
                             indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def redis_kind(request: pytest.FixtureRequest) -> str:
    """A Redis-only test's backend: "redis", and "cluster" in ``CLUSTER_MODULES``."""
    return str(request.param)


@pytest.fixture
def mem(config_factory, backend: str) -> Iterator[SessionMemory]:  # type: ignore[no-untyped-def]
    memory = SessionMemory(config_factory(backend))
    yield memory
    memory.close()


@pytest.fixture
def rmem(config_factory) -> Iterator[SessionMemory]:  # type: ignore[no-untyped-def]
    """Redis backend only."""
    memory = SessionMemory(config_factory("redis"))
    yield memory
    memory.close()
