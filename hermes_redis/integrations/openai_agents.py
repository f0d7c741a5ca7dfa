"""``HermesSession``: the OpenAI Agents SDK ``Session`` protocol over hermes-redis.

    from agents import Agent, Runner
    from hermes_redis.integrations.openai_agents import HermesSession

    session = HermesSession("user-42-agent", memory=SessionMemory.from_config())
    await Runner.run(agent, "What is the weather in Tokyo?", session=session,
                     run_config=session.run_config())

Each SDK item is one message, its ``item`` exactly as the SDK gave it. Roles: an item with a
``role`` keeps it (``developer`` is stored as ``system``); a tool's result
(``function_call_output`` and every other ``*_output`` type) is ``tool``; everything else the
model produced (``function_call``, ``reasoning``, hosted tool calls…) is ``assistant``.

``get_items()`` is the session's context at ``budget`` (None: the configured window less the
reply reserve): while the session fits, every stored item exactly as added; past that, one
system item (memories, opening, summary, dated recalled excerpts) and then the newest items
exactly as added, a ``function_call`` never apart from its output. ``raw=True`` or
``get_items(limit=N)`` gives the stored items as they are (all, or the newest N).
``run_config()`` (or ``model_input`` as ``call_model_input_filter``) recalls older
messages for the question being asked rather than the previous one. A message of another
door (no item, or another framework's item) comes back as ``{"role": ..., "content": ...}``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hermes_redis.core.api import SessionAPI
from hermes_redis.core.errors import ValidationError
from hermes_redis.core.items import render
from hermes_redis.core.models import Message
from hermes_redis.integrations import Store, Window, was_cut, window

try:
    from agents import RunConfig
    from agents.memory.session_settings import SessionSettings, resolve_session_limit
    from agents.run_config import CallModelData, ModelInputData
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


SDK_TYPES = frozenset(("message", "function_call", "function_call_output", "reasoning",
                       "compaction", "item_reference", "mcp_list_tools", "mcp_approval_request",
                       "mcp_approval_response", "image_generation_call", "code_interpreter_call"))


def is_sdk_item(item: Any) -> bool:
    """An item of the SDK's (Responses API input) shape: a message with a role and content,
    or a typed item (a call, its output, reasoning…); not another framework's dict."""
    if not isinstance(item, dict) or "data" in item:
        return False
    kind = item.get("type")
    if isinstance(kind, str):
        return kind in SDK_TYPES or kind.endswith(("_call", "_call_output", "_output"))
    return isinstance(item.get("role"), str) and item.get("role") in ROLES and "content" in item


def text_item(m: Message) -> dict[str, Any]:
    """A message as text under its role (a tool result as the assistant's: the SDK's plain
    messages have no tool role)."""
    return {"role": m.role if m.role in ("user", "assistant", "system") else "assistant",
            "content": m.content}


def item_of(m: Message) -> Any:
    """The SDK item a stored message stands for: its item exactly as added, or its text
    under its role for a message of another door."""
    if m.item_json:
        item = m.item
        if is_sdk_item(item):
            return item
    return text_item(m)


def budgeted_item(m: Message) -> Any:
    """``item_of``, unless the context holds a cut of it (a tool output over its cap, a
    newest turn cut to the budget): then the cut text, in the item's place."""
    item = item_of(m)
    if not m.item_json or not is_sdk_item(item) or not was_cut(m, render(item, 1 << 30)):
        return item
    if isinstance(item.get("output"), str) and "call_id" in item:
        return {**item, "output": m.content}
    if "role" in item:
        return text_item(m)
    return item  # a call: its arguments cannot be cut and stay a call


def links(item: Any) -> tuple[set[str], set[str]]:
    """(call ids ``item`` makes, call ids it answers): a ``*_call`` with a ``call_id`` and the
    ``*_call_output`` that answers it."""
    if not isinstance(item, dict) or not isinstance(item.get("call_id"), str):
        return set(), set()
    kind = str(item.get("type", ""))
    if kind.endswith("_output"):
        return set(), {item["call_id"]}
    if kind.endswith("_call"):
        return {item["call_id"]}, set()
    return set(), set()


