"""Context quality on LoCoMo: how many answers the model could find in what it is sent.

LoCoMo (Maharana et al., ACL 2024) holds long multi-session chats between two people with
question/answer pairs. The development split lives outside the repository (its licence is
CC BY-NC 4.0), in ``../shared/datasets/locomo/`` or wherever ``$LOCOMO_PATH`` points; the
section is skipped, and says so, when it is not there.

Each conversation is appended to a SessionMemory on the in-process ``memory`` backend, where
flush and compaction run inline after each append exactly as an RQ worker runs them. Speaker
A is the ``user``, speaker B the ``assistant``; a message reads ``Name: text`` (plus the
caption of a shared photo) and carries the time of its session, which starts with a
``system`` line naming the session's date, as a chat app records it.

**Matching rule.** A question counts as found when every content word of its answer
(lower-cased, punctuation and a short list of stop words dropped, a plural ``s`` ignored) is
in the text sent to the model; "exact" also reports the stricter rule that the normalized
answer appears as one phrase. Adversarial questions (category 5) have no answer and are
left out. The lexical rule can credit a big context by coincidence, so the full history is
the ceiling, not a perfect score.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import ROOT, Section, make_config, median, num, open_memory, verdict
from hermes_redis import SessionMemory
from hermes_redis.core.errors import HermesError
from hermes_redis.core.models import Context
from hermes_redis.core.tokens import MESSAGE_OVERHEAD

DATASET = Path(os.environ.get("LOCOMO_PATH", ROOT.parent / "shared/datasets/locomo/locomo-dev5.json"))
BUDGETS = (2000, 8000, None)  # None: the configured default budget
METHODS = ("newest", "rolling_window", "summary", "hybrid", "hybrid+query", "full")
_STOP = "a an the of and or to in on at for is was were with by it its that this as be her his their she he"
STOP = frozenset(_STOP.split())


@dataclass(frozen=True)
class Turn:
    role: str
    content: str
    created_at: float
    dia_id: str = ""


@dataclass(frozen=True)
class Question:
    question: str
    answer: str
    category: int
    evidence: tuple[str, ...] = ()


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    turns: list[Turn]
    questions: list[Question]


def load(path: Path = DATASET) -> list[Conversation]:
    records = json.loads(path.read_text(encoding="utf-8"))
    return [_conversation(r) for r in records]


def _conversation(record: dict[str, Any]) -> Conversation:
    conv = record["conversation"]
    roles = {conv["speaker_a"]: "user", conv["speaker_b"]: "assistant"}
    turns: list[Turn] = []
    i = 1
    while f"session_{i}" in conv:
        when = conv[f"session_{i}_date_time"]
        at = _parse_date(when)
        turns.append(Turn("system", f"Conversation session {i}, {when}", at))
        for t in conv[f"session_{i}"]:
            text = f"{t['speaker']}: {t['text']}"
            if t.get("blip_caption"):
                text += f" [shares a photo: {t['blip_caption']}]"
            turns.append(Turn(roles.get(t["speaker"], "user"), text, at, t.get("dia_id", "")))
        i += 1
    qa = [Question(q["question"], str(q["answer"]), int(q["category"]),
                   tuple(str(e) for e in q.get("evidence") or ()))
          for q in record["qa"] if q.get("category") != 5 and "answer" in q]
    return Conversation(record["sample_id"], turns, qa)


def _parse_date(text: str) -> float:
    """'1:56 pm on 8 May, 2023' as Unix seconds (UTC)."""
    try:
        parsed = dt.datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y")
    except ValueError:
        return time.time()
    return parsed.replace(tzinfo=dt.UTC).timestamp()


# --- matching -------------------------------------------------------------------------------
def _words(text: str) -> list[str]:
    return [w[:-1] if len(w) > 3 and w.endswith("s") else w
            for w in re.sub(r"[^a-z0-9]+", " ", text.lower()).split() if w not in STOP]


def found(answer: str, sent_words: set[str], sent_phrase: str) -> tuple[bool, bool]:
    """(every answer word is in the text, the answer is one phrase of it)."""
    words = _words(answer)
    if not words:
        return False, False
    return all(w in sent_words for w in words), f" {' '.join(words)} " in sent_phrase


def sent_text(ctx: Context) -> str:
    return "\n".join(m["content"] for m in ctx.as_chat())


class Sent:
    def __init__(self, text: str) -> None:
        words = _words(text)
        self.words = set(words)
        self.phrase = f" {' '.join(words)} "


# --- methods --------------------------------------------------------------------------------
STRATEGY = {"rolling_window": "rolling_window", "summary": "summary", "hybrid": "hybrid",
            "hybrid+query": "hybrid"}


@dataclass(frozen=True)
class Variant:
    """How a conversation is imported: with each message's real date (``dated``) or all
    at once as a plain transcript, and the embeddings provider (``none``: BM25 only)."""

    dated: bool = True
    embeddings: str = "none"

    @property
    def name(self) -> str:
        return f"{'dated' if self.dated else 'undated'}, {self.embeddings}"

    def config(self) -> dict[str, Any]:
        if self.embeddings == "openai":  # any /v1/embeddings endpoint, named by the environment
            return {"provider": "openai", "base_url": os.environ["BENCH_EMBEDDINGS_URL"],
                    "model": os.environ.get("BENCH_EMBEDDINGS_MODEL", "")}
        return {"provider": self.embeddings}


def ingest(conv: Conversation, workdir: Path, strategy: str,
           variant: Variant = Variant()) -> tuple[SessionMemory, str, float]:
    config = make_config(None, workdir, "memory", compression={"strategy": strategy})
    mem = SessionMemory(config.with_overrides(embeddings=variant.config()))
    vectors = mem.maintainer.read.vectors
    if vectors is not None:  # each distinct text is embedded once per run, whatever the variant
        _memoize(vectors.embedder)
    sid = mem.create_session("locomo", title=conv.sample_id)
    started = time.perf_counter()
    for t in conv.turns:
        mem.append(sid, t.role, t.content, created_at=t.created_at if variant.dated else None)
    return mem, sid, time.perf_counter() - started


EMBEDDED: dict[tuple[str, str, bool], Any] = {}  # (provider, text, query) -> vector


def _memoize(embedder: Any) -> None:
    raw = embedder._raw

    def cached(texts: list[str], query: bool) -> list[Any]:
        todo = [t for t in texts if (embedder.name, t, query) not in EMBEDDED]
        if todo:
            for t, vec in zip(todo, raw(todo, query), strict=True):
                EMBEDDED[(embedder.name, t, query)] = vec
        return [EMBEDDED[(embedder.name, t, query)] for t in texts]

    embedder._raw = cached


def paraphrased(conv: Conversation) -> set[int]:
    """The questions (indices) that share no content word with any of their evidence
    messages: only recall by meaning can find those."""
    said = {t.dia_id: set(_words(t.content.split(": ", 1)[-1])) for t in conv.turns if t.dia_id}
    out = set()
    for i, q in enumerate(conv.questions):
        evidence = [said[e] for e in q.evidence if e in said]
        if evidence and not set(_words(q.question)) & set().union(*evidence):
            out.add(i)
    return out


def newest_that_fit(messages: list[tuple[str, int]], budget: int) -> tuple[str, int]:
    """The baseline: the newest messages whose tokens fit the budget, verbatim."""
    used, kept = 0, []
    for text, tokens in reversed(messages):
        if used + tokens + MESSAGE_OVERHEAD > budget:
            break
        kept.append(text)
        used += tokens + MESSAGE_OVERHEAD
    return "\n".join(reversed(kept)), used


@dataclass
class Score:
    words: int = 0
    exact: int = 0
    questions: int = 0
    tokens: int = 0
    contexts: int = 0
    seconds: float = 0.0
    messages: int = 0

    def add(self, q: Question, sent: Sent, tokens: int) -> None:
        w, e = found(q.answer, sent.words, sent.phrase)
        self.words += w
        self.exact += e
        self.questions += 1
        self.tokens += tokens
        self.contexts += 1

    @property
    def recall(self) -> float:
        return self.words / self.questions if self.questions else 0.0


def evaluate(convs: list[Conversation], workdir: Path, variant: Variant = Variant(),
             methods: tuple[str, ...] = METHODS) -> dict[tuple[str, int], Score]:
    """Every method's score at every budget, over all questions of all conversations; the
    paraphrase subset's under ``(method + " paraphrase", budget)``."""
    scores: dict[tuple[str, int], Score] = {}
    for method in methods:
        for conv in convs:
            hard = {id(conv.questions[i]) for i in paraphrased(conv)}
            for budget, sent, tokens, q in _contexts(method, conv, workdir, variant):
                scores.setdefault((method, budget), Score()).add(q, sent, tokens)
                if id(q) in hard:
                    scores.setdefault((method + " paraphrase", budget), Score()).add(q, sent, tokens)
    return scores


