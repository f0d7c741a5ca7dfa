"""The HTTP API's shapes, as OpenAPI shows them (``/openapi.json``, the TypeScript client's types).

Responses are the core wire types (``hermes_redis.core.models``) as their ``as_dict`` sends
them: each response model is derived from its dataclass by ``wire_model``, so a field added
to the core type is in the schema without a second edit. Requests are written out here: they
document the library's rules (the library checks them, and its messages are the API's).
"""

from collections.abc import Callable
from dataclasses import fields, is_dataclass
from types import UnionType
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin, get_type_hints

from fastapi import Path
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model, model_validator
from pydantic.json_schema import JsonDict

from hermes_redis.core.models import (
    ROLES,
    CompactResult,
    Context,
    Memory,
    Message,
    SearchHit,
    SessionInfo,
)
from hermes_redis.server.bodies import check_text

MAX_PAGE = 1000

# --- deriving a response model from a core type -----------------------------------------------
Model = TypeVar("Model", bound=BaseModel)
_MODELS: dict[type, type[BaseModel]] = {}  # core type -> its wire model, for nested fields


def _wire_type(hint: Any) -> Any:
    """The JSON type of a core field's type: a tuple is a list, a core type its wire model."""
    if hint in _MODELS:
        return _MODELS[hint]
    origin, args = get_origin(hint), get_args(hint)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return list[_wire_type(args[0])]  # type: ignore[misc]
    if origin in (Union, UnionType):
        return Union[tuple(_wire_type(a) for a in args)]  # noqa: UP007
    return hint


def wire_model(core: type, *, properties: tuple[str, ...] = (),
               sent_as: dict[str, tuple[str, Any]] | None = None,
               only: tuple[str, ...] | None = None,
               docs: dict[str, str] | None = None) -> Callable[[type[Model]], type[Model]]:
    """A class decorator: the declared (empty) model with the fields of ``core``'s JSON.

    Each dataclass field with its type (``_wire_type``), then ``properties`` typed by their
    return annotation; ``sent_as`` maps a field stored in another form than it is sent to
    its wire name and type; ``only`` picks a projection, in that order; ``docs`` describes
    fields. Every field is required: ``as_dict`` sends them all. The declared class is what
    mypy sees; its docstring stays out of the schema."""
    assert is_dataclass(core)

    def derive(declared: type[Model]) -> type[Model]:
        hints = get_type_hints(core)
        wire: dict[str, Any] = {}
        for f in fields(core):
            name, hint = (sent_as or {}).get(f.name, (f.name, hints[f.name]))
            wire[name] = hint
        for prop in properties:
            wire[prop] = get_type_hints(getattr(core, prop).fget)["return"]
        chosen = only if only is not None else tuple(wire)
        described = docs or {}
        made: dict[str, Any] = {name: (_wire_type(wire[name]), Field(description=described.get(name)))
                                for name in chosen}
        model: type[Model] = create_model(declared.__name__, __base__=declared,
                                          __module__=declared.__module__, **made)
        if only is None:
            _MODELS.setdefault(core, model)
        return model

    return derive


# --- requests ------------------------------------------------------------------------------------
SID_SHAPE: JsonDict = {"pattern": r"^[A-Za-z0-9_-]{1,64}$"}
TEXT_SHAPE: JsonDict = {"pattern": r"\S"}  # at least one non-blank character
USER_SHAPE: JsonDict = {"pattern": r"^[A-Za-z0-9_.@:+-]{1,128}$",
              "description": "1-128 printable characters (the schema shows the common ones)"}
