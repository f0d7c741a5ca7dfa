"""``SessionMemory``: the API agent processes import. It validates, then delegates to the
hot tier, the archive and the maintainer; it never touches Redis or SQLite directly."""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from hermes_redis import config as config_mod
from hermes_redis import metrics, tool_results
from hermes_redis.archive import ArchiveStore, SearchHit, fts_matches, relevant, snippet
from hermes_redis.backends import open_archive, open_hot, rq_dispatcher
from hermes_redis.compaction import CompactResult, Maintainer, split_turns
from hermes_redis.config import Config
from hermes_redis.context import SummaryFolds, build_context
from hermes_redis.errors import (
    AmbiguousIdError,
    BackendUnavailableError,
    HermesError,
    NotFoundError,
    StateError,
    ValidationError,
)
from hermes_redis.extraction import ChatExtractor, Extractor, RuleExtractor
from hermes_redis.history import SessionHistory
from hermes_redis.hot import HotStore
from hermes_redis.items import check_item, render
from hermes_redis.memories import MemoryBook
from hermes_redis.models import (
    STATUSES,
    Context,
    Memory,
    Message,
    SessionInfo,
    SessionMeta,
    SessionPage,
    check_content,
    check_created_at,
    check_message_id,
    check_refs,
    check_role,
    check_session_id,
    check_text,
    check_tool_calls,
    new_message_id,
    new_session_id,
)
from hermes_redis.summarizers import ChatSummarizer, ExtractiveSummarizer, Summarizer
from hermes_redis.tokens import Tokenizer, get_tokenizer
from hermes_redis.triggers import trigger_fact

log = logging.getLogger(__name__)
MAX_BATCH = 1000  # messages in one append_many call
MESSAGE_FIELDS = frozenset(
    ("role", "content", "tool_calls", "file_refs", "memory_refs", "message_id", "created_at",
     "item"))
_PLAIN = frozenset(("role", "content"))  # a message with no options: what _checked skips for it
_NO_EXTRAS = {  # what the checks make of the options left out
    "item": check_item(None, 0), "tool_calls": check_tool_calls(None),
    "file_refs": check_refs(None, "file_refs"), "memory_refs": check_refs(None, "memory_refs"),
    "message_id": None, "created_at": check_created_at(None)}


