"""Partitions between hosts, Jepsen-style (issue 35 part 8; docs/reliability.md, "Partitions
between hosts"): agents, server, worker, Redis and PostgreSQL on separate network namespaces;
links cut, flapped and slowed while the agents append. Every acknowledged append must be
served and archived exactly once under the seq it was acknowledged with, seqs 1..N, and
every agent must get through again soon after the heal."""

from __future__ import annotations

import os
import random
import time

import pytest

from tests.partition.checker import Records, Verdict
from tests.partition.scenario import Cluster, Outcome, _read_archive, print_figures, run_scenario

pytestmark = pytest.mark.stack(
    "default", reason="brings its own Redis and PostgreSQL on separate hosts; one pass is enough")

OUTAGE = 5.0
RECOVERY_BOUND = 10.0  # seconds from the heal until every agent session appends again


def assert_exact(outcome: Outcome) -> None:
    print_figures(outcome)
    for where, verdict in (("served", outcome.served), ("archived", outcome.archived)):
        assert_clean(where, verdict)
    assert not outcome.records.rejected, outcome.records.rejected[:3]
    assert not outcome.records.unacked, outcome.records.unacked[:3]
    assert outcome.served.acked > 0
    assert outcome.recovery_s < RECOVERY_BOUND, outcome.figures()


def assert_clean(where: str, verdict: Verdict) -> None:
    assert verdict.ok, (f"{where}: {verdict.brief()}; lost {verdict.lost[:5]}, "
                        f"moved {verdict.moved[:5]}, stored twice {verdict.copies[:5]}")


def cut(cluster: Cluster, pairs: list[tuple[str, str]], seconds: float) -> float:
    for a, b in pairs:
        cluster.net.set_link(a, b, False)
    time.sleep(seconds)
    for a, b in pairs:
        cluster.net.set_link(a, b, True)
    return time.time()


def test_server_redis_link_down_5s(healthy: Cluster) -> None:
    outcome = run_scenario(healthy, "server-redis-down",
                           lambda: cut(healthy, [("server", "redis")], OUTAGE))
    assert_exact(outcome)
    # the cut bit: appends begun during it waited (or failed and were retried)
    assert outcome.during["max_latency_s"] >= 1.0 or outcome.records.errors, outcome.figures()


def test_client_server_partition(healthy: Cluster) -> None:
    """agent1 cut from the server for 5 s; agent2 goes on. A request in flight when the link
    went is retried under its id: stored once whether its first copy landed or not."""
    outcome = run_scenario(healthy, "agent1-server-cut",
                           lambda: cut(healthy, [("agent1", "server")], OUTAGE))
    assert_exact(outcome)
    inside = [r for r in outcome.records.acks
              if outcome.fault_start + 1.0 < r["t"] < outcome.heal - 0.2]
    assert not [r for r in inside if r["agent"] == "agent1"], "agent1 got through a cut link"
    assert [r for r in inside if r["agent"] == "agent2"], "agent2 stalled with agent1's link"


def test_flapping_server_redis_link(healthy: Cluster) -> None:
    """The server↔Redis link goes down and up at random (0.2–1.5 s each) for 15 s."""
    seed = int(os.environ.get("PARTITION_SEED") or random.randrange(1 << 30))  # to replay one
    rng = random.Random(seed)
    flaps = 0

    def flap() -> float:
        nonlocal flaps
        end = time.time() + 15.0
        while time.time() < end:
            healthy.net.set_link("server", "redis", False)
            flaps += 1
            time.sleep(rng.uniform(0.2, 1.5))
            healthy.net.set_link("server", "redis", True)
            time.sleep(rng.uniform(0.2, 1.5))
        return time.time()

    outcome = run_scenario(healthy, "server-redis-flapping", flap)
    outcome.extra.update(seed=seed, flaps=flaps)
    assert_exact(outcome)
    assert flaps >= 5


def test_server_redis_200ms_delay(healthy: Cluster) -> None:
    """200 ms added each way on the server↔Redis path for 8 s by the relay."""
    def slow() -> float:
        healthy.relay_delay(True)
        time.sleep(8.0)
        healthy.relay_delay(False)
        return time.time()

    outcome = run_scenario(healthy, "server-redis-delay-200ms", slow)
    assert_exact(outcome)
    # every append needs at least one Redis round trip: ≥ 0.4 s while the delay is on
    assert outcome.during["max_latency_s"] >= 0.4, outcome.figures()


def test_worker_cut_from_redis_and_postgres(healthy: Cluster) -> None:
    """The worker loses Redis and PostgreSQL for 6 s while the agents go on: nothing is
    archived meanwhile; after the heal the worker archives everything, each message once."""
    at_heal: dict[str, int] = {}

    def isolate_worker() -> float:
        pairs = [("worker", "redis"), ("worker", "pg")]
        for a, b in pairs:
            healthy.net.set_link(a, b, False)
        time.sleep(6.0)
        records = Records.load(sorted((healthy.dir / "worker-cut").glob("*.jsonl")))
        acked = {r["mid"] for r in records.acks if r["t"] < time.time() - 2.0}
        rows = healthy.net.call("pg", _read_archive, healthy.pg_local, records.sessions)
        at_heal["unarchived"] = len(acked - {mid for got in rows.values() for _, mid, _ in got})
        for a, b in pairs:
            healthy.net.set_link(a, b, True)
        return time.time()

    outcome = run_scenario(healthy, "worker-cut", isolate_worker)
    outcome.extra["unarchived_at_heal"] = at_heal["unarchived"]
    assert_exact(outcome)
    assert at_heal["unarchived"] > 0, "the cut worker still archived: the cut did not bite"
    assert outcome.extra["archive_recovery_s"] is not None, outcome.figures()


def test_the_checker_sees_loss_duplicates_moves_and_gaps() -> None:
    """The judge itself (no namespaces): each defect it must count, counted."""
    from tests.partition.checker import judge

    records = Records(sessions=["s"], acks=[
        {"mid": m, "sid": "s", "seq": q, "t": 1.0, "first": 0.0, "attempts": 1}
        for m, q in (("a", 1), ("b", 2), ("c", 3), ("d", 4))])
    assert judge(records, {"s": [(1, "a", "A"), (2, "b", "B"), (3, "c", "C"), (4, "d", "D")]}).ok
    bad = judge(records, {"s": [(1, "a", "A"), (2, "b", "B"), (3, "b", "B"), (5, "d", "D"),
                                (6, "x", "X")]})
    assert bad.brief() == {"acked": 4, "stored": 5, "lost": 1, "duplicated": 1, "moved": 1,
                           "gaps": 1, "strangers": 1, "in_doubt_stored": 0}
    # a retry stored again under a fresh id: the same text twice is a duplicate too
    records.errors.append({"mid": "e", "sid": "s", "t": 0.5})
    again = judge(records, {"s": [(1, "a", "A"), (2, "b", "B"), (3, "c", "C"), (4, "d", "D"),
                                  (5, "e", "D")]})
    assert (again.duplicated, again.in_doubt_stored, again.ok) == (1, 1, False)
