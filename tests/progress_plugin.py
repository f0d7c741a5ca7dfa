"""Progress as the suite runs (issue 34), for ``scripts/test.sh`` (``-p tests.progress_plugin``):
one line per finished test file with its counts, and at the end one line that says why this
pass's counts differ from the other's (skipped by reason; the backend cases only the default
stack runs).

Works alone and under pytest-xdist: on the controller, ``pytest_runtest_logreport`` sees every
worker's reports and the collection comes from ``pytest_xdist_node_collection_finished``; on a
worker the plugin does nothing.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from typing import Any

import pytest

# The hot-backend cases of a `backend` / `redis_kind` test that only the default stack adds
# (tests/conftest.py: pytest_generate_tests); pass 2 runs each such test once, on cluster+pg.
EXTRA_CASES = ("memory", "cluster", "redis+pg")
# Read on import (``-p`` loads this before tests/conftest.py clears every HERMES_* but the stack).
PASS_LABEL = os.environ.get("HERMES_TEST_PASS")
ORDER = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def params_of(nodeid: str) -> list[str]:
    """The parameter ids of a test id (``test_x[memory-3]`` -> ["memory", "3"])."""
    if not nodeid.endswith("]") or "[" not in nodeid:
        return []
    return nodeid[nodeid.index("[") + 1:-1].split("-")


def counts_text(counts: Counter[str]) -> str:
    return ", ".join(f"{counts[k]} {k}" for k in ORDER if counts[k]) or "nothing run"


def skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return str(text).removeprefix("Skipped: ").strip()


def group_of(nodeid: str) -> str:
    """A short name for where a test lives: its folder under tests/, else its module."""
    parts = file_of(nodeid).removeprefix("tests/").split("/")
    name = parts[0] if len(parts) > 1 else parts[0].removesuffix(".py").removeprefix("test_")
    return name


class Progress:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.started = time.monotonic()
        self.expected: Counter[str] = Counter()  # file -> its collected tests
        self.ids: list[str] = []
        self.done: dict[str, Counter[str]] = {}  # file -> outcomes so far
        self.outcome: dict[str, str] = {}  # test id -> its outcome until teardown
        self.totals: Counter[str] = Counter()
        self.files_done = 0
        self.stack_skips: Counter[str] = Counter()  # group -> tests skipped as other-stack only
        self.stack_name = ""
        self.other_skips: Counter[str] = Counter()  # reason -> tests

    # --- collection ------------------------------------------------------------------------
    def collected(self, ids: list[str]) -> None:
        if self.ids:
            return  # every xdist worker collects the same tests: the first says it
        self.ids = list(ids)
        self.expected = Counter(file_of(i) for i in ids)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.collected(ids)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if session.items:
            self.collected([item.nodeid for item in session.items])

    # --- reports ---------------------------------------------------------------------------
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        nid = report.nodeid
        if report.when in ("setup", "call"):
            if hasattr(report, "wasxfail"):
                self.outcome[nid] = "xfailed" if report.skipped else "xpassed"
            elif report.failed:
                self.outcome[nid] = "error" if report.when == "setup" else "failed"
            elif report.skipped:
                self.outcome[nid] = "skipped"
                self.note_skip(nid, skip_reason(report))
            else:
                self.outcome.setdefault(nid, "passed")
            return
        outcome = self.outcome.pop(nid, "passed")
        if report.failed:
            outcome = "error"
        self.finish(nid, outcome)

    def note_skip(self, nid: str, reason: str) -> None:
        head, sep, _ = reason.partition(" stack only: ")
        if sep:
            self.stack_name = head
            self.stack_skips[group_of(nid)] += 1
        else:
            self.other_skips[reason[:70]] += 1

    def finish(self, nid: str, outcome: str) -> None:
        path = file_of(nid)
        counts = self.done.setdefault(path, Counter())
        counts[outcome] += 1
        self.totals[outcome] += 1
        if counts.total() == self.expected.get(path, -1):
            self.files_done += 1
            elapsed = int(time.monotonic() - self.started)
            self.write(f"{path}: {counts_text(counts)}  [{self.files_done}/{len(self.expected)} "
                       f"files, {self.totals.total()}/{len(self.ids)} tests, "
                       f"{elapsed // 60}:{elapsed % 60:02d}]")

    def write(self, line: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            writer = getattr(reporter, "_tw", None)  # after the dots of the tests so far
            if writer is not None and getattr(writer, "width_of_current_line", 0):
                writer.line()
            reporter.write_line(line)

    # --- the pass's summary ----------------------------------------------------------------
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        stack = os.environ.get("HERMES_TEST_STACK", "").strip() or "default"
        label = PASS_LABEL or f"the {stack} stack"
        why = []
        if self.stack_skips:
            groups = ", ".join(f"{g} {n}" for g, n in self.stack_skips.most_common())
            why.append(f"{self.stack_skips.total()} {self.stack_name}-stack only ({groups})")
        if self.other_skips:
            reasons = "; ".join(f"{n}: {r}" for r, n in self.other_skips.most_common(4))
            why.append(f"{self.other_skips.total()} for other reasons ({reasons})")
        line = f"{label}: {len(self.ids)} tests, {counts_text(self.totals)}"
        if why:
            line += "; skipped: " + ", ".join(why)
        extra = Counter(p for i in self.ids for p in params_of(i) if p in EXTRA_CASES)
        if extra:
            cases = ", ".join(f"{n} on {p}" for p, n in extra.most_common())
            line += (f"; {extra.total()} backend cases ({cases}) run on this stack only "
                     "(pass 2 runs each backend test once, on cluster+pg)")
        elif stack != "default":
            line += ("; each backend test runs once, on cluster+pg (pass 1 adds memory, "
                     "cluster and redis+pg cases)")
        terminalreporter.write_line(line)


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: the controller reports
        return
    config.pluginmanager.register(Progress(config), "hermes-progress")
