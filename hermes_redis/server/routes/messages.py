"""/v1/sessions/{id}/messages: append one message or a whole turn, read them, pop the newest.

The append handler (``append_body``) is shared by the FastAPI route and the fast path
(``server.fast``): one handler, so both answer every body alike.
"""

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from hermes_redis.core.errors import NotFoundError, ValidationError
from hermes_redis.core.incoming import check_message_fields
from hermes_redis.core.models import ROLES
from hermes_redis.server.auth import Principal, Who
from hermes_redis.server.bodies import json_body, oversized
from hermes_redis.server.replies import JSONReply
from hermes_redis.server.routes.common import Routes
from hermes_redis.server.schemas import (
    APPEND_BODY,
    ERROR_RESPONSES,
    MAX_PAGE,
    MessageOut,
    MessagesOut,
    PoppedOut,
    SessionId,
)

MESSAGES = "/v1/sessions/{session_id}/messages"
BATCH_SHAPE = '{"messages": [...]}'


class MessageRoutes(Routes):
    def router(self) -> APIRouter:
        r = APIRouter(tags=["messages"], responses=ERROR_RESPONSES)
        r.post(MESSAGES, status_code=201, response_model=MessageOut | MessagesOut,
               openapi_extra=APPEND_BODY)(self.append)
        r.get(MESSAGES, response_model=MessagesOut)(self.off(self.list_messages))
        r.post("/v1/sessions/{session_id}/pop", response_model=PoppedOut)(self.off(self.pop))
        return r

    async def append(self, session_id: SessionId, p: Who, request: Request) -> JSONResponse:
        """One message, or a whole turn (``{"messages": [...]}``) in one atomic Redis round
        trip; idempotent by ``message_id``. The body goes to the library as it came, so its
        checks (and their messages) are the API's."""
        status, content = await self.offload(self.append_body, p, session_id,
                                             await request.body(), request.state)
        return JSONReply(content, status_code=status)

    def append_body(self, p: Principal, session_id: str, raw: bytes,
                    flags: Any) -> tuple[int, Any]:
        """The append route's work, for the FastAPI route and the fast path alike; sets
        ``flags.too_large`` before the library refuses an oversized content (413, not 422).
        An id prefix is resolved only when the id itself is no session (issue 34): a keyless
        append of an exact id costs nothing more; a user key's owner check resolves it."""
        if p.user_id is not None:
            return self.append_to(self.sid(p, session_id), raw, flags)
        try:
            return self.append_to(session_id, raw, flags)
        except NotFoundError:
            sid = self.sid(p, session_id)  # the door's not-found, or 409 for an ambiguous prefix
            if sid == session_id:
                raise
            return self.append_to(sid, raw, flags)

    def append_to(self, sid: str, raw: bytes, flags: Any) -> tuple[int, Any]:
        """``append_body``'s work on the full id ``sid``."""
        data = json_body(raw)
        limit = self.mem.config.limits.max_content_bytes
        if isinstance(data, dict) and "messages" in data:
            if len(data) > 1:
                extra = sorted(set(data) - {"messages"})[0]
                raise ValidationError(f"unknown field {extra!r} next to messages: a batch is "
                                      + BATCH_SHAPE)
            items = data["messages"]
            if oversized(items if isinstance(items, list) else [], limit):
                flags.too_large = True  # the library's ValidationError answers 413
            stored = self.mem.append_many(sid, items)
            return 201, {"messages": [m.as_dict() for m in stored]}
        if not isinstance(data, dict):
            raise ValidationError('the request body must be a message object {"role", '
                                  f'"content", ...}} or {BATCH_SHAPE}')
        check_message_fields(data)
        for required, what in (("role", f"who said it, one of {', '.join(ROLES)}"),
                               ("content", 'the message text, as in {"role": "user", "content": '
                                           '"hello"}')):
            if required not in data and not (required == "content" and "item" in data):
                raise ValidationError(f"{required} is required: {what}")
        if oversized([data], limit):
            flags.too_large = True
        return 201, self.mem.append(sid, **data).as_dict()

    def list_messages(self, session_id: SessionId, p: Who,
                      after_seq: Annotated[int, Query(ge=0, lt=2**63)] = 0,
                      limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
                      last: Annotated[int | None, Query(ge=1, le=MAX_PAGE)] = None,
                      ) -> JSONResponse:
        """Messages with seq > ``after_seq`` in seq order, archived and hot; page on with the
        last seq returned. ``last``: instead, the newest ``last`` messages in seq order."""
        sid = self.sid(p, session_id)
        msgs = (self.mem.messages(sid, last=last) if last is not None
                else self.mem.messages(sid, after_seq=after_seq, limit=limit))
        return JSONReply({"messages": [m.as_dict() for m in msgs]})

    def pop(self, session_id: SessionId, p: Who) -> JSONResponse:
        """Remove and return the newest message, from both tiers for good (as a forget)."""
        msg = self.mem.pop(self.sid(p, session_id))
        return JSONReply({"message": None if msg is None else msg.as_dict()})