def _contexts(method: str, conv: Conversation, workdir: Path,
              variant: Variant = Variant()) -> Iterator[tuple[int, Sent, int, Question]]:
    """(budget, what was sent, its tokens, the question) for each question and budget."""
    if method in ("newest", "full"):
        mem = open_memory(None, workdir, backend="memory")
        try:
            pairs = [(t.content, mem.tokenizer.count(t.content)) for t in conv.turns]
            default = mem.config.context_budget
        finally:
            mem.close()
        for budget in BUDGETS:
            b = budget or default
            text, used = ("\n".join(p[0] for p in pairs),
                          sum(p[1] + MESSAGE_OVERHEAD for p in pairs)) if method == "full" \
                else newest_that_fit(pairs, b)
            sent = Sent(text)
            for q in conv.questions:
                yield b, sent, used, q
        return
    mem, sid, seconds = ingest(conv, workdir, STRATEGY[method], variant)
    TIMES.setdefault(method, [0.0, 0.0])
    TIMES[method][0] += seconds
    TIMES[method][1] += len(conv.turns)
    try:
        for budget in BUDGETS:
            b = budget or mem.config.context_budget
            if method == "hybrid+query":
                for q in conv.questions:
                    t0 = time.perf_counter()
                    ctx = mem.context(sid, b, query=q.question)
                    LATENCY.setdefault((variant, b), []).append(time.perf_counter() - t0)
                    yield b, Sent(sent_text(ctx)), ctx.tokens, q
            else:
                ctx = mem.context(sid, b)
                sent = Sent(sent_text(ctx))
                for q in conv.questions:
                    yield b, sent, ctx.tokens, q
    finally:
        mem.close()


