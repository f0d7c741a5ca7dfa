"""HermesClient against a real server: the same return values and exceptions as the
SessionMemory it fronts (both read one Redis and one archive here), and the CLI's
``--server URL --api-key K`` mode."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_redis import SessionMemory
from hermes_redis.client import AuthError, HermesClient
from hermes_redis.core import config as config_mod
from hermes_redis.core.errors import BackendUnavailableError, NotFoundError, StateError, ValidationError
from hermes_redis.core.models import CompactResult, Context, Message, SearchHit, SessionInfo, new_message_id
from tests.http_server import ServeProcess, cli, serve_config
from tests.redis_server import RedisServer, free_port


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer) -> Path:
    return serve_config(tmp_path_factory.mktemp("client"), redis_server.url)


@pytest.fixture(scope="module")
def key(config_path: Path) -> str:
    out = cli(config_path, "key", "create", "--user", "alice", "--json")
    return str(json.loads(out.stdout)["key"])


@pytest.fixture(scope="module")
def server(config_path: Path, key: str) -> Iterator[ServeProcess]:
    proc = ServeProcess(config_path).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def remote(server: ServeProcess, key: str) -> Iterator[HermesClient]:
    with HermesClient(server.url, key) as client:
        yield client


@pytest.fixture(scope="module")
def local(config_path: Path) -> Iterator[SessionMemory]:
    with SessionMemory(config_mod.load(config_path)) as mem:
        yield mem


def test_the_client_returns_what_the_library_returns(remote: HermesClient,
                                                     local: SessionMemory) -> None:
    sid = remote.create_session(title="parity")
    m = remote.append(sid, "user", "帮我写一个 FastAPI 的用户认证接口", file_refs=["a.py"],
                      message_id=new_message_id())
    assert isinstance(m, Message) and m.seq == 1 and m.file_refs == ("a.py",)
    turn = remote.append_many(sid, [
        {"role": "assistant", "content": "calling a tool",
         "tool_calls": [{"name": "read", "arguments": {"path": "a.py"}}]},
        {"role": "tool", "content": "print('hi')"},
    ])
    assert [t.seq for t in turn] == [2, 3]
    # field for field, what the library reads from the same tiers
    assert remote.messages(sid) == local.messages(sid)
    assert remote.messages(sid, after_seq=1, limit=1) == local.messages(sid)[1:2]
    info = remote.info(sid)
    assert isinstance(info, SessionInfo) and info.user_id == "alice"
    assert info.message_count == local.info(sid).message_count == 3
    ctx = remote.context(sid, 500, query="FastAPI")
    assert isinstance(ctx, Context)
    want = local.context(sid, 500, query="FastAPI", touch=False)
    assert ctx.messages == want.messages and ctx.tokens == want.tokens and ctx.as_chat() == want.as_chat()
    assert remote.resume(sid).session_id == sid
    hits = remote.search("FastAPI")
    assert hits and isinstance(hits[0], SearchHit) and hits[0].session_id == sid
    assert remote.resolve(sid[:10]) == sid


def test_the_client_changes_what_the_library_sees(remote: HermesClient, local: SessionMemory) -> None:
    sid = remote.create_session()
    for i in range(12):
        remote.append_many(sid, [{"role": "user", "content": f"question {i} about MySQL" if i == 3
                                  else f"question {i}"},
                                 {"role": "assistant", "content": f"answer {i}"}])
    assert remote.forget_last(sid, 1) == 2
    assert remote.forget_keyword(sid, "mysql") == 1
    assert local.info(sid).message_count == 21
    result = remote.compact(sid)
    assert isinstance(result, CompactResult) and result.summarized_upto > 0
    remote.archive(sid)
    assert local.info(sid).status == "archived"
    with pytest.raises(StateError):
        remote.context(sid)
    remote.restore(sid)
    remote.clear(sid)
    assert local.context(sid, touch=False).messages == ()
    memory_id = remote.remember(None, "prefers PostgreSQL", session_id=sid)
    assert [m.memory_id for m in remote.memories()] == [m.memory_id for m in local.memories("alice")]
    remote.forget_memory(memory_id)
    assert local.memories("alice") == [] or all(m.memory_id != memory_id
                                                for m in local.memories("alice"))
    remote.delete(sid)
    assert local.info(sid).status == "deleted"


def test_the_client_raises_the_library_exceptions_with_its_messages(
        remote: HermesClient, local: SessionMemory) -> None:
    sid = remote.create_session()
    with pytest.raises(ValidationError) as theirs:
        remote.append(sid, "bot", "hi")
    with pytest.raises(ValidationError) as ours:
        local.append(sid, "bot", "hi")
    assert str(theirs.value) == str(ours.value)
    with pytest.raises(NotFoundError):
        remote.info("0000nosuchsession")
    with pytest.raises(ValidationError):
        remote.forget_last(sid, 0)
    with pytest.raises(ValidationError):
        remote.info("not/a/path")
    with pytest.raises(NotFoundError):
        remote.resolve("zzzz")


def test_bad_key_and_dead_server(server: ServeProcess) -> None:
    with HermesClient(server.url, "hrk_wrong_key") as bad, pytest.raises(AuthError) as err:
        bad.list_sessions()
    assert "hrk_wrong_key" not in str(err.value)
    with HermesClient(f"http://127.0.0.1:{free_port()}", None, timeout=2) as dead:
        with pytest.raises(BackendUnavailableError) as down:
            dead.create_session()
        assert "hermes-redis serve" in str(down.value)
        assert not dead.ready()


# --- the CLI through --server ---------------------------------------------------------------
def remote_cli(server: ServeProcess, key: str, config: Path, *args: str,
               check: bool = True) -> tuple[int, str, str]:
    out = cli(config, "--server", server.url, "--api-key", key, *args, check=False)
    if check:
        assert out.returncode == 0, out.stderr
    return out.returncode, out.stdout, out.stderr


def test_cli_commands_run_against_the_server(server: ServeProcess, key: str, config_path: Path,
                                             remote: HermesClient) -> None:
    sid = remote.create_session(title="remote cli")
    remote.append_many(sid, [{"role": "user", "content": "remember the kiwi protocol"},
                             {"role": "assistant", "content": "noted: kiwi"},
                             {"role": "user", "content": "and the mango one"},
                             {"role": "assistant", "content": "noted: mango"}])
    _, listed, _ = remote_cli(server, key, config_path, "session", "list", "--json")
    assert sid in [s["session_id"] for s in json.loads(listed)]
    _, table, _ = remote_cli(server, key, config_path, "session", "list")
    assert sid[:8] in table and "remote cli" in table
    _, info, _ = remote_cli(server, key, config_path, "info", sid[:10])
    assert "Token usage:" in info and "4 messages" in info
    _, resumed, _ = remote_cli(server, key, config_path, "session", "resume", sid[:10], "--json")
    assert [m["seq"] for m in json.loads(resumed)["messages"]] == [1, 2, 3, 4]
    _, found, _ = remote_cli(server, key, config_path, "search", "kiwi", "--json")
    assert {h["seq"] for h in json.loads(found)} == {1, 2}
    _, forgot, _ = remote_cli(server, key, config_path, "session", "forget", sid[:10], "--last", "1")
    assert "Forgot 2 messages" in forgot
    _, exported, _ = remote_cli(server, key, config_path, "session", "export", sid[:10])
    assert [json.loads(line)["seq"] for line in exported.splitlines()] == [1, 2]
    _, cleared, _ = remote_cli(server, key, config_path, "session", "clear", sid[:10])
    assert "Cleared the context" in cleared
    remote_cli(server, key, config_path, "session", "archive", sid[:10])
    assert remote.info(sid).status == "archived"
    remote_cli(server, key, config_path, "session", "restore", sid[:10])
    remote_cli(server, key, config_path, "session", "delete", sid[:10])
    assert remote.info(sid).status == "deleted"


def test_cli_remote_errors_are_one_line(server: ServeProcess, key: str, config_path: Path) -> None:
    code, _, err = remote_cli(server, key, config_path, "info", "nosuchsess", check=False)
    assert code == NotFoundError.exit_code and err.startswith("Error: no session matches")
    code, _, err = remote_cli(server, "hrk_bad", config_path, "session", "list", check=False)
    assert code == AuthError.exit_code and "invalid or revoked API key" in err
    assert "hrk_bad" not in err and "Traceback" not in err
    code, _, err = remote_cli(server, key, config_path, "worker", check=False)
    assert code != 0 and "runs on the server's host" in err
    code, _, err = remote_cli(server, key, config_path, "key", "list", check=False)
    assert code != 0 and "key commands run on the server's host" in err


def test_a_client_can_be_pointed_at_a_fresh_server_config(tmp_path: Path,
                                                          redis_server: RedisServer) -> None:
    """Without keys, the client needs none (the loopback default)."""
    proc = ServeProcess(serve_config(tmp_path, redis_server.url)).start()
    try:
        with HermesClient(proc.url) as open_client:
            sid = open_client.create_session(user_id="zed")
            assert open_client.info(sid).user_id == "zed"
            assert open_client.ready()
    finally:
        proc.stop()


def test_the_last_messages_over_http(remote: HermesClient, local: SessionMemory) -> None:
    sid = remote.create_session(title="last")
    remote.append_many(sid, [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"}
                             for i in range(12)])
    assert remote.messages(sid, last=4) == local.messages(sid, last=4) == local.messages(sid)[-4:]
    with pytest.raises(ValidationError):
        remote.messages(sid, last=0)


def test_direct_connections_survive_idle_closes_and_threads(server: ServeProcess,
                                                            key: str) -> None:
    """Without a transport the client keeps one http.client connection per thread: a
    connection the server dropped while idle is reopened, threads do not share one, and
    with a transport (or a proxy) the same calls go through httpx and answer the same."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    with HermesClient(server.url, key) as remote:
        assert remote._direct is not None
        sid = remote.create_session(title="direct")
        remote.append(sid, "user", "one")
        conn = remote._direct._local.conn
        assert conn.sock is not None
        conn.sock.shutdown(2)  # as if the keep-alive timeout had closed it
        assert remote.append(sid, "user", "two").seq == 2
        with ThreadPoolExecutor(4) as pool:
            seqs = list(pool.map(lambda i: remote.append(sid, "user", f"t{i}").seq, range(40)))
            assert len(remote._direct._all) >= 2  # the pool's live threads: one each
        assert sorted(seqs) == list(range(3, 43))
        with pytest.raises(ValidationError) as err:
            remote.append(sid, "robot", "x")
        direct_error = str(err.value)
    with HermesClient(server.url, key, transport=httpx.HTTPTransport()) as via_httpx:
        assert via_httpx._direct is None
        assert [m.seq for m in via_httpx.messages(sid)] == list(range(1, 43))
        with pytest.raises(ValidationError) as err:
            via_httpx.append(sid, "robot", "x")
        assert str(err.value) == direct_error


