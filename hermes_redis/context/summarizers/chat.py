"""The summarizer that asks a model: an OpenAI-compatible chat-completions endpoint, with
the offline ``ExtractiveSummarizer`` answering whenever it cannot."""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.request
from collections.abc import Sequence

from hermes_redis.context.summarizers.extractive import ExtractiveSummarizer, split_speaker
from hermes_redis.core import metrics
from hermes_redis.core.models import Message, said_on

log = logging.getLogger("hermes_redis.context.summarizers")  # as before the package split


class ChatSummarizer:
    """An OpenAI-compatible chat-completions endpoint, with the extractive one as fallback.

    Guarantees: never raises for a remote failure (the offline summarizer answers instead),
    the result fits ``max_tokens``, and after a failure the endpoint is not called again for
    ``cooldown`` seconds."""

    def __init__(self, model: str, base_url: str, api_key: str | None, timeout: float,
                 fallback: ExtractiveSummarizer, cooldown: float = 60.0) -> None:
        self.name = f"chat:{model}"
        self.model, self.base_url, self.api_key = model, base_url.rstrip("/"), api_key
        self.timeout, self.fallback, self.cooldown = timeout, fallback, cooldown
        self._down_until = 0.0
        self._lock = threading.Lock()

    def summarize(self, previous: str, messages: Sequence[Message], max_tokens: int) -> str:
        """The endpoint's update of ``previous`` with ``messages``; offline on failure."""
        with self._lock:
            cooling = time.monotonic() < self._down_until
        if cooling:
            return self.fallback.summarize(previous, messages, max_tokens)
        try:
            text = self._ask(previous, messages, max_tokens).strip()
            if not text:
                raise ValueError("empty summary")
        except Exception as err:  # any failure of the remote model falls back, never raises
            with self._lock:
                self._down_until = time.monotonic() + self.cooldown
            metrics.SUMMARIZER_FALLBACKS.inc()
            log.warning("summarizer %s failed (%s); using the offline summarizer for %.0f s",
                        self.name, err, self.cooldown)
            return self.fallback.summarize(previous, messages, max_tokens)
        return self.fallback.tokenizer.cap(text, max_tokens, "the archive")

    def shrink(self, summary: str, max_tokens: int) -> str:
        return self.fallback.shrink(summary, max_tokens)

    def _ask(self, previous: str, messages: Sequence[Message], max_tokens: int) -> str:
        return chat_completion(self.base_url, self.api_key, self.model, CHAT_SYSTEM,
                               chat_prompt(previous, messages, max_tokens), max_tokens,
                               self.timeout)


def chat_completion(base_url: str, api_key: str | None, model: str, system: str, prompt: str,
                    max_tokens: int, timeout: float) -> str:
    """One OpenAI-compatible ``/chat/completions`` call (temperature 0); its reply's text."""
    body = json.dumps({"model": model, "max_tokens": max_tokens, "temperature": 0,
                       "messages": [{"role": "system", "content": system},
                                    {"role": "user", "content": prompt}]}).encode()
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(f"{base_url.rstrip('/')}/chat/completions", body, headers)
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        data = json.load(resp)
    return str(data["choices"][0]["message"]["content"])


CHAT_SYSTEM = (
    "You maintain the running summary of a long conversation for an AI agent that will see "
    "the summary instead of the older messages. Be factual and dense; never invent anything."
)
CHAT_TEMPLATE = """Update the summary with the new messages. Keep everything specific from the
previous summary unless a new message changes it (then keep the new value and say it changed).
Keep names, places, numbers, dates, objects, activities, decisions, file paths, versions and open
items; drop greetings, thanks, compliments and small talk. Say who said or did each thing. Write
absolute dates (resolve "yesterday" or "last week" against the message's date). Cover the whole
conversation evenly, the oldest part as well as the newest. At most {max_tokens} tokens. Use
exactly these headings, leaving a heading out when it would be empty:

Goal: <what the user wants, one line>
Decisions:
- <decision and its reason> (<who>, <date>)
Facts:
<date, e.g. 8 May 2023>:
- <who>: <fact>
Files:
- <path>: <what changed or why it matters>
Open items:
- <question or task still open> (<who>)

Previous summary:
{previous}

New messages:
{transcript}"""


def chat_prompt(previous: str, messages: Sequence[Message], max_tokens: int) -> str:
    """The prompt ``ChatSummarizer`` sends: the template, the previous summary, and the new
    messages one a line as ``[seq] date, speaker: text``."""
    lines = []
    for m in messages:
        speaker, content = split_speaker(m.role, m.content)
        lines.append(f"[{m.seq}] {said_on(m.created_at)}, {speaker}: {content}")
    return CHAT_TEMPLATE.format(max_tokens=max_tokens, previous=previous or "(none)",
                                transcript="\n".join(lines))
