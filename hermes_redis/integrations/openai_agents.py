"""``HermesSession``: the OpenAI Agents SDK ``Session`` protocol over hermes-redis.

    from agents import Agent, Runner
    from hermes_redis.integrations.openai_agents import HermesSession

    session = HermesSession("user-42-chat", memory=SessionMemory.from_config())
    await Runner.run(agent, "What is the weather in Tokyo?", session=session)

Each SDK item is one message, its ``item`` exactly as the SDK gave it. Roles: an item with a
``role`` keeps it (``developer`` is stored as ``system``); a tool's result
(``function_call_output`` and every other ``*_output`` type) is ``tool``; everything else the
model produced (``function_call``, ``reasoning``, hosted tool calls…) is ``assistant``.
``get_items`` returns the items exactly as added, in order, whatever workers archived or
compacted meanwhile; a message stored without an item (appended by other means) comes back
as ``{"role": ..., "content": ...}``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from hermes_redis.errors import ValidationError
from hermes_redis.integrations import Memory, Store
from hermes_redis.models import Message

try:
    from agents.memory.session_settings import SessionSettings, resolve_session_limit
except ImportError as err:  # pragma: no cover - the extra is not installed
    raise ImportError("hermes_redis.integrations.openai_agents needs the OpenAI Agents SDK: "
                      "pip install 'hermes-redis[openai-agents]'") from err

ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


def role_of(item: Mapping[str, Any]) -> str:
    """The hermes role an SDK item is stored under (see the module docstring)."""
    role = item.get("role")
    if isinstance(role, str) and role in ROLES:
        return ROLES[role]
    kind = item.get("type")
    if isinstance(kind, str) and kind.endswith("_output"):
        return "tool"
    return "assistant"


def row_of(item: Any) -> dict[str, Any]:
    """The append_many row that stores one SDK item."""
    if hasattr(item, "model_dump"):  # a pydantic output item: its JSON form, as the SDK sends it
        item = item.model_dump(mode="json", exclude_unset=True)
    if not isinstance(item, Mapping):
        raise ValidationError(f"a session item is a JSON object, not {type(item).__name__}")
    return {"role": role_of(item), "content": "", "item": dict(item)}


def item_of(m: Message) -> Any:
    """The SDK item a stored message stands for."""
    if m.item_json:
        return m.item
    return {"role": m.role if m.role in ("user", "assistant", "system") else "assistant",
            "content": m.content}


class HermesSession:
    """An Agents SDK session kept in hermes-redis (the ``agents.memory.Session`` protocol).
    ``memory``: a SessionMemory or HermesClient (default: ``SessionMemory.from_config()``,
    closed by ``close()``); ``user_id``: the owner of a session this creates."""

    def __init__(self, session_id: str, memory: Memory | None = None, *, user_id: str = "default",
                 session_settings: SessionSettings | None = None) -> None:
        self._store = Store(session_id, memory, user_id)
        self.session_id = self._store.session_id
        self.memory = self._store.memory
        self.session_settings = session_settings or SessionSettings()

    def items(self, limit: int | None = None) -> list[Any]:
        """``get_items``, synchronously."""
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None and limit <= 0:
            return []
        return [item_of(m) for m in self._store.messages(limit)]

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The stored items, oldest first; with ``limit``, the latest ``limit`` of them."""
        return await asyncio.to_thread(self.items, limit)

    async def add_items(self, items: list[Any]) -> None:
        """Store ``items`` in order (up to 1,000 at a time in one atomic step); a bad item is a
        ValidationError and nothing of its batch is stored."""
        if not items:
            return
        rows = [row_of(item) for item in items]
        await asyncio.to_thread(self._store.add, rows)

    async def pop_item(self) -> Any | None:
        """Remove the newest item for good (both tiers) and return it; None when empty."""
        popped = await asyncio.to_thread(self._store.pop)
        return None if popped is None else item_of(popped)

    async def clear_session(self) -> None:
        """Forget every item for good; the user's persistent memories stay."""
        await asyncio.to_thread(self._store.clear)

    def close(self) -> None:
        """Close the SessionMemory this session made (one passed in stays open)."""
        self._store.close()
