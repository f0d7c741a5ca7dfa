"""What every failure answers over HTTP: a status and ``{"error": {"code", "message"}}``.

Written once (``error_reply``) and used by the FastAPI exception handlers, the fast append
path, the edge middleware and /mcp's key check, so an error is the same bytes on every path.
The library's one-line message is passed on (``public_message``), except where Redis or the
archive cannot be reached: that names addresses, so the caller gets a fixed line and the log
the cause. Bad input is never a 500.
"""

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from hermes_redis.core.errors import (
    BackendUnavailableError,
    ConflictError,
    HermesError,
    ValidationError,
    wire_error,
)
from hermes_redis.server.replies import JSONReply

log = logging.getLogger(__name__)

NOT_JSON = ("request body is not valid JSON: send one JSON object with Content-Type: "
            "application/json")


class ApiError(Exception):
    """An error the HTTP layer itself raises (auth, body size, malformed JSON)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


CLI_HINT = "see `hermes-redis session list`"  # what the library's not-found messages end with
SESSIONS_HINT = "list your sessions to find its id"  # issue 34: fits an HTTP and an MCP caller


def door_neutral(message: str) -> str:
    """``message`` with the library's CLI hint swapped for one an HTTP or MCP caller can
    follow (issue 34)."""
    return message.replace(CLI_HINT, SESSIONS_HINT)


UNAVAILABLE = ("Redis or the archive cannot be reached right now: retry shortly (the server's "
               "log says which, and why)")


def public_message(err: HermesError, where: str = "") -> str:
    """What a caller of the server reads of ``err``: its one line, door-neutral; for a backend
    that cannot be reached, ``UNAVAILABLE`` (the cause, with its address, is logged)."""
    if isinstance(err, BackendUnavailableError):
        log.warning("backend unavailable%s: %s", f" on {where}" if where else "", err)
        return UNAVAILABLE
    return door_neutral(str(err))


def error_body(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": " ".join(message.split())}}


def error_reply(err: BaseException, too_large: bool = False,
                where: str = "") -> tuple[int, dict[str, Any]]:
    """The status and body for ``err``: a library error by its class (``wire_error``; a ValidationError of
    an oversized content is 413 when ``too_large``), an ApiError as raised, and anything
    else a 500 that says nothing of the cause (it is logged, with ``where``)."""
    if isinstance(err, HermesError):
        status, code = wire_error(err)  # the one table: core.errors.WIRE_ERRORS
        if too_large and isinstance(err, ValidationError):
            status, code = 413, "too_large"
        body = error_body(code, public_message(err, where))
        if isinstance(err, ConflictError) and err.seq:
            body["error"]["seq"] = err.seq  # the stored message's: a retry that differed
        return status, body
    if isinstance(err, ApiError):
        return err.status, error_body(err.code, err.message)
    log.error("unexpected error on %s", where, exc_info=err)
    return 500, error_body("internal", "internal error; the server log has the details")


def validation_reply(exc: RequestValidationError) -> tuple[int, dict[str, Any]]:
    """A request FastAPI's models refused: which field, and what is wrong with it."""
    errors = list(exc.errors())
    body = getattr(exc, "body", None)
    if any(e.get("type") == "json_invalid" for e in errors):
        return 400, error_body("malformed_json", NOT_JSON)
    branch = "MessageBatch" if isinstance(body, dict) and "messages" in body else "MessageIn"
    picked = [e for e in errors if branch in e.get("loc", ())] or errors
    e = picked[0] if picked else {"loc": ("body",), "msg": "invalid request"}
    loc = [str(x) for x in e.get("loc", ()) if x not in ("MessageIn", "MessageBatch")]
    where = loc[0] if loc else "body"
    field = ".".join(loc[1:])
    name = f"{field} ({where})" if field else ("request body" if where == "body" else where)
    msg = str(e.get("msg", "invalid"))
    return 422, error_body("invalid", f"{name}: {msg}; see /docs for the expected shape")


def http_reply(request: Request, exc: StarletteHTTPException) -> tuple[int, dict[str, Any]]:
    """Starlette's own errors: no such route or method, and a body stream over the limit
    (the edge middleware put the reason in the scope; FastAPI saw only a 400)."""
    if "hermes.too_large" in request.scope:
        return 413, error_body("too_large", request.scope["hermes.too_large"])
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    message = (f"no route {request.method} {request.url.path}; see /docs"
               if exc.status_code in (404, 405) else str(exc.detail))
    return exc.status_code, error_body(code, message)


async def _reply(request: Request, err: Exception) -> JSONResponse:
    status, body = error_reply(err, getattr(request.state, "too_large", False),
                               f"{request.method} {request.url.path}")
    return JSONReply(body, status_code=status)


async def _invalid(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    status, body = validation_reply(exc)
    return JSONReply(body, status_code=status)


async def _http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    status, body = http_reply(request, exc)
    return JSONReply(body, status_code=status)


def install(app: FastAPI) -> None:
    """Answer every error of ``app`` as ``{"error": {"code", "message"}}``."""
    for cls in (HermesError, ApiError, Exception):
        app.add_exception_handler(cls, _reply)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(StarletteHTTPException, _http)
