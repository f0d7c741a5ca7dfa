"""SessionMeta, the one typed record of a session, and the turn counts ``info`` shows."""

from __future__ import annotations

import dataclasses

import pytest

from hermes_redis.core.models import SessionMeta
from hermes_redis.tiers.read import split_turns


def test_the_hash_round_trips_every_field_but_the_scripts_counter():
    meta = SessionMeta(user_id="u", title="t · 标题", created_at=1.5, updated_at=2.25,
                       total_tokens=7, message_count=3, status="archived", summary="s",
                       summary_seq=2, last_seq=9, flushed_seq=8, cleared_seq=1, forgets=4)
    stored = meta.to_hash()
    assert "forgets" not in stored  # forget.lua owns it
    assert SessionMeta.from_hash({**stored, "forgets": "4"}) == meta
    assert all(isinstance(v, str) for v in stored.values())


def test_from_hash_ignores_the_scripts_bookkeeping_and_defaults_missing_fields():
    meta = SessionMeta.from_hash({"user_id": "u", "status": "active", "pending": "1.0",
                                  "oom-gate": "1", "last_seq": "5"})
    assert meta == SessionMeta(user_id="u", last_seq=5)


def test_the_archive_row_round_trips_and_counts_as_archived():
    meta = SessionMeta(user_id="u", title="t", created_at=100.25, updated_at=200.5,
                       status="active", summary="s", summary_seq=3, last_seq=9, flushed_seq=4,
                       cleared_seq=2)
    row = {**meta.to_row("sid"), "created_at": "1970-01-01 00:01:40.250000",
           "updated_at": "1970-01-01 00:03:20.500000", "message_count": 9, "total_tokens": 40}
    back = SessionMeta.from_row(row)
    assert back == dataclasses.replace(meta, flushed_seq=9, message_count=9, total_tokens=40)


def test_changes_names_only_real_fields():
    assert SessionMeta.changes(status="archived", cleared_seq=3) == {"status": "archived",
                                                                     "cleared_seq": "3"}
    with pytest.raises(TypeError, match="no field 'stauts'"):
        SessionMeta.changes(stauts="archived")


def _expected_turns(mem, sid):
    turns = split_turns(mem.messages(sid))
    summary_seq = mem.info(sid).summary_seq
    return len(turns), sum(1 for t in turns if t[0].seq <= summary_seq)


def test_turn_counts_match_the_history_in_every_state(mem):
    sid = mem.create_session()
    assert mem.turns(sid) == (0, 0)
    mem.append(sid, "system", "you are terse")  # a first message that is not a user's
    for i in range(12):
        mem.append(sid, "user", f"question {i}")
        mem.append(sid, "assistant", f"answer {i}")
        mem.append(sid, "tool", f"result {i}")
    assert mem.turns(sid) == _expected_turns(mem, sid) == (13, 0)
    mem.flush(sid)
    mem.append(sid, "user", "one more, not yet archived")
    assert mem.turns(sid) == _expected_turns(mem, sid)
    mem.compact(sid)
    counted = mem.turns(sid)
    assert counted == _expected_turns(mem, sid) and counted[1] > 0
    mem.forget_last(sid, 2)
    assert mem.turns(sid) == _expected_turns(mem, sid) == (counted[0] - 2, counted[1])


def test_turn_counts_of_an_unarchived_session_that_starts_with_an_assistant(rmem):
    sid = rmem.create_session()  # Redis: nothing flushes inline, the whole history is hot
    rmem.append(sid, "assistant", "hello, how can I help?")
    rmem.append(sid, "user", "hi")
    assert rmem.info(sid).backlog == 2
    assert rmem.turns(sid) == _expected_turns(rmem, sid) == (2, 0)
