"""The outermost layer of every HTTP request: the Host, Origin and Content-Type checks
(``guard``), the body limit, ``Retry-After`` on every 503, and the timing for /metrics."""

import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from hermes_redis.server.errors import ApiError, error_reply
from hermes_redis.server.guard import Guard
from hermes_redis.server.metrics import Metrics
from hermes_redis.server.replies import send_json

if TYPE_CHECKING:
    from hermes_redis.server.fast import FastAppend

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Any]]
Send = Callable[[Any], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# issue 44: the console and /docs load only their own files (no inline script, style or
# handler; data: only for images) and no page may frame them (clickjacking)
CSP = (b"default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
       b"form-action 'self'; frame-ancestors 'none'")
FRAME_HEADERS = ((b"content-security-policy", CSP), (b"x-frame-options", b"DENY"))


def framed_path(path: str) -> bool:
    """The browser pages: /ui (and under it) and /docs (and under it)."""
    return any(path == p or path.startswith(p + "/") for p in ("/ui", "/docs"))


class Edge:
    """Pure ASGI middleware: refuses what ``guard`` refuses (a foreign Host, a web page's
    write), bodies over ``max_body`` with 413 (by Content-Length, and by counting a streamed
    body), adds ``Retry-After: retry_after`` to a 503, and times every request for /metrics.
    With ``fast``, a request the app matched for the fast path (``scope["hermes.fast"]``)
    goes there."""

    def __init__(self, app: ASGIApp, max_body: int, metrics: Metrics,
                 fast: "FastAppend | None" = None, guard: Guard | None = None,
                 retry_after: int = 1) -> None:
        self.app, self.max_body, self.metrics, self.fast = app, max_body, metrics, fast
        self.guard = guard or Guard(loopback=False)
        self.retry_after = str(retry_after).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500
        started = False
        page = framed_path(str(scope.get("path", "")))

        async def send_status(message: Any) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                status, started = message["status"], True
                message = self._headed(message, page)
            await send(message)

        headers = scope.get("headers") or []
        length = dict(headers).get(b"content-length")
        try:
            refused = self.guard.refusal(scope.get("method", ""), headers,
                                         console=str(scope.get("path", "")).startswith("/ui/"))
            if refused is not None:
                await send_json(send_status, *error_reply(refused))
                return
            if length is not None and length.isdigit() and int(length) > self.max_body:
                await send_json(send_status, *error_reply(self._too_large(int(length))))
                return
            seen = 0

            async def counted() -> Any:
                nonlocal seen
                message = await receive()
                if message["type"] == "http.request":
                    seen += len(message.get("body", b""))
                    if seen > self.max_body:  # FastAPI turns this into a 400: say why
                        err = self._too_large(seen)
                        scope["hermes.too_large"] = err.message
                        raise err
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
                await send_json(send_status, *error_reply(err))
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            self.metrics.observe(scope.get("method", ""), template, status,
                                 time.perf_counter() - start)

    def _headed(self, start: Any, page: bool) -> Any:
        """A response start with what the edge adds: ``Retry-After`` on a 503 that has none,
        the anti-framing headers on a console or docs page."""
        if start["status"] != 503 and not page:
            return start  # the usual answer: nothing to add, nothing copied
        headers = list(start.get("headers") or ())
        if start["status"] == 503 and not any(k.lower() == b"retry-after" for k, _ in headers):
            headers.append((b"retry-after", self.retry_after))
        if page:
            headers.extend(FRAME_HEADERS)
        return {**start, "headers": headers}

    def _too_large(self, size: int) -> ApiError:
        return ApiError(413, "too_large", f"request body is {size} bytes or more, over the "
                        f"limit of {self.max_body} (server.max_body_bytes): send less per request")
