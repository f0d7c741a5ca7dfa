"""Messages, sessions and contexts, their validation and their msgpack wire format."""

from __future__ import annotations

import calendar
import datetime
import hashlib
import json
import os
import re
import struct
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from types import ModuleType
from typing import Any

from hermes_redis.core.errors import ValidationError

ROLES = ("user", "assistant", "system", "tool")
STATUSES = ("active", "archived", "deleted")
MAX_REF_CHARS = 4096  # one file path or memory id in file_refs / memory_refs
SESSION_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
MESSAGE_ID_RE = re.compile(r"[0-9a-f]{32}")
# Nesting levels (objects and arrays inside each other) an ``item`` or ``tool_calls`` may
# have, on every door (library, HTTP, MCP): deeper is a ValidationError (issue 35).
MAX_JSON_DEPTH = 64

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


def user_namespace(user_id: str) -> str:
    """The prefix of the session ids a user's API key chooses (issue 35): ``u``, 12 hex
    digits of the user id's SHA-256, ``-``."""
    return "u" + hashlib.sha256(user_id.encode("utf-8", "surrogatepass")).hexdigest()[:12] + "-"


def scoped_session_id(user_id: str, session_id: object) -> str:
    """The id a session chosen as ``session_id`` by ``user_id``'s API key gets: in that
    user's namespace (``user_namespace``), so what one user asks for never meets another
    user's ids and its answer says nothing of them (no existence oracle). An id already in
    the namespace is kept, so an id the server returned can be asked for again."""
    sid = check_session_id(session_id)
    prefix = user_namespace(user_id)
    if sid.startswith(prefix):
        return sid
    if len(prefix) + len(sid) > 64:
        raise ValidationError(f"session id {sid[:80]!r} is {len(sid)} characters: an API key's "
                              f"own ids get a {len(prefix)}-character prefix, so use at most "
                              f"{64 - len(prefix)}")
    return prefix + sid


