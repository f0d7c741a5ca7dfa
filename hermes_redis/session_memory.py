"""``SessionMemory``: the API agent processes import. It validates every argument, then
delegates: writes that touch both tiers to the maintainer (``tiers``), memories to the memory
book, the context to ``context.assembly``. It never touches Redis or SQLite directly."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hermes_redis.context.assembly import SummaryFolds, build_context
from hermes_redis.context.history import SessionHistory
from hermes_redis.context.summarizers import SUMMARIZERS, ExtractiveSummarizer, provider
from hermes_redis.core import config as config_mod
from hermes_redis.core import embeddings
from hermes_redis.core.config import Config
from hermes_redis.core.errors import ConfigError, HermesError, NotFoundError, StateError, ValidationError
from hermes_redis.core.incoming import check_batch, check_messages
from hermes_redis.core.models import (
    STATUSES,
    CompactResult,
    Context,
    Memory,
    Message,
    SearchHit,
    SessionInfo,
    SessionMeta,
    SessionPage,
    check_content,
    check_session_id,
    check_text,
    new_session_id,
)
from hermes_redis.core.text import check_query
from hermes_redis.core.tokens import Tokenizer, get_tokenizer
from hermes_redis.memory.book import MemoryBook
from hermes_redis.memory.extraction import EXTRACTORS
from hermes_redis.store.archive import ArchiveStore
from hermes_redis.store.hot import HotStore
from hermes_redis.store.open import open_archive, open_hot, open_queue, open_vectors
from hermes_redis.tiers.maintainer import Maintainer

log = logging.getLogger(__name__)


class SessionMemory:
    def __init__(self, config: Config | None = None, *, hot: HotStore | None = None,
                 archive: ArchiveStore | None = None) -> None:
        self.config = c = config or Config()
        self.tokenizer: Tokenizer = get_tokenizer(c.model.encoding)
        self.hot = hot or open_hot(c)
        self.cold = archive or open_archive(c)
        self.offline_summarizer = ExtractiveSummarizer(self.tokenizer)
        self.folds = SummaryFolds(self.offline_summarizer)  # read time: offline, incremental
        # one provider for summaries and extracted facts alike: "offline" or "chat"
        model, endpoint = c.session.compression.summary_model, c.summarizer
        kind = provider(model, endpoint.base_url)
        vectors = open_vectors(c, self.cold)  # issue 31: None unless embeddings are on
        self.book = MemoryBook(self.cold, self.hot, self.tokenizer,
                               c.memory.persistent.max_extracted, EXTRACTORS[kind](model, endpoint),
                               vectors)
        self.maintainer = Maintainer(c, self.hot, self.cold,
                                     SUMMARIZERS[kind](model, endpoint, self.offline_summarizer),
                                     self.tokenizer, self.book, vectors)
        if self.hot.restarted():
            self.maintainer.catch_up()
        self.pressure, self.owners = self.maintainer.pressure, self.maintainer.owners
        self.queue = open_queue(c, self.hot)  # None: no workers, maintained inline
        self._enqueue: Callable[[str], Any] = (
            self.queue.enqueue_flush if self.queue is not None else self.maintainer.maintain)

    @classmethod
    def from_config(cls, path: str | os.PathLike[str] | None = None) -> SessionMemory:
        """A SessionMemory from ``path`` (else ``$HERMES_CONFIG``, else ``./config.yml`` if
        present, else the defaults)."""
        return cls(config_mod.load(path))

    def close(self) -> None:
        """Release the Redis connections and the archive file; the object is unusable after."""
        self.hot.close()
        if self.queue is not None:
            self.queue.close()
        self.cold.close()

    def __enter__(self) -> SessionMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- sessions ----------------------------------------------------------------------------
    def create_session(self, user_id: str = "default", title: str = "",
                       session_id: str | None = None) -> str:
        """A new active session of ``user_id``; returns its id (``session_id``: your own id,
        a ValidationError if any tier knows it). It is listed and found by prefix at once."""
        sid = check_session_id(session_id) if session_id is not None else new_session_id()
        user_id = _check_user(user_id)
        title = check_text(title, "title", self.config.limits.max_title_chars)
        self.maintainer.create(sid, SessionMeta.new(user_id, title, time.time()),
                               own_id=session_id is not None)
        if session_id is not None:  # a reused id: the deleted session's user was cached
            self.owners.drop(sid)
        return sid

    def continue_session(self, session_id: str) -> str:
        """A new session of the same user whose ``parent_session_id`` is ``session_id``; its
        first message (system) carries the parent's summary and where it left off. Returns
        its id. An unknown session is a NotFoundError, a deleted one a StateError."""
        new_sid = new_session_id()
        self.maintainer.continue_session(check_session_id(session_id), new_sid)
        return new_sid

    def fork(self, session_id: str, at_seq: int | None = None) -> str:
        """A new session of the same user holding copies (new message_ids, same seqs) of the
        history up to ``at_seq`` (None: all of it); later writes and forgets in either never
        touch the other. A seq outside 1..last_seq is a ValidationError; nothing is written."""
        if at_seq is not None and (not isinstance(at_seq, int) or isinstance(at_seq, bool)):
            raise ValidationError(f"at_seq must be a seq (a positive integer), not {at_seq!r}")
        new_sid = new_session_id()
        self.maintainer.fork(check_session_id(session_id), new_sid, at_seq)
        return new_sid

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
        check_batch(messages)
        return self._store(sid, messages, one=False)

    def _store(self, sid: str, items: Sequence[Mapping[str, Any]], one: bool) -> list[Message]:
        checked = check_messages(items, self.config.limits.max_content_bytes, one)
        has_ids = any(c["message_id"] is not None for c in checked)
        stored, enqueue = self.maintainer.append(sid, checked, has_ids, self.owners.known(sid))
        if enqueue:
            try:
                self._enqueue(sid)
            except HermesError as err:  # the append is safe; the sweep re-enqueues later
                log.warning("%s", err)
        return stored

    def maintain(self, session_id: str) -> tuple[int, int]:
        """Archive the session's backlog, then compact it if the hot tier is over its caps
        (what a worker's flush job does). Returns (messages archived, messages trimmed)."""
        return self.maintainer.maintain(check_session_id(session_id))

    def resolve(self, prefix: str) -> str:
        """A full session id from a unique prefix (as typed on the command line)."""
        return self.maintainer.read.resolve(check_session_id(prefix))

    # --- reading -----------------------------------------------------------------------------
    def context(self, session_id: str, budget: int | None = None, *,
                query: str | None = None, touch: bool = True) -> Context:
        """What the model sees (invariant 6). ``query`` pulls the older messages most
        relevant to it into ``recalled`` (default: the newest user message; "" for none).
        ``touch=False`` reads without renewing the TTL (``info`` observes, it is not activity)."""
        sid = check_session_id(session_id)
        budget = self._budget(budget)
        if query is not None:
            query = check_query(query)  # bounded cost (issue 35)
        ttl = self.config.session.ttl if touch else None
        asked = self.owners.known(sid)
        read, meta = self.maintainer.loader.read(sid, ttl, budget, asked)
        if meta.status != "active":
            raise StateError(f"session {sid} is {meta.status}; restore it to load its context")
        user = meta.user_id
        self.owners.note(sid, user)
        if asked == user and read.memories is not None:
            memories = read.memories
        else:
            memories = self.book.current(user, read.memories_gen if asked == user else None)
        history = SessionHistory(sid, self.maintainer.read, self.tokenizer,
                                 self.config.session.tool_result_max_tokens)
        return build_context(self.hot, sid, meta, memories, budget,
                             self.config.model.context_window, self.tokenizer, history=history,
                             compression=self.config.session.compression,
                             folds=self.folds, query=query,
                             first_page=read.first if read.meta is not None else None,
                             extracts=self.config.memory.persistent.auto_extract)  # issue 30

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
            newest = self.maintainer.read.newest(sid, last)
            if not newest:
                self.user_of(sid)  # raises for an unknown session
            return newest
        if not isinstance(after_seq, int) or isinstance(after_seq, bool) or not 0 <= after_seq < 2**63:
            raise ValidationError(f"after_seq must be 0 or a positive seq, not {after_seq!r}")
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
            raise ValidationError(f"limit must be a positive number of messages, not {limit!r}")
        history = self.maintainer.history(sid, after_seq=after_seq, limit=limit)
        if not history and self.cold.session(sid) is None:
            self.maintainer.load(sid)  # raises for an unknown session
        return history

    def user_of(self, session_id: str) -> str:
        """The user a session belongs to (it never changes, so it is cached); NotFoundError
        when no tier knows the session. Cheaper than ``info``: for access checks."""
        return self.owners.of(check_session_id(session_id))

    def ping(self) -> None:
        """Raise BackendUnavailableError unless the hot tier and the archive both answer."""
        self.hot.ping()
        self.cold.stats("")

    def backlog(self) -> tuple[int, int, float | None]:
        """(sessions holding unarchived messages, those messages, age in seconds of the oldest
        one or None). The age comes from the oldest backlog session's first unarchived
        message id (ids are time-ordered; a caller-chosen id can skew it)."""
        return self.maintainer.status.backlog()

    def _first_unarchived(self, sid: str, meta: SessionMeta) -> Message | None:
        return self.maintainer.status.first_unarchived(sid, meta)

    def failed_jobs(self) -> int:
        """Flush jobs in RQ's failed registry (0 without workers: the memory backend)."""
        return self.queue.failed_count() if self.queue is not None else 0

    def info(self, session_id: str) -> SessionInfo:
        """The session's counters, status and tiers, from the hot tier when it is loaded, else
        from its archive row; it neither loads the session nor renews its TTL."""
        return self.maintainer.status.info(check_session_id(session_id))

    def turns(self, session_id: str) -> tuple[int, int]:
        """(turns in the stored history, turns its summary covers), without reading the
        history: a turn starts at a user message."""
        return self.maintainer.read.turns(check_session_id(session_id))

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
        infos, nxt = self.maintainer.read.sessions(user_id, status, limit, cursor)
        return SessionPage(infos, next_cursor=nxt)

    def short_ids(self, sids: Sequence[str], minimum: int = 8) -> dict[str, str]:
        """The shortest unique prefix (at least ``minimum`` characters) of each of ``sids``."""
        from hermes_redis.core.models import short_ids

        return short_ids(list(sids), sorted(set(sids) | self.cold.neighbours(sids)), minimum)

    def search(self, query: str, user_id: str | None = None, limit: int = 20) -> list[SearchHit]:
        """Archived messages matching every word of ``query`` (prefixes, CJK substrings), best
        first, then not-yet-archived ones matched the same way; ``user_id`` keeps to one user."""
        if not isinstance(query, str) or not query.strip():
            raise ValidationError("search query is empty: give at least one word")
        check_text(query, "search query", len(query))
        return self.maintainer.search(check_query(query, "search query"), user_id, limit)

    # --- changing ----------------------------------------------------------------------------
    def embed_archived(self, session_id: str) -> int:
        """Give every archived message of the session a vector of the configured model (an
        archive from before embeddings, or a model change); returns how many were stored."""
        if self.maintainer.read.vectors is None:
            raise ConfigError(embeddings.OFF)
        return self.maintainer.read.vectors.backfill(check_session_id(session_id))

    def flush(self, session_id: str) -> int:
        """Archive the session's backlog now instead of waiting for a worker."""
        return self.maintainer.flush(check_session_id(session_id))

    def compact(self, session_id: str) -> CompactResult | None:
        """Archive the backlog, then summarize older turns into the summary now, even under the
        caps; None when there is nothing to fold. The archive keeps every message."""
        sid = check_session_id(session_id)
        self.maintainer.load(sid)
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
        return self.maintainer.forget_last(check_session_id(session_id), n)

    def forget_keyword(self, session_id: str, keyword: str) -> int:
        """Forget every message containing ``keyword`` (case-insensitive), as ``forget_last``."""
        if not isinstance(keyword, str) or not keyword.strip():
            raise ValidationError("keyword is empty: give the word to forget")
        sid = check_session_id(session_id)
        return self.maintainer.forget_matching(sid, keyword.strip().lower())

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
        self.maintainer.clear(check_session_id(session_id), history)

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
        return self.book.remember(user_id, text.strip(), session_id)

    def memories(self, user_id: str, query: str | None = None,
                 superseded: bool = False) -> list[Memory]:
        """The user's current persistent memories, oldest first (``superseded``: with the
        ones newer memories replaced); with ``query``, only those sharing a distinctive word
        with it (the recall's terms: stems, CJK pairs), best match first."""
        user_id = _check_user(user_id)
        if query is not None:
            check_text(query, "query", len(query))
            query = check_query(query)
        return self.book.memories(user_id, query, superseded)

    def forget_memory(self, memory_id: str, user_id: str | None = None) -> None:
        """Delete one persistent memory (of ``user_id`` when given: another user's memory
        answers NotFoundError like a missing one); what it superseded is current again, and
        the user's cached memories are dropped."""
        if not isinstance(memory_id, str) or not memory_id or len(memory_id) > 128:
            raise ValidationError("memory_id must be 1-128 characters: the id remember() returned")
        self.book.forget(memory_id, user_id)


def _check_user(user_id: object) -> str:
    if not isinstance(user_id, str) or not user_id or len(user_id) > 128 or not user_id.isprintable():
        raise ValidationError("user_id must be 1-128 printable characters")
    return user_id


from hermes_redis.core.api import SessionAPI  # noqa: E402  issue 29: the API contract

_conforms: type[SessionAPI] = SessionMemory  # issue 29: mypy checks the library against it
