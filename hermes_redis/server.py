"""The HTTP API (``hermes-redis serve``): SessionMemory as JSON over HTTP, with API keys.

Every /v1 route calls the library and nothing below it (keys are checked in
``hermes_redis.keys``). The library's errors become ``{"error": {"code", "message"}}`` with
the matching status and its one-line message unchanged; bad input is never a 500. A user
key sees only its user's data: another user's session or memory answers 404 with the very
text an unknown id gets, so the answer does not reveal that it exists.
"""

import codecs
import hashlib
import ipaddress
import json
import logging
import math
import os
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import orjson
from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator
from pydantic.json_schema import JsonDict
from starlette.exceptions import HTTPException as StarletteHTTPException

from hermes_redis import __version__
from hermes_redis import config as config_mod
from hermes_redis.config import Config
from hermes_redis.errors import (
    AmbiguousIdError,
    BackendUnavailableError,
    ConfigError,
    HermesError,
    NotFoundError,
    StateError,
    ValidationError,
)
from hermes_redis.keys import KeyStore
from hermes_redis.mcp_server import mcp_asgi_app
from hermes_redis.metrics import REGISTRY as LIBRARY
from hermes_redis.metrics import BacklogCollector
from hermes_redis.models import ROLES
from hermes_redis.session_memory import MESSAGE_FIELDS, SessionMemory

log = logging.getLogger(__name__)

# status and code of each library error; the client maps the code back to the class
ERRORS: dict[type[HermesError], tuple[int, str]] = {
    ValidationError: (422, "invalid"),
    NotFoundError: (404, "not_found"),
    AmbiguousIdError: (409, "ambiguous_id"),
    StateError: (409, "conflict"),
    BackendUnavailableError: (503, "unavailable"),
    ConfigError: (503, "misconfigured"),
}
MAX_PAGE = 1000
KEY_CACHE_SECONDS = 1.0  # how long a checked key is trusted (revocation delay)
MAX_TRUSTED_KEYS = 4096
Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]],
                   Awaitable[None]]


