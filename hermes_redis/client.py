"""``HermesClient``: SessionMemory over the HTTP API, for agents on another host.

Both satisfy one contract, ``hermes_redis.core.api.SessionAPI`` (checked by mypy below): the
same method names, arguments, return types (Message, SessionInfo, Context, SearchHit,
CompactResult, Memory) and exceptions (the ``hermes_redis.core.errors`` classes, mapped back
from the JSON error code by the one table, ``core.errors.WIRE_ERRORS``), so switching from
in-process to remote is one line::

    mem = SessionMemory.from_config()                      # in-process
    mem = HermesClient("http://127.0.0.1:8080", api_key)   # remote
"""

from __future__ import annotations

import functools
import http.client
import inspect
import json
import select
import socket
import sys
import threading
import urllib.request
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import httpx
import orjson

from hermes_redis.core.api import SessionAPI
from hermes_redis.core.errors import (
    AmbiguousIdError,
    AuthError,
    BackendUnavailableError,
    BadReplyError,
    ConflictError,
    HermesError,
    NotFoundError,
    ValidationError,
    error_class,
)
from hermes_redis.core.items import check_item
from hermes_redis.core.models import (
    CompactResult,
    Context,
    Memory,
    Message,
    SearchHit,
    SessionInfo,
    SessionPage,
    check_session_id,
)

__all__ = ["AuthError", "BadReplyError", "HermesClient"]  # the errors live in core.errors
PAGE = 1000
MAX_MEMORY_ID = 128


def _loads(content: bytes) -> Any:
    """JSON by orjson (≈ 3× the standard library's speed on a context), by ``json`` for what
    orjson refuses (integers past 64 bits)."""
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        return json.loads(content)


def message_from(data: Mapping[str, Any]) -> Message:
    """A Message as the server sent it (``Message.new``: the server checked every field)."""
    calls, item = data.get("tool_calls"), data.get("item")
    return Message.new(
        data["session_id"], data["seq"], data["role"], data["content"], data["token_count"],
        data["message_id"],
        "" if calls is None else json.dumps(calls, ensure_ascii=False, separators=(",", ":")),
        tuple(data.get("file_refs") or ()), tuple(data.get("memory_refs") or ()),
        data["created_at"], "" if item is None else check_item(item, sys.maxsize))


def info_from(data: Mapping[str, Any]) -> SessionInfo:
    fields = SessionInfo.__dataclass_fields__
    return SessionInfo(**{k: v for k, v in data.items() if k in fields})


def context_from(data: Mapping[str, Any]) -> Context:
    return Context(
        session_id=data["session_id"],
        messages=tuple(message_from(m) for m in data["messages"]),
        summary=data["summary"], memories=tuple(data["memories"]), tokens=data["tokens"],
        budget=data["budget"], window=data["window"], first_seq=data["first_seq"],
        opening=tuple(message_from(m) for m in data["opening"]),
        recalled=tuple(message_from(m) for m in data["recalled"]),
        parts=dict(data.get("parts") or {}), whole=bool(data.get("whole")),  # issue 30
        archived_through=data.get("archived_through", 0),
        summarized_through=data.get("summarized_through", 0),
        extracted_through=data.get("extracted_through", 0),
    )


