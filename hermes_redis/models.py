"""Messages, sessions and contexts, their validation and their msgpack wire format."""

from __future__ import annotations

import datetime
import json
import os
import re
import struct
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgpack

from hermes_redis.errors import ValidationError

ROLES = ("user", "assistant", "system", "tool")
STATUSES = ("active", "archived", "deleted")
SESSION_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
MESSAGE_ID_RE = re.compile(r"[0-9a-f]{32}")

WIRE_VERSION = 1
# Wire layout v1: fixarray(10) | version | uint64 seq | message_id | role | content |
# token_count | tool_calls (JSON text, "" for none) | file_refs | memory_refs | created_at.
# v2 (a message with an ``item``): fixarray(11), the same ten then item (JSON text).
# A message without an item is still written as v1, so v1 readers keep reading it.
# seq sits at a fixed offset (bytes 4..11, 1-based) so the append script can stamp it
# without decoding the message; the scripts accept both headers.
WIRE_VERSION_ITEM = 2
_HEADER = b"\x9a" + bytes([WIRE_VERSION]) + b"\xcf"
_HEADER_ITEM = b"\x9b" + bytes([WIRE_VERSION_ITEM]) + b"\xcf"
SEQ_OFFSET = len(_HEADER)


def new_message_id() -> str:
    """Time-ordered and globally unique: 48-bit milliseconds then 80 random bits, as hex."""
    millis = time.time_ns() // 1_000_000
    return f"{millis:012x}{os.urandom(10).hex()}"


def new_session_id() -> str:
    """Random, so a short prefix is enough to name a session on the command line."""
    return uuid.uuid4().hex


def check_session_id(session_id: object) -> str:
    if not isinstance(session_id, str) or not SESSION_ID_RE.fullmatch(session_id):
        shown = repr(session_id)[:80]
        raise ValidationError(
            f"invalid session id {shown}: use 1-64 characters of letters, digits, '_' or '-'"
        )
    return session_id


def check_message_id(message_id: object) -> str:
    """Caller-supplied ids must have the shape ``new_message_id()`` gives (32 hex digits):
    the append script finds a retried message by it at a fixed offset."""
    if not isinstance(message_id, str) or not MESSAGE_ID_RE.fullmatch(message_id):
        raise ValidationError(
            f"invalid message_id {repr(message_id)[:80]}: use hermes_redis.models.new_message_id()"
        )
    return message_id


def check_role(role: object) -> str:
    if role not in ROLES:
        raise ValidationError(f"unknown role {role!r}: use one of {', '.join(ROLES)}")
    return str(role)


