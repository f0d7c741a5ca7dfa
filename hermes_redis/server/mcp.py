"""MCP tools over one ``SessionMemory``: ``hermes-redis mcp`` serves them over stdio, and the
HTTP server mounts ``mcp_asgi_app`` at ``/mcp`` (streamable HTTP).

The tools are thin: each validates through the library and returns what it returned. Two
guarantees hold for every tool: a ``HermesError`` becomes a tool error (``isError``) carrying
its one-line message and never a traceback, and under a user scope another user's session is
reported exactly as a missing one, so a caller cannot even learn that it exists.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Annotated, Any, ClassVar, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from hermes_redis import __version__
from hermes_redis.cli.render import context_shape, progress_line, session_report, usage_line
from hermes_redis.core.errors import HermesError, ValidationError
from hermes_redis.core.models import (
    ROLES,
    Memory,
    Message,
    SessionInfo,
    memories_text,
    recalled_text,
    summary_text,
)
from hermes_redis.core.models import Context as MemoryContext
from hermes_redis.server.errors import ApiError, public_message
from hermes_redis.server.offload import Offload
from hermes_redis.server.routes.common import full_id  # issue 34
from hermes_redis.server.schemas import HitOut, wire_model
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
LastTurns = Annotated[int | None, Field(  # issue 35: strict, so true is not taken as 1
    strict=True, description="Forget the last N turns (a turn is a user message and what follows it).")]
Keyword = Annotated[str | None, Field(description="Forget every message containing this (case-insensitive).")]
Limit = Annotated[int, Field(ge=1, le=200, description="At most this many.")]


@wire_model(SessionInfo, only=("session_id", "user_id", "title"),
            docs={"session_id": "Pass this to every other tool."})
class CreatedSession(BaseModel):
    """A new session."""


@wire_model(Message, only=("session_id", "seq", "token_count", "message_id", "created_at"), docs={
    "seq": "Position in the session: 1 for the first message, then +1.",
    "token_count": "Tokens this message costs in the context.",
    "created_at": "Unix seconds."})
class Appended(BaseModel):
    """A stored message, without its text."""


class ContextResult(BaseModel):
    session_id: str
    text: str = Field(description="The context as one text, in the order the model should read it.")
    chat: list[dict[str, str]] = Field(description="The same as OpenAI-style chat messages.")
    tokens: int = Field(description="Tokens the context uses; never more than budget.")
    budget: int
    window: int = Field(description="The model's context window.")
    usage: float = Field(description="tokens / window, 0..1.")
    shape: str = Field(description="What the context is made of, e.g. 'summary + 20 newest from #230'.")
    parts: dict[str, int] = Field(description="Tokens of each part: memories, opening, summary, "  # issue 30
                                  "recalled, newest.")
    archived_through: int = Field(description="The archive holds every message up to this seq.")
    summarized_through: int = Field(description="The summary covers messages up to this seq.")
    extracted_through: int = Field(description="Memories were extracted up to this seq (0: off).")


@wire_model(Memory, only=("memory_id", "user_id", "session_id"))
class Remembered(BaseModel):
    """A stored memory, without its text."""


class Recalled(BaseModel):
    hits: list[HitOut] = Field(description="Best match first.")


class Forgot(BaseModel):
    session_id: str
    forgotten: int = Field(description="Messages removed from both tiers, for good.")
    message_count: int = Field(description="Messages the session has left.")
    total_tokens: int


@wire_model(SessionInfo, only=("session_id", "user_id", "title", "parent_session_id",
                               "forked_at_seq", "message_count"), docs={  # issue 30
    "session_id": "The new session: pass this to every other tool.",
    "parent_session_id": "The session it continues or was forked from.",
    "forked_at_seq": "A fork: it holds copies of the parent's messages up to this seq."})
class StartedSession(BaseModel):
    """A session started from another (continue_session, fork_session)."""


AtSeq = Annotated[int | None, Field(strict=True, description=(  # issue 30
    "Copy the history up to this seq (default: all of it)."))]


@wire_model(SessionInfo, only=("session_id", "user_id", "title", "status", "message_count",
                               "total_tokens", "updated_at", "parent_session_id"))
class SessionEntry(BaseModel):
    """A session in a listing."""


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
        raise ToolError(one_line(public_message(err, "mcp")) or type(err).__name__) from None


def render_context(ctx: MemoryContext) -> str:
    """The context as one text: parts in ``Context.as_chat`` order, messages tagged with role
    and seq so the model can name them (for ``forget``)."""
    blocks = []
    if ctx.memories:
        blocks.append("[system] " + memories_text(ctx.memories))
    blocks.extend(f"[{m.role} #{m.seq}] {m.content}" for m in ctx.opening)
    if ctx.summary:
        blocks.append("[system] " + summary_text(ctx.summary))
    turn = ctx.turn_start  # issue 30: the recalled excerpts just before the newest turn
    blocks.extend(f"[{m.role} #{m.seq}] {m.content}" for m in ctx.messages[:turn])
    if ctx.recalled:
        blocks.append("[system] " + recalled_text(ctx.recalled))
    blocks.extend(f"[{m.role} #{m.seq}] {m.content}" for m in ctx.messages[turn:])
    return "\n\n".join(blocks) if blocks else "(empty: the session has no messages yet)"


def bounded(tool: Callable[..., Any], offload: Offload) -> Callable[..., Any]:
    """``tool`` run in the HTTP server's pool with its bounded wait (issue 35): past
    ``server.backend_timeout`` the call is a tool error, as a route's is a 503. Same
    signature, so the SDK reads the same parameters and still passes the Context."""

    @functools.wraps(tool)
    async def call(*args: Any, **kwargs: Any) -> Any:
        try:
            # in the caller's context, as the SDK's own thread hop runs a sync tool
            return await offload(contextvars.copy_context().run, tool, *args, **kwargs)
        except ApiError as err:
            raise ToolError(err.message) from None

    return call


READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
DESTROYS = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False,
                           open_world_hint=False)


ToolHints = Mapping[str, ToolAnnotations]  # tool (method) name -> its hints to the client


class Tools:
    """A group of tools over one SessionMemory: ``TOOLS`` names its methods that are tools
    (in the order clients list them) and their hints. Every call resolves the user it may
    act for (``user``) and checks session ownership against it (``own``)."""

    TOOLS: ClassVar[ToolHints] = {}

    def __init__(self, mem: SessionMemory, user_id: UserScope) -> None:
        self.mem = mem
        self.user_id = user_id

    def register(self, server: MCPServer, offload: Offload | None = None) -> None:
        for name, hints in self.TOOLS.items():
            tool = getattr(self, name)
            server.add_tool(bounded(tool, offload) if offload else tool, annotations=hints)

    def user(self, ctx: Context | None) -> str | None:
        if not callable(self.user_id):
            return self.user_id
        request = None
        if ctx is not None:
            with contextlib.suppress(ValueError):  # outside a request: no HTTP request either
                request = ctx.request_context.request
        return self.user_id(request if isinstance(request, Request) else None)

    def own(self, session_id: str, user: str | None) -> str:
        """The full id of the session ``session_id`` names (itself, or a unique prefix of one
        of ``user``'s sessions when scoped, of any when not: issue 34); raises as for a
        missing session unless ``user`` owns it, and AmbiguousIdError for a shared prefix."""
        return full_id(self.mem, user, session_id)

    def pick_user(self, asked: str | None, user: str | None) -> str | None:
        """The user a call names: the scope's own, or any when unscoped."""
        if user is not None and asked not in (None, user):
            raise ValidationError(f"this server is scoped to user {user!r}: leave user_id out")
        return user if user is not None else asked


class ConversationTools(Tools):
    """Start a session, append to it, and get the context to send the model."""

    TOOLS: ClassVar[ToolHints] = {"create_session": WRITES, "append": WRITES, "context": READ_ONLY}

    def create_session(self, ctx: Context, user_id: str | None = None,
                       title: str = "") -> CreatedSession:
        """Start a new, empty session and return its session_id. user_id says whose it is
        (default: the user this server is scoped to, else "default"); the title is set from
        the first user message when left empty."""
        with tool_errors():
            user = self.pick_user(user_id, self.user(ctx)) or "default"
            sid = self.mem.create_session(user_id=user, title=title)
            return CreatedSession.model_validate(self.mem.info(sid), from_attributes=True)

    def append(self, ctx: Context, session_id: SessionId, role: Role, content: str) -> Appended:
        """Store one message at the end of an existing session (it creates nothing: an unknown
        session_id is an error). Returns its seq (the next number in the session) and its
        token_count. Append every user and assistant message as it is said."""
        with tool_errors():
            sid = self.own(session_id, self.user(ctx))
            stored = self.mem.append(sid, role, content)
            return Appended.model_validate(stored, from_attributes=True)

    def context(self, ctx: Context, session_id: SessionId, budget: Budget = None,
                query: Query = None) -> Annotated[CallToolResult, ContextResult]:
        """What the model should see now, as one text within the token budget: the whole session
        while it fits; past that, remembered facts, the opening turn, a summary of older turns,
        older messages recalled for the query, and the newest turns. Also says how much of the
        context window it uses."""
        with tool_errors():
            session_id = self.own(session_id, self.user(ctx))
            built = self.mem.context(session_id, budget, query=query)
        text = render_context(built)
        shape = context_shape(built)
        head = (f"Token usage: {usage_line(built.tokens, built.window)} "
                f"(budget {built.budget:,}); {shape}; workers: {progress_line(built)}")  # issue 30
        result = ContextResult(session_id=session_id, text=text, chat=built.as_chat(),
                               tokens=built.tokens, budget=built.budget, window=built.window,
                               usage=round(built.usage, 4), shape=shape,
                               parts=built.parts, archived_through=built.archived_through,  # issue 30
                               summarized_through=built.summarized_through,
                               extracted_through=built.extracted_through)
        return CallToolResult(content=[TextContent(type="text", text=f"{head}\n\n{text}")],
                              structured_content=result.model_dump(mode="json"))


class MemoryTools(Tools):
    """Lasting facts about the user, and search over past messages."""

    TOOLS: ClassVar[ToolHints] = {"remember": WRITES, "recall": READ_ONLY}

    def remember(self, ctx: Context, text: str, session_id: str | None = None,
                 user_id: str | None = None) -> Remembered:
        """Store a lasting fact about the user (a preference, a decision); every later context
        of that user's sessions includes it. The user is the server's scope, else user_id, else
        the owner of session_id (the session it was learnt in)."""
        with tool_errors():
            scoped = self.user(ctx)
            user = self.pick_user(user_id, scoped)
            if session_id is not None:
                session_id = self.own(session_id, scoped)
                user = user or self.mem.info(session_id).user_id
            if user is None:
                raise ValidationError("say whose memory this is: give user_id or session_id")
            memory_id = self.mem.remember(user, text, session_id=session_id)
            return Remembered.model_validate({"memory_id": memory_id, "user_id": user,
                                              "session_id": session_id})

    def recall(self, ctx: Context, query: str, limit: Limit = 10,
               user_id: str | None = None) -> Recalled:
        """Full-text search over past messages (archived and not yet archived), best match
        first, each hit with its session_id, seq and a snippet. Only the scoped user's sessions
        (or user_id's, when given) are searched."""
        with tool_errors():
            user = self.pick_user(user_id, self.user(ctx))
            hits = self.mem.search(query, user_id=user, limit=limit)
            return Recalled(hits=[HitOut.model_validate(h, from_attributes=True) for h in hits])


class SessionTools(Tools):
    """Look at a session, forget part of it, and find sessions."""

    TOOLS: ClassVar[ToolHints] = {"info": READ_ONLY, "forget": DESTROYS, "list_sessions": READ_ONLY,
                                  "continue_session": WRITES, "fork_session": WRITES}  # issue 30

    def info(self, ctx: Context, session_id: SessionId) -> dict[str, Any]:
        """One session from both tiers: user, title, status, message_count, total_tokens,
        the context it would get now (tokens, window, usage, and a warning past 80%),
        turns, how far the summary reaches, hot/archived counts, TTL left, unarchived backlog."""
        with tool_errors():
            report = session_report(self.mem, self.own(session_id, self.user(ctx))).as_dict()
        for key in ("redis_url", "archive_path", "backend", "encoding", "ttl_config"):
            report.pop(key, None)  # the deployment's, not the session's: not for a user's key
        return report

    def forget(self, ctx: Context, session_id: SessionId, last: LastTurns = None,
               keyword: Keyword = None) -> Forgot:
        """Remove messages from the session for good, from both tiers and from its summary.
        Give exactly one of last or keyword. Returns how many were forgotten."""
        with tool_errors():
            if (last is None) == (keyword is None):
                raise ValidationError("give exactly one of last (a number of turns) or keyword")
            session_id = self.own(session_id, self.user(ctx))
            if last is not None:
                n = self.mem.forget_last(session_id, last)
            else:
                assert keyword is not None
                n = self.mem.forget_keyword(session_id, keyword)
            left = self.mem.info(session_id)
            return Forgot(session_id=session_id, forgotten=n, message_count=left.message_count,
                          total_tokens=left.total_tokens)

    def list_sessions(self, ctx: Context,
                      status: Literal["active", "archived", "deleted", "all"] = "active",
                      limit: Limit = 20, user_id: str | None = None) -> Sessions:
        """Sessions, most recently updated first: to find one to continue."""
        with tool_errors():
            user = self.pick_user(user_id, self.user(ctx))
            infos = self.mem.list_sessions(user_id=user, status=status)[:limit]
            return Sessions(sessions=[SessionEntry.model_validate(i, from_attributes=True)
                                      for i in infos])


    def continue_session(self, ctx: Context, session_id: SessionId) -> StartedSession:
        """Start a new session that carries this one's thread: its first message holds this
        session's summary and where it left off. Use it instead of an empty create_session
        when the next task follows on from this one."""
        with tool_errors():
            session_id = self.own(session_id, self.user(ctx))
            new_sid = self.mem.continue_session(session_id)
            return StartedSession.model_validate(self.mem.info(new_sid), from_attributes=True)

    def fork_session(self, ctx: Context, session_id: SessionId,
                     at_seq: AtSeq = None) -> StartedSession:
        """Start a new session holding a copy of this one's messages up to at_seq (default:
        all), to try another way from that point; what is later said or forgotten in either
        session never shows in the other."""
        with tool_errors():
            session_id = self.own(session_id, self.user(ctx))
            new_sid = self.mem.fork(session_id, at_seq)
            return StartedSession.model_validate(self.mem.info(new_sid), from_attributes=True)


def build_mcp(mem: SessionMemory, user_id: UserScope = None,
              offload: Offload | None = None) -> MCPServer:
    """The MCP server with the hermes-redis tools over ``mem``, scoped to ``user_id``; with
    ``offload`` (the HTTP server's), each call waits at most ``server.backend_timeout``."""
    server: MCPServer = MCPServer("hermes-redis", version=__version__, instructions=INSTRUCTIONS,
                                  log_level="WARNING")
    for group in (ConversationTools, MemoryTools, SessionTools):
        group(mem, user_id).register(server, offload)
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


def mcp_asgi_app(mem: SessionMemory, user_id: UserScope = None, *, host: str = "127.0.0.1",
                 offload: Offload | None = None) -> McpHttpApp:
    """The MCP tools over streamable HTTP, for the HTTP server to route at ``/mcp``. ``host``
    is the address the server binds: on loopback, requests naming another Host are refused.
    ``offload``: the server's pool and bounded wait for every tool call."""
    return McpHttpApp(build_mcp(mem, user_id, offload), host=host)


def serve_stdio(mem: SessionMemory, user_id: str | None = None) -> None:
    """Serve the tools on stdin/stdout until the client closes them (or Ctrl-C)."""
    with contextlib.suppress(KeyboardInterrupt):
        build_mcp(mem, user_id).run("stdio")
