"""A recording OpenAI-compatible chat model for tests and benchmarks: ``/v1/chat/completions``
(plain and ``stream: true``) and ``/v1/models``, as its own process on a free port, stdlib only
(it runs under any Python, Hermes Agent's venv included).

Every request is recorded: ``requests()`` returns them in order (path, headers, body), so a
test reads exactly what a model would have been sent. The model name asks for a behaviour
(the rest of the name after a ``-`` is its argument):

- ``good`` (or any other name): a deterministic reply that quotes the newest user message,
  ``ok #<n>: <its first 80 characters>`` (``n`` counts this server's chat calls);
- ``summary``: a deterministic summary, one ``- `` line per ``#<seq>`` the prompt carries;
- ``slow-S``: waits S seconds (default 5), then answers as ``good``;
- ``error``: 500 with an OpenAI-shaped error body;
- ``garbage``: 200 with a body that is not JSON;
- ``long-N``: a reply of N words (default 20,000);
- ``empty``: a reply whose content is the empty string.

``POST /control {"model": NAME}`` makes NAME the behaviour for every request whatever model it
names (``{"model": null}`` undoes it), so one server can fail in the middle of a session.
``POST /control {"reply": TEXT}`` queues a scripted reply (FIFO), used before the behaviours.

Run: ``python tests/model_server.py PORT`` (or ``-m tests.model_server``).
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()


class State:
    """What the server has seen and been told; one per process."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self.calls = 0
        self.forced: str | None = None
        self.replies: list[str] = []


STATE = State()


def newest_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):  # content parts
                return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            return str(content or "")
    return ""


def reply_text(model: str, body: dict[str, Any], calls: int) -> str:
    kind, _, arg = model.partition("-")
    messages = body.get("messages") or []
    if kind == "summary":
        prompt = "\n".join(str(m.get("content") or "") for m in messages)
        seqs = sorted({int(s) for s in re.findall(r"#(\d+)", prompt)})
        lines = [f"- point #{seq}" for seq in seqs] or ["- nothing to summarize"]
        return "\n".join(lines)
    if kind == "long":
        return " ".join(f"word{i}" for i in range(int(arg or 20000)))
    if kind == "empty":
        return ""
    return f"ok #{calls}: {newest_user_text(messages)[:80]}"


def completion(model: str, text: str, body: dict[str, Any]) -> dict[str, Any]:
    prompt_tokens = max(1, len(json.dumps(body.get("messages") or [])) // 4)
    completion_tokens = max(1, len(text) // 4)
    return {
        "id": f"chatcmpl-{STATE.calls}", "object": "chat.completion", "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self._json(200, {"object": "list", "data": [
                {"id": "good", "object": "model", "owned_by": "tests", "context_length": 128000}]})
        elif self.path.startswith("/requests"):
            with STATE.lock:
                self._json(200, {"calls": STATE.calls, "requests": STATE.requests})
        else:
            with STATE.lock:
                self._json(200, {"calls": STATE.calls})

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._json(400, {"error": {"message": "body is not JSON", "type": "invalid_request"}})
            return
        if self.path.startswith("/control"):
            with STATE.lock:
                if "model" in body:
                    STATE.forced = body["model"]
                if "reply" in body:
                    STATE.replies.append(str(body["reply"]))
            self._json(200, {"ok": True})
            return
        with STATE.lock:
            STATE.calls += 1
            calls = STATE.calls
            STATE.requests.append({"path": self.path, "body": body,
                                   "headers": {k.lower(): v for k, v in self.headers.items()}})
            model = STATE.forced or str(body.get("model") or "good")
            scripted = STATE.replies.pop(0) if STATE.replies else None
        kind, _, arg = model.partition("-")
        if kind == "slow":
            time.sleep(float(arg or 5))
        if kind == "error":
            self._json(500, {"error": {"message": "boom", "type": "server_error"}})
            return
        if kind == "garbage":
            self._send(200, b"<html>this is not a model</html>", "text/html")
            return
        text = scripted if scripted is not None else reply_text(model, body, calls)
        if body.get("stream"):
            self._stream(model, text, body)
        else:
            self._json(200, completion(model, text, body))

    def _stream(self, model: str, text: str, body: dict[str, Any]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        full = completion(model, text, body)
        base = {"id": full["id"], "object": "chat.completion.chunk", "created": full["created"],
                "model": model}
        pieces = [text[i:i + 64] for i in range(0, len(text), 64)] or [""]
        chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                        "finish_reason": None}]}]
        chunks += [{**base, "choices": [{"index": 0, "delta": {"content": piece},
                                         "finish_reason": None}]} for piece in pieces]
        chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append({**base, "choices": [], "usage": full["usage"]})
        for chunk in chunks:
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True

    def _json(self, status: int, payload: Any) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json")

    def _send(self, status: int, payload: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ModelServer:
    """The model as a subprocess: ``start()``, ``stop()`` (SIGKILL), ``url`` (ends in ``/v1``),
    ``requests()`` (what it was sent), ``force(model)`` and ``script(reply)``."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout: float = 30) -> ModelServer:
        self.proc = subprocess.Popen([sys.executable, str(HERE), str(self.port)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self._get("/")
                return self
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        raise RuntimeError(f"the model server did not start on port {self.port}")

    def requests(self) -> list[dict[str, Any]]:
        """Every chat request so far, oldest first: ``{"path", "headers", "body"}``."""
        return list(self._get("/requests")["requests"])

    def chat_bodies(self) -> list[dict[str, Any]]:
        return [r["body"] for r in self.requests() if r["path"].endswith("/chat/completions")]

    def force(self, model: str | None) -> None:
        self._post("/control", {"model": model})

    def script(self, reply: str) -> None:
        self._post("/control", {"reply": reply})

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _get(self, path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as resp:
            return json.load(resp)

    def _post(self, path: str, payload: Any) -> Any:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}",
                                     data=json.dumps(payload).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            return json.load(resp)


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
