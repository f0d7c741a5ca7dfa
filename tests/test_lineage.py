"""Issue 30, part 5: sessions that continue and fork. A continued session opens with its
parent's thread; a fork holds copies of its parent's history up to a seq, and later writes
and forgets in either never touch the other. Both tiers (the new session also after its hot
keys expired), both hot backends, both archives (cluster+pg stack), and the faces: HTTP
(another user's session is a 404), MCP and the CLI. Refusals write nothing."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from hermes_redis import SessionMemory
from hermes_redis.core.errors import NotFoundError, StateError, ValidationError
from hermes_redis.core.models import Message
from hermes_redis.store.archive import Archive
from hermes_redis.store.archive import postgres as archive_pg
from hermes_redis.store.archive.base import SCHEMA_VERSION
from hermes_redis.store.archive.postgres import PostgresArchive
from tests.http_server import ServeProcess, cli, serve_config
from tests.redis_server import RedisServer


def expire(mem: SessionMemory, sid: str) -> None:
    """What a TTL does to a fully archived session: its hot keys go (the archive stays)."""
    mem.flush(sid)
    mem.hot.drop(sid)


def conversation(mem: SessionMemory, user: str = "alice", turns: int = 4) -> str:
    sid = mem.create_session(user, title="zebra rollout")
    for i in range(1, turns + 1):
        mem.append(sid, "user", f"Step {i}: deploy the zebra service to staging port 80{i}.")
        mem.append(sid, "assistant", f"Deployed zebra step {i} on port 80{i}.")
    return sid


def snapshot(mem: SessionMemory, user: str) -> list[tuple[str, int, int]]:
    """Every session of ``user`` in both tiers, with its counters: what a refusal must keep."""
    infos = mem.list_sessions(user_id=user, status="all", limit=None)
    return sorted((i.session_id, i.message_count, i.last_seq) for i in infos)


# --- continue --------------------------------------------------------------------------------
@pytest.mark.parametrize("expired", [False, True], ids=["hot", "archive"])
def test_a_continued_session_opens_with_its_parents_thread(mem: SessionMemory,
                                                           expired: bool) -> None:
    parent = conversation(mem)
    before = [m.content for m in mem.messages(parent)]
    child = mem.continue_session(parent)
    assert child != parent
    info = mem.info(child)
    assert (info.user_id, info.parent_session_id, info.forked_at_seq) == ("alice", parent, None)
    if expired:
        expire(mem, child)
        assert mem.info(child).tier == "archive" and mem.info(child).parent_session_id == parent
    chat = mem.context(child).as_chat()
    opening = [c for c in chat if c["role"] == "system" and parent in c["content"]]
    assert len(opening) == 1
    text = opening[0]["content"]
    assert "zebra" in text and "port 801" in text  # the thread from its start...
    last_user = mem.messages(parent)[-2].content
    assert last_user in text  # ...and where it left off, verbatim
    assert [m.content for m in mem.messages(parent)] == before  # the parent is only read
    assert mem.info(parent).parent_session_id is None


def test_a_continued_session_keeps_the_opening_while_it_grows(mem: SessionMemory) -> None:
    parent = conversation(mem)
    child = mem.continue_session(parent)
    for i in range(120):
        mem.append(child, "user", f"new work item {i} about giraffes and their long necks")
        mem.append(child, "assistant", f"noted giraffe item {i}")
    mem.flush(child)
    ctx = mem.context(child, budget=3000)
    assert ctx.tokens <= 3000 and not ctx.whole
    assert ctx.opening and ctx.opening[0].seq == 1 and parent in ctx.opening[0].content


def test_the_parents_summary_is_carried(mem: SessionMemory) -> None:
    parent = conversation(mem, turns=30)
    mem.flush(parent)
    result = mem.compact(parent)
    stored = mem.info(parent)
    assert result is not None and stored.summary and stored.summary_seq > 0
    child = mem.continue_session(parent)
    text = mem.messages(child)[0].content
    assert "Step 1" in stored.summary or "zebra" in stored.summary
    assert "zebra" in text and mem.messages(parent)[-2].content in text


# --- fork ------------------------------------------------------------------------------------
@pytest.mark.parametrize("at", [None, 5])
def test_a_fork_copies_the_history_up_to_the_seq(mem: SessionMemory, at: int | None) -> None:
    parent = conversation(mem)
    mem.append(parent, "assistant", "", item={"type": "message", "content": [{"text": "x"}]})
    child = mem.fork(parent, at)
    upto = mem.info(parent).last_seq if at is None else at
    original = [m for m in mem.messages(parent) if m.seq <= upto]
    copies = mem.messages(child)
    assert [(m.seq, m.role, m.content, m.item) for m in copies] == \
        [(m.seq, m.role, m.content, m.item) for m in original]
    assert not {m.message_id for m in copies} & {m.message_id for m in original}
    info = mem.info(child)
    assert (info.user_id, info.parent_session_id, info.forked_at_seq) == ("alice", parent, upto)
    assert info.message_count == len(original) and info.last_seq == upto
    expire(mem, child)  # the archive tier keeps the copies and the lineage
    again = mem.info(child)
    assert (again.parent_session_id, again.forked_at_seq) == (parent, upto)
    assert [m.content for m in mem.messages(child)] == [m.content for m in original]
    assert mem.append(child, "user", "next").seq == upto + 1


def _contents(mem: SessionMemory, sid: str) -> list[str]:
    return [m.content for m in mem.messages(sid)]


def test_writes_and_forgets_in_a_fork_never_touch_its_parent(mem: SessionMemory) -> None:
    parent = conversation(mem)
    child = mem.fork(parent)
    kept = _contents(mem, parent)
    mem.append(child, "user", "only in the fork")
    assert mem.forget_keyword(child, "port 802") == 2
    assert mem.forget_last(child, 1) == 1
    assert mem.pop(child) is not None
    assert _contents(mem, parent) == kept and mem.info(parent).message_count == len(kept)
    assert all("only in the fork" not in c["content"] for c in mem.context(parent).as_chat())
    mem.clear(child, history=True)
    assert mem.messages(child) == [] and _contents(mem, parent) == kept


def test_writes_and_forgets_in_a_parent_never_touch_its_fork(mem: SessionMemory) -> None:
    parent = conversation(mem)
    child = mem.fork(parent)
    copied = _contents(mem, child)
    mem.append(parent, "user", "only in the parent")
    assert mem.forget_keyword(parent, "zebra") == len(copied)
    mem.pop(parent)
    assert _contents(mem, child) == copied
    assert all("only in the parent" not in c["content"] for c in mem.context(child).as_chat())
    mem.delete(parent, purge=True)
    assert _contents(mem, child) == copied and mem.info(child).parent_session_id == parent


# --- refusals --------------------------------------------------------------------------------
@pytest.mark.parametrize("at_seq", [0, -1, 9, 10**6, True, "3", 2.0])
def test_a_bad_seq_is_one_line_and_writes_nothing(mem: SessionMemory, at_seq: object) -> None:
    parent = conversation(mem)
    before = snapshot(mem, "alice")
    with pytest.raises(ValidationError) as err:
        mem.fork(parent, at_seq)  # type: ignore[arg-type]
    assert "\n" not in str(err.value) and "at_seq" in str(err.value)
    assert snapshot(mem, "alice") == before


def test_unknown_deleted_and_empty_sessions_are_refused(mem: SessionMemory) -> None:
    before = snapshot(mem, "alice")
    with pytest.raises(NotFoundError):
        mem.continue_session("f" * 32)
    with pytest.raises(NotFoundError):
        mem.fork("f" * 32)
    with pytest.raises(ValidationError):
        mem.fork("not a session id!")
    assert snapshot(mem, "alice") == before
    empty = mem.create_session("alice")
    with pytest.raises(ValidationError, match="no messages to fork"):
        mem.fork(empty)
    gone = conversation(mem)
    mem.delete(gone)
    before = snapshot(mem, "alice")
    for start in (mem.continue_session, mem.fork):
        with pytest.raises(StateError):
            start(gone)
    assert snapshot(mem, "alice") == before


# --- the archive's schema 8 ------------------------------------------------------------------
def _row(sid: str, **extra: object) -> dict[str, object]:
    return {"session_id": sid, "user_id": "u", "title": "", "created_at": 1.7e9,
            "updated_at": 1.7e9, "status": "active", **extra}


def test_a_schema_7_sqlite_archive_is_upgraded_in_place(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    store = Archive(path)
    store.write(_row("a"), [Message("a", 1, "user", "hello", 1)])
    store.close()
    with sqlite3.connect(path) as db:  # the file hermes-redis at schema 7 left
        db.execute("ALTER TABLE sessions DROP COLUMN parent_session_id")
        db.execute("ALTER TABLE sessions DROP COLUMN forked_at_seq")
        db.execute("PRAGMA user_version = 7")
    store = Archive(path)
    try:
        old = store.session("a")
        assert old is not None and old["parent_session_id"] is None and old["forked_at_seq"] is None
        store.write(_row("b", parent_session_id="a", forked_at_seq=1), [])
        store.write(_row("b"), [])  # a later row without lineage never erases it
        new = store.session("b")
        assert new is not None and (new["parent_session_id"], new["forked_at_seq"]) == ("a", 1)
        assert [m.content for m in store.messages("a")] == ["hello"]
    finally:
        store.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 8


@pytest.fixture
def pg7(pg_url: str) -> Iterator[str]:
    """A PostgreSQL archive as schema 7 left it, holding one session."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for version in range(1, 8):
            conn.execute(archive_pg.MIGRATIONS[version])
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO schema_version VALUES (7)")
        conn.execute("INSERT INTO sessions (session_id, user_id, title) VALUES ('a', 'u', '')")
    yield pg_url


