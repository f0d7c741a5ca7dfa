"""ui: the server time of each /ui view with 100,000 sessions in the archive (issue 32).

Sessions are bulk-loaded into the archive as the listing benchmark loads them (two archived
messages each, eight users), plus one live session with archived and unarchived turns and a
memory; then a real ``hermes-redis serve`` answers each view's GET, timed from a keep-alive
client on loopback (so the figure is the server's time plus a loopback round trip). Target:
every view's p50 ≤ 200 ms.

    .venv/bin/python -m bench.ui [--sessions 100000] [--rounds 20]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from bench.common import scratch_dir, start_redis
from bench.listing import load
from hermes_redis import SessionMemory
from hermes_redis.core.config import load as load_config
from tests.http_server import ServeProcess, serve_config

TARGET_MS = 200.0


def _ms(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return 1000 * s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def views(mem: SessionMemory, sids: list[str], live: str) -> dict[str, str]:
    """The path of each view to time (a 10th page needs the cursors of the first nine)."""
    cursor = None
    for _ in range(9):
        cursor = mem.list_sessions(limit=50, cursor=cursor, status="active").next_cursor
    probe = sids[len(sids) // 2]
    return {
        "sessions, first page": "/ui/",
        "sessions, 10th page": f"/ui/?cursor={cursor}",
        "sessions of one user": "/ui/?user=u3",
        "sessions by id prefix": f"/ui/?prefix={probe[:4]}&status=all",
        "search (1 in 8 messages match)": "/ui/?q=postgres",
        "search (one message matches)": f"/ui/?q=T{len(sids) // 3}X",
        "a live session": f"/ui/sessions/{live}",
        "a session only in the archive": f"/ui/sessions/{probe}",
        "what the model sees (window)": f"/ui/sessions/{live}/context?budget=window",
        "what the model sees (2K)": f"/ui/sessions/{live}/context?budget=2k",
        "forget confirmation": f"/ui/sessions/{live}/confirm?action=forget-last&n=2",
        "memories of a user": "/ui/users/u1/memories",
        "health": "/ui/health",
        "keys": "/ui/keys",
        "/docs": "/docs",
    }


def time_views(base: str, paths: dict[str, str], rounds: int) -> dict[str, tuple[float, float]]:
    out: dict[str, tuple[float, float]] = {}
    with httpx.Client(base_url=base, timeout=60) as c:
        for name, path in paths.items():
            for _ in range(3):  # warm: caches, the doctor's first run
                r = c.get(path)
                if r.status_code != 200:
                    raise RuntimeError(f"{path}: {r.status_code} {r.text[:300]}")
            samples = []
            for _ in range(rounds):
                t0 = time.perf_counter()
                c.get(path)
                samples.append(time.perf_counter() - t0)
            out[name] = (_ms(samples, 0.5), _ms(samples, 0.99))
    return out


def run(sessions: int, rounds: int, workdir: Path, say: Callable[[str], None] = print) -> str:
    server = start_redis()
    proc = None
    try:
        (workdir / "ui").mkdir(parents=True, exist_ok=True)
        config = serve_config(workdir / "ui", server.url)
        mem = SessionMemory(load_config(config))
        t0 = time.perf_counter()
        sids = load(mem, sessions)
        live = mem.create_session("u1", "a live session")
        for i in range(60):
            mem.append(live, "user", f"question {i} about the postgres backup")
            mem.append(live, "assistant", f"answer {i}: the backup runs nightly at {i % 24}:00")
            if i == 40:
                mem.flush(live)
        mem.remember("u1", "u1 keeps backups for 30 days", session_id=live)
        say(f"loaded {sessions:,} sessions in {time.perf_counter() - t0:.0f} s")
        paths = views(mem, sids, live)
        searches = []
        for _ in range(rounds):  # the library's own cost of the common-word search
            t1 = time.perf_counter()
            mem.search("postgres", limit=50)
            searches.append(time.perf_counter() - t1)
        mem.close()
        proc = ServeProcess(config).start()
        results = time_views(proc.url, paths, rounds)
    finally:
        if proc is not None:
            proc.stop()
        server.stop()
    lines = [f"| view ({sessions:,} sessions in the archive) | p50 ms | p99 ms | target p50 ≤ 200 ms |",
             "|---|---:|---:|---|"]
    for name, (p50, p99) in results.items():
        lines.append(f"| {name} | {p50:.1f} | {p99:.1f} | {'met' if p50 <= TARGET_MS else 'MISSED'} |")
    lines.append(f"| (in-process `SessionMemory.search('postgres', limit=50)`, no HTTP) | "
                 f"{_ms(searches, 0.5):.1f} | {_ms(searches, 0.99):.1f} | the library's share |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ui", description=__doc__)
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    print(run(args.sessions, args.rounds, scratch_dir()))


if __name__ == "__main__":
    main()
