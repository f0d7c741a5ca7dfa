"""Fixtures: one private redis-server (and, when a test asks, one private PostgreSQL) per test
run, a fresh key prefix and SQLite file (or PostgreSQL schema) per test, and the behaviour
suites parametrized over both hot backends and both archives."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from hermes_redis import Config, SessionMemory
from hermes_redis.store.archive import Archive, ArchiveStore
from hermes_redis.store.archive.postgres import PostgresArchive
from tests.postgres_server import PostgresServer
from tests.redis_cluster import ClusterServers
from tests.redis_server import RedisServer

from tests import stack  # isort: skip -- reads HERMES_TEST_STACK before the loop below

for _var in [v for v in os.environ if v.startswith("HERMES_") and v != "HERMES_TEST_STACK"]:
    del os.environ[_var]  # the developer's own settings must not leak into tests (the stack
    # choice stays: pytest-xdist's workers read it at their own import of tests/stack.py)
# Nothing a test starts may use the real ~/.hermes/data (embedded Redis, archive).
os.environ["HERMES_DATA_DIR"] = tempfile.mkdtemp(prefix="hermes-test-data-")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", 'stack(name, reason=...): the test is about the "default" '
                            'or the "cluster+pg" stack only; skipped on the other (tests/stack.py)')


def pytest_report_header() -> str:
    return f"hermes test stack: {stack.NAME} (HERMES_TEST_STACK)"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for mark in item.iter_markers("stack"):
            if mark.args[0] not in stack.STACKS or not mark.kwargs.get("reason"):
                raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.stack(NAME, reason=...) "
                                        f"with NAME one of {stack.STACKS}")
            if mark.args[0] != stack.NAME:
                item.add_marker(pytest.mark.skip(
                    reason=f"{mark.args[0]} stack only: {mark.kwargs['reason']}"))


@pytest.fixture(scope="session", autouse=stack.SECOND)
def stack_servers(request: pytest.FixtureRequest) -> Iterator[None]:
    """On HERMES_TEST_STACK=cluster+pg, the cluster and PostgreSQL every config is put on."""
    if stack.SECOND:
        single: RedisServer = request.getfixturevalue("redis_server")
        cluster: ClusterServers = request.getfixturevalue("redis_cluster")
        postgres: PostgresServer = request.getfixturevalue("postgres_server")
        stack.ACTIVE = stack.Servers(single.url, cluster.url, postgres)
    yield
    stack.ACTIVE = None


@pytest.fixture(autouse=stack.SECOND)
def stack_schema() -> None:
    """On cluster+pg, each test's configs share one fresh PostgreSQL schema."""
    stack.new_test()


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
def redis_client(redis_url: str) -> Iterator[Any]:
    """A client of the hot tier ``config_factory("redis")`` uses: the single test Redis, or
    on the cluster+pg stack a ``RedisCluster`` of the test cluster."""
    client: Any
    if stack.ACTIVE is not None:
        from redis.cluster import RedisCluster

        client = RedisCluster.from_url(stack.ACTIVE.cluster_url)
    else:
        client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def make_config(tmp_path: Path, backend: str, redis_url: str | None, *,
                queue_url: str | None = None, **session: object) -> Config:
    """A config isolated to this test: its own archive file, key prefix and queue.
    ``queue_url``: RQ's own Redis (a cluster's tests queue on the standalone one). On the
    cluster+pg stack, put there by ``stack.sections`` (tests/stack.py)."""
    tag = uuid.uuid4().hex[:10]
    return Config().with_overrides(
        memory={"session": {"backend": backend, **session}},
        redis={"url": redis_url, "key_prefix": f"t{tag}", "queue": f"q{tag}",
               "queue_url": queue_url},
        archive={"data_dir": str(tmp_path / "data"), "path": str(tmp_path / "memory.db")},
    ).with_overrides(**stack.sections(redis_url))


@pytest.fixture
def config_factory(tmp_path: Path, redis_url: str, request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """``factory("redis" | "memory" | "cluster" | "redis+pg" | "single", **session keys)``:
    "cluster" is the redis backend on the test Redis Cluster, its RQ queue on the standalone
    test Redis; "redis+pg" is Redis with a PostgreSQL archive. On the cluster+pg stack
    "redis" is the cluster with a PostgreSQL archive (tests/stack.py); "single" is the
    standalone test Redis on every stack, for a test about a plain Redis."""
    def factory(backend: str = "redis", **session: object) -> Config:
        if backend == "single":
            return make_config(tmp_path, "redis", redis_url, **session).with_overrides(
                redis={"url": redis_url, "queue_url": None})
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
PG_ARCHIVE_MODULES = frozenset({"test_session_memory", "test_search", "test_listing", "test_context",
                                "test_embeddings"})
CLUSTER_MODULES = frozenset({"test_session_memory", "test_concurrency", "test_workers", "test_primitives",
                             "test_extraction"})


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if stack.SECOND:  # "redis" is the cluster + PostgreSQL; the memory backend has no stack
        for name in ("backend", "redis_kind"):
            if name in metafunc.fixturenames:
                metafunc.parametrize(name, ["redis"], ids=[stack.NAME], indirect=True)
        return
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