class _Conn:
    """One keep-alive HTTP/1.1 connection on a raw socket: the request's head and body in
    one ``sendall`` (TCP_NODELAY), the reply read up to its Content-Length (or its chunks,
    or the close). ``http.client`` writes the head and the body in two sends (two wake-ups
    of the server) and parses every reply's headers with the ``email`` package."""

    __slots__ = ("__weakref__", "buf", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock: socket.socket | None = sock
        self.buf = b""

    def stale(self) -> bool:
        """Whether the server closed it while idle (keep-alive timeout) or sent unasked bytes."""
        return self.sock is None or bool(select.select([self.sock], [], [], 0)[0])

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def _more(self) -> bytes:
        assert self.sock is not None
        chunk = self.sock.recv(262144)
        if not chunk:
            raise http.client.RemoteDisconnected("the server closed the connection")
        return chunk

    def exchange(self, request: bytes, head_only: bool) -> tuple[int, bytes, bool]:
        """Send ``request``; the reply's status, body, and whether the server keeps the
        connection open."""
        assert self.sock is not None
        try:
            self.sock.sendall(request)
        except OSError as err:  # issue 44: a server may answer (413) before reading a body
            try:                # it refuses, then close: its answer is the cause, if it came
                return self._reply(head_only)
            except (OSError, http.client.HTTPException, ValueError):
                raise err from None
        return self._reply(head_only)

    def _reply(self, head_only: bool) -> tuple[int, bytes, bool]:
        buf = self.buf
        while True:
            end = buf.find(b"\r\n\r\n")
            if end >= 0:
                break
            if len(buf) > 65536:
                raise http.client.LineTooLong("reply head over 64 KB")
            buf += self._more()
        lines = buf[:end].split(b"\r\n")
        status_line = lines[0].split(None, 2)
        if len(status_line) < 2 or not status_line[0].startswith(b"HTTP/") \
                or not status_line[1].isdigit():
            raise http.client.BadStatusLine(repr(lines[0][:80]))
        status = int(status_line[1])
        length, chunked, keep = -1, False, status_line[0] != b"HTTP/1.0"
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection":
                keep = value.strip().lower() != b"close"
        buf = buf[end + 4:]
        if head_only or status in (204, 304) or 100 <= status < 200:
            length = 0
        if chunked:
            body, buf = self._chunks(buf)
        elif length >= 0:
            while len(buf) < length:
                buf += self._more()
            body, buf = buf[:length], buf[length:]
        else:  # no length: the body runs to the close
            parts = [buf]
            while True:
                assert self.sock is not None
                chunk = self.sock.recv(262144)
                if not chunk:
                    break
                parts.append(chunk)
            body, buf, keep = b"".join(parts), b"", False
        self.buf = buf
        return status, body, keep

    def _chunks(self, buf: bytes) -> tuple[bytes, bytes]:
        body: list[bytes] = []
        while True:
            while (eol := buf.find(b"\r\n")) < 0:
                buf += self._more()
            size = int(buf[:eol].split(b";")[0], 16)
            buf = buf[eol + 2:]
            if size == 0:
                while (end := buf.find(b"\r\n")) < 0:  # trailers, then the empty line
                    buf += self._more()
                while end > 0:
                    buf = buf[end + 2:]
                    while (end := buf.find(b"\r\n")) < 0:
                        buf += self._more()
                return b"".join(body), buf[2:]
            while len(buf) < size + 2:
                buf += self._more()
            body.append(buf[:size])
            buf = buf[size + 2:]


class _Direct:
    """Keep-alive connections, one per thread: what ``_call`` sends when no transport or
    proxy is in the way. httpx's request and response models, URL merging and h11 cost
    ≈ 0.5 ms of Python per call; here the constant header lines are encoded once, and a
    request is one bytes join and one ``sendall`` (issue 33)."""

    def __init__(self, base_url: str, headers: Mapping[str, str], timeout: float) -> None:
        parts = urlsplit(base_url)
        self.https = parts.scheme == "https"
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if self.https else 80)
        self.prefix, self.timeout = parts.path.rstrip("/"), timeout
        netloc = parts.netloc.rpartition("@")[2]
        fixed = {"Host": netloc, "Accept-Encoding": "identity", **headers}
        self._head = "".join(f"{k}: {v}\r\n" for k, v in fixed.items()).encode("latin-1")
        self._local = threading.local()
        self._all: weakref.WeakSet[_Conn] = weakref.WeakSet()
        self._lock = threading.Lock()

    def _connect(self) -> _Conn:
        sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.https:
            import ssl

            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=self.host)
        return _Conn(sock)

    def _connection(self) -> _Conn:
        """This thread's connection. It is closed and let go when the thread ends (its
        locals go, and a finalizer on one of them closes it), or at ``close()``."""
        conn: _Conn | None = getattr(self._local, "conn", None)
        if conn is not None and not conn.stale():
            return conn
        if conn is not None:
            conn.close()
        conn = self._connect()
        self._local.conn, self._local.end = conn, _ThreadEnd()
        weakref.finalize(self._local.end, conn.close)
        with self._lock:
            self._all.add(conn)
        return conn

    def request(self, method: str, path: str, body: bytes | None,
                query: Mapping[str, Any]) -> tuple[int, bytes]:
        url = self.prefix + quote(path, safe="/:@!$&'()*+,;=-._~")
        if query:
            url += "?" + urlencode(query)
        line = f"{method} {url} HTTP/1.1\r\n".encode()
        if body is None:
            data = line + self._head + (b"Content-Length: 0\r\n\r\n"
                                        if method in ("POST", "PUT", "PATCH") else b"\r\n")
        else:
            data = b"".join((line, self._head, b"Content-Type: application/json\r\n"
                             b"Content-Length: ", str(len(body)).encode(), b"\r\n\r\n", body))
        conn = self._connection()
        try:
            status, content, keep = conn.exchange(data, method == "HEAD")
        except BaseException:
            conn.close()
            raise
        if not keep or status == 413:  # issue 44: a 413 may leave the body unread, and the
            conn.close()                # server hangs up: the next call opens a fresh one
        return status, content

    def close(self) -> None:
        with self._lock:
            for conn in list(self._all):
                conn.close()
            self._all.clear()


