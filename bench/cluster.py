"""cluster: append on a three-primary Redis Cluster against one Redis (issue 14).

Starts its own three cluster-enabled redis-servers (``tests/redis_cluster.py``), the RQ queue
on the bench's standalone Redis (``redis.queue_url``, as a cluster requires). One client:
interleaved rounds of appends, each side in its own session; then several processes at
once, each appending to sessions of its own (spread over the slots), for throughput.
"""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from typing import Any

from bench.common import Section, make_config, median, percentile, quiet_gc, us
from hermes_redis import Config, SessionMemory
from tests.redis_cluster import ClusterServers

TEXT = "we decided to keep the session index per slot, so an append stays one EVALSHA"


def _config(url: str, workdir: Path, queue_url: str | None) -> Config:
    cfg = make_config(url, workdir)
    return cfg.with_overrides(redis={"queue_url": queue_url}) if queue_url else cfg


def _latencies(mem: SessionMemory, n: int) -> list[float]:
    sid = mem.create_session("bench")
    out = []
    with quiet_gc():
        for i in range(n):
            start = time.perf_counter()
            mem.append(sid, "user" if i % 2 == 0 else "assistant", TEXT)
            out.append((time.perf_counter() - start) * 1e6)  # µs
    return out


def _worker(args: tuple[Config, int, int, Any]) -> None:
    cfg, sessions, per, start_at = args
    with SessionMemory(cfg) as mem:
        sids = [mem.create_session("bench") for _ in range(sessions)]
        while time.time() < start_at:
            time.sleep(0.001)
        for i in range(per):
            mem.append(sids[i % sessions], "user", TEXT)


def _throughput(cfg: Config, procs: int, per: int) -> float:
    ctx = multiprocessing.get_context("spawn")
    start_at = time.time() + 3.0  # every process connected before the clock starts
    with ctx.Pool(procs) as pool:
        result = pool.map_async(_worker, [(cfg, 8, per, start_at)] * procs)
        result.get(timeout=600)
    return procs * per / (time.time() - start_at)


def run(server: Any, workdir: Path, quick: bool = False) -> Section:
    sec = Section("Redis Cluster (3 primaries) against one Redis — append",
                  ["measure", "one Redis", "cluster", "cluster / one"])
    cluster = ClusterServers(aof=True).start()
    try:
        one_cfg = _config(server.url, workdir, None)
        cl_cfg = _config(cluster.url, workdir, server.url)
        rounds, n = (2, 200) if quick else (4, 400)
        one: list[tuple[float, float]] = []
        many: list[tuple[float, float]] = []
        with SessionMemory(one_cfg) as a, SessionMemory(cl_cfg) as b:
            _latencies(a, 50), _latencies(b, 50)  # warm: scripts loaded, slots known
            for _ in range(rounds):
                la, lb = _latencies(a, n), _latencies(b, n)
                one.append((median(la), percentile(la, 99)))
                many.append((median(lb), percentile(lb, 99)))
        p50a, p50b = median([x[0] for x in one]), median([x[0] for x in many])
        p99a, p99b = median([x[1] for x in one]), median([x[1] for x in many])
        sec.add("1 client · p50", us(p50a), us(p50b), f"{p50b / p50a:.2f}×")
        sec.add("1 client · p99", us(p99a), us(p99b), f"{p99b / p99a:.2f}×")
        procs, per = (2, 300) if quick else (4, 1000)
        ta, tb = _throughput(one_cfg, procs, per), _throughput(cl_cfg, procs, per)
        sec.add(f"{procs} processes · appends/s", f"{ta:,.0f}", f"{tb:,.0f}", f"{tb / ta:.2f}×")
    finally:
        cluster.cleanup()
    sec.note(f"One client: {rounds} interleaved rounds of {n} appends per side, medians of the "
             f"rounds' p50 and p99. Throughput: {procs} processes started together, {per} appends "
             "each over 8 sessions of their own. All servers on this machine's 2 cores (AOF "
             "everysec); a real cluster spreads primaries over hosts, so this shows the client-side "
             "cost of routing, not the capacity gain.")
    return sec
