"""append(): latency and throughput against the physical limit, one loopback round trip.

The baseline is a raw redis-py ``RPUSH`` of the very bytes hermes-redis stores
(``Message.pack()``), on the same client (``mem.hot.client``) to a scratch key. Everything
hermes-redis adds — validation, tiktoken, the msgpack payload, the Lua script that assigns
the seq and keeps counters, index, backlog and TTL right — shows up as the ratio.

One client: blocks of appends and of raw pushes alternate (order flipped every round) and
the ratio is the median over rounds of the per-round p50 ratio. Eight processes: each
appends to its own session (or pushes to its own scratch key) at once, started together.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import workload
from bench.common import (
    CPUS,
    SAME_CORE,
    SEPARATE_CORES,
    Section,
    clock,
    median,
    open_memory,
    percentile,
    placement,
    quiet_gc,
    rate,
    timed,
    times,
    us,
    verdict,
)
from hermes_redis.core.models import Message

TARGET = 2.0  # append p50 against a raw RPUSH of the same payload
TARGET_TURN = 1.3  # append_many of a 4-message turn against one RPUSH of the 4 payloads
TURN = 4


@dataclass
class Run:
    latencies: list[float]  # µs
    seconds: float

    @property
    def throughput(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else float("nan")


def scratch_key(mem: Any, sid: str) -> str:
    """Where the raw baseline pushes: a key of the session's own hash tag."""
    return f"{mem.config.redis.key_prefix}:{{{sid}}}:rawbench"


def _loops(mem: Any, sid: str, items: list[tuple[str, str]]) -> tuple[Any, Any]:
    """(hermes append, raw RPUSH) closures that walk the same messages."""
    count = workload.Counter(mem.tokenizer)
    payloads = [Message(sid, 0, r, t, count(t)).pack() for r, t in items]
    client = mem.hot.client
    scratch = scratch_key(mem, sid)
    state = {"h": 0, "r": 0}
    n = len(items)

    def hermes() -> None:
        role, text = items[state["h"] % n]
        state["h"] += 1
        mem.append(sid, role, text)

    def raw() -> None:
        payload = payloads[state["r"] % n]
        state["r"] += 1
        client.rpush(scratch, payload)

    return hermes, raw


def _turn_loops(mem: Any, sid: str, items: list[tuple[str, str]]) -> tuple[Any, Any]:
    """(hermes append_many of TURN messages, one raw RPUSH of their TURN payloads)."""
    count = workload.Counter(mem.tokenizer)
    payloads = [Message(sid, 0, r, t, count(t)).pack() for r, t in items]
    turns = [[{"role": r, "content": t} for r, t in items[i : i + TURN]]
             for i in range(0, len(items) - TURN + 1, TURN)]
    packed = [payloads[i : i + TURN] for i in range(0, len(items) - TURN + 1, TURN)]
    client = mem.hot.client
    scratch = scratch_key(mem, sid)
    state = {"h": 0, "r": 0}

    def hermes() -> None:
        mem.append_many(sid, turns[state["h"] % len(turns)])
        state["h"] += 1

    def raw() -> None:
        client.rpush(scratch, *packed[state["r"] % len(packed)])
        state["r"] += 1

    return hermes, raw


def one_client(url: str, workdir: Path, rounds: int, block: int) -> dict[str, Any]:
    mem = open_memory(url, workdir)
    try:
        sid = mem.create_session("bench")
        hermes, raw = _loops(mem, sid, workload.cycle(1000))
        turn, raw_turn = _turn_loops(mem, mem.create_session("bench"), workload.cycle(1000))
        for _ in range(200):  # warm up: connections, script cache, first-append enqueue
            hermes()
            raw()
            turn()
            raw_turn()
        h_runs: list[Run] = []
        r_runs: list[Run] = []
        t_runs: list[Run] = []
        rt_runs: list[Run] = []
        for i in range(rounds):
            order = [(hermes, h_runs), (raw, r_runs), (turn, t_runs), (raw_turn, rt_runs)]
            for fn, runs in order if i % 2 == 0 else order[::-1]:
                with quiet_gc():
                    runs.append(Run(*timed(fn, block)))
        return {"hermes": h_runs, "raw": r_runs, "turn": t_runs, "raw_turn": rt_runs,
                "list_key": mem.hot.list_key(sid),
                "meta_key": mem.hot.meta_key(sid), "scratch_key": scratch_key(mem, sid)}
    finally:
        mem.close()