def test_a_finished_thread_lets_its_connection_go(server: ServeProcess, key: str) -> None:
    """One keep-alive connection per thread, for that thread's life: a client used from a
    thread per request held every one of them, open, until close()."""
    import gc

    with HermesClient(server.url, key) as remote:
        assert remote._direct is not None
        sid = remote.create_session(title="threads")  # the main thread's connection
        for i in range(30):
            worker = threading.Thread(target=remote.append, args=(sid, "user", f"t{i}"))
            worker.start()
            worker.join()
        gc.collect()
        assert len(remote._direct._all) == 1  # the main thread's: the 30 others closed
        assert len(remote.messages(sid)) == 30


def test_a_proxy_in_the_environment_sends_the_calls_through_httpx(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("http_proxy", "http://proxy.invalid:3128")
    with HermesClient("http://10.0.0.5:8080") as remote:
        assert remote._direct is None
    monkeypatch.setenv("no_proxy", "10.0.0.5")
    with HermesClient("http://10.0.0.5:8080") as remote:
        assert remote._direct is not None


def test_forget_memory_keeps_to_the_named_user(remote: HermesClient) -> None:
    """``forget_memory(id, user_id)`` as the library's: the key's own user forgets it; a user
    key naming another user is refused (403, AuthError) and nothing is forgotten."""
    mid = remote.remember(None, "alice takes her tea without sugar")
    with pytest.raises(AuthError):
        remote.forget_memory(mid, user_id="bob")
    assert mid in [m.memory_id for m in remote.memories()]
    remote.forget_memory(mid, user_id="alice")
    assert mid not in [m.memory_id for m in remote.memories(superseded=True)]
    with pytest.raises(NotFoundError):
        remote.forget_memory(mid, user_id="alice")
