"""The fast append path: ``POST /v1/sessions/{session_id}/messages`` answered straight from
the ASGI layer, with the same auth, handler and error bodies as the FastAPI route (which
stays, for the schema), without Starlette's routing and FastAPI's dependency solving and
exception middleware, which cost more than the rest of the HTTP layer (docs/http.md)."""

import re
from collections.abc import Callable
from typing import Any

from hermes_redis.server.auth import Auth, Principal
from hermes_redis.server.edge import Receive, Scope, Send
from hermes_redis.server.errors import error_reply
from hermes_redis.server.offload import Offload
from hermes_redis.server.replies import send_json

AppendHandler = Callable[[Principal, str, bytes, Any], tuple[int, Any]]


class Flags:
    """Per-request state the append handler sets (``too_large``); ``request.state`` in a
    FastAPI route, one of these on the fast path."""

    too_large = False


class FastAppend:
    """The fast path of one app: ``auth`` checks the key, ``handle`` (the FastAPI route's own
    handler) does the work in ``offload``'s pool, and ``route`` (the FastAPI route) names the
    request in /metrics."""

    PATH = re.compile(r"/v1/sessions/([^/]+)/messages")

    def __init__(self, auth: Auth, handle: AppendHandler, route: Any, offload: Offload) -> None:
        self.auth, self.handle, self.route, self.offload = auth, handle, route, offload

    def match(self, scope: Scope) -> str | None:
        """The session id of a request this path answers, else None."""
        if scope.get("method") != "POST" or scope.get("root_path"):
            return None
        found = self.PATH.fullmatch(scope.get("path", ""))
        return found.group(1) if found else None

    async def __call__(self, scope: Scope, sid: str, receive: Receive, send: Send) -> None:
        header = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"authorization"),
                      None)
        flags = Flags()
        try:
            who = await self.auth.caller(header, self.offload)
            chunks = []
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    break
            status, content = await self.offload(self.handle, who, sid, b"".join(chunks), flags)
        except Exception as err:
            status, content = error_reply(err, flags.too_large, f"POST {scope.get('path')}")
        await send_json(send, status, content)
