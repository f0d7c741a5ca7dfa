"""What every benchmark section shares: the private Redis, isolated configs, timers,
percentiles and the result table.

Numbers are medians over interleaved rounds: a hermes-redis block and its baseline block
run back to back, so a noisy neighbour slows both and the ratio stays honest.
"""

from __future__ import annotations

import gc
import math
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tests.redis_server: the same private server the tests use

for _var in [v for v in os.environ if v.startswith("HERMES_")]:
    del os.environ[_var]  # a developer's own settings must not leak into the numbers

from hermes_redis import Config, SessionMemory  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402

clock = time.perf_counter_ns


def start_redis() -> RedisServer:
    """A private redis-server on a free port (never 6379), persisting as docs/operations.md
    recommends (AOF, fsync every second); no AOF rewrite forks in the middle of a timing."""
    return RedisServer(aof=True, extra=["--appendfsync", "everysec",
                                        "--auto-aof-rewrite-percentage", "0"]).start()


CPUS = sorted(os.sched_getaffinity(0))


@contextmanager
def placement(server_pid: int, client: set[int], server: set[int]) -> Iterator[None]:
    """Pin this process and redis-server to CPUs for a block, then free both again.

    On a VM a loopback round trip between two cores pays for waking the other vCPU
    (≈100 µs here) while one shared core costs ≈25 µs: unpinned runs flip between the two.
    """
    os.sched_setaffinity(0, client)
    os.sched_setaffinity(server_pid, server)
    try:
        time.sleep(0.05)
        yield
    finally:
        os.sched_setaffinity(0, set(CPUS))
        os.sched_setaffinity(server_pid, set(CPUS))


SAME_CORE = ({CPUS[0]}, {CPUS[0]})
SEPARATE_CORES = ({CPUS[0]}, {CPUS[-1]})


def scratch_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="hermes-bench-"))


def make_config(redis_url: str | None, workdir: Path, backend: str = "redis",
                **session: Any) -> Config:
    """A config of its own: key prefix, queue and archive file nobody else uses."""
    tag = uuid.uuid4().hex[:10]
    return Config().with_overrides(
        memory={"session": {"backend": backend, **session}},
        redis={"url": redis_url, "key_prefix": f"b{tag}", "queue": f"bq{tag}"},
        archive={"data_dir": str(workdir / f"data-{tag}"), "path": str(workdir / f"{tag}.db")},
    )


def open_memory(redis_url: str | None, workdir: Path, backend: str = "redis",
                **session: Any) -> SessionMemory:
    return SessionMemory(make_config(redis_url, workdir, backend, **session))


# --- statistics ---------------------------------------------------------------------------
def percentile(samples: list[float], q: float) -> float:
    """Linear-interpolated percentile, q in 0..100."""
    if not samples:
        return math.nan
    s = sorted(samples)
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def timed(fn: Callable[[], Any], n: int) -> tuple[list[float], float]:
    """Run ``fn`` n times; per-call latencies in µs and the block's wall time in s."""
    out: list[float] = []
    append = out.append
    start = clock()
    for _ in range(n):
        t0 = clock()
        fn()
        append((clock() - t0) / 1000)
    return out, (clock() - start) / 1e9


@contextmanager
def quiet_gc() -> Iterator[None]:
    """Collect before a timed block and keep the collector out of it."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


# --- formatting ---------------------------------------------------------------------------
def us(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    if value >= 10_000:
        return f"{value / 1000:,.1f} ms"
    return f"{value:,.0f} µs" if value >= 100 else f"{value:,.1f} µs"


def rate(value: float, unit: str = "/s") -> str:
    return "n/a" if math.isnan(value) else f"{value:,.0f}{unit}"


def times(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f}×"


def num(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:,.0f}"


@dataclass
class Section:
    """One table of the report: a title, column headers, rows and notes under it."""

    title: str
    headers: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, *cells: object) -> None:
        self.rows.append([str(c) for c in cells])

    def note(self, text: str) -> None:
        self.notes.append(text)

    def render(self) -> str:
        """A GitHub-flavoured markdown table, padded so it also reads well in a terminal."""
        table = [self.headers, *self.rows]
        widths = [max(_width(r[i]) if i < len(r) else 0 for r in table)
                  for i in range(len(self.headers))]

        def line(cells: list[str]) -> str:
            padded = [c + " " * (w - _width(c)) for c, w in zip(cells, widths, strict=False)]
            return "| " + " | ".join(padded) + " |"

        out = [f"### {self.title}", "", line(self.headers),
               "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
        out += [line(r + [""] * (len(widths) - len(r))) for r in self.rows]
        if self.notes:
            out.append("")
            out += [f"- {n}" for n in self.notes]
        return "\n".join(out)


def _width(text: str) -> int:
    import unicodedata

    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"
