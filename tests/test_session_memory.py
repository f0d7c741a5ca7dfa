"""The behaviour suite: every test runs against both backends (redis and memory)."""

import time

import pytest

from hermes_redis import SessionMemory
from hermes_redis.core.errors import AmbiguousIdError, NotFoundError, StateError, ValidationError

NO_SESSION = r"^no session nosuchsession; see `hermes-redis session list`$"


def counters_match(mem, sid):
    msgs = mem.messages(sid)
    info = mem.info(sid)
    assert info.message_count == len(msgs)
    assert info.total_tokens == sum(m.token_count for m in msgs)


def test_create_append_read(mem):
    sid = mem.create_session(user_id="alice")
    a = mem.append(sid, "user", "帮我写一个 FastAPI 的用户认证接口")
    b = mem.append(sid, "assistant", "好的，用 JWT。", tool_calls=[{"name": "write_file"}],
                   file_refs=["app/auth.py"], memory_refs=["mem_1"])
    assert (a.seq, b.seq) == (1, 2)
    msgs = mem.messages(sid)
    assert [m.content for m in msgs] == [a.content, b.content]
    assert msgs[1].file_refs == ("app/auth.py",) and msgs[1].tool_calls == '[{"name":"write_file"}]'
    info = mem.info(sid)
    assert info.user_id == "alice" and info.status == "active"
    assert info.title == "帮我写一个 FastAPI 的用户认证接口"
    counters_match(mem, sid)


def test_list_sessions_newest_first_and_by_user(mem):
    s1 = mem.create_session(user_id="alice")
    mem.append(s1, "user", "one")
    time.sleep(0.01)
    s2 = mem.create_session(user_id="bob")
    mem.append(s2, "user", "two")
    assert [i.session_id for i in mem.list_sessions()][:2] == [s2, s1]
    assert [i.session_id for i in mem.list_sessions(user_id="alice")] == [s1]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"role": "robot", "content": "x"}, "unknown role"),
        ({"role": "user", "content": ""}, "empty"),
        ({"role": "user", "content": "x" * 2_000_000}, "over the limit"),
        ({"role": "user", "content": b"\xff"}, "UTF-8"),
        ({"role": "user", "content": "ok \ud800"}, "lone surrogate"),
        ({"role": "user", "content": "é" * 600_000}, "1200000 bytes, over the limit"),
        ({"role": "user", "content": " \u3000\n"}, "empty"),
        ({"role": "user", "content": None}, "must be text"),
        ({"role": "user", "content": "x", "tool_calls": "{bad"}, "JSON"),
        ({"role": "user", "content": "x", "file_refs": "[1"}, "JSON"),
    ],
)
def test_bad_input_changes_nothing(mem, kwargs, error):
    sid = mem.create_session()
    mem.append(sid, "user", "keep me")
    with pytest.raises(ValidationError, match=error):
        mem.append(sid, **kwargs)
    assert mem.info(sid).message_count == 1
    assert len(mem.messages(sid)) == 1


def test_bad_session_id_and_unknown_session(mem):
    with pytest.raises(ValidationError, match="session id"):
        mem.append("a:b", "user", "x")
    with pytest.raises(NotFoundError, match=NO_SESSION):
        mem.append("nosuchsession", "user", "x")
    with pytest.raises(NotFoundError, match=NO_SESSION):
        mem.info("nosuchsession")


def test_context_fits_budget_and_keeps_newest(mem):
    sid = mem.create_session()
    for i in range(40):
        mem.append(sid, "user", f"question {i} " + "word " * 20)
        mem.append(sid, "assistant", f"answer {i} " + "word " * 20)
    for budget in (30, 100, 500, 10_000):
        ctx = mem.context(sid, budget=budget)
        assert ctx.tokens <= budget
        if ctx.messages:
            assert ctx.messages[-1].content.startswith("answer 39")
            seqs = [m.seq for m in ctx.messages]
            assert seqs == sorted(seqs)
    with pytest.raises(ValidationError,
                       match=r"^budget must be a positive number of tokens, not 0$"):
        mem.context(sid, budget=0)


def test_tool_results_are_capped_but_archived_whole(mem):
    assert mem.config.session.tool_result_max_tokens == 2000  # the default cap
    sid = mem.create_session()
    mem.append(sid, "user", "run the tests")
    big = "\n".join(f"line {i}: PASSED tests/test_{i}.py" for i in range(3000))
    m = mem.append(sid, "tool", big)
    assert m.token_count <= mem.config.session.tool_result_max_tokens
    assert "tokens cut" in m.content and m.content.startswith("line 0")
    mem.flush(sid)
    archived = mem.cold.messages(sid)
    assert archived[-1].content == big
    ctx = mem.context(sid)
    assert "tokens cut" in ctx.messages[-1].content


