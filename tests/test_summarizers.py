"""The offline summarizer keeps what matters; the chat summarizer talks to a real HTTP
endpoint and falls back to the offline one when it fails."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import ClassVar

import pytest

from hermes_redis import SessionMemory
from hermes_redis.models import Message
from hermes_redis.summarizers import ChatSummarizer, ExtractiveSummarizer, parse_summary
from hermes_redis.tokens import get_tokenizer

TOK = get_tokenizer("cl100k_base")


def msgs(*pairs):
    return [Message("s", i + 1, role, text, TOK.count(text)) for i, (role, text) in enumerate(pairs)]


def test_extractive_keeps_decisions_numbers_paths_and_open_items():
    history = msgs(
        ("user", "帮我写一个 FastAPI 的用户认证接口"),
        ("assistant", "We decided: access token 30 min, refresh token 7 d. Sounds fun!"),
        ("user", "How do we store passwords?"),
        ("assistant", "Use bcrypt + salt, see app/auth/security.py. Nice weather today."),
        ("assistant", "Open question: rate limiting per IP?"),
    )
    text = ExtractiveSummarizer(TOK).summarize("", history, 500)
    sections = parse_summary(text)
    assert any("FastAPI" in t for t in sections["Discussed"])
    assert any("30 min" in t for t in sections["Decisions"])
    assert any("bcrypt" in t for t in sections["Decisions"])
    assert "app/auth/security.py" in sections["Files"]
    assert any("rate limiting" in t for t in sections["Open items"])
    assert "weather" not in text and "fun" not in text


def test_extractive_summary_is_running_and_bounded():
    first = ExtractiveSummarizer(TOK).summarize("", msgs(("assistant", "We chose PostgreSQL 16.")), 300)
    many = msgs(*[("assistant", f"Fact {i}: port {8000 + i} is used by service{i}.") for i in range(200)])
    second = ExtractiveSummarizer(TOK).summarize(first, many, 300)
    assert TOK.count(second) <= 300
    assert "PostgreSQL 16" in second  # decisions outlive facts when space runs out


class _Handler(BaseHTTPRequestHandler):
    reply = "Decisions:\n- use JWT"
    seen: ClassVar[list[dict]] = []

    def do_POST(self):  # http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Handler.seen.append({"auth": self.headers.get("Authorization"), **body})
        data = json.dumps({"choices": [{"message": {"content": _Handler.reply}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def endpoint():
    server = HTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()


def test_chat_summarizer_calls_the_endpoint(endpoint):
    chat = ChatSummarizer("tiny", endpoint, "k-123", 5, ExtractiveSummarizer(TOK))
    assert chat.summarize("", msgs(("user", "pick auth")), 200) == "Decisions:\n- use JWT"
    call = _Handler.seen[-1]
    assert call["model"] == "tiny" and call["auth"] == "Bearer k-123"
    assert "pick auth" in call["messages"][0]["content"]


def test_chat_summarizer_falls_back_offline():
    chat = ChatSummarizer("tiny", "http://127.0.0.1:1/v1", None, 1, ExtractiveSummarizer(TOK))
    out = chat.summarize("", msgs(("assistant", "We decided to use Redis 7.")), 200)
    assert "Redis 7" in out


def test_configured_chat_summarizer_is_used_for_compaction(config_factory, endpoint):
    cfg = config_factory("memory", max_messages=4,
                         compression={"summary_model": "tiny", "keep_recent": 1})
    cfg = cfg.with_overrides(summarizer={"base_url": endpoint})
    mem = SessionMemory(cfg)
    sid = mem.create_session()
    for i in range(4):
        mem.append(sid, "user", f"q{i}")
        mem.append(sid, "assistant", f"a{i}")
    assert mem.info(sid).summary == "Decisions:\n- use JWT"  # the compaction asked the model
    ctx = mem.context(sid)  # the whole session fits the default budget: all of it, verbatim
    assert ctx.summary == "" and [m.content for m in ctx.messages][:2] == ["q0", "a0"]


def test_extractive_keeps_versions_whole_names_first_and_skips_code():
    history = msgs(
        ("assistant", "Priya owns the rollout. We will use Next.js 14 for the frontend."),
        ("assistant", "```\nfor i in range(10):\n    print(i)\n```\nThat loop is only an example."),
        ("assistant", "The cache TTL is 300 seconds."),
        ("assistant", "Update: the cache TTL is 600 seconds."),
    )
    text = ExtractiveSummarizer(TOK).summarize("", history, 500)
    assert "Priya" in text and "Next.js 14" in text
    assert "print(i)" not in text
    assert "300 seconds" in text and "600 seconds" in text  # a changed value is not a duplicate
