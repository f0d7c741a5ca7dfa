"""Who is asking: bearer API keys, a user key scoped to its user, and the keyless mode.

With no key in the archive the server is open, and answers loopback only (the CLI refuses
to listen elsewhere; ``require_keys`` refuses keyless requests even on loopback). A user
key sees only its user's data: another user's session answers 404 with the very text an
unknown id gets, so the answer does not reveal that it exists. An admin key sees all.
"""

import hashlib
import logging
import time
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request

from hermes_redis.core.errors import NotFoundError
from hermes_redis.server.errors import SESSIONS_HINT, ApiError, error_reply  # issue 34
from hermes_redis.server.offload import Offload
from hermes_redis.server.replies import send_json
from hermes_redis.session_memory import SessionMemory
from hermes_redis.store.api_keys import KeyStore

# issue 34: whether auth is on, at INFO, in the server's own log (uvicorn's, which `serve`
# prints at INFO; a host that does not configure uvicorn's loggers shows WARNING and above).
SERVER_LOG = logging.getLogger("uvicorn.error").getChild("hermes_redis")
log = SERVER_LOG

KEY_CACHE_SECONDS = 1.0  # how long a checked key is trusted (revocation delay)
MAX_TRUSTED_KEYS = 4096


def not_found(sid: str) -> NotFoundError:
    """What an unknown session (or id prefix) answers; another user's looks the same. The hint
    fits an HTTP or MCP caller, not the CLI (issue 34)."""
    return NotFoundError(f"no session {sid}; {SESSIONS_HINT}")


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

    def owned(self, mem: SessionMemory, sid: str) -> str:
        """``sid`` when this caller may see it; another user's session is not found."""
        if self.user_id is not None and mem.user_of(sid) != self.user_id:
            raise not_found(sid)
        return sid


OPEN = Principal(None, None)


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
        self._keyed: bool | None = None  # issue 34: what was last logged (None: nothing yet)

    def announce(self) -> int:
        """Log at INFO whether auth is on and how many keys exist (issue 34: at startup);
        the number of active keys."""
        active = self.keys.active()
        self._keyed = active != 0
        if active:
            log.info("auth is on: %d active API key%s; /v1 and /mcp need Authorization: "
                     "Bearer <key>", active, "" if active == 1 else "s")
        elif self.require_keys:
            log.info("auth is on: no API keys yet, so every request is refused until "
                     "`hermes-redis key create` makes one")
        else:
            log.info("no API keys: keyless, on loopback only; the first `hermes-redis key "
                     "create` turns auth on")
        return active

    async def __call__(self, request: Request) -> Principal:
        return await self.caller(request.headers.get("authorization"), request.app.state.offload)

    async def caller(self, header: str | None, offload: Offload) -> Principal:
        """``principal(header)``, asking the archive in ``offload``'s pool when it must (a key
        not trusted yet), so a slow archive never stalls the event loop."""
        who = self.cached(header)
        return who if who is not None else await offload(self.principal, header)

    def cached(self, header: str | None) -> Principal | None:
        """The caller, when known without asking the archive (a trusted key, the open mode
        within its ttl); None when the archive must be asked."""
        now = time.monotonic()
        if header is None:
            return OPEN if not self.require_keys and now < self._open_until else None
        scheme, _, token = header.partition(" ")
        trusted = self._trusted.get(hashlib.sha256(token.strip().encode("utf-8")).digest())
        return trusted[1] if scheme.lower() == "bearer" and trusted and now < trusted[0] else None

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
        active = self.keys.active()
        if (active != 0) != self._keyed and self._keyed is not None:  # issue 34: it changed
            log.info("auth is on: %d active API key%s now; keyless requests are refused"
                     if active else "no active API keys any more: keyless, on loopback only",
                     *((active, "" if active == 1 else "s") if active else ()))
        self._keyed = active != 0
        if active != 0:
            return False
        self._open_until = now + self.ttl
        return True


async def caller(request: Request) -> Principal:
    """The caller of a /v1 request, by the app's ``Auth`` (``app.state.auth``)."""
    auth: Auth = request.app.state.auth
    return await auth.caller(request.headers.get("authorization"), request.app.state.offload)


Who = Annotated[Principal, Depends(caller)]


class AuthenticatedMcp:
    """/mcp behind the same keys as /v1: no valid key is a 401 before MCP sees the request,
    and each tool call is scoped to the key's user (``scope["state"]["user_id"]``). A class,
    not a function: Starlette routes a callable object as a raw ASGI app."""

    def __init__(self, mcp_app: Any, auth: Auth) -> None:
        self.mcp_app, self.auth = mcp_app, auth

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            who = await self.auth(Request(scope, receive))
        except ApiError as err:
            await send_json(send, *error_reply(err))
            return
        scope.setdefault("state", {})["user_id"] = who.user_id
        await self.mcp_app(scope, receive, send)