def test_forget_last_turns_and_keyword(mem):
    sid = mem.create_session()
    for i in range(6):
        mem.append(sid, "user", f"turn {i} about {'MySQL' if i % 2 else 'Postgres'}")
        mem.append(sid, "assistant", f"reply {i}")
        mem.append(sid, "tool", f"tool output {i}")
    mem.flush(sid)
    assert mem.forget_last(sid, 2) == 6
    assert [m.content for m in mem.messages(sid)][-1] == "tool output 3"
    assert mem.forget_keyword(sid, "mysql") == 2  # turns 1 and 3; 5 is already gone
    contents = [m.content for m in mem.messages(sid)]
    assert not any("MySQL" in c for c in contents)
    assert all("MySQL" not in m.content for m in mem.context(sid).messages)
    counters_match(mem, sid)
    mem.flush(sid)
    assert all("MySQL" not in m.content for m in mem.cold.messages(sid))


def test_clear_keeps_archive_and_memories(mem):
    sid = mem.create_session(user_id="u1")
    mem.remember("u1", "项目用 PostgreSQL，不用 MySQL")
    for i in range(5):
        mem.append(sid, "user", f"q{i}")
    mem.clear(sid)
    ctx = mem.context(sid)
    assert ctx.messages == () and ctx.summary == ""
    assert ctx.memories == ("项目用 PostgreSQL，不用 MySQL",)
    assert len(mem.messages(sid)) == 5
    mem.append(sid, "user", "fresh start")
    assert [m.content for m in mem.context(sid).messages] == ["fresh start"]


def test_memories_reach_every_session_of_the_user(mem):
    s1 = mem.create_session(user_id="u1")
    mid = mem.remember("u1", "prefers tabs", session_id=s1)
    assert mid.startswith("mem_")
    s2 = mem.create_session(user_id="u1")
    mem.append(s2, "user", "hello")
    assert "prefers tabs" in mem.context(s2).memories
    other = mem.create_session(user_id="u2")
    mem.append(other, "user", "hello")
    assert mem.context(other).memories == ()


def test_archive_restore_delete(mem):
    sid = mem.create_session()
    mem.append(sid, "user", "hello")
    mem.archive(sid)
    assert mem.info(sid).status == "archived"
    with pytest.raises(StateError, match="archived"):
        mem.context(sid)
    with pytest.raises(StateError, match="restore"):
        mem.append(sid, "user", "more")
    assert sid not in [i.session_id for i in mem.list_sessions()]
    assert sid in [i.session_id for i in mem.list_sessions(status="archived")]
    mem.restore(sid)
    mem.append(sid, "user", "more")
    mem.delete(sid)
    assert mem.info(sid).status == "deleted"
    assert len(mem.cold.messages(sid)) == 2  # delete keeps rows; purge removes them
    assert sid in [i.session_id for i in mem.list_sessions(status="deleted")]


def test_delete_purge_removes_rows(mem):
    sid = mem.create_session()
    mem.append(sid, "user", "secret plan")
    mem.delete(sid, purge=True)
    assert mem.cold.messages(sid) == []
    assert mem.search("secret") == []


def test_resume_latest_session_of_user(mem):
    mem.create_session(user_id="carol")
    time.sleep(0.01)
    newest = mem.create_session(user_id="carol")
    mem.append(newest, "user", "where were we")
    assert mem.resume(user_id="carol").session_id == newest
    with pytest.raises(NotFoundError, match=r"^no active session for user nobody; create one first$"):
        mem.resume(user_id="nobody")


def test_prefix_resolution(mem):
    sid = mem.create_session(session_id="abc123")
    mem.create_session(session_id="abd999")
    assert mem.resolve("abc") == sid
    with pytest.raises(AmbiguousIdError,
                       match=r"^'ab' matches 2 sessions \(abc123, abd999\); type more$"):
        mem.resolve("ab")
    with pytest.raises(NotFoundError,
                       match=r"^no session matches 'zzz'; see `hermes-redis session list`$"):
        mem.resolve("zzz")


def test_a_deleted_session_stays_out_of_the_hot_tier(mem):
    sid = mem.create_session()
    mem.append(sid, "user", "bye")
    mem.delete(sid)
    for op in (lambda: mem.compact(sid), lambda: mem.clear(sid), lambda: mem.forget_last(sid, 1),
               lambda: mem.append(sid, "user", "again"), lambda: mem.context(sid)):
        with pytest.raises(StateError, match="deleted"):
            op()
    assert mem.hot.meta(sid) is None
    mem.delete(sid, purge=True)  # purging later still works
    assert mem.cold.messages(sid) == []


