"""Persistent memories: what extraction and the plain-word triggers store, measured.

**Planted facts.** A generated conversation per seed: chit-chat, tool output and questions,
with durable facts planted in varied wordings (preferences, decisions, names, versions, paths,
conventions; English and Chinese; some phrasings the rules were not written for), some
restated later (a duplicate must not make a second memory), some contradicted later (only the
newer may stay current), and decoy questions that mention a fact ("do you remember we use
X?", "你还记得…吗") and must store nothing. Each conversation goes through ``append`` and a
flush on the in-process backend, as a worker would run it.

**LoCoMo.** The development split's conversations as the user said them (speaker A): how many
memories a real chat makes, and the false-trigger rate on its questions, appended as user
messages (a question must store nothing).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from bench import quality
from bench.common import Section, open_memory

SEEDS = 20


@dataclass(frozen=True)
class Planted:
    text: str
    key: str  # the words a memory must contain to have captured it
    covered: bool  # a wording the rules were written for


PLANTS = [
    Planted("I prefer a functional style for the data code.", "functional", True),
    Planted("I really like short answers, no preamble.", "short answers", True),
    Planted("We decided to deploy every Friday afternoon.", "friday", True),
    Planted("Let's go with FastAPI for the new service.", "fastapi", True),
    Planted("My name is Dana Whitfield.", "dana", True),
    Planted("We're on Python 3.12 in production.", "3.12", True),
    Planted("The config lives in /srv/app/settings.toml.", "/srv/app/settings.toml", True),
    Planted("Always use type hints in public functions.", "type hints", True),
    Planted("我们这个项目用 PostgreSQL，不用 MySQL。", "postgresql", True),
    Planted("我喜欢用中文回答。", "中文", True),
    Planted("我们约定提交信息用英文。", "提交信息用英文", True),
    Planted("Our staging port is 8443.", "8443", True),
    Planted("Functional code is just easier for me to read.", "functional code", False),
    Planted("Postgres is the database here, by the way.", "postgres", False),
    Planted("Tabs, not spaces, in every repo we own.", "tabs", False),
    Planted("Deployments happen through the blue pipeline.", "blue pipeline", False),
]
RESTATED = ["I prefer a functional style for the data code!", "My name is Dana Whitfield, again."]
CONTRADICTIONS = [("We host everything on AWS.", "We moved off AWS, we host on Azure now.", "azure"),
                  ("My editor is vim.", "My editor is emacs these days.", "emacs")]
DECOYS = ["Do you remember which style I prefer?", "你还记得我们用什么数据库吗？",
          "What database do we use again?", "If we used MongoDB, would it be faster?",
          "My friend prefers React, what do you think?", "Should we always use type hints?",
          "Maybe we should deploy on Mondays?", "Can you remind me of my name?"]
FILLER = ["Hi, how is it going?", "Can you look at this stack trace?", "Thanks, that worked.",
          "Run the tests again please.", "Hmm, that is odd.", "OK, next file.",
          "It rained all day here.", "What does this function return?", "Great, ship it."]
TOOL = "Traceback (most recent call last):\n  File \"app.py\", line 3\nValueError: bad input"


def conversation(seed: int) -> tuple[list[tuple[str, str]], list[str]]:
    """(messages, the decoy questions in it), shuffled per seed; facts before their
    restatements and contradictions."""
    rng = random.Random(seed)
    facts = [p.text for p in PLANTS]
    rng.shuffle(facts)
    middle = facts + [c[0] for c in CONTRADICTIONS] + rng.sample(FILLER * 3, 20) + DECOYS
    rng.shuffle(middle)
    late = RESTATED + [c[1] for c in CONTRADICTIONS] + rng.sample(FILLER, 4)
    rng.shuffle(late)
    msgs: list[tuple[str, str]] = []
    for text in middle + late:
        msgs.append(("user", text))
        msgs.append(("tool", TOOL) if "trace" in text else ("assistant", "Sure, noted."))
    return msgs, DECOYS


def _has(content: str, key: str) -> bool:
    return key.lower() in content.lower()


def run(workdir: Path, quick: bool = False) -> Section:
    sec = Section("Persistent memories — extraction after flush and plain-word triggers",
                  ["corpus", "conversations", "memories / conv", "captured", "captured (rules' wordings)",
                   "duplicates", "contradictions resolved", "false triggers on questions"])
    seeds = range(5 if quick else SEEDS)
    made = captured = covered_n = covered_hit = dupes = resolved = false = decoys = 0
    for seed in seeds:
        mem = open_memory(None, workdir, backend="memory")
        sid = mem.create_session(f"planted{seed}")
        msgs, questions = conversation(seed)
        for role, text in msgs:
            mem.append(sid, role, text)
        mem.flush(sid)
        current = mem.memories(f"planted{seed}")
        made += len(current)
        for p in PLANTS:
            hit = any(_has(m.content, p.key) for m in current)
            captured += hit
            if p.covered:
                covered_n += 1
                covered_hit += hit
        dupes += sum(1 for s in RESTATED if sum(_has(m.content, s.split()[3]) for m in current) > 1)
        for old, _, new in CONTRADICTIONS:
            resolved += (any(_has(m.content, new) for m in current)
                         and not any(m.content == old for m in current))
        by_question = [m for m in mem.memories(f"planted{seed}", superseded=True)
                       if m.seq is not None and msgs[m.seq - 1][1] in questions]
        false += len(by_question)
        decoys += len(questions)
        mem.close()
    n = len(seeds)
    sec.add("planted (own generator)", n, f"{made / n:.1f}", f"{captured / (n * len(PLANTS)):.0%}",
            f"{covered_hit / covered_n:.0%}", f"{dupes}/{n * len(RESTATED)}",
            f"{resolved}/{n * len(CONTRADICTIONS)}", f"{false}/{decoys}")
    if quality.DATASET.exists():
        convs = quality.load()[: 2 if quick else None]
        made = false = asked = user_msgs = 0
        for conv in convs:
            mem = open_memory(None, workdir, backend="memory")
            sid = mem.create_session("locomo")
            for t in conv.turns:
                if t.role == "user":
                    user_msgs += 1
                    mem.append(sid, "user", t.content.split(": ", 1)[-1], created_at=t.created_at)
            made += len(mem.memories("locomo"))
            before = len(mem.memories("locomo", superseded=True))
            for q in conv.questions:
                mem.append(sid, "user", q.question)
            mem.flush(sid)
            false += len(mem.memories("locomo", superseded=True)) - before
            asked += len(conv.questions)
            mem.close()
        sec.add("LoCoMo dev (speaker A)", len(convs), f"{made / len(convs):.1f}", "", "", "", "",
                f"{false}/{asked}")
        sec.note(f"LoCoMo: {made} memories from {user_msgs} user messages "
                 f"({made / max(user_msgs, 1):.1%}); LoCoMo has no planted facts to score capture by.")
    sec.note("captured: a current memory holds the planted fact's key words; duplicates: a "
             "restated fact that made a second current memory; contradictions resolved: only the "
             "newer fact is current; false triggers: memories made from a question. The rules' "
             "wordings are the first 12 plants; the last 4 are phrasings they were not written for.")
    return sec