def check_content(content: object, max_bytes: int) -> str:
    if isinstance(content, bytes):
        try:
            content = content.decode("utf-8")
        except UnicodeDecodeError:
            raise ValidationError("content is not valid UTF-8: send text") from None
    if not isinstance(content, str):
        raise ValidationError(f"content must be text, not {type(content).__name__}")
    if not content.strip():
        raise ValidationError("content is empty: send at least one non-blank character")
    try:
        size = len(content.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValidationError("content is not valid UTF-8 (lone surrogate): send text") from None
    if size > max_bytes:
        raise ValidationError(
            f"content is {size} bytes, over the limit of {max_bytes} (limits.max_content_bytes)"
        )
    return content


def check_tool_calls(tool_calls: object) -> str:
    """Tool calls are stored as JSON text; accept a JSON string or JSON-able list/dict."""
    if tool_calls is None or tool_calls == "":
        return ""
    if isinstance(tool_calls, str):
        try:
            parsed = json.loads(tool_calls)
        except json.JSONDecodeError as err:
            raise ValidationError(f"tool_calls is not valid JSON ({err.msg}): pass a list") from None
    else:
        parsed = tool_calls
    if not isinstance(parsed, list | dict):
        raise ValidationError("tool_calls must be a JSON list (or object) of tool calls")
    try:
        text = json.dumps(parsed, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        text.encode("utf-8")
    except ValueError as err:  # NaN/Infinity (not JSON), or a lone surrogate
        raise ValidationError(f"tool_calls cannot be stored as JSON ({err}): use finite numbers "
                              "and valid text") from None
    except TypeError as err:
        raise ValidationError(f"tool_calls cannot be stored as JSON: {err}") from None
    return text


def check_text(value: object, name: str, limit: int) -> str:
    """A short text field (a title, a query): a str of valid UTF-8 without NUL, cut to ``limit``."""
    if not isinstance(value, str):
        raise ValidationError(f"{name} must be text, not {type(value).__name__}")
    if "\x00" in value:
        raise ValidationError(f"{name} contains a NUL character: remove it")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(f"{name} is not valid UTF-8 (lone surrogate): send text") from None
    return value[:limit]


def check_created_at(value: object) -> float | None:
    """A message's time, in Unix seconds: a finite number from 1970 to 9999 (or None: now)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 253402300800:
        raise ValidationError(f"created_at must be Unix seconds (a number from 0), not {value!r}")
    return round(float(value), 6)


def check_refs(refs: object, name: str) -> tuple[str, ...]:
    if refs is None:
        return ()
    if isinstance(refs, str):
        try:
            refs = json.loads(refs)
        except json.JSONDecodeError:
            raise ValidationError(f"{name} is not valid JSON: pass a list of strings") from None
    if not isinstance(refs, list | tuple) or not all(isinstance(r, str) for r in refs):
        raise ValidationError(f"{name} must be a list of strings")
    return tuple(refs)


@dataclass(frozen=True)
class Message:
    session_id: str
    seq: int
    role: str
    content: str
    token_count: int
    message_id: str = field(default_factory=new_message_id)
    tool_calls: str = ""
    file_refs: tuple[str, ...] = ()
    memory_refs: tuple[str, ...] = ()
    created_at: float = field(default_factory=lambda: round(time.time(), 6))
    item_json: str = ""  # the caller's structured payload as JSON text ("" for none)

    @property
    def item(self) -> Any:
        """The structured payload exactly as appended (None when there is none)."""
        return json.loads(self.item_json) if self.item_json else None

    def pack(self) -> bytes:
        """The wire bytes; ``seq`` is written as a fixed-width uint64 the script can overwrite."""
        fields_: list[Any] = [
            self.message_id,
            self.role,
            self.content,
            self.token_count,
            self.tool_calls,
            list(self.file_refs),
            list(self.memory_refs),
            self.created_at,
        ]
        header = _HEADER
        if self.item_json:
            fields_.append(self.item_json)
            header = _HEADER_ITEM
        # Drop the inner array header: the items continue the outer fixarray.
        return header + struct.pack(">Q", self.seq) + msgpack.packb(fields_)[1:]

    @classmethod
    def unpack(cls, session_id: str, raw: bytes) -> Message:
        fields_ = msgpack.unpackb(raw, raw=False)
        if not isinstance(fields_, list) or not fields_ or (fields_[0], len(fields_)) not in (
                (WIRE_VERSION, 10), (WIRE_VERSION_ITEM, 11)):
            raise ValueError(f"unknown wire version in {raw[:12]!r}")
        item_json = fields_.pop() if fields_[0] == WIRE_VERSION_ITEM else ""
        _, seq, mid, role, content, tokens, tool_calls, file_refs, memory_refs, created = fields_
        return cls(
            session_id=session_id,
            seq=seq,
            role=role,
            content=content,
            token_count=tokens,
            message_id=mid,
            tool_calls=tool_calls,
            file_refs=tuple(file_refs),
            memory_refs=tuple(memory_refs),
            created_at=created,
            item_json=item_json,
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "message_id": self.message_id,
            "session_id": self.session_id,
            "seq": self.seq,
            "role": self.role,
            "content": self.content,
            "token_count": self.token_count,
            "tool_calls": json.loads(self.tool_calls) if self.tool_calls else None,
            "file_refs": list(self.file_refs),
            "memory_refs": list(self.memory_refs),
            "created_at": self.created_at,
            "item": self.item,
        }


class SessionPage(list["SessionInfo"]):
    """A page of a listing: the sessions, and ``next_cursor`` for the next page (None: last)."""

    def __init__(self, items: Iterable[SessionInfo] = (), next_cursor: str | None = None) -> None:
        super().__init__(items)
        self.next_cursor = next_cursor


@dataclass(frozen=True)
class SessionInfo:
    session_id: str
    user_id: str
    title: str
    created_at: float
    updated_at: float
    total_tokens: int
    message_count: int
    status: str
    summary: str = ""
    summary_seq: int = 0
    last_seq: int = 0
    flushed_seq: int = 0
    hot_count: int = 0
    archived_count: int = 0
    ttl_left: int | None = None
    tier: str = "hot"

    @property
    def backlog(self) -> int:
        """Messages appended but not yet archived."""
        return max(0, self.last_seq - self.flushed_seq)

    def as_dict(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["backlog"] = self.backlog
        return data


@dataclass(frozen=True)
class Context:
    """What goes to the model, in order: memories, the opening turns, the summary, recalled
    excerpts (system messages apart from the opening), then the newest turns from
    ``first_seq`` on. ``tokens`` counts all of it and never exceeds ``budget``."""

    session_id: str
    messages: tuple[Message, ...]
    summary: str
    memories: tuple[str, ...]
    tokens: int
    budget: int
    window: int
    first_seq: int
    opening: tuple[Message, ...] = ()
    recalled: tuple[Message, ...] = ()

    @property
    def usage(self) -> float:
        return self.tokens / self.window if self.window else 0.0

    def as_chat(self) -> list[dict[str, str]]:
        """OpenAI-style chat messages, ready to send."""
        chat: list[dict[str, str]] = []
        if self.memories:
            chat.append({"role": "system", "content": memories_text(self.memories)})
        chat.extend({"role": m.role, "content": m.content} for m in self.opening)
        if self.summary:
            chat.append({"role": "system", "content": summary_text(self.summary)})
        if self.recalled:
            chat.append({"role": "system", "content": recalled_text(self.recalled)})
        chat.extend({"role": m.role, "content": m.content} for m in self.messages)
        return chat

    def as_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "summary": self.summary,
            "memories": list(self.memories),
            "tokens": self.tokens,
            "budget": self.budget,
            "window": self.window,
            "usage": round(self.usage, 4),
            "first_seq": self.first_seq,
            "opening": [m.as_dict() for m in self.opening],
            "recalled": [m.as_dict() for m in self.recalled],
            "messages": [m.as_dict() for m in self.messages],
        }


def summary_text(summary: str) -> str:
    return f"Summary of the earlier conversation:\n{summary}"


def memories_text(memories: tuple[str, ...] | list[str]) -> str:
    return "Things to remember about this user:\n" + "\n".join(f"- {m}" for m in memories)


def said_on(created_at: float) -> str:
    """A message's date as people say it: '8 May 2023' (UTC)."""
    d = said_day(created_at)
    return f"{d.day} {d:%B %Y}"


def said_day(created_at: float) -> datetime.date:
    """The UTC day of ``created_at`` (today for a time no calendar holds)."""
    try:
        return datetime.datetime.fromtimestamp(created_at, datetime.UTC).date()
    except (OverflowError, OSError, ValueError):
        return datetime.datetime.now(datetime.UTC).date()


def recalled_text(messages: tuple[Message, ...] | list[Message]) -> str:
    """Older messages recalled for the question at hand, in seq order, under their dates."""
    lines = ["Earlier excerpts from this conversation, recalled as relevant:"]
    day = ""
    for m in messages:
        if (said := said_on(m.created_at)) != day:
            day = said
            lines.append(f"{day}:")
        lines.append(f"- {m.role}: {' '.join(m.content.split())}")
    return "\n".join(lines)