class ApiError(Exception):
    """An error the HTTP layer itself raises (auth, body size, malformed JSON)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def error_body(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": " ".join(message.split())}}


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def not_found(sid: str) -> NotFoundError:
    """Exactly what the library says for an unknown session (another user's looks the same)."""
    return NotFoundError(f"no session {sid}; see `hermes-redis session list`")


# --- request and response shapes (the OpenAPI schema) ------------------------------------------
# The schema documents the library's rules; the library checks them (its messages are the API's).
SID_SHAPE: JsonDict = {"pattern": r"^[A-Za-z0-9_-]{1,64}$"}
TEXT_SHAPE: JsonDict = {"pattern": r"\S"}  # at least one non-blank character
USER_SHAPE: JsonDict = {"pattern": r"^[A-Za-z0-9_.@:+-]{1,128}$",
              "description": "1-128 printable characters (the schema shows the common ones)"}
SessionId = Annotated[str, Path(json_schema_extra=SID_SHAPE)]
def check_text(value: Any, where: str = "request body") -> Any:
    """``value`` unchanged if every string in it is text. JSON may escape a lone surrogate
    (``"\\ud800"``): not text, and neither Redis nor SQLite can store it."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValidationError(f"{where} is not valid UTF-8 (a lone surrogate escape): "
                                  "send text") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            check_text(key, where)
            check_text(item, str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check_text(item, f"{where}[{i}]")
    return value


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
    session_id: str | None = Field(None, description="default: a new random id",
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
    last: int | None = Field(None, description="forget the last N turns",
                             json_schema_extra={"minimum": 1})
    keyword: str | None = Field(None, description="forget every message containing it",
                                json_schema_extra=TEXT_SHAPE)


class MemoryIn(Strict):
    user_id: str | None = Field(None, description="default: the key's user; required with an "
                                                  "admin key", json_schema_extra=USER_SHAPE)
    text: str = Field(json_schema_extra=TEXT_SHAPE)
    session_id: str | None = Field(None, json_schema_extra=SID_SHAPE)


class MessageOut(BaseModel):
    message_id: str
    session_id: str
    seq: int
    role: str
    content: str
    token_count: int
    tool_calls: list[Any] | dict[str, Any] | None
    file_refs: list[str]
    memory_refs: list[str]
    created_at: float
    item: Any = None


class MessagesOut(BaseModel):
    messages: list[MessageOut]


class PoppedOut(BaseModel):
    message: MessageOut | None = Field(description="the newest message, now forgotten; null "
                                                   "when the session had none")


class SessionOut(BaseModel):
    session_id: str
    user_id: str
    title: str
    created_at: float
    updated_at: float
    total_tokens: int
    message_count: int
    status: str
    summary: str
    summary_seq: int
    last_seq: int
    flushed_seq: int
    hot_count: int
    archived_count: int
    ttl_left: int | None
    tier: str
    backlog: int


class SessionsOut(BaseModel):
    sessions: list[SessionOut]
    next_cursor: str | None


class CompactionOut(BaseModel):
    summarized_upto: int
    trimmed: int
    summary_tokens: int
    kept: int


class CompactedOut(SessionOut):
    compaction: CompactionOut | None


class ContextOut(BaseModel):
    session_id: str
    summary: str
    memories: list[str]
    tokens: int
    budget: int
    window: int
    usage: float
    first_seq: int
    opening: list[MessageOut]
    recalled: list[MessageOut]
    messages: list[MessageOut]


class ForgottenOut(BaseModel):
    forgotten: int


class MemoryOut(BaseModel):
    memory_id: str
    user_id: str
    session_id: str | None
    content: str
    created_at: float | None = Field(None, description="Unix seconds")
    seq: int | None = Field(None, description="the message that said it, for a memory made "
                                              "from the conversation")
    kind: str = Field("explicit", description="explicit, trigger or extracted")
    topic: str | None = None
    superseded_by: str | None = Field(None, description="the newer memory that replaced it")
    current: bool = True


class MemoriesOut(BaseModel):
    memories: list[MemoryOut]


class HitOut(BaseModel):
    session_id: str
    seq: int
    role: str
    snippet: str
    title: str
    score: float
    tier: str


class HitsOut(BaseModel):
    hits: list[HitOut]


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorOut(BaseModel):
    error: ErrorDetail


# The append body is parsed by hand (the library validates it); its schema is documented here.
APPEND_BODY: dict[str, Any] = {"requestBody": {"required": True, "content": {"application/json": {
    "schema": {"anyOf": [{"$ref": "#/components/schemas/MessageIn"},
                         {"$ref": "#/components/schemas/MessageBatch"}]}}}}}

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorOut} for status in (400, 401, 403, 404, 409, 413, 422, 503)
}


# --- who is asking ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Principal:
    """The caller: ``user_id`` None sees every user (an admin key, or no keys on loopback)."""

    user_id: str | None
    key_id: str | None

    def user(self, asked: str | None, default: str | None = None) -> str | None:
        """The user a request acts for: a user key acts for its own user only (403 else)."""
        if self.user_id is None:
            return asked if asked is not None else default
        if asked is not None and asked != self.user_id:
            raise ApiError(403, "forbidden", f"this API key belongs to user {self.user_id}; "
                                             "it cannot act for another user")
        return self.user_id


class Auth:
    """Bearer keys from the archive; with none, the server is open (and on loopback only).

    A key that checked out is trusted for ``ttl`` seconds without asking the archive again
    (and "no keys exist" likewise), so a revocation, or the first key on an open loopback
    server, takes effect within ``ttl`` (1 s) in every worker. Only the key's SHA-256 is
    kept; a wrong or revoked key is never cached, so it is refused on every request."""

    def __init__(self, keys: KeyStore, require_keys: bool, ttl: float = KEY_CACHE_SECONDS) -> None:
        self.keys, self.require_keys, self.ttl = keys, require_keys, ttl
        self._trusted: dict[bytes, tuple[float, Principal]] = {}
        self._open_until = 0.0  # no keys existed when last asked, until then

    async def __call__(self, request: Request) -> Principal:
        return self.principal(request.headers.get("authorization"))

    def principal(self, header: str | None) -> Principal:
        """The caller of a request whose Authorization header is ``header``."""
        now = time.monotonic()
        if header is None:
            if not self.require_keys and (now < self._open_until or self._no_keys(now)):
                return OPEN
            raise ApiError(401, "unauthorized", "missing API key: send Authorization: Bearer <key> "
                                                "(`hermes-redis key create --user U` makes one)")
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise ApiError(401, "unauthorized", "malformed Authorization header: use "
                                                "Authorization: Bearer <key>")
        digest = hashlib.sha256(token.encode("utf-8")).digest()
        trusted = self._trusted.get(digest)
        if trusted is not None and now < trusted[0]:
            return trusted[1]
        key = self.keys.check(token)
        if key is None:  # never echo the key
            self._trusted.pop(digest, None)
            raise ApiError(401, "unauthorized", "invalid or revoked API key; ask for a new one "
                                                "(`hermes-redis key list` shows the active ones)")
        who = Principal(key.user_id, key.key_id)
        if self.ttl > 0:
            if len(self._trusted) >= MAX_TRUSTED_KEYS:
                self._trusted.clear()
            self._trusted[digest] = (now + self.ttl, who)
        return who

    def _no_keys(self, now: float) -> bool:
        if self.keys.active() != 0:
            return False
        self._open_until = now + self.ttl
        return True


OPEN = Principal(None, None)


# --- metrics ----------------------------------------------------------------------------------
class Metrics:
    """Requests and latency per route template; per process, or summed over uvicorn workers
    when ``PROMETHEUS_MULTIPROC_DIR`` is set (``serve --workers N`` sets it)."""

    def __init__(self, mem: SessionMemory) -> None:
        self.registry = CollectorRegistry()
        self.multiprocess = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        self.requests = Counter("hermes_http_requests", "HTTP requests",
                                ("method", "route", "status"), registry=self.registry)
        self.latency = Histogram("hermes_http_request_duration_seconds", "HTTP request latency",
                                 ("method", "route"), registry=self.registry,
                                 buckets=(.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5,
                                          1, 2.5, 5, 10))
        self.backlog = BacklogCollector(mem)
        if not self.multiprocess:
            self.registry.register(self.backlog)
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count one request and its latency (the labelled children looked up once each)."""
        children = self._children.get((method, route, status))
        if children is None:
            children = (self.requests.labels(method, route, str(status)),
                        self.latency.labels(method, route))
            self._children[(method, route, status)] = children
        children[0].inc()
        children[1].observe(seconds)

    def render(self) -> bytes:
        """HTTP metrics, the backlog, and the library's own counters (appends, flushes…)."""
        if not self.multiprocess:
            return generate_latest(self.registry) + generate_latest(LIBRARY)
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        registry.register(self.backlog)
        return generate_latest(registry)


class Edge:
    """Pure ASGI middleware: refuses bodies over ``max_body`` with 413 (by Content-Length,
    and by counting a streamed body), and times every request for /metrics."""

    def __init__(self, app: ASGIApp, max_body: int, metrics: Metrics,
                 fast: "FastAppend | None" = None) -> None:
        self.app, self.max_body, self.metrics, self.fast = app, max_body, metrics, fast

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Any]],
                       send: Callable[[Any], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500
        started = False

        async def send_status(message: Any) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                status, started = message["status"], True
            await send(message)

        length = dict(scope.get("headers") or []).get(b"content-length")
        try:
            if length is not None and length.isdigit() and int(length) > self.max_body:
                await self._too_large(send_status, int(length))
                return
            seen = 0

            async def counted() -> Any:
                nonlocal seen
                message = await receive()
                if message["type"] == "http.request":
                    seen += len(message.get("body", b""))
                    if seen > self.max_body:  # FastAPI turns this into a 400: say why
                        scope["hermes.too_large"] = self._too_large_text(seen)
                        raise ApiError(413, "too_large", scope["hermes.too_large"])
                return message

            try:
                fast, found = self.fast, scope.get("hermes.fast")  # HermesApp matched it
                if fast is not None and found is not None:
                    scope["route"] = fast.route
                    await fast(scope, found, counted, send_status)
                else:
                    await self.app(scope, counted, send_status)
            except ApiError as err:
                if started:
                    raise
                await _send_json(send_status, err.status, error_body(err.code, err.message))
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            self.metrics.observe(scope.get("method", ""), template, status,
                                 time.perf_counter() - start)

    def _too_large_text(self, size: int) -> str:
        return (f"request body is {size} bytes or more, over the limit of {self.max_body} "
                "(server.max_body_bytes): send less per request")

    async def _too_large(self, send: Callable[[Any], Awaitable[None]], size: int) -> None:
        await _send_json(send, 413, error_body("too_large", self._too_large_text(size)))


async def _send_json(send: Callable[[Any], Awaitable[None]], status: int, body: Any) -> None:
    await _send_bytes(send, status, _json_bytes(body))


def _json_bytes(content: Any) -> bytes:
    """``content`` as compact UTF-8 JSON, what Starlette's JSONResponse sends, by orjson: a
    200-message context takes 32 µs against 432 µs with ``json``. What orjson refuses (an
    integer over 64 bits in an item) goes through ``json``, so every value is sent exactly."""
    try:
        return orjson.dumps(content)
    except TypeError:
        return json.dumps(content, ensure_ascii=False, allow_nan=False, indent=None,
                          separators=(",", ":")).encode("utf-8")


class JSONReply(JSONResponse):
    """A JSONResponse rendered by ``_json_bytes``."""

    def render(self, content: Any) -> bytes:
        return _json_bytes(content)


async def _send_bytes(send: Callable[[Any], Awaitable[None]], status: int, raw: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-length", str(len(raw)).encode()),
                            (b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": raw})


def error_status(err: HermesError, too_large: bool) -> tuple[int, str]:
    """Status and code for a library error (a ValidationError for an oversized body is 413)."""
    status, code = next((v for cls, v in ERRORS.items() if isinstance(err, cls)),
                        (503, "unavailable"))
    if too_large and isinstance(err, ValidationError):
        status, code = 413, "too_large"
    return status, code


class Flags:
    """Per-request state the append handler sets (``too_large``); ``request.state`` in a
    FastAPI route, one of these on the fast path."""

    too_large = False


class FastAppend:
    """``POST /v1/sessions/{session_id}/messages`` served straight from the ASGI middleware:
    the same auth, handler and error bodies as the FastAPI route (which stays, for the
    schema), without Starlette's routing and FastAPI's dependency solving and exception
    middleware, which cost more than the rest of the HTTP layer (docs/http.md)."""

    PATH = re.compile(r"/v1/sessions/([^/]+)/messages")

    def __init__(self) -> None:
        self.route: Any = None  # the FastAPI route (its path template names the metrics)
        self.auth: Auth | None = None
        self.handle: Callable[[Principal, str, bytes, Any], tuple[int, Any]] | None = None

    def match(self, scope: Scope) -> str | None:
        if scope.get("method") != "POST" or scope.get("root_path"):
            return None
        found = self.PATH.fullmatch(scope.get("path", ""))
        return found.group(1) if found else None

    async def __call__(self, scope: Scope, sid: str, receive: Callable[[], Awaitable[Any]],
                       send: Callable[[Any], Awaitable[None]]) -> None:
        assert self.auth is not None and self.handle is not None
        header = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"authorization"),
                      None)
        flags = Flags()
        try:
            who = self.auth.principal(header)
            chunks = []
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    break
            status, content = self.handle(who, sid, b"".join(chunks), flags)
        except HermesError as err:
            status, code = error_status(err, flags.too_large)
            content = error_body(code, str(err))
        except ApiError as err:
            status, content = err.status, error_body(err.code, err.message)
        except Exception:
            log.exception("unexpected error on POST %s", scope.get("path"))
            status, content = 500, error_body("internal", "internal error; the server log has "
                                                          "the details")
        await _send_json(send, status, content)


class HermesApp(FastAPI):
    """FastAPI, with the fast append route answered before FastAPI's own middleware stack
    (error, telemetry and body-limit layers, exception middleware, router): ``front`` is an
    Edge that times it and enforces the body limit like every other request."""

    front: "Edge | None" = None

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Any]],
                       send: Callable[[Any], Awaitable[None]]) -> None:
        front = self.front
        if front is not None and front.fast is not None and scope["type"] == "http":
            sid = front.fast.match(scope)
            if sid is not None:
                scope["hermes.fast"] = sid
                await front(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


# --- the app ----------------------------------------------------------------------------------
def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValidationError(f"number {text[:40]} is out of range: send finite numbers")
    return value


def _not_json(name: str) -> Any:
    raise ValidationError(f"{name} is not a JSON number: send finite numbers")


def _json_body(raw: bytes) -> Any:
    """The parsed body; JSON that Python would accept but JSON forbids (NaN, Infinity) or
    cannot hold (1e400) is refused before it reaches storage. Strict UTF-8 with no ``\\u``
    escape holds no lone surrogate, so only other bodies are walked by ``check_text``."""
    try:
        text = (raw.decode("utf-8-sig" if raw.startswith(codecs.BOM_UTF8) else "utf-8")
                if b"\x00" not in raw else None)  # NULs: UTF-16 or UTF-32
    except UnicodeDecodeError:
        text = None  # json decides: surrogates encoded as bytes are not text
    try:
        data = (_BODY.decode(text) if text is not None
                else json.loads(raw, parse_float=_finite, parse_constant=_not_json))
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "malformed_json", "request body is not valid JSON: send one JSON "
                                              "object with Content-Type: application/json") from None
    return data if text is not None and "\\u" not in text else check_text(data)


