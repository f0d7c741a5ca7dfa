"""``HermesRedisContextEngine``: Hermes Agent's context-engine slot over hermes-redis.

``compress()`` makes no LLM call: the summary is the worker's. It hands Hermes, as
OpenAI-format messages, its system prompt, one message with hermes-redis's context
(memories, the opening, the summary, the excerpts recalled for the newest question) and the
newest stored turns, then the turn in flight exactly as Hermes holds it: a tool call never
without its result, within ``threshold_percent`` of the window. It works with the memory
provider of the same process (installed together), which stores every turn first; while
hermes-redis is away it keeps the newest messages that fit."""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from hermes_redis.core.errors import HermesError
from hermes_redis.core.tokens import MESSAGE_OVERHEAD, Tokenizer, get_tokenizer
from hermes_redis.integrations import Store, window
from hermes_redis.integrations.hermes_agent import session as lineage
from hermes_redis.integrations.hermes_agent.provider import DRAIN_SECONDS, NAME, provider_for
from hermes_redis.integrations.hermes_agent.settings import api_for, load_settings
from hermes_redis.integrations.hermes_agent.turns import (
    CONTEXT_MARK,
    chat_of,
    conversation,
    is_context,
    links,
    turn_start,
)

try:  # inside Hermes: its base class, so its plugin loader takes us
    from agent.context_engine import ContextEngine as _Base  # type: ignore[import-not-found]
except ImportError:  # outside Hermes
    _Base = object

log = logging.getLogger("hermes_redis.hermes_agent")
CONTEXT_SHARE = 0.5  # of the threshold: what a compression leaves (the rest is for growth)