TIMES: dict[str, list[float]] = {}  # method -> [seconds appending, messages appended]
LATENCY: dict[tuple[Variant, int], list[float]] = {}  # context() with the question, seconds


def run(workdir: Path, quick: bool = False) -> Section:
    if not DATASET.exists():
        sec = Section("Context quality — LoCoMo", ["method"])
        sec.note(f"skipped: no dataset at {DATASET} (set $LOCOMO_PATH)")
        return sec
    convs = load()
    if quick:
        convs = convs[:2]
    TIMES.clear()
    LATENCY.clear()
    scores = evaluate(convs, workdir)
    n_q = sum(len(c.questions) for c in convs)
    n_msgs = sum(len(c.turns) for c in convs)
    sec = Section(
        f"Context quality — LoCoMo development split: {len(convs)} conversations, "
        f"{n_msgs} messages, {n_q} questions",
        ["budget", "method", "recall", "recall (exact)", "vs full", "tokens sent",
         "append+compact µs/msg"])
    budgets = sorted({b for _, b in scores})
    for b in budgets:
        full = scores[("full", b)].recall
        for method in METHODS:
            s = scores.get((method, b))
            if s is None:
                continue
            t = TIMES.get(method)
            per_msg = f"{t[0] / t[1] * 1e6:,.0f}" if t else ""
            sec.add(num(b), method, f"{s.recall:.1%}", f"{s.exact / s.questions:.1%}",
                    f"{s.recall / full:.0%}" if full else "n/a", num(s.tokens / s.contexts),
                    per_msg)
    for b in budgets[:2]:
        base = scores[("newest", b)].recall
        hy = scores[("hybrid", b)].recall
        hq = scores[("hybrid+query", b)].recall
        full = scores[("full", b)].recall
        want = 0.70 if b <= 2000 else 0.85
        sec.note(f"{b:,} tokens: hybrid finds {hy / base:.2f}× the newest-turns baseline "
                 f"(target ≥ 1.30×: {verdict(hy >= 1.3 * base)}); with the question as query "
                 f"{hq / full:.0%} of the full history (target ≥ {want:.0%}: "
                 f"{verdict(hq >= want * full)}).")
    top = budgets[-1]
    sec.note(f"default budget ({top:,}): hybrid {scores[('hybrid', top)].recall:.1%} against the "
             f"full history's {scores[('full', top)].recall:.1%} (target: equal: "
             f"{verdict(scores[('hybrid', top)].recall >= scores[('full', top)].recall)}).")
    sec.note("Found = every content word of the answer is in the text sent (see bench/quality.py); "
             "category 5 (no answer) left out. Memory backend, default config apart from the "
             "strategy; newest and full are computed from the messages directly.")
    _variants(sec, convs, workdir, scores)
    return sec