def test_search_matches_word_prefixes_in_both_tiers(mem):
    sid = mem.create_session(user_id="u")
    mem.append(sid, "user", "implement authentication with JWT")
    mem.flush(sid)
    assert [h.seq for h in mem.search("auth", user_id="u")] == [1]


def test_an_append_sent_twice_with_its_own_id_is_stored_once(mem):
    from hermes_redis.core.models import new_message_id

    sid = mem.create_session()
    mid = new_message_id()
    first = mem.append(sid, "user", "exactly once", message_id=mid)
    mem.append(sid, "assistant", "reply")
    again = mem.append(sid, "user", "exactly once", message_id=mid)  # the agent's retry
    assert again.seq == first.seq == 1
    assert [m.content for m in mem.messages(sid)] == ["exactly once", "reply"]
    counters_match(mem, sid)
    with pytest.raises(ValidationError, match="message_id"):
        mem.append(sid, "user", "x", message_id="not-an-id")
    assert mem.info(sid).message_count == 2


def test_whole_session_verbatim_while_it_fits_past_max_messages(config_factory, backend):
    """The seed's resume rule: max_messages bounds Redis, not what the model sees."""
    mem = SessionMemory(config_factory(backend, max_messages=6,
                                       compression={"keep_recent": 2}))
    sid = mem.create_session()
    for i in range(30):
        mem.append(sid, "user", f"question {i}: what about function f{i}?")
        mem.append(sid, "assistant", f"def f{i}(): return {i}")
    mem.compact(sid)
    assert mem.info(sid).summary  # compaction ran: Redis holds only the newest few
    ctx = mem.context(sid)
    assert ctx.summary == "" and [m.seq for m in ctx.messages] == list(range(1, 61))
    assert all(f"def f{i}()" in ctx.messages[2 * i + 1].content for i in range(30))
    assert ctx.tokens == sum(m.token_count + 4 for m in ctx.messages) <= ctx.budget
    small = mem.context(sid, budget=300)  # does not fit: summary share + newest turns
    assert small.summary and small.tokens <= 300 and small.messages[-1].seq == 60
    mem.clear(sid)  # a clear holds even though everything would fit
    assert mem.context(sid).messages == ()
    mem.append(sid, "user", "after the clear")
    assert [m.content for m in mem.context(sid).messages] == ["after the clear"]
    mem.close()


def test_newest_user_message_is_always_in_and_capped(mem):
    sid = mem.create_session()
    mem.append(sid, "user", "an old question " + "filler " * 50)
    mem.append(sid, "user", "the newest question " + "detail " * 400)
    mem.append(sid, "assistant", "a long reply " + "text " * 400)
    for budget in (60, 200, 1000):
        ctx = mem.context(sid, budget=budget)
        assert ctx.tokens <= budget
        assert [m.seq for m in ctx.messages][-2:] == [2, 3]  # the newest turn, whole or capped
        assert ctx.messages[-2].content.startswith("the newest question")


def test_append_many_stores_a_turn_in_order(mem):
    sid = mem.create_session()
    mem.append(sid, "user", "before")
    big = "log line\n" * 3000
    stored = mem.append_many(sid, [
        {"role": "user", "content": "grep the logs"},
        {"role": "assistant", "content": "calling grep", "tool_calls": [{"name": "grep"}]},
        {"role": "tool", "content": big, "file_refs": ["app.log"]},
        {"role": "assistant", "content": "found it"},
    ])
    assert [m.seq for m in stored] == [2, 3, 4, 5]
    assert [m.seq for m in mem.messages(sid)] == [1, 2, 3, 4, 5]
    assert stored[2].token_count <= mem.config.session.tool_result_max_tokens
    assert stored[2].file_refs == ("app.log",) and stored[1].tool_calls == '[{"name":"grep"}]'
    info = mem.info(sid)
    assert info.message_count == 5 and info.title == "before"
    assert info.total_tokens == sum(m.token_count for m in mem.messages(sid))
    mem.flush(sid)
    assert mem.cold.messages(sid)[3].content == big  # the full tool result is archived


def test_append_many_retried_with_its_ids_stores_nothing_twice(mem):
    from hermes_redis.core.models import new_message_id

    sid = mem.create_session()
    turn = [{"role": "user", "content": "q", "message_id": new_message_id()},
            {"role": "assistant", "content": "a", "message_id": new_message_id()}]
    first = mem.append_many(sid, turn)
    again = mem.append_many(sid, turn)  # the reply was lost: the client sends it again
    assert [m.seq for m in again] == [m.seq for m in first] == [1, 2]
    assert mem.info(sid).message_count == 2


