"""Summarizers behind one interface: fold older messages into a running summary.

``ExtractiveSummarizer`` (``extractive.py``; the words and patterns it reads language with
are data in ``rules.py``) works offline with no model. ``ChatSummarizer`` (``chat.py``) asks
an OpenAI-compatible endpoint to update the summary with a structured template and falls
back to the extractive one on any failure (and for a cooldown after one), so compaction
never depends on the network.

Providers are registered by name in ``SUMMARIZERS``; ``provider(model, base_url)`` is the
name a configuration asks for, for summaries and for extracted facts alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from hermes_redis.context.summarizers.chat import (
    CHAT_SYSTEM,
    CHAT_TEMPLATE,
    ChatSummarizer,
    chat_completion,
    chat_prompt,
)
from hermes_redis.context.summarizers.extractive import (
    KINDS,
    SECTIONS,
    ExtractiveSummarizer,
    parse_summary,
)
from hermes_redis.core import config
from hermes_redis.core.models import Message

__all__ = [
    "CHAT_SYSTEM", "CHAT_TEMPLATE", "KINDS", "SECTIONS", "SUMMARIZERS", "ChatSummarizer",
    "ExtractiveSummarizer", "Summarizer", "SummarizerFactory", "chat_completion", "chat_prompt",
    "parse_summary", "provider",
]


class Summarizer(Protocol):
    name: str

    def summarize(self, previous: str, messages: Sequence[Message], max_tokens: int) -> str: ...

    def shrink(self, summary: str, max_tokens: int) -> str: ...


def provider(model: str, base_url: str | None) -> str:
    """The provider a configuration asks for, a key of ``SUMMARIZERS`` (and of the
    extractors' registry): "chat" for a model other than "default" with an endpoint to
    ask, else "offline"."""
    return "offline" if model == "default" or not base_url else "chat"


# (the model, the endpoint's settings, the offline summarizer) -> the summarizer
SummarizerFactory = Callable[[str, config.Summarizer, ExtractiveSummarizer], Summarizer]


def _offline(model: str, endpoint: config.Summarizer, offline: ExtractiveSummarizer) -> Summarizer:
    return offline


def _chat(model: str, endpoint: config.Summarizer, offline: ExtractiveSummarizer) -> Summarizer:
    if not endpoint.base_url:
        raise ValueError("the chat summarizer needs summarizer.base_url")
    return ChatSummarizer(model, endpoint.base_url, endpoint.api_key, endpoint.timeout, offline)


SUMMARIZERS: dict[str, SummarizerFactory] = {"offline": _offline, "chat": _chat}
