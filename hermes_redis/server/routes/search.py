"""/v1/search: full-text search over archived and hot messages."""

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from hermes_redis.core.errors import ValidationError
from hermes_redis.server.auth import Who
from hermes_redis.server.replies import JSONReply
from hermes_redis.server.routes.common import Routes
from hermes_redis.server.schemas import ERROR_RESPONSES, MAX_PAGE, HitsOut


class SearchRoutes(Routes):
    def router(self) -> APIRouter:
        r = APIRouter(tags=["search"], responses=ERROR_RESPONSES)
        r.get("/v1/search", response_model=HitsOut)(self.off(self.search))
        return r

    def search(self, p: Who, q: str, user_id: str | None = None,
               limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 20) -> JSONResponse:
        """Full-text search over archived and hot messages, best match first."""
        if "\x00" in q:  # SQLite's FTS5 parser stops at NUL and the library calls that an outage
            raise ValidationError("search query contains a NUL character: send text")
        hits = self.mem.search(q, user_id=p.user(user_id), limit=limit)
        return JSONReply({"hits": [h.as_dict() for h in hits]})
