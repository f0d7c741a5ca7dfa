"""The HTTP API (``hermes-redis serve``): SessionMemory as JSON over HTTP, with API keys.

Every /v1 route calls the library and nothing below it (keys are checked in
``hermes_redis.store.api_keys``). This module composes the parts: ``auth`` (who is asking),
``errors`` (every failure as ``{"error": {"code", "message"}}``), ``guard`` (what a web page
may not do), ``offload`` (library calls off the event loop, with a bounded wait), ``schemas`` (the OpenAPI
shapes, derived from the core wire types), ``routes/`` (one router per noun), ``fast`` (the
append answered before FastAPI's stack), ``edge`` (body limit and timing), ``metrics`` and
``mcp`` (the MCP tools at /mcp, behind the same keys).
"""

import contextlib  # issue 34
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import APIRouter, FastAPI
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request

from hermes_redis import __version__
from hermes_redis.core import config as config_mod
from hermes_redis.core.config import Config
from hermes_redis.core.errors import HermesError  # issue 34
from hermes_redis.server import errors
from hermes_redis.server.auth import SERVER_LOG, Auth, AuthenticatedMcp
from hermes_redis.server.edge import Edge, Scope
from hermes_redis.server.fast import FastAppend
from hermes_redis.server.guard import Guard, loopback_name, names
from hermes_redis.server.metrics import Metrics
from hermes_redis.server.offload import Offload
from hermes_redis.server.replies import JSONReply
from hermes_redis.server.routes.context import ContextRoutes
from hermes_redis.server.routes.health import HealthRoutes
from hermes_redis.server.routes.memories import MemoryRoutes
from hermes_redis.server.routes.messages import MESSAGES, MessageRoutes
from hermes_redis.server.routes.search import SearchRoutes
from hermes_redis.server.routes.sessions import SessionRoutes
from hermes_redis.server.schemas import add_append_models
from hermes_redis.server.ui import install as install_console  # issue 32
from hermes_redis.session_memory import SessionMemory
from hermes_redis.store.api_keys import KeyStore

__all__ = ["HermesApp", "app_from_env", "create_app"]

DESCRIPTION = ("Session memory for AI agents: sessions, messages, context, persistent memories "
               'and search over HTTP. Errors are `{"error": {"code", "message"}}`.')


class HermesApp(FastAPI):
    """FastAPI, with the fast append path answered before FastAPI's own middleware stack
    (error, telemetry and body-limit layers, exception middleware, router): ``front`` is an
    Edge that times it and enforces the body limit like every other request (None: every
    request goes through FastAPI). Every other request passes an inner Edge alike."""

    def __init__(self, *, fast: FastAppend | None, max_body: int, metrics: Metrics,
                 guard: Guard, retry_after: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_middleware(Edge, max_body=max_body, metrics=metrics,  # type: ignore[arg-type]
                            guard=guard, retry_after=retry_after)
        if guard.origins:  # CORS headers for the configured origins only (none by default)
            self.add_middleware(CORSMiddleware, allow_origins=sorted(guard.origins),
                                allow_methods=["*"], allow_headers=["authorization",
                                                                    "content-type"])
        self.front: Edge | None = (None if fast is None else
                                   Edge(self, max_body, metrics, fast,  # type: ignore[arg-type]
                                        guard, retry_after))

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Any]],
                       send: Callable[[Any], Awaitable[None]]) -> None:
        front = self.front
        if front is not None and front.fast is not None and scope["type"] == "http":
            sid = front.fast.match(scope)
            if sid is not None:
                scope["hermes.fast"] = sid
                await front(scope, receive, send)
                return
        await super().__call__(scope, receive, send)  # type: ignore[arg-type]

    def openapi(self) -> dict[str, Any]:
        """FastAPI's schema plus the append body's models (not function parameters)."""
        if self.openapi_schema is None:
            add_append_models(super().openapi())
        assert self.openapi_schema is not None
        return self.openapi_schema


