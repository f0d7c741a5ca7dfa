"""``HermesChatMessageHistory``: langchain-core's ``BaseChatMessageHistory`` over hermes-redis.

    from hermes_redis.integrations.langchain import HermesChatMessageHistory

    history = HermesChatMessageHistory("user-42-chat")
    history.add_messages([HumanMessage("hi"), AIMessage("hello!")])
    history.messages   # [HumanMessage('hi'), AIMessage('hello!')]

Each message is stored with ``messages_to_dict`` in its ``item`` and read back with
``messages_from_dict``, so every type and field comes back equal (tool calls, ids, metadata).
Roles: human -> user, ai -> assistant, system -> system, tool and function -> tool, a
``ChatMessage`` by its role (user/assistant/system, else assistant). A message stored without
an item (appended by other means) comes back as the matching Human/AI/System/ToolMessage.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from hermes_redis.integrations import Memory, Store
from hermes_redis.models import Message

try:
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        HumanMessage,
        SystemMessage,
        messages_from_dict,
        messages_to_dict,
    )
except ImportError as err:  # pragma: no cover - the extra is not installed
    raise ImportError("hermes_redis.integrations.langchain needs langchain-core: "
                      "pip install 'hermes-redis[langchain]'") from err

KINDS = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool", "function": "tool",
         "HumanMessageChunk": "user", "AIMessageChunk": "assistant", "SystemMessageChunk": "system",
         "ToolMessageChunk": "tool", "FunctionMessageChunk": "tool"}
CHAT_ROLES = {"user": "user", "human": "user", "assistant": "assistant", "ai": "assistant",
              "system": "system"}


def role_of(stored: dict[str, Any]) -> str:
    """The hermes role a ``messages_to_dict`` entry is stored under."""
    kind = str(stored.get("type", ""))
    if kind in ("chat", "ChatMessageChunk"):
        return CHAT_ROLES.get(str(stored.get("data", {}).get("role", "")), "assistant")
    return KINDS.get(kind, "assistant")


def message_of(m: Message) -> BaseMessage:
    if m.item_json:
        return messages_from_dict([m.item])[0]
    cls = {"user": HumanMessage, "system": SystemMessage}.get(m.role, AIMessage)
    return cls(content=m.content)


class HermesChatMessageHistory(BaseChatMessageHistory):
    """A LangChain chat history kept in hermes-redis. ``memory``: a SessionMemory or
    HermesClient (default: ``SessionMemory.from_config()``, closed by ``close()``);
    ``user_id``: the owner of a session this creates."""

    def __init__(self, session_id: str, memory: Memory | None = None, *,
                 user_id: str = "default") -> None:
        self._store = Store(session_id, memory, user_id)
        self.session_id = self._store.session_id
        self.memory = self._store.memory

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """Every stored message, oldest first, as the LangChain objects that were added."""
        return [message_of(m) for m in self._store.messages()]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Store ``messages`` in order (up to 1,000 at a time in one atomic step)."""
        if not messages:
            return
        stored = messages_to_dict(list(messages))
        self._store.add([{"role": role_of(s), "content": "", "item": s} for s in stored])

    def clear(self) -> None:
        """Forget every message for good; the user's persistent memories stay."""
        self._store.clear()

    async def aget_messages(self) -> list[BaseMessage]:
        return await asyncio.to_thread(lambda: self.messages)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        await asyncio.to_thread(self.add_messages, messages)

    async def aclear(self) -> None:
        await asyncio.to_thread(self.clear)

    def close(self) -> None:
        """Close the SessionMemory this history made (one passed in stays open)."""
        self._store.close()
