"""One behaviour suite for ``SessionAPI``: every test runs on the library (redis and memory
backends) and on ``HermesClient`` against a real server (``api``, tests/contract/conftest.py).
Each pins what the contract promises: return types, order, cursors, and the error class of
each mistake, with nothing changed by a refused call."""

from __future__ import annotations

import json
import uuid
from dataclasses import fields

import pytest

from hermes_redis.core.api import SessionAPI
from hermes_redis.core.errors import (
    AmbiguousIdError,
    ConflictError,
    NotFoundError,
    StateError,
    ValidationError,
)
from hermes_redis.core.models import (
    CompactResult,
    Context,
    Memory,
    Message,
    SearchHit,
    SessionInfo,
    SessionPage,
    new_message_id,
)


def unknown_sid() -> str:
    return f"nosuch-{uuid.uuid4().hex}"


def turn(i: int) -> list[dict[str, object]]:
    return [{"role": "user", "content": f"question {i} about the gateway"},
            {"role": "assistant", "content": f"answer {i}: the gateway retries"}]


def seqs(msgs: list[Message]) -> list[int]:
    return [m.seq for m in msgs]


def well_typed(obj: object) -> None:
    """Every field of a wire dataclass holds its declared type (the client decodes JSON:
    a tuple must not come back a list, an int not a float)."""
    for f in fields(obj):  # type: ignore[arg-type]
        value = getattr(obj, f.name)
        declared = str(f.type)
        if declared.startswith("tuple"):
            assert isinstance(value, tuple), (f.name, value)
        elif declared == "int":
            assert isinstance(value, int) and not isinstance(value, bool), (f.name, value)
        elif declared == "str":
            assert isinstance(value, str), (f.name, value)
        elif declared == "float":
            assert isinstance(value, int | float), (f.name, value)


# --- sessions --------------------------------------------------------------------------------
def test_create_session_and_info(api: SessionAPI, user: str) -> None:
    sid = api.create_session(user_id=user, title="contract")
    assert isinstance(sid, str) and sid
    info = api.info(sid)
    assert isinstance(info, SessionInfo)
    well_typed(info)
    assert (info.session_id, info.user_id, info.title, info.status) == (sid, user, "contract", "active")
    assert (info.message_count, info.last_seq, info.total_tokens) == (0, 0, 0)

    own = f"own-{uuid.uuid4().hex[:12]}"
    assert api.create_session(user_id=user, session_id=own) == own
    with pytest.raises(ValidationError):  # taken
        api.create_session(user_id=user, session_id=own)
    with pytest.raises(ValidationError):
        api.create_session(user_id=user, session_id="not a/valid id")
    with pytest.raises(ValidationError):
        api.create_session(user_id="")
    with pytest.raises(ValidationError):
        api.create_session(user_id=user, title="nul \x00 inside")
    assert {i.session_id for i in api.list_sessions(user_id=user)} == {sid, own}
    with pytest.raises(NotFoundError):
        api.info(unknown_sid())
    with pytest.raises(ValidationError):
        api.info("../etc")


def test_list_sessions_pages_newest_first_with_a_cursor(api: SessionAPI, user: str) -> None:
    made = []
    for i in range(5):
        sid = api.create_session(user_id=user, title=f"s{i}")
        api.append(sid, "user", f"hello {i}")
        made.append(sid)
    whole = api.list_sessions(user_id=user, limit=None)
    assert isinstance(whole, SessionPage) and whole.next_cursor is None
    assert all(isinstance(i, SessionInfo) for i in whole)
    assert sorted(i.session_id for i in whole) == sorted(made)
    updated = [i.updated_at for i in whole]
    assert updated == sorted(updated, reverse=True)

    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        page = api.list_sessions(user_id=user, limit=2, cursor=cursor)
        assert len(page) <= 2
        seen += [i.session_id for i in page]
        pages += 1
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == [i.session_id for i in whole] and pages == 3

    api.archive(made[0])
    assert [i.session_id for i in api.list_sessions(user_id=user, status="archived")] == [made[0]]
    assert made[0] not in {i.session_id for i in api.list_sessions(user_id=user)}
    assert len(api.list_sessions(user_id=user, status="all", limit=None)) == 5
    for bad in ({"status": "sleeping"}, {"limit": 0}, {"cursor": "not-a-cursor"}):
        with pytest.raises(ValidationError):
            api.list_sessions(user_id=user, **bad)  # type: ignore[arg-type]