_BODY = json.JSONDecoder(parse_float=_finite, parse_constant=_not_json)


def _oversized(items: list[Any], limit: int) -> bool:
    """Whether any item's content is over ``limit`` UTF-8 bytes (the library says so; we
    only choose 413 for it)."""
    for item in items:
        content = item.get("content") if isinstance(item, dict) else None
        if isinstance(content, str) and len(content) > limit // 4 and \
                len(content.encode("utf-8", "surrogatepass")) > limit:
            return True
    return False


def _validation_message(exc: RequestValidationError) -> tuple[int, str, str]:
    errors = list(exc.errors())
    body = getattr(exc, "body", None)
    if any(e.get("type") == "json_invalid" for e in errors):
        return 400, "malformed_json", ("request body is not valid JSON: send one JSON object "
                                       "with Content-Type: application/json")
    branch = "MessageBatch" if isinstance(body, dict) and "messages" in body else "MessageIn"
    picked = [e for e in errors if branch in e.get("loc", ())] or errors
    e = picked[0] if picked else {"loc": ("body",), "msg": "invalid request"}
    loc = [str(x) for x in e.get("loc", ()) if x not in ("MessageIn", "MessageBatch")]
    where = loc[0] if loc else "body"
    field = ".".join(loc[1:])
    name = f"{field} ({where})" if field else ("request body" if where == "body" else where)
    msg = str(e.get("msg", "invalid"))
    return 422, "invalid", f"{name}: {msg}; see /docs for the expected shape"


