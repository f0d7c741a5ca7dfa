"""Summarizers behind one interface: fold older messages into a running summary.

``ExtractiveSummarizer`` works offline with no model: it keeps the sentences that carry
decisions, numbers, names, file paths and open questions, grouped under headings.
``ChatSummarizer`` asks an OpenAI-compatible endpoint and falls back to the extractive
one on any failure, so compaction never depends on the network.
"""

from __future__ import annotations

import functools
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
# A sentence ends at . ! ? followed by a space (so "Next.js 14" and "v1.2" stay whole) or at
# CJK end punctuation; fenced code is not prose and is left out.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])")
_FENCE = re.compile(r"```.*?(?:```|$)", re.S)
_PATH = re.compile(  # starts only at a word's start: one long token costs O(n), not O(n²)
    r"(?<![\w.-])(?:[\w.-]+/)+[\w-]+(?:\.[\w-]+)*|\b[\w-]+\.(?:py|js|ts|tsx|md|ya?ml|json|sql|toml|go|rs|sh|txt|cfg|ini)\b"
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
_WORD = re.compile(r"[^\W_][\w'’+-]*")
_EXPLICIT_OPEN = re.compile(r"\b(todo|open question|later|next step|pending|tbd)\b|待定|待办|之后再", re.I)
# Capitalized only because they start a sentence: not names. ("Priya is on call" has a name.)
_COMMON_WORDS = """
a an the this that these those there here it its i i'm i'd i'll i've we we're we'll we've you you're
you'll he she they them our your my me us his her their what which who whom whose when where why how
and but or so if then than because since while though although also just only even still yet now
once after before again maybe perhaps probably actually basically really well ok okay yes yeah yep
no nope not sure thanks thank please hi hello hey sorry great good nice cool fine perfect awesome
right wait hmm oh ah let let's lets got sounds looks seems makes make take keep add use set try run
check see show tell give get put move start stop go do does did done is are was were be been being
have has had can could should would will shall may might must all any some most many much more
less every each both either neither none nothing something everything anything another other such
same first next last then in on at for from to of by with without about into over under between
as like unlike per via note remember consider instead otherwise besides finally overall fact
"""
_COMMON = frozenset(_COMMON_WORDS.split())
MAX_SENTENCE = 180


class Summarizer(Protocol):
    name: str

    def summarize(self, previous: str, messages: Sequence[Message], max_tokens: int) -> str: ...

    def shrink(self, summary: str, max_tokens: int) -> str: ...


class ExtractiveSummarizer:
    name = "extractive"

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer

    def summarize(self, previous: str, messages: Sequence[Message], max_tokens: int) -> str:
        sections = parse_summary(previous)
        for m in messages:
            if m.role == "user" and m.content.strip():
                _add(sections["Discussed"], _topic(m.content))
            for path in _PATH.findall(_FENCE.sub(" ", m.content)):
                _add(sections["Files"], path)
            if m.role == "tool":
                continue
            for sentence in _sentences(m.content):
                section = _classify(sentence)
                if section:
                    _add(sections[section], sentence)
        return self._fit(sections, max_tokens)

    def shrink(self, summary: str, max_tokens: int) -> str:
        """``summary`` within ``max_tokens``: its least informative lines go first."""
        if self.tokenizer.count(summary) <= max_tokens:
            return summary
        return self._fit(parse_summary(summary), max_tokens)

    def _fit(self, sections: dict[str, list[str]], max_tokens: int) -> str:
        """Drop the least informative lines (see ``_weight``; oldest first among equals) until
        the summary fits; no section loses its last line while another has more than one."""
        text = render_summary(sections)
        total = self.tokenizer.count(text)
        while total > max_tokens:
            pool = [s for s in SECTIONS if len(sections[s]) > 1] or [s for s in SECTIONS if sections[s]]
            if not pool:
                return self.tokenizer.cap(text, max_tokens, "the archive")
            section, i = min(((s, i) for s in pool for i in range(len(sections[s]))),
                             key=lambda si: (_weight(si[0], sections[si[0]][si[1]]), si[1]))
            total -= self.tokenizer.count(f"- {sections[section].pop(i)}\n")
            if total <= max_tokens:  # the estimate says it fits: count for real
                text = render_summary(sections)
                total = self.tokenizer.count(text)
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

    def shrink(self, summary: str, max_tokens: int) -> str:
        return self.fallback.shrink(summary, max_tokens)

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
    prose = _FENCE.sub("\n", text)
    return [s for line in prose.splitlines() for s in map(str.strip, _SENTENCE_END.split(line))
            if len(s) > 3]


def _classify(sentence: str) -> str | None:
    if _OPEN.search(sentence):
        return "Open items"
    if _DECISION.search(sentence):
        return "Decisions"
    if _NUMBER.search(sentence) or _NAME.search(sentence) or _names(sentence)[0]:
        return "Facts"
    return None


def _names(sentence: str) -> tuple[int, int]:
    """(proper names, acronyms): capitalized words that are not common words, and all-caps ones."""
    proper = acronyms = 0
    for word in _WORD.findall(sentence):
        if len(word) < 2 or not word[0].isupper() or word.lower() in _COMMON:
            continue
        if word.isupper():
            acronyms += 1
        else:
            proper += 1
    return proper, acronyms


_BASE_WEIGHT = {"Discussed": 0.0, "Open items": 1.0, "Files": 2.0, "Facts": 2.0, "Decisions": 3.0}


@functools.lru_cache(maxsize=4096)
def _weight(section: str, line: str) -> float:
    """How much a summary line is worth keeping: its section, plus one for each kind of
    specific content it carries (a number, a name, a path, an explicit open item)."""
    weight = _BASE_WEIGHT.get(section, 1.0)
    if section == "Discussed":
        return weight
    proper, acronyms = _names(line)
    weight += 1.0 if proper else 0.5 if acronyms else 0.0
    weight += 1.0 if _NUMBER.search(line) else 0.0
    weight += 1.0 if _PATH.search(line) else 0.0
    weight += 1.0 if section == "Open items" and _EXPLICIT_OPEN.search(line) else 0.0
    return weight


def _specifics(text: str) -> set[str]:
    """The words that make a line worth having: numbers, names, paths."""
    return {w for w in _WORD.findall(text)
            if any(c.isdigit() for c in w) or (w[0].isupper() and not w.isupper()
                                               and w.lower() not in _COMMON)} | set(_PATH.findall(text))


def _topic(text: str) -> str:
    first = next(iter(_sentences(text)), text.strip())
    return _shorten(first, 80)


def _shorten(text: str, limit: int = MAX_SENTENCE) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _add(items: list[str], text: str) -> None:
    """Append unless a kept line already says the same: mostly the same words and no number,
    name or path that the kept line lacks (so a changed value is never lost as a repeat)."""
    text = _shorten(text)
    if not text or text in items:
        return
    words = {w.lower() for w in _WORD.findall(text)}
    if len(words) >= 4:
        new = _specifics(text)
        for item in items:
            seen = {w.lower() for w in _WORD.findall(item)}
            if len(words & seen) >= 0.5 * len(words | seen) and new <= _specifics(item):
                return
    items.append(text)
