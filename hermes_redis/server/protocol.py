"""uvicorn's httptools protocol with a deadline and a size cap on request heads (issue 35).

uvicorn reaps a keep-alive connection idle after a response (``timeout_keep_alive``), but
not one that never finishes its request line and headers: a client opening connections and
sending a byte now and then (slowloris), or nothing at all, holds them forever. Here a
connection must deliver each request's head within ``server.header_timeout`` seconds of
its first byte (or of connecting), in at most ``MAX_HEAD_BYTES``; else it is closed (431
for a head too large).
"""

import asyncio
import os
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

HEADER_TIMEOUT_ENV = "HERMES_SERVER_HEADER_TIMEOUT"  # serve sets it for every worker process
DEFAULT_HEADER_TIMEOUT = 10.0
MAX_HEAD_BYTES = 65_536  # request line and headers; nginx's default large buffers: 4 × 8 KB
_REASON = b"request line and headers over 64 KB: send less\n"
TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain\r\n"
             b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(_REASON), _REASON))
PROTOCOL = "hermes_redis.server.protocol:HeadDeadlineProtocol"  # uvicorn's http= option


def header_timeout() -> float:
    """The deadline for a request head, in seconds (``server.header_timeout``)."""
    try:
        return float(os.environ.get(HEADER_TIMEOUT_ENV) or DEFAULT_HEADER_TIMEOUT)
    except ValueError:
        return DEFAULT_HEADER_TIMEOUT


class HeadDeadlineProtocol(HttpToolsProtocol):
    """HttpToolsProtocol, closing a connection whose request head is late or too large."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.head_timeout = header_timeout()
        self.head_done = False
        self.head_bytes = 0
        self.heads = 0  # request heads completed on this connection
        self.head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()  # a connection that sends nothing is reaped too

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        heads = self.heads
        super().data_received(data)
        if self.head_done or self.heads != heads or self.transport.is_closing():
            return  # a head completed in this data: what follows it is body, not counted
        self.head_bytes += len(data)
        if self.head_bytes > MAX_HEAD_BYTES:
            self._disarm()
            self.transport.write(TOO_LARGE)
            self.transport.close()
        elif self.head_deadline is None:
            self._arm()

    def on_headers_complete(self) -> None:
        self.head_done, self.head_bytes = True, 0
        self.heads += 1
        self._disarm()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        self.head_done = False  # the next request's head is timed from its first byte
        super().on_response_complete()

    def _arm(self) -> None:
        self._disarm()
        self.head_deadline = self.loop.call_later(self.head_timeout, self._late)

    def _disarm(self) -> None:
        if self.head_deadline is not None:
            self.head_deadline.cancel()
            self.head_deadline = None

    def _late(self) -> None:
        self.head_deadline = None
        if not self.head_done and not self.transport.is_closing():
            self.transport.close()