class HermesRedisContextEngine(_Base):  # type: ignore[misc, valid-type]
    """Compression by hermes-redis's budgeted context; deep-copyable (no connection is
    held: ``settings.api_for`` keeps this process's)."""

    threshold_percent = 0.5
    protect_first_n = 0
    protect_last_n = 1

    def __init__(self) -> None:
        self.last_prompt_tokens = 0
        self.last_completion_tokens = 0
        self.last_total_tokens = 0
        self.context_length = 0
        self.threshold_tokens = 0
        self.compression_count = 0
        self.hermes_id = ""
        self.home: str | None = None
        self.tokenizer: Tokenizer = get_tokenizer("o200k_base")
        self.fallbacks = 0  # compressions made without hermes-redis (it was away)

    @property
    def name(self) -> str:
        return NAME

    def __deepcopy__(self, memo: dict[int, Any]) -> HermesRedisContextEngine:
        clone = copy.copy(self)
        memo[id(self)] = clone
        return clone

    def is_available(self) -> bool:
        return True

    # -- what Hermes tells the engine ------------------------------------------------------
    def update_from_response(self, usage: Mapping[str, Any]) -> None:
        self.last_prompt_tokens = int(usage.get("prompt_tokens") or 0)
        self.last_completion_tokens = int(usage.get("completion_tokens") or 0)
        self.last_total_tokens = int(usage.get("total_tokens") or 0)

    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        tokens = self.last_prompt_tokens if prompt_tokens is None else prompt_tokens
        return bool(self.threshold_tokens) and tokens >= self.threshold_tokens

    def should_compress_preflight(self, messages: list[dict[str, Any]]) -> bool:
        """Before a request: the list as Hermes holds it would pass the threshold."""
        return bool(self.threshold_tokens) and self._cost(conversation(messages)) >= \
            self.threshold_tokens

    def update_model(self, model: str, context_length: int, base_url: str = "",
                     api_key: str = "", provider: str = "", api_mode: str = "") -> None:
        self.context_length = int(context_length)
        self.threshold_tokens = int(self.context_length * self.threshold_percent)

    def on_session_start(self, session_id: str, **kwargs: Any) -> None:
        self.hermes_id = session_id
        self.home = kwargs.get("hermes_home") or self.home

    def on_session_end(self, session_id: str, messages: list[dict[str, Any]]) -> None:
        return None

    def on_session_reset(self) -> None:
        self.last_prompt_tokens = self.last_completion_tokens = self.last_total_tokens = 0
        self.compression_count = 0

    def has_content_to_compress(self, messages: list[dict[str, Any]]) -> bool:
        convo = conversation(messages)
        return turn_start(convo) > 0

    def get_status(self) -> dict[str, Any]:
        last = max(self.last_prompt_tokens, 0)
        return {"last_prompt_tokens": last, "threshold_tokens": self.threshold_tokens,
                "context_length": self.context_length,
                "usage_percent": min(100, last / self.context_length * 100)
                if self.context_length else 0,
                "compression_count": self.compression_count, "engine": NAME,
                "fallbacks": self.fallbacks}

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        return []  # the provider's tools (search, recall, remember) serve both

    # -- compression -----------------------------------------------------------------------
    def compress(self, messages: list[dict[str, Any]], current_tokens: int | None = None,
                 focus_topic: str | None = None, force: bool = False,
                 memory_context: str = "") -> list[dict[str, Any]]:
        """Hermes' system prompt, hermes-redis's context for the newest question and the
        newest stored turns, then the turn in flight verbatim, within the budget."""
        head = [dict(m) for m in messages if isinstance(m, Mapping) and m.get("role") ==
                "system" and not is_context(m)][:1]
        convo = conversation(messages)
        start = turn_start(convo)
        inflight = convo[start:]
        budget = int((self.threshold_tokens or 64_000) * CONTEXT_SHARE) - \
            self._cost(head) - self._cost(inflight)
        query = " ".join(str(m.get("content") or "") for m in inflight
                         if m.get("role") == "user")[:2000] or focus_topic
        built = self._from_store(budget, query, inflight) if budget > 0 else None
        if built is None:
            self.fallbacks += 1
            provider = provider_for(self.hermes_id)
            if provider is not None:
                provider.compressed(None)
            built = self._newest(convo[:start], max(budget, 0))
        self.compression_count += 1
        self.last_prompt_tokens = -1  # Hermes' "compressed: wait for real usage"
        return head + built + inflight

    def _from_store(self, budget: int, query: str | None,
                    inflight: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        """The stored context as messages, or None while hermes-redis is away."""
        provider = provider_for(self.hermes_id)
        try:
            if provider is not None:
                if not provider.flush(DRAIN_SECONDS):
                    return None  # turns not stored yet: the store's context would lack them
                sid, user, api = provider.sid, provider.user_id, provider.api()
            else:
                settings = load_settings(self.home)
                sid, user = lineage.resolve(self.home, self.hermes_id, None), settings.user_id
                api = api_for(settings, "read")
            win = window(Store(sid, api, user, budget), chat_of, _links, query=query)
        except (HermesError, OSError) as err:
            if provider is not None:
                provider.outage.down(err, provider.settings.where())
            log.warning("hermes-redis: compression without hermes-redis (%s): the newest "
                        "messages that fit are kept", " ".join(str(err).split())[:200])
            return None
        if win is None:
            return None
        out: list[dict[str, Any]] = []
        if win.system:
            out.append({"role": "user", "content": f"{CONTEXT_MARK}\n{win.system}"})
        held = {_same(m) for m in inflight}  # a finished turn in flight is stored already
        out.extend(native for _, native in win.newest if _same(native) not in held)
        if provider is not None:
            provider.compressed(win.newest[0][0].seq if win.newest else win.last_seq + 1)
        return out

    def _newest(self, older: list[dict[str, Any]], budget: int) -> list[dict[str, Any]]:
        """The newest of ``older`` that fit ``budget``, a call never apart from its result."""
        kept: list[dict[str, Any]] = []
        used = 0
        for m in reversed(older):
            cost = self._cost([m])
            if used + cost > budget:
                break
            kept.insert(0, m)
            used += cost
        while kept and (kept[0].get("role") == "tool" or (kept[0].get("role") == "assistant"
                        and kept[0].get("tool_calls"))):
            kept.pop(0)  # a result whose call went, or a call cut from its results
        return kept

    def _cost(self, messages: Sequence[Mapping[str, Any]]) -> int:
        total = 0
        for m in messages:
            content = m.get("content")
            text = content if isinstance(content, str) else str(content or "")
            total += self.tokenizer.count(text) + MESSAGE_OVERHEAD
            if m.get("tool_calls"):
                total += self.tokenizer.count(str(m["tool_calls"]))
        return total


def _same(m: Mapping[str, Any]) -> tuple[str, str, str, str]:
    """What makes two messages one: role, text, the call answered, the calls made."""
    return (str(m.get("role")), str(m.get("content")), str(m.get("tool_call_id")),
            json.dumps(m.get("tool_calls"), sort_keys=True, default=str))


def _links(native: Any) -> tuple[set[str], set[str]]:
    return links(native) if isinstance(native, Mapping) else (set(), set())


def register(ctx: Any) -> None:
    """Hermes' plugin entry: ``ctx.register_context_engine``."""
    ctx.register_context_engine(HermesRedisContextEngine())

