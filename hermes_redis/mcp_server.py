"""MCP tools over one ``SessionMemory``: ``hermes-redis mcp`` serves them over stdio, and the
HTTP server mounts ``mcp_asgi_app`` at ``/mcp`` (streamable HTTP).

The tools are thin: each validates through the library and returns what it returned. Two
guarantees hold for every tool: a ``HermesError`` becomes a tool error (``isError``) carrying
its one-line message and never a traceback, and under a user scope another user's session is
reported exactly as a missing one, so a caller cannot even learn that it exists.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from hermes_redis import __version__
from hermes_redis.errors import HermesError, NotFoundError, ValidationError
from hermes_redis.models import ROLES, memories_text, recalled_text, summary_text
from hermes_redis.models import Context as MemoryContext
from hermes_redis.render import context_shape, session_report, usage_line
from hermes_redis.session_memory import SessionMemory

UserScope = str | Callable[[Request | None], str | None] | None
"""Whose sessions the tools may touch: a user id, ``None`` for all (admin, or a local stdio
server), or a function of the HTTP request (``None`` under stdio) giving one of those, asked
on every tool call: the HTTP server's way to scope each request to the key that sent it."""

INSTRUCTIONS = (
    "hermes-redis is session memory for a conversation. Call create_session once to start one "
    "(or list_sessions to find an earlier one), append every message as it is said, and call "
    "context before each model call: its text is what the model should see, and it always "
    "fits the token budget. remember stores a lasting fact about the user; recall searches "
    "past messages; forget removes messages for good."
)

# Parameter types: the schema tells the model what is allowed; the library checks it and says
# what is wrong in one line (a pydantic enum error would be several lines of its own wording).
SessionId = Annotated[str, Field(description="The session id create_session returned.")]
Role = Annotated[str, Field(description="Who said it.", json_schema_extra={"enum": list(ROLES)})]
Budget = Annotated[int | None, Field(
    description="Tokens the context may use (default: the model's window less the reply).")]
Query = Annotated[str | None, Field(
    description="Recall older messages relevant to this (default: the newest user message; '' for none).")]
LastTurns = Annotated[int | None, Field(
    description="Forget the last N turns (a turn is a user message and what follows it).")]
Keyword = Annotated[str | None, Field(description="Forget every message containing this (case-insensitive).")]
Limit = Annotated[int, Field(ge=1, le=200, description="At most this many.")]


class CreatedSession(BaseModel):
    session_id: str = Field(description="Pass this to every other tool.")
    user_id: str
    title: str


class Appended(BaseModel):
    session_id: str
    seq: int = Field(description="Position in the session: 1 for the first message, then +1.")
    token_count: int = Field(description="Tokens this message costs in the context.")
    message_id: str
    created_at: float = Field(description="Unix seconds.")


class ContextResult(BaseModel):
    session_id: str
    text: str = Field(description="The context as one text, in the order the model should read it.")
    chat: list[dict[str, str]] = Field(description="The same as OpenAI-style chat messages.")
    tokens: int = Field(description="Tokens the context uses; never more than budget.")
    budget: int
    window: int = Field(description="The model's context window.")
    usage: float = Field(description="tokens / window, 0..1.")
    shape: str = Field(description="What the context is made of, e.g. 'summary + 20 newest from #230'.")


class Remembered(BaseModel):
    memory_id: str
    user_id: str
    session_id: str | None


class Hit(BaseModel):
    session_id: str
    seq: int
    role: str
    snippet: str
    title: str
    score: float
    tier: str


class Recalled(BaseModel):
    hits: list[Hit] = Field(description="Best match first.")


class Forgot(BaseModel):
    session_id: str
    forgotten: int = Field(description="Messages removed from both tiers, for good.")
    message_count: int = Field(description="Messages the session has left.")
    total_tokens: int


class SessionEntry(BaseModel):
    session_id: str
    user_id: str
    title: str
    status: str
    message_count: int
    total_tokens: int
    updated_at: float


class Sessions(BaseModel):
    sessions: list[SessionEntry] = Field(description="Most recently updated first.")


def one_line(text: str) -> str:
    return " ".join(text.split())


@contextlib.contextmanager
def tool_errors() -> Iterator[None]:
    """Expected errors reach the client as a tool error with their one-line message."""
    try:
        yield
    except HermesError as err:
        raise ToolError(one_line(str(err)) or type(err).__name__) from None


def missing(session_id: str) -> NotFoundError:
    """The library's own words for an unknown session (``SessionMemory.info``)."""
    return NotFoundError(f"no session {session_id}; see `hermes-redis session list`")


