"""Security basics: passwords, ACL users and TLS work end to end (agent, worker process,
archive); secrets never appear in errors, ``info`` or the CLI; one user's calls never
return another user's sessions."""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hermes_redis import Config, SessionMemory
from hermes_redis.cli.main import cli
from hermes_redis.core.errors import BackendUnavailableError, ConfigError, NotFoundError
from tests.fault.conftest import SecureRedis, burst, figures, make_tls_dir
from tests.helpers import archive_rows, write_config

SECRET = "pw-Zq8s3cret"
API_KEY = "sk-live-DO-NOT-PRINT-42"


def cfg_for(tmp_path: Path, url: str, **redis: object) -> tuple[Config, Path]:
    tag = uuid.uuid4().hex[:8]
    cfg = Config().with_overrides(
        redis={"url": url, "key_prefix": f"s{tag}", "queue": f"q{tag}", "socket_timeout": 2,
               **redis},
        archive={"data_dir": str(tmp_path / "data"), "path": str(tmp_path / f"{tag}.db")},
        summarizer={"api_key": API_KEY},
    )
    return cfg, write_config(cfg, tmp_path / f"{tag}.yml")


def round_trip(cfg: Config, path: Path, tmp_path: Path) -> None:
    """Agent appends, a separate worker process archives, context reads back."""
    with SessionMemory(cfg) as mem:
        sid = mem.create_session(user_id="alice")
        for i in range(5):
            mem.append(sid, "user", f"question {i}")
            mem.append(sid, "assistant", f"answer {i}")
        burst(path, tmp_path / "worker.log")
        assert len(archive_rows(cfg, sid)) == 10
        assert mem.info(sid).backlog == 0
        assert mem.context(sid).messages[-1].content == "answer 4"


def assert_secret_free(*texts: str) -> None:
    for text in texts:
        assert SECRET not in text and API_KEY not in text, text


@pytest.fixture
def password_server():
    server = SecureRedis(password=SECRET).start()
    yield server
    server.cleanup()


def test_password_in_url(password_server, tmp_path):
    cfg, path = cfg_for(tmp_path, password_server.url)
    round_trip(cfg, path, tmp_path)
    assert_secret_free((tmp_path / "worker.log").read_text())


def test_wrong_or_missing_password_is_clear_and_redacted(password_server, tmp_path):
    wrong = password_server.url.replace(SECRET, "not-" + SECRET)
    cfg, _ = cfg_for(tmp_path, wrong)
    with pytest.raises(BackendUnavailableError) as err:
        SessionMemory(cfg)
    text = str(err.value)
    assert "rejected the credentials" in text and "***" in text and "\n" not in text
    assert "not-" not in text
    assert_secret_free(text)
    cfg, _ = cfg_for(tmp_path, f"redis://127.0.0.1:{password_server.port}/0")
    with pytest.raises(BackendUnavailableError, match=r"credentials|password|auth"):
        SessionMemory(cfg)


def test_acl_user_limited_to_its_keys(tmp_path):
    rule = f"app on >{SECRET} ~s* ~rq:* &* +@all"
    server = SecureRedis(password=SECRET, username="app", acl=[rule, "default off"]).start()
    try:
        assert server.url.startswith("redis://app:")
        cfg, path = cfg_for(tmp_path, server.url)
        round_trip(cfg, path, tmp_path)
        assert_secret_free((tmp_path / "worker.log").read_text())
        outside, _ = cfg_for(tmp_path, server.url, key_prefix="other")
        with pytest.raises(BackendUnavailableError) as err, SessionMemory(outside) as mem:
            mem.create_session(user_id="alice")  # refused at connect now, before this
        assert "check the ACL user" in str(err.value) and "app:***@" in str(err.value)
        assert_secret_free(str(err.value))
    finally:
        server.cleanup()


# What docs/operations.md tells an operator to grant a hermes-redis ACL user.
LEAST = ("-@all +@read +@write +@scripting +@transaction +@connection +@pubsub +info "
         "+config|get")