@pytest.mark.parametrize("messages, error", [
    ([], "messages is empty"),
    ("hello", "must be a list"),
    ([{"role": "user", "content": "ok"}, {"role": "bot", "content": "x"}],
     r"messages\[1\]: unknown role 'bot'"),
    ([{"role": "user", "content": "ok"}, {"role": "user", "content": "  "}],
     r"messages\[1\]: content is empty"),
    ([{"role": "user", "content": "ok", "colour": "red"}], r"messages\[0\]: unknown field 'colour'"),
    ([{"role": "user", "content": "ok"}, "hi"], r"messages\[1\]: a message is an object"),
    ([{"role": "user", "content": "a", "message_id": "0" * 32},
      {"role": "user", "content": "b", "message_id": "0" * 32}], "share one message_id"),
])
def test_append_many_with_one_bad_message_stores_nothing(mem, messages, error):
    sid = mem.create_session()
    with pytest.raises(ValidationError, match=error):
        mem.append_many(sid, messages)
    assert mem.info(sid).message_count == 0 and mem.messages(sid) == []


@pytest.mark.parametrize("call, match", [
    (lambda m, sid: m.create_session(title="bad \ud800 title"), "title is not valid UTF-8"),
    (lambda m, sid: m.create_session(title="nul\x00title"), "title contains a NUL"),
    (lambda m, sid: m.append(sid, "assistant", "x", tool_calls=[{"x": float("nan")}]),
     "tool_calls cannot be stored as JSON"),
    (lambda m, sid: m.append(sid, "assistant", "x", tool_calls=[{"x": float("inf")}]),
     "use finite numbers"),
    (lambda m, sid: m.append(sid, "assistant", "x", tool_calls=[{"x": "\udc00"}]),
     "valid text"),
    (lambda m, sid: m.search("find\x00me"), "search query contains a NUL"),
])
def test_text_that_storage_cannot_hold_is_a_clear_error_and_stores_nothing(mem, call, match):
    from hermes_redis.core.errors import ValidationError

    sid = mem.create_session(user_id="ann")
    before = (len(mem.list_sessions(status="all", limit=None)), len(mem.messages(sid)))
    with pytest.raises(ValidationError, match=match) as err:
        call(mem, sid)
    assert "\n" not in str(err.value)
    assert (len(mem.list_sessions(status="all", limit=None)), len(mem.messages(sid))) == before


def test_the_last_messages_come_from_the_hot_tail_and_then_the_archive(mem):
    sid = mem.create_session()
    for i in range(30):
        mem.append(sid, "user" if i % 2 == 0 else "assistant", f"m{i}")
    every = mem.messages(sid)
    assert mem.messages(sid, last=5) == every[-5:]
    mem.flush(sid)
    mem.compact(sid)  # older turns leave the hot list: the rest comes from the archive
    assert mem.hot.length(sid) < 30
    assert mem.messages(sid, last=25) == every[-25:]
    assert mem.messages(sid, last=100) == every
    mem.hot.drop(sid)  # gone from Redis: all of it from the archive
    assert mem.messages(sid, last=3) == every[-3:]
    mem.forget_last(sid, 1)
    assert mem.messages(sid, last=3) == every[-5:-2]
    empty = mem.create_session()
    assert mem.messages(empty, last=3) == []
    with pytest.raises(NotFoundError, match="no session nope"):
        mem.messages("nope", last=3)
    for bad in (0, -1, True, "2"):
        with pytest.raises(ValidationError, match="last must be a positive number"):
            mem.messages(sid, last=bad)
    with pytest.raises(ValidationError, match="not both"):
        mem.messages(sid, after_seq=2, last=3)


def test_pages_of_the_history_join_both_tiers_at_any_offset(mem):
    sid = mem.create_session()
    for i in range(30):
        mem.append(sid, "user" if i % 2 == 0 else "assistant", f"m{i}")
    mem.flush(sid)
    mem.compact(sid)  # the older turns now only in the archive, the newest in both
    for i in range(30, 36):
        mem.append(sid, "user", f"m{i}")  # and some only in Redis
    every = mem.messages(sid)
    assert [m.content for m in every] == [f"m{i}" for i in range(36)]
    pages, after = [], 0
    while page := mem.messages(sid, after_seq=after, limit=7):
        pages += page
        after = page[-1].seq
    assert pages == every
