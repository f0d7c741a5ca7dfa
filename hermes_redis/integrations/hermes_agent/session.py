"""Which hermes-redis session a Hermes session id writes to. Mostly ``ids.session_id_for``;
where Hermes moved a conversation to a new id (a compression continues it, ``/branch``
forks it), the new id's session is recorded in ``$HERMES_HOME/hermes-redis/sessions.json``,
so a later ``hermes --resume NEW`` finds the same conversation."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from pathlib import Path

from hermes_redis.integrations.hermes_agent.ids import session_id_for

MAX_ALIASES = 10_000  # the oldest go first past this
_lock = threading.Lock()


def _path(home: str | None) -> Path:
    base = Path(home or os.environ.get("HERMES_HOME") or Path.home() / ".hermes")
    return base / "hermes-redis" / "sessions.json"


def _read(path: Path) -> dict[str, str]:
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict):
            return {str(k): str(v) for k, v in data.items()}
    return {}


def resolve(home: str | None, hermes_id: str, gateway_key: str | None) -> str:
    """The hermes-redis session of ``hermes_id`` (by ``gateway_key`` when Hermes gives one)."""
    if gateway_key:
        return session_id_for(hermes_id, gateway_key)
    return _read(_path(home)).get(hermes_id) or session_id_for(hermes_id)


def alias(home: str | None, hermes_id: str, sid: str) -> None:
    """Record that ``hermes_id`` continues hermes-redis session ``sid`` (atomic replace)."""
    path = _path(home)
    with _lock, contextlib.suppress(OSError):
        known = _read(path)
        if known.get(hermes_id) == sid:
            return
        known.pop(hermes_id, None)
        known[hermes_id] = sid
        while len(known) > MAX_ALIASES:
            known.pop(next(iter(known)))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known), encoding="utf-8")
        os.replace(tmp, path)
