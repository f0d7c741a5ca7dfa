"""/v1/memories: a user's persistent memories (remember, list or find, forget)."""

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse, Response

from hermes_redis.core.errors import ValidationError
from hermes_redis.server.auth import Who
from hermes_redis.server.replies import JSONReply
from hermes_redis.server.routes.common import Routes
from hermes_redis.server.schemas import (
    ERROR_RESPONSES,
    MAX_PAGE,
    MemoriesOut,
    MemoryIn,
    MemoryOut,
)


class MemoryRoutes(Routes):
    def router(self) -> APIRouter:
        r = APIRouter(tags=["memories"], responses=ERROR_RESPONSES)
        r.post("/v1/memories", status_code=201, response_model=MemoryOut)(self.off(self.remember))
        r.get("/v1/memories", response_model=MemoriesOut)(self.off(self.memories))
        r.delete("/v1/memories/{memory_id}", status_code=204)(self.off(self.forget_memory))
        return r

    def remember(self, body: MemoryIn, p: Who) -> JSONResponse:
        user = p.user(body.user_id)
        if user is None:
            raise ValidationError("user_id is required with an admin key: say whose memory it is")
        sid = None if body.session_id is None else self.sid(p, body.session_id)  # issue 34
        memory_id = self.mem.remember(user, body.text, session_id=sid)
        stored = self.mem.cold.memory(memory_id)
        assert stored is not None
        return JSONReply(stored.as_dict(), status_code=201)

    def memories(self, p: Who, user_id: str | None = None, query: str | None = None,
                 limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
                 superseded: bool = False) -> JSONResponse:
        """The user's current persistent memories, oldest first (``superseded``: with the
        ones newer memories replaced); with ``query``, those sharing a distinctive word with
        it, best first."""
        user = p.user(user_id)
        if user is None:
            raise ValidationError("user_id is required with an admin key: say whose memories")
        rows = self.mem.memories(user, query=query if query and query.strip() else None,
                                 superseded=superseded)
        return JSONReply({"memories": [m.as_dict() for m in rows[:limit]]})

    def forget_memory(self, memory_id: str, p: Who, user_id: str | None = None) -> Response:
        """``user_id``: only that user's memory (another's answers 404, as a missing one)."""
        self.mem.forget_memory(memory_id, user_id=p.user(user_id))  # issue 29: as the library
        return Response(status_code=204)
