"""The ``HotStore`` contract, once, run against every backend (as huey's ``StorageTests``).

``HotStoreTests`` holds the tests and asks its subclass for a ``store`` fixture; one subclass
per backend (``TestMemoryHot``, ``TestRedisHot`` on the private test Redis). A new backend
gets the whole suite by adding a subclass; the archives can follow the same shape (a
contract class of tests, a ``store`` fixture per backend). Redis-only behaviour (key layout,
the retry path) stays in test_redis_hot.py.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from hermes_redis.core.errors import NotFoundError, StateError
from hermes_redis.core.models import Message, SessionMeta
from hermes_redis.store.hot import HotStore, MemoryHot, RedisHot, page_size

T0 = 1_700_000_000.0  # a fixed "now" for meta and appends, so orders and scores are exact


def msg(sid: str, content: str = "hello", tokens: int = 3, role: str = "user") -> Message:
    return Message(sid, 0, role, content, tokens)


def seqs(store: HotStore, sid: str) -> list[int]:
    return [m.seq for m in store.messages(sid)]


class HotStoreTests:
    """What every hot store does, in the interface's plain types. Subclasses provide ``store``."""

    @pytest.fixture
    def store(self) -> Iterator[HotStore]:
        raise NotImplementedError  # pragma: no cover - each backend's subclass provides it

    def session(self, store: HotStore, user: str = "u", ttl: int = 0, now: float = T0) -> str:
        sid = f"s{uuid.uuid4().hex[:12]}"
        assert store.create(sid, SessionMeta.new(user, "", now), ttl) is True
        return sid

    def append(self, store: HotStore, sid: str, *contents: str, now: float = T0 + 1,
               title: str = "") -> tuple[list[int], bool]:
        return store.append([msg(sid, c) for c in contents], now, title)

    # --- create, meta --------------------------------------------------------------------------
    def test_create_once_and_read_the_meta_back(self, store: HotStore) -> None:
        sid = self.session(store, user="alice")
        meta = store.meta(sid)
        assert meta == SessionMeta.new("alice", "", T0)
        assert store.create(sid, SessionMeta.new("bob", "other", T0 + 5), 0) is False  # never overwritten
        assert store.meta(sid) == meta
        assert store.length(sid) == 0 and store.messages(sid) == []

    def test_unknown_sessions_have_no_meta(self, store: HotStore) -> None:
        sid = self.session(store)
        assert store.meta("nope") is None
        assert store.metas(["nope", sid, "nope2"]) == [None, store.meta(sid), None]
        assert store.metas([]) == []
        assert store.length("nope") == 0 and store.page("nope", 0, 10) == []
        assert store.ttl_left("nope") is None

    # --- append --------------------------------------------------------------------------------
    def test_append_gives_consecutive_seqs_and_true_counters(self, store: HotStore) -> None:
        sid = self.session(store)
        assert self.append(store, sid, "one") == ([1], True, False)  # first unarchived: enqueue a flush
        assert self.append(store, sid, "two", "three", "four", now=T0 + 2) == ([2, 3, 4], False, False)
        got = store.messages(sid)
        assert [(m.seq, m.content) for m in got] == [(1, "one"), (2, "two"), (3, "three"),
                                                       (4, "four")]
        meta = store.meta(sid)
        assert meta is not None
        assert (meta.last_seq, meta.message_count, meta.total_tokens) == (4, 4, 12)
        assert meta.updated_at == T0 + 2
        assert self.append(store, sid, "five")[1] is False  # a flush is pending already

    def test_append_keeps_every_field_of_the_message(self, store: HotStore) -> None:
        sid = self.session(store)
        sent = Message(sid, 0, "assistant", "认证接口 ✓", 7, tool_calls='[{"name":"f"}]',
                       file_refs=("a.py",), memory_refs=("m1",), created_at=T0 + 0.5)
        store.append([sent], T0 + 1, "")
        [back] = store.messages(sid)
        assert back == Message(sid, 1, "assistant", "认证接口 ✓", 7, sent.message_id,
                               '[{"name":"f"}]', ("a.py",), ("m1",), T0 + 0.5)

    def test_append_sets_the_title_only_once(self, store: HotStore) -> None:
        sid = self.session(store)
        self.append(store, sid, "a", title="first title")
        self.append(store, sid, "b", title="second title")
        assert store.meta(sid).title == "first title"  # type: ignore[union-attr]

    def test_append_to_a_missing_or_inactive_session_fails_and_stores_nothing(
            self, store: HotStore) -> None:
        with pytest.raises(NotFoundError, match="NOSESSION"):
            store.append([msg("missing")], T0, "")
        assert store.meta("missing") is None and store.length("missing") == 0
        sid = self.session(store)
        store.set_fields(sid, {"status": "archived"})
        with pytest.raises(StateError, match="STATUS archived"):
            self.append(store, sid, "late")
        assert store.length(sid) == 0 and store.meta(sid).last_seq == 0  # type: ignore[union-attr]

    def test_concurrent_appends_never_share_or_skip_a_seq(self, store: HotStore) -> None:
        sid = self.session(store)
        got: list[int] = []
        lock = threading.Lock()

        def agent(n: int) -> None:
            for i in range(25):
                s, *_ = self.append(store, sid, f"agent {n} message {i}")
                with lock:
                    got.extend(s)

        threads = [threading.Thread(target=agent, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(got) == list(range(1, 101))
        assert seqs(store, sid) == list(range(1, 101))
        assert store.meta(sid).message_count == 100  # type: ignore[union-attr]

    def test_a_deduplicated_append_returns_the_stored_seqs(self, store: HotStore) -> None:
        sid = self.session(store)
        batch = [msg(sid, "a"), msg(sid, "b")]
        assert store.append(batch, T0 + 1, "") == ([1, 2], True, False)
        # an earlier attempt: its seqs, and its flush enqueued again while pending (issue 35)
        assert store.append(batch, T0 + 2, "", dedupe=True) == ([1, 2], True, True)
        assert store.append([msg(sid, "c")], T0 + 3, "", dedupe=True) == ([3], False, False)
        assert seqs(store, sid) == [1, 2, 3]
        assert store.meta(sid).message_count == 3  # type: ignore[union-attr]

    # --- full texts of capped tool results -----------------------------------------------------
    def test_full_texts_are_kept_per_session_until_archived(self, store: HotStore) -> None:
        a, b = self.session(store), self.session(store)
        ma, mb = msg(a, "capped a", role="tool"), msg(b, "capped b", role="tool")
        store.append([ma], T0 + 1, "", {ma.message_id: "the whole of a"})
        store.append([mb], T0 + 1, "", {mb.message_id: "the whole of b"})
        both = [ma.message_id, mb.message_id]
        assert store.full_texts(a, both) == {ma.message_id: "the whole of a"}
        assert store.full_texts(b, both) == {mb.message_id: "the whole of b"}
        assert store.full_texts(a, []) == {}
        store.ack_flush(a, 1, 0, [ma.message_id])
        assert store.full_texts(a, both) == {}
        store.drop(b)
        assert store.full_texts(b, both) == {}

    # --- reading: page, length, messages, tail, read -------------------------------------------
    def test_page_counts_back_from_the_newest(self, store: HotStore) -> None:
        sid = self.session(store)
        self.append(store, sid, *[f"m{i}" for i in range(1, 11)])
        assert store.length(sid) == 10
        assert [m.seq for m in store.page(sid, 0, 3)] == [8, 9, 10]
        assert [m.seq for m in store.page(sid, 3, 3)] == [5, 6, 7]
        assert [m.seq for m in store.page(sid, 8, 5)] == [1, 2]
        assert store.page(sid, 10, 5) == [] and store.page(sid, 0, 0) == []
        assert [m.seq for m in store.page(sid, 0, 100)] == list(range(1, 11))

    def test_tail_pages_backwards_newest_first(self, store: HotStore) -> None:
        sid = self.session(store)
        self.append(store, sid, *[f"m{i}" for i in range(1, 8)])
        assert [m.seq for m in store.tail(sid, page_size=3)] == [7, 6, 5, 4, 3, 2, 1]
        it = store.tail(sid, page_size=2)
        assert [next(it).seq, next(it).seq, next(it).seq] == [7, 6, 5]  # a reader may stop early

    def test_read_is_meta_page_and_cached_memories_at_once(self, store: HotStore) -> None:
        sid = self.session(store, user="ann")
        self.append(store, sid, *[f"m{i}" for i in range(1, 31)])
        r = store.read(sid, None, 100, "ann")
        assert r.meta == store.meta(sid) and r.memories is None and r.memories_gen == 0
        assert len(r.entries) == min(r.size, 30)  # the newest page, of the size it says
        assert [m.seq for m in store.tail(sid, first=r.first)] == list(range(30, 0, -1))
        # sized for the budget at the session's mean size (on Redis as this process last read
        # it: a first read guesses, and the reader pages on if the guess was short)
        assert store.read(sid, None, 100, "ann").size == page_size(100, r.meta)
        missing = store.read("nope", None, 100)
        assert (missing.meta, missing.entries, missing.memories) == (None, [], None)

    # --- flush acknowledgement and the backlog -------------------------------------------------
    def test_ack_flush_reports_the_backlog_left(self, store: HotStore) -> None:
        sid = self.session(store)
        self.append(store, sid, "a", "b", "c", now=T0 + 10)
        assert store.backlog_sessions(T0 + 10) == [sid]
        assert store.backlog_sessions(T0 + 9) == []  # unarchived only since T0 + 10
        assert store.ack_flush(sid, 2, 0, []) == 1
        assert store.ack_flush(sid, 1, 0, []) == 1  # never goes back
        assert store.meta(sid).flushed_seq == 2  # type: ignore[union-attr]
        assert store.backlog_sessions(T0 + 10) == [sid]
        assert store.ack_flush(sid, 3, 0, []) == 0
        assert store.backlog_sessions(T0 + 10) == []
        assert seqs(store, sid) == [1, 2, 3]  # archived, not summarized: still hot
        assert store.ack_flush("nope", 3, 0, []) == -1

    def test_clear_pending_lets_the_next_append_enqueue(self, store: HotStore) -> None:
        sid = self.session(store)
        assert self.append(store, sid, "a")[1] is True
        assert self.append(store, sid, "b")[1] is False
        store.clear_pending(sid)
        assert self.append(store, sid, "c")[1] is True
        store.clear_pending("nope")
        assert store.meta("nope") is None

    # --- compaction ----------------------------------------------------------------------------
    def test_compact_trims_only_what_is_summarized_and_archived(self, store: HotStore) -> None:
        sid = self.session(store)
        self.append(store, sid, *[f"m{i}" for i in range(1, 7)])
        assert store.compact(sid, 0, "summary of 1-4", 4) == 0  # nothing archived yet
        assert seqs(store, sid) == [1, 2, 3, 4, 5, 6]
        meta = store.meta(sid)
        assert meta is not None and (meta.summary, meta.summary_seq) == ("summary of 1-4", 4)
        store.ack_flush(sid, 3, 0, [])  # archived and summarized: leaves the hot list now
        assert seqs(store, sid) == [4, 5, 6]
        store.ack_flush(sid, 6, 0, [])
        assert seqs(store, sid) == [5, 6]  # 4 was summarized already, now archived too
        assert store.compact(sid, 4, "summary of all", None) == 2  # None: up to the newest
        assert store.messages(sid) == [] and store.meta(sid).summary_seq == 6  # type: ignore[union-attr]

    def test_compact_is_a_compare_and_set(self, store: HotStore) -> None:
        sid = self.session(store)
        self.append(store, sid, "a", "b", "c")
        assert store.compact(sid, 1, "wrong base", 2) == -2  # the summary is at 0, not 1
        assert store.compact(sid, 0, "s", 2) == 0
        assert store.compact(sid, 2, "backwards", 1) == -2  # never moves back under a CAS
        assert store.compact("nope", None, "s", None) == -1
        built_from = store.meta(sid)
        assert built_from is not None
        [first, *_] = store.messages(sid)
        store.forget(sid, [(first.message_id, first.seq, first.token_count)])
        assert store.compact(sid, 2, "has the forgotten text", 3, built_from) == -2
        assert store.meta(sid).summary == "s"  # type: ignore[union-attr]
        assert store.compact(sid, 2, "fresh", 3, store.meta(sid)) == 0

    # --- forget --------------------------------------------------------------------------------
    def test_forget_removes_and_counts_each_message_once(self, store: HotStore) -> None:
        sid = self.session(store)
        self.append(store, sid, "keep", "drop one", "drop two")
        _, one, two = store.messages(sid)
        targets = [(one.message_id, one.seq, one.token_count),
                   (two.message_id, two.seq, two.token_count)]
        assert store.forget(sid, targets) == 2
        assert [m.content for m in store.messages(sid)] == ["keep"]
        meta = store.meta(sid)
        assert meta is not None and (meta.message_count, meta.total_tokens) == (1, 3)
        assert meta.forgets == 1  # the compaction's compare-and-set sees the forget
        assert store.forget(sid, targets) == 0  # a repeat changes nothing
        assert store.meta(sid) == meta
        assert store.forget("nope", targets) == 0

    def test_forget_counts_a_message_no_longer_hot(self, store: HotStore) -> None:
        """A message already trimmed from the hot list (archived) still leaves the counters."""
        sid = self.session(store)
        self.append(store, sid, "old", "new")
        old, _ = store.messages(sid)
        store.ack_flush(sid, 2, 0, [])
        store.compact(sid, 0, "s", 1)
        assert seqs(store, sid) == [2]
        assert store.forget(sid, [(old.message_id, old.seq, old.token_count)]) == 0
        assert store.meta(sid).message_count == 1  # type: ignore[union-attr]

    # --- hydrate, reseat -----------------------------------------------------------------------
    def test_hydrate_rebuilds_a_gone_session_but_never_a_live_one(self, store: HotStore) -> None:
        sid = f"h{uuid.uuid4().hex[:12]}"
        meta = dataclasses.replace(SessionMeta.new("u", "rebuilt", T0), last_seq=2, flushed_seq=2,
                                   message_count=2, total_tokens=6)
        archived = [Message(sid, 1, "user", "q", 3), Message(sid, 2, "assistant", "a", 3)]
        assert store.hydrate(sid, meta, archived, 0) is True
        assert store.meta(sid) == meta and store.messages(sid) == archived
        assert store.hydrate(sid, SessionMeta.new("x", "", T0), [], 0) is False
        assert store.meta(sid) == meta
        assert self.append(store, sid, "next")[0] == [3]

    def test_reseat_puts_the_gap_back_and_renumbers_after_it(self, store: HotStore) -> None:
        """Redis went back in time: the archive holds 1..4, the hot tier lost 3 and 4 and
        handed those seqs out again to two new messages."""
        sid = self.session(store)
        self.append(store, sid, "one", "two", "new three", "new four")
        gap = [Message(sid, 3, "user", "old three", 5), Message(sid, 4, "assistant", "old four", 5)]
        assert store.reseat(sid, 3, 4, gap) == 2
        got = store.messages(sid)
        assert [(m.seq, m.content) for m in got] == [(1, "one"), (2, "two"), (3, "old three"),
                                                       (4, "old four"), (5, "new three"),
                                                       (6, "new four")]
        meta = store.meta(sid)
        assert meta is not None
        assert (meta.last_seq, meta.message_count, meta.total_tokens) == (6, 6, 22)
        assert self.append(store, sid, "after")[0] == [7]
        assert store.reseat("nope", 1, 2, []) == -1

    # --- fields, drop, index -------------------------------------------------------------------
    def test_set_fields_changes_only_a_live_session(self, store: HotStore) -> None:
        sid = self.session(store)
        store.set_fields(sid, {"status": "archived", "title": "t"})
        meta = store.meta(sid)
        assert meta is not None and (meta.status, meta.title) == ("archived", "t")
        store.set_fields(sid, {})
        assert store.meta(sid) == meta
        store.set_fields("nope", {"status": "archived"})
        assert store.meta("nope") is None  # never recreated as a hash of just these fields

    def test_drop_removes_the_session_everywhere(self, store: HotStore) -> None:
        sid = self.session(store)
        self.append(store, sid, "a", now=T0 + 1)
        store.drop(sid)
        assert store.meta(sid) is None and store.length(sid) == 0 and store.messages(sid) == []
        assert sid not in store.session_ids() and sid not in store.backlog_sessions(T0 + 100)
        store.drop(sid)  # dropping twice is fine
        assert store.create(sid, SessionMeta.new("u", "", T0), 0) is True  # and the id can start over

    def test_session_ids_newest_first_until_unindexed(self, store: HotStore) -> None:
        old = self.session(store, now=T0)
        new = self.session(store, now=T0 + 5)
        mine = [s for s in store.session_ids() if s in (old, new)]
        assert mine == [new, old]
        self.append(store, old, "bump", now=T0 + 9)  # activity moves it up
        assert [s for s in store.session_ids() if s in (old, new)] == [old, new]
        store.unindex([old])
        assert old not in store.session_ids() and store.meta(old) is not None
        store.unindex([])

    # --- TTL: only a fully archived session may expire (invariant 2) ---------------------------
    def test_ttl_waits_for_the_archive(self, store: HotStore) -> None:
        sid = self.session(store, ttl=100)
        left = store.ttl_left(sid)
        assert left is not None and 0 < left <= 100  # nothing to archive: may expire
        self.append(store, sid, "unarchived")
        assert store.ttl_left(sid) is None
        store.read(sid, 100, 1000)  # reading renews a TTL but cannot set one on unarchived turns
        assert store.ttl_left(sid) is None
        assert store.ack_flush(sid, 1, 100, []) == 0
        left = store.ttl_left(sid)
        assert left is not None and 0 < left <= 100
        store.read(sid, 30, 1000)  # a read sets the TTL to the configured one
        left = store.ttl_left(sid)
        assert left is not None and 0 < left <= 30
        store.read(sid, None, 1000)  # touch=False: left as it is
        left = store.ttl_left(sid)
        assert left is not None and 0 < left <= 30
        store.read(sid, 0, 1000)  # ttl 0: never expire
        assert store.ttl_left(sid) is None

    def test_a_read_leaves_the_ttl_of_a_session_not_active(self, store: HotStore) -> None:
        sid = self.session(store, ttl=100)
        store.set_fields(sid, SessionMeta.changes(status="archived"))
        assert store.read(sid, 0, 1000).meta.status == "archived"  # type: ignore[union-attr]
        assert store.read(sid, 5, 1000).meta is not None
        left = store.ttl_left(sid)  # neither persisted (ttl 0) nor cut to 5 s
        assert left is not None and 5 < left <= 100

    def test_a_session_expires_once_archived_and_idle(self, store: HotStore) -> None:
        idle = self.session(store, ttl=1)
        busy = self.session(store, ttl=1)
        self.append(store, busy, "not archived yet")
        time.sleep(1.3)
        assert store.meta(idle) is None and store.messages(idle) == []
        assert store.meta(busy) is not None and store.length(busy) == 1  # outlives the TTL
        assert store.read(idle, 1, 100).meta is None

    # --- the users' persistent-memory cache ----------------------------------------------------
    def test_memory_cache_refuses_a_stale_list(self, store: HotStore) -> None:
        user = f"user-{uuid.uuid4().hex[:8]}"
        assert store.cached_memories(user) == (None, 0)
        store.cache_memories(user, 0, ["prefers tabs"])
        assert store.cached_memories(user) == (["prefers tabs"], 0)
        sid = self.session(store, user=user)
        assert store.read(sid, None, 100, user).memories == ["prefers tabs"]
        store.memories_changed(user)
        assert store.cached_memories(user) == (None, 1)
        store.cache_memories(user, 0, ["stale"])  # read before the change: not cached
        assert store.cached_memories(user) == (None, 1)
        store.cache_memories(user, 1, ["prefers tabs", "answers in English"])
        assert store.cached_memories(user) == (["prefers tabs", "answers in English"], 1)

    def test_ping_and_the_capabilities_callers_ask_for(self, store: HotStore) -> None:
        store.ping()
        store.restarted()  # the first to ask after a (re)start of the store hears True
        assert store.restarted() is False  # once only
        assert store.needs_worker == (store.name != "memory")
        use = store.memory_use()
        assert use is None or (use[0] > 0 and use[1] >= 0)


class TestMemoryHot(HotStoreTests):
    @pytest.fixture
    def store(self) -> Iterator[HotStore]:
        hot = MemoryHot()
        yield hot
        hot.close()


class TestRedisHot(HotStoreTests):
    @pytest.fixture
    def store(self, redis_url: str) -> Iterator[HotStore]:
        client = redis.Redis.from_url(redis_url)
        prefix = f"t{uuid.uuid4().hex[:10]}"
        hot = RedisHot(client, prefix, redis_url)
        yield hot
        keys = client.keys(f"{prefix}:*")
        if keys:
            client.delete(*keys)
        hot.close()
