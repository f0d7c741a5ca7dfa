"""Extraction measured on real conversations: LoCoMo's observations as the ground truth.

Each LoCoMo conversation (``bench/quality.py`` finds the dataset) lists, per session and per
speaker, the facts a person states (``observation``), each with the dialog id of the message
that states it. Speaker A is the ``user`` and speaker B the ``assistant``, as in the quality
section; a message is its text as typed (no ``Name:`` prefix, no photo caption). Each session
is given to the extractor as one batch, as a flush hands over what it archived; the extractor
is called directly (no Redis, no archive), so near-duplicate merging and supersession, which
the memory book does afterwards, are not part of these numbers.

**Definitions.**

- *A fact is captured* when at least one message it cites yielded at least one memory. Capture
  is reported over speaker A's facts (the user's: the ones an extractor that reads the user's
  messages can take), and over all facts (speaker B's included: no extractor here reads the
  assistant's messages, so this is the share of the conversation's facts the memory holds).
- *A false memory* is a memory extracted from a message that no observation fact (of either
  speaker) cites. Reported per 100 user messages, the messages the extractors read: counting
  the assistant's messages too would halve the rate without any extractor doing better.
  LoCoMo's observations are not exhaustive, so a "false" memory can be a true fact the
  annotators left out: the rate is an upper bound on noise, and its changes are what to read.
- *From a fact message*: the share of memories whose message cites at least one fact.

The chat extractor runs only against an endpoint configured for the bench
(``BENCH_CHAT_BASE_URL`` and ``BENCH_CHAT_MODEL``, optionally ``BENCH_CHAT_API_KEY``; the
bench drops every ``HERMES_*`` variable so that a developer's settings never leak in); else
its row says it was not run.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import quality
from bench.common import Section
from hermes_redis.core.models import Message
from hermes_redis.memory.extraction import ChatExtractor, Extractor, RuleExtractor

CHAT_ENV = ("BENCH_CHAT_BASE_URL", "BENCH_CHAT_MODEL", "BENCH_CHAT_API_KEY")


@dataclass(frozen=True)
class Observed:
    speaker_a: bool  # a fact about speaker A, the user
    sources: frozenset[int]  # seqs of the messages that state it


@dataclass(frozen=True)
class Dialog:
    sample_id: str
    sessions: list[list[Message]]
    facts: list[Observed]

    @property
    def user_messages(self) -> int:
        return sum(m.role == "user" for s in self.sessions for m in s)

    @property
    def cited(self) -> set[int]:
        return {seq for f in self.facts for seq in f.sources}


def load(path: Path = quality.DATASET) -> list[Dialog]:
    return [_dialog(r) for r in json.loads(path.read_text(encoding="utf-8"))]


def _dialog(record: dict[str, Any]) -> Dialog:
    conv = record["conversation"]
    a = conv["speaker_a"]
    seq_of: dict[str, int] = {}
    sessions: list[list[Message]] = []
    i = seq = 1
    while f"session_{i}" in conv:
        batch = []
        for t in conv[f"session_{i}"]:
            seq_of[t["dia_id"]] = seq
            role = "user" if t["speaker"] == a else "assistant"
            batch.append(Message(record["sample_id"], seq, role, t["text"], 0))
            seq += 1
        sessions.append(batch)
        i += 1
    facts = []
    for per_speaker in record["observation"].values():
        for speaker, items in per_speaker.items():
            for _, cites in items:
                ids = [cites] if isinstance(cites, str) else cites
                facts.append(Observed(speaker == a,
                                      frozenset(seq_of[d] for d in ids if d in seq_of)))
    return Dialog(record["sample_id"], sessions, facts)


@dataclass
class Tally:
    a_facts: int = 0
    a_captured: int = 0
    facts: int = 0
    captured: int = 0
    memories: int = 0
    false: int = 0
    user_messages: int = 0
    seconds: float = 0.0
    misses: list[str] = field(default_factory=list)  # user messages stating a fact, no memory

    def add(self, dialog: Dialog, yielded: dict[int, int], texts: dict[int, str]) -> None:
        cited = dialog.cited
        for f in dialog.facts:
            hit = any(yielded.get(s, 0) for s in f.sources)
            self.facts += 1
            self.captured += hit
            if f.speaker_a:
                self.a_facts += 1
                self.a_captured += hit
        self.memories += sum(yielded.values())
        self.false += sum(n for seq, n in yielded.items() if seq not in cited)
        self.user_messages += dialog.user_messages
        self.misses += [texts[s] for s in sorted(cited) if s in texts and not yielded.get(s)]


def measure(extractor: Extractor, dialogs: Sequence[Dialog]) -> Tally:
    """Run ``extractor`` on every session of every dialog and score it."""
    tally = Tally()
    for d in dialogs:
        yielded: dict[int, int] = {}
        started = time.perf_counter()
        for batch in d.sessions:
            for fact in extractor.extract(batch):
                yielded[fact.seq] = yielded.get(fact.seq, 0) + 1
        tally.seconds += time.perf_counter() - started
        texts = {m.seq: m.content for s in d.sessions for m in s if m.role == "user"}
        tally.add(d, yielded, texts)
    return tally


def chat_extractor() -> ChatExtractor | None:
    url, model, key = (os.environ.get(v) for v in CHAT_ENV)
    if not url or not model:
        return None
    return ChatExtractor(model, url, key, timeout=60.0, cooldown=0.0)


def _row(sec: Section, name: str, t: Tally) -> None:
    sec.add(name, f"{t.a_captured / t.a_facts:.1%}", f"{t.captured / t.facts:.1%}",
            f"{t.false * 100 / t.user_messages:.1f}", f"{t.memories * 100 / t.user_messages:.1f}",
            f"{(t.memories - t.false) / t.memories:.0%}" if t.memories else "n/a")


def run(workdir: Path, quick: bool = False) -> Section:
    if not quality.DATASET.exists():
        sec = Section("Extraction — LoCoMo observations", ["extractor"])
        sec.note(f"skipped: no dataset at {quality.DATASET} (set $LOCOMO_PATH)")
        return sec
    dialogs = load()[: 2 if quick else None]
    users = sum(d.user_messages for d in dialogs)
    msgs = sum(len(s) for d in dialogs for s in d.sessions)
    n_facts = sum(len(d.facts) for d in dialogs)
    n_a = sum(f.speaker_a for d in dialogs for f in d.facts)
    sec = Section(
        f"Extraction — LoCoMo observations: {len(dialogs)} conversations, {msgs} messages "
        f"({users} the user's), {n_facts} facts ({n_a} speaker A's)",
        ["extractor", "capture (A's facts)", "capture (all facts)", "false / 100 user msgs",
         "memories / 100 user msgs", "from a fact message"])
    rules = measure(RuleExtractor(), dialogs)
    _row(sec, "rules (offline, default)", rules)
    chat = chat_extractor()
    if chat is None:
        sec.add("chat", "not run: no endpoint configured", "", "", "", "")
        sec.note(f"chat: set {CHAT_ENV[0]} and {CHAT_ENV[1]} (and {CHAT_ENV[2]} if it needs "
                 "one) to run the chat extractor against an OpenAI-compatible endpoint.")
    else:
        _row(sec, chat.name, measure(chat, dialogs))
    sec.note("capture: a fact whose message yielded at least one memory; false: a memory from a "
             "message no observation fact cites (an upper bound: the observations are not "
             "exhaustive); see bench/extraction.py. The extractors read the user's (speaker A's) "
             "messages only, so speaker B's facts count in 'all facts' and are never captured.")
    sec.note(f"rules: {rules.seconds * 1e6 / max(users, 1):.0f} µs per user message.")
    return sec


if __name__ == "__main__":
    import sys

    from bench.common import scratch_dir

    print(run(scratch_dir(), quick=bool(os.environ.get("QUICK"))).render())
    if "--misses" in sys.argv:  # the user sentences that state a fact and yielded nothing
        for text in measure(RuleExtractor(), load()).misses:
            print("-", text)