def _route(router: APIRouter, method: str, path: str) -> Any:
    return next(r for r in router.routes if getattr(r, "path", "") == path
                and method in getattr(r, "methods", ()))


@contextlib.asynccontextmanager
async def _lifespan(mcp_app: Any, auth: Auth) -> AsyncIterator[None]:  # issue 34
    """MCP's session manager for the app's life; at startup, a log line saying whether auth
    is on and how many keys exist (``Auth.announce``)."""
    try:
        auth.announce()
    except HermesError as err:  # the archive away at startup: /readyz says so; serve anyway
        SERVER_LOG.warning("could not count the API keys: %s", err)
    if mcp_app is None:
        yield
        return
    async with mcp_app.lifespan():
        yield


def create_app(config: Config | None = None, *, require_keys: bool | None = None,
               mem: SessionMemory | None = None) -> FastAPI:
    """The ASGI app over one SessionMemory. ``require_keys`` (default: the configured host is
    not loopback) refuses keyless requests even when no key exists."""
    config = config or config_mod.load()
    mem = mem or SessionMemory(config)
    keys = KeyStore(mem.cold)
    server = config.server
    auth = Auth(keys, not loopback_name(server.host) if require_keys is None else require_keys)
    guard = Guard(loopback_name(server.host), names(server.allowed_hosts),
                  names(server.allowed_origins))
    offload = Offload(server.backend_timeout)
    metrics = Metrics(mem)
    mcp_app = _mcp_app(mem, server.host, offload)
    messages = MessageRoutes(mem, offload)
    routers = [SessionRoutes(mem, offload).router(), messages.router(),
               ContextRoutes(mem, offload).router(), MemoryRoutes(mem, offload).router(),
               SearchRoutes(mem, offload).router(), HealthRoutes(mem, offload, metrics).router()]
    # with CORS configured every answer passes its middleware, so none takes the fast path
    fast = (None if guard.origins else
            FastAppend(auth, messages.append_body, _route(routers[1], "POST", MESSAGES), offload))
    app = HermesApp(fast=fast, max_body=server.max_body_bytes, metrics=metrics, guard=guard,
                    retry_after=offload.retry_after,
                    title="hermes-redis", version=__version__, description=DESCRIPTION,
                    openapi_url="/openapi.json", docs_url="/docs", redoc_url=None,
                    lifespan=lambda _app: _lifespan(mcp_app, auth),  # issue 34
                    default_response_class=JSONReply)
    app.state.mem, app.state.keys, app.state.auth = mem, keys, auth
    app.state.offload = offload
    errors.install(app)
    for router in routers:
        app.include_router(router)
    # Starlette serves a callable object as a raw ASGI app; its stubs only know endpoints
    app.add_route("/mcp", AuthenticatedMcp(mcp_app, auth) if mcp_app else _no_mcp,  # type: ignore[arg-type]
                  methods=["GET", "POST", "DELETE"], include_in_schema=False)
    install_console(app)  # issue 32: /ui and the offline /docs
    return app


def _mcp_app(mem: SessionMemory, host: str, offload: Offload) -> Any:
    """The MCP tools' ASGI app; None without the ``mcp`` extra (issue 41: Hermes Agent pins
    mcp 1.26, so the MCP server stack is an extra and the rest of the server runs without it)."""
    try:
        from hermes_redis.server.mcp import mcp_asgi_app
    except ImportError:
        return None
    return mcp_asgi_app(mem, user_id=lambda request: request.state.user_id if request else None,
                        host=host, offload=offload)


async def _no_mcp(request: Request) -> JSONReply:
    return JSONReply(errors.error_body("not_implemented", MCP_MISSING), status_code=501)


MCP_MISSING = ("this server has no MCP tools: install the mcp extra "
               "(pip install 'hermes-redis[mcp]') and restart it")


def app_from_env() -> FastAPI:
    """Factory for uvicorn (``--workers N`` imports it in each worker): the config named by
    $HERMES_CONFIG, with the $HERMES_SERVER_* overrides the CLI set."""
    return create_app(config_mod.load(os.environ.get("HERMES_CONFIG") or None))
