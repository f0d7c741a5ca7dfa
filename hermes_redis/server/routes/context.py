"""/v1/sessions/{id}/context: what to send to the model now."""

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from hermes_redis.server.auth import Who
from hermes_redis.server.replies import JSONReply
from hermes_redis.server.routes.common import Routes
from hermes_redis.server.schemas import ERROR_RESPONSES, ContextOut, SessionId


class ContextRoutes(Routes):
    def router(self) -> APIRouter:
        r = APIRouter(tags=["context"], responses=ERROR_RESPONSES)
        r.get("/v1/sessions/{session_id}/context",
              response_model=ContextOut)(self.off(self.context))
        return r

    def context(self, session_id: SessionId, p: Who,
                budget: Annotated[int | None, Query(ge=1)] = None,
                query: str | None = None, touch: bool = True) -> JSONResponse:
        """What to send to the model now; never more than ``budget`` tokens."""
        ctx = self.mem.context(self.sid(p, session_id), budget, query=query, touch=touch)
        return JSONReply(ctx.as_dict())
