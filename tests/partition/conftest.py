"""The partitioned deployment, started once per module (tests/partition/scenario.py); skipped
with the reason where network namespaces cannot be made."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.partition.net import unavailable
from tests.partition.scenario import Cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    reason = unavailable()
    if reason is not None:
        pytest.skip(f"partition tests need network namespaces: {reason}")
    deployment = Cluster()
    try:
        deployment.start()
        yield deployment
    finally:
        deployment.cleanup()


@pytest.fixture
def healthy(cluster: Cluster) -> Cluster:
    """The deployment with every link up, no delay and every process running."""
    cluster.net.heal()
    cluster.relay_delay(False)
    cluster.check_alive()
    return cluster
