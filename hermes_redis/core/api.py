"""The session API every face builds on: ``SessionAPI``, the one contract ``SessionMemory``
(in-process) and ``HermesClient`` (over HTTP) both satisfy, checked by mypy in each module.

Code typed with ``SessionAPI`` (the CLI's state, the framework adapters) runs unchanged on
either. Both take the same arguments, return the same wire types (``Message``,
``SessionInfo``, ``SessionPage``, ``Context``, ``CompactResult``, ``Memory``, ``SearchHit``)
and raise the same ``hermes_redis.core.errors`` classes for the same mistakes;
tests/contract runs one behaviour suite against both.

Where the client deliberately differs (its caller is an API key, not a process):
``create_session``, ``remember`` and ``memories`` let ``user_id`` be left out (None), which
means the key's own user ("default" without keys). The in-process library has no key and
no such default for a memory's user.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, Self

from hermes_redis.core.models import (
    CompactResult,
    Context,
    Memory,
    Message,
    SearchHit,
    SessionInfo,
    SessionPage,
)


class SessionAPI(Protocol):
    """Sessions, their messages and context, and a user's persistent memories. Every method
    validates before it changes anything: bad input is a ValidationError and nothing is
    written; an unknown session is a NotFoundError; a status that forbids the operation
    (archived, deleted) is a StateError."""

    def close(self) -> None:
        """Release connections; the object is unusable after."""

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...

    # --- sessions ----------------------------------------------------------------------------
    def create_session(self, user_id: str = "default", title: str = "",
                       session_id: str | None = None) -> str:
        """A new active session; its id (``session_id``: your own, a ValidationError if taken)."""
        ...

    def continue_session(self, session_id: str) -> str:
        """A new session of the same user, ``parent_session_id`` set, whose first message
        (system) carries the parent's summary and where it left off; its id."""
        ...

    def fork(self, session_id: str, at_seq: int | None = None) -> str:
        """A new session of the same user holding copies of the history up to ``at_seq``
        (None: all); writes and forgets in either never touch the other. Its id."""
        ...

    def info(self, session_id: str) -> SessionInfo:
        """The session's counters, status and tier; it does not renew the TTL."""
        ...

    def list_sessions(self, user_id: str | None = None, status: str | None = "active",
                      limit: int | None = 50, cursor: str | None = None) -> SessionPage:
        """One page, newest activity first; ``next_cursor`` continues it (None: the last)."""
        ...

    def short_ids(self, sids: Sequence[str], minimum: int = 8) -> dict[str, str]:
        """The shortest unique prefix (at least ``minimum`` characters) of each of ``sids``."""
        ...

    def resolve(self, prefix: str) -> str:
        """The full id of the one session ``prefix`` starts (NotFoundError, AmbiguousIdError)."""
        ...

    def archive(self, session_id: str) -> None:
        """Keep everything but stop loading the session into context."""

    def restore(self, session_id: str) -> None:
        """Make an archived session active again (an active one stays active)."""

    def delete(self, session_id: str, purge: bool = False) -> None:
        """Mark deleted; ``purge`` also removes its archived rows."""

    # --- messages ----------------------------------------------------------------------------
    def append(self, session_id: str, role: str, content: str = "", tool_calls: Any = None,
               file_refs: Any = None, memory_refs: Any = None,
               message_id: str | None = None, created_at: float | None = None,
               item: Any = None) -> Message:
        """Store one message with the next seq; the same ``message_id`` again returns it."""
        ...

    def append_many(self, session_id: str, messages: Sequence[Mapping[str, Any]]) -> list[Message]:
        """Store a turn atomically with consecutive seqs; one bad item stores nothing."""
        ...

    def messages(self, session_id: str, after_seq: int = 0, limit: int | None = None, *,
                 last: int | None = None) -> list[Message]:
        """The history in seq order: the first ``limit`` after ``after_seq``, or the newest
        ``last`` (``last`` with either of the others is a ValidationError)."""
        ...

    def pop(self, session_id: str) -> Message | None:
        """Remove and return the newest message (None: there is none)."""
        ...

    def context(self, session_id: str, budget: int | None = None, *,
                query: str | None = None, touch: bool = True) -> Context:
        """What the model sees, within ``budget`` tokens (StateError unless active)."""
        ...

    def resume(self, sid: str | None = None, user_id: str | None = None, *,
               budget: int | None = None, query: str | None = None) -> Context:
        """The context of ``sid``, or of the user's most recently updated active session."""
        ...

    def forget_last(self, session_id: str, n: int) -> int:
        """Forget the last ``n`` turns for good; how many messages went."""
        ...

    def forget_keyword(self, session_id: str, keyword: str) -> int:
        """Forget every message containing ``keyword`` (any case); how many went."""
        ...

    def clear(self, session_id: str, history: bool = False) -> None:
        """Empty the context; ``history`` also forgets every message. Memories stay."""

    def compact(self, session_id: str) -> CompactResult | None:
        """Fold older turns into the summary now; None when there is nothing to fold."""
        ...

    # --- memories and search -----------------------------------------------------------------
    def remember(self, user_id: str, text: str, session_id: str | None = None) -> str:
        """Store a persistent memory of the user; its id (a near-duplicate's id if one exists)."""
        ...

    def memories(self, user_id: str, query: str | None = None,
                 superseded: bool = False) -> list[Memory]:
        """The user's current memories, oldest first; with ``query`` the relevant ones, best first."""
        ...

    def forget_memory(self, memory_id: str, user_id: str | None = None) -> None:
        """Delete one memory (of ``user_id`` when given: another's is a NotFoundError)."""

    def search(self, query: str, user_id: str | None = None, limit: int = 20) -> list[SearchHit]:
        """Messages matching every word of ``query``, best first."""
        ...
