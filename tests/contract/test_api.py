"""The contract itself: ``SessionAPI`` names every public method the library and the client
share, with the same parameters and defaults in all three; one error table gives the server
its statuses and the client its classes; a reply that is not the API's JSON is a
BadReplyError; importing the client loads no library layer and no Redis-side package."""

from __future__ import annotations

import http.server
import inspect
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from hermes_redis.client import HermesClient
from hermes_redis.core import errors
from hermes_redis.core.api import SessionAPI
from hermes_redis.core.errors import (
    WIRE_ERRORS,
    BackendUnavailableError,
    BadReplyError,
    HermesError,
    error_class,
    wire_error,
)
from hermes_redis.server.errors import UNAVAILABLE, error_reply
from hermes_redis.session_memory import SessionMemory
from tests.http_server import ROOT

# Where the client deliberately differs (documented in core/api.py): a key has a user, so
# ``user_id`` may be left out over HTTP.
CLIENT_DEFAULTS = {("create_session", "user_id"): None, ("memories", "user_id"): None}
CLIENT_NONE_OK = {("remember", "user_id")}


def contract_methods() -> list[str]:
    return sorted(name for name, value in vars(SessionAPI).items()
                  if inspect.isfunction(value) and (not name.startswith("_") or name in
                                                    ("__enter__", "__exit__")))


def public(cls: type) -> set[str]:
    return {n for n, v in vars(cls).items() if inspect.isfunction(v) and not n.startswith("_")}


def test_the_protocol_names_every_public_method_both_have() -> None:
    shared = public(SessionMemory) & public(HermesClient)
    assert shared == set(contract_methods()) - {"__enter__", "__exit__"}
    assert len(shared) >= 22


@pytest.mark.parametrize("name", contract_methods())
def test_both_take_the_protocols_parameters(name: str) -> None:
    want = inspect.signature(getattr(SessionAPI, name)).parameters
    for impl in (SessionMemory, HermesClient):
        got = inspect.signature(getattr(impl, name)).parameters
        assert list(got) == list(want), (impl.__name__, name)
        for pname, p in want.items():
            q = got[pname]
            assert q.kind == p.kind, (impl.__name__, name, pname)
            default = p.default
            if impl is HermesClient and (name, pname) in CLIENT_DEFAULTS:
                default = CLIENT_DEFAULTS[(name, pname)]
            assert q.default == default, (impl.__name__, name, pname, q.default, default)
            if impl is HermesClient and (name, pname) in CLIENT_NONE_OK:
                assert "None" in str(q.annotation)


def test_the_error_table_round_trips() -> None:
    """The server answers each class with its row; the client raises that class back; and
    each code the server sends maps to exactly one class."""
    codes = [code for code, _, _ in WIRE_ERRORS]
    assert len(codes) == len(set(codes))
    for code, status, cls in WIRE_ERRORS:
        assert error_class(code) is cls
        wire_status, wire_code = wire_error(cls("x"))
        assert error_class(wire_code) is cls
        first = next(row for row in WIRE_ERRORS if row[2] is cls)
        assert (wire_status, wire_code) == (first[1], first[0])
        # the library's line, except an unreachable backend's, which names addresses
        said = UNAVAILABLE if issubclass(cls, BackendUnavailableError) else "one line"
        assert error_reply(cls("one line")) == (wire_status, {"error": {
            "code": wire_code, "message": said}})
        assert 400 <= status < 600
    assert error_class("no such code") is HermesError
    # every library error class the server can raise has its own row (a subclass of one
    # answers as its nearest listed base)
    listed = {cls for _, _, cls in WIRE_ERRORS}
    for cls in vars(errors).values():
        if isinstance(cls, type) and issubclass(cls, HermesError) and cls is not HermesError:
            status, code = wire_error(cls("x"))
            base = next(c for c in cls.__mro__ if c in listed or c is HermesError)
            assert base is HermesError or error_class(code) is base


class _NotHermes(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<html>502 Bad Gateway</html>" if self.path != "/ok" else b"plain text"
        self.send_response(502 if self.path != "/ok" else 200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def not_hermes() -> Iterator[str]:
    """A real HTTP server that is not hermes-redis (a proxy's error page)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotHermes)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_reply_that_is_not_the_apis_json_is_a_bad_reply(not_hermes: str) -> None:
    with HermesClient(not_hermes) as client:
        with pytest.raises(BadReplyError) as err:
            client.info("abc")
        assert "502" in str(err.value) and not_hermes in str(err.value)
        assert "\n" not in str(err.value)
        assert not client.ready()
    with HermesClient(not_hermes + "/ok") as client, pytest.raises(BadReplyError):
        client._call("GET", "")  # a 2xx that is not JSON either


def test_importing_the_client_loads_no_library_layer() -> None:
    code = ("import sys, hermes_redis.client\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('redis', 'rq', 'sqlite3', '_sqlite3', 'msgpack', 'tiktoken') or m.startswith("
            "('hermes_redis.session_memory', 'hermes_redis.store', 'hermes_redis.tiers', "
            "'hermes_redis.server', 'hermes_redis.context', 'hermes_redis.memory')))\n"
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == ""
