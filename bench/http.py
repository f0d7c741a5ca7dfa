"""The HTTP API: what the network hop adds to append and context, and how appends scale
with concurrent clients and server worker processes.

Latency: a real ``hermes-redis serve`` (one worker) and an in-process SessionMemory share
the private Redis and one archive. Blocks of library calls and of HTTP calls alternate
(order flipped every round); p50 is the median of the per-round p50s, p99 is over every
sample. Two HTTP clients: a bare keep-alive connection (``Raw``: what the server
costs) and ``HermesClient`` (what a Python agent pays: httpx plus decoding into dataclasses).

Throughput: 1, 10 and 50 concurrent keep-alive connections, each appending to its own
session for a fixed time, from two load-generator processes (asyncio, raw HTTP/1.1: the
generator must cost less than the server), against 1 and 2 server worker processes.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import multiprocessing as mp
import os
import re
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import workload
from bench.common import (
    Section,
    clock,
    median,
    percentile,
    quiet_gc,
    rate,
    timed,
    times,
    us,
    verdict,
)
from hermes_redis import SessionMemory
from hermes_redis.client import HermesClient
from hermes_redis.core import config as config_mod
from tests.http_server import ServeProcess, serve_config
from tests.redis_server import RedisServer, free_port

TARGET = 2.0  # HTTP append p50 against the library's append (issue 12)
CONCURRENCY = (1, 10, 50)
WORKERS = (1, 2)
GENERATORS = 2  # load-generator processes
WORKER_TARGET = 1.5  # appends/s at 50 clients, 2 workers over 1 (issue 33)
_LENGTH = re.compile(rb"content-length:\s*(\d+)", re.IGNORECASE)


class Raw:
    """One keep-alive HTTP/1.1 connection doing the least client-side work: the request's
    bytes written, the reply read up to its Content-Length. (``http.client`` parses every
    reply's headers with the ``email`` package: ≈ 60 µs a request here, half the server's
    own cost of a request, so it measured the client as much as the server.)"""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock = self._connect()
        self.buf = b""

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def call(self, method: str, path: str, body: bytes | None = None) -> bytes:
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        request = head.encode() + b"\r\n" + (body or b"")
        try:
            return self._exchange(method, path, request)
        except ConnectionError:  # the server closed it while idle (server.keep_alive_timeout)
            self.sock.close()
            self.sock, self.buf = self._connect(), b""
            return self._exchange(method, path, request)

    def _exchange(self, method: str, path: str, request: bytes) -> bytes:
        self.sock.sendall(request)
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end >= 0:
                length = _LENGTH.search(self.buf, 0, end)
                if length is None:
                    raise RuntimeError(f"{method} {path}: a reply without Content-Length")
                start = end + 4
                stop = start + int(length.group(1))
                if len(self.buf) >= stop:
                    status, data = int(self.buf[9:12]), self.buf[start:stop]
                    self.buf = self.buf[stop:]
                    if status >= 300:
                        raise RuntimeError(f"{method} {path} answered {status}: {data[:200]!r}")
                    return data
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError(f"{method} {path}: the server closed the connection")
            self.buf += chunk

    def close(self) -> None:
        self.sock.close()


def _cycler(items: list[Any]) -> Callable[[], Any]:
    state = {"i": 0}

    def next_item() -> Any:
        item = items[state["i"] % len(items)]
        state["i"] += 1
        return item

    return next_item


# --- the peer: Redis agent-memory-server (scripts/peer_ams.sh installs it) -----------------
PEER_ENV = "BENCH_AMS_VENV"
PEER_HOW = (f"bash scripts/peer_ams.sh /tmp/ams-venv, then {PEER_ENV}=/tmp/ams-venv")
PEER_SETTINGS = {  # working memory only: no long-term memory, LLM calls or task worker
    "LONG_TERM_MEMORY": "false", "USE_DOCKET": "false", "DISABLE_AUTH": "true",
    "ENABLE_WORKING_MEMORY_SUMMARIZATION": "false", "WORKING_MEMORY_MIGRATION_COMPLETE": "true",
    "ENABLE_DISCRETE_MEMORY_EXTRACTION": "false", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def peer_missing() -> str | None:
    """Why the peer cannot run here (None: it can)."""
    venv = os.environ.get(PEER_ENV)
    if not venv:
        return f"${PEER_ENV} is not set ({PEER_HOW})"
    for need in ("bin/python", "bin/redis-stack-local"):
        if not (Path(venv) / need).exists():
            return f"{venv}/{need} is missing ({PEER_HOW})"
    return None


class Peer:
    """A Redis Stack server (JSON and search modules) and agent-memory-server's API on it,
    under uvicorn with the same loop and parser as hermes-redis (uvloop, httptools)."""

    def __init__(self, workdir: Path, workers: int = 1) -> None:
        self.venv = Path(os.environ[PEER_ENV])
        self.redis = RedisServer(aof=True, extra=["--appendfsync", "everysec",
                                                  "--auto-aof-rewrite-percentage", "0"])
        self.redis.binary = str(self.venv / "bin/redis-stack-local")
        self.port, self.workers = free_port(), workers
        self.log = workdir / f"peer-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Peer:
        self.redis.start()
        env = {**os.environ, **PEER_SETTINGS, "REDIS_URL": self.redis.url}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [str(self.venv / "bin/python"), "-m", "uvicorn", "agent_memory_server.main:app",
                 "--host", "127.0.0.1", "--port", str(self.port), "--workers", str(self.workers),
                 "--no-access-log", "--log-level", "warning", "--loop", "uvloop",
                 "--http", "httptools"], stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"agent-memory-server exited: {self.log.read_text()[-2000:]}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
                conn.request("GET", "/v1/health")
                if conn.getresponse().status == 200:
                    conn.close()
                    return self
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError("agent-memory-server did not answer within 120 s")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc = None
        self.redis.stop()


def peer_put_body(role: str, text: str, messages: list[tuple[str, str]] | None = None) -> bytes:
    """A working-memory PUT that holds ``messages`` (default: just this one message)."""
    msgs = messages if messages is not None else [(role, text)]
    return json.dumps({"user_id": "bench", "messages": [
        {"role": r, "content": t, "created_at": "2026-12-03T12:00:00Z"} for r, t in msgs]}).encode()


PEER_SIZES = (1, 100, 300)  # issue 33: the peer's real append at these history lengths


def peer_real_append(conn: Raw, sid: str, role: str, text: str) -> None:
    """An append as agent-memory-server's client makes one: GET the working memory, then PUT
    it back with the new message (the oldest dropped, so the history stays the same length)."""
    data = json.loads(conn.call("GET", f"/v1/working-memory/{sid}?user_id=bench"))
    kept = [(m["role"], m["content"]) for m in data["messages"]][1:]
    conn.call("PUT", f"/v1/working-memory/{sid}", peer_put_body(role, text, [*kept, (role, text)]))


def peer_appender(conn: Raw, sid: str, items: Callable[[], Any]) -> Callable[[], None]:
    return lambda: peer_real_append(conn, sid, *items())


def _rounds(fns: dict[str, Callable[[], Any]], rounds: int, block: int) -> dict[str, dict[str, float]]:
    """Interleaved blocks of each fn; per name the median per-round p50 and the overall p99."""
    p50s: dict[str, list[float]] = {k: [] for k in fns}
    every: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for i in range(rounds):
        for name in names if i % 2 == 0 else names[::-1]:
            with quiet_gc():
                lat, _ = timed(fns[name], block)
            p50s[name].append(percentile(lat, 50))
            every[name] += lat
    return {k: {"p50": median(p50s[k]), "p99": percentile(every[k], 99)} for k in fns}


def latency(server: RedisServer, workdir: Path, quick: bool,
            peer: Peer | None = None) -> tuple[dict[str, dict[str, float]],
                                               dict[str, dict[str, float]]]:
    (workdir / "latency").mkdir()
    config = serve_config(workdir / "latency", server.url)
    serve = ServeProcess(config).start()
    mem = SessionMemory(config_mod.load(config))
    raw = Raw(serve.port)
    peer_raw = Raw(peer.port) if peer is not None else None
    client = HermesClient(serve.url)
    rounds, block = (6, 100) if quick else (15, 300)
    try:
        texts = workload.cycle(1000)
        sids = {k: mem.create_session("bench") for k in ("lib", "raw", "client")}
        lib_items, client_items = _cycler(texts), _cycler(texts)
        bodies = [json.dumps({"role": r, "content": t}).encode() for r, t in texts]
        raw_bodies = _cycler(bodies)
        path = f"/v1/sessions/{sids['raw']}/messages"

        def lib_append() -> None:
            role, text = lib_items()
            mem.append(sids["lib"], role, text)

        def raw_append() -> None:
            raw.call("POST", path, raw_bodies())

        def client_append() -> None:
            role, text = client_items()
            client.append(sids["client"], role, text)

        appends: dict[str, Callable[[], Any]] = {
            "library": lib_append, "HTTP": raw_append, "HermesClient": client_append,
                   "floor": lambda: raw.call("GET", "/healthz")}
        if peer_raw is not None:
            peer_bodies = _cycler([peer_put_body(r, t) for r, t in texts])
            peer_conn = peer_raw
            appends["peer"] = lambda: peer_conn.call("PUT", "/v1/working-memory/lat-put",
                                                     peer_bodies())
            for n in PEER_SIZES:  # issue 33: what an append through the peer really costs
                real = f"lat-real-{n}"
                peer_conn.call("PUT", f"/v1/working-memory/{real}",
                               peer_put_body("", "", texts[:n]))
                appends[f"peer real {n}"] = peer_appender(peer_conn, real, _cycler(texts))
        for fn in appends.values():  # warm up: connections, script cache, first enqueue
            for _ in range(100):
                fn()
        append_stats = _rounds(appends, rounds, block)

        ctx_sid = mem.create_session("bench")
        mem.append_many(ctx_sid, [{"role": r, "content": t} for r, t in texts[:200]])
        ctx_path = f"/v1/sessions/{ctx_sid}/context"
        reads: dict[str, Callable[[], Any]] = {"library": lambda: mem.context(ctx_sid),
                 "HTTP": lambda: raw.call("GET", ctx_path),
                 "HermesClient": lambda: client.context(ctx_sid)}
        if peer_raw is not None:
            peer_raw.call("PUT", "/v1/working-memory/lat-get", peer_put_body("", "", texts[:200]))
            peer_read = peer_raw
            reads["peer"] = lambda: peer_read.call("GET", "/v1/working-memory/lat-get?"
                                                          "user_id=bench")
        for fn in reads.values():
            for _ in range(20):
                fn()
        context_stats = _rounds(reads, max(4, rounds // 2), max(30, block // 5))
        return append_stats, context_stats
    finally:
        raw.close()
        if peer_raw is not None:
            peer_raw.close()
        client.close()
        mem.close()
        serve.stop()


# --- throughput -------------------------------------------------------------------------------
def _requests(method: str, path: str, bodies: list[bytes]) -> list[bytes]:
    return [(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"  # issue 35 refuses an unknown Host
             f"Content-Type: application/json\r\nContent-Length: {len(b)}\r\n\r\n").encode() + b
            for b in bodies]


async def _connection(port: int, requests: list[bytes], ok: bytes, deadline: int,
                      lat: list[float], errors: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    i = 0
    try:
        while clock() < deadline:
            t0 = clock()
            writer.write(requests[i % len(requests)])
            i += 1
            head = await reader.readuntil(b"\r\n\r\n")
            found = _LENGTH.search(head)
            await reader.readexactly(int(found.group(1)) if found else 0)
            lat.append((clock() - t0) / 1000)
            if not head.startswith(ok):
                errors.append(1)
    finally:
        writer.close()


def _generator(port: int, conns: list[list[bytes]], ok: bytes, start: int, seconds: float,
               out: Any) -> None:
    lat: list[float] = []
    errors: list[int] = []
    cpu = [0.0]

    async def main() -> None:
        while clock() < start:
            await asyncio.sleep(0.001)
        deadline = start + int(seconds * 1e9)
        began = time.process_time()
        await asyncio.gather(*(_connection(port, requests, ok, deadline, lat, errors)
                               for requests in conns))
        cpu[0] = time.process_time() - began  # issue 33: what the generator itself burnt

    asyncio.run(main())
    out.put((lat, len(errors), cpu[0]))


def throughput(serve: ServeProcess | Peer, conc: int, seconds: float) -> dict[str, float]:
    """Appends (hermes-redis) or one-message working-memory PUTs (the peer), each
    connection to its own session."""
    texts = workload.cycle(200)
    if isinstance(serve, Peer):
        bodies = [peer_put_body(r, t) for r, t in texts]
        conns = [_requests("PUT", f"/v1/working-memory/tp-{conc}-{i}", bodies)
                 for i in range(conc)]
        ok = b"HTTP/1.1 200"
    else:
        with HermesClient(serve.url) as client:
            sids = [client.create_session(user_id="bench") for _ in range(conc)]
        bodies = [json.dumps({"role": r, "content": t}).encode() for r, t in texts]
        conns = [_requests("POST", f"/v1/sessions/{sid}/messages", bodies) for sid in sids]
        ok = b"HTTP/1.1 201"
    procs = min(GENERATORS, conc)
    out: Any = mp.Queue()
    start = clock() + int(0.5e9)
    children = [mp.Process(target=_generator,
                           args=(serve.port, conns[i::procs], ok, start, seconds, out))
                for i in range(procs)]
    for c in children:
        c.start()
    results = [out.get(timeout=seconds + 60) for _ in children]
    for c in children:
        c.join(30)
    lat = [x for r in results for x in r[0]]
    errors = sum(r[1] for r in results)
    return {"rate": len(lat) / seconds, "p50": percentile(lat, 50), "p99": percentile(lat, 99),
            "errors": float(errors), "cpu": sum(r[2] for r in results) / seconds}


def run(server: RedisServer, workdir: Path, quick: bool) -> Section:
    sec = Section("HTTP API: append and context over HTTP vs the library call, append "
                  "throughput by concurrency and server workers, and the peer "
                  "(agent-memory-server) under the same load",
                  ["measure", "library", "HTTP (bare keep-alive)", "HermesClient",
                   "HTTP ÷ library (p50)", f"target ≤ {TARGET:.0f}×"])
    missing = peer_missing()
    peer = None if missing else Peer(workdir).start()
    try:
        append, context = latency(server, workdir, quick, peer)
    finally:
        if peer is not None:
            peer.stop()
    ratio = append["HTTP"]["p50"] / append["library"]["p50"]
    for name, stats, target in (("append", append, True), ("context (200 msgs)", context, False)):
        for q in ("p50", "p99"):
            sec.add(f"{name} {q}", us(stats["library"][q]), us(stats["HTTP"][q]),
                    us(stats["HermesClient"][q]),
                    times(stats["HTTP"][q] / stats["library"][q]) if q == "p50" else "",
                    verdict(ratio <= TARGET) if target and q == "p50" else "")
    floor = append["floor"]
    sec.add("HTTP floor: GET /healthz p50 / p99", "", f"{us(floor['p50'])} / {us(floor['p99'])}",
            "", "", "")
    if peer is not None:
        for name, stats in (("peer: working-memory PUT (1 message)", append["peer"]),
                            ("peer: working-memory GET (200 messages)", context["peer"])):
            sec.add(f"{name} p50 / p99", "", f"{us(stats['p50'])} / {us(stats['p99'])}", "",
                    "", "")
        for n in PEER_SIZES:
            stats = append[f"peer real {n}"]
            sec.add(f"peer: a real append, GET + PUT of {n} message{'s' * (n > 1)}, p50 / p99", "",
                    f"{us(stats['p50'])} / {us(stats['p99'])}", "",
                    f"÷ our HTTP append {times(stats['p50'] / append['HTTP']['p50'])}", "")
    seconds = 1.5 if quick else 4.0
    beats: list[bool] = []
    rates: dict[tuple[int, int], float] = {}  # (workers, clients) -> appends/s
    for workers in WORKERS:
        directory = workdir / f"throughput-{workers}"
        directory.mkdir()
        serve = ServeProcess(serve_config(directory, server.url), "--workers", str(workers)).start()
        other = None if missing else Peer(directory, workers).start()
        try:
            for i, conc in enumerate(CONCURRENCY):
                order: list[ServeProcess | Peer] = [serve] if other is None else [serve, other]
                got = {id(target): throughput(target, conc, seconds)
                       for target in (order if i % 2 == 0 else order[::-1])}
                t = got[id(serve)]
                plural = f"{conc} client{'s' if conc > 1 else ''}, " \
                         f"{workers} worker{'s' if workers > 1 else ''}"
                errors = f"; {t['errors']:.0f} non-201" if t["errors"] else ""
                rates[(workers, conc)] = t["rate"]
                sec.add(f"appends/s, {plural}", "", rate(t["rate"]),
                        f"p50 {us(t['p50'])}, p99 {us(t['p99'])}; load generator "
                        f"{t['cpu']:.2f} CPU{errors}", "", "")
                if other is not None:
                    o = got[id(other)]
                    beats.append(t["rate"] > o["rate"])
                    errors = f"; {o['errors']:.0f} non-200" if o["errors"] else ""
                    sec.add(f"peer PUTs/s, {plural}", "", rate(o["rate"]),
                            f"p50 {us(o['p50'])}, p99 {us(o['p99'])}{errors}",
                            f"hermes ÷ peer {times(t['rate'] / o['rate'])}",
                            verdict(t["rate"] > o["rate"]))
        finally:
            serve.stop()
            if other is not None:
                other.stop()
    if (1, 50) in rates and (2, 50) in rates:  # issue 33: the server on every core
        gain = rates[(2, 50)] / rates[(1, 50)]
        sec.add("appends/s at 50 clients: 2 workers ÷ 1 worker", "", times(gain), "", "",
                f"≥ {WORKER_TARGET}×: {verdict(gain >= WORKER_TARGET)}")
    sec.note("The floor is one request through uvicorn, FastAPI and the server's middleware that "
             "touches neither Redis nor the archive. An append is answered by the ASGI "
             "middleware itself (same auth, handler and errors as the FastAPI route), so it "
             "skips FastAPI's routing and dependency solving that /healthz still pays.")
    lib_rate = 1e6 / append["library"]["p50"]
    sec.note(f"For scale: one in-process library client appends at about {rate(lib_rate)} "
             "(1 ÷ its p50).")
    sec.note(f"Throughput rows: {seconds:.1f} s per cell, each connection appending to its own "
             f"session, from {GENERATORS} load-generator processes on the same machine "
             "(they compete with the server for the CPUs). In those rows the HermesClient "
             "column holds the latency of those requests, and the CPU the load generator "
             "itself used over the cell (process time ÷ wall time, summed over its "
             f"processes; the machine has {os.cpu_count()} CPUs).")
    if missing:
        sec.note(f"Peer (Redis agent-memory-server) not run: {missing}.")
    else:
        sec.note("Peer: agent-memory-server 0.15.0 (scripts/peer_ams.sh) on its own Redis Stack "
                 "7.4 (RedisJSON, RediSearch; AOF everysec like ours), long-term memory, "
                 "summarization and the task worker off, no auth, uvicorn with uvloop and "
                 "httptools, no access log. Its write is a PUT that replaces the whole working "
                 "memory; each PUT here carries one message, its cheapest write (a real append "
                 "through it re-sends the session's messages, or is a GET plus a PUT). Same "
                 "load generator, same cells, run back to back with ours (order alternating). "
                 f"More appends/s than the peer in {sum(beats)} of {len(beats)} cells.")
    return sec