def create_app(config: Config | None = None, *, require_keys: bool | None = None,
               mem: SessionMemory | None = None) -> FastAPI:
    """The ASGI app over one SessionMemory. ``require_keys`` (default: the configured host is
    not loopback) refuses keyless requests even when no key exists."""
    config = config or config_mod.load()
    mem = mem or SessionMemory(config)
    keys = KeyStore(mem.cold)
    auth = Auth(keys, not is_loopback(config.server.host) if require_keys is None else require_keys)
    metrics = Metrics(mem)
    mcp_app = mcp_asgi_app(mem, user_id=lambda request: request.state.user_id if request else None,
                           host=config.server.host)
    app = HermesApp(title="hermes-redis", version=__version__, openapi_url="/openapi.json",
                  docs_url="/docs", redoc_url=None, lifespan=lambda _app: mcp_app.lifespan(),
                  default_response_class=JSONReply,
                  description="Session memory for AI agents: sessions, messages, context, "
                              "persistent memories and search over HTTP. Errors are "
                              '`{"error": {"code", "message"}}`.')
    app.state.mem, app.state.keys = mem, keys
    fast = FastAppend()
    app.add_middleware(Edge, max_body=config.server.max_body_bytes, metrics=metrics)  # type: ignore[arg-type]
    app.front = Edge(app, config.server.max_body_bytes, metrics, fast)  # type: ignore[arg-type]
    Who = Annotated[Principal, Depends(auth)]

    @app.exception_handler(HermesError)
    async def hermes_error(request: Request, err: HermesError) -> JSONResponse:
        status, code = error_status(err, getattr(request.state, "too_large", False))
        return JSONReply(error_body(code, str(err)), status_code=status)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, err: ApiError) -> JSONResponse:
        return JSONReply(error_body(err.code, err.message), status_code=err.status)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        status, code, message = _validation_message(exc)
        return JSONReply(error_body(code, message), status_code=status)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return JSONReply(error_body("internal", "internal error; the server log has the "
                                                "details"), status_code=500)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if "hermes.too_large" in request.scope:  # the body stream went over the limit
            return JSONReply(error_body("too_large", request.scope["hermes.too_large"]),
                             status_code=413)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        message = (f"no route {request.method} {request.url.path}; see /docs"
                   if exc.status_code in (404, 405) else str(exc.detail))
        return JSONReply(error_body(code, message), status_code=exc.status_code)

    # Routes that make one or two bounded round trips (append, context, info, messages,
    # create) are ``async def`` and call the library inline: a threadpool hop costs more than
    # the call. The rest (archive scans, compaction, forgetting) run in the threadpool.
    def owned(p: Principal, sid: str) -> str:
        """``sid`` when the caller may see it; another user's session is not found."""
        if p.user_id is not None and mem.user_of(sid) != p.user_id:
            raise not_found(sid)
        return sid

    def info_json(sid: str) -> JSONResponse:
        return JSONReply(mem.info(sid).as_dict())

    # --- sessions ---
    @app.post("/v1/sessions", status_code=201, response_model=SessionOut, responses=ERROR_RESPONSES,
              tags=["sessions"])
    async def create_session(body: SessionIn, p: Who) -> JSONResponse:
        user = p.user(body.user_id, "default")
        assert user is not None
        sid = mem.create_session(user_id=user, title=body.title, session_id=body.session_id)
        return JSONReply(mem.info(sid).as_dict(), status_code=201)

    @app.get("/v1/sessions", response_model=SessionsOut, responses=ERROR_RESPONSES,
             tags=["sessions"])
    def list_sessions(p: Who, user_id: str | None = None,
                      status: Literal["active", "archived", "deleted", "all"] = "active",
                      limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
                      cursor: str | None = None) -> JSONResponse:
        """Newest first, a page at a time: pass ``next_cursor`` back for the next page."""
        user = p.user(user_id)
        page = mem.list_sessions(user_id=user, status=status, limit=limit, cursor=cursor)
        return JSONReply({"sessions": [i.as_dict() for i in page],
                          "next_cursor": page.next_cursor})

    @app.get("/v1/sessions/{session_id}", response_model=SessionOut, responses=ERROR_RESPONSES,
             tags=["sessions"])
    async def session_info(session_id: SessionId, p: Who) -> JSONResponse:
        return info_json(owned(p, session_id))

    @app.delete("/v1/sessions/{session_id}", status_code=204, responses=ERROR_RESPONSES,
                tags=["sessions"])
    def delete_session(session_id: SessionId, p: Who, purge: bool = False) -> Response:
        mem.delete(owned(p, session_id), purge=purge)
        return Response(status_code=204)

    # --- messages ---
    @app.post("/v1/sessions/{session_id}/messages", status_code=201,
              response_model=MessageOut | MessagesOut, responses=ERROR_RESPONSES,
              tags=["messages"], openapi_extra=APPEND_BODY)
    async def append(session_id: SessionId, p: Who, request: Request) -> JSONResponse:
        """One message, or a whole turn (``{"messages": [...]}``) in one atomic Redis round
        trip; idempotent by ``message_id``. The body goes to the library as it came, so its
        checks (and their messages) are the API's."""
        status, content = append_body(p, session_id, await request.body(), request.state)
        return JSONReply(content, status_code=status)

    def append_body(p: Principal, session_id: str, raw: bytes, flags: Any) -> tuple[int, Any]:
        """The append route's work, shared by the FastAPI route and the fast path; sets
        ``flags.too_large`` before the library refuses an oversized content."""
        sid = owned(p, session_id)
        data = _json_body(raw)
        limit = mem.config.limits.max_content_bytes
        if isinstance(data, dict) and "messages" in data:
            if len(data) > 1:
                extra = sorted(set(data) - {"messages"})[0]
                raise ValidationError(f"unknown field {extra!r} next to messages: a batch is "
                                      '{"messages": [...]}')
            items = data["messages"]
            if _oversized(items if isinstance(items, list) else [], limit):
                flags.too_large = True  # the library's ValidationError answers 413
            stored = mem.append_many(sid, items)
            return 201, {"messages": [m.as_dict() for m in stored]}
        if not isinstance(data, dict):
            raise ValidationError("the request body must be a message object {\"role\", "
                                  '"content", ...} or {"messages": [...]}')
        unknown = set(data) - MESSAGE_FIELDS
        if unknown:
            raise ValidationError(f"unknown field {sorted(unknown)[0]!r}: use "
                                  + ", ".join(sorted(MESSAGE_FIELDS)))
        for required, what in (("role", f"one of {', '.join(ROLES)}"), ("content", "the text")):
            if required not in data and not (required == "content" and "item" in data):
                raise ValidationError(f"{required} is required: {what}")
        if _oversized([data], limit):
            flags.too_large = True
        msg = mem.append(sid, **data)
        return 201, msg.as_dict()

    fast.auth, fast.handle = auth, append_body
    fast.route = next(r for r in app.routes if getattr(r, "path", "") == "/v1/sessions/"
                      "{session_id}/messages" and "POST" in getattr(r, "methods", ()))

    @app.get("/v1/sessions/{session_id}/messages", response_model=MessagesOut,
             responses=ERROR_RESPONSES, tags=["messages"])
    async def list_messages(session_id: SessionId, p: Who,
                            after_seq: Annotated[int, Query(ge=0, lt=2**63)] = 0,
                            limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
                            last: Annotated[int | None, Query(ge=1, le=MAX_PAGE)] = None,
                            ) -> JSONResponse:
        """Messages with seq > ``after_seq`` in seq order, archived and hot; page on with the
        last seq returned. ``last``: instead, the newest ``last`` messages in seq order."""
        sid = owned(p, session_id)
        msgs = (mem.messages(sid, last=last) if last is not None
                else mem.messages(sid, after_seq=after_seq, limit=limit))
        return JSONReply({"messages": [m.as_dict() for m in msgs]})

    @app.get("/v1/sessions/{session_id}/context", response_model=ContextOut,
             responses=ERROR_RESPONSES, tags=["context"])
    async def context(session_id: SessionId, p: Who, budget: Annotated[int | None, Query(ge=1)] = None,
                query: str | None = None, touch: bool = True) -> JSONResponse:
        """What to send to the model now; never more than ``budget`` tokens."""
        ctx = mem.context(owned(p, session_id), budget, query=query, touch=touch)
        return JSONReply(ctx.as_dict())

    # --- changing a session ---
    @app.post("/v1/sessions/{session_id}/forget", response_model=ForgottenOut,
              responses=ERROR_RESPONSES, tags=["sessions"])
    def forget(session_id: SessionId, body: ForgetIn, p: Who) -> JSONResponse:
        """Remove messages from both tiers for good: the last N turns, or a keyword."""
        if (body.last is None) == (body.keyword is None):
            raise ValidationError('give exactly one of "last" (turns) or "keyword"')
        sid = owned(p, session_id)
        n = (mem.forget_last(sid, body.last) if body.last is not None
             else mem.forget_keyword(sid, body.keyword or ""))
        return JSONReply({"forgotten": n})

    @app.post("/v1/sessions/{session_id}/clear", response_model=SessionOut,
              responses=ERROR_RESPONSES, tags=["sessions"])
    def clear(session_id: SessionId, p: Who, history: bool = False) -> JSONResponse:
        """Empty the context (hot turns and summary); the archive and memories stay.
        ``history=true`` also forgets every message from both tiers; memories stay."""
        mem.clear(owned(p, session_id), history=history)
        return info_json(session_id)

    @app.post("/v1/sessions/{session_id}/pop", response_model=PoppedOut,
              responses=ERROR_RESPONSES, tags=["messages"])
    def pop(session_id: SessionId, p: Who) -> JSONResponse:
        """Remove and return the newest message, from both tiers for good (as a forget)."""
        msg = mem.pop(owned(p, session_id))
        return JSONReply({"message": None if msg is None else msg.as_dict()})

    @app.post("/v1/sessions/{session_id}/archive", response_model=SessionOut,
              responses=ERROR_RESPONSES, tags=["sessions"])
    def archive(session_id: SessionId, p: Who) -> JSONResponse:
        mem.archive(owned(p, session_id))
        return info_json(session_id)

    @app.post("/v1/sessions/{session_id}/restore", response_model=SessionOut,
              responses=ERROR_RESPONSES, tags=["sessions"])
    def restore(session_id: SessionId, p: Who) -> JSONResponse:
        mem.restore(owned(p, session_id))
        return info_json(session_id)

    @app.post("/v1/sessions/{session_id}/compact", response_model=CompactedOut,
              responses=ERROR_RESPONSES, tags=["sessions"])
    def compact(session_id: SessionId, p: Who) -> JSONResponse:
        """Summarize older turns now; ``compaction`` is null when there was nothing to do."""
        result = mem.compact(owned(p, session_id))
        data = mem.info(session_id).as_dict()
        data["compaction"] = None if result is None else dict(result.__dict__)
        return JSONReply(data)

    # --- memories and search ---
    @app.post("/v1/memories", status_code=201, response_model=MemoryOut,
              responses=ERROR_RESPONSES, tags=["memories"])
    def remember(body: MemoryIn, p: Who) -> JSONResponse:
        user = p.user(body.user_id)
        if user is None:
            raise ValidationError("user_id is required with an admin key: say whose memory it is")
        if body.session_id is not None:
            owned(p, body.session_id)
        memory_id = mem.remember(user, body.text, session_id=body.session_id)
        stored = mem.cold.memory(memory_id)
        assert stored is not None
        return JSONReply(stored.as_dict(), status_code=201)

    @app.get("/v1/memories", response_model=MemoriesOut, responses=ERROR_RESPONSES,
             tags=["memories"])
    def memories(p: Who, user_id: str | None = None, query: str | None = None,
                 limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
                 superseded: bool = False) -> JSONResponse:
        """The user's current persistent memories, oldest first (``superseded``: with the
        ones newer memories replaced); with ``query``, those sharing a distinctive word with
        it, best first."""
        user = p.user(user_id)
        if user is None:
            raise ValidationError("user_id is required with an admin key: say whose memories")
        rows = mem.memories(user, query=query if query and query.strip() else None,
                            superseded=superseded)
        return JSONReply({"memories": [m.as_dict() for m in rows[:limit]]})

    @app.delete("/v1/memories/{memory_id}", status_code=204, responses=ERROR_RESPONSES,
                tags=["memories"])
    def forget_memory(memory_id: str, p: Who) -> Response:
        mem.forget_memory(memory_id, user_id=p.user_id)
        return Response(status_code=204)

    @app.get("/v1/search", response_model=HitsOut, responses=ERROR_RESPONSES, tags=["search"])
    def search(p: Who, q: str, user_id: str | None = None,
               limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 20) -> JSONResponse:
        """Full-text search over archived and hot messages, best match first."""
        if "\x00" in q:  # SQLite's FTS5 parser stops at NUL and the library calls that an outage
            raise ValidationError("search query contains a NUL character: send text")
        hits = mem.search(q, user_id=p.user(user_id), limit=limit)
        return JSONReply({"hits": [h.as_dict() for h in hits]})

    # --- operations ---
    @app.get("/healthz", tags=["operations"])
    async def healthz() -> dict[str, str]:
        """The process answers (says nothing about Redis or the archive: see /readyz)."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["operations"], responses={503: {"model": ErrorOut}})
    def readyz() -> dict[str, str]:
        """Redis and the archive both answer."""
        mem.ping()
        return {"status": "ready"}

    @app.get("/metrics", tags=["operations"], response_class=PlainTextResponse)
    def metrics_text() -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    def openapi() -> dict[str, Any]:
        """FastAPI's schema plus the append body's models (not function parameters)."""
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, routes=app.routes,
                                 description=app.description)
            adapter = TypeAdapter(MessageBatch)
            extra = adapter.json_schema(ref_template="#/components/schemas/{model}")
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            components.update(extra.pop("$defs", {}))
            components["MessageBatch"] = extra
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    # Starlette serves a callable object as a raw ASGI app; its stubs only know endpoints
    app.add_route("/mcp", _AuthenticatedMcp(mcp_app, auth),  # type: ignore[arg-type]
                  methods=["GET", "POST", "DELETE"], include_in_schema=False)
    return app


class _AuthenticatedMcp:
    """/mcp behind the same keys as /v1: no valid key is a 401 before MCP sees the request,
    and each tool call is scoped to the key's user (``scope["state"]["user_id"]``). A class,
    not a function: Starlette routes a callable object as a raw ASGI app."""

    def __init__(self, mcp_app: Any, auth: Auth) -> None:
        self.mcp_app, self.auth = mcp_app, auth

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            who = await self.auth(Request(scope, receive))
        except ApiError as err:
            response = JSONReply(error_body(err.code, err.message), status_code=err.status)
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})["user_id"] = who.user_id
        await self.mcp_app(scope, receive, send)


def app_from_env() -> FastAPI:
    """Factory for uvicorn (``--workers N`` imports it in each worker): the config named by
    $HERMES_CONFIG, with the $HERMES_SERVER_* overrides the CLI set."""
    return create_app(config_mod.load(os.environ.get("HERMES_CONFIG") or None))

