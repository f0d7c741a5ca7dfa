"""The offline summarizer: no model, deterministic.

``ExtractiveSummarizer`` keeps the sentences that carry specific content (names, places,
numbers, dates, objects, decisions, file paths, versions, open items), drops small talk,
compresses what it keeps, and files each line under the date it was said with who said it.
When the summary outgrows its budget it re-summarizes its own lines (compresses them to
their specific words, then keeps the most informative ones), taking from the dates that hold
the most, so every part of the conversation stays covered. The words and patterns it reads
language with are data in ``rules.py``.

Summary format (plain text, parsed back on the next fold)::

    Goal: <the user's request>
    Files: src/auth/login.py, app/db.py
    8 May 2023:
    - Caroline: went to LGBTQ support group on 7 May; researching adoption agencies
    - assistant (decision): use PostgreSQL 16, not MySQL
    - user (open): rate limiting per IP?
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from hermes_redis.context.summarizers.rules import (
    ARTICLE,
    CALLED_OUT,
    CHAT_WORDS,
    COMMON_WORDS,
    CONTRACTION,
    DECISION,
    EXPLICIT_OPEN,
    FENCE,
    FILLER,
    FRAMEWORK,
    FUNCTION_WORDS,
    GENERIC_WORDS,
    GOAL,
    KEEP_IN_SHORT,
    LABEL_WORDS,
    LEAD,
    MONTHS,
    NUMBER_WORDS,
    PATH,
    QUESTION,
    RELATIVE_DATE,
    SELF,
    SENTENCE_END,
    SENTENCE_START,
    SPACES,
    SPEAKER,
    TIME_WORDS,
    VOCATIVE,
    WEEKDAY_ABBR,
    WEEKDAYS,
    WORD,
)
from hermes_redis.core.models import Message, said_day, said_on
from hermes_redis.core.text import CJK
from hermes_redis.core.tokens import Tokenizer

SECTIONS = ("Goal", "Decisions", "Facts", "Files", "Open items")
KINDS = {"decision": "Decisions", "open": "Open items", "fact": "Facts"}
MAX_SENTENCE = 180
GOAL_MAX = 160
FILES_SHARE = 0.1  # of the budget, at most, for the Files line
FOLD_CHUNK = 256  # messages folded at once: the cost of one fold grows with its square


@dataclass
class _Line:
    """One summary line: what ``speaker`` said on ``date`` (a heading, "" when undated)."""

    date: str
    speaker: str
    kind: str  # "fact", "decision" or "open"
    text: str


@dataclass
class _Summary:
    goal: str
    files: list[str]
    lines: list[_Line]


class ExtractiveSummarizer:
    """Offline, deterministic and model-free. Guarantees: the result fits ``max_tokens``;
    lines carry their date (heading) and speaker; space is shared evenly across dates."""

    name = "extractive"

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer

    def summarize(self, previous: str, messages: Sequence[Message], max_tokens: int) -> str:
        """``previous`` with ``messages`` folded in, at most ``max_tokens`` tokens. A long
        backlog is folded ``FOLD_CHUNK`` messages at a time, as workers fold a live session,
        so the cost stays linear in its length."""
        if len(messages) > FOLD_CHUNK:
            for i in range(0, len(messages), FOLD_CHUNK):
                previous = self.summarize(previous, messages[i:i + FOLD_CHUNK], max_tokens)
            return previous
        summary = _parse(previous)
        old = len(summary.lines)
        speakers = {ln.speaker for ln in summary.lines if ln.speaker}
        for m in messages:
            for path in PATH.findall(FENCE.sub(" ", m.content)):
                if path not in summary.files:
                    summary.files.append(path)
            if m.role == "tool" or not m.content.strip():
                continue
            speaker, content = split_speaker(m.role, m.content)
            speakers.add(speaker)
            date = said_on(m.created_at)
            day = said_day(m.created_at)
            for sentence in _sentences(content):
                if not summary.goal and m.role == "user" and not summary.lines \
                        and GOAL.search(sentence):
                    summary.goal = _shorten(sentence, GOAL_MAX)
                    continue
                line = _line(sentence, speaker, m.role, date, day, speakers)
                if line is not None:
                    _add(summary.lines, line)
        # How many messages a line stands for: the earlier ones share the messages before
        # this batch, the new ones share the batch. Ties are thinned where lines stand for
        # the fewest, so one long day is covered evenly too.
        earlier = max(1, messages[0].seq - 1) / old if messages and old else 1.0
        later = len(messages) / max(1, len(summary.lines) - old)
        spans = {id(ln): earlier if i < old else later for i, ln in enumerate(summary.lines)}
        return self._fit(summary, max_tokens, spans=spans)

    def shrink(self, summary: str, max_tokens: int) -> str:
        """``summary`` within ``max_tokens``, re-summarized the same way: every date keeps
        its most informative lines, so coverage stays even over the whole conversation."""
        return _shrink(self, summary, max_tokens)

    def _fit(self, summary: _Summary, max_tokens: int, real: int | None = None,
             spans: dict[int, float] | None = None) -> str:
        """Render ``summary`` within ``max_tokens``. While it is too long, the date holding
        the most tokens gives up its line that adds the least per token (its words, each
        shared with the other lines that have it): first compressed to its specific words,
        then dropped. A date keeps its last line while another date has two or more.
        Among lines about as informative, the one standing for the fewest messages
        (``spans``, by ``id``; one each by default) goes, its share passing to a neighbour.
        ``real``: the tokens ``summary`` has as rendered now, when the caller knows."""
        span = spans if spans is not None else {}
        files = _fit_files(summary, int(max_tokens * FILES_SHARE))
        groups: dict[str, list[_Line]] = {}
        for ln in summary.lines:
            groups.setdefault(ln.date, []).append(ln)
        # Sizes are estimated from characters, scaled so the whole matches the real count.
        if real is None:
            text = _render(summary.goal, files, groups)
            real = self._count(text)
            if real <= max_tokens:
                return text
        sizes = {d: _group_size(d, g) for d, g in groups.items()}
        scale = real / max(1.0, sum(sizes.values()))
        target = max_tokens / scale
        compressed: set[int] = set()
        if real > 2 * max_tokens:  # most lines end compressed anyway: compress them all now
            for ln in summary.lines:
                compressed.add(id(ln))
                short = _compress(ln.text)
                if short and len(short) < len(ln.text) * 0.85:
                    ln.text = short
            sizes = {d: _group_size(d, g) for d, g in groups.items()}
        total = float(sum(sizes.values()))
        counts: Counter[str] = Counter()
        where: dict[str, set[int]] = {}  # content word -> the lines that have it
        for ln in summary.lines:
            words = _content(ln.text)
            counts.update(words)
            for w in words:
                where.setdefault(w, set()).add(id(ln))
        density: dict[int, float] = {}

        def value(ln: _Line) -> float:
            key = id(ln)
            if key not in density:
                density[key] = _density(ln, counts)
            return density[key]

        def forget(ln: _Line) -> None:
            for w in _content(ln.text):
                counts[w] -= 1
                holders = where.get(w, set())
                holders.discard(id(ln))
                for other in holders:
                    density.pop(other, None)
            density.pop(id(ln), None)

        while True:
            if total <= target:
                text = _render(summary.goal, files, groups)
                real = self._count(text)
                if real <= max_tokens:
                    return text
                target -= (real - max_tokens) / scale + 1
            if not groups:
                return self.tokenizer.cap(_render(summary.goal, files, groups), max_tokens,
                                          "the archive")
            date = max(groups, key=lambda d: (len(groups[d]) > 1, sizes[d], d == ""))
            if len(groups[date]) == 1:  # every date is down to one line
                date = _least_missed(groups, lambda d: value(groups[d][0]))
            group = groups[date]
            i = _thinnest(group, [value(x) for x in group], span)
            ln = group[i]
            short = _compress(ln.text) if id(ln) not in compressed else ln.text
            compressed.add(id(ln))
            forget(ln)
            if short and short != ln.text and len(short) < len(ln.text) * 0.85:
                ln.text = short
                for w in _content(short):
                    counts[w] += 1
                    where.setdefault(w, set()).add(id(ln))
            else:
                group.pop(i)
                if group:  # its messages are now stood for by the nearer-spanned neighbour
                    near = [j for j in (i - 1, i) if 0 <= j < len(group)]
                    j = min(near, key=lambda k: span.get(id(group[k]), 1.0))
                    span[id(group[j])] = span.get(id(group[j]), 1.0) + span.get(id(ln), 1.0)
            before = sizes.pop(date)
            if group:
                sizes[date] = _group_size(date, group)
            else:
                del groups[date]
            total += sizes.get(date, 0) - before

    def _count(self, text: str) -> int:
        return _cached_count(self.tokenizer, text)


@functools.lru_cache(maxsize=256)
def _shrink(summarizer: ExtractiveSummarizer, summary: str, max_tokens: int) -> str:
    """``ExtractiveSummarizer.shrink``, remembered: reads shrink the same summary again and
    again until the next compaction changes it."""
    real = summarizer._count(summary)
    if real <= max_tokens:
        return summary
    return summarizer._fit(_parse(summary), max_tokens, real)


@functools.lru_cache(maxsize=16384)
def _cached_count(tokenizer: Tokenizer, text: str) -> int:
    return tokenizer.count(text)


# --- the summary's text ---------------------------------------------------------------------
# A date heading, a line ("- speaker (kind): text"), and the section headings of older
# versions of this format.
_HEADING = re.compile(r"^(\d{1,2} [A-Z][a-z]+ \d{4}):$")
_LINE = re.compile(r"^- (?:([^:()\n]{1,40}?)(?: \((decision|open)\))?: |\((decision|open)\): )?(.+)$")
_OLD_HEADING = re.compile(r"^(Discussed|Decisions|Facts|Files|Open items|Goal):\s*(.*)$")


def parse_summary(text: str) -> dict[str, list[str]]:
    """The summary's lines by section (see ``SECTIONS``): the goal, each line's
    ``speaker: text`` by its kind, and the file paths."""
    s = _parse(text)
    sections: dict[str, list[str]] = {name: [] for name in SECTIONS}
    if s.goal:
        sections["Goal"].append(s.goal)
    sections["Files"].extend(s.files)
    for ln in s.lines:
        sections[KINDS[ln.kind]].append(f"{ln.speaker}: {ln.text}" if ln.speaker else ln.text)
    return sections


def _parse(text: str) -> _Summary:
    """The summary this module rendered (also the previous versions' section format and
    free text, kept as undated lines)."""
    summary = _Summary("", [], [])
    date, old_kind = "", "fact"
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("[... "):
            continue
        heading = _HEADING.match(line)
        if heading:
            date, old_kind = heading.group(1), "fact"
            continue
        old = _OLD_HEADING.match(line)
        if old:
            name, rest = old.groups()
            if name == "Goal":
                summary.goal = rest
            elif name == "Files":
                summary.files.extend(p.strip() for p in rest.split(", ") if p.strip())
                old_kind = "fact" if rest else "files"  # "Files:" then one path a line: old
            else:
                date = ""
                old_kind = {"Decisions": "decision", "Open items": "open"}.get(name, "fact")
            continue
        if old_kind == "files" and line.startswith("- "):
            summary.files.append(line[2:].strip())
            continue
        m = _LINE.match(line)
        if m is None:
            summary.lines.append(_Line(date, "", old_kind, line))
            continue
        speaker, kind, body = m.group(1) or "", m.group(2) or m.group(3) or old_kind, m.group(4)
        for part in body.split("; "):
            if part.strip():
                summary.lines.append(_Line(date, speaker, kind, part.strip()))
    return summary


def _render_head(goal: str, files: Sequence[str]) -> str:
    head = f"Goal: {goal}\n" if goal else ""
    return head + (f"Files: {', '.join(files)}\n" if files else "")


def _render_line(ln: _Line, text: str | None = None) -> str:
    tag = f"({ln.kind})" if ln.kind != "fact" else ""
    who = f"{ln.speaker} {tag}: " if ln.speaker and tag else f"{ln.speaker or tag}: " \
        if ln.speaker or tag else ""
    return f"- {who}{ln.text if text is None else text}\n"


def _render(goal: str, files: Sequence[str], groups: dict[str, list[_Line]]) -> str:
    """Undated lines first, then dates in time order; a speaker's consecutive lines of one
    kind share one line, joined by "; "."""
    out = [_render_head(goal, files)]
    for date in sorted(groups, key=_date_key):
        if date:
            out.append(f"{date}:\n")
        joined: dict[tuple[str, str], _Line] = {}
        for ln in groups[date]:
            key = (ln.speaker, ln.kind)
            if ln.speaker and key in joined:
                joined[key] = _Line(date, ln.speaker, ln.kind, f"{joined[key].text}; {ln.text}")
            else:
                joined[key if ln.speaker else (str(id(ln)), "")] = ln
        out.extend(_render_line(ln) for ln in joined.values())
    return "".join(out).rstrip("\n")


def _fit_files(summary: _Summary, room: int) -> list[str]:
    """The newest paths whose list fits ``room`` tokens, in the order they came."""
    files = [p for p in summary.files if not FRAMEWORK.fullmatch(p)]
    kept: list[str] = []
    used = 0
    for path in reversed(files):
        cost = _approx_tokens(path) + 1
        if used + cost > room:
            break
        kept.append(path)
        used += cost
    return kept[::-1]


def _thinnest(group: list[_Line], values: list[float], span: dict[int, float]) -> int:
    """The line of ``group`` to give up: among those within a quarter of the least value
    per token, the one that with its nearer neighbour stands for the fewest messages."""
    floor = min(values) * 1.25 + 1e-9
    spans = [span.get(id(ln), 1.0) for ln in group]

    def crowd(j: int) -> float:
        near = [spans[k] for k in (j - 1, j + 1) if 0 <= k < len(group)]
        return spans[j] + min(near, default=0.0)

    return min((j for j in range(len(group)) if values[j] <= floor),
               key=lambda j: (crowd(j), values[j]))


def _least_missed(groups: dict[str, list[_Line]], value: Callable[[str], float]) -> str:
    """The date to let go when every date is down to one line: the one whose neighbours are
    closest in time (the dates around it cover its stretch), the less informative first;
    the first and the last date and the undated lines go last."""
    dates = sorted((d for d in groups if d), key=_date_key)
    if len(dates) <= 2:
        return max(groups, key=lambda d: (d != "", -value(d))) if dates else next(iter(groups))
    keys = [_date_key(d)[1] for d in dates]
    last = len(dates) - 1

    def missed(j: int) -> tuple[float, float, float]:
        wide = keys[min(last, j + 2)] - keys[max(0, j - 2)]
        return keys[j + 1] - keys[j - 1], wide, value(dates[j])

    return dates[min(range(1, last), key=missed)]


@functools.lru_cache(maxsize=4096)
def _date_key(date: str) -> tuple[int, float]:
    if not date:
        return (0, 0.0)
    try:
        return (1, dt.datetime.strptime(date, "%d %B %Y").timestamp())
    except ValueError:
        return (1, 0.0)


# --- sentences ------------------------------------------------------------------------------
def split_speaker(role: str, content: str) -> tuple[str, str]:
    """Who said ``content``: a leading "Name: " (imported multi-party chats) or the role."""
    m = SPEAKER.match(content)
    if m and not any(_common(w) or w.lower() in LABEL_WORDS for w in m.group(1).split()):
        return m.group(1), content[m.end():]
    return role, content


def _sentences(text: str) -> list[str]:
    prose = FENCE.sub("\n", text)
    return [s for line in prose.splitlines() for s in map(str.strip, SENTENCE_END.split(line))
            if len(s) > 3]


def _line(sentence: str, speaker: str, role: str, date: str, day: dt.date,
          speakers: set[str]) -> _Line | None:
    """The summary line for ``sentence``, or None when it is small talk."""
    explicit_open = bool(EXPLICIT_OPEN.search(sentence))
    question = bool(QUESTION.search(sentence))
    decision = bool(DECISION.search(sentence)) and not question
    text = _clean(sentence)
    text = _resolve_dates(text, day)
    if not text:
        return None
    value = _value(text, speakers)
    technical = _specific_count(text, speakers, technical_only=True)
    if question and not explicit_open and not technical:
        return None  # a question back to the other person: the answer carries the fact
    kind = "open" if explicit_open or question else "decision" if decision else "fact"
    words = WORD.findall(text)
    if len(words) < 3 and not technical and not CJK.search(text):
        return None  # "Phew!", "Spill the beans!", a name called out
    if kind == "fact" and value < 3.0:
        return None
    known = {sp.lower() for sp in speakers}
    if not any(w not in TIME_WORDS and w not in known and not _technical(w)
               for w in _content(text)) and not PATH.search(text):
        return None  # only a date, a number or a name: nothing said about them
    if role == "system" and kind == "fact" and \
            len([w for w in _content(text) if w not in TIME_WORDS and not _technical(w)]) < 3:
        return None  # a time stamp or a session marker: the date heading says it
    if kind != "fact" and value < 1.0:
        return None
    return _Line(date, speaker, kind, _shorten(text.rstrip(".")))


def _clean(sentence: str) -> str:
    """``sentence`` without leading interjections, vocatives and filler words."""
    text = " ".join(sentence.split())
    for _ in range(6):
        new = LEAD.sub("", text)
        new = CALLED_OUT.sub("", new) if new != text else new  # "Caroline! "
        if new == text:
            break
        text = new
    text = VOCATIVE.sub(r"\1", text)  # "..., Mel!" at the end: said to someone, no fact
    text = FILLER.sub("", text)
    text = SELF.sub("", text)
    text = ARTICLE.sub("", text)
    text = SPACES.sub(lambda m: m.group(1) or " ", text).strip(" ,;:-–—")
    return text if WORD.search(text) else ""


def _resolve_dates(text: str, day: dt.date) -> str:
    """Relative dates ("yesterday", "last Saturday", "last year", "2 weeks ago") replaced by
    the date they mean, counted from the day the message was written."""

    def sub(m: re.Match[str]) -> str:
        word, rel, wd, rel2, unit2, n, unit = m.groups()
        if word:
            w = word.lower()
            if w == "today" or w == "tonight" or w == "this morning":
                return m.group(0)
            delta = {"yesterday": -1, "last night": -1, "tomorrow": 1}[w]
            return f"on {_day_text(day + dt.timedelta(days=delta), day)}"
        if rel:
            target = WEEKDAY_ABBR.get(wd.lower().rstrip("."))
            if target is None:
                target = WEEKDAYS.index(wd.lower())
            if rel.lower() in ("last", "this past"):
                back = (day.weekday() - target) % 7 or 7
                return f"on {wd.capitalize()} {_day_text(day - dt.timedelta(days=back), day)}"
            ahead = (target - day.weekday()) % 7 or 7
            return f"on {wd.capitalize()} {_day_text(day + dt.timedelta(days=ahead), day)}"
        if rel2:
            step = {"last": -1, "this": 0, "next": 1}[rel2.lower()]
            if unit2.lower() in ("week", "weekend"):
                if not step:
                    return m.group(0)  # "this week": the heading's date says which
                where = "before" if step < 0 else "after"
                return f"the {unit2.lower()} {where} {_day_text(day, day)}"
            if unit2.lower() == "year":
                return f"in {day.year + step}"
            month = day.month - 1 + step
            first = dt.date(day.year + month // 12, month % 12 + 1, 1)
            return f"in {first:%B %Y}"
        count = int(n) if n.isdigit() else NUMBER_WORDS.get(n.lower(), 1)
        u = unit.lower().rstrip("s")
        if u == "day":
            return f"on {_day_text(day - dt.timedelta(days=count), day)}"
        if u == "week":
            return f"around {_day_text(day - dt.timedelta(weeks=count), day)}"
        if u == "month":
            month = day.month - 1 - count
            first = dt.date(day.year + month // 12, month % 12 + 1, 1)
            return f"around {first:%B %Y}"
        return f"in {day.year - count}"

    return RELATIVE_DATE.sub(sub, text)


def _day_text(d: dt.date, today: dt.date) -> str:
    return f"{d.day} {d:%B}" if d.year == today.year else f"{d.day} {d:%B %Y}"


# --- how much a line says -------------------------------------------------------------------
@functools.lru_cache(maxsize=16384)
def _base(word: str) -> str:
    """``word`` lower-cased without a contraction ("haven't" → "have", "how're" → "how")."""
    lw = word.lower().replace("’", "'").strip(".'")
    if lw in COMMON_WORDS:
        return lw
    stem = CONTRACTION.sub("", lw)
    return stem if stem else lw


def _common(word: str) -> bool:
    return _base(word) in COMMON_WORDS


@functools.lru_cache(maxsize=16384)
def _content(text: str) -> frozenset[str]:
    """The lower-cased words of ``text`` that carry content (not function or chat words)."""
    return frozenset(w for w, _ in _features(text)[0])


@functools.lru_cache(maxsize=16384)
def _names(text: str) -> frozenset[str]:
    """Capitalized words that are not common words and do not just start a sentence."""
    starts = {m.start(1) for m in SENTENCE_START.finditer(text)}
    return frozenset(m.group(0).strip(".'’") for m in WORD.finditer(text)
                     if m.group(0)[0].isupper() and len(m.group(0)) > 1
                     and m.start() not in starts and not _common(m.group(0)))


@functools.lru_cache(maxsize=65536)
def _technical(word: str) -> bool:
    """A number, version, path, identifier or acronym: specific whatever the context."""
    w = word.strip(".'’")
    return any(c.isdigit() for c in w) or (len(w) > 1 and (
        "/" in w or "_" in w or "." in w or any(c.isupper() for c in w[1:])))


@functools.lru_cache(maxsize=16384)
def _word_weight(word: str) -> float:
    """Two for a number, name, acronym, version or path; one for another content word; a
    CJK run counts by its length."""
    if CJK.search(word):
        return min(4.0, 0.5 * len(word))
    if any(c.isdigit() for c in word) or "/" in word or "_" in word or "." in word.strip("."):
        return 2.0
    if word in GENERIC_WORDS:
        return 0.5
    return 1.0 if len(word) > 2 else 0.5


@functools.lru_cache(maxsize=65536)
def _specific_word(w: str) -> bool:
    return _technical(w) or (len(w) >= 4 and bool(CJK.search(w)))


def _specific_count(text: str, speakers: Iterable[str], technical_only: bool = False) -> int:
    """How many technical words (and, unless ``technical_only``, names other than the
    speakers') ``text`` has; a long CJK run counts as one."""
    known = {s.lower() for s in speakers}
    n = sum(1 for w in WORD.findall(text) if _specific_word(w))
    if not technical_only:
        n += sum(1 for w in _names(text) if w.lower() not in known and not _technical(w))
    return n


def _value(text: str, speakers: Iterable[str] = ()) -> float:
    """What ``text`` says: its content words' weights, a name or number counting double."""
    known = {s.lower() for s in speakers}
    total = sum(_word_weight(w) for w in _content(text) if w not in known)
    return total + sum(1.0 for w in _names(text) if w.lower() not in known)


_KIND_BONUS = {"decision": 2.0, "open": 1.0, "fact": 0.0}


def _density(ln: _Line, counts: Counter[str]) -> float:
    """What keeping ``ln`` adds per token: its content words, each shared with the lines that
    also have it, plus a bonus for decisions and open items."""
    features, tokens = _features(ln.text)
    value = _KIND_BONUS[ln.kind] + sum(w / (counts[word] or 1) for word, w in features)
    if ln.speaker == "system":
        value *= 0.5
    return value / (tokens + 3)


@functools.lru_cache(maxsize=16384)
def _features(text: str) -> tuple[tuple[tuple[str, float], ...], int]:
    """(each content word with its weight, a name counting one more; about the tokens)."""
    weights: dict[str, float] = {}
    for m in WORD.finditer(text):
        word = m.group(0)
        base = _base(word)
        if not base or base in COMMON_WORDS:
            continue
        w = _word_weight(base)
        if word[0].isupper() and len(word) > 1 and not _sentence_start(text, m.start()):
            w += 1.0
        weights[base] = max(w, weights.get(base, 0.0))
    return tuple(weights.items()), _approx_tokens(text)


def _sentence_start(text: str, i: int) -> bool:
    j = i - 1
    while j >= 0 and text[j] == " ":
        j -= 1
    return j < 0 or text[j] in ".!?;:-"


@functools.lru_cache(maxsize=16384)
def _approx_tokens(text: str) -> int:
    """About the tokens of ``text``: four characters of ASCII, or one other character."""
    wide = len(text) - len(text.encode("ascii", "ignore"))
    return max(1, (len(text) - wide + 3) // 4 + wide)


def _group_size(date: str, group: list[_Line]) -> int:
    """About the tokens ``group`` renders to (see ``_render``)."""
    size = 5 if date else 0
    keys = set()
    for ln in group:
        size += _approx_tokens(ln.text) + 1
        key = (ln.speaker, ln.kind)
        if key not in keys or not ln.speaker:
            keys.add(key)
            size += _approx_tokens(ln.speaker) + (4 if ln.kind != "fact" else 2)
    return size


@functools.lru_cache(maxsize=16384)
def _compress(text: str) -> str:
    """``text`` cut to its specific words (and negations), in order: the re-summarized
    form of a line when the summary needs the room."""
    if CJK.search(text):
        return text
    words: list[str] = []
    for w in text.replace(";", ",").split():
        bare = w.strip(",.!?:;()[]\"'’“”")
        lw = bare.lower()
        if not bare or (words and words[-1].lower() == lw):
            continue
        if lw in KEEP_IN_SHORT or bare in MONTHS or (lw not in FUNCTION_WORDS and lw not in CHAT_WORDS):
            words.append(bare)
    return " ".join(words)


def _shorten(text: str, limit: int = MAX_SENTENCE) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@functools.lru_cache(maxsize=16384)
def _specifics(text: str) -> frozenset[str]:
    """The words that make a line worth having: numbers, names, paths."""
    return frozenset({w for w in WORD.findall(text)
                      if any(c.isdigit() for c in w) or (w[0].isupper() and not w.isupper()
                                                         and w.lower() not in COMMON_WORDS)}
                     | set(PATH.findall(text)))


@functools.lru_cache(maxsize=16384)
def _words_of(text: str) -> frozenset[str]:
    return frozenset(w.lower() for w in WORD.findall(text))


def _add(lines: list[_Line], line: _Line) -> None:
    """Append unless a kept line already says the same: mostly the same words and no number,
    name or path that the kept line lacks (so a changed value is never lost as a repeat)."""
    text = line.text
    if not text or any(ln.text == text for ln in lines):
        return
    words = _words_of(text)
    if len(words) >= 4:
        new = _specifics(text)
        for item in lines[-200:]:
            seen = _words_of(item.text)
            if len(words & seen) >= 0.5 * len(words | seen) and new <= _specifics(item.text):
                return
    lines.append(line)
