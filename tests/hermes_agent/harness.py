"""The real Hermes Agent, offline, for tests and benchmarks: a ``HERMES_HOME`` whose config points
the model at a recording ``tests.model_server.ModelServer`` and turns off everything that would
reach the network or install packages, and the ``hermes`` CLI of ``.venv-hermes``
(``scripts/hermes_venv.sh``) run one turn at a time.

    with ModelServer() as model:
        home = HermesHome(tmp_path / "home", model.url)
        out = home.chat("my dog is called Rex")          # a new session
        home.chat("what is my dog called?", resume=out.session_id)
        model.chat_bodies()[-1]["messages"]              # what the model was sent
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-hermes"
HERMES = VENV / "bin" / "hermes"
PYTHON = VENV / "bin" / "python"
CLOSED = "http://127.0.0.1:9"  # a port nothing listens on: any stray network call fails at once
SESSION_ID = re.compile(r"session_id:\s*(\S+)")


def need_hermes() -> None:
    """Skip, saying why, where ``scripts/hermes_venv.sh`` could not install Hermes Agent."""
    if not HERMES.exists():
        pytest.skip("Hermes Agent is not installed in .venv-hermes (bash scripts/hermes_venv.sh)")


def offline_config(model_url: str, model: str = "good") -> dict[str, Any]:
    """A Hermes config that stays on this machine: the model at ``model_url``, no environment
    probe, no security scanner download, no lazy pip installs, a fixed set of toolsets."""
    return {
        "model": {"provider": "custom", "default": model, "base_url": model_url, "api_key": "x",
                  "context_length": 128000},  # Hermes refuses windows under 64,000
        "agent": {"environment_probe": False},
        "security": {"tirith_enabled": False, "allow_lazy_installs": False},
        "platform_toolsets": {"cli": ["memory", "session_search", "todo", "clarify",
                                      "context_engine"]},
    }


@dataclass
class Turn:
    stdout: str
    stderr: str
    session_id: str | None
    returncode: int


class HermesHome:
    """One ``HERMES_HOME`` (one machine's Hermes): ``config.yaml`` written once (``extra`` is
    merged over the offline config), then ``chat`` runs the real CLI against it."""

    def __init__(self, path: Path, model_url: str, extra: dict[str, Any] | None = None,
                 model: str = "good") -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        config = offline_config(model_url, model)
        for key, value in (extra or {}).items():
            if isinstance(value, dict) and isinstance(config.get(key), dict):
                config[key] = {**config[key], **value}
            else:
                config[key] = value
        (self.path / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        (self.path / ".update_check").write_text(str(int(time.time())))

    @property
    def config_file(self) -> Path:
        return self.path / "config.yaml"

    @property
    def state_db(self) -> Path:
        return self.path / "state.db"

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("HERMES_", "OPENAI_", "VIRTUAL_ENV"))}
        env.update({"HERMES_HOME": str(self.path), "HTTP_PROXY": CLOSED, "HTTPS_PROXY": CLOSED,
                    "http_proxy": CLOSED, "https_proxy": CLOSED,
                    "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
                    "PATH": f"{VENV / 'bin'}:{env.get('PATH', '')}"})
        env.update(extra)
        return env

    def chat(self, message: str, resume: str | None = None, timeout: float = 120,
             args: tuple[str, ...] = (), **env: str) -> Turn:
        """One turn of ``hermes chat -Q -q MESSAGE [--resume ID]``; its session id from stderr."""
        need_hermes()
        cmd = [str(HERMES), "chat", "-Q", "-q", message, *args]
        if resume:
            cmd += ["--resume", resume]
        done = subprocess.run(cmd, env=self.env(**env), capture_output=True, text=True,
                              timeout=timeout, cwd=self.path)
        found = SESSION_ID.search(done.stderr) or SESSION_ID.search(done.stdout)
        return Turn(done.stdout, done.stderr, found.group(1) if found else None, done.returncode)

    def run(self, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
        """Any ``hermes`` command against this home."""
        need_hermes()
        return subprocess.run([str(HERMES), *args], env=self.env(**env), capture_output=True,
                              text=True, timeout=timeout, cwd=self.path)

    def python(self, code: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
        """``code`` run by Hermes' own interpreter with this home (to drive its classes)."""
        need_hermes()
        return subprocess.run([str(PYTHON), "-c", code], env=self.env(**env), capture_output=True,
                              text=True, timeout=timeout, cwd=self.path)
