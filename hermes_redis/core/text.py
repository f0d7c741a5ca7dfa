"""The search language, once for the whole package: how text becomes terms (letters and
digits, CJK characters one by one and in pairs, crude English stems, stop words), what a
query asks for, the day a query names, and BM25 over a few rows."""

from __future__ import annotations

import datetime
import itertools
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from hermes_redis.core.errors import ValidationError
from hermes_redis.core.models import SearchHit

# The one CJK rule of the package: Han ideographs (extension A, unified, compatibility), the
# kana and the Hangul syllables. Summaries and extracted facts read text by it too.
HAN_CHARS = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
CJK_CHARS = f"\u3040-\u30ff{HAN_CHARS}\uac00-\ud7af"
CJK = re.compile(f"[{CJK_CHARS}]")  # one CJK character
# CJK text has no spaces between words; index each character so any substring is a phrase.
_CJK = re.compile(f"([{CJK_CHARS}])")
# What _TOKENS finds in fts_text(text), in one pass: a run of letters and digits other than
# CJK characters, or one CJK character.
_FTS_TOKEN = re.compile(f"[^\\W_{CJK_CHARS}]+|[{CJK_CHARS}]")


# A query's cost is bounded (issue 35): each door (search, recall, memory search, MCP) takes
# at most MAX_QUERY_BYTES of query text (more is a ValidationError: HTTP 422) and keeps its
# first MAX_QUERY_TERMS distinct terms (tokens: letter/digit runs, CJK characters); words
# repeated count once and the terms past the cap are dropped without a word.
MAX_QUERY_BYTES = 4096
MAX_QUERY_TERMS = 32
# Recall's index keeps a term's first 64 characters: a 1 MB token (a hash dump, minified
# code) is one bounded row, within PostgreSQL's btree limit of about 2.7 KB a key.
MAX_INDEX_TERM = 64


def check_query(query: object, name: str = "query") -> str:
    """``query`` as every door searches it: its words each once (case-insensitively, in
    order), cut after MAX_QUERY_TERMS terms (a word that would pass the cap keeps its first
    tokens). A ValidationError for a non-string or over MAX_QUERY_BYTES."""
    if not isinstance(query, str):
        raise ValidationError(f"{name} must be text, not {type(query).__name__}")
    size = len(query.encode("utf-8", "surrogatepass"))
    if size > MAX_QUERY_BYTES:
        raise ValidationError(f"{name} is {size} bytes, over the limit of {MAX_QUERY_BYTES}: "
                              "ask with fewer words")
    words: list[str] = []
    seen: set[str] = set()
    terms = 0
    for word in query.split():
        key = word.lower()
        if key in seen:
            continue
        seen.add(key)
        tokens = list(_FTS_TOKEN.finditer(word))
        if terms + len(tokens) > MAX_QUERY_TERMS:
            room = MAX_QUERY_TERMS - terms
            if room > 0:
                words.append(word[: tokens[room - 1].end()])
            break
        terms += len(tokens)
        words.append(word)
    return " ".join(words)


def fts_text(text: str) -> str:
    return _CJK.sub(r" \1 ", text)


def fts_tokens(text: str) -> list[str]:
    """The tokens FTS5 indexes ``text`` under (unicode61 with each CJK character on its own,
    as ``fts_text`` spaces them), lower-cased."""
    return _FTS_TOKEN.findall(text.lower())


def _spaced(tokens: list[str]) -> str:
    """Tokens as one string, each after a space: a phrase's tokens, the last one a prefix,
    occur in order in a text exactly where ``_spaced(phrase)`` is a substring of
    ``_spaced(text)`` (tokens hold no spaces), so ``str.find`` does the scan in C."""
    return " " + " ".join(tokens)


def fts_query(query: str) -> str:
    """Each word of the query as a quoted prefix phrase (``auth`` finds "authentication",
    as the hot-tier scan does); user text is never FTS syntax."""
    phrases = []
    for word in query.split():
        parts = [p.replace('"', '""') for p in fts_text(word).split()]
        if parts and _TOKENS.search(word):  # a word of punctuation only has nothing to match
            phrases.append('"' + " ".join(parts) + '"*')
    return " AND ".join(phrases)


