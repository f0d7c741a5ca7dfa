"""Fixtures: one private redis-server (and, when a test asks, one private PostgreSQL) per test
run, a fresh key prefix and SQLite file (or PostgreSQL schema) per test, and the behaviour
suites parametrized over both hot backends and both archives."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from hermes_redis import Config, SessionMemory
from hermes_redis.archive import Archive, ArchiveStore
from hermes_redis.archive_pg import PostgresArchive
from tests.postgres_server import PostgresServer
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
    """``factory("redis" | "memory" | "cluster" | "redis+pg", **session keys)``: "cluster" is
    the redis backend on the test Redis Cluster, its RQ queue on the standalone test Redis;
    "redis+pg" is Redis with a PostgreSQL archive."""
    def factory(backend: str = "redis", **session: object) -> Config:
        if backend == "cluster":
            cluster: ClusterServers = request.getfixturevalue("redis_cluster")
            return make_config(tmp_path, "redis", cluster.url, queue_url=redis_url, **session)
        if backend == "redis+pg":
            config = make_config(tmp_path, "redis", redis_url, **session)
            return config.with_overrides(archive={"url": request.getfixturevalue("pg_url")})
        return make_config(tmp_path, backend, redis_url, **session)

    return factory


# The end-to-end slices that also run on the PostgreSQL archive (Redis hot tier) and on the
# Redis Cluster: each `mem` / `backend` test of these modules gets another case. The
# archive's own behaviour is tests/test_archive.py's, on both archives.
PG_ARCHIVE_MODULES = frozenset({"test_session_memory", "test_search", "test_listing", "test_context"})
CLUSTER_MODULES = frozenset({"test_session_memory", "test_concurrency", "test_workers", "test_primitives",
                             "test_extraction"})


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    module = metafunc.module.__name__.rsplit(".", 1)[-1]
    on_cluster = module in CLUSTER_MODULES
    if "backend" in metafunc.fixturenames:
        backends = ["redis", "memory", *(["cluster"] if on_cluster else []),
                    *(["redis+pg"] if module in PG_ARCHIVE_MODULES else [])]
        metafunc.parametrize("backend", backends, indirect=True)
    if "redis_kind" in metafunc.fixturenames:
        metafunc.parametrize("redis_kind", ["redis", "cluster"] if on_cluster else ["redis"],
                             indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """The hot backend a test runs on: each of them, by ``pytest_generate_tests``."""
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


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One private PostgreSQL per test run, started by the first test that needs it."""
    server = PostgresServer().start()
    yield server
    server.cleanup()


@pytest.fixture
def pg_url(postgres_server: PostgresServer) -> str:
    """The URL of a fresh, empty schema on the private PostgreSQL (its search_path)."""
    return postgres_server.new_schema()


@pytest.fixture(params=["sqlite", "postgres"])
def archive_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def archive(archive_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ArchiveStore]:
    """Each archive, empty: the SQLite file and a fresh PostgreSQL schema."""
    store: ArchiveStore
    if archive_kind == "sqlite":
        store = Archive(tmp_path / "memory.db")
    else:
        store = PostgresArchive(request.getfixturevalue("pg_url"), pool_size=2)
    yield store
    store.close()
