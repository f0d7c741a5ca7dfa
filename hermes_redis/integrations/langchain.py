"""``HermesChatMessageHistory``: langchain-core's ``BaseChatMessageHistory`` over hermes-redis.

    from hermes_redis.integrations.langchain import HermesChatMessageHistory

    history = HermesChatMessageHistory("user-42-chat")
    history.add_messages([HumanMessage("hi"), AIMessage("hello!")])
    history.messages   # [HumanMessage('hi'), AIMessage('hello!')]

Each message is stored with ``messages_to_dict`` in its ``item`` and read back with
``messages_from_dict``, so every type and field comes back equal (tool calls, ids, metadata).
Roles: human -> user, ai -> assistant, system -> system, tool and function -> tool, a
``ChatMessage`` by its role (user/assistant/system, else assistant).

``messages`` is the session's context at ``budget`` (None: the configured window less the
reply reserve): while the session fits, every stored message as added; past that, a
``SystemMessage`` (memories, opening, summary, dated recalled excerpts) and then the newest
messages as added, an AI tool call never apart from its ``ToolMessage``. ``raw=True`` gives
every stored message. A message of another door (no item, or an item of another shape: an
OpenAI Agents SDK item…) comes back as its text under its role: Human, AI or SystemMessage
(a tool result as an AIMessage: a ToolMessage needs the id of a call).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from hermes_redis.core.api import SessionAPI
from hermes_redis.core.items import render
from hermes_redis.core.models import Message
from hermes_redis.integrations import Store, Window, was_cut, window

try:
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
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


def is_langchain_item(item: Any) -> bool:
    """A ``messages_to_dict`` entry: a known type and its ``data`` with the content."""
    return isinstance(item, dict) and (item.get("type") in KINDS or item.get("type") in (
        "chat", "ChatMessageChunk")) and isinstance(item.get("data"), dict) and \
        "content" in item["data"]


def text_message(m: Message) -> BaseMessage:
    """A message as its text under its role."""
    cls = {"user": HumanMessage, "system": SystemMessage}.get(m.role, AIMessage)
    return cls(content=m.content)


def message_of(m: Message) -> BaseMessage:
    """The LangChain message a stored message stands for: the one added, or its text under
    its role for a message of another door."""
    if m.item_json:
        item = m.item
        if is_langchain_item(item):
            try:
                return messages_from_dict([item])[0]
            except (KeyError, TypeError, ValueError):  # a look-alike of another shape
                pass
    return text_message(m)


def budgeted_message(m: Message) -> BaseMessage:
    """``message_of``, unless the context holds a cut of it (a tool result over its cap, a
    newest turn cut to the budget): then with the cut text as its content."""
    message = message_of(m)
    if not m.item_json or not is_langchain_item(m.item) or \
            not was_cut(m, render(m.item, 1 << 30)):
        return message
    return message.model_copy(update={"content": m.content})


def links(message: Any) -> tuple[set[str], set[str]]:
    """(tool call ids ``message`` makes, the one it answers)."""
    if isinstance(message, ToolMessage):
        return set(), {message.tool_call_id}
    if isinstance(message, AIMessage) and message.tool_calls:
        return {str(c.get("id")) for c in message.tool_calls if c.get("id")}, set()
    return set(), set()


class HermesChatMessageHistory(BaseChatMessageHistory):
    """A LangChain chat history kept in hermes-redis. ``memory``: a SessionMemory or
    HermesClient (default: ``SessionMemory.from_config()``, closed by ``close()``);
    ``user_id``: the owner of a session this creates; ``budget``, ``raw`` and ``query``: what
    ``messages`` hands over (the module docstring)."""

    def __init__(self, session_id: str, memory: SessionAPI | None = None, *,
                 user_id: str = "default", budget: int | None = None, raw: bool = False,
                 query: str | None = None) -> None:
        self._store = Store(session_id, memory, user_id, budget)
        self.session_id = self._store.session_id
        self.memory = self._store.memory
        self.budget, self.raw, self.query = budget, raw, query

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The context at ``budget`` (see the module docstring), oldest first; with ``raw``,
        every stored message."""
        if self.raw:
            return [message_of(m) for m in self._store.messages()]
        got = self.window(self.query)
        if got is None:
            return []
        newest = [message for _, message in got.newest]
        return [SystemMessage(got.system), *newest] if got.system else newest

    def window(self, query: str | None = None) -> Window | None:
        """The budgeted context as LangChain messages (None: no session yet); ``query``:
        what older messages are recalled for (None: the newest user message)."""
        return window(self._store, budgeted_message, links, query)

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
