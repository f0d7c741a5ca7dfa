"""``serve --workers N`` (issue 33): the default is one process per core, and ``/metrics``
stays true across the processes: N requests spread over the workers read back as N."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import httpx
import pytest
from prometheus_client.mmap_dict import MmapedDict

from tests.http_server import ServeProcess, serve_config
from tests.redis_server import RedisServer

ROUTE = "/v1/sessions/{session_id}/messages"


def _metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample in a Prometheus text page (0 when absent)."""
    for line in text.splitlines():
        head, _, value = line.rpartition(" ")
        if line.startswith("#") or head.split("{")[0] != name:
            continue
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            return float(value)
    return 0.0


def _served_by(directory: Path) -> dict[str, float]:
    """Per worker process (pid): the 201 appends its own counter file holds."""
    out: dict[str, float] = {}
    for path in directory.glob("counter_*.db"):
        pid = path.stem.split("_", 1)[1]
        for key, value, _ts, _pos in MmapedDict.read_all_values_from_file(str(path)):
            if '"hermes_http_requests_total"' in key and ROUTE in key and '"201"' in key:
                out[pid] = out.get(pid, 0.0) + value
    return out


def _append_burst(url: str, sid: str, threads: int, each: int) -> int:
    """``threads`` x ``each`` appends, every one on a new connection (so the kernel hands
    them to whichever worker accepts); the number answered 201."""
    ok = [0] * threads

    def run(i: int) -> None:
        for j in range(each):
            r = httpx.post(f"{url}/v1/sessions/{sid}/messages",
                           json={"role": "user", "content": f"t{i} m{j}"}, timeout=30)
            assert r.status_code == 201, r.text
            ok[i] += 1

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return sum(ok)


def test_default_is_one_worker_per_core_and_metrics_sum_over_them(
        tmp_path: Path, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    cores = max(1, os.cpu_count() or 1)
    multiproc = tmp_path / "prom"
    multiproc.mkdir()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(multiproc))  # serve keeps a given one
    config = serve_config(tmp_path, redis_server.url, server={"workers": 0})  # 0: the default
    proc = ServeProcess(config).start()
    try:
        with httpx.Client(base_url=proc.url, timeout=30) as c:
            r = c.post("/v1/sessions", json={"user_id": "many"})
            assert r.status_code == 201, r.text
            sid = r.json()["session_id"]
            sent = 0
            for _ in range(10):  # until every worker served some (the kernel picks)
                sent += _append_burst(proc.url, sid, threads=4, each=10)
                if len(_served_by(multiproc)) >= min(cores, 2):
                    break
            served = _served_by(multiproc)
            text = c.get("/metrics").text
            seqs = [m["seq"] for m in c.get(f"/v1/sessions/{sid}/messages",
                                             params={"limit": 1000}).json()["messages"]]
        assert f"{cores} worker" in proc.output()
        assert len(served) >= min(cores, 2), served
        assert sum(served.values()) == sent
        assert _metric(text, "hermes_http_requests_total", route=ROUTE, status="201") == sent
        assert _metric(text, "hermes_http_request_duration_seconds_count", route=ROUTE) == sent
        assert _metric(text, "hermes_appended_messages_total") == sent  # the library's counter
        assert seqs == list(range(1, sent + 1))  # one state under every worker
    finally:
        proc.stop()


def test_workers_option_wins_over_config_and_is_checked(tmp_path: Path,
                                                        redis_server: RedisServer) -> None:
    config = serve_config(tmp_path, redis_server.url, server={"workers": 3})
    proc = ServeProcess(config, "--workers", "2").start()
    try:
        with httpx.Client(base_url=proc.url, timeout=30) as c:
            r = c.post("/v1/sessions", json={"user_id": "duo"})
            sid = r.json()["session_id"]
            sent = _append_burst(proc.url, sid, threads=2, each=5)
            text = c.get("/metrics").text
        assert "2 workers" in proc.output()
        assert _metric(text, "hermes_http_requests_total", route=ROUTE, status="201") == sent
    finally:
        proc.stop()