VARIANT_METHODS = ("summary", "hybrid", "hybrid+query")


def variants() -> list[Variant]:
    """Dated and undated, BM25 alone and with each provider that runs here."""
    providers = ["none", "local"] + (["openai"] if os.environ.get("BENCH_EMBEDDINGS_URL") else [])
    return [Variant(dated, p) for p in providers for dated in (True, False)]


def _variants(sec: Section, convs: list[Conversation], workdir: Path,
              base: dict[tuple[str, int], Score]) -> None:
    """Issue 31: the same questions imported undated, and with embeddings; the paraphrase
    subset (no content word shared with the evidence); context() p50 with the question."""
    hard = sum(len(paraphrased(c)) for c in convs)
    table: dict[Variant, dict[tuple[str, int], Score]] = {Variant(): base}
    for v in variants():
        if v not in table:
            try:
                table[v] = evaluate(convs, workdir, v, VARIANT_METHODS)
            except HermesError as err:
                sec.note(f"{v.name}: not run: {err}")
    sec.add("", "", "", "", "", "", "")
    sec.add("budget", "variant · method", "recall", "recall (exact)", "vs full",
            f"paraphrase ({hard} q)", "context() p50 ms")
    for b in sorted({b for _, b in base})[:2]:
        full = base[("full", b)].recall
        for v, scores in table.items():
            for m in VARIANT_METHODS:
                s, p = scores.get((m, b)), scores.get((m + " paraphrase", b))
                if s is None:
                    continue
                lat = LATENCY.get((v, b)) if m == "hybrid+query" else None
                sec.add(num(b), f"{v.name} · {m}", f"{s.recall:.1%}",
                        f"{s.exact / s.questions:.1%}", f"{s.recall / full:.0%}",
                        f"{p.recall:.1%}" if p else "0 found",
                        f"{median(lat) * 1e3:.1f}" if lat else "")
        for v in table:
            if v.embeddings == "none" or not v.dated:
                continue
            hq = table[v][("hybrid+query", b)].recall
            words = table[Variant()].get(("hybrid+query paraphrase", b))
            mine = table[v].get(("hybrid+query paraphrase", b))
            want = 0.95 if b <= 2000 else 1.0
            sec.note(f"{b:,} tokens, {v.name}: hybrid+query {hq / full:.0%} of the full history"
                     f" (target ≥ {want:.0%}: {verdict(hq >= want * full)}); paraphrase subset"
                     f" {_ratio(mine, words)} BM25 alone (target ≥ 1.5×:"
                     f" {verdict(bool(mine and words and mine.recall >= 1.5 * words.recall))}).")


def _ratio(a: Score | None, b: Score | None) -> str:
    if a is None or b is None or not b.recall:
        return "n/a against"
    return f"{a.recall / b.recall:.2f}×"


if __name__ == "__main__":
    from bench.common import scratch_dir

    print(run(scratch_dir(), quick=bool(os.environ.get("QUICK"))).render())
