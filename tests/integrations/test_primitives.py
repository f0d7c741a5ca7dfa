"""What the framework adapters stand on: pop, clear(history=True), reusing a purged id, and
the ``item`` payload kept exactly through the hot tier, the archive and HTTP (issue 13)."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_redis import SessionMemory
from hermes_redis.client import HermesClient
from hermes_redis.core import config as config_mod
from hermes_redis.core.errors import NotFoundError, ValidationError
from hermes_redis.core.models import Message
from hermes_redis.store.archive import SCHEMA_VERSION, Archive
from tests.http_server import ServeProcess, serve_config
from tests.redis_server import RedisServer

ITEM = {"type": "function_call_output", "call_id": "call_7", "z": None, "a": [1, 1.0, -0.0, True],
        "output": '{"weather": "晴", "temp_c": 21.5, "emoji": "🌤"}', "n": 2**62, "": {"k": ""}}


def counters_true(mem: SessionMemory, sid: str) -> None:
    """Invariant 5: the counters add up to what is stored."""
    stored = mem.messages(sid)
    info = mem.info(sid)
    assert info.message_count == len(stored)
    assert info.total_tokens == sum(m.token_count for m in stored)


def exact(got: object, want: object) -> bool:
    """Equal including key order and int/float/bool distinctions."""
    return json.dumps(got, ensure_ascii=False) == json.dumps(want, ensure_ascii=False)


# --- pop ----------------------------------------------------------------------------------------
def test_pop_returns_the_newest_and_forgets_it(mem):
    sid = mem.create_session()
    first = mem.append(sid, "user", "first")
    mem.append(sid, "assistant", "second")
    newest = mem.append(sid, "tool", "", item=ITEM)
    popped = mem.pop(sid)
    assert popped is not None and popped.message_id == newest.message_id
    assert exact(popped.item, ITEM)
    assert [m.content for m in mem.messages(sid)] == ["first", "second"]
    counters_true(mem, sid)
    mem.flush(sid)
    assert [m.seq for m in mem.cold.messages(sid)] == [1, 2]  # a popped message is never archived
    assert mem.pop(sid).content == "second"
    assert mem.pop(sid).message_id == first.message_id
    assert mem.pop(sid) is None  # empty: None, not an error
    counters_true(mem, sid)
    assert mem.append(sid, "user", "after").seq == 4  # seqs never go back


def test_pop_reaches_messages_only_the_archive_holds(mem):
    sid = mem.create_session()
    for i in range(4):
        mem.append(sid, "user" if i % 2 == 0 else "assistant", f"m{i}")
    mem.clear(sid)  # the context is empty: the hot list holds nothing, the archive all four
    assert mem.info(sid).hot_count == 0
    assert mem.pop(sid).content == "m3"
    assert [m.content for m in mem.cold.messages(sid)] == ["m0", "m1", "m2"]
    assert "m3" not in {m.content for m in mem.messages(sid)}
    mem.hot.drop(sid)  # expired: the session is rebuilt from the archive
    assert mem.pop(sid).content == "m2"
    assert [m.content for m in mem.messages(sid)] == ["m0", "m1"]
    counters_true(mem, sid)


def test_a_flush_in_flight_never_brings_a_popped_message_back(rmem):
    sid = rmem.create_session()
    rmem.append(sid, "user", "keep")
    doomed = rmem.append(sid, "assistant", "pop me")
    meta, pending = rmem.hot.meta(sid), rmem.hot.messages(sid)  # a flush read the backlog...
    assert rmem.pop(sid).message_id == doomed.message_id       # ...then the pop landed
    rmem.cold.write(meta.to_row(sid), pending)  # ...and the flush commits what it read
    assert [m.content for m in rmem.cold.messages(sid)] == ["keep"]
    assert [m.content for m in rmem.messages(sid)] == ["keep"]
    counters_true(rmem, sid)


def test_pop_of_an_unknown_session_is_not_found(mem):
    with pytest.raises(NotFoundError):
        mem.pop("no-such-session")
    with pytest.raises(ValidationError):
        mem.pop("bad id!")


def test_concurrent_pops_never_return_the_same_message(config_factory):
    config = config_factory("redis")
    mems = [SessionMemory(config) for _ in range(6)]
    sid = mems[0].create_session()
    stored = mems[0].append_many(sid, [{"role": "user", "content": f"m{i}"} for i in range(60)])
    mems[0].flush(sid)  # half archived and trimmed from the context, half only hot
    mems[0].clear(sid)
    stored += mems[0].append_many(sid, [{"role": "user", "content": f"h{i}"} for i in range(60)])
    got: list[list[Message]] = [[] for _ in mems]

    def popper(i: int) -> None:
        while (m := mems[i].pop(sid)) is not None:
            got[i].append(m)

    threads = [threading.Thread(target=popper, args=(i,)) for i in range(len(mems))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [m.message_id for g in got for m in g]
    assert len(ids) == len(set(ids)) == 120
    assert set(ids) == {m.message_id for m in stored}
    for g in got:  # each popper saw them newest first
        assert [m.seq for m in g] == sorted((m.seq for m in g), reverse=True)
    assert mems[0].messages(sid) == [] and mems[0].cold.stats(sid) == (0, 0, 0)
    counters_true(mems[0], sid)
    for m in mems:
        m.close()


# --- clear(history=True) ------------------------------------------------------------------------
def test_clear_history_forgets_every_message_and_keeps_memories(mem):
    sid = mem.create_session(user_id="alice")
    mem.append(sid, "user", "项目用 PostgreSQL")
    mem.append(sid, "assistant", "好的")
    mem.flush(sid)
    mem.append(sid, "user", "unflushed one")
    memory_id = mem.remember("alice", "项目用 PostgreSQL，不用 MySQL", session_id=sid)
    mem.clear(sid, history=True)
    assert mem.messages(sid) == []
    assert mem.cold.messages(sid) == []
    mem.flush(sid)
    assert mem.cold.messages(sid) == []  # nothing comes back with a flush
    info = mem.info(sid)
    assert info.message_count == 0 and info.total_tokens == 0 and info.summary == ""
    assert [m.memory_id for m in mem.memories("alice")] == [memory_id]
    assert mem.context(sid).memories  # the memory still reaches the model
    assert mem.search("PostgreSQL") == []
    assert mem.append(sid, "user", "again").seq == 4
    assert [m.content for m in mem.messages(sid)] == ["again"]
    counters_true(mem, sid)


def test_plain_clear_keeps_the_history(mem):
    sid = mem.create_session()
    mem.append(sid, "user", "kept")
    mem.clear(sid)
    assert [m.content for m in mem.messages(sid)] == ["kept"]
    assert mem.context(sid).messages == ()


# --- reusing an id ------------------------------------------------------------------------------
def test_a_purged_session_id_can_be_used_again(mem):
    mem.create_session(user_id="alice", session_id="agent-thread-1")
    mem.append("agent-thread-1", "user", "old conversation")
    mem.flush("agent-thread-1")
    mem.delete("agent-thread-1", purge=True)
    sid = mem.create_session(user_id="alice", session_id="agent-thread-1")
    assert sid == "agent-thread-1"
    assert mem.messages(sid) == []
    info = mem.info(sid)
    assert info.status == "active" and info.message_count == 0 and info.summary == ""
    assert mem.append(sid, "user", "new conversation").seq == 1
    mem.flush(sid)
    assert [m.content for m in mem.messages(sid)] == ["new conversation"]
    assert mem.cold.session(sid)["status"] == "active"


def test_reusing_an_id_is_refused_unless_deleted_purged_and_of_the_same_user(mem):
    mem.create_session(user_id="alice", session_id="s-live")
    with pytest.raises(ValidationError, match="already exists"):
        mem.create_session(user_id="alice", session_id="s-live")
    mem.append("s-live", "user", "kept in the archive")
    mem.delete("s-live")
    with pytest.raises(ValidationError, match="--purge"):
        mem.create_session(user_id="alice", session_id="s-live")
    mem.delete("s-live", purge=True)
    with pytest.raises(ValidationError, match="another user"):
        mem.create_session(user_id="mallory", session_id="s-live")
    assert mem.create_session(user_id="alice", session_id="s-live") == "s-live"


# --- item -----------------------------------------------------------------------------------------
def test_item_round_trips_exactly_hot_and_archived(mem):
    sid = mem.create_session()
    stored = mem.append(sid, "tool", "", item=ITEM)
    assert exact(stored.item, ITEM)
    assert stored.content.startswith('{"weather"')  # the rendering: the output text
    assert exact(mem.hot.messages(sid)[0].item, ITEM)
    mem.flush(sid)
    assert exact(mem.cold.messages(sid)[0].item, ITEM)
    mem.clear(sid)  # out of the hot tier: read from the archive alone
    mem.hot.drop(sid)
    (back,) = mem.messages(sid)
    assert exact(back.item, ITEM) and back.message_id == stored.message_id
    assert exact(back.as_dict()["item"], ITEM)


def test_item_is_never_cut_only_its_rendering(config_factory):
    mem = SessionMemory(config_factory("redis", tool_result_max_tokens=50))
    sid = mem.create_session()
    big = json.dumps({"rows": [{"id": i, "name": f"user {i}", "ok": i % 3 == 0} for i in range(400)]})
    item = {"type": "function_call_output", "call_id": "c1", "output": big}
    m = mem.append(sid, "tool", "", item=item)
    assert m.token_count <= 60 and len(m.content) < len(big)  # the context sees a capped rendering
    assert exact(m.item, item)
    mem.flush(sid)
    assert exact(mem.messages(sid)[0].item, item)
    assert exact(mem.cold.messages(sid)[0].item, item)
    mem.close()


def test_item_renderings_of_framework_shapes(mem):
    sid = mem.create_session()
    call = mem.append(sid, "assistant", "", item={"type": "function_call", "name": "get_weather",
                                                  "arguments": '{"city": "Tokyo"}', "call_id": "c"})
    assert call.content == 'get_weather({"city": "Tokyo"})'
    said = mem.append(sid, "assistant", "", item={"role": "assistant", "type": "message", "content": [
        {"type": "output_text", "text": "It is sunny.", "annotations": []}]})
    assert said.content == "It is sunny."
    thought = mem.append(sid, "assistant", "", item={"type": "reasoning", "id": "r1", "summary": []})
    assert thought.content == "[reasoning]"
    own = mem.append(sid, "user", "my own text", item={"type": "message", "content": "other"})
    assert own.content == "my own text"  # a given content wins


@pytest.mark.parametrize("bad", [{"x": float("nan")}, {1: "int key"}, {"s": {1, 2}}, object(),
                                 {"t": "\ud800"}])
def test_an_item_json_cannot_hold_exactly_is_refused(mem, bad):
    sid = mem.create_session()
    with pytest.raises(ValidationError, match="item"):
        mem.append(sid, "tool", "", item=bad)
    assert mem.messages(sid) == []


def test_content_or_item_is_required(mem):
    sid = mem.create_session()
    with pytest.raises(ValidationError, match="content is empty"):
        mem.append(sid, "user", "")


def test_wire_v1_entries_still_read_and_item_entries_are_v2():
    plain = Message("s", 3, "user", "hi", 1)
    assert plain.pack()[:2] == b"\x9a\x01"  # unchanged: v1 readers read what has no item
    with_item = Message("s", 3, "tool", "hi", 1, item_json='{"a":1}')
    assert with_item.pack()[:2] == b"\x9b\x02"
    assert Message.unpack("s", plain.pack()) == plain
    assert Message.unpack("s", with_item.pack()) == with_item


def test_scripts_trim_and_forget_item_entries(config_factory):
    mem = SessionMemory(config_factory("redis", max_messages=6, compression={"keep_recent": 1}))
    sid = mem.create_session()
    for i in range(10):
        mem.append(sid, "user", "", item={"type": "message", "role": "user", "content": f"q{i}"})
        mem.append(sid, "assistant", "", item={"type": "message", "content": f"a{i}"})
    mem.maintainer.maintain(sid)
    assert 0 < mem.info(sid).hot_count <= 6  # compact.lua / ack_flush.lua read v2 headers
    assert mem.forget_keyword(sid, "a9") == 1  # forget.lua too
    assert [m.item["content"] for m in mem.messages(sid)][-2:] == ["a8", "q9"]
    counters_true(mem, sid)
    mem.close()


# --- archive schema v3 -> v4 --------------------------------------------------------------------
V3_MESSAGES = """CREATE TABLE messages (message_id TEXT PRIMARY KEY,
  session_id TEXT REFERENCES sessions(session_id),
  role TEXT NOT NULL, content TEXT NOT NULL, token_count INTEGER, tool_calls JSON,
  file_refs JSON, memory_refs JSON, created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
  seq INTEGER NOT NULL)"""


@pytest.mark.stack("default", reason="a SQLite file's schema upgrade (PRAGMA user_version); "
                  "it runs no stack")
def test_a_v3_archive_is_upgraded_in_place(tmp_path: Path):
    path = tmp_path / "v3.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE sessions (session_id TEXT PRIMARY KEY, user_id TEXT, title TEXT,"
               " created_at TIMESTAMP, updated_at TIMESTAMP, total_tokens INTEGER DEFAULT 0,"
               " message_count INTEGER DEFAULT 0, status TEXT DEFAULT 'active', summary TEXT,"
               " summary_seq INTEGER DEFAULT 0, last_seq INTEGER DEFAULT 0,"
               " cleared_seq INTEGER DEFAULT 0)")
    db.execute(V3_MESSAGES)
    db.execute("INSERT INTO sessions (session_id, user_id, title, created_at, updated_at)"
               " VALUES ('old', 'bob', 't', '2025-01-01 00:00:00', '2025-01-01 00:00:00')")
    db.execute("INSERT INTO messages VALUES ('0' , 'old', 'user', 'from v3', 2, NULL, '[]', '[]',"
               " '2025-01-01 00:00:00', 1)")
    db.execute("PRAGMA user_version = 3")
    db.commit()
    db.close()
    archive = Archive(path)
    (old,) = archive.messages("old")
    assert old.content == "from v3" and old.item is None and old.item_json == ""
    archive.write({"session_id": "old", "user_id": "bob", "title": "t", "created_at": 0.0,
                   "updated_at": 0.0, "status": "active"},
                  [Message("old", 2, "tool", "x", 1, message_id="1" * 32, item_json='{"b":2,"a":1}')])
    assert [m.item_json for m in archive.messages("old")] == ["", '{"b":2,"a":1}']
    archive.close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert "item" in {r[1] for r in db.execute("PRAGMA table_info(messages)")}
    db.close()
    Archive(path).close()  # opening an upgraded file again changes nothing


# --- HTTP ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory,
           redis_server: RedisServer) -> Iterator[tuple[ServeProcess, Path]]:
    config = serve_config(tmp_path_factory.mktemp("primitives-http"), redis_server.url)
    proc = ServeProcess(config).start()
    yield proc, config
    proc.stop()


def test_http_item_pop_and_clear_history(served: tuple[ServeProcess, Path]):
    proc, config = served
    with HermesClient(proc.url) as remote, SessionMemory(config_mod.load(config)) as local:
        sid = remote.create_session(user_id="alice", session_id="http-items")
        sent = remote.append(sid, "tool", "", item=ITEM)
        assert exact(sent.item, ITEM)
        remote.append_many(sid, [{"role": "user", "content": "", "item": {"k": [1, 2.5, "三"]}},
                                 {"role": "assistant", "content": "plain"}])
        got = remote.messages(sid)
        assert exact(got[0].item, ITEM) and exact(got[1].item, {"k": [1, 2.5, "三"]})
        assert got[2].item is None
        assert exact(local.messages(sid)[0].item, ITEM)  # the same bytes the library stored
        popped = remote.pop(sid)
        assert popped is not None and popped.content == "plain"
        remote.clear(sid, history=True)
        assert remote.messages(sid) == [] and remote.pop(sid) is None
        assert local.info(sid).message_count == 0
        remote.delete(sid, purge=True)
        assert remote.create_session(user_id="alice", session_id="http-items") == sid
