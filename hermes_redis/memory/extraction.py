"""Durable facts in a conversation, found offline: what a user says about themselves and
their project that later sessions should know (preferences, decisions, names, versions,
paths, conventions; activities, family, pets, jobs, places, plans), and how a new fact
relates to the ones already remembered.

Rules, not a model: each user sentence is matched against statement patterns in English
and Chinese (data in ``statements.py``); questions, hypotheticals and sentences about other
people store nothing.
A fact has a ``topic`` when one can be named (the subject of "my X is …", or the category
of the technology it mentions), so a newer fact on the same topic supersedes the older.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from hermes_redis.context.summarizers import chat_completion
from hermes_redis.core import config
from hermes_redis.core.models import Message
from hermes_redis.core.text import HAN_CHARS
from hermes_redis.memory.statements import (
    ADDITIVE,
    EN_ANY,
    EVERYDAY,
    NAME,
    NEGATED,
    NOT_A_STATEMENT,
    QUESTION,
    SENTENCE_END,
    SUBJECT,
    TERM,
    TERM_RE,
    ZH,
)

log = logging.getLogger(__name__)

MAX_FACT_CHARS = 300
# The words two statements are compared by: runs of ASCII letters and digits, and Han
# characters one by one. Not kana: particles and endings would make "私はPythonが好きです"
# and "私はRustが好きです" mostly the same words.
_NEAR_WORDS = re.compile(f"[a-z0-9]+|[{HAN_CHARS}]")


@dataclass(frozen=True)
class Fact:
    """A durable statement and where it was said."""

    content: str
    seq: int
    topic: str | None


def sentences(text: str) -> Iterable[str]:
    for part in SENTENCE_END.split(text):
        sentence = " ".join(part.split())
        if len(sentence) >= 4:
            yield sentence


def is_durable(sentence: str) -> bool:
    """A statement of the kind worth keeping across sessions (not a question, not a maybe)."""
    if QUESTION.search(sentence) or NOT_A_STATEMENT.search(sentence):
        return False
    return bool(ZH.search(sentence) or EN_ANY.search(sentence))


def topic_of(text: str) -> str | None:
    """What the fact is about, when it can be named: a name, the subject of "my/our X is",
    else the category of the technology it chooses (the last one not negated)."""
    if NAME.search(text):
        return "name"
    chosen: str | None = None
    named = [m for m in TERM_RE.finditer(text)
             if not (m.group(1).islower() and m.group(1) in EVERYDAY)]
    for match in named:
        before = text[max(0, match.start() - 24):match.start()]
        if not NEGATED.search(before):
            chosen = TERM[match.group(1).lower()]
    if chosen is None:
        chosen = TERM[named[-1].group(1).lower()] if named else None
    if chosen is not None and not ADDITIVE.search(text):  # "we also use Rust" replaces nothing
        return chosen
    subject = SUBJECT.search(text)
    return subject.group(1).lower() if subject else None


def extract(messages: Sequence[Message]) -> list[Fact]:
    """The durable facts in the users' messages, in order, each sentence at most once."""
    facts: list[Fact] = []
    seen: set[str] = set()
    for m in messages:
        if m.role != "user":
            continue
        for sentence in sentences(m.content):
            if not is_durable(sentence):
                continue
            content = sentence[:MAX_FACT_CHARS]
            key = normalized(content)
            if key in seen:
                continue
            seen.add(key)
            facts.append(Fact(content, m.seq, topic_of(content)))
    return facts


