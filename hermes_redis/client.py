"""``HermesClient``: SessionMemory over the HTTP API, for agents on another host.

The same method names, arguments, return types (Message, SessionInfo, Context, SearchHit,
CompactResult) and exceptions (the ``hermes_redis.errors`` classes, mapped back from the
JSON error code) as ``SessionMemory``, so switching from in-process to remote is one line::

    mem = SessionMemory.from_config()                      # in-process
    mem = HermesClient("http://127.0.0.1:8080", api_key)   # remote
"""

from __future__ import annotations

import http.client
import json
import select
import sys
import threading
import urllib.request
import weakref
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import httpx

from hermes_redis.archive import SearchHit
from hermes_redis.compaction import CompactResult
from hermes_redis.errors import (
    AmbiguousIdError,
    BackendUnavailableError,
    ConfigError,
    HermesError,
    NotFoundError,
    StateError,
    ValidationError,
)
from hermes_redis.items import check_item
from hermes_redis.models import Context, Memory, Message, SessionInfo, SessionPage, check_session_id


class AuthError(HermesError):
    """The server refused the API key (missing, wrong, revoked) or what it may do (403)."""

    exit_code = 6


CODES: dict[str, type[HermesError]] = {
    "invalid": ValidationError,
    "malformed_json": ValidationError,
    "too_large": ValidationError,
    "not_found": NotFoundError,
    "ambiguous_id": AmbiguousIdError,
    "conflict": StateError,
    "unavailable": BackendUnavailableError,
    "misconfigured": ConfigError,
    "unauthorized": AuthError,
    "forbidden": AuthError,
}
PAGE = 1000


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
    )


class _Direct:
    """Keep-alive ``http.client`` connections, one per thread: what ``_call`` sends when no
    transport or proxy is in the way. httpx's request and response models, URL merging and
    h11 cost ≈ 0.5 ms of Python per call, and h11 writes the head and the body in two
    segments (two wake-ups of the server); ``http.client`` sends a body with its head."""

    def __init__(self, base_url: str, headers: Mapping[str, str], timeout: float) -> None:
        parts = urlsplit(base_url)
        self.https = parts.scheme == "https"
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port
        self.prefix, self.timeout = parts.path.rstrip("/"), timeout
        self.headers = dict(headers)
        self._local = threading.local()
        self._all: weakref.WeakSet[http.client.HTTPConnection] = weakref.WeakSet()
        self._lock = threading.Lock()

    def _connection(self) -> http.client.HTTPConnection:
        """This thread's connection. It is closed and let go when the thread ends (its
        locals go, and a finalizer on one of them closes it), or at ``close()``."""
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
            conn = cls(self.host, self.port, timeout=self.timeout)
            self._local.conn, self._local.end = conn, _ThreadEnd()
            weakref.finalize(self._local.end, conn.close)
            with self._lock:
                self._all.add(conn)
        elif conn.sock is not None and select.select([conn.sock], [], [], 0)[0]:
            conn.close()  # the server closed it while idle (keep-alive timeout): reconnect
        return conn

    def request(self, method: str, path: str, body: bytes | None,
                query: Mapping[str, Any]) -> tuple[int, bytes]:
        url = self.prefix + quote(path, safe="/:@!$&'()*+,;=-._~")
        if query:
            url += "?" + urlencode(query)
        headers = dict(self.headers)
        if body is not None:
            headers["Content-Type"] = "application/json"
        conn = self._connection()
        try:
            conn.request(method, url, body=body, headers=headers)
            reply = conn.getresponse()
            return reply.status, reply.read()
        except BaseException:
            conn.close()
            raise

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
        """The decoded JSON reply; an error reply raises its ``hermes_redis.errors`` class."""
        query = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            status, content = self._send(method, path, json_body, query)
        except (httpx.HTTPError, OSError, http.client.HTTPException) as err:
            raise BackendUnavailableError(f"cannot reach hermes-redis at {self.base_url} "
                                          f"({type(err).__name__}); is `hermes-redis serve` "
                                          "running?") from None
        if status == 204:
            return None
        try:
            data = json.loads(content) if content else None
        except ValueError:
            data = None
        if 200 <= status < 300 and data is not None:
            return data
        error = data.get("error") if isinstance(data, dict) else None
        if not isinstance(error, dict):
            raise HermesError(f"hermes-redis at {self.base_url} answered {status} "
                              "without a JSON error")
        cls = CODES.get(str(error.get("code")), HermesError)
        raise cls(str(error.get("message") or error.get("code")))

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
        from hermes_redis.render import short_ids

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
    def append(self, session_id: str, role: str, content: str, tool_calls: Any = None,
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
        """Delete one memory (``user_id`` is implied by a user key; kept for the same signature)."""
        if not isinstance(memory_id, str) or not memory_id or "/" in memory_id:
            raise ValidationError("memory_id must be the id remember() returned")
        self._call("DELETE", f"/v1/memories/{memory_id}")

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
