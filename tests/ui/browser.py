"""Debian's chromium driven by Playwright (no browser downloaded: ``executable_path``), with
every request the page makes recorded, so a test can say that none left the server."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
SHOTS = ROOT / "docs" / "ui"


def chromium_path() -> str:
    """The system chromium, or a skip that says how to get it."""
    found = os.environ.get("CHROMIUM_PATH") or shutil.which("chromium")
    if not found:
        pytest.skip("no chromium on PATH: `bash scripts/browser.sh` installs Debian's chromium "
                    "(needs root and apt-get)")
    return found


@contextmanager
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright package is missing: `bash scripts/browser.sh` installs it")
    path = chromium_path()
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, headless=True,
                              args=["--no-sandbox", "--disable-dev-shm-usage"])
        try:
            yield b
        finally:
            b.close()


class Page:
    """A page of one browser context (its own cookies) on ``base``, recording every URL
    it requests."""

    def __init__(self, browser: Any, base: str) -> None:
        self.base = base
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.page = self.context.new_page()
        self.page.set_default_timeout(15_000)
        self.requests: list[str] = []
        self.page.on("request", lambda r: self.requests.append(r.url))

    def goto(self, path: str) -> Any:
        return self.page.goto(self.base + path)

    def shot(self, name: str) -> None:
        """A screenshot for docs/ui.md, when UI_SCREENSHOTS=1."""
        if os.environ.get("UI_SCREENSHOTS") == "1":
            SHOTS.mkdir(parents=True, exist_ok=True)
            self.page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=False)

    def foreign(self) -> list[str]:
        """Requested URLs not on the server's origin (data: URLs stay in the page)."""
        return [u for u in self.requests
                if not (u.startswith(self.base + "/") or u.startswith("data:"))]

    def close(self) -> None:
        self.context.close()
