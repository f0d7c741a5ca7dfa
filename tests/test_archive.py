"""The archive contract: SQLite (``Archive``) and PostgreSQL (``PostgresArchive``) held to the
same behaviour, one suite parametrized over both (the ``archive`` fixture)."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from hermes_redis.core.errors import BackendUnavailableError
from hermes_redis.core.models import Message, parse_ts
from hermes_redis.store.archive import Archive, ArchiveStore, Forgotten
from hermes_redis.store.archive import postgres as archive_pg
from hermes_redis.store.archive.postgres import PostgresArchive, fts_vector, term_query, ts_query

T0 = 1_700_000_000.25


def row(sid: str, user: str = "alice", **extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"session_id": sid, "user_id": user, "title": f"title {sid}",
                            "created_at": T0, "updated_at": T0, "status": "active",
                            "summary": "", "summary_seq": 0, "last_seq": 0, "cleared_seq": 0}
    return {**base, **extra}


def msgs(sid: str, texts: list[str], start: int = 1, role: str | None = None) -> list[Message]:
    return [Message(sid, start + i, role or ("user" if (start + i) % 2 else "assistant"), text,
                    len(text.split()), message_id=f"{sid}-{start + i:04d}",
                    created_at=T0 + start + i)
            for i, text in enumerate(texts)]


def _row(sid: str, user: str) -> dict[str, Any]:
    return row(sid, user)


def _msg(sid: str, seq: int, text: str, role: str = "user") -> Message:
    return Message(sid, seq, role, text, len(text.split()), message_id=f"{sid}-{seq:04d}",
                   created_at=T0 + seq)


def test_write_is_idempotent_and_counts_are_true(archive: ArchiveStore) -> None:
    batch = msgs("s1", ["one two", "three", "four five six"])
    assert archive.write(row("s1"), batch) == 3
    assert archive.write(row("s1"), batch) == 0  # a flush run again (invariant 3)
    assert archive.write(row("s1"), batch[:1] + msgs("s1", ["seven"], start=4)) == 1
    assert archive.stats("s1") == (4, 7, 4)
    s = archive.session("s1")
    assert s is not None and (s["message_count"], s["total_tokens"]) == (4, 7)
    assert [m.seq for m in archive.messages("s1")] == [1, 2, 3, 4]


def test_message_fields_round_trip(archive: ArchiveStore) -> None:
    m = Message("s1", 1, "tool", "结果 ok", 3, message_id="m-1", tool_calls='[{"name":"x"}]',
                file_refs=("a.py", "b/c.md"), memory_refs=("mem_1",), created_at=T0 + 0.123456)
    archive.write(row("s1"), [m])
    [back] = archive.messages("s1")
    assert back == m
    s = archive.session("s1")
    assert s is not None
    assert parse_ts(s["created_at"]) == T0 and parse_ts(s["updated_at"]) == T0
    assert s["title"] == "title s1" and s["status"] == "active" and s["user_id"] == "alice"


def test_full_text_is_stored_in_place_of_the_capped_content(archive: ArchiveStore) -> None:
    [m] = msgs("s1", ["head … tail"])
    archive.write(row("s1"), [m], {m.message_id: "the whole tool output with needle inside"})
    assert archive.messages("s1")[0].content == "the whole tool output with needle inside"
    assert [h.seq for h in archive.search("needle")] == [1]


def test_session_upsert_keeps_the_newest_and_never_undeletes(archive: ArchiveStore) -> None:
    archive.write(row("s1", summary="v2", summary_seq=5, last_seq=9, updated_at=T0 + 10), [])
    archive.write(row("s1", summary="v1", summary_seq=3, last_seq=4, updated_at=T0 + 5), [])
    s = archive.session("s1")
    assert s is not None
    assert (s["summary"], s["summary_seq"], s["last_seq"]) == ("v2", 5, 9)
    assert parse_ts(s["updated_at"]) == T0 + 10
    archive.set_status("s1", "deleted")
    archive.write(row("s1", status="active"), [])
    assert archive.session("s1")["status"] == "deleted"  # type: ignore[index]


def test_set_summary_unless_newer_and_forced(archive: ArchiveStore) -> None:
    archive.write(row("s1"), [])
    archive.set_summary("s1", "new", 8)
    archive.set_summary("s1", "old", 4)
    assert archive.session("s1")["summary"] == "new"  # type: ignore[index]
    archive.set_summary("s1", "", 0, force=True)
    s = archive.session("s1")
    assert s is not None and (s["summary"], s["summary_seq"]) == ("", 0)


def test_messages_first_before_newest(archive: ArchiveStore) -> None:
    archive.write(row("s1"), msgs("s1", [f"m{i}" for i in range(1, 11)]))
    assert [m.seq for m in archive.messages("s1", after_seq=3, upto_seq=6)] == [4, 5, 6]
    assert [m.seq for m in archive.first("s1", 2, 3)] == [3, 4, 5]
    assert [m.seq for m in archive.before("s1", 8, 2, 3)] == [7, 6, 5]
    assert [m.seq for m in archive.newest("s1", 0, 3)] == [8, 9, 10]
    assert [m.seq for m in archive.newest("s1", 9, 3)] == [10]
    assert archive.messages("nope") == [] and archive.stats("nope") == (0, 0, 0)


def test_forget_tombstones_and_a_late_flush_never_brings_it_back(archive: ArchiveStore) -> None:
    batch = msgs("s1", ["keep", "drop me", "keep too"])
    archive.write(row("s1"), batch)
    target = Forgotten(batch[1].message_id, 2, batch[1].token_count)
    assert archive.forget("s1", [target]) == [target]
    assert archive.forget("s1", [target]) == []  # already forgotten
    assert archive.write(row("s1"), batch) == 0  # the in-flight flush (invariant 4)
    assert [m.seq for m in archive.messages("s1")] == [1, 3]
    assert archive.tombstoned("s1") == {batch[1].message_id: 2}
    assert archive.stats("s1") == (2, 3, 3)
    assert archive.session("s1")["message_count"] == 2  # type: ignore[index]
    assert archive.search("drop") == []


def test_forget_of_an_unarchived_message_stops_its_flush(archive: ArchiveStore) -> None:
    archive.write(row("s1"), [])
    [m] = msgs("s1", ["not yet archived"])
    archive.forget("s1", [Forgotten(m.message_id, 1, 3)])
    assert archive.write(row("s1"), [m]) == 0 and archive.messages("s1") == []


def test_purge_removes_messages_for_good(archive: ArchiveStore) -> None:
    batch = msgs("s1", ["secret alpha", "secret beta"])
    archive.write(row("s1"), batch)
    archive.purge("s1")
    s = archive.session("s1")
    assert s is not None and (s["status"], s["message_count"], s["total_tokens"]) == ("deleted", 0, 0)
    assert archive.messages("s1") == [] and archive.search("secret") == []
    assert archive.write(row("s1"), batch) == 0
    assert set(archive.tombstoned("s1")) == {m.message_id for m in batch}


def test_memories(archive: ArchiveStore) -> None:
    a = archive.remember("alice", "项目用 PostgreSQL", 5, "s1")
    b = archive.remember("alice", "prefers tabs", 2, None)
    archive.remember("bob", "other", 1, None)
    assert [m.memory_id for m in archive.memories("alice")] == [a, b]
    mem = archive.memory(a)
    assert mem is not None and (mem.content, mem.session_id, mem.token_count) == \
        ("项目用 PostgreSQL", "s1", 5)
    assert archive.forget_memory(a) and not archive.forget_memory(a)
    assert archive.memory(a) is None and [m.memory_id for m in archive.memories("alice")] == [b]


def test_memories_supersede_cite_and_go_with_their_messages(archive: ArchiveStore) -> None:
    archive.write(_row("s1", "alice"), [_msg("s1", 1, "we use MySQL"), _msg("s1", 2, "ok"),
                                        _msg("s1", 3, "no MySQL: PostgreSQL")])
    old = archive.remember("alice", "we use MySQL", 3, "s1", seq=1, kind="extracted",
                           topic="database")
    new = archive.remember("alice", "no MySQL: PostgreSQL", 4, "s1", seq=3, kind="extracted",
                           topic="database", supersedes=[old])
    assert old and new
    assert [m.memory_id for m in archive.memories("alice")] == [new]
    assert [(m.memory_id, m.superseded_by) for m in archive.memories("alice", superseded=True)] \
        == [(old, new), (new, None)]
    assert archive.messages("s1")[2].memory_refs == (new,)  # the message cites its memory
    archive.add_source(new, "s1", 2)
    archive.forget("s1", [Forgotten(archive.messages("s1")[2].message_id, 3, 1)])
    assert [m.memory_id for m in archive.memories("alice")] == [new]  # still said at seq 2
    archive.forget("s1", [Forgotten(archive.messages("s1")[1].message_id, 2, 1)], memories=False)
    assert [m.memory_id for m in archive.memories("alice")] == [new]  # a clear keeps it
    archive.forget("s1", [Forgotten("s1-0001", 1, 3)])  # the older fact's message
    assert [m.memory_id for m in archive.memories("alice", superseded=True)] == [new]
    assert archive.forget_memory(new) and archive.memories("alice") == []
    assert archive.remember("alice", "gone", 1, "s1", seq=3, kind="extracted") is None
    explicit = archive.remember("alice", "mine", 1, "s1")
    archive.forget_session_memories("s1")
    assert explicit in {m.memory_id for m in archive.memories("alice")}


def test_only_the_newest_extracted_memories_are_kept(archive: ArchiveStore) -> None:
    archive.write(_row("s1", "alice"), [_msg("s1", i, f"fact {i}") for i in range(1, 5)])
    made = [archive.remember("alice", f"fact {i}", 2, "s1", seq=i, kind="extracted")
            for i in range(1, 5)]
    explicit = archive.remember("alice", "explicit", 1, None)
    assert archive.drop_oldest_extracted("alice", 2) == 2
    assert [m.memory_id for m in archive.memories("alice")] == [*made[2:], explicit]


def test_turn_starts_count_user_messages_and_the_first(archive: ArchiveStore) -> None:
    archive.write(_row("s1", "alice"), [_msg("s1", 1, "sys", "system"), _msg("s1", 2, "q1"),
                                        _msg("s1", 3, "a1", "assistant"), _msg("s1", 4, "q2")])
    assert archive.turn_starts("s1", 2, 10) == (3, 2)
    assert archive.turn_starts("s1", 0, 3) == (2, 0)
    assert archive.turn_starts("nope", 0, 10) == (0, 0)


def test_a_purged_id_is_reclaimed_once(archive: ArchiveStore) -> None:
    archive.write(_row("s1", "alice"), [_msg("s1", 1, "hi")])
    assert not archive.reclaim("s1")  # active, with messages
    archive.set_status("s1", "deleted")
    archive.purge("s1")
    assert archive.reclaim("s1") and not archive.reclaim("s1")
    assert archive.session("s1") is None and archive.tombstoned("s1")  # tombstones stay


def test_an_item_round_trips_exactly(archive: ArchiveStore) -> None:
    item = '{"type": "function_call_output", "b": 1.0, "a": [1, "二"], "call_id": "c"}'
    archive.write(_row("s1", "alice"), [dataclasses.replace(_msg("s1", 1, "out", "tool"),
                                                            item_json=item)])
    assert archive.messages("s1")[0].item_json == item


def test_api_keys(archive: ArchiveStore) -> None:
    archive.add_api_key("k1", "alice", "hash1")
    archive.add_api_key("k2", None, "hash2")
    assert archive.active_api_keys() == 2
    found = archive.api_key_by_hash("hash1")
    assert found is not None and (found["key_id"], found["user_id"]) == ("k1", "alice")
    assert parse_ts(found["created_at"]) > 0 and found["revoked_at"] is None
    assert archive.revoke_api_key("k1") and not archive.revoke_api_key("k1")
    assert archive.active_api_keys() == 1
    assert archive.api_key_by_hash("hash1")["revoked_at"] is not None  # type: ignore[index]
    assert [k["key_id"] for k in archive.api_keys()] == ["k1", "k2"]
    assert archive.api_key_by_hash("nope") is None
    with pytest.raises(BackendUnavailableError):  # a hash is unique
        archive.add_api_key("k3", "bob", "hash2")


def test_sessions_page_walks_every_session_once(archive: ArchiveStore) -> None:
    for i in range(7):
        archive.write(row(f"s{i}", user="alice" if i % 2 else "bob",
                          updated_at=T0 + (i // 2)), [])  # ties on updated_at
    archive.set_status("s6", "archived")
    seen: list[str] = []
    after = None
    while True:
        page = archive.sessions_page(None, None, 3, after)
        seen += [r["session_id"] for r in page]
        if len(page) < 3:
            break
        after = (page[-1]["updated_at"], page[-1]["session_id"])
    assert seen[0] == "s6" and sorted(seen) == [f"s{i}" for i in range(7)] and len(set(seen)) == 7
    assert [r["session_id"] for r in archive.sessions_page("alice", "active", 10)] == ["s5", "s3", "s1"]
    assert [r["session_id"] for r in archive.sessions_page(None, "archived", -1)] == ["s6"]
    assert len(archive.sessions_page(None, None, -1)) == 7


def test_id_prefix_lookups(archive: ArchiveStore) -> None:
    for sid in ("a1b2c3", "a1b2d4", "a1ff00", "b00000", "A1b2zz"):
        archive.write(row(sid), [])
    assert archive.session_ids_like("a1b2") == ["a1b2c3", "a1b2d4"]
    assert archive.session_ids_like("a1", limit=2) == ["a1b2c3", "a1b2d4"]
    assert archive.count_ids_like("a1") == 3 and archive.count_ids_like("zz") == 0
    assert archive.neighbours(["a1b2d4"]) == {"a1b2c3", "a1ff00"}
    assert archive.neighbours(["A1b2zz"]) == {"a1b2c3"}  # byte order: upper case first


def fill(archive: ArchiveStore) -> None:
    archive.write(row("s1", user="alice"), msgs("s1", [
        "帮我写一个 FastAPI 的用户认证接口",
        "好的：用 JWT，登录后签发 access token 和 refresh token。",
        "authentication tests for the login endpoint",
        "사용자 인증 테스트를 추가했습니다",
    ]))
    archive.write(row("s2", user="bob"), msgs("s2", [
        "authentication authentication auth everywhere",
        "unrelated words about painting",
    ]))


@pytest.mark.parametrize("query, hits", [
    ("认证", {("s1", 1)}), ("用户认证", {("s1", 1)}), ("认证接口", {("s1", 1)}),
    ("证用", set()), ("FastAPI 认证", {("s1", 1)}), ("인증", {("s1", 4)}),
    ("auth", {("s1", 3), ("s2", 1)}), ("AUTHENTICATION tests", {("s1", 3)}),
    ("refresh token", {("s1", 2)}), ("jwt", {("s1", 2)}), ("nothing-here", set()),
    ("\"quoted\" OR (weird*) AND", set()), ("it's", set()), ("tests:*", {("s1", 3)}),
])
def test_search_finds_words_prefixes_and_cjk_substrings(archive: ArchiveStore, query: str,
                                                         hits: set[tuple[str, int]]) -> None:
    fill(archive)
    assert {(h.session_id, h.seq) for h in archive.search(query)} == hits


def test_search_ranks_and_isolates_users(archive: ArchiveStore) -> None:
    fill(archive)
    ranked = archive.search("authentication")
    assert [(h.session_id, h.seq) for h in ranked] == [("s2", 1), ("s1", 3)]  # more often first
    assert ranked[0].score > ranked[1].score > 0
    assert ranked[0].title == "title s2" and ranked[0].role == "user" and ranked[0].tier == "archive"
    assert [(h.session_id, h.seq) for h in archive.search("authentication", user_id="alice")] == \
        [("s1", 3)]
    assert archive.search("authentication", limit=1)[0].session_id == "s2"
    archive.set_status("s2", "deleted")
    assert [h.session_id for h in archive.search("authentication")] == ["s1"]
    assert archive.search("   ") == [] and archive.search("!!!") == []


def test_a_word_in_more_messages_than_search_ranks_ranks_its_newest(
        archive: ArchiveStore, monkeypatch: pytest.MonkeyPatch) -> None:
    module = "hermes_redis.store.archive.sqlite" if type(archive).__name__ == "Archive" \
        else "hermes_redis.store.archive.postgres"
    archive.write(row("old"), msgs("old", ["deploy"]))  # the best match by rank, but oldest
    archive.write(row("new"), msgs("new", [f"we deploy the build number {i} to staging today"
                                           for i in range(6)], start=1))
    assert archive.search("deploy")[0].session_id == "old"
    monkeypatch.setattr(f"{module}.SEARCH_MAX_MATCHES", 4)
    hits = archive.search("deploy")
    assert len(hits) == 4 and {h.session_id for h in hits} == {"new"}
    assert sorted(h.seq for h in hits) == [3, 4, 5, 6]  # the newest four, ranked
    assert [h.session_id for h in archive.search("deploy", user_id="bob")] == []


def test_search_prefixes_find_every_form_of_a_word(archive: ArchiveStore) -> None:
    archive.write(row("s1"), msgs("s1", ["we deployed it", "the deployment failed", "redeploy",
                                         "e-mail the team", "email them", "Deploy tests"]))
    archive.write(row("s2"), msgs("s2", ["deploy"]))
    cases = {"deploy": {("s1", 1), ("s1", 2), ("s1", 6), ("s2", 1)},
             "deploym": {("s1", 2)}, "deployment": {("s1", 2)}, "deploymentx": set(),
             "e-mail": {("s1", 4)}, "e-ma": {("s1", 4)}, "email": {("s1", 5)},
             "deploy tes": {("s1", 6)}, "deploy zzz": set(), "d": {("s1", 1), ("s1", 2),
                                                                   ("s1", 6), ("s2", 1)}}
    for query, hits in cases.items():
        assert {(h.session_id, h.seq) for h in archive.search(query)} == hits, query


def test_search_expands_prefixes_to_terms_as_fts5_would(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite asks FTS5 for a prefix's exact terms (from fts_terms); with no expansion
    (SEARCH_MAX_EXPANSION 0) it asks FTS5's prefix query. Both find the same rows, diacritics
    (folded by unicode61) and a schema-5 archive upgraded in place included."""
    import sqlite3

    from hermes_redis.store.archive import sqlite as archive_sqlite
    texts = ["Déploiement prévu demain", "deploy now", "a café nearby", "the cafe is shut",
             "CAFÉS everywhere", "naïve résumé", "resume the run", "deployé partout"]
    queries = ["deplo", "déplo", "deploi", "caf", "cafe", "café", "cafes", "resum", "résumé",
               "naive", "nai", "deploye", "deploy", "zz"]
    store = Archive(tmp_path / "a.db")
    store.write(row("s1"), msgs("s1", texts))

    def hits() -> list[set[tuple[str, int]]]:
        return [{(h.session_id, h.seq) for h in store.search(q)} for q in queries]

    expanded = hits()
    monkeypatch.setattr(archive_sqlite, "SEARCH_MAX_EXPANSION", 0)
    assert hits() == expanded  # FTS5's own prefix query
    assert expanded[queries.index("caf")] == {("s1", 3), ("s1", 4), ("s1", 5)}
    assert expanded[queries.index("resum")] == {("s1", 6), ("s1", 7)}
    monkeypatch.undo()
    store.close()
    db = sqlite3.connect(tmp_path / "a.db")  # as schema 5 left it: no term list
    db.execute("DROP TABLE fts_terms")
    db.execute("PRAGMA user_version = 5")
    db.commit()
    db.close()
    store = Archive(tmp_path / "a.db")
    assert hits() == expanded
    store.close()