def test_acl_user_with_only_the_commands_operations_md_lists(tmp_path):
    """The least a deployment needs: its key prefix and RQ's keys and channels, and the
    command categories docs/operations.md names. Agent, worker and context work, and nothing
    in the worker's log was refused (RQ's command listener subscribes: @pubsub)."""
    rule = f"app on >{SECRET} ~s* ~rq:* &* {LEAST}"
    assert LEAST in (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    server = SecureRedis(password=SECRET, username="app", acl=[rule, "default off"]).start()
    try:
        cfg, path = cfg_for(tmp_path, server.url)
        round_trip(cfg, path, tmp_path)
        log = (tmp_path / "worker.log").read_text()
        assert "NoPermission" not in log and "no permissions" not in log, log[-2000:]
        with SessionMemory(cfg) as mem:
            assert not [w for w in mem.hot.warnings if "CONFIG" in w]  # the policy was checked
    finally:
        server.cleanup()


def test_tls_rediss_url(tmp_path):
    tls = make_tls_dir(tmp_path / "tls")
    if tls is None:
        pytest.skip("openssl is not installed: cannot make a test certificate")
    try:
        server = SecureRedis(password=SECRET, tls_dir=tls).start()
    except RuntimeError as err:
        if "tls" in str(err).lower() and ("not supported" in str(err).lower()
                                          or "bad directive" in str(err).lower()):
            pytest.skip(f"this redis-server was built without TLS: {err}")
        raise
    try:
        cfg, path = cfg_for(tmp_path, server.url)
        assert cfg.redis.url.startswith("rediss://")
        round_trip(cfg, path, tmp_path)
        plain, _ = cfg_for(tmp_path, f"redis://:{SECRET}@127.0.0.1:{server.port}/0")
        with pytest.raises(BackendUnavailableError) as err:
            SessionMemory(plain)  # plain text to a TLS port: a clear error, not a hang
        assert_secret_free(str(err.value))
        figures("tls", url_scheme="rediss", round_trips=1)
    finally:
        server.cleanup()


def test_secrets_never_in_errors_info_or_cli(password_server, tmp_path):
    cfg, path = cfg_for(tmp_path, password_server.url)
    with SessionMemory(cfg) as mem:
        sid = mem.create_session(user_id="alice")
        mem.append(sid, "user", "hello there")
        texts = [json.dumps(mem.info(sid).as_dict()), json.dumps(mem.context(sid).as_dict())]
    runner = CliRunner()
    for args in (["info", sid], ["info", sid, "--json"], ["session", "list", "--json"],
                 ["session", "list"], ["session", "resume", sid]):
        result = runner.invoke(cli, ["--config", str(path), *args])
        assert result.exit_code == 0, result.output
        texts.append(result.output)
    password_server.stop()
    for args in (["info", sid], ["session", "list"]):  # Redis down: the error names the URL
        result = runner.invoke(cli, ["--config", str(path), *args])
        assert result.exit_code != 0 and "***" in result.output, result.output
        texts.append(result.output)
    bad = tmp_path / "bad.yml"
    bad.write_text(f"redis:\n  url: 'http://u:{SECRET}@127.0.0.1:1'\n")
    with pytest.raises(ConfigError) as err:
        SessionMemory.from_config(bad)
    texts.append(str(err.value))
    assert_secret_free(*texts)
    figures("secrets", outputs_checked=len(texts), leaks=0)


def test_redis_logs_no_secret_on_unreachable(tmp_path, caplog):
    cfg, _ = cfg_for(tmp_path, f"redis://app:{SECRET}@127.0.0.1:1/0", retries=0)
    with caplog.at_level(logging.DEBUG), pytest.raises(BackendUnavailableError) as err:
        SessionMemory(cfg)
    assert "app:***@127.0.0.1:1" in str(err.value)
    assert_secret_free(str(err.value), caplog.text)


def test_per_user_isolation(rmem, tmp_path):
    """Through the library and through the CLI: a user's listing, search hits, memories and
    resumed context hold only that user's sessions, whatever the user id looks like."""
    mem = rmem
    alice = [mem.create_session(user_id="alice") for _ in range(3)]
    bob = [mem.create_session(user_id="bob") for _ in range(3)]
    evil = mem.create_session(user_id="%")
    for sid in alice + bob + [evil]:
        mem.append(sid, "user", f"secret plan JWT rotation for {sid}")
    bob_memory = mem.remember("bob", "bob's private memory: JWT key is in vault")
    for sid in alice[:2] + bob[:2]:  # some archived, some only hot
        mem.flush(sid)
    mem.hot.drop(bob[0])  # bob's first session now lives only in the archive
    checks = 0
    for user, mine in (("alice", alice), ("bob", bob), ("%", [evil])):
        for status in ("active", "all"):
            got = {i.session_id for i in mem.list_sessions(user_id=user, status=status)}
            assert got == set(mine), (user, status)
            checks += 1
        hits = mem.search("JWT", user_id=user)
        assert {h.session_id for h in hits} == set(mine), user
        assert all(h.session_id in mine for h in mem.search("secret plan", user_id=user))
        checks += 2
    for user in ("alice' OR '1'='1", "*", "_", "ALICE"):
        assert mem.list_sessions(user_id=user, status="all") == []
        assert mem.search("JWT", user_id=user) == []
        checks += 2
    ctx = mem.context(alice[0])
    assert "vault" not in json.dumps(ctx.as_dict())  # bob's memory never reaches alice
    assert mem.memories("alice") == [] and mem.memories("alice", query="vault JWT") == []
    assert [m.memory_id for m in mem.memories("bob")] == [bob_memory]
    with pytest.raises(NotFoundError, match=f"no memory {bob_memory}"):
        mem.forget_memory(bob_memory, user_id="alice")  # answers as if it did not exist
    assert mem.resume(user_id="alice").session_id in alice
    checks += 5

    path = write_config(mem.config, tmp_path / "isolation.yml")

    def run(*args: str) -> Any:
        result = CliRunner().invoke(cli, ["--config", str(path), *args])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    for user, mine in (("alice", alice), ("bob", bob), ("%", [evil])):
        listed = run("session", "list", "--user", user, "--status", "all", "--json")
        assert {d["session_id"] for d in listed} == set(mine), user
        assert {h["session_id"] for h in run("search", "JWT", "--user", user, "--json")} == set(
            mine), user
        resumed = run("session", "resume", "--user", user, "--json")
        assert resumed["session_id"] in mine, user
        assert ("vault" in json.dumps(resumed)) is (user == "bob"), user  # bob's memory is his
        checks += 3
    assert run("memory", "list", "--user", "alice", "--json") == []
    assert run("memory", "search", "vault", "--user", "alice", "--json") == []
    assert [m["memory_id"] for m in run("memory", "list", "--user", "bob", "--json")] == [
        bob_memory]
    refused = CliRunner().invoke(cli, ["--config", str(path), "memory", "forget", bob_memory,
                                       "--user", "alice"])
    assert refused.exit_code == 3 and f"no memory {bob_memory}" in refused.stderr
    assert [m.memory_id for m in mem.memories("bob")] == [bob_memory]  # still bob's
    checks += 4
    figures("isolation", users=3, checks=checks, leaks=0)