class SessionMemory:
    def __init__(self, config: Config | None = None, *, hot: HotStore | None = None,
                 archive: ArchiveStore | None = None) -> None:
        self.config = config or Config()
        self.tokenizer: Tokenizer = get_tokenizer(self.config.model.encoding)
        self.hot = hot or open_hot(self.config)
        self.cold = archive or open_archive(self.config)
        self.offline_summarizer = ExtractiveSummarizer(self.tokenizer)
        self.folds = SummaryFolds(self.offline_summarizer)  # read time: offline, incremental
        self._users: OrderedDict[str, str] = OrderedDict()  # session id -> its user
        self._users_lock = threading.Lock()  # threads share it (the HTTP server's pool)
        persistent = self.config.memory.persistent
        self.book = MemoryBook(self.cold, self.hot, self.tokenizer, persistent.max_extracted,
                               self._extractor())
        self.maintainer = Maintainer(self.config, self.hot, self.cold, self._summarizer(),
                                     self.tokenizer, self.book if persistent.auto_extract else None)
        if self.hot.restarted():
            self.maintainer.catch_up()
        self.pressure = MemoryPressure(self.hot, self.config.redis.memory_warn,
                                       self.config.redis.memory_limit)
        self._enqueue: Callable[[str], None] = (
            rq_dispatcher(self.hot, self.config.redis.queue)
            if self.hot.needs_worker else self._maintain_inline
        )

    @classmethod
    def from_config(cls, path: str | os.PathLike[str] | None = None) -> SessionMemory:
        """A SessionMemory from ``path`` (else ``$HERMES_CONFIG``, else ``./config.yml`` if
        present, else the defaults)."""
        return cls(config_mod.load(path))

    def close(self) -> None:
        """Release the Redis connections and the archive file; the object is unusable after."""
        self.hot.close()
        self.cold.close()

    def __enter__(self) -> SessionMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _extractor(self) -> Extractor:
        """The configured endpoint when there is one (as for summaries), else the rules."""
        c = self.config
        model = c.session.compression.summary_model
        if model == "default" or not c.summarizer.base_url:
            return RuleExtractor()
        return ChatExtractor(model, c.summarizer.base_url, c.summarizer.api_key, c.summarizer.timeout)

    def _summarizer(self) -> Summarizer:
        offline = self.offline_summarizer
        c = self.config
        model = c.session.compression.summary_model
        if model == "default" or not c.summarizer.base_url:
            return offline
        return ChatSummarizer(model, c.summarizer.base_url, c.summarizer.api_key,
                              c.summarizer.timeout, offline)

    # --- sessions ----------------------------------------------------------------------------
    def create_session(self, user_id: str = "default", title: str = "",
                       session_id: str | None = None) -> str:
        """A new active session of ``user_id``; returns its id (``session_id``: your own id,
        a ValidationError if any tier knows it). It is listed and found by prefix at once."""
        sid = check_session_id(session_id) if session_id is not None else new_session_id()
        user_id = _check_user(user_id)
        if session_id is not None and (row := self.cold.session(sid)) is not None:
            self.maintainer.reuse(sid, row, user_id)
            self._users.pop(sid, None)
        title = check_text(title, "title", self.config.limits.max_title_chars)
        meta = SessionMeta.new(user_id, title, time.time())
        if not self.hot.create(sid, meta, self.config.session.ttl):
            raise ValidationError(f"session {sid} already exists; pick another id")
        # listed and found by prefix from the archive's indexes, before its first flush
        self.cold.write(meta.to_row(sid), [])
        return sid

    def append(self, session_id: str, role: str, content: str = "", tool_calls: Any = None,
               file_refs: Any = None, memory_refs: Any = None,
               message_id: str | None = None, created_at: float | None = None,
               item: Any = None) -> Message:
        """Store one message with the next seq. Pass your own ``message_id`` (from
        ``new_message_id()``) to make retries safe: an append whose reply was lost and is
        sent again with the same id returns the stored message instead of a duplicate.
        ``created_at`` (Unix seconds, default now) is for importing a conversation with the
        times it was said; summaries and recalled excerpts show its date. ``item`` (any JSON
        value: a framework's message object) is kept exactly and never cut; with ``content``
        empty, a rendering of it (``items.render``) is the content."""
        fields: dict[str, Any] = {"role": role, "content": content}
        if not (tool_calls is None and file_refs is None and memory_refs is None
                and message_id is None and created_at is None and item is None):
            fields.update(tool_calls=tool_calls, file_refs=file_refs, memory_refs=memory_refs,
                          message_id=message_id, created_at=created_at, item=item)
        return self._store(check_session_id(session_id), [fields], one=True)[0]

    def append_many(self, session_id: str, messages: Sequence[Mapping[str, Any]]) -> list[Message]:
        """Store a whole turn (a user message, the assistant's reply, tool calls and results)
        in one atomic Redis round trip, with consecutive seqs even while other processes
        append. Each item is keyed like ``append``'s arguments (``role`` and ``content``
        required). Every item is checked first: one bad item is an error naming it, and
        nothing is stored. Retries with the same ``message_id``s return the stored turn."""
        sid = check_session_id(session_id)
        if not isinstance(messages, Sequence) or isinstance(messages, str | bytes):
            raise ValidationError("messages must be a list of message objects")
        if not messages:
            raise ValidationError("messages is empty: send at least one message")
        if len(messages) > MAX_BATCH:
            raise ValidationError(f"{len(messages)} messages in one call, over the limit of "
                                  f"{MAX_BATCH}: split the batch")
        return self._store(sid, messages, one=False)

    def _store(self, sid: str, items: Sequence[Mapping[str, Any]], one: bool) -> list[Message]:
        checked = [self._checked(item, i, one) for i, item in enumerate(items)]
        ids = [c["message_id"] for c in checked if c["message_id"] is not None]
        if len(set(ids)) != len(ids):
            raise ValidationError("two messages share one message_id: give each its own")
        msgs, full = self._new_messages(sid, checked)
        facts = self._trigger_facts(msgs)  # a trigger with nothing to remember refuses them all
        self.pressure.check()
        first_user = next((m.content for m in msgs if m.role == "user"), None)
        title = self._title(first_user) if first_user and self.config.session.auto_title else ""
        made: list[str] = []
        if facts:
            msgs, made = self._remember_triggered(sid, msgs, facts)
        try:
            seqs, enqueue = self._append(msgs, title, full, dedupe=bool(ids))
        except BaseException:
            for memory_id in made:  # the message was not stored: neither is what it asked
                self.forget_memory(memory_id)
            raise
        for i in facts:  # the trigger's memory is the last it cites; forgetting it forgets that
            self.cold.add_source(msgs[i].memory_refs[-1], sid, seqs[i], msgs[i].message_id)
        if enqueue:
            self._dispatch(sid)
        self.pressure.appended(msgs)
        metrics.APPENDS.inc(len(msgs))
        return [m.with_seq(seq) for m, seq in zip(msgs, seqs, strict=True)]

    def _trigger_facts(self, msgs: list[Message]) -> dict[int, str]:
        """What user messages ask to remember in plain words ("记住：…", "remember that …"),
        by position; empty when ``memory.persistent.triggers`` is off."""
        if not self.config.memory.persistent.triggers:
            return {}
        facts = {i: trigger_fact(m.content) for i, m in enumerate(msgs) if m.role == "user"}
        return {i: f for i, f in facts.items() if f}

    def _remember_triggered(self, sid: str, msgs: list[Message],
                            facts: dict[int, str]) -> tuple[list[Message], list[str]]:
        """Store each fact as the session user's memory; the message cites it in
        ``memory_refs``, so ``append`` reports what it recorded (an agent can say "已记录")."""
        user = self._users.get(sid) or self._meta(sid).user_id
        made: list[str] = []
        out = list(msgs)
        for i, fact in facts.items():
            text = check_content(fact, self.config.limits.max_content_bytes).strip()
            memory_id, new = self.book.add(user, text, sid, kind="trigger")
            assert memory_id is not None  # only an extracted memory can be refused
            if new:
                made.append(memory_id)
            out[i] = replace(out[i], memory_refs=(*out[i].memory_refs, memory_id))
        return out, made

    def _checked(self, item: Mapping[str, Any], i: int, one: bool) -> dict[str, Any]:
        """One message's fields, validated; errors name the item (``messages[i]``)."""
        limit = self.config.limits.max_content_bytes
        try:
            if type(item) is dict and item.keys() == _PLAIN:  # most messages: no options to check
                return {"role": check_role(item["role"]),
                        "content": check_content(item["content"], limit), **_NO_EXTRAS}
            if not isinstance(item, Mapping):
                raise ValidationError("a message is an object with role and content, "
                                      f"not {type(item).__name__}")
            unknown = set(item) - MESSAGE_FIELDS
            if unknown:
                raise ValidationError(f"unknown field {sorted(unknown)[0]!r}: use "
                                      + ", ".join(sorted(MESSAGE_FIELDS)))
            message_id = item.get("message_id")
            payload = check_item(item.get("item"), limit)
            content = item.get("content")
            if payload and (content is None or content == ""):
                content = render(item.get("item"), limit // 4)  # ≤ 4 bytes a character
            return {
                "role": check_role(item.get("role")),
                "content": check_content(content, limit),
                "item": payload,
                "tool_calls": check_tool_calls(item.get("tool_calls")),
                "file_refs": check_refs(item.get("file_refs"), "file_refs"),
                "memory_refs": check_refs(item.get("memory_refs"), "memory_refs"),
                "message_id": None if message_id is None else check_message_id(message_id),
                "created_at": check_created_at(item.get("created_at")),
            }
        except ValidationError as err:
            if one:
                raise
            raise ValidationError(f"messages[{i}]: {err}") from None

    def _append(self, msgs: list[Message], title: str, full: dict[str, str],
                dedupe: bool) -> tuple[list[int], bool]:
        sid = msgs[0].session_id
        try:
            return self.hot.append(msgs, time.time(), title, full, dedupe)
        except NotFoundError:
            self._meta(sid)  # rebuilds an expired session from the archive
            return self.hot.append(msgs, time.time(), title, full, dedupe)
        except StateError:
            status = self._meta(sid).status
            raise StateError(f"session {sid} is {status}; "
                             + ("restore it first" if status == "archived" else
                                "start a new session")) from None

    def _new_messages(self, sid: str,
                      checked: list[dict[str, Any]]) -> tuple[list[Message], dict[str, str]]:
        """The Messages to store (tokens counted by ``Tokenizer.count_many``; a tool result over
        ``tool_result_max_tokens`` capped) and the full texts of the capped ones."""
        limit = self.config.session.tool_result_max_tokens
        counts = self.tokenizer.count_many([c["content"] for c in checked])
        now = round(time.time(), 6)
        msgs: list[Message] = []
        full: dict[str, str] = {}
        for c, tokens in zip(checked, counts, strict=True):
            content, message_id = c["content"], c["message_id"] or new_message_id()
            if c["role"] == "tool" and tokens > limit:
                keep = self.config.session.save_tool_results
                if keep:
                    full[message_id] = content
                where = "the archive" if keep else "nowhere (not saved)"
                content = (tool_results.summarize(content, limit, self.tokenizer, where)
                           if self.config.session.tool_result_summarize
                           else self.tokenizer.cap(content, limit, where))
                tokens = self.tokenizer.count(content)
            msgs.append(Message.new(sid, 0, c["role"], content, tokens, message_id,
                                    c["tool_calls"], c["file_refs"], c["memory_refs"],
                                    now if c["created_at"] is None else c["created_at"], c["item"]))
        return msgs, full

    def _title(self, content: str) -> str:
        first = " ".join(content[: 4 * self.config.limits.max_title_chars].split())
        limit = self.config.limits.max_title_chars
        return first if len(first) <= limit else first[: limit - 1] + "…"

    def _dispatch(self, sid: str) -> None:
        try:
            self._enqueue(sid)
        except HermesError as err:  # the append is safe; the sweep re-enqueues later
            log.warning("%s", err)

    def _maintain_inline(self, sid: str) -> None:
        """The memory backend has no workers: flush and compact in-process."""
        self.maintain(sid)

    def maintain(self, session_id: str) -> tuple[int, int]:
        """Archive the session's backlog, then compact it if the hot tier is over its caps
        (what a worker's flush job does). Returns (messages archived, messages trimmed)."""
        return self.maintainer.maintain(check_session_id(session_id))

    def _meta(self, sid: str) -> SessionMeta:
        """The session's live meta, rebuilding the hot tier from the archive after expiry."""
        return self.maintainer.load(sid)

    def resolve(self, prefix: str) -> str:
        """A full session id from a unique prefix (as typed on the command line)."""
        check_session_id(prefix)
        if self.cold.session(prefix) is not None or self.hot.meta(prefix) is not None:
            return prefix
        found = self.cold.session_ids_like(prefix)  # every session has an archive row
        if not found:
            raise NotFoundError(f"no session matches {prefix!r}; see `hermes-redis session list`")
        if len(found) > 1:
            shown = ", ".join(found[:5])
            count = self.cold.count_ids_like(prefix)
            raise AmbiguousIdError(f"{prefix!r} matches {count} sessions ({shown}); type more")
        return found[0]

    # --- reading -----------------------------------------------------------------------------
    def context(self, session_id: str, budget: int | None = None, *,
                query: str | None = None, touch: bool = True) -> Context:
        """What the model sees (invariant 6). ``query`` pulls the older messages most
        relevant to it into ``recalled`` (default: the newest user message; "" for none).
        ``touch=False`` reads without renewing the TTL (``info`` observes, it is not activity)."""
        sid = check_session_id(session_id)
        budget = self._budget(budget)
        ttl = self.config.session.ttl if touch else None
        asked = self._users.get(sid)
        read = self.hot.read(sid, ttl, budget, asked)
        meta = read.meta
        if meta is None:  # expired: rebuilt from the archive, then read again
            self._meta(sid)
            read = self.hot.read(sid, ttl, budget, asked)
            meta = read.meta or self._meta(sid)
        if meta.status != "active":
            raise StateError(f"session {sid} is {meta.status}; restore it to load its context")
        user = meta.user_id
        self._remember_user(sid, user)
        if asked == user and read.memories is not None:
            memories = read.memories
        else:
            memories = self._load_memories(user, read.memories_gen if asked == user else None)
        history = SessionHistory(sid, self.maintainer, self.cold, self.tokenizer,
                                 self.config.session.tool_result_max_tokens)
        return build_context(self.hot, sid, meta, memories, budget,
                             self.config.model.context_window, self.tokenizer, history=history,
                             compression=self.config.session.compression,
                             folds=self.folds, query=query,
                             first_page=read.first if read.meta is not None else None)

    def _remember_user(self, sid: str, user: str) -> None:
        """Sessions never change user: knowing it lets the next read fetch the user's cached
        memories in the same round trip as the session."""
        with self._users_lock:  # another thread's trim between these steps: a KeyError
            self._users[sid] = user
            self._users.move_to_end(sid)
            while len(self._users) > 10_000:
                self._users.popitem(last=False)

    def _load_memories(self, user: str, gen: int | None) -> list[str]:
        """The user's persistent memories: cached in the hot tier, else read from the archive
        and cached (``gen``: the cache generation already read, None when not yet)."""
        try:
            if gen is None:
                cached, gen = self.hot.cached_memories(user)
                if cached is not None:
                    return cached
            memories = [m.content for m in self.cold.memories(user)]
        except BackendUnavailableError as err:  # the hot tier alone still gives a context
            log.warning("%s; context built without persistent memories", err)
            return []
        self.hot.cache_memories(user, gen, memories)
        return memories

    def _budget(self, budget: int | None) -> int:
        if budget is None:
            return self.config.context_budget
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
            raise ValidationError(f"budget must be a positive number of tokens, not {budget!r}")
        return budget

    def resume(self, sid: str | None = None, user_id: str | None = None, *,
               budget: int | None = None, query: str | None = None) -> Context:
        """The context of ``sid``, or of the user's most recently updated active session."""
        if sid is None:
            active = self.list_sessions(user_id=user_id, status="active")
            if not active:
                who = f" for user {user_id}" if user_id else ""
                raise NotFoundError(f"no active session{who}; create one first")
            sid = active[0].session_id
        return self.context(sid, budget, query=query)

    def messages(self, session_id: str, after_seq: int = 0,
                 limit: int | None = None, *, last: int | None = None) -> list[Message]:
        """The full history, archived and hot, in seq order; ``after_seq`` and ``limit`` give
        one page of it (the first ``limit`` messages with seq > ``after_seq``), ``last`` the
        newest ``last`` messages, read from the hot tail (and the archive only for what the hot
        tier no longer holds)."""
        sid = check_session_id(session_id)
        if last is not None:
            if not isinstance(last, int) or isinstance(last, bool) or last < 1:
                raise ValidationError(f"last must be a positive number of messages, not {last!r}")
            if after_seq or limit is not None:
                raise ValidationError("give last, or after_seq and limit, not both")
            newest = self.maintainer.newest(sid, last)
            if not newest:
                self.user_of(sid)  # raises for an unknown session
            return newest
        if not isinstance(after_seq, int) or isinstance(after_seq, bool) or not 0 <= after_seq < 2**63:
            raise ValidationError(f"after_seq must be 0 or a positive seq, not {after_seq!r}")
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
            raise ValidationError(f"limit must be a positive number of messages, not {limit!r}")
        history = self.maintainer.history(sid, after_seq=after_seq, limit=limit)
        if not history and self.cold.session(sid) is None:
            self._meta(sid)  # raises for an unknown session
        return history

    def user_of(self, session_id: str) -> str:
        """The user a session belongs to (it never changes, so it is cached); NotFoundError
        when no tier knows the session. Cheaper than ``info``: for access checks."""
        sid = check_session_id(session_id)
        user = self._users.get(sid)
        if user is None:
            meta = self.hot.meta(sid)
            row = self.cold.session(sid) if meta is None else None
            if meta is None and row is None:
                raise NotFoundError(f"no session {sid}; see `hermes-redis session list`")
            user = meta.user_id if meta is not None else (row or {}).get("user_id") or ""
            self._remember_user(sid, user)
        return user

    def ping(self) -> None:
        """Raise BackendUnavailableError unless the hot tier and the archive both answer."""
        self.hot.ping()
        self.cold.stats("")

    def backlog(self) -> tuple[int, int, float | None]:
        """(sessions holding unarchived messages, those messages, age in seconds of the oldest
        one or None). The age comes from the oldest backlog session's first unarchived
        message id (ids are time-ordered; a caller-chosen id can skew it)."""
        now = time.time()
        sids = self.hot.backlog_sessions(now)
        metas = self.hot.metas(sids) if sids else []
        count = sum(m.backlog for m in metas if m)
        oldest: float | None = None
        for sid, meta in zip(sids, metas, strict=True):
            if meta is None:
                continue
            first = self._first_unarchived(sid, meta)
            if first is not None:
                oldest = max(0.0, now - int(first.message_id[:12], 16) / 1000)
            break
        return len(sids), count, oldest

    def _first_unarchived(self, sid: str, meta: SessionMeta) -> Message | None:
        """The session's oldest unarchived message in the hot list. Unarchived messages are
        its newest ``backlog`` seqs, so with none forgotten it is the entry that many from
        the end: one read, however long the list grew while the workers were down. A
        forget among them puts an archived entry there: then the tail is walked to it."""
        at = self.hot.page(sid, max(0, meta.backlog - 1), 1)
        if at and at[0].seq > meta.flushed_seq:
            return at[0]
        first = None
        for m in self.hot.tail(sid, page_size=256):
            if m.seq <= meta.flushed_seq:
                break
            first = m
        return first

    def failed_jobs(self) -> int:
        """Flush jobs in RQ's failed registry (0 without workers: the memory backend)."""
        if not self.hot.needs_worker:
            return 0
        from rq.registry import FailedJobRegistry

        registry = FailedJobRegistry(self.config.redis.queue, connection=self.hot.queue_connection())
        return int(registry.count)

    def info(self, session_id: str) -> SessionInfo:
        """The session's counters, status and tiers, from the hot tier when it is loaded, else
        from its archive row; it neither loads the session nor renews its TTL."""
        sid = check_session_id(session_id)
        meta = self.hot.meta(sid)
        archived, _, _ = self.cold.stats(sid)
        if meta is not None:
            return SessionInfo.of(sid, meta, hot_count=self.hot.length(sid), archived_count=archived,
                                  ttl_left=self.hot.ttl_left(sid))
        row = self.cold.session(sid)
        if row is None:
            raise NotFoundError(f"no session {sid}; see `hermes-redis session list`")
        return SessionInfo.of(sid, SessionMeta.from_row(row), archived_count=archived, tier="archive")

    def turns(self, session_id: str) -> tuple[int, int]:
        """(turns in the stored history, turns its summary covers), without reading the
        history: a turn starts at a user message."""
        return self.maintainer.turns(check_session_id(session_id))

    def list_sessions(self, user_id: str | None = None, status: str | None = "active",
                      limit: int | None = 50, cursor: str | None = None) -> SessionPage:
        """One page of sessions, newest activity first (as of their last flush), live counts
        from the hot tier; ``page.next_cursor`` continues it (None: last page). ``limit=None``
        lists all. A page costs an index range in the archive and one hot round trip."""
        if status == "all":
            status = None
        if status is not None and status not in STATUSES:
            raise ValidationError(f"unknown status {status!r}: use one of {', '.join(STATUSES)}, all")
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
            raise ValidationError(f"limit must be a positive number of sessions, not {limit!r}")
        after = _cursor_key(cursor) if cursor is not None else None
        rows = self.cold.sessions_page(user_id, status, -1 if limit is None else limit + 1, after)
        more = limit is not None and len(rows) > limit
        rows = rows[:limit] if limit is not None else rows
        sids = [r["session_id"] for r in rows]
        infos = []
        for sid, row, meta in zip(sids, rows, self.hot.metas(sids), strict=True):
            if meta is not None:
                infos.append(SessionInfo.of(sid, meta))
            else:
                infos.append(SessionInfo.of(sid, SessionMeta.from_row(row), tier="archive",
                                            archived_count=int(row["message_count"] or 0)))
        nxt = _cursor_of(rows[-1]) if more and rows else None
        return SessionPage(infos, next_cursor=nxt)

    def short_ids(self, sids: Sequence[str], minimum: int = 8) -> dict[str, str]:
        """The shortest unique prefix (at least ``minimum`` characters) of each of ``sids``."""
        from hermes_redis.render import short_ids

        return short_ids(list(sids), sorted(set(sids) | self.cold.neighbours(sids)), minimum)

    def search(self, query: str, user_id: str | None = None, limit: int = 20) -> list[SearchHit]:
        """Archived messages matching every word of ``query`` (prefixes, CJK substrings), best
        first, then not-yet-archived ones matched the same way; ``user_id`` keeps to one user."""
        if not isinstance(query, str) or not query.strip():
            raise ValidationError("search query is empty: give at least one word")
        check_text(query, "search query", len(query))
        hits = self.cold.search(query, user_id=user_id, limit=limit)
        seen = {(h.session_id, h.seq) for h in hits}
        # Not yet archived: only the backlog's sessions, only their unarchived messages, and
        # matched as the archive matches (fts_matches), so a hit does not change on a flush.
        backlog = self.hot.backlog_sessions(time.time())
        for sid, meta in zip(backlog, self.hot.metas(backlog), strict=True):
            if meta is None or (user_id is not None and meta.user_id != user_id):
                continue
            if meta.status == "deleted":
                continue
            for m in self.hot.tail(sid, page_size=256):
                if m.seq <= meta.flushed_seq:
                    break
                if (sid, m.seq) not in seen and fts_matches(query, m.content):
                    hits.append(SearchHit(sid, m.seq, m.role, snippet(m.content, query),
                                          meta.title, 0.0, "hot"))
        return hits[:limit]

    # --- changing ----------------------------------------------------------------------------
    def flush(self, session_id: str) -> int:
        """Archive the session's backlog now instead of waiting for a worker."""
        return self.maintainer.flush(check_session_id(session_id))

    def compact(self, session_id: str) -> CompactResult | None:
        """Archive the backlog, then summarize older turns into the summary now, even under the
        caps; None when there is nothing to fold. The archive keeps every message."""
        sid = check_session_id(session_id)
        self._meta(sid)
        return self.maintainer.compact(sid, force=True)

    def sweep(self, grace: float = 30.0) -> list[str]:
        """Re-enqueue every session whose backlog is older than ``grace`` seconds or whose
        hot tier is over its cap; returns them."""
        return self.maintainer.sweep(self._enqueue, grace)

    def forget_last(self, session_id: str, n: int) -> int:
        """Forget the last ``n`` turns in both tiers and in the summary, for good (tombstones
        keep them from coming back); returns how many messages went."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValidationError(f"number of turns must be a positive integer, not {n!r}")
        sid = check_session_id(session_id)
        self._meta(sid)
        turns = split_turns(self.messages(sid))
        return self._forget(sid, [m for t in turns[-n:] for m in t])

    def forget_keyword(self, session_id: str, keyword: str) -> int:
        """Forget every message containing ``keyword`` (case-insensitive), as ``forget_last``."""
        if not isinstance(keyword, str) or not keyword.strip():
            raise ValidationError("keyword is empty: give the word to forget")
        sid = check_session_id(session_id)
        self._meta(sid)
        needle = keyword.strip().lower()
        return self._forget(sid, [m for m in self.messages(sid) if needle in m.content.lower()])

    def _forget(self, sid: str, doomed: list[Message]) -> int:
        return self.maintainer.forget(sid, doomed)

    def pop(self, session_id: str) -> Message | None:
        """Remove and return the newest message (None: the session has none), from both tiers
        for good, as a forget does: tombstoned, counters true. Of concurrent pops each gets a
        different message. A tool result comes back as the hot tier held it (maybe capped);
        its ``item`` is always whole."""
        return self.maintainer.pop(check_session_id(session_id))

    def clear(self, session_id: str, history: bool = False) -> None:
        """Empty the context (hot turns and summary); the archive and memories stay.
        ``history=True`` also forgets every message, from both tiers for good (``messages``
        is then empty); persistent memories still stay."""
        sid = check_session_id(session_id)
        if history:
            self._meta(sid)
            self.maintainer.forget(sid, self.messages(sid), memories=False)  # /clear keeps them
        self.maintainer.clear(sid)

    def archive(self, session_id: str) -> None:
        """Keep everything but stop loading the session into context."""
        self.maintainer.set_status(check_session_id(session_id), "archived", ("active",))

    def restore(self, session_id: str) -> None:
        """Make an archived session active again (an active one stays active)."""
        self.maintainer.set_status(check_session_id(session_id), "active", ("archived", "active"))

    def delete(self, session_id: str, purge: bool = False) -> None:
        """Mark deleted and drop the hot keys; ``purge`` also removes its archived rows."""
        self.maintainer.delete(check_session_id(session_id), purge)

    def remember(self, user_id: str, text: str, session_id: str | None = None) -> str:
        """Store a persistent memory of ``user_id`` (committed to the archive before this
        returns); every session of the user sees it in its next context. Returns its id: a
        near-duplicate of a current memory returns that one, and a memory on the same topic
        as a current one ("we use MySQL", then "no MySQL, PostgreSQL") supersedes it."""
        user_id = _check_user(user_id)
        text = check_content(text, self.config.limits.max_content_bytes)
        if session_id is not None:
            check_session_id(session_id)
        if not self.cold.knows_user(user_id):
            raise NotFoundError(f"no user {user_id[:80]}: they have no session and no API key; "
                                "create a session for them first (or check the spelling)")
        memory_id, _ = self.book.add(user_id, text.strip(), session_id)
        assert memory_id is not None  # only an extracted memory can be refused
        return memory_id

    def memories(self, user_id: str, query: str | None = None,
                 superseded: bool = False) -> list[Memory]:
        """The user's current persistent memories, oldest first (``superseded``: with the
        ones newer memories replaced); with ``query``, only those sharing a distinctive word
        with it (the recall's terms: stems, CJK pairs), best match first."""
        rows = self.cold.memories(_check_user(user_id), superseded=superseded)
        if query is None:
            return rows
        check_text(query, "query", len(query))
        return relevant(rows, query, key=lambda m: m.content)

    def forget_memory(self, memory_id: str, user_id: str | None = None) -> None:
        """Delete one persistent memory (of ``user_id`` when given: another user's memory
        answers NotFoundError like a missing one); what it superseded is current again, and
        the user's cached memories are dropped."""
        if not isinstance(memory_id, str) or not memory_id or len(memory_id) > 128:
            raise ValidationError("memory_id must be 1-128 characters: the id remember() returned")
        found = self.cold.memory(memory_id)
        if found is None or (user_id is not None and found.user_id != user_id):
            raise NotFoundError(f"no memory {memory_id[:80]}; list the user's memories for its id")
        self.cold.forget_memory(memory_id)
        self.hot.memories_changed(found.user_id)  # after the commit: the next read reloads


def _check_user(user_id: object) -> str:
    if not isinstance(user_id, str) or not user_id or len(user_id) > 128 or not user_id.isprintable():
        raise ValidationError("user_id must be 1-128 printable characters")
    return user_id


class MemoryPressure:
    """Back-pressure before Redis is full. An INFO round trip every ``every`` bytes of
    appended text or ``interval`` seconds, and before every append once past ``warn`` of
    maxmemory (a warning at most once a minute). Past ``limit``, appends are refused
    before anything is written, so workers keep the headroom they need to drain.

    Counted in bytes, not messages: an INFO and its parse cost about two appends, and at
    every 64 messages that was 3 % of an append's time with messages of 300 bytes."""

    def __init__(self, hot: HotStore, warn: float, limit: float, every: int = 256 * 1024,
                 interval: float = 5.0) -> None:
        self.hot, self.warn, self.limit = hot, warn, limit
        self.every, self.interval = every, interval
        self._count, self._next, self._warned, self._near = 0, 0.0, -60.0, False

    def check(self) -> None:
        """Raise BackendUnavailableError when Redis is past ``limit`` of maxmemory."""
        now = time.monotonic()
        if not self._near and self._count < self.every and now < self._next:
            return
        self._count, self._next = 0, now + self.interval
        try:
            use = self.hot.memory_use()
        except HermesError:
            return  # the append itself reports an unreachable Redis
        if use is None or not use[1]:
            self._near = False
            return
        share = use[0] / use[1]
        self._near = share >= self.warn
        url = self.hot.url or "in-process"
        if share >= self.limit:
            raise BackendUnavailableError(
                f"Redis at {url} is nearly out of memory ({share:.0%} of maxmemory, over "
                f"redis.memory_limit {self.limit:.0%}), nothing was written; start a worker to "
                "archive the backlog or raise maxmemory")
        if self._near and now - self._warned >= 60.0:
            self._warned = now
            log.warning("Redis at %s uses %.0f%% of maxmemory (%d of %d MiB): appends are refused "
                        "past %.0f%%; start workers to drain the backlog, or raise maxmemory",
                        url, 100 * share, use[0] >> 20, use[1] >> 20, 100 * self.limit)

    def appended(self, msgs: Sequence[Message]) -> None:
        """Count what ``msgs`` add (their text, and a hundred bytes each for the rest)."""
        self._count += sum(len(m.content) + len(m.tool_calls) + len(m.item_json) + 100
                           for m in msgs)


def _cursor_of(row: dict[str, Any]) -> str:
    raw = json.dumps([row["updated_at"], row["session_id"]]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _cursor_key(cursor: str) -> tuple[str, str]:
    """The (updated_at, session_id) a cursor stands for; a bad one is a ValidationError."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        updated, sid = json.loads(raw)
        if isinstance(updated, str) and isinstance(sid, str):
            return updated, sid
    except (ValueError, TypeError):
        pass
    raise ValidationError(f"cursor {cursor[:40]!r} is not one a listing returned; "
                          "pass the next_cursor of the previous page")

