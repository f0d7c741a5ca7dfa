"""What an append takes: the fields of each message, checked before anything is stored.

The one owner of these checks: ``SessionMemory.append``/``append_many`` call them, and the
HTTP server calls ``check_message_fields`` before ``append(sid, **body)``. A bad message is
one ``ValidationError`` naming it (``messages[i]`` in a batch), and nothing is stored."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hermes_redis.core.errors import ValidationError
from hermes_redis.core.items import check_item, render
from hermes_redis.core.models import (
    check_content,
    check_created_at,
    check_message_id,
    check_refs,
    check_role,
    check_tool_calls,
)

MAX_BATCH = 1000  # messages in one append_many call
MESSAGE_FIELDS = frozenset(
    ("role", "content", "tool_calls", "file_refs", "memory_refs", "message_id", "created_at",
     "item"))
_PLAIN = frozenset(("role", "content"))  # a message with no options: what check_message skips
_NO_EXTRAS = {  # what the checks make of the options left out
    "item": check_item(None, 0), "tool_calls": check_tool_calls(None),
    "file_refs": check_refs(None, "file_refs"), "memory_refs": check_refs(None, "memory_refs"),
    "message_id": None, "created_at": check_created_at(None)}


def check_message_fields(item: Mapping[str, Any]) -> None:
    """Refuses a message with a field ``append`` does not take, naming it."""
    unknown = set(item) - MESSAGE_FIELDS
    if unknown:
        raise ValidationError(f"unknown field {sorted(unknown)[0]!r}: use "
                              + ", ".join(sorted(MESSAGE_FIELDS)))


def check_batch(messages: object) -> Sequence[Mapping[str, Any]]:
    """``append_many``'s list: a non-empty sequence of at most ``MAX_BATCH`` messages."""
    if not isinstance(messages, Sequence) or isinstance(messages, str | bytes):
        raise ValidationError("messages must be a list of message objects")
    if not messages:
        raise ValidationError("messages is empty: send at least one message")
    if len(messages) > MAX_BATCH:
        raise ValidationError(f"{len(messages)} messages in one call, over the limit of "
                              f"{MAX_BATCH}: split the batch")
    return messages


def check_messages(items: Sequence[Mapping[str, Any]], limit: int,
                   one: bool) -> list[dict[str, Any]]:
    """Each message's fields, checked (content up to ``limit`` bytes); no two may share a
    ``message_id``. ``one``: a single append, whose errors need no index."""
    checked = [check_message(item, i, limit, one) for i, item in enumerate(items)]
    ids = [c["message_id"] for c in checked if c["message_id"] is not None]
    if len(set(ids)) != len(ids):
        raise ValidationError("two messages share one message_id: give each its own")
    return checked


def check_message(item: Mapping[str, Any], i: int, limit: int, one: bool) -> dict[str, Any]:
    """One message's fields, checked; errors name the item (``messages[i]``) unless ``one``.
    An ``item`` with no content gets its rendering as the content."""
    try:
        if type(item) is dict and item.keys() == _PLAIN:  # most messages: no options to check
            return {"role": check_role(item["role"]),
                    "content": check_content(item["content"], limit), **_NO_EXTRAS}
        if not isinstance(item, Mapping):
            raise ValidationError("a message is an object with role and content, "
                                  f"not {type(item).__name__}")
        check_message_fields(item)
        message_id = item.get("message_id")
        payload = check_item(item.get("item"), limit)
        content = item.get("content")
        if payload and (content is None or content == ""):
            content = render(item.get("item"), limit // 4)  # ≤ 4 bytes a character
        return {
            "role": check_role(item.get("role")),
            "content": check_content(content, limit),
            "item": payload,
            "tool_calls": check_tool_calls(item.get("tool_calls")),
            "file_refs": check_refs(item.get("file_refs"), "file_refs"),
            "memory_refs": check_refs(item.get("memory_refs"), "memory_refs"),
            "message_id": None if message_id is None else check_message_id(message_id),
            "created_at": check_created_at(item.get("created_at")),
        }
    except ValidationError as err:
        if one:
            raise
        raise ValidationError(f"messages[{i}]: {err}") from None
