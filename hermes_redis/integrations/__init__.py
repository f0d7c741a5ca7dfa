"""Adapters that let agent frameworks keep their conversations in hermes-redis, each an extra:
``openai_agents.HermesSession`` (``pip install 'hermes-redis[openai-agents]'``) and
``langchain.HermesChatMessageHistory`` (``pip install 'hermes-redis[langchain]'``).

Each framework object is stored whole in a message's ``item`` and read back exactly; the
message's role and content (a rendering of the item) are what context, search and
summaries see. A session that does not exist yet is created, with that id, on first write."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from hermes_redis.client import HermesClient
from hermes_redis.errors import NotFoundError, StateError, ValidationError
from hermes_redis.models import Message, check_session_id
from hermes_redis.session_memory import MAX_BATCH, SessionMemory

Memory = SessionMemory | HermesClient  # in-process, or a `hermes-redis serve` over HTTP


class Store:
    """One session of ``memory`` as a framework sees it: items in, items out. Synchronous;
    the adapters run it in a thread for their async methods."""

    def __init__(self, session_id: str, memory: Memory | None, user_id: str) -> None:
        self.session_id = check_session_id(session_id)
        self.owned = memory is None  # made here: closed by close()
        self.memory: Memory = memory if memory is not None else SessionMemory.from_config()
        self.user_id = user_id

    def messages(self, last: int | None = None) -> list[Message]:
        """The whole stored history in order (``last``: its newest ``last`` messages); [] for
        a session not created yet."""
        try:
            if last is not None:
                return self.memory.messages(self.session_id, last=last)
            return self.memory.messages(self.session_id)
        except NotFoundError:
            return []

    def add(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Append ``rows`` (append_many's items) in order, creating the session on first write;
        each batch of up to MAX_BATCH is one atomic step. A deleted and purged session starts
        over with the same id; a deleted one whose archive is kept is an error saying so."""
        for i in range(0, len(rows), MAX_BATCH):
            batch = rows[i:i + MAX_BATCH]
            try:
                self.memory.append_many(self.session_id, batch)
            except NotFoundError:
                self.create()
                self.memory.append_many(self.session_id, batch)
            except StateError:
                if self.memory.info(self.session_id).status != "deleted":
                    raise
                self.memory.create_session(user_id=self.user_id, session_id=self.session_id)
                self.memory.append_many(self.session_id, batch)

    def create(self) -> None:
        try:
            self.memory.create_session(user_id=self.user_id, session_id=self.session_id)
        except ValidationError:  # another process created it meanwhile: fine
            self.memory.info(self.session_id)

    def pop(self) -> Message | None:
        try:
            return self.memory.pop(self.session_id)
        except NotFoundError:
            return None

    def clear(self) -> None:
        """Forget every message (persistent memories stay); nothing to do for a new session."""
        with contextlib.suppress(NotFoundError):
            self.memory.clear(self.session_id, history=True)

    def close(self) -> None:
        if self.owned:
            self.memory.close()