class _ThreadEnd:
    """Kept in a thread's locals, so it is freed when the thread ends."""


def _proxied(base_url: str) -> bool:
    """Whether the environment routes ``base_url`` through a proxy (httpx honours it)."""
    parts = urlsplit(base_url)
    return parts.scheme in urllib.request.getproxies() and \
        not urllib.request.proxy_bypass(parts.hostname or "")


class HermesClient:
    """A remote SessionMemory: one keep-alive connection per thread (thread-safe). With a
    ``transport``, or a proxy in the environment, the calls go through httpx instead."""

    def __init__(self, base_url: str, api_key: str | None = None, *, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.base_url = base_url.rstrip("/")
        self._replies = threading.local()  # issue 33: replies decoded on this thread
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout,
                                  transport=transport)
        self._direct = (_Direct(self.base_url, headers, timeout)
                        if transport is None and not _proxied(self.base_url)
                        and urlsplit(self.base_url).scheme in ("http", "https") else None)

    def close(self) -> None:
        if self._direct is not None:
            self._direct.close()
        self._http.close()

    def __enter__(self) -> HermesClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, method: str, path: str, json_body: Any,
              query: Mapping[str, Any]) -> tuple[int, bytes]:
        if self._direct is None:
            reply = self._http.request(method, path, json=json_body, params=query or None)
            return reply.status_code, reply.content
        body = None if json_body is None else json.dumps(
            json_body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
        return self._direct.request(method, path, body, query)

    def _call(self, method: str, path: str, *, json_body: Any = None,
              params: Mapping[str, Any] | None = None) -> Any:
        """The decoded JSON reply; an error reply raises its ``hermes_redis.core.errors`` class."""
        query = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            status, content = self._send(method, path, json_body, query)
        except (BrokenPipeError, ConnectionResetError) as err:
            size = len(json.dumps(json_body)) if json_body is not None else 0
            if size > 65536:  # issue 44: not "cannot reach": it was reached, and hung up
                raise BackendUnavailableError(
                    f"{self.base_url} closed the connection while a {size:,}-byte request was "
                    f"sent ({type(err).__name__}): it may be over the server's "
                    "server.max_body_bytes; send less per request") from None
            raise BackendUnavailableError(f"cannot reach hermes-redis at {self.base_url} "
                                          f"({type(err).__name__}); is `hermes-redis serve` "
                                          "running?") from None
        except (httpx.HTTPError, OSError, http.client.HTTPException) as err:
            raise BackendUnavailableError(f"cannot reach hermes-redis at {self.base_url} "
                                          f"({type(err).__name__}); is `hermes-redis serve` "
                                          "running?") from None
        if status == 204:
            return None
        try:
            data = _loads(content) if content else None
        except ValueError:
            data = None
        if 200 <= status < 300 and data is not None:
            self._replies.n = getattr(self._replies, "n", 0) + 1  # issue 33: see _readable
            return data
        error = data.get("error") if isinstance(data, dict) else None
        if not isinstance(error, dict):
            raise BadReplyError(f"{self.base_url} answered {status} with no hermes-redis JSON "
                                f"{'reply' if 200 <= status < 300 else 'error'}; is that URL "
                                "a `hermes-redis serve` (not a proxy or another service)?")
        message = str(error.get("message") or error.get("code"))
        if error.get("code") == "conflict" and isinstance(error.get("seq"), int):
            raise ConflictError(message, seq=error["seq"])  # a retry that differed
        if status == 405 or (status == 404 and message.startswith("no route ")):
            raise BadReplyError(f"{self.base_url} has no route {method} {path}: the server is "
                                f"older than this client; upgrade it (it said: {message})")
        raise error_class(error.get("code"))(message)

    @staticmethod
    def _sid(session_id: str) -> str:
        return check_session_id(session_id)  # also keeps the id a single path segment

    # --- sessions ---------------------------------------------------------------------------
    def create_session(self, user_id: str | None = None, title: str = "",
                       session_id: str | None = None) -> str:
        """``user_id`` defaults to the key's user ('default' without keys or with an admin key)."""
        body = {"user_id": user_id, "title": title, "session_id": session_id}
        data = self._call("POST", "/v1/sessions",
                          json_body={k: v for k, v in body.items() if v is not None})
        return str(data["session_id"])

    def continue_session(self, session_id: str) -> str:
        """A new session continuing ``session_id`` (its summary and last turn as the opening)."""
        data = self._call("POST", f"/v1/sessions/{self._sid(session_id)}/continue")
        return str(data["session_id"])

    def fork(self, session_id: str, at_seq: int | None = None) -> str:
        """A new session holding copies of the history up to ``at_seq`` (None: all)."""
        body = {} if at_seq is None else {"at_seq": at_seq}
        data = self._call("POST", f"/v1/sessions/{self._sid(session_id)}/fork", json_body=body)
        return str(data["session_id"])

    def info(self, session_id: str) -> SessionInfo:
        return info_from(self._call("GET", f"/v1/sessions/{self._sid(session_id)}"))

    def list_sessions(self, user_id: str | None = None, status: str | None = "active",
                      limit: int | None = 50, cursor: str | None = None) -> SessionPage:
        """One page, newest first, as ``SessionMemory.list_sessions``; ``limit=None``
        follows the server's cursor to the end."""
        out: list[SessionInfo] = []
        while True:
            want = PAGE if limit is None else min(PAGE, limit - len(out))
            data = self._call("GET", "/v1/sessions", params={
                "user_id": user_id, "status": status or "all", "limit": want, "cursor": cursor})
            out += [info_from(d) for d in data["sessions"]]
            cursor = data.get("next_cursor")
            if not cursor or (limit is not None and len(out) >= limit):
                return SessionPage(out, next_cursor=cursor)

    def short_ids(self, sids: Sequence[str], minimum: int = 8) -> dict[str, str]:
        """The shortest unique prefix of each of ``sids`` among the sessions this key sees."""
        from hermes_redis.core.models import short_ids

        every = [i.session_id for i in self.list_sessions(status="all", limit=None)]
        return short_ids(list(sids), every, minimum)

    def resolve(self, prefix: str) -> str:
        """A full session id from a unique prefix, among the sessions this key can see."""
        check_session_id(prefix)
        every = [i.session_id for i in self.list_sessions(status="all", limit=None)]
        if prefix in every:
            return prefix
        found = sorted(s for s in every if s.startswith(prefix))
        if not found:
            raise NotFoundError(f"no session matches {prefix!r}; see `hermes-redis session list`")
        if len(found) > 1:
            shown = ", ".join(found[:5])
            raise AmbiguousIdError(f"{prefix!r} matches {len(found)} sessions ({shown}); type more")
        return found[0]

    def delete(self, session_id: str, purge: bool = False) -> None:
        self._call("DELETE", f"/v1/sessions/{self._sid(session_id)}",
                   params={"purge": "true" if purge else None})

    # --- messages ---------------------------------------------------------------------------
    def append(self, session_id: str, role: str, content: str = "", tool_calls: Any = None,
               file_refs: Any = None, memory_refs: Any = None,
               message_id: str | None = None, created_at: float | None = None,
               item: Any = None) -> Message:
        fields = {"role": role, "content": content, "tool_calls": tool_calls,
                  "file_refs": file_refs, "memory_refs": memory_refs, "message_id": message_id,
                  "created_at": created_at, "item": item}
        data = self._call("POST", f"/v1/sessions/{self._sid(session_id)}/messages",
                          json_body={k: v for k, v in fields.items() if v is not None})
        return message_from(data)

    def append_many(self, session_id: str, messages: Sequence[Mapping[str, Any]]) -> list[Message]:
        if not isinstance(messages, Sequence) or isinstance(messages, str | bytes):
            raise ValidationError("messages must be a list of message objects")
        items = [{k: v for k, v in m.items() if v is not None} if isinstance(m, Mapping) else m
                 for m in messages]
        data = self._call("POST", f"/v1/sessions/{self._sid(session_id)}/messages",
                          json_body={"messages": items})
        return [message_from(m) for m in data["messages"]]

    def messages(self, session_id: str, after_seq: int = 0,
                 limit: int | None = None, *, last: int | None = None) -> list[Message]:
        """The history in seq order (every page unless ``limit``); ``last``: the newest
        ``last`` messages."""
        sid = self._sid(session_id)
        if last is not None:
            if not isinstance(last, int) or isinstance(last, bool) or last < 1:
                raise ValidationError(f"last must be a positive number of messages, not {last!r}")
            if after_seq or limit is not None:
                raise ValidationError("give last, or after_seq and limit, not both")
            if last > PAGE:  # more than one response holds: the pages, then the newest of them
                return self.messages(sid)[-last:]
            data = self._call("GET", f"/v1/sessions/{sid}/messages", params={"last": last})
            return [message_from(m) for m in data["messages"]]
        out: list[Message] = []
        while True:
            want = PAGE if limit is None else min(PAGE, limit - len(out))
            data = self._call("GET", f"/v1/sessions/{sid}/messages",
                              params={"after_seq": after_seq, "limit": want})
            page = [message_from(m) for m in data["messages"]]
            out += page
            if len(page) < want or (limit is not None and len(out) >= limit):
                return out
            after_seq = page[-1].seq

    def context(self, session_id: str, budget: int | None = None, *,
                query: str | None = None, touch: bool = True) -> Context:
        data = self._call("GET", f"/v1/sessions/{self._sid(session_id)}/context",
                          params={"budget": budget, "query": query,
                                  "touch": None if touch else "false"})
        return context_from(data)

    def resume(self, sid: str | None = None, user_id: str | None = None, *,
               budget: int | None = None, query: str | None = None) -> Context:
        """The context of ``sid``, or of the user's most recently updated active session."""
        if sid is None:
            data = self._call("GET", "/v1/sessions",
                              params={"user_id": user_id, "status": "active", "limit": 1})
            if not data["sessions"]:
                who = f" for user {user_id}" if user_id else ""
                raise NotFoundError(f"no active session{who}; create one first")
            sid = str(data["sessions"][0]["session_id"])
        return self.context(sid, budget, query=query)

    # --- changing ---------------------------------------------------------------------------
    def forget_last(self, session_id: str, n: int) -> int:
        return int(self._call("POST", f"/v1/sessions/{self._sid(session_id)}/forget",
                              json_body={"last": n})["forgotten"])

    def forget_keyword(self, session_id: str, keyword: str) -> int:
        return int(self._call("POST", f"/v1/sessions/{self._sid(session_id)}/forget",
                              json_body={"keyword": keyword})["forgotten"])

    def clear(self, session_id: str, history: bool = False) -> None:
        self._call("POST", f"/v1/sessions/{self._sid(session_id)}/clear",
                   params={"history": "true" if history else None})

    def pop(self, session_id: str) -> Message | None:
        data = self._call("POST", f"/v1/sessions/{self._sid(session_id)}/pop")
        return None if data["message"] is None else message_from(data["message"])

    def archive(self, session_id: str) -> None:
        self._call("POST", f"/v1/sessions/{self._sid(session_id)}/archive")

    def restore(self, session_id: str) -> None:
        self._call("POST", f"/v1/sessions/{self._sid(session_id)}/restore")

    def compact(self, session_id: str) -> CompactResult | None:
        data = self._call("POST", f"/v1/sessions/{self._sid(session_id)}/compact")
        result = data.get("compaction")
        return None if result is None else CompactResult(**result)

    # --- memories and search ----------------------------------------------------------------
    def remember(self, user_id: str | None, text: str, session_id: str | None = None) -> str:
        body = {"user_id": user_id, "text": text, "session_id": session_id}
        data = self._call("POST", "/v1/memories",
                          json_body={k: v for k, v in body.items() if v is not None})
        return str(data["memory_id"])

    def memories(self, user_id: str | None = None, query: str | None = None,
                 superseded: bool = False) -> list[Memory]:
        rows = self._call("GET", "/v1/memories",
                          params={"user_id": user_id, "query": query, "limit": PAGE,
                                  "superseded": "true" if superseded else None})["memories"]
        fields = set(Memory.__dataclass_fields__)
        return [Memory(**{k: v for k, v in row.items() if k in fields}) for row in rows]

    def forget_memory(self, memory_id: str, user_id: str | None = None) -> None:
        """Delete one memory (of ``user_id`` when given: another user's memory is a
        NotFoundError, as a missing one; a user key implies its own user)."""
        if not isinstance(memory_id, str) or not memory_id or len(memory_id) > MAX_MEMORY_ID:
            raise ValidationError("memory_id must be 1-128 characters: the id remember() returned")
        if "/" in memory_id or "?" in memory_id or "#" in memory_id:  # not one path segment
            raise NotFoundError(f"no memory {memory_id[:80]}; list the user's memories for its id")
        self._call("DELETE", f"/v1/memories/{memory_id}", params={"user_id": user_id})

    def search(self, query: str, user_id: str | None = None, limit: int = 20) -> list[SearchHit]:
        data = self._call("GET", "/v1/search", params={"q": query, "user_id": user_id,
                                                       "limit": limit})
        return [SearchHit(**h) for h in data["hits"]]

    def ready(self) -> bool:
        """True when the server answers /readyz (Redis and the archive reachable)."""
        try:
            self._call("GET", "/readyz")
        except HermesError:
            return False
        return True


def _readable(cls: type[HermesClient]) -> type[HermesClient]:
    """Each public method of ``cls`` raising a BadReplyError, not a raw KeyError or
    TypeError, when a 2xx reply lacks what this client reads (a server older than the
    client: a schema mismatch). Errors raised before any reply came are left as they are."""
    def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def method(self: HermesClient, *args: Any, **kwargs: Any) -> Any:
            before = getattr(self._replies, "n", 0)
            try:
                return fn(self, *args, **kwargs)
            except (KeyError, TypeError, AttributeError, IndexError) as err:
                if getattr(self._replies, "n", 0) == before:
                    raise
                raise BadReplyError(
                    f"{self.base_url} answered {name}() without what this client reads "
                    f"({type(err).__name__}: {err}); is it an older hermes-redis? Upgrade the "
                    "server to this client's version") from None
        return method

    for name, fn in list(vars(cls).items()):
        if not name.startswith("_") and inspect.isfunction(fn) and name not in ("close",):
            setattr(cls, name, wrap(name, fn))
    return cls


_readable(HermesClient)
_conforms: type[SessionAPI] = HermesClient  # mypy checks the client against the contract