def fts_terms(texts: Iterable[str]) -> set[str]:
    """The terms FTS5's unicode61 indexes ``texts`` under, as ``fts_terms`` keeps them: each
    token lower-cased, and also without its diacritics (unicode61 removes them from Latin
    letters), so a prefix lookup finds every term the index may hold for it."""
    words = " ".join(set(" ".join(texts).split()))  # each word once: tokens never span a space
    if words.isascii():  # the common case, in C: bytes.translate then split
        return {t.decode() for t in set(words.encode().translate(_ASCII_TOKEN_BYTES).split())}
    out = set(fts_tokens(words))
    out.update([plain for plain in map(_without_diacritics, out) if plain])
    return out


# ASCII letters and digits lower-cased, every other byte a space: what _TOKENS finds in ASCII
_ASCII_TOKEN_BYTES = bytes(c if chr(c).isalnum() else 32 for c in range(256)).lower()


def _without_diacritics(token: str) -> str:
    if token.isascii():
        return token
    return "".join(c for c in unicodedata.normalize("NFD", token) if not unicodedata.combining(c))


def expanded_match(query: str, terms_with_prefix: Callable[[str], list[str] | None]) -> str:
    """``fts_query(query)`` with each phrase's final prefix replaced by the exact terms
    ``terms_with_prefix(prefix)`` returns (None: too many, keep the prefix query). An ASCII
    prefix only: unicode61 folds other letters in ways a lookup would have to copy. The
    same rows match either way; '' when some word can match nothing."""
    phrases = []
    for word in query.split():
        tokens = fts_tokens(word)
        if not tokens:
            continue
        head, last = tokens[:-1], tokens[-1]
        terms = terms_with_prefix(last) if last.isascii() else None
        if terms is None:
            phrases.append('"' + " ".join(tokens) + '"*')
        elif not terms:
            return ""
        else:
            phrases.append("(" + " OR ".join('"' + " ".join([*head, t]) + '"' for t in terms)
                           + ")")
    return " AND ".join(phrases)


def fts_matches(query: str, text: str) -> bool:
    """Whether the archive's ``MATCH fts_query(query)`` would find ``text``: every query
    word's tokens appear consecutively in it, the last as a prefix (unicode61: lower-cased
    runs of letters and digits, each CJK character on its own). The hot tier's search uses
    it, so a message gives the same hits before and after it is archived."""
    wants = [_spaced(w) for w in map(fts_tokens, query.split()) if w]
    if not wants:
        return False  # fts_query(query) is empty: the archive finds nothing either
    spaced = _spaced(fts_tokens(text))
    return all(want in spaced for want in wants)


_TOKENS = re.compile(r"[^\W_]+")


def ranked_hits(query: str, rows: Sequence[Mapping[str, Any]], limit: int) -> list[SearchHit]:
    """The best ``limit`` of ``rows`` (messages that match ``query``, with their session's
    title) by BM25 over the rows themselves: a query word said more often, in a shorter
    message, ranks higher; ties newest first (``rows`` come newest first). Both archives
    rank a search this way, so they give the same hits in the same order."""
    wants = [_spaced(w) for w in map(fts_tokens, query.split()) if w]
    docs = [fts_tokens(r["content"]) for r in rows]
    if not docs or not wants:
        return []
    k1, b = 1.2, 0.75
    mean = sum(map(len, docs)) / len(docs) or 1.0
    scores: list[tuple[float, int]] = []
    for i, tokens in enumerate(docs):
        norm = k1 * (1 - b + b * len(tokens) / mean)
        spaced = _spaced(tokens)
        score = 0.0
        for want in wants:
            tf = _occurrences(spaced, want)
            score += tf * (k1 + 1) / (tf + norm)
        scores.append((-score, i))
    return [SearchHit(rows[i]["session_id"], rows[i]["seq"], rows[i]["role"],
                      snippet(rows[i]["content"], query), rows[i]["title"] or "", -neg)
            for neg, i in sorted(scores)[:limit]]


