"""Helpers the test modules share: config files, conversations, archive rows. One definition
each; a module that needs other words passes its own ``say``."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import yaml

from hermes_redis import Config, Message, SessionMemory
from tests import stack

Say = Callable[[int], tuple[str, str]]  # exchange i -> (user text, assistant reply)
TITLE = "帮我写一个 FastAPI 的用户认证接口"


def write_config(config: Config | Mapping[str, Any], path: Path) -> Path:
    """Write a YAML config file: a ``Config`` whole (what a worker or agent process loads
    through $HERMES_CONFIG), or a mapping of sections as given."""
    if isinstance(config, Config):
        data = dataclasses.asdict(config)
        data.pop("source", None)
    else:
        data = dict(config)
    path.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


def isolated_config(directory: Path, redis_url: str, backend: str = "redis",
                    **sections: dict[str, Any]) -> Path:
    """A YAML config isolated to one test: own key prefix, queue, archive and data dir, on
    this run's stack (tests/stack.py)."""
    tag = uuid.uuid4().hex[:10]
    data: dict[str, Any] = {
        "memory": {"session": {"backend": backend}},
        "redis": {"url": redis_url, "key_prefix": f"t{tag}", "queue": f"q{tag}",
                  "socket_timeout": 2, "retries": 0},
        "archive": {"data_dir": str(directory / "data"), "path": str(directory / "memory.db")},
    }
    stack.merge(data, redis_url)
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    return write_config(data, directory / f"config-{tag}.yml")


def auth_chat(first: str = TITLE) -> Say:
    """The CLI tests' conversation: an auth endpoint, then the database question."""

    def say(i: int) -> tuple[str, str]:
        if i == 0:
            return first, "好的，用 JWT：access token 加 refresh token。"
        return f"数据库用 MySQL 还是 PostgreSQL？ (question {i})", f"PostgreSQL. (answer {i})"

    return say


def converse(mem: SessionMemory, sid: str, turns: int, say: Say) -> list[Message]:
    """``turns`` exchanges of a user message and an assistant reply; the appended messages."""
    out = []
    for i in range(turns):
        user, assistant = say(i)
        out.append(mem.append(sid, "user", user))
        out.append(mem.append(sid, "assistant", assistant))
    return out


def chat(mem: SessionMemory, user: str = "alice", title_text: str = TITLE, turns: int = 2,
         say: Say | None = None) -> str:
    """A new session of ``user`` holding ``turns`` exchanges; its id."""
    sid = mem.create_session(user_id=user)
    converse(mem, sid, turns, say or auth_chat(title_text))
    return sid


def archive_query(cfg: Config, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Rows of one read-only query on ``cfg``'s archive, with sqlite3 or psycopg directly
    (whichever archive it has: both have the same tables), not through the library under
    test. ``?`` placeholders, as sqlite3's."""
    if cfg.archive.url is not None:
        import psycopg

        with psycopg.connect(cfg.archive.url) as conn:
            return [tuple(r) for r in conn.execute(sql.replace("?", "%s"), tuple(params))]
    db = sqlite3.connect(cfg.archive_path, timeout=30)
    try:
        return db.execute(sql, tuple(params)).fetchall()
    finally:
        db.close()


def archive_dump(cfg: Config) -> str:
    """Every row of every table of ``cfg``'s archive as text (SQLite's ``iterdump``; on
    PostgreSQL each row of each table of the schema), read directly."""
    if cfg.archive.url is None:
        db = sqlite3.connect(cfg.archive_path, timeout=30)
        try:
            return "\n".join(db.iterdump())
        finally:
            db.close()
    tables = [r[0] for r in archive_query(
        cfg, "SELECT table_name FROM information_schema.tables WHERE table_schema=current_schema()")]
    assert tables, "no tables in the archive's schema"
    return "\n".join(str(row[0]) for t in sorted(tables)
                     for row in archive_query(cfg, f'SELECT t::text FROM "{t}" t'))


def archive_rows(cfg: Config, sid: str) -> list[tuple[str, int, int]]:
    """(message_id, seq, token_count) of the session's archived messages (``archive_query``)."""
    return [(str(r[0]), int(r[1]), int(r[2])) for r in archive_query(
        cfg, "SELECT message_id, seq, token_count FROM messages WHERE session_id=?", (sid,))]


def chat_model(reply: str) -> type[BaseHTTPRequestHandler]:
    """An OpenAI-compatible chat endpoint that answers every request with ``reply`` and
    records each request body, with its Authorization header, in ``seen``."""

    class ChatModel(BaseHTTPRequestHandler):
        seen: ClassVar[list[dict[str, Any]]] = []

        def do_POST(self) -> None:  # http.server's naming
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            ChatModel.seen.append({"auth": self.headers.get("Authorization"), **body})
            data = json.dumps({"choices": [{"message": {"content": reply}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    return ChatModel


@contextlib.contextmanager
def serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A real HTTP server on a free port, running ``handler``; yields its /v1 base URL."""
    server = HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1"
    finally:
        server.shutdown()