def test_a_schema_7_postgres_archive_is_upgraded_in_place(pg7: str) -> None:
    store = PostgresArchive(pg7, pool_size=2)
    try:
        old = store.session("a")
        assert old is not None and old["parent_session_id"] is None
        store.write(_row("b", parent_session_id="a", forked_at_seq=3), [])
        store.write(_row("b"), [])
        new = store.session("b")
        assert new is not None and (new["parent_session_id"], new["forked_at_seq"]) == ("a", 3)
    finally:
        store.close()
    with psycopg.connect(pg7) as conn:
        assert archive_pg.schema_version(conn) == archive_pg.SCHEMA_VERSION >= 8


# --- the faces -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory,
          redis_server: RedisServer) -> Iterator[tuple[Path, ServeProcess, dict[str, str]]]:
    config = serve_config(tmp_path_factory.mktemp("lineage"), redis_server.url)
    keys = {who: json.loads(cli(config, "key", "create", "--user", who, "--json").stdout)["key"]
            for who in ("alice", "bob")}
    server = ServeProcess(config).start()
    yield config, server, keys
    server.stop()


def test_http_continue_and_fork_answer_201_and_refuse_in_one_line(
        keyed: tuple[Path, ServeProcess, dict[str, str]]) -> None:
    _config, server, keys = keyed
    alice = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {keys['alice']}"})
    bob = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {keys['bob']}"})
    with alice, bob:
        sid = alice.post("/v1/sessions", json={"title": "t"}).json()["session_id"]
        for text in ("plan the zebra move", "moving zebras", "where to", "the north field"):
            alice.post(f"/v1/sessions/{sid}/messages", json={"role": "user", "content": text})
        made = alice.post(f"/v1/sessions/{sid}/continue")
        assert made.status_code == 201, made.text
        assert made.json()["parent_session_id"] == sid and made.json()["user_id"] == "alice"
        forked = alice.post(f"/v1/sessions/{sid}/fork", json={"at_seq": 2})
        assert forked.status_code == 201, forked.text
        assert (forked.json()["forked_at_seq"], forked.json()["message_count"]) == (2, 2)
        assert alice.post(f"/v1/sessions/{sid}/fork").json()["forked_at_seq"] == 4
        listed = alice.get("/v1/sessions", params={"status": "all"}).json()["sessions"]
        before = len(listed)
        for bad in ({"at_seq": 5}, {"at_seq": 0}, {"at_seq": "2"}, {"at_seq": True}):
            refused = alice.post(f"/v1/sessions/{sid}/fork", json=bad)
            assert 400 <= refused.status_code < 500, (bad, refused.text)
        for path in ("continue", "fork"):  # bob's key: alice's session is not found
            theirs = bob.post(f"/v1/sessions/{sid}/{path}")
            assert theirs.status_code == 404 and sid in theirs.json()["error"]["message"]
        assert bob.get("/v1/sessions", params={"status": "all"}).json()["sessions"] == []
        assert len(alice.get("/v1/sessions", params={"status": "all"}).json()["sessions"]) == before


def test_cli_continue_fork_and_lineage_in_list_and_info(
        keyed: tuple[Path, ServeProcess, dict[str, str]]) -> None:
    config = keyed[0]
    sid = cli(config, "session", "create", "--user", "carol", "--title", "cli parent").stdout.strip()
    for text in ("one", "two", "three"):
        cli(config, "session", "append", sid, "--role", "user", "--content", text)
    child = cli(config, "session", "continue", sid[:10]).stdout.strip()
    fork = json.loads(cli(config, "session", "fork", sid, "--at", "2", "--json").stdout)
    assert fork["parent_session_id"] == sid and fork["forked_at_seq"] == 2
    listing = cli(config, "session", "list", "--user", "carol").stdout
    assert f"continues {sid[:8]}" in listing and f"fork of {sid[:8]} at #2" in listing
    assert "From:" in cli(config, "info", child).stdout
    assert f"continues {sid}" in cli(config, "info", child).stdout
    bad = cli(config, "session", "fork", sid, "--at", "9", check=False)
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "at_seq 9" in bad.stderr