def _occurrences(spaced: str, want: str) -> int:
    """How many times ``want`` occurs in ``spaced``, overlapping ones too ("a a" is twice
    in "a a a", as the token scan counted it)."""
    count, at = 0, spaced.find(want)
    while at >= 0:
        count += 1
        at = spaced.find(want, at + 1)
    return count


T = TypeVar("T")


def relevant(items: Sequence[T], query: str, key: Callable[[T], str]) -> list[T]:
    """``items`` sharing a distinctive word with ``query`` (``recall_terms``), most shared
    first, ties in their order: how memories are ranked for a query, in Python (few)."""
    words = [t.strip('"*').replace(" ", "") for t in recall_terms(query)]
    scored = [(sum(1 for w in words if fts_matches(w, key(item))), i, item)
              for i, item in enumerate(items)]
    return [item for score, _, item in sorted(scored, key=lambda s: (-s[0], s[1])) if score]


# Words too common to say what a question is about (BM25 would weigh them low anyway, but
# each would make every message a candidate). The package's one stop-word list: the
# summarizer adds its own words to it as data beside it (context/summarizers/rules.py).
_STOP_WORDS = """
a about after again all also am an and any are as at be been before being but by can could
did do does doing done for from had has have having he her here hers him his how i if in into
is it its just me more most my no not now of on once only or other our out over own same she
should so some such than that the their them then there these they this those through to too
under until up very was we were what when where which while who whom why will with would you
your yours tell know think ever still much many get got go went say said like one way"""
STOP_WORDS = frozenset(_STOP_WORDS.split())
_WORDS = re.compile(r"[^\W_]+")


_SUFFIXES = ("ing", "ed", "es", "s", "ly", "er")