def _child(kind: str, url: str, workdir: Path, n: int, ready: Any, go: Any, out: Any) -> None:
    mem = open_memory(url, workdir)
    try:
        sid = mem.create_session("bench")
        hermes, raw = _loops(mem, sid, workload.cycle(1000))
        fn = hermes if kind == "hermes" else raw
        for _ in range(50):
            fn()
        ready.put(1)
        go.wait()
        start = clock()
        with quiet_gc():
            lat, _ = timed(fn, n)
        out.put((lat, start, clock()))
        mem.hot.drop(sid)
    finally:
        mem.close()


def many_processes(url: str, workdir: Path, procs: int, n: int, kind: str) -> Run:
    ctx = mp.get_context("fork")
    ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    children = [ctx.Process(target=_child, args=(kind, url, workdir, n, ready, go, out))
                for _ in range(procs)]
    for c in children:
        c.start()
    for _ in children:
        ready.get(timeout=120)
    go.set()
    results = [out.get(timeout=300) for _ in children]
    for c in children:
        c.join(30)
    lat = [x for r in results for x in r[0]]
    seconds = (max(r[2] for r in results) - min(r[1] for r in results)) / 1e9
    return Run(lat, seconds)


def breakdown(url: str, workdir: Path, rounds: int, block: int) -> dict[str, float]:
    """Where an append's time goes: each step adds one layer on top of the previous one.
    Median over rounds of the per-round p50, steps interleaved."""
    mem = open_memory(url, workdir)
    try:
        sid = mem.create_session("bench")
        items = workload.cycle(1000)
        count = workload.Counter(mem.tokenizer)
        msgs = [Message(sid, 0, r, t, count(t)) for r, t in items]
        payloads = [m.pack() for m in msgs]
        hot = mem.hot
        keys = [hot.meta_key(sid), hot.list_key(sid), hot.index_key(sid), hot.backlog_key(sid),
                hot.full_key(sid), hot.ids_key(sid)]
        client = hot.client
        scratch = scratch_key(mem, sid)
        i = [0]

        def nxt() -> int:
            i[0] += 1
            return i[0] % len(items)

        steps: dict[str, Any] = {
            "raw RPUSH of the payload (one round trip)":
                lambda: client.rpush(scratch, payloads[nxt()]),
            "+ the append Lua script instead (EVALSHA as RedisHot sends it, same payload)":
                lambda: hot._evalsha("append", keys, [repr(time.time()), sid, "", 0, 1,
                                                      payloads[(k := nxt())], msgs[k].token_count,
                                                      msgs[k].message_id, ""]),
            "+ RedisHot.append (keys, msgpack, retry guard)":
                lambda: hot.append([msgs[nxt()]], time.time(), ""),
            "+ SessionMemory.append (validation, tiktoken, Message)":
                lambda: mem.append(sid, *items[nxt()]),
            "tiktoken count alone (for scale)":
                lambda: mem.tokenizer.count(items[nxt()][1]),
        }
        for fn in steps.values():
            timed(fn, 100)
        p50s: dict[str, list[float]] = {k: [] for k in steps}
        for _ in range(rounds):
            for name, fn in steps.items():
                with quiet_gc():
                    lat, _ = timed(fn, block)
                p50s[name].append(percentile(lat, 50))
        return {k: median(v) for k, v in p50s.items()}
    finally:
        mem.close()


