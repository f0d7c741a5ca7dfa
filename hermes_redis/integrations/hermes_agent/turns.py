"""Hermes Agent's OpenAI-format messages as hermes-redis rows, and back.

A Hermes message is stored whole (role, content, tool calls, the call it answers) in the
row's ``item`` with the id ``ids.Occurrences`` gives it, so the provider's writes, its
retries and a later ``state.db`` import store each message once. What Hermes adds to a
message for one request only (the provider's ``<memory-context>`` block, the engine's
context message) is never stored."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hermes_redis.core.models import Message
from hermes_redis.integrations.hermes_agent.ids import Occurrences

CONTEXT_MARK = "[hermes-redis context]"  # opens the message the engine puts in its place
KEPT = ("role", "content", "tool_calls", "tool_call_id", "name")
ROLES = ("user", "assistant", "tool")
_FENCE = re.compile(r"\s*<memory-context>.*?</memory-context>\s*", re.S)


def clean(message: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a Hermes message a model request needs, without a prefetch block."""
    out = {k: message[k] for k in KEPT if message.get(k) is not None}
    if isinstance(out.get("content"), str):
        out["content"] = _FENCE.sub("\n\n", out["content"]).strip()
    return out


def is_context(message: Mapping[str, Any]) -> bool:
    """The engine's own context message (never stored: it is rebuilt on every compression)."""
    content = message.get("content")
    return isinstance(content, str) and content.startswith(CONTEXT_MARK)


def conversation(messages: Iterable[Any]) -> list[dict[str, Any]]:
    """The stored part of Hermes' list: its user, assistant and tool messages, cleaned, in
    order (no system prompt, no context message of ours)."""
    return [clean(m) for m in messages
            if isinstance(m, Mapping) and m.get("role") in ROLES and not is_context(m)]


def rows(namespace: str, convo: Sequence[Mapping[str, Any]], start: int = 0) -> list[dict[str, Any]]:
    """``convo[start:]`` as append_many rows, with ids counted over the whole ``convo``."""
    seen = Occurrences(namespace)
    out = []
    for i, m in enumerate(convo):
        mid = seen.id_for(str(m["role"]), m.get("content"), m.get("tool_call_id"),
                          m.get("tool_calls"))
        if i >= start:
            out.append(row_of(m, mid))
    return out


def row_of(m: Mapping[str, Any], message_id: str) -> dict[str, Any]:
    """One Hermes message as an append_many row: whole in its item, its text as content."""
    row: dict[str, Any] = {"role": m["role"], "item": dict(m), "message_id": message_id}
    text = m.get("content") if isinstance(m.get("content"), str) else ""
    if not text and m.get("tool_calls"):
        text = calls_text(m["tool_calls"])
    if text:
        row["content"] = text  # else the item's rendering (multimodal parts)
    return row


def parsed_calls(calls: Any) -> list[Any]:
    """A message's tool calls as a list, whether Hermes held them parsed or as JSON text
    ([] for none or for text that is not a JSON list)."""
    if isinstance(calls, str):
        try:
            calls = json.loads(calls)
        except ValueError:
            return []
    return calls if isinstance(calls, list) else []


def calls_text(calls: Any) -> str:
    """What a tool-call message says, for search and summaries: ``name(arguments)`` each."""
    if isinstance(calls, str):
        try:
            calls = json.loads(calls)
        except ValueError:
            return calls[:500]  # not JSON: its text as it is
    said = []
    for call in parsed_calls(calls):
        fn = call.get("function", {}) if isinstance(call, Mapping) else {}
        if isinstance(fn, Mapping):
            said.append(f"{fn.get('name', 'tool')}({str(fn.get('arguments', ''))[:300]})")
    return "called " + ", ".join(said) if said else ""


def turn_start(convo: Sequence[Mapping[str, Any]]) -> int:
    """Where the newest turn begins: the index of the newest user message (0: none)."""
    for i in range(len(convo) - 1, -1, -1):
        if convo[i].get("role") == "user":
            return i
    return 0


def chat_of(m: Message) -> dict[str, Any]:
    """The OpenAI message a stored message stands for: the Hermes message stored, else its
    text under its role (a message of another door; a tool result without its call id is
    handed over as assistant text, which every model API accepts)."""
    if m.item_json:
        item = m.item
        if isinstance(item, dict) and item.get("role") in ROLES:
            if item.get("role") != "user" and m.content and isinstance(item.get("content"), str) \
                    and len(item["content"]) > len(m.content) + 16:
                return {**item, "content": m.content}  # the context holds a cut of it
            return dict(item)
    role = m.role if m.role in ("user", "assistant") else "assistant"
    return {"role": role, "content": m.content}


def links(message: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    """(tool call ids ``message`` makes, the one it answers)."""
    made = {str(call["id"]) for call in parsed_calls(message.get("tool_calls"))
            if isinstance(call, Mapping) and call.get("id")}
    answered = {str(message["tool_call_id"])} if message.get("role") == "tool" and \
        message.get("tool_call_id") else set()
    return made, answered