@dataclass(frozen=True)
class _Given:
    """What the last budgeted ``get_items`` handed the SDK: its system item, how many items
    and the newest seq among them."""

    system: dict[str, str]
    count: int
    last_seq: int


class HermesSession:
    """An Agents SDK session kept in hermes-redis (the ``agents.memory.Session`` protocol).
    ``memory``: a SessionMemory or HermesClient (default: ``SessionMemory.from_config()``,
    closed by ``close()``); ``user_id``: the owner of a session this creates; ``budget``:
    the tokens ``get_items`` may hand over (None: the configured window less the reply
    reserve); ``raw``: hand over the stored items instead; ``query``: what older messages
    are recalled for (None: the newest user message)."""

    def __init__(self, session_id: str, memory: SessionAPI | None = None, *, user_id: str = "default",
                 budget: int | None = None, raw: bool = False, query: str | None = None,
                 session_settings: SessionSettings | None = None) -> None:
        self._store = Store(session_id, memory, user_id, budget)
        self.session_id = self._store.session_id
        self.memory = self._store.memory
        self.budget, self.raw, self.query = budget, raw, query
        self.session_settings = session_settings or SessionSettings()
        self._given: _Given | None = None
        self._swapped: dict[tuple[int, str], list[Any]] = {}

    def items(self, limit: int | None = None) -> list[Any]:
        """``get_items``, synchronously."""
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None and limit <= 0:
            return []
        if self.raw or limit is not None:
            return [item_of(m) for m in self._store.messages(limit)]
        got = self.window(self.query)
        if got is None:
            return []
        out = self._items(got)
        self._given = _Given(out[0], len(out), got.last_seq) if got.system else None
        return out

    def window(self, query: str | None = None, upto_seq: int | None = None) -> Window | None:
        """The budgeted context as SDK items (None: no session yet)."""
        return window(self._store, budgeted_item, links, query, upto_seq)

    @staticmethod
    def _items(got: Window) -> list[Any]:
        if not got.system:  # the whole session, or only verbatim turns fit
            return [item for _, item in got.newest]
        return [{"role": "system", "content": got.system}, *(item for _, item in got.newest)]

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The context at ``budget`` (see the module docstring); with ``limit`` (or ``raw``),
        the stored items, oldest first: the latest ``limit`` of them."""
        return await asyncio.to_thread(self.items, limit)

    def model_input(self, data: CallModelData[Any]) -> ModelInputData:
        """A ``call_model_input_filter``: before each model call, the items the last
        ``get_items`` gave are built again with older messages recalled for the question
        being asked (the newest user message of this turn, already stored by the SDK),
        within the same budget; the turn's own items are left as they are. Anything else
        (a stored-items read, a reordered input) passes through unchanged."""
        given, sent = self._given, data.model_data
        items = list(sent.input)
        if given is None or len(items) < given.count or items[0] != given.system:
            return sent
        question = next((_text(i) for i in reversed(items[given.count:])
                         if isinstance(i, dict) and i.get("role") == "user"), "")
        if not question.strip():
            return sent
        key = (given.last_seq, question)
        prefix = self._swapped.get(key)
        if prefix is None:
            got = self.window(question, upto_seq=given.last_seq)
            if got is None or not got.system:
                return sent
            prefix = self._items(got)
            self._swapped = {key: prefix}  # one turn's: the next get_items starts afresh
        return ModelInputData(input=[*prefix, *items[given.count:]], instructions=sent.instructions)

    def run_config(self, **options: Any) -> RunConfig:
        """A ``RunConfig`` (with ``options``) whose ``call_model_input_filter`` is
        ``model_input``."""
        return RunConfig(call_model_input_filter=self.model_input, **options)

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


def _text(item: Mapping[str, Any]) -> str:
    """The text of a user input item: its content, or its ``input_text`` parts."""
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict)
                        and isinstance(p.get("text"), str))
    return json.dumps(content, ensure_ascii=False) if content is not None else ""