def check_message_id(message_id: object) -> str:
    """Caller-supplied ids must have the shape ``new_message_id()`` gives (32 hex digits):
    the append script finds a retried message by it at a fixed offset."""
    if not isinstance(message_id, str) or not MESSAGE_ID_RE.fullmatch(message_id):
        raise ValidationError(
            f"invalid message_id {repr(message_id)[:80]}: use hermes_redis.core.models.new_message_id()"
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
    if not content or content.isspace():  # not content.strip(): that copies the text
        raise ValidationError("content is empty: send at least one non-blank character")
    if content.isascii():  # a flag CPython keeps: one byte a character, no surrogate
        size = len(content)
    else:
        try:
            size = len(content.encode("utf-8"))
        except UnicodeEncodeError:
            raise ValidationError("content is not valid UTF-8 (lone surrogate): send text") from None
    if size > max_bytes:
        raise ValidationError(
            f"content is {size} bytes, over the limit of {max_bytes} (limits.max_content_bytes)"
        )
    return content


def check_json_depth(value: object, name: str, limit: int = MAX_JSON_DEPTH) -> None:
    """A ValidationError naming ``name`` when ``value`` nests more than ``limit`` objects and
    arrays inside each other. Iterative: any depth is checked without recursion."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[object] = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > limit:
            raise ValidationError(f"{name} nests deeper than {limit} levels of objects and "
                                  "arrays: flatten it")
        stack.extend((child, depth + 1) for child in children)


def check_tool_calls(tool_calls: object) -> str:
    """Tool calls are stored as JSON text; accept a JSON string or JSON-able list/dict, at
    most MAX_JSON_DEPTH levels deep."""
    if tool_calls is None or tool_calls == "":
        return ""
    if isinstance(tool_calls, str):
        try:
            parsed = json.loads(tool_calls)
        except json.JSONDecodeError as err:
            raise ValidationError(f"tool_calls is not valid JSON ({err.msg}): pass a list") from None
        except RecursionError:  # deeper than Python's stack: far past the limit
            raise ValidationError(f"tool_calls nests deeper than {MAX_JSON_DEPTH} levels of "
                                  "objects and arrays: flatten it") from None
    else:
        parsed = tool_calls
    if not isinstance(parsed, list | dict):
        raise ValidationError("tool_calls must be a JSON list (or object) of tool calls")
    check_json_depth(parsed, "tool_calls")
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
    for i, ref in enumerate(refs):
        if len(ref) > MAX_REF_CHARS:
            raise ValidationError(f"{name}[{i}] is over {MAX_REF_CHARS} characters: "
                                  "refer to it by a shorter name")
        check_text(ref, f"{name}[{i}]", MAX_REF_CHARS)
    return tuple(refs)


def _msgpack() -> ModuleType:
    """msgpack, imported on first use (issue 29): the HTTP client, which never packs a
    message for Redis, imports these models without it."""
    import msgpack

    return msgpack


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

    @classmethod
    def new(cls, session_id: str, seq: int, role: str, content: str, token_count: int,
            message_id: str, tool_calls: str, file_refs: tuple[str, ...],
            memory_refs: tuple[str, ...], created_at: float, item_json: str) -> Message:
        """A Message of fields already checked, every one given: the append and read paths'
        constructor (a frozen dataclass's ``__init__`` sets each field through
        ``object.__setattr__``, 3× the cost)."""
        msg = object.__new__(cls)
        msg.__dict__.update(session_id=session_id, seq=seq, role=role, content=content,
                            token_count=token_count, message_id=message_id,
                            tool_calls=tool_calls, file_refs=file_refs, memory_refs=memory_refs,
                            created_at=created_at, item_json=item_json)
        return msg

    def with_seq(self, seq: int) -> Message:
        """This message with the seq the append script gave it (``dataclasses.replace``
        re-runs ``__init__``: 7× the cost)."""
        msg = object.__new__(Message)
        msg.__dict__.update(self.__dict__, seq=seq)
        return msg

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
        return header + struct.pack(">Q", self.seq) + _msgpack().packb(fields_)[1:]

    @classmethod
    def unpack(cls, session_id: str, raw: bytes) -> Message:
        fields_ = _msgpack().unpackb(raw, raw=False)
        if not isinstance(fields_, list) or not fields_ or (fields_[0], len(fields_)) not in (
                (WIRE_VERSION, 10), (WIRE_VERSION_ITEM, 11)):
            raise ValueError(f"unknown wire version in {raw[:12]!r}")
        item_json = fields_.pop() if fields_[0] == WIRE_VERSION_ITEM else ""
        _, seq, mid, role, content, tokens, tool_calls, file_refs, memory_refs, created = fields_
        return cls.new(session_id, seq, role, content, tokens, mid, tool_calls, tuple(file_refs),
                       tuple(memory_refs), created, item_json)

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


@dataclass(frozen=True)
class SessionMeta:
    """A session's record: the hot tier's meta hash, typed. The only place its fields are
    named (the Lua scripts read the hash by the same names). ``last_seq`` is the highest seq
    given out, ``flushed_seq`` the highest the archive holds, ``summary_seq`` the highest the
    summary covers and ``cleared_seq`` where the last ``/clear`` left the context."""

    user_id: str
    title: str = ""
    created_at: float = 0.0
    updated_at: float = 0.0
    total_tokens: int = 0
    message_count: int = 0
    status: str = "active"
    summary: str = ""
    summary_seq: int = 0
    last_seq: int = 0
    flushed_seq: int = 0
    cleared_seq: int = 0
    forgets: int = 0  # bumped by every forget: compaction's compare-and-set (owned by the scripts)
    parent_session_id: str = ""  # issue 30: the session this one continues or forks ("": none)
    forked_at_seq: int = 0  # issue 30: a fork's copy holds the parent's history up to this seq

    @classmethod
    def new(cls, user_id: str, title: str, now: float) -> SessionMeta:
        return cls(user_id=user_id, title=title, created_at=now, updated_at=now)

    @classmethod
    def from_hash(cls, raw: Mapping[str, str]) -> SessionMeta:
        """From the stored hash (text values); fields it lacks take their defaults, fields it
        has beyond these (the scripts' own bookkeeping) are ignored."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            text = raw.get(f.name)
            if text is None or text == "":
                continue
            values[f.name] = (text if f.type == "str" else
                              float(text) if f.type == "float" else int(text))
        values.setdefault("user_id", "")
        return cls(**values)

    def to_hash(self) -> dict[str, str]:
        """The hash to store (``forgets`` left to the scripts that count forgets)."""
        return _hash_fields({f.name: getattr(self, f.name) for f in fields(self)
                             if f.name != "forgets"})

    @staticmethod
    def changes(**values: str | int | float) -> dict[str, str]:
        """Some fields as hash text, for an in-place update; an unknown name is a TypeError."""
        unknown = set(values) - _META_FIELDS
        if unknown:
            raise TypeError(f"SessionMeta has no field {sorted(unknown)[0]!r}")
        return _hash_fields(values)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> SessionMeta:
        """From an archive ``sessions`` row: everything it counts is archived."""
        last = int(row.get("last_seq") or 0)
        return cls(
            user_id=row.get("user_id") or "", title=row.get("title") or "",
            created_at=parse_ts(row.get("created_at")), updated_at=parse_ts(row.get("updated_at")),
            total_tokens=int(row.get("total_tokens") or 0),
            message_count=int(row.get("message_count") or 0),
            status=row.get("status") or "active", summary=row.get("summary") or "",
            summary_seq=int(row.get("summary_seq") or 0), last_seq=last, flushed_seq=last,
            cleared_seq=int(row.get("cleared_seq") or 0),
            parent_session_id=row.get("parent_session_id") or "",
            forked_at_seq=int(row.get("forked_at_seq") or 0),
        )

    def to_row(self, sid: str) -> dict[str, Any]:
        """The archive ``sessions`` row (its counters are recounted from the messages)."""
        return {"session_id": sid, "user_id": self.user_id, "title": self.title,
                "created_at": self.created_at, "updated_at": self.updated_at,
                "status": self.status, "summary": self.summary, "summary_seq": self.summary_seq,
                "last_seq": self.last_seq, "cleared_seq": self.cleared_seq,
                "parent_session_id": self.parent_session_id or None,
                "forked_at_seq": self.forked_at_seq or None}

    @property
    def backlog(self) -> int:
        """Messages appended but not yet archived."""
        return max(0, self.last_seq - self.flushed_seq)


META_FIELDS = tuple(f.name for f in fields(SessionMeta))  # what a reader asks the hash for
_META_FIELDS = frozenset(META_FIELDS)


def _hash_fields(values: Mapping[str, str | int | float]) -> dict[str, str]:
    return {k: repr(float(v)) if isinstance(v, float) else str(v) for k, v in values.items()}


def parse_ts(value: str | float | datetime.datetime | None) -> float:
    """Unix seconds from an archive timestamp: 'YYYY-MM-DD HH:MM:SS[.ffffff]' UTC text (what
    SQLite's CURRENT_TIMESTAMP writes), a datetime, or a number."""
    if value is None:
        return 0.0
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return round(value.timestamp(), 6)
    base, _, frac = value.partition(".")
    try:  # sliced by hand: time.strptime costs ~30 µs a row, and a context reads hundreds
        parts: tuple[int, ...] = (int(base[0:4]), int(base[5:7]), int(base[8:10]),
                                  int(base[11:13]), int(base[14:16]), int(base[17:19]))
    except ValueError:
        parts = tuple(time.strptime(base, "%Y-%m-%d %H:%M:%S")[:6])
    seconds = calendar.timegm((*parts, 0, 0, 0))
    return round(seconds + (int(frac.ljust(6, "0")[:6]) / 1_000_000 if frac else 0.0), 6)


MEMORY_KINDS = ("explicit", "trigger", "extracted")


@dataclass(frozen=True)
class Memory:
    """A persistent memory of one user. ``kind``: ``explicit`` (``remember``, ``/remember``),
    ``trigger`` (plain words such as "记住：…" in a message) or ``extracted`` (found by a
    worker after a flush). ``session_id``/``seq`` say where it was said (``seq`` None for an
    explicit one). ``superseded_by`` names the newer memory on the same topic that replaced
    it (None: current); superseded memories are history, never put in a context."""

    memory_id: str
    user_id: str
    content: str
    created_at: float
    session_id: str | None = None
    seq: int | None = None
    kind: str = "explicit"
    topic: str | None = None
    superseded_by: str | None = None
    token_count: int = 0

    @property
    def current(self) -> bool:
        return self.superseded_by is None

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "current": self.current}


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
    parent_session_id: str | None = None  # issue 30: continued or forked from (None: neither)
    forked_at_seq: int | None = None  # a fork: the parent's seq its copy ends at (None: no fork)

    @classmethod
    def of(cls, sid: str, meta: SessionMeta, *, hot_count: int = 0, archived_count: int = 0,
           ttl_left: int | None = None, tier: str = "hot") -> SessionInfo:
        return cls(
            session_id=sid, user_id=meta.user_id, title=meta.title, created_at=meta.created_at,
            updated_at=meta.updated_at, total_tokens=meta.total_tokens,
            message_count=meta.message_count, status=meta.status, summary=meta.summary,
            summary_seq=meta.summary_seq, last_seq=meta.last_seq, flushed_seq=meta.flushed_seq,
            hot_count=hot_count, archived_count=archived_count, ttl_left=ttl_left, tier=tier,
            parent_session_id=meta.parent_session_id or None,
            forked_at_seq=meta.forked_at_seq or None,
        )

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
    """What goes to the model, in order: memories, the opening turns, the summary, then the
    verbatim turns from ``first_seq`` on with the recalled excerpts just before the newest
    turn (``as_chat``). ``tokens`` counts all of it and never exceeds ``budget``.

    ``parts``: the tokens of each part (``PARTS``), adding up to ``tokens``. How current it
    is: the background steps have run up to ``archived_through`` (the archive holds every
    seq up to it), ``summarized_through`` (the summary covers up to it) and
    ``extracted_through`` (memories were looked for in every seq up to it; 0 with extraction
    off). Every acknowledged append is in the context whatever their values: they say what
    the workers have done, not what the context holds. ``whole``: ``messages`` are every
    message since the last clear (the session fits)."""

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
    parts: dict[str, int] = field(default_factory=dict)
    archived_through: int = 0
    summarized_through: int = 0
    extracted_through: int = 0
    whole: bool = False  # every message since the last clear, verbatim: the session fits

    @property
    def usage(self) -> float:
        return self.tokens / self.window if self.window else 0.0

    @property
    def turn_start(self) -> int:
        """Index in ``messages`` of the newest turn's first message (its user message)."""
        return next((i for i in range(len(self.messages) - 1, -1, -1)
                     if self.messages[i].role == "user"), 0)

    def as_chat(self) -> list[dict[str, str]]:
        """OpenAI-style chat messages, ready to send: memories, opening, summary (the stable
        prefix: it changes only when they do), the older verbatim turns, the excerpts
        recalled for the question, then the newest turn."""
        chat: list[dict[str, str]] = []
        if self.memories:
            chat.append({"role": "system", "content": memories_text(self.memories)})
        chat.extend({"role": m.role, "content": m.content} for m in self.opening)
        if self.summary:
            chat.append({"role": "system", "content": summary_text(self.summary)})
        turn = self.turn_start
        chat.extend({"role": m.role, "content": m.content} for m in self.messages[:turn])
        if self.recalled:
            chat.append({"role": "system", "content": recalled_text(self.recalled)})
        chat.extend({"role": m.role, "content": m.content} for m in self.messages[turn:])
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
            "parts": dict(self.parts),
            "archived_through": self.archived_through,
            "summarized_through": self.summarized_through,
            "extracted_through": self.extracted_through,
            "whole": self.whole,
        }

    def prefix_text(self) -> str:
        """Everything before the newest turns, as ``as_chat`` sends it (memories, opening,
        summary): what a provider's prompt cache can reuse while it is unchanged."""
        head = (1 if self.memories else 0) + len(self.opening) + (1 if self.summary else 0)
        return "\n\n".join(f"{c['role']}: {c['content']}" for c in self.as_chat()[:head])


PARTS = ("memories", "opening", "summary", "recalled", "newest")  # Context.parts, in order


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


@dataclass(frozen=True)
class SearchHit:
    session_id: str
    seq: int
    role: str
    snippet: str
    title: str
    score: float
    tier: str = "archive"

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class CompactResult:
    """What a compaction did: the seq the summary now reaches, messages trimmed from the hot
    list, the summary's tokens and the messages kept verbatim."""

    summarized_upto: int
    trimmed: int
    summary_tokens: int
    kept: int


def short_ids(shown: Sequence[str], every: Sequence[str], minimum: int = 8) -> dict[str, str]:
    """The shortest prefix (at least ``minimum`` long) of each id that no other id shares."""
    ordered = sorted(set(every) | set(shown))
    at = {sid: i for i, sid in enumerate(ordered)}
    out = {}
    for sid in shown:
        i = at[sid]
        need = minimum
        for j in (i - 1, i + 1):
            if 0 <= j < len(ordered):
                other = ordered[j]
                common = next((k for k, (a, b) in enumerate(zip(sid, other, strict=False))
                               if a != b), min(len(sid), len(other)))
                need = max(need, common + 1)
        out[sid] = sid[:need]
    return out
