"""Adapters that let agent frameworks keep their conversations in hermes-redis, each an extra:
``openai_agents.HermesSession`` (``pip install 'hermes-redis[openai-agents]'``) and
``langchain.HermesChatMessageHistory`` (``pip install 'hermes-redis[langchain]'``).

Each framework object is stored whole in a message's ``item`` and read back exactly; the
message's role and content (a rendering of the item) are what context, search and
summaries see. A session that does not exist yet is created, with that id, on first write.

What the adapters hand the framework is the session's context at a budget (``Window``):
while the session fits, every stored message; past that, one system text (memories, the
opening, the summary, dated recalled excerpts) and the newest messages. Tokens are counted
as the context counts them: a message's ``content`` (the rendering of its item) and
``MESSAGE_OVERHEAD``. A message of another door (no item, or an item of another framework's
shape) is handed over as its text under its role."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hermes_redis.core.api import SessionAPI
from hermes_redis.core.config import Config
from hermes_redis.core.errors import NotFoundError, StateError, ValidationError
from hermes_redis.core.incoming import MAX_BATCH
from hermes_redis.core.models import (
    Context,
    Message,
    check_session_id,
    memories_text,
    recalled_text,
    summary_text,
)
from hermes_redis.core.tokens import MESSAGE_OVERHEAD, Tokenizer, get_tokenizer
from hermes_redis.session_memory import SessionMemory


class Store:
    """One session of ``memory`` as a framework sees it: items in, items out. Synchronous;
    the adapters run it in a thread for their async methods."""

    def __init__(self, session_id: str, memory: SessionAPI | None, user_id: str,
                 budget: int | None = None) -> None:
        """``memory``: a SessionMemory, or a HermesClient of a `hermes-redis serve`."""
        self.session_id = check_session_id(session_id)
        self.owned = memory is None  # made here: closed by close()
        self.memory: SessionAPI = memory if memory is not None else SessionMemory.from_config()
        self.user_id = user_id
        if budget is not None and (not isinstance(budget, int) or isinstance(budget, bool)
                                   or budget < 1):
            raise ValidationError(f"budget must be a positive number of tokens, not {budget!r}")
        self.budget = budget
        self.tokenizer: Tokenizer = (self.memory.tokenizer if isinstance(self.memory, SessionMemory)
                                     else get_tokenizer(Config().model.encoding))

    def context(self, query: str | None = None) -> Context | None:
        """The session's context at ``budget`` (None: the configured window less the reply
        reserve); None for a session not created yet."""
        try:
            return self.memory.context(self.session_id, self.budget, query=query)
        except NotFoundError:
            return None

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


def opening_text(opening: Sequence[Message]) -> str:
    """The opening turns as text, for a context handed over as one system message."""
    return "The conversation opened with:\n" + "\n".join(
        f"- {m.role}: {' '.join(m.content.split())}" for m in opening)


def context_text(ctx: Context) -> str:
    """Everything before the newest turns as one text: memories, opening, summary, recalled
    excerpts (with their dates), in that order; "" when there is none. The first three change
    only when the memories or the summary do, not on every append: a provider's prompt cache
    reuses the text up to the excerpts, which are chosen for each question."""
    blocks = []
    if ctx.memories:
        blocks.append(memories_text(ctx.memories))
    if ctx.opening:
        blocks.append(opening_text(ctx.opening))
    if ctx.summary:
        blocks.append(summary_text(ctx.summary))
    if ctx.recalled:
        blocks.append(recalled_text(ctx.recalled))
    return "\n\n".join(blocks)


def was_cut(m: Message, rendered: str) -> bool:
    """The stored or assembled ``content`` is a cut of what the item renders to (a tool result
    over its cap, a newest turn too big for the budget): the item as a whole would overrun."""
    return len(rendered) > len(m.content) + 16 and m.content != rendered


@dataclass(frozen=True)
class Window:
    """What an adapter hands its framework: ``system`` ("" for none) then ``newest``, each a
    stored message with its framework object, ``tokens`` of it all (within ``budget``).
    ``whole``: every message since the last clear, exactly as stored; ``last_seq``: the
    newest seq it holds."""

    system: str
    newest: list[tuple[Message, Any]]
    tokens: int
    budget: int
    whole: bool
    last_seq: int


def window(store: Store, convert: Callable[[Message], Any],
           links: Callable[[Any], tuple[set[str], set[str]]],
           query: str | None = None, upto_seq: int | None = None) -> Window | None:
    """The context of ``store`` as framework objects (``convert``), within its budget; None
    for a session not created yet. ``links`` gives an object's (call ids it makes, call ids
    it answers): a call and its answer are never split (an answer without its call is
    refused by the model APIs, a call without its answer too), so a half pair is left out.
    ``upto_seq``: only messages up to it (the turn a framework already holds apart)."""
    try:
        ctx = store.context(query)
    except StateError:  # archived or deleted: no context, its stored messages as they are
        stored = store.messages()
        return Window("", [(m, convert(m)) for m in stored],
                      sum(m.token_count + MESSAGE_OVERHEAD for m in stored),
                      store.budget or 0, True, stored[-1].seq if stored else 0)
    if ctx is None:
        return None
    messages = [m for m in ctx.messages if upto_seq is None or m.seq <= upto_seq]
    last = messages[-1].seq if messages else ctx.first_seq - 1
    if ctx.whole:
        newest = [(m, convert(m)) for m in messages]
        return Window("", newest, sum(m.token_count + MESSAGE_OVERHEAD for m in messages),
                      ctx.budget, True, last)
    system = context_text(ctx)
    fixed = store.tokenizer.count_message(system) if system else 0
    pairs = _paired([(m, convert(m)) for m in messages], links)
    cost = sum(m.token_count + MESSAGE_OVERHEAD for m, _ in pairs)
    while fixed + cost > ctx.budget and len(pairs) > 1:
        # one text in place of several system messages counts a little differently (the
        # opening's header): the oldest verbatim messages give way
        pairs = _paired(pairs[1:], links)
        cost = sum(m.token_count + MESSAGE_OVERHEAD for m, _ in pairs)
    return Window(system, pairs, fixed + cost, ctx.budget, False, last)


def _paired(pairs: list[tuple[Message, Any]],
            links: Callable[[Any], tuple[set[str], set[str]]]) -> list[tuple[Message, Any]]:
    """``pairs`` without a call whose answer is not among them nor an answer whose call is
    not (what the assembly's cuts can leave at the oldest end, or an unanswered call)."""
    linked = [(m, native, *links(native)) for m, native in pairs]
    while True:
        calls = set().union(*(made for *_, made, _ in linked))
        answers = set().union(*(answered for *_, answered in linked))
        kept = [row for row in linked if not (row[2] - answers or row[3] - calls)]
        if len(kept) == len(linked):
            return [(m, native) for m, native, *_ in kept]
        linked = kept
