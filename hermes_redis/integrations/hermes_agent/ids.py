"""The one mapping from Hermes Agent's names to hermes-redis ids, shared by the memory provider
and the ``state.db`` importer, so a message the provider mirrored and the same message imported
later from ``state.db`` are one message (the archive keeps a message id once per session)."""

from __future__ import annotations

import contextlib
import hashlib
import json
from typing import Any

from hermes_redis.core.models import SESSION_ID_RE


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


def session_id_for(hermes_session_id: str, gateway_session_key: str | None = None) -> str:
    """The hermes-redis session of a Hermes session: keyed by ``gateway_session_key`` when Hermes
    gives one (every gateway process, on any machine, shares that conversation), else Hermes'
    own session id, kept as it is when it is a valid hermes-redis id (Hermes' ids, such as
    ``20261207_021919_68cc9a``, are), else a digest of it."""
    if gateway_session_key:
        return "hg-" + _digest("gateway", gateway_session_key)[:40]
    if SESSION_ID_RE.fullmatch(hermes_session_id):
        return hermes_session_id
    return "hs-" + _digest("session", hermes_session_id)[:40]


def message_key(role: str, content: Any, tool_call_id: str | None = None,
                tool_calls: Any = None) -> str:
    """What makes two Hermes messages the same message: role, content, the tool call they answer
    and the tool calls they make (as canonical JSON, whether Hermes held them parsed or as the
    text ``state.db`` stores)."""
    if isinstance(tool_calls, str):
        with contextlib.suppress(ValueError):
            tool_calls = json.loads(tool_calls)
    calls = json.dumps(tool_calls or None, sort_keys=True, ensure_ascii=False, default=str)
    text = content if isinstance(content, str) else json.dumps(content, sort_keys=True,
                                                                ensure_ascii=False, default=str)
    return _digest(role, text or "", tool_call_id or "", calls)


def message_id_for(session_id: str, key: str, occurrence: int) -> str:
    """The message id (32 hex) of the ``occurrence``-th (0-based) message with ``key``
    (``message_key``) in the Hermes session whose hermes-redis id is ``session_id``, counted in
    the session's message order: the same for ``sync_turn``'s ``messages`` and for ``state.db``'s
    rows, so a retry, a replay or an import stores nothing twice."""
    return _digest("message", session_id, key, str(occurrence))[:32]


class Occurrences:
    """Counts ``message_key``s in message order and hands out their ids (``id_for``)."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.seen: dict[str, int] = {}

    def id_for(self, role: str, content: Any, tool_call_id: str | None = None,
               tool_calls: Any = None) -> str:
        key = message_key(role, content, tool_call_id, tool_calls)
        n = self.seen.get(key, 0)
        self.seen[key] = n + 1
        return message_id_for(self.session_id, key, n)