def _stem(word: str) -> str:
    """A crude English stem for a prefix match: "researched" and "researching" both give
    "research"; the stem keeps at least four letters."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[: -len(suffix)]
    return word


_MONTH = ("january", "february", "march", "april", "may", "june", "july", "august",
          "september", "october", "november", "december")
_MONTHS = {name: i for i, m in enumerate(_MONTH, 1) for name in (m, m[:3])}
_MONTH_RE = "(" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DATES = (  # (pattern, group order as day, month, year)
    (re.compile(r"\b(\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?" + _MONTH_RE + r",?\s+(\d{4})\b", re.I),
     (1, 2, 3)),
    (re.compile(r"\b" + _MONTH_RE + r"\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})\b", re.I), (2, 1, 3)),
    (re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})(?!\d)"), (3, 2, 1)),  # and 2023-10-13T09:30
    (re.compile(r"(\d{4})\s*年\s*(\d{1,2})\s*月\s*(\d{1,2})\s*[日号]"), (3, 2, 1)),
)
_DAYS_AGO = (  # (pattern, days before today; None: the number the pattern holds)
    (re.compile(r"\b(?:the )?day before yesterday\b|前天", re.I), 2),
    (re.compile(r"\byesterday\b|昨天|昨日", re.I), 1),
    (re.compile(r"\btoday\b|今天|今日", re.I), 0),
    (re.compile(r"\b(\d{1,3}) days? ago\b|(\d{1,3})\s*天(?:以)?前", re.I), None),
)
DAY = 86_400


def named_day(query: str, now: float | None = None) -> tuple[float, float] | None:
    """The span of the first day ``query`` names as Unix seconds, a day wider on each side
    (the archive keeps UTC, the user meant their own day): a calendar date ("13 October
    2023", "October 13, 2023", "2023-10-13", "2023年10月13日") or, given ``now``, a day
    counted back from it ("today", "yesterday", "3 days ago", "昨天", "3天前"). None when
    it names no valid day."""
    found: list[tuple[int, datetime.date]] = []
    for pattern, (d, m, y) in _DATES:
        match = pattern.search(query)
        if match is None:
            continue
        month = match.group(m)
        try:
            found.append((match.start(), datetime.date(
                int(match.group(y)), int(month) if month.isdigit() else _MONTHS[month.lower()],
                int(match.group(d)))))
        except ValueError:  # 31 February, month 13
            continue
    if now is not None:
        today = datetime.datetime.fromtimestamp(now, datetime.UTC).date()
        for pattern, back in _DAYS_AGO:
            match = pattern.search(query)
            if match is not None:
                days = back if back is not None else int(match.group(1) or match.group(2))
                found.append((match.start(), today - datetime.timedelta(days=days)))
    if not found:
        return None
    day = min(found)[1]
    start = datetime.datetime.combine(day, datetime.time(), datetime.UTC).timestamp()
    return start - DAY, start + 2 * DAY


def recall_terms(query: str) -> list[str]:
    """The query's distinctive words as FTS5 terms: a prefix match for words of four letters
    or more (``paint`` finds "painting"), CJK runs as overlapping character pairs. At most
    MAX_QUERY_TERMS of them, the first: a recall by a whole long message (the default query)
    costs what a short question does."""
    terms: list[str] = []
    for word in _WORDS.finditer(query):
        if len(terms) >= 4 * MAX_QUERY_TERMS:  # enough to find MAX_QUERY_TERMS distinct
            terms = list(dict.fromkeys(terms))
            if len(terms) >= MAX_QUERY_TERMS:
                break
        terms += _word_terms(word.group().lower())
    return list(dict.fromkeys(terms))[:MAX_QUERY_TERMS]


def _word_terms(word: str) -> list[str]:
    """One lower-cased word's recall terms (a long CJK run: its first pairs only)."""
    chars = _CJK.findall(word)
    if chars:
        latin = _CJK.sub(" ", word).split()
        pairs = [f"{a} {b}" for a, b in itertools.pairwise(chars[: 4 * MAX_QUERY_TERMS])] or chars
        return ([f'"{p}"' for p in pairs]
                + [f'"{w}"' + ("*" if len(w) >= 4 else "") for w in latin if w not in STOP_WORDS])
    if word not in STOP_WORDS and (len(word) > 1 or word.isdigit()):
        stem = _stem(word)
        return [f'"{stem}"' + ("*" if len(stem) >= 4 else "")]
    return []



# issue 31: recall's own index, keyed by session, so one session's recall reads that
# session's postings only, whatever else the archive holds.
def recall_index_terms(text: str) -> tuple[dict[str, int], int]:
    """The terms ``text`` is indexed under for recall, with how often each occurs, and the
    text's length in tokens: each token lower-cased and without diacritics (as unicode61
    folds them), and each two adjacent CJK characters as one term ``"a b"`` (what
    ``recall_terms`` asks for a CJK run)."""
    tokens = [_without_diacritics(t)[:MAX_INDEX_TERM] for t in fts_tokens(text)]
    counts: dict[str, int] = {}
    for token in tokens:
        if token:
            counts[token] = counts.get(token, 0) + 1
    for a, b in itertools.pairwise(tokens):
        if len(a) == 1 and len(b) == 1 and CJK.match(a) and CJK.match(b):
            pair = f"{a} {b}"
            counts[pair] = counts.get(pair, 0) + 1
    return counts, len(tokens)


def recall_index_key(term: str) -> tuple[str, bool]:
    """One ``recall_terms`` term as the index looks it up: (the folded term, whether any
    indexed term starting with it matches). A term longer than the index keeps is looked
    up by the part it keeps."""
    folded = _without_diacritics(term.strip('"*').lower())
    if len(folded) > MAX_INDEX_TERM:
        return folded[:MAX_INDEX_TERM], True
    return folded, term.endswith("*")


def snippet(text: str, query: str, width: int = 80) -> str:
    """A window of ``text`` around the first query word, on one line."""
    flat = " ".join(text.split())
    lowered = flat.lower()
    positions = [lowered.find(w.lower()) for w in query.split()]
    hits = [p for p in positions if p >= 0]
    at = min(hits) if hits else 0
    start = max(0, at - width // 3)
    piece = flat[start : start + width]
    return ("…" if start else "") + piece + ("…" if start + width < len(flat) else "")
