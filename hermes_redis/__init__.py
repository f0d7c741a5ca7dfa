"""hermes-redis: session memory for AI agents, hot in Redis, durable in SQLite or PostgreSQL.

The public names load on first use, so ``from hermes_redis import HermesClient`` (a remote
agent) pulls in neither Redis nor the archive."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hermes_redis.client import HermesClient
    from hermes_redis.core.api import SessionAPI
    from hermes_redis.core.config import Config
    from hermes_redis.core.errors import HermesError
    from hermes_redis.core.models import Context, Message, SessionInfo
    from hermes_redis.session_memory import SessionMemory

_WHERE = {
    "Config": "hermes_redis.core.config",
    "Context": "hermes_redis.core.models",
    "HermesClient": "hermes_redis.client",
    "HermesError": "hermes_redis.core.errors",
    "Message": "hermes_redis.core.models",
    "SessionAPI": "hermes_redis.core.api",
    "SessionInfo": "hermes_redis.core.models",
    "SessionMemory": "hermes_redis.session_memory",
}
__all__ = ["Config", "Context", "HermesClient", "HermesError", "Message", "SessionAPI",
           "SessionInfo", "SessionMemory"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'hermes_redis' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value