def test_recall_finds_the_session_and_its_replies(archive: ArchiveStore) -> None:
    fill(archive)
    got = [m.seq for m in archive.recall("s1", "how did we do 用户认证 again?", 0, 99, 5)]
    assert got[:2] == [1, 2]  # the hit, then the reply after it
    assert [m.seq for m in archive.recall("s1", "authenticating", 0, 99, 5)] == [3, 4]
    assert [m.seq for m in archive.recall("s1", "authentication", 0, 4, 5)] == [3]  # window
    assert list(archive.recall("s1", "the and of", 0, 99, 5)) == []  # stop words only
    assert list(archive.recall("s1", "painting", 0, 99, 5)) == []  # another session's


def test_recall_within_a_span_keeps_only_what_was_said_then(archive: ArchiveStore) -> None:
    day = 86_400
    archive.write(row("s1"), [  # a question each day, its reply the same day
        Message("s1", seq, "user" if seq % 2 else "assistant",
                "the deploy checklist?" if seq % 2 else "done", 3, message_id=f"s1-{seq:04d}",
                created_at=T0 + (seq + 1) // 2 * day) for seq in range(1, 7)])
    assert sorted(m.seq for m in archive.recall("s1", "deploy checklist", 0, 99, 5)) == \
        [1, 2, 3, 4, 5, 6]
    span = (T0 + 2 * day, T0 + 3 * day)  # the end is left out
    assert [m.seq for m in archive.recall("s1", "deploy checklist", 0, 99, 5, span)] == [3, 4]
    assert list(archive.recall("s1", "deploy checklist", 0, 99, 5, (T0, T0 + day))) == []


def test_recall_leaves_out_common_terms(archive: ArchiveStore,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    fill(archive)
    module = "hermes_redis.store.archive.sqlite" if type(archive).__name__ == "Archive" \
        else "hermes_redis.store.archive.postgres"
    monkeypatch.setattr(f"{module}.RECALL_MAX_POSTINGS", 1)
    # "authentication" is in two messages, "login" in one: only the rare term recalls
    assert [m.seq for m in archive.recall("s1", "authentication endpoint", 0, 99, 5)] == [3, 4]
    assert [m.seq for m in archive.recall("s2", "authentication", 0, 99, 5)] == [1, 2]  # kept


def test_reseat_needed_and_high_seqs(archive: ArchiveStore) -> None:
    batch = msgs("s1", ["a", "b", "c"])
    archive.write(row("s1"), batch)
    archive.write(row("s2"), [])
    assert archive.high_seqs(["s1", "s2", "nope"]) == {"s1": 3}
    assert archive.reseat_needed("s1", msgs("s1", ["d"], start=4)) == (0, 0)
    assert archive.reseat_needed("s1", batch) == (0, 0)  # archived already
    other = [Message("s1", 2, "user", "a different message at seq 2", 5, message_id="x-2")]
    assert archive.reseat_needed("s1", other) == (2, 3)
    assert archive.reseat_needed("s1", []) == (0, 0)


def test_reseat_needed_and_high_seqs_over_long_lists(archive: ArchiveStore) -> None:
    """Past SQLite's 500-value chunks: an archived, a forgotten and a foreign message each
    in another chunk, and many session ids at once."""
    batch = msgs("s1", [f"m{i}" for i in range(1200)])
    archive.write(row("s1"), batch)
    archive.forget("s1", [Forgotten(batch[700].message_id, 701, 1)])
    assert archive.reseat_needed("s1", batch) == (0, 0)  # archived or tombstoned, all
    moved = [*batch[:1100], dataclasses.replace(batch[1100], message_id="x-1101")]
    assert archive.reseat_needed("s1", moved) == (1101, 1200)
    sids = [f"n{i}" for i in range(1100)] + ["s1"]
    assert archive.high_seqs(sids) == {"s1": 1200} and archive.high_seqs([]) == {}


def test_knows_user_by_a_session_or_an_unrevoked_key(archive: ArchiveStore) -> None:
    archive.write(row("s1", user="alice", status="deleted"), [])
    archive.add_api_key("k1", "bob", "hash1")
    assert archive.knows_user("alice") and archive.knows_user("bob")
    assert not archive.knows_user("carol")
    archive.revoke_api_key("k1")
    assert not archive.knows_user("bob")


def test_a_source_added_twice_is_cited_once(archive: ArchiveStore) -> None:
    archive.write(row("s1"), msgs("s1", ["we use PostgreSQL", "ok"]))
    mid = archive.remember("alice", "uses PostgreSQL", 3, "s1", seq=1, kind="extracted")
    assert mid
    archive.add_source(mid, "s1", 1)
    archive.add_source(mid, "s1", 2)
    archive.add_source(mid, "s1", 2)
    archive.add_source("mem_nope", "s1", 2)  # no such memory: nothing cited
    assert [m.memory_refs for m in archive.messages("s1")] == [(mid,), (mid,)]
    archive.forget("s1", [Forgotten("s1-0001", 1, 4)])
    assert [m.memory_id for m in archive.memories("alice")] == [mid]  # still said at seq 2


# --- PostgreSQL only ------------------------------------------------------------------------

def test_pg_tokens_are_sqlite_fts5_tokens() -> None:
    assert fts_vector("Hello, wörld! e-mail a@b.com 认证") == \
        "'hello':1 'wörld':2 'e':3 'mail':4 'a':5 'b':6 'com':7 '认':8 '证':9"
    assert ts_query("auth 用户认证") == "('auth':*) & ('用' <-> '户' <-> '认' <-> '证':*)"
    assert ts_query("' & | ! ( ) : * <->") == ""
    assert term_query('"认 证"') == "'认' <-> '证'" and term_query('"paint"*') == "'paint':*"


def test_pg_concurrent_flushes_of_one_session_count_true(pg_url: str) -> None:
    archives = [PostgresArchive(pg_url, pool_size=2) for _ in range(4)]
    batches = [msgs("s1", [f"word{i}-{j}" for j in range(25)], start=1 + 25 * i) for i in range(4)]
    errors: list[BaseException] = []

    def flush(a: PostgresArchive, batch: list[Message]) -> None:
        try:
            for _ in range(2):  # each flush also runs twice
                a.write(row("s1"), batch + batches[0][:5])
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=flush, args=(a, b)) for a, b in zip(archives, batches,
                                                                            strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    s = archives[0].session("s1")
    assert s is not None and s["message_count"] == 100 and archives[0].stats("s1")[0] == 100
    for a in archives:
        a.close()


def test_pg_schema_is_upgraded_in_place(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:  # a database written at version 1
        conn.execute(archive_pg.MIGRATIONS[1])
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO schema_version VALUES (1)")
        conn.execute("INSERT INTO sessions (session_id, user_id, title) VALUES ('old', 'u', 't')")
        assert archive_pg.schema_version(conn) == 1
    archive = PostgresArchive(pg_url)
    try:
        s = archive.session("old")
        assert s is not None and s["cleared_seq"] == 0 and s["title"] == "t"
        archive.write(row("old", cleared_seq=4), msgs("old", ["still here"]))
        assert archive.session("old")["cleared_seq"] == 4  # type: ignore[index]
    finally:
        archive.close()
    with psycopg.connect(pg_url) as conn:
        assert archive_pg.schema_version(conn) == archive_pg.SCHEMA_VERSION
        indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes")}
        assert {"idx_sessions_page", "idx_sessions_user_page"} <= indexes


def test_pg_refuses_a_newer_schema(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO schema_version VALUES (99)")
    archive = PostgresArchive(pg_url)
    with pytest.raises(BackendUnavailableError, match="schema version 99, newer"):
        archive.session("x")


def test_pg_unreachable_is_one_clear_line() -> None:
    from tests.redis_server import free_port

    archive = PostgresArchive(f"postgresql://u:secret@127.0.0.1:{free_port()}/db", timeout=1)
    started = time.monotonic()
    with pytest.raises(BackendUnavailableError) as info:
        archive.session("x")
    message = str(info.value)
    assert "\n" not in message and "secret" not in message and "archive.url" in message
    assert time.monotonic() - started < 5


def test_pg_doctor_reports_reachable_schema_and_unreachable(pg_url: str) -> None:
    from hermes_redis.cli.doctor import archive_check
    from hermes_redis.core.config import Config
    from tests.redis_server import free_port

    config = Config().with_overrides(archive={"url": pg_url})
    empty = archive_check(config)
    assert empty.status == "warn" and "no hermes tables yet" in empty.detail
    opened = PostgresArchive(pg_url)
    assert opened.session("x") is None  # the first use creates the tables
    opened.close()
    ready = archive_check(config)
    assert ready.status == "ok", ready
    assert f"schema version {archive_pg.SCHEMA_VERSION}" in ready.detail and "writable" in ready.detail
    gone = archive_check(Config().with_overrides(
        archive={"url": f"postgresql://u:pw@127.0.0.1:{free_port()}/db"}))
    assert gone.status == "fail" and "cannot reach" in gone.detail and "pw" not in gone.detail


def test_a_huge_message_is_archived_and_found(archive: ArchiveStore) -> None:
    log = "".join(f"line {i % 700} status ok\n" for i in range(30_000))  # a 600 KB tool result
    body = log + "认" * 5000 + " x" * 20_000 + " needle at the end"
    [m] = msgs("s1", [body])
    assert archive.write(row("s1"), [m]) == 1
    assert archive.messages("s1")[0].content == body
    assert [h.seq for h in archive.search("status ok")] == [1]
    assert [h.seq for h in archive.search("needle")] == [1]  # past tsvector's last position


def test_pg_a_message_past_the_tsvector_limit_is_kept_whole(pg_url: str) -> None:
    """More distinct words than a tsvector holds (1 MB): stored whole, its first ones found."""
    archive = PostgresArchive(pg_url)
    body = " ".join(f"w{i}" for i in range(200_000)) + " needle"
    archive.write(row("s1"), msgs("s1", [body]))
    assert archive.messages("s1")[0].content == body
    assert [h.seq for h in archive.search("w7")] == [1] and archive.search("needle") == []
    archive.close()


def test_pg_a_forget_racing_flushes_stays_forgotten(pg_url: str) -> None:
    """Flushes of the whole session from two processes' pools while a third forgets half of
    it: whatever the interleaving, no forgotten message is left (invariant 4)."""
    flushers = [PostgresArchive(pg_url, pool_size=1) for _ in range(2)]
    forgetter = PostgresArchive(pg_url, pool_size=1)
    batch = msgs("s1", [f"text {i}" for i in range(60)])
    forgetter.write(row("s1"), [])
    doomed = [Forgotten(m.message_id, m.seq, m.token_count) for m in batch[::2]]
    done = threading.Event()

    def flush(a: PostgresArchive) -> None:
        while not done.is_set():
            a.write(row("s1"), batch)

    threads = [threading.Thread(target=flush, args=(a,)) for a in flushers]
    for t in threads:
        t.start()
    try:
        for target in doomed:
            forgetter.forget("s1", [target])
    finally:
        done.set()
        for t in threads:
            t.join()
    left = {m.message_id for m in forgetter.messages("s1")}
    assert not left & {t.message_id for t in doomed}
    assert forgetter.stats("s1")[0] == forgetter.session("s1")["message_count"]  # type: ignore[index]
    for a in [*flushers, forgetter]:
        a.close()


def test_pg_cli_end_to_end(tmp_path: Path, redis_url: str, pg_url: str) -> None:
    """The CLI on a PostgreSQL archive: a session archived by a flush is listed and found,
    keys live in PostgreSQL, doctor reports it, and the SQLite file is never created."""
    from click.testing import CliRunner

    from hermes_redis import SessionMemory
    from hermes_redis.cli.main import cli
    from hermes_redis.core import config
    from tests.helpers import isolated_config

    path = isolated_config(tmp_path, redis_url, archive={"url": pg_url})
    with SessionMemory(config.load(path)) as mem:
        sid = mem.create_session(user_id="alice")
        mem.append(sid, "user", "帮我写一个 FastAPI 的用户认证接口")
        mem.flush(sid)
    runner = CliRunner()

    def run(*args: str) -> str:
        result = runner.invoke(cli, ["--config", str(path), *args])
        assert "Traceback" not in result.output
        return result.output

    assert sid in run("session", "list", "--json")
    assert '"tier": "archive"' in run("search", "认证", "--json")
    assert "alice" in run("key", "create", "--user", "alice") and "alice" in run("key", "list")
    assert "PostgreSQL" in next(line for line in run("doctor").splitlines() if " archive " in line)
    assert not (tmp_path / "memory.db").exists()