def render_context(ctx: MemoryContext) -> str:
    """The context as one text: parts in ``Context.as_chat`` order, messages tagged with role
    and seq so the model can name them (for ``forget``)."""
    blocks = []
    if ctx.memories:
        blocks.append("[system] " + memories_text(ctx.memories))
    blocks.extend(f"[{m.role} #{m.seq}] {m.content}" for m in ctx.opening)
    if ctx.summary:
        blocks.append("[system] " + summary_text(ctx.summary))
    if ctx.recalled:
        blocks.append("[system] " + recalled_text(ctx.recalled))
    blocks.extend(f"[{m.role} #{m.seq}] {m.content}" for m in ctx.messages)
    return "\n\n".join(blocks) if blocks else "(empty: the session has no messages yet)"


class _Scope:
    """Resolves the user a tool call may act for, and checks session ownership against it."""

    def __init__(self, mem: SessionMemory, user_id: UserScope) -> None:
        self.mem = mem
        self.user_id = user_id

    def user(self, ctx: Context | None) -> str | None:
        if not callable(self.user_id):
            return self.user_id
        request = None
        if ctx is not None:
            with contextlib.suppress(ValueError):  # outside a request: no HTTP request either
                request = ctx.request_context.request
        return self.user_id(request if isinstance(request, Request) else None)

    def own(self, session_id: str, user: str | None) -> None:
        """Raises as for a missing session unless ``user`` (when scoped) owns it."""
        if user is not None and self.mem.info(session_id).user_id != user:
            raise missing(session_id)

    def pick_user(self, asked: str | None, user: str | None) -> str | None:
        """The user a call names: the scope's own, or any when unscoped."""
        if user is not None and asked not in (None, user):
            raise ValidationError(f"this server is scoped to user {user!r}: leave user_id out")
        return user if user is not None else asked


