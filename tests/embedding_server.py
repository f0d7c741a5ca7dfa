"""A real OpenAI-compatible ``/v1/embeddings`` endpoint for the tests, as its own process on
a free port: it serves the shipped local model's vectors (real ones, as Ollama or TEI would),
so ``embeddings.provider: openai`` is tested over HTTP end to end.

The model name asks for a behaviour: ``good`` (the vectors), ``good-64`` (their first 64
dimensions: another model behind the endpoint), ``short`` (one vector too few), ``nan``,
``not-json``, ``error`` (500). Run: ``python -m tests.embedding_server PORT``.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.redis_server import free_port

ROOT = Path(__file__).resolve().parent.parent


def _vectors(model: str, texts: list[str]) -> Any:
    from hermes_redis.core.embeddings import LOCAL_DEFAULT, load_local

    global _encode
    if _encode is None:
        _encode = load_local(LOCAL_DEFAULT)
    rows = [[float(x) for x in row] for row in _encode(texts, False)]
    if model == "good-64":
        rows = [row[:64] for row in rows]
    elif model == "short":
        rows = rows[:-1]
    elif model == "nan":
        rows = [[math.nan] * len(row) for row in rows]
    return rows


_encode: Any = None
CALLS = {"n": 0}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        model, texts = body["model"], body["input"]
        CALLS["n"] += 1
        if model == "error":
            self._send(500, b'{"error": {"message": "boom"}}')
        elif model == "not-json":
            self._send(200, b"<html>not an embeddings API</html>")
        else:
            data = [{"object": "embedding", "index": i, "embedding": vec}
                    for i, vec in enumerate(_vectors(model, texts))]
            self._send(200, json.dumps({"object": "list", "data": data, "model": model}).encode())

    def do_GET(self) -> None:
        self._send(200, json.dumps({"calls": CALLS["n"]}).encode())

    def _send(self, status: int, payload: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


class EmbeddingServer:
    """The endpoint as a subprocess: ``start()``, ``stop()`` (SIGKILL), ``url``."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout: float = 60) -> EmbeddingServer:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.embedding_server",
                                      str(self.port)], cwd=ROOT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.calls()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"the embedding endpoint did not start on port {self.port}")

    def calls(self) -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/", timeout=2) as resp:
            return int(json.load(resp)["calls"])

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


if __name__ == "__main__":
    _vectors("good", ["warm up"])  # load the model before answering the first request
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