SessionId = Annotated[str, Path(json_schema_extra=SID_SHAPE)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _text(cls, data: Any) -> Any:
        return check_text(data)


class SessionIn(Strict):
    user_id: str | None = Field(None, description="default: the key's user (admin: 'default')",
                                json_schema_extra=USER_SHAPE)
    title: str = ""
    session_id: str | None = Field(None, description="default: a new random id; a user key's "
                                   "chosen id is put in that user's namespace (issue 35)",
                                   json_schema_extra=SID_SHAPE)


class MessageIn(Strict):
    role: str = Field(json_schema_extra={"enum": list(ROLES)})
    content: str | None = Field(None, description="the text; required unless item is given "
                                "(then a rendering of the item stands in for it)",
                                json_schema_extra=TEXT_SHAPE)
    item: Any = Field(None, description="any JSON value (a framework's message object), "
                                        "stored and returned exactly, never cut")
    tool_calls: list[Any] | dict[str, Any] | None = None
    file_refs: list[str] | None = None
    memory_refs: list[str] | None = None
    message_id: str | None = Field(None, description="32 hex digits; a retry with the same id "
                                                     "returns the stored message",
                                   json_schema_extra={"pattern": "^[0-9a-f]{32}$"})
    created_at: float | None = Field(None, description="Unix seconds; default now",
                                     json_schema_extra={"minimum": 0, "maximum": 253402300799})


class MessageBatch(Strict):
    messages: list[MessageIn] = Field(description="a whole turn, stored in one atomic step",
                                      json_schema_extra={"minItems": 1, "maxItems": 1000})


class ForgetIn(Strict):
    last: int | None = Field(None, description="forget the last N turns", strict=True,
                             json_schema_extra={"minimum": 1})  # issue 35: true is not 1
    keyword: str | None = Field(None, description="forget every message containing it",
                                json_schema_extra=TEXT_SHAPE)


class MemoryIn(Strict):
    user_id: str | None = Field(None, description="default: the key's user; required with an "
                                                  "admin key", json_schema_extra=USER_SHAPE)
    text: str = Field(json_schema_extra=TEXT_SHAPE)
    session_id: str | None = Field(None, json_schema_extra=SID_SHAPE)


# The append body is parsed by hand (the library validates it); its schema is documented here.
APPEND_BODY: dict[str, Any] = {"requestBody": {"required": True, "content": {"application/json": {
    "schema": {"anyOf": [{"$ref": "#/components/schemas/MessageIn"},
                         {"$ref": "#/components/schemas/MessageBatch"}]}}}}}


def add_append_models(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` (FastAPI's) with the models APPEND_BODY names: they are no function's
    parameters, so FastAPI does not list them itself."""
    adapter = TypeAdapter(MessageBatch)
    extra = adapter.json_schema(ref_template="#/components/schemas/{model}")
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components.update(extra.pop("$defs", {}))
    components["MessageBatch"] = extra
    return schema


# --- responses: the core types as sent -----------------------------------------------------------
@wire_model(Message, sent_as={
    "tool_calls": ("tool_calls", list[Any] | dict[str, Any] | None),  # stored as JSON text
    "item_json": ("item", Any),  # stored as JSON text; any JSON value, null for none
})
class MessageOut(BaseModel):
    """A stored message (``Message.as_dict``)."""


@wire_model(SessionInfo, properties=("backlog",))
class SessionOut(BaseModel):
    """A session's state in both tiers (``SessionInfo.as_dict``)."""


@wire_model(Context, properties=("usage",))
class ContextOut(BaseModel):
    """What to send to the model (``Context.as_dict``)."""


@wire_model(CompactResult)
class CompactionOut(BaseModel):
    """What a compaction did."""


@wire_model(Memory, properties=("current",), docs={
    "created_at": "Unix seconds",
    "seq": "the message that said it, for a memory made from the conversation",
    "kind": "explicit, trigger or extracted",
    "superseded_by": "the newer memory that replaced it",
})
class MemoryOut(BaseModel):
    """A persistent memory (``Memory.as_dict``)."""


@wire_model(SearchHit)
class HitOut(BaseModel):
    """A search hit (``SearchHit.as_dict``)."""


class MessagesOut(BaseModel):
    messages: list[MessageOut]


class PoppedOut(BaseModel):
    message: MessageOut | None = Field(description="the newest message, now forgotten; null "
                                                   "when the session had none")


class SessionsOut(BaseModel):
    sessions: list[SessionOut]
    next_cursor: str | None


class CompactedOut(SessionOut):
    compaction: CompactionOut | None


class ForgottenOut(BaseModel):
    forgotten: int


class MemoriesOut(BaseModel):
    memories: list[MemoryOut]


class HitsOut(BaseModel):
    hits: list[HitOut]


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorOut(BaseModel):
    error: ErrorDetail


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorOut} for status in (400, 401, 403, 404, 409, 413, 422, 503)
}