def run(server: Any, workdir: Path, quick: bool = False) -> tuple[Section, dict[str, Any]]:
    url = server.url
    rounds, block = (4, 200) if quick else (12, 400)
    procs, per_proc, multi_rounds = 8, (500 if quick else 1500), (1 if quick else 3)
    sec = Section("append() — hermes-redis vs a raw RPUSH of the same payload, same client",
                  ["measure", "hermes-redis", "raw RPUSH", "hermes / raw", "target"])
    places = [("1 client, same core", SAME_CORE)]
    if len(CPUS) > 1:
        places.append(("1 client, separate cores", SEPARATE_CORES))
    one: dict[str, Any] = {}
    for label, (client_cpus, server_cpus) in places:
        with placement(server.proc.pid, client_cpus, server_cpus):
            one = one_client(url, workdir, rounds, block)
        h_runs, r_runs = one["hermes"], one["raw"]
        h_lat = [x for r in h_runs for x in r.latencies]
        r_lat = [x for r in r_runs for x in r.latencies]
        p50_ratio = median([percentile(h.latencies, 50) / percentile(r.latencies, 50)
                            for h, r in zip(h_runs, r_runs, strict=True)])
        p99_ratio = median([percentile(h.latencies, 99) / percentile(r.latencies, 99)
                            for h, r in zip(h_runs, r_runs, strict=True)])
        h_tp = median([r.throughput for r in h_runs])
        r_tp = median([r.throughput for r in r_runs])
        sec.add(f"{label} · p50 latency", us(percentile(h_lat, 50)), us(percentile(r_lat, 50)),
                times(p50_ratio), f"≤ {TARGET}× — {verdict(p50_ratio <= TARGET)}")
        sec.add(f"{label} · p99 latency", us(percentile(h_lat, 99)), us(percentile(r_lat, 99)),
                times(p99_ratio), "")
        sec.add(f"{label} · throughput", rate(h_tp), rate(r_tp), times(h_tp / r_tp), "")
        t_runs, rt_runs = one["turn"], one["raw_turn"]
        t_ratio = median([percentile(h.latencies, 50) / percentile(r.latencies, 50)
                          for h, r in zip(t_runs, rt_runs, strict=True)])
        sec.add(f"{label} · append_many of a {TURN}-message turn, p50 (raw: one RPUSH of the "
                f"{TURN} payloads)",
                us(percentile([x for r in t_runs for x in r.latencies], 50)),
                us(percentile([x for r in rt_runs for x in r.latencies], 50)),
                times(t_ratio), f"≤ {TARGET_TURN}× — {verdict(t_ratio <= TARGET_TURN)}")

    with placement(server.proc.pid, *SAME_CORE):
        steps = breakdown(url, workdir, rounds, block // 2)
    base = next(iter(steps.values()))
    for name, value in steps.items():
        sec.add(f"same core, where it goes · {name}", us(value), "",
                "" if name.startswith("tiktoken") else times(value / base), "")

    multi: dict[str, list[Run]] = {"hermes": [], "raw": []}
    for i in range(multi_rounds):
        for kind in (("hermes", "raw") if i % 2 == 0 else ("raw", "hermes")):
            multi[kind].append(many_processes(url, workdir, procs, per_proc, kind))
    mh = [x for r in multi["hermes"] for x in r.latencies]
    mr = [x for r in multi["raw"] for x in r.latencies]
    mh_tp = median([r.throughput for r in multi["hermes"]])
    mr_tp = median([r.throughput for r in multi["raw"]])
    label = f"{procs} processes, all cores"
    sec.add(f"{label} · p50 latency", us(percentile(mh, 50)), us(percentile(mr, 50)),
            times(percentile(mh, 50) / percentile(mr, 50)), "")
    sec.add(f"{label} · p99 latency", us(percentile(mh, 99)), us(percentile(mr, 99)),
            times(percentile(mh, 99) / percentile(mr, 99)), "")
    sec.add(f"{label} · throughput", rate(mh_tp), rate(mr_tp), times(mh_tp / mr_tp), "")
    sec.note(f"1 client: {rounds} interleaved rounds × {block} ops each side; latency ratio = "
             "median of per-round p50 (p99) ratios; throughput = median of per-round ops/s. "
             "Same core: client and redis-server pinned to one CPU; separate cores: one each.")
    sec.note(f"{procs} processes: {per_proc} ops each, own session (own scratch key), started "
             f"together, not pinned; {multi_rounds} round(s) per side; throughput = all ops / "
             "wall time.")
    sec.note("Messages are the bench conversation cycled (mean payload "
             f"{_mean_payload():,.0f} B); no worker runs, so append enqueues one flush job "
             "per session and never again.")
    return sec, one


def _mean_payload() -> float:
    items = workload.cycle(1000)
    return sum(len(Message("s" * 32, 0, r, t, 0).pack()) for r, t in items) / len(items)
