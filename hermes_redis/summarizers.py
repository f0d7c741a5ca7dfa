"""Summarizers behind one interface: fold older messages into a running summary.

``ExtractiveSummarizer`` works offline with no model: it keeps the sentences that carry
decisions, numbers, names, file paths and open questions, grouped under headings.
``ChatSummarizer`` asks an OpenAI-compatible endpoint and falls back to the extractive
one on any failure, so compaction never depends on the network.
"""

from __future__ import annotations

import json
import logging
import re
import urllib.request
from collections.abc import Sequence
from typing import Protocol

from hermes_redis.models import Message
from hermes_redis.tokens import Tokenizer

log = logging.getLogger(__name__)

SECTIONS = ("Discussed", "Decisions", "Facts", "Files", "Open items")
_SENTENCE = re.compile(r"[^.!?。！？\n]+[.!?。！？]?")
_PATH = re.compile(
    r"(?:[\w.-]+/)+[\w-]+(?:\.[\w-]+)*|\b[\w-]+\.(?:py|js|ts|tsx|md|ya?ml|json|sql|toml|go|rs|sh|txt|cfg|ini)\b"
)
_DECISION = re.compile(
    r"\b(decid\w*|decision|agreed?|chose|choose|going with|switch(?:ed)? to|we(?:'ll| will) use|"
    r"(?:we|let's|let us|i'll|we'll|will|should|to|and|then|just)\s+use|prefer\w*|must|instead of|"
    r"not use|don't use|settled)\b|^use\b"
    r"|决定|采用|使用|改用|不用|选择|确定|统一",
    re.IGNORECASE,
)
_OPEN = re.compile(r"\?|？|\b(todo|open question|later|next step|pending|tbd)\b|待定|待办|之后再", re.I)
_NUMBER = re.compile(r"\d")
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][A-Za-z0-9]+(?:[A-Z][a-z0-9]+)*\b")
MAX_SENTENCE = 180


class Summarizer(Protocol):
    name: str

    def summarize(self, previous: str, messages: Sequence[Message], max_tokens: int) -> str: ...


class ExtractiveSummarizer:
    name = "extractive"

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer

    def summarize(self, previous: str, messages: Sequence[Message], max_tokens: int) -> str:
        sections = parse_summary(previous)
        for m in messages:
            if m.role == "user" and m.content.strip():
                _add(sections["Discussed"], _topic(m.content))
            for path in _PATH.findall(m.content):
                _add(sections["Files"], path)
            if m.role == "tool":
                continue
            for sentence in _sentences(m.content):
                section = _classify(sentence)
                if section:
                    _add(sections[section], sentence)
        return self._fit(sections, max_tokens)

    def _fit(self, sections: dict[str, list[str]], max_tokens: int) -> str:
        """Drop the least useful lines (oldest topics first, then oldest facts) to fit."""
        text = render_summary(sections)
        drop_order = ("Discussed", "Open items", "Files", "Facts", "Decisions")
        while self.tokenizer.count(text) > max_tokens:
            victim = next((s for s in drop_order if len(sections[s]) > 1), None)
            victim = victim or next((s for s in drop_order if sections[s]), None)
            if victim is None:
                return self.tokenizer.cap(text, max_tokens, "the archive")
            sections[victim].pop(0)
            text = render_summary(sections)
        return text


class ChatSummarizer:
    """An OpenAI-compatible chat-completions endpoint, with the extractive one as fallback."""

    def __init__(self, model: str, base_url: str, api_key: str | None, timeout: float,
                 fallback: ExtractiveSummarizer) -> None:
        self.name = f"chat:{model}"
        self.model, self.base_url, self.api_key = model, base_url.rstrip("/"), api_key
        self.timeout, self.fallback = timeout, fallback

    def summarize(self, previous: str, messages: Sequence[Message], max_tokens: int) -> str:
        try:
            text = self._ask(previous, messages, max_tokens)
        except Exception as err:  # any failure of the remote model falls back, never raises
            log.warning("summarizer %s failed (%s); using the offline summarizer", self.name, err)
            return self.fallback.summarize(previous, messages, max_tokens)
        return self.fallback.tokenizer.cap(text.strip(), max_tokens, "the archive")

    def _ask(self, previous: str, messages: Sequence[Message], max_tokens: int) -> str:
        transcript = "\n".join(f"[{m.seq}] {m.role}: {m.content}" for m in messages)
        prompt = (
            "Update the running summary of a conversation. Keep every decision, name, number, "
            "file path and open question; drop chit-chat. Use the headings "
            f"{', '.join(SECTIONS)}.\n\nPrevious summary:\n{previous or '(none)'}\n\n"
            f"New messages:\n{transcript}"
        )
        body = json.dumps({"model": self.model, "max_tokens": max_tokens,
                           "messages": [{"role": "user", "content": prompt}]}).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(f"{self.base_url}/chat/completions", body, headers)
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            data = json.load(resp)
        return str(data["choices"][0]["message"]["content"])


def parse_summary(text: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {s: [] for s in SECTIONS}
    current = "Facts"
    for line in text.splitlines():
        line = line.strip()
        if line.endswith(":") and line[:-1] in sections:
            current = line[:-1]
        elif line.startswith("- "):
            sections[current].append(line[2:])
        elif line:
            sections[current].append(line)
    return sections


def render_summary(sections: dict[str, list[str]]) -> str:
    parts = []
    for name in SECTIONS:
        if sections[name]:
            parts.append(f"{name}:\n" + "\n".join(f"- {item}" for item in sections[name]))
    return "\n".join(parts)


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.findall(text) if len(s.strip()) > 3]


def _classify(sentence: str) -> str | None:
    if _OPEN.search(sentence):
        return "Open items"
    if _DECISION.search(sentence):
        return "Decisions"
    if _NUMBER.search(sentence) or _NAME.search(sentence):
        return "Facts"
    return None


def _topic(text: str) -> str:
    first = next(iter(_sentences(text)), text.strip())
    return _shorten(first, 80)


def _shorten(text: str, limit: int = MAX_SENTENCE) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _add(items: list[str], text: str) -> None:
    text = _shorten(text)
    if text and text not in items:
        items.append(text)