def test_resolve_and_short_ids(api: SessionAPI, user: str) -> None:
    tag = uuid.uuid4().hex[:12]
    a = api.create_session(user_id=user, session_id=f"{tag}-a")
    b = api.create_session(user_id=user, session_id=f"{tag}-b")
    assert api.resolve(a) == a
    assert api.resolve(f"{tag}-b") == b
    with pytest.raises(AmbiguousIdError):
        api.resolve(tag)
    with pytest.raises(NotFoundError):
        api.resolve(f"{tag}-c")
    with pytest.raises(ValidationError):
        api.resolve("no spaces")
    short = api.short_ids([a, b], minimum=4)
    assert set(short) == {a, b}
    for sid, prefix in short.items():
        assert sid.startswith(prefix) and len(prefix) >= 4
        assert api.resolve(prefix) == sid  # unique: it names that session alone


def test_archive_restore_delete(api: SessionAPI, user: str) -> None:
    sid = api.create_session(user_id=user)
    api.append(sid, "user", "keep me")
    assert api.archive(sid) is None
    assert api.info(sid).status == "archived"
    with pytest.raises(StateError):
        api.context(sid)
    with pytest.raises(StateError):
        api.append(sid, "user", "refused")
    assert [m.content for m in api.messages(sid)] == ["keep me"]  # archived: kept, readable
    api.restore(sid)
    api.restore(sid)  # an active one stays active
    assert api.info(sid).status == "active"
    assert [m.content for m in api.context(sid).messages] == ["keep me"]

    assert api.delete(sid) is None
    assert api.info(sid).status == "deleted"
    with pytest.raises(StateError):
        api.append(sid, "user", "refused")
    assert sid in {i.session_id for i in api.list_sessions(user_id=user, status="deleted")}
    for call in (api.archive, api.restore, api.delete):
        with pytest.raises(NotFoundError):
            call(unknown_sid())

    purged = api.create_session(user_id=user)
    api.append(purged, "user", "gone for good")
    api.delete(purged, purge=True)
    assert api.messages(purged) == [] or api.info(purged).status == "deleted"


