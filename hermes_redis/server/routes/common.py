"""What every noun's routes share: the SessionMemory they serve, the pool their library calls
run in (``offload``), and a session's info reply.

Endpoints are methods of a ``Routes`` object that holds the memory, so no request pays for
looking it up. Every endpoint that calls the library runs in ``offload``'s pool with a bounded
wait (``off``), never on the event loop: a stalled Redis or archive answers 503 after
``server.backend_timeout`` and holds no other request (issue 35).

A session id in a path (or an MCP tool's argument) may be a unique prefix of one, as in the
CLI (``full_id``, issue 34): among the caller's own sessions only.
"""

from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from fastapi import APIRouter

from hermes_redis.core.errors import AmbiguousIdError, NotFoundError
from hermes_redis.core.models import check_session_id
from hermes_redis.server.auth import Principal, not_found
from hermes_redis.server.offload import Offload
from hermes_redis.server.replies import JSONReply
from hermes_redis.session_memory import SessionMemory

P = ParamSpec("P")
T = TypeVar("T")


def full_id(mem: SessionMemory, user_id: str | None, sid: str) -> str:
    """The session ``sid`` names for a caller scoped to ``user_id`` (None: every user):
    ``sid`` itself when it is a session the caller may see, else the caller's one session
    whose id starts with ``sid``. A prefix only another user's session has is the very
    NotFoundError an unknown id gets; an ambiguous one is AmbiguousIdError (409) naming and
    counting the caller's own candidates only. An exact id costs one cached owner lookup."""
    try:
        owner: str | None = mem.user_of(sid)
    except NotFoundError:
        owner = None
    if owner is not None and (user_id is None or owner == user_id):
        return sid
    try:
        # issue 34: the tiers' resolve, scoped to the caller (SessionAPI.resolve is not)
        return mem.maintainer.read.resolve(check_session_id(sid), user_id)
    except NotFoundError:
        raise not_found(sid) from None
    except AmbiguousIdError as err:
        raise AmbiguousIdError(str(err).replace("; type more", "; send more of the id")) from None


class Routes:
    """One noun's routes over ``mem``; ``router()`` lists them with their paths and schemas."""

    def __init__(self, mem: SessionMemory, offload: Offload) -> None:
        self.mem, self.offload = mem, offload

    def router(self) -> APIRouter:
        raise NotImplementedError

    def off(self, endpoint: Callable[P, T], extra: float = 0.0) -> Callable[P, Awaitable[T]]:
        """``endpoint`` run in the pool, answered 503 past the bounded wait (+ ``extra`` s)."""
        return self.offload.route(endpoint, extra)

    def sid(self, p: Principal, session_id: str) -> str:
        """The full id of the caller's session ``session_id`` names (``full_id``)."""
        return full_id(self.mem, p.user_id, session_id)

    def info_reply(self, sid: str, status_code: int = 200) -> JSONReply:
        """The session's info from both tiers, as ``SessionOut``."""
        return JSONReply(self.mem.info(sid).as_dict(), status_code=status_code)