def normalized(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def _words(text: str) -> set[str]:
    words = _NEAR_WORDS.findall(text.lower())
    return {w for w in words if len(w) > 2 or w.isdigit() or not w.isascii()}


def near_duplicate(a: str, b: str, threshold: float = 0.7) -> bool:
    """Two statements of the same fact: the same words, give or take a few."""
    wa, wb = _words(a), _words(b)
    if not wa or not wb:
        return normalized(a) == normalized(b)
    return len(wa & wb) / len(wa | wb) >= threshold


class Extractor(Protocol):
    name: str

    def extract(self, messages: Sequence[Message]) -> list[Fact]: ...


class RuleExtractor:
    """The offline extractor: the statement patterns (``statements.py``)."""

    name = "rules"

    def extract(self, messages: Sequence[Message]) -> list[Fact]:
        return extract(messages)


CHAT_EXTRACT_SYSTEM = (
    "You pick out durable facts a user states about themselves and their project, for an AI "
    "agent's long-term memory. Never invent anything; never include questions."
)
CHAT_EXTRACT_TEMPLATE = """From the user's messages below, list the facts worth remembering in
later conversations: preferences, decisions, names, versions, paths, conventions. Skip
questions, small talk, and anything that is only about this moment. Answer with a JSON array
only, one object per fact: [{{"seq": <the message's number>, "fact": "<one sentence, in the
user's language>"}}]. An empty array if there is none.

Messages:
{transcript}"""


class ChatExtractor:
    """Extraction by an OpenAI-compatible endpoint (``summarizer.base_url``), the rules as
    fallback: a failure or a reply that is not the JSON asked for uses the rules, and the
    endpoint is not called again for ``cooldown`` seconds. A fact must name one of the
    messages it was given."""

    def __init__(self, model: str, base_url: str, api_key: str | None, timeout: float,
                 cooldown: float = 60.0) -> None:
        self.name = f"chat:{model}"
        self.model, self.base_url, self.api_key, self.timeout = model, base_url, api_key, timeout
        self.cooldown, self._down_until, self._lock = cooldown, 0.0, threading.Lock()

    def extract(self, messages: Sequence[Message]) -> list[Fact]:
        users = [m for m in messages if m.role == "user"]
        if not users:
            return []
        with self._lock:
            cooling = time.monotonic() < self._down_until
        if not cooling:
            try:
                return self._ask(users)
            except Exception as err:  # any failure of the remote model falls back, never raises
                with self._lock:
                    self._down_until = time.monotonic() + self.cooldown
                log.warning("extractor %s failed (%s); using the rules for %.0f s",
                            self.name, err, self.cooldown)
        return extract(messages)

    def _ask(self, users: Sequence[Message]) -> list[Fact]:
        transcript = "\n".join(f"[{m.seq}] {' '.join(m.content.split())[:2000]}" for m in users)
        reply = chat_completion(self.base_url, self.api_key, self.model, CHAT_EXTRACT_SYSTEM,
                                CHAT_EXTRACT_TEMPLATE.format(transcript=transcript), 1000,
                                self.timeout)
        start, end = reply.find("["), reply.rfind("]")
        items = json.loads(reply[start:end + 1]) if start >= 0 < end else None
        if not isinstance(items, list):
            raise ValueError("the reply is not a JSON array")
        seqs = {m.seq for m in users}
        facts: list[Fact] = []
        for item in items:
            if not isinstance(item, dict):
                raise ValueError("a fact is not an object")
            seq, text = item.get("seq"), " ".join(str(item.get("fact") or "").split())
            if isinstance(seq, int) and seq in seqs and text:
                content = text[:MAX_FACT_CHARS]
                facts.append(Fact(content, seq, topic_of(content)))
        return facts


# (the model, the endpoint's settings) -> the extractor; keys as ``summarizers.provider``
# names them, so facts are extracted by whatever summarizes
ExtractorFactory = Callable[[str, config.Summarizer], Extractor]


def _rules(model: str, endpoint: config.Summarizer) -> Extractor:
    return RuleExtractor()


def _chat(model: str, endpoint: config.Summarizer) -> Extractor:
    if not endpoint.base_url:
        raise ValueError("the chat extractor needs summarizer.base_url")
    return ChatExtractor(model, endpoint.base_url, endpoint.api_key, endpoint.timeout)


EXTRACTORS: dict[str, ExtractorFactory] = {"offline": _rules, "chat": _chat}