# --- messages --------------------------------------------------------------------------------
def test_append_returns_the_stored_message(api: SessionAPI, user: str) -> None:
    sid = api.create_session(user_id=user)
    mid = new_message_id()
    m = api.append(sid, "user", "what is 2+2?", file_refs=["a.py"], message_id=mid,
                   created_at=1_700_000_000.5)
    assert isinstance(m, Message)
    well_typed(m)
    assert (m.session_id, m.seq, m.role, m.content, m.message_id) == (sid, 1, "user", "what is 2+2?", mid)
    assert m.file_refs == ("a.py",) and m.created_at == 1_700_000_000.5 and m.token_count > 0
    again = api.append(sid, "user", "what is 2+2?", file_refs=["a.py"], message_id=mid)
    assert again == m and api.info(sid).message_count == 1  # a retry: the stored one, once
    with pytest.raises(ConflictError) as refused:  # the same id with another body
        api.append(sid, "user", "what is 2+3?", file_refs=["a.py"], message_id=mid)
    assert refused.value.seq == 1
    assert api.info(sid).message_count == 1

    calls = [{"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}]
    tool = api.append(sid, "assistant", "calling", tool_calls=calls)
    assert tool.seq == 2 and json.loads(tool.tool_calls) == calls
    payload = {"type": "message", "content": [{"type": "output_text", "text": "four"}], "n": 4}
    framed = api.append(sid, "assistant", item=payload)  # content left out: rendered from item
    assert framed.item == payload and framed.content
    assert api.messages(sid)[-1].item == payload
    assert api.messages(sid) == [m, tool, framed]


def test_append_refusals_store_nothing(api: SessionAPI, user: str) -> None:
    sid = api.create_session(user_id=user)
    api.append(sid, "user", "first")
    refused: list[dict[str, object]] = [
        {"role": "wizard", "content": "x"},
        {"role": "user", "content": 42},
        {"role": "user", "content": "x", "message_id": "not-hex"},
        {"role": "user", "content": "x", "file_refs": "a.py"},
        {"role": "user", "content": "x", "created_at": "yesterday"},
    ]
    for fields_ in refused:
        with pytest.raises(ValidationError):
            api.append(sid, **fields_)  # type: ignore[arg-type]
    with pytest.raises(NotFoundError):
        api.append(unknown_sid(), "user", "x")
    with pytest.raises(ValidationError):
        api.append("bad id!", "user", "x")
    assert [m.content for m in api.messages(sid)] == ["first"]
    assert api.info(sid).message_count == 1


def test_append_many_is_one_atomic_turn(api: SessionAPI, user: str) -> None:
    sid = api.create_session(user_id=user)
    stored = api.append_many(sid, [*turn(1), {"role": "tool", "content": "42"}])
    assert [m.seq for m in stored] == [1, 2, 3] and all(isinstance(m, Message) for m in stored)
    assert [m.role for m in stored] == ["user", "assistant", "tool"]
    ids = [new_message_id(), new_message_id()]
    batch = [{"role": "user", "content": "a", "message_id": ids[0]},
             {"role": "assistant", "content": "b", "message_id": ids[1]}]
    first = api.append_many(sid, batch)
    retried = api.append_many(sid, batch)  # the stored turn, not a second one
    assert [(m.seq, m.message_id, m.content) for m in retried] == \
        [(m.seq, m.message_id, m.content) for m in first] == [(4, ids[0], "a"), (5, ids[1], "b")]
    for bad in ([], [{"role": "user", "content": "ok"}, {"role": "nobody", "content": "x"}],
                [{"role": "user", "content": "a", "message_id": ids[0]},
                 {"role": "user", "content": "b", "message_id": ids[0]}],
                [{"role": "user", "content": "x", "colour": "red"}]):
        with pytest.raises(ValidationError):
            api.append_many(sid, bad)
    with pytest.raises(ValidationError) as err:
        api.append_many(sid, [{"role": "user", "content": "ok"}, {"role": "nobody", "content": "x"}])
    assert "messages[1]" in str(err.value)
    with pytest.raises(NotFoundError):
        api.append_many(unknown_sid(), turn(1))
    assert seqs(api.messages(sid)) == [1, 2, 3, 4, 5]


def test_a_retried_append_returns_the_stored_message(api: SessionAPI, user: str) -> None:
    sid = api.create_session(user_id=user)
    mid = new_message_id()
    first = api.append(sid, "user", "once", message_id=mid)
    assert api.append(sid, "user", "once", message_id=mid) == first == api.messages(sid)[0]


def test_messages_pages_and_last(api: SessionAPI, user: str) -> None:
    sid = api.create_session(user_id=user)
    for i in range(6):
        api.append_many(sid, turn(i))
    whole = api.messages(sid)
    assert seqs(whole) == list(range(1, 13))
    paged: list[Message] = []
    after = 0
    while page := api.messages(sid, after_seq=after, limit=5):
        assert len(page) <= 5 and all(m.seq > after for m in page)
        paged += page
        after = page[-1].seq
    assert paged == whole
    assert api.messages(sid, after_seq=10) == whole[10:]
    assert api.messages(sid, last=3) == whole[-3:]
    assert api.messages(sid, last=100) == whole
    for bad in ({"last": 0}, {"last": 2, "after_seq": 1}, {"last": 2, "limit": 2},
                {"limit": 0}, {"after_seq": -1}):
        with pytest.raises(ValidationError):
            api.messages(sid, **bad)  # type: ignore[arg-type]
    with pytest.raises(NotFoundError):
        api.messages(unknown_sid())
    with pytest.raises(NotFoundError):
        api.messages(unknown_sid(), last=2)
    empty = api.create_session(user_id=user)
    assert api.messages(empty) == [] and api.messages(empty, last=5) == []


def test_pop_takes_the_newest(api: SessionAPI, user: str) -> None:
    sid = api.create_session(user_id=user)
    assert api.pop(sid) is None
    stored = api.append_many(sid, turn(1))
    popped = api.pop(sid)
    assert isinstance(popped, Message) and popped == stored[-1]
    assert api.messages(sid) == stored[:1]
    assert api.pop(sid) == stored[0] and api.pop(sid) is None
    assert api.info(sid).message_count == 0
    with pytest.raises(NotFoundError):
        api.pop(unknown_sid())


# --- context ---------------------------------------------------------------------------------
def test_context_is_the_newest_turns_within_budget(api: SessionAPI, user: str) -> None:
    sid = api.create_session(user_id=user)
    for i in range(4):
        api.append_many(sid, turn(i))
    memory_id = api.remember(user, "the user deploys on Fridays")
    ctx = api.context(sid)
    assert isinstance(ctx, Context)
    well_typed(ctx)
    assert ctx.session_id == sid and 0 < ctx.tokens <= ctx.budget
    assert all(isinstance(m, Message) for m in ctx.messages)
    assert ctx.messages[-1] == api.messages(sid)[-1]
    assert seqs(list(ctx.messages)) == sorted(seqs(list(ctx.messages)))
    assert "the user deploys on Fridays" in ctx.memories
    small = api.context(sid, budget=60, query="", touch=False)
    assert small.budget == 60 and small.tokens <= 60
    for bad in (0, -5):
        with pytest.raises(ValidationError):
            api.context(sid, budget=bad)
    with pytest.raises(NotFoundError):
        api.context(unknown_sid())
    api.forget_memory(memory_id)
    assert "the user deploys on Fridays" not in api.context(sid).memories


def test_resume_picks_the_users_newest_active_session(api: SessionAPI, user: str) -> None:
    older = api.create_session(user_id=user)
    api.append(older, "user", "older")
    newer = api.create_session(user_id=user)
    api.append(newer, "user", "newer")
    assert api.resume(user_id=user).session_id == newer
    assert api.resume(older).session_id == older
    assert [m.content for m in api.resume(older, budget=500).messages] == ["older"]
    api.archive(newer)
    assert api.resume(user_id=user).session_id == older
    with pytest.raises(NotFoundError):
        api.resume(user_id=f"nobody-{uuid.uuid4().hex[:8]}")


# --- changing --------------------------------------------------------------------------------
def test_forget_last_and_keyword(api: SessionAPI, user: str) -> None:
    sid = api.create_session(user_id=user)
    for i in range(3):
        api.append_many(sid, turn(i))
    assert api.forget_last(sid, 1) == 2
    assert seqs(api.messages(sid)) == [1, 2, 3, 4]
    assert api.forget_keyword(sid, "QUESTION 0") == 1  # any case
    assert [m.seq for m in api.messages(sid)] == [2, 3, 4]
    assert api.forget_keyword(sid, "absent-word") == 0
    assert all("question 2" not in m.content for m in api.context(sid).messages)
    for bad in (0, -1):
        with pytest.raises(ValidationError):
            api.forget_last(sid, bad)
    with pytest.raises(ValidationError):
        api.forget_keyword(sid, "  ")
    with pytest.raises(NotFoundError):
        api.forget_last(unknown_sid(), 1)
    with pytest.raises(NotFoundError):
        api.forget_keyword(unknown_sid(), "x")
    assert seqs(api.messages(sid)) == [2, 3, 4]


def test_clear_empties_the_context_and_keeps_memories(api: SessionAPI, user: str) -> None:
    sid = api.create_session(user_id=user)
    stored = api.append_many(sid, turn(1) + turn(2))
    api.remember(user, "prefers tabs over spaces")
    assert api.clear(sid) is None
    ctx = api.context(sid)
    assert ctx.messages == () and ctx.summary == ""
    assert "prefers tabs over spaces" in ctx.memories
    assert api.messages(sid) == stored  # the history stays
    api.clear(sid, history=True)
    assert api.messages(sid) == []
    assert [m.content for m in api.memories(user)] == ["prefers tabs over spaces"]
    with pytest.raises(NotFoundError):
        api.clear(unknown_sid())


def test_compact_folds_older_turns_and_keeps_the_history(api: SessionAPI, user: str) -> None:
    sid = api.create_session(user_id=user)
    assert api.compact(sid) is None  # nothing to fold
    for i in range(12):
        api.append_many(sid, turn(i))
    before = api.messages(sid)
    result = api.compact(sid)
    assert isinstance(result, CompactResult)
    well_typed(result)
    assert 0 < result.summarized_upto <= before[-1].seq
    assert api.messages(sid) == before  # the archive keeps every message
    info = api.info(sid)
    assert info.summary_seq == result.summarized_upto and info.summary
    with pytest.raises(NotFoundError):
        api.compact(unknown_sid())


# --- memories and search ---------------------------------------------------------------------
def test_remember_memories_forget_memory(api: SessionAPI, user: str) -> None:
    sid = api.create_session(user_id=user)
    first = api.remember(user, "the staging database is PostgreSQL 16", session_id=sid)
    second = api.remember(user, "deploys go out on Tuesdays")
    assert isinstance(first, str) and first != second
    assert api.remember(user, "the staging database is PostgreSQL 16") == first  # near-duplicate
    rows = api.memories(user)
    assert all(isinstance(m, Memory) for m in rows)
    for m in rows:
        well_typed(m)
    assert [(m.memory_id, m.user_id, m.content) for m in rows] == [
        (first, user, "the staging database is PostgreSQL 16"),
        (second, user, "deploys go out on Tuesdays")]
    assert rows[0].session_id == sid and rows[1].session_id is None
    assert [m.memory_id for m in api.memories(user, query="which database for staging?")] == [first]

    other = f"o-{uuid.uuid4().hex[:12]}"
    api.create_session(user_id=other)
    with pytest.raises(NotFoundError):  # another user's memory is not theirs to forget
        api.forget_memory(first, user_id=other)
    assert len(api.memories(user)) == 2
    api.forget_memory(first, user_id=user)
    assert [m.memory_id for m in api.memories(user)] == [second]
    with pytest.raises(NotFoundError):
        api.forget_memory(first)
    with pytest.raises(ValidationError):
        api.forget_memory("")
    with pytest.raises(ValidationError):
        api.remember(user, "")
    with pytest.raises(NotFoundError):  # no session and no key: an unknown user
        api.remember(f"nobody-{uuid.uuid4().hex[:8]}", "x")
    assert api.memories(f"nobody-{uuid.uuid4().hex[:8]}") == []


def test_superseded_memories_stay_as_history(api: SessionAPI, user: str) -> None:
    api.create_session(user_id=user)
    old = api.remember(user, "we use MySQL for the orders database")
    new = api.remember(user, "no MySQL any more: the orders database is PostgreSQL")
    if new == old:
        pytest.fail("a correction must be a memory of its own")
    current = [m.memory_id for m in api.memories(user)]
    every = {m.memory_id: m for m in api.memories(user, superseded=True)}
    assert set(every) == {old, new}
    if old not in current:  # superseded: kept as history, naming what replaced it
        assert every[old].superseded_by == new and current == [new]
    else:
        assert current == [old, new]


def test_search_finds_the_users_messages(api: SessionAPI, user: str) -> None:
    word = f"zebra{uuid.uuid4().hex[:8]}"
    sid = api.create_session(user_id=user, title="zoo")
    api.append_many(sid, [{"role": "user", "content": f"tell me about the {word} enclosure"},
                          {"role": "assistant", "content": "it has a pond"}])
    other = api.create_session(user_id=f"o-{uuid.uuid4().hex[:12]}")
    api.append(other, "user", f"another user's {word}")
    hits = api.search(word, user_id=user)
    assert hits and all(isinstance(h, SearchHit) for h in hits)
    for h in hits:
        well_typed(h)
    assert [(h.session_id, h.seq, h.role) for h in hits] == [(sid, 1, "user")]
    assert word in hits[0].snippet and hits[0].title == "zoo"
    assert {h.session_id for h in api.search(word)} == {sid, other}
    assert len(api.search(word, limit=1)) == 1
    assert api.search(f"absent{uuid.uuid4().hex}", user_id=user) == []
    for bad in ("", "   "):
        with pytest.raises(ValidationError):
            api.search(bad)


# --- continue and fork (issue 30) ------------------------------------------------------------
def test_continue_session_opens_with_the_parents_thread(api: SessionAPI, user: str) -> None:
    parent = api.create_session(user_id=user, title="gateway work")
    for i in range(3):
        api.append_many(parent, turn(i))
    child = api.continue_session(parent)
    info = api.info(child)
    well_typed(info)
    assert (info.user_id, info.parent_session_id, info.forked_at_seq) == (user, parent, None)
    first = api.messages(child)[0]
    assert first.role == "system" and parent in first.content
    assert "question 2 about the gateway" in first.content  # where the parent left off
    assert any(parent in c["content"] for c in api.context(child).as_chat())
    assert seqs(api.messages(parent)) == [1, 2, 3, 4, 5, 6]
    assert api.info(parent).parent_session_id is None
    with pytest.raises(NotFoundError):
        api.continue_session(unknown_sid())


def test_fork_copies_up_to_the_seq_and_the_two_stay_apart(api: SessionAPI, user: str) -> None:
    parent = api.create_session(user_id=user)
    for i in range(3):
        api.append_many(parent, turn(i))
    child = api.fork(parent, at_seq=4)
    info = api.info(child)
    well_typed(info)
    assert (info.user_id, info.parent_session_id, info.forked_at_seq) == (user, parent, 4)
    copies, original = api.messages(child), api.messages(parent)[:4]
    assert [(m.seq, m.role, m.content) for m in copies] == \
        [(m.seq, m.role, m.content) for m in original]
    assert not {m.message_id for m in copies} & {m.message_id for m in original}
    assert api.append(child, "user", "fork only").seq == 5
    assert api.forget_keyword(child, "question 0") == 1
    assert seqs(api.messages(parent)) == [1, 2, 3, 4, 5, 6]
    assert api.messages(parent, last=1)[0].content == "answer 2: the gateway retries"
    whole = api.fork(parent)
    assert api.info(whole).forked_at_seq == 6 and len(api.messages(whole)) == 6
    before = api.list_sessions(user_id=user, status="all", limit=None)
    for bad in (0, 7, -3):
        with pytest.raises(ValidationError):
            api.fork(parent, at_seq=bad)
    with pytest.raises(NotFoundError):
        api.fork(unknown_sid())
    after = api.list_sessions(user_id=user, status="all", limit=None)
    assert [i.session_id for i in after] == [i.session_id for i in before]
