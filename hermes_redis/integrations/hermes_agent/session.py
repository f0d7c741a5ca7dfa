"""Which hermes-redis session a Hermes session id writes to. Mostly ``ids.session_id_for``;
where Hermes moved a conversation to a new id (a compression continues it, ``/branch``
forks it), the new id's session is recorded in ``$HERMES_HOME/hermes-redis/sessions.json``,
with the seq from which Hermes still holds the turns verbatim (``held_from``), so a later
``hermes --resume NEW`` finds the same conversation and recalls only what Hermes let go."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from pathlib import Path
from typing import Any

from hermes_redis.integrations.hermes_agent.ids import session_id_for

MAX_ALIASES = 10_000  # the oldest go first past this
_lock = threading.Lock()


def _path(home: str | None) -> Path:
    base = Path(home or os.environ.get("HERMES_HOME") or Path.home() / ".hermes")
    return base / "hermes-redis" / "sessions.json"


def _read(path: Path) -> dict[str, dict[str, Any]]:
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict):
            return {str(k): v for k, v in data.items() if isinstance(v, dict) and
                    isinstance(v.get("sid"), str)}
    return {}


def resolve(home: str | None, hermes_id: str, gateway_key: str | None) -> str:
    """The hermes-redis session of ``hermes_id`` (by ``gateway_key`` when Hermes gives one)."""
    return lookup(home, hermes_id, gateway_key)[0]


def lookup(home: str | None, hermes_id: str, gateway_key: str | None) -> tuple[str, int | None]:
    """(``resolve``, the seq from which Hermes holds the turns verbatim: None, all of them)."""
    found = _read(_path(home)).get(hermes_id)
    held = found.get("held_from") if found else None
    held = held if isinstance(held, int) and not isinstance(held, bool) else None
    if gateway_key:
        return session_id_for(hermes_id, gateway_key), held
    return (found["sid"] if found else session_id_for(hermes_id)), held


def alias(home: str | None, hermes_id: str, sid: str, held_from: int | None = None) -> None:
    """Record that ``hermes_id`` continues hermes-redis session ``sid`` (atomic replace)."""
    path = _path(home)
    entry = {"sid": sid, "held_from": held_from}
    with _lock, contextlib.suppress(OSError):
        known = _read(path)
        if known.get(hermes_id) == entry:
            return
        known.pop(hermes_id, None)
        known[hermes_id] = entry
        while len(known) > MAX_ALIASES:
            known.pop(next(iter(known)))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known), encoding="utf-8")
        os.replace(tmp, path)
