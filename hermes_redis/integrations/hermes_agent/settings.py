"""Where the Hermes Agent plugins find hermes-redis: the ``hermes_redis:`` block of
``$HERMES_HOME/config.yaml`` (written by ``hermes-redis hermes install``), then the
environment. Two modes, one block:

    hermes_redis:
      url: http://memory.internal:8080   # remote: a `hermes-redis serve` (many machines)
      key: hr_...                        #   its API key (or $HERMES_API_KEY)
      # redis: redis://127.0.0.1:6379/0  # library: Redis itself, a worker beside it
      # config: /etc/hermes-redis/config.yml   the server-side config (library mode)
      user_id: default                   # the owner when Hermes names no user
      prefetch_tokens: 800               # what prefetch may add to a user message
      queue_max: 1000                    # turns held while hermes-redis is away

``$HERMES_SERVER_URL``, ``$HERMES_API_KEY`` and ``$HERMES_REDIS_URL`` override the block.
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hermes_redis.core.api import SessionAPI
from hermes_redis.core.errors import ConfigError

KEYS = ("url", "key", "redis", "config", "user_id", "prefetch_tokens", "queue_max")
TIMEOUT = 2.0  # seconds any one call may take inside Hermes' hooks


@dataclass(frozen=True)
class Settings:
    """One Hermes home's view of hermes-redis. ``remote``: through the HTTP client."""

    url: str | None = None
    key: str | None = None
    redis: str | None = None
    config: str | None = None
    user_id: str = "default"
    prefetch_tokens: int = 800
    queue_max: int = 1000

    @property
    def remote(self) -> bool:
        return self.url is not None

    def where(self) -> str:
        """Where the memory is, for log lines (never the key)."""
        return self.url or self.redis or "the hermes-redis config's Redis"


def load_settings(hermes_home: str | os.PathLike[str] | None = None) -> Settings:
    """The settings of ``hermes_home`` (else ``$HERMES_HOME``, else ``~/.hermes``); a
    ConfigError of one line for a block that is not what the module docstring shows."""
    home = Path(hermes_home or os.environ.get("HERMES_HOME") or Path.home() / ".hermes")
    path = home / "config.yaml"
    block: Any = {}
    if path.is_file():
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (yaml.YAMLError, UnicodeDecodeError) as err:
            raise ConfigError(f"{path}: not valid YAML ({' '.join(str(err).split())[:200]})") \
                from None
        block = data.get("hermes_redis", {}) if isinstance(data, dict) else {}
    if block is None:
        block = {}
    if not isinstance(block, dict):
        raise ConfigError(f"{path}: hermes_redis must be a mapping of {', '.join(KEYS)}")
    unknown = sorted(set(block) - set(KEYS) - {"previous"})  # previous: install's record
    if unknown:
        raise ConfigError(f"{path}: unknown key hermes_redis.{unknown[0]}; "
                          f"the keys are {', '.join(KEYS)}")
    values = {k: v for k, v in block.items() if k != "previous"}
    for var, key in (("HERMES_SERVER_URL", "url"), ("HERMES_API_KEY", "key"),
                     ("HERMES_REDIS_URL", "redis")):
        if os.environ.get(var):
            values[key] = os.environ[var]
    for key in ("url", "key", "redis", "config", "user_id"):
        if values.get(key) is not None and not isinstance(values[key], str):
            raise ConfigError(f"{path}: hermes_redis.{key} must be a string")
    for key in ("prefetch_tokens", "queue_max"):
        value = values.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                  or value < 1):
            raise ConfigError(f"{path}: hermes_redis.{key} must be a positive whole number")
    if values.get("url") and values.get("redis"):
        raise ConfigError(f"{path}: hermes_redis has both url (remote) and redis (library); "
                          "keep one")
    return Settings(**{k: v for k, v in values.items() if v is not None and v != ""})


_apis: dict[tuple[Settings, str], SessionAPI] = {}
_lock = threading.Lock()


def api_for(settings: Settings, purpose: str) -> SessionAPI:
    """This process's connection for ``purpose`` ("read": the hooks on Hermes' threads,
    "write": the provider's writer thread), made on first use; every call is bounded by
    ``TIMEOUT``. Remote: a HermesClient; library: a SessionMemory on ``settings.redis``."""
    with _lock:
        api = _apis.get((settings, purpose))
        if api is None:
            api = _apis[(settings, purpose)] = _connect(settings)
        return api


def forget_api(settings: Settings) -> None:
    """Close and drop this process's connections for ``settings`` (tests, shutdown)."""
    with _lock:
        for key in [k for k in _apis if k[0] == settings]:
            api = _apis.pop(key)
            with contextlib.suppress(Exception):  # a dead connection: nothing to keep
                api.close()


def _connect(settings: Settings) -> SessionAPI:
    if settings.remote:
        from hermes_redis.client import HermesClient
        assert settings.url is not None
        return HermesClient(settings.url, settings.key, timeout=TIMEOUT)
    from hermes_redis.core import config as config_mod
    from hermes_redis.session_memory import SessionMemory
    # never ./config.yml: Hermes' working directory is the user's project, not ours
    config = config_mod.load(settings.config) if settings.config else config_mod.Config()
    redis: dict[str, Any] = {"socket_timeout": min(config.redis.socket_timeout, TIMEOUT)}
    if settings.redis:
        redis["url"] = settings.redis
    return SessionMemory(config.with_overrides(redis=redis))