def build_mcp(mem: SessionMemory, user_id: UserScope = None) -> MCPServer:
    """The MCP server with the hermes-redis tools over ``mem``, scoped to ``user_id``."""
    scope = _Scope(mem, user_id)
    server: MCPServer = MCPServer("hermes-redis", version=__version__, instructions=INSTRUCTIONS,
                                  log_level="WARNING")
    read_only = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
    writes = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
    destroys = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False,
                               open_world_hint=False)

    @server.tool(annotations=writes)
    def create_session(ctx: Context, user_id: str | None = None, title: str = "") -> CreatedSession:
        """Start a new, empty session and return its session_id. user_id says whose it is
        (default: the user this server is scoped to, else "default"); the title is set from
        the first user message when left empty."""
        with tool_errors():
            user = scope.pick_user(user_id, scope.user(ctx)) or "default"
            sid = mem.create_session(user_id=user, title=title)
            return CreatedSession(session_id=sid, user_id=user, title=mem.info(sid).title)

    @server.tool(annotations=writes)
    def append(ctx: Context, session_id: SessionId, role: Role, content: str) -> Appended:
        """Store one message at the end of an existing session (it creates nothing: an unknown
        session_id is an error). Returns its seq (the next number in the session) and its
        token_count. Append every user and assistant message as it is said."""
        with tool_errors():
            scope.own(session_id, scope.user(ctx))
            m = mem.append(session_id, role, content)
            return Appended(session_id=m.session_id, seq=m.seq, token_count=m.token_count,
                            message_id=m.message_id, created_at=m.created_at)

    @server.tool(annotations=read_only)
    def context(ctx: Context, session_id: SessionId, budget: Budget = None,
                query: Query = None) -> Annotated[CallToolResult, ContextResult]:
        """What the model should see now, as one text within the token budget: the whole session
        while it fits; past that, remembered facts, the opening turn, a summary of older turns,
        older messages recalled for the query, and the newest turns. Also says how much of the
        context window it uses."""
        with tool_errors():
            scope.own(session_id, scope.user(ctx))
            built = mem.context(session_id, budget, query=query)
        text = render_context(built)
        shape = context_shape(built)
        head = f"Token usage: {usage_line(built.tokens, built.window)} (budget {built.budget:,}); {shape}"
        result = ContextResult(session_id=session_id, text=text, chat=built.as_chat(), tokens=built.tokens,
                               budget=built.budget, window=built.window, usage=round(built.usage, 4),
                               shape=shape)
        return CallToolResult(content=[TextContent(type="text", text=f"{head}\n\n{text}")],
                              structured_content=result.model_dump(mode="json"))

    @server.tool(annotations=writes)
    def remember(ctx: Context, text: str, session_id: str | None = None,
                 user_id: str | None = None) -> Remembered:
        """Store a lasting fact about the user (a preference, a decision); every later context
        of that user's sessions includes it. The user is the server's scope, else user_id, else
        the owner of session_id (the session it was learnt in)."""
        with tool_errors():
            scoped = scope.user(ctx)
            user = scope.pick_user(user_id, scoped)
            if session_id is not None:
                scope.own(session_id, scoped)
                user = user or mem.info(session_id).user_id
            if user is None:
                raise ValidationError("say whose memory this is: give user_id or session_id")
            memory_id = mem.remember(user, text, session_id=session_id)
            return Remembered(memory_id=memory_id, user_id=user, session_id=session_id)

    @server.tool(annotations=read_only)
    def recall(ctx: Context, query: str, limit: Limit = 10, user_id: str | None = None) -> Recalled:
        """Full-text search over past messages (archived and not yet archived), best match
        first, each hit with its session_id, seq and a snippet. Only the scoped user's sessions
        (or user_id's, when given) are searched."""
        with tool_errors():
            user = scope.pick_user(user_id, scope.user(ctx))
            hits = mem.search(query, user_id=user, limit=limit)
            return Recalled(hits=[Hit(**h.as_dict()) for h in hits])

    @server.tool(annotations=read_only)
    def info(ctx: Context, session_id: SessionId) -> dict[str, Any]:
        """One session from both tiers: user, title, status, message_count, total_tokens,
        the context it would get now (tokens, window, usage, and a warning past 80%),
        turns, how far the summary reaches, hot/archived counts, TTL left, unarchived backlog."""
        with tool_errors():
            scope.own(session_id, scope.user(ctx))
            report = session_report(mem, session_id).as_dict()
        for key in ("redis_url", "archive_path", "backend", "encoding", "ttl_config"):
            report.pop(key, None)  # the deployment's, not the session's: not for a user's key
        return report

    @server.tool(annotations=destroys)
    def forget(ctx: Context, session_id: SessionId, last: LastTurns = None,
               keyword: Keyword = None) -> Forgot:
        """Remove messages from the session for good, from both tiers and from its summary.
        Give exactly one of last or keyword. Returns how many were forgotten."""
        with tool_errors():
            if (last is None) == (keyword is None):
                raise ValidationError("give exactly one of last (a number of turns) or keyword")
            scope.own(session_id, scope.user(ctx))
            if last is not None:
                n = mem.forget_last(session_id, last)
            else:
                assert keyword is not None
                n = mem.forget_keyword(session_id, keyword)
            left = mem.info(session_id)
            return Forgot(session_id=session_id, forgotten=n, message_count=left.message_count,
                          total_tokens=left.total_tokens)

    @server.tool(annotations=read_only)
    def list_sessions(ctx: Context,
                      status: Literal["active", "archived", "deleted", "all"] = "active",
                      limit: Limit = 20, user_id: str | None = None) -> Sessions:
        """Sessions, most recently updated first: to find one to continue."""
        with tool_errors():
            user = scope.pick_user(user_id, scope.user(ctx))
            infos = mem.list_sessions(user_id=user, status=status)[:limit]
            return Sessions(sessions=[
                SessionEntry(session_id=i.session_id, user_id=i.user_id, title=i.title,
                             status=i.status, message_count=i.message_count,
                             total_tokens=i.total_tokens, updated_at=i.updated_at)
                for i in infos])

    return server


class McpHttpApp:
    """The streamable-HTTP MCP endpoint as one ASGI app. It answers at whatever path it is
    routed to, stateless and in JSON (so it works behind several server workers). Its session
    manager must run while requests arrive: as the top-level app, ASGI lifespan runs it;
    routed inside another app, enter ``lifespan()`` from that app's lifespan."""

    def __init__(self, server: MCPServer, host: str = "127.0.0.1") -> None:
        # On a loopback host the SDK refuses other Host and Origin headers (DNS rebinding).
        server.streamable_http_app(stateless_http=True, json_response=True, host=host)
        self.server = server
        self.manager = server.session_manager

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        async with self.manager.run():
            yield

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._serve_lifespan(receive, send)
            return
        await self.manager.handle_request(scope, receive, send)

    async def _serve_lifespan(self, receive: Receive, send: Send) -> None:
        await receive()  # lifespan.startup
        async with self.lifespan():
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
        await send({"type": "lifespan.shutdown.complete"})


def mcp_asgi_app(mem: SessionMemory, user_id: UserScope = None, *, host: str = "127.0.0.1") -> McpHttpApp:
    """The MCP tools over streamable HTTP, for the HTTP server to route at ``/mcp``. ``host``
    is the address the server binds: on loopback, requests naming another Host are refused."""
    return McpHttpApp(build_mcp(mem, user_id), host=host)


def serve_stdio(mem: SessionMemory, user_id: str | None = None) -> None:
    """Serve the tools on stdin/stdout until the client closes them (or Ctrl-C)."""
    with contextlib.suppress(KeyboardInterrupt):
        build_mcp(mem, user_id).run("stdio")
