"""/v1/sessions: create, list, read and delete sessions, change one (forget, clear,
archive, restore, compact), and start one from another (continue, fork)."""

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse, Response
from pydantic import Field

from hermes_redis.core.errors import ValidationError
from hermes_redis.core.models import scoped_session_id  # issue 35
from hermes_redis.server.auth import Who
from hermes_redis.server.replies import JSONReply
from hermes_redis.server.routes.common import Routes
from hermes_redis.server.schemas import (
    ERROR_RESPONSES,
    MAX_PAGE,
    CompactedOut,
    ForgetIn,
    ForgottenOut,
    SessionId,
    SessionIn,
    SessionOut,
    SessionsOut,
    Strict,
)

ONE = "/v1/sessions/{session_id}"


class ForkIn(Strict):  # issue 30
    at_seq: int | None = Field(None, description="copy the history up to this seq (default: "
                               "all of it)", strict=True, json_schema_extra={"minimum": 1})


class SessionRoutes(Routes):
    def router(self) -> APIRouter:
        r = APIRouter(tags=["sessions"], responses=ERROR_RESPONSES)
        r.post("/v1/sessions", status_code=201, response_model=SessionOut)(self.off(self.create_session))
        r.get("/v1/sessions", response_model=SessionsOut)(self.off(self.list_sessions))
        r.get(ONE, response_model=SessionOut)(self.off(self.session_info))
        r.delete(ONE, status_code=204)(self.off(self.delete_session))
        r.post(ONE + "/forget", response_model=ForgottenOut)(self.off(self.forget))
        r.post(ONE + "/clear", response_model=SessionOut)(self.off(self.clear))
        r.post(ONE + "/archive", response_model=SessionOut)(self.off(self.archive))
        r.post(ONE + "/restore", response_model=SessionOut)(self.off(self.restore))
        r.post(ONE + "/continue", status_code=201,
               response_model=SessionOut)(self.off(self.continue_session))
        r.post(ONE + "/fork", status_code=201, response_model=SessionOut)(self.off(self.fork))
        summarizing = self.mem.config.summarizer.timeout  # a compaction may wait for the model
        r.post(ONE + "/compact", response_model=CompactedOut)(self.off(self.compact, summarizing))
        return r

    def create_session(self, body: SessionIn, p: Who) -> JSONResponse:
        user = p.user(body.user_id, "default")
        assert user is not None
        chosen = body.session_id
        if chosen is not None and p.user_id is not None:  # issue 35: a user key's own namespace
            chosen = scoped_session_id(p.user_id, chosen)
        sid = self.mem.create_session(user_id=user, title=body.title, session_id=chosen)
        return self.info_reply(sid, status_code=201)

    def continue_session(self, session_id: SessionId, p: Who) -> JSONResponse:
        """A new session of the same user continuing this one: its first message carries
        this one's summary and where it left off; ``parent_session_id`` names this one."""
        new_sid = self.mem.continue_session(self.sid(p, session_id))
        return self.info_reply(new_sid, status_code=201)

    def fork(self, session_id: SessionId, p: Who, body: ForkIn | None = None) -> JSONResponse:
        """A new session of the same user holding copies of this one's history up to
        ``at_seq`` (default: all); later writes and forgets in either never touch the other."""
        at_seq = body.at_seq if body is not None else None
        new_sid = self.mem.fork(self.sid(p, session_id), at_seq)
        return self.info_reply(new_sid, status_code=201)

    def list_sessions(self, p: Who, user_id: str | None = None,
                      status: Literal["active", "archived", "deleted", "all"] = "active",
                      limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
                      cursor: str | None = None) -> JSONResponse:
        """Newest first, a page at a time: pass ``next_cursor`` back for the next page."""
        user = p.user(user_id)
        page = self.mem.list_sessions(user_id=user, status=status, limit=limit, cursor=cursor)
        return JSONReply({"sessions": [i.as_dict() for i in page],
                          "next_cursor": page.next_cursor})

    def session_info(self, session_id: SessionId, p: Who) -> JSONResponse:
        return self.info_reply(self.sid(p, session_id))

    def delete_session(self, session_id: SessionId, p: Who, purge: bool = False) -> Response:
        self.mem.delete(self.sid(p, session_id), purge=purge)
        return Response(status_code=204)

    def forget(self, session_id: SessionId, body: ForgetIn, p: Who) -> JSONResponse:
        """Remove messages from both tiers for good: the last N turns, or a keyword."""
        if (body.last is None) == (body.keyword is None):
            raise ValidationError('give exactly one of "last" (turns) or "keyword"')
        sid = self.sid(p, session_id)
        n = (self.mem.forget_last(sid, body.last) if body.last is not None
             else self.mem.forget_keyword(sid, body.keyword or ""))
        return JSONReply({"forgotten": n})

    def clear(self, session_id: SessionId, p: Who, history: bool = False) -> JSONResponse:
        """Empty the context (hot turns and summary); the archive and memories stay.
        ``history=true`` also forgets every message from both tiers; memories stay."""
        sid = self.sid(p, session_id)
        self.mem.clear(sid, history=history)
        return self.info_reply(sid)

    def archive(self, session_id: SessionId, p: Who) -> JSONResponse:
        sid = self.sid(p, session_id)
        self.mem.archive(sid)
        return self.info_reply(sid)

    def restore(self, session_id: SessionId, p: Who) -> JSONResponse:
        sid = self.sid(p, session_id)
        self.mem.restore(sid)
        return self.info_reply(sid)

    def compact(self, session_id: SessionId, p: Who) -> JSONResponse:
        """Summarize older turns now; ``compaction`` is null when there was nothing to do."""
        sid = self.sid(p, session_id)
        result = self.mem.compact(sid)
        data = self.mem.info(sid).as_dict()
        data["compaction"] = None if result is None else dict(result.__dict__)
        return JSONReply(data)
