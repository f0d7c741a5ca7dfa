"""Durable facts in a conversation, found offline: what a user says about themselves and
their project that later sessions should know (preferences, decisions, names, versions,
paths, conventions), and how a new fact relates to the ones already remembered.

Rules, not a model: each user sentence is matched against statement patterns in English
and Chinese; questions, hypotheticals and sentences about other people store nothing.
A fact has a ``topic`` when one can be named (the subject of "my X is …", or the category
of the technology it mentions), so a newer fact on the same topic supersedes the older.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hermes_redis.models import Message

MAX_FACT_CHARS = 300

# Technologies by what they are: two facts naming members of one category are about the
# same choice ("we use MySQL" / "no MySQL, PostgreSQL"). Lower case, matched as words.
CATEGORIES: dict[str, tuple[str, ...]] = {
    "database": ("postgresql", "postgres", "mysql", "mariadb", "sqlite", "mongodb", "oracle",
                 "sql server", "cassandra", "dynamodb", "cockroachdb", "clickhouse"),
    "language": ("python", "typescript", "javascript", "golang", "rust", "java", "kotlin",
                 "ruby", "php", "c#", "c++", "scala", "swift", "elixir"),
    "web framework": ("django", "flask", "fastapi", "rails", "express", "spring", "laravel",
                      "next.js", "nextjs", "nuxt"),
    "frontend": ("react", "vue", "angular", "svelte", "solid"),
    "package manager": ("pip", "poetry", "uv", "pipenv", "conda", "npm", "yarn", "pnpm"),
    "cloud": ("aws", "gcp", "azure", "digitalocean", "heroku", "fly.io", "vercel"),
    "queue": ("rabbitmq", "kafka", "sqs", "celery", "rq", "nats"),
    "editor": ("vim", "neovim", "emacs", "vscode", "vs code", "pycharm", "intellij"),
    "os": ("linux", "macos", "windows", "ubuntu", "debian", "fedora", "arch"),
    "test framework": ("pytest", "unittest", "jest", "vitest", "mocha"),
    "indentation": ("tabs", "spaces"),
}
_TERM = {term: cat for cat, terms in CATEGORIES.items() for term in terms}
_TERM_RE = re.compile(r"(?<![\w.+#])(" + "|".join(
    re.escape(t) for t in sorted(_TERM, key=len, reverse=True)) + r")(?![\w+#])", re.I)

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])|\n+")  # "3.12" and "a/b.toml" stay whole
_QUESTION = re.compile(
    r"[?？]\s*$|吗\s*$|^\s*(?:do|does|did|can|could|would|will|should|is|are|was|were|have|has"
    r"|what|which|who|where|when|why|how)\b", re.I)
_NOT_A_STATEMENT = re.compile(
    r"\b(?:if|whether|suppose|imagine|maybe|perhaps|might|my (?:friend|mom|mother|dad|father|"
    r"sister|brother|wife|husband|boss|colleague)|(?:he|she|they) (?:prefer|like|use|want)s?)\b"
    r"|如果|假如|也许|可能", re.I)

_EN = [re.compile(p, re.I) for p in (
    # preferences
    r"\bI (?:really |much |strongly |always |usually )?(?:prefer|like|love|hate|dislike|"
    r"enjoy|can't stand|don't like|do not like)\b(?! (?:that|it|this|these|those|how|when|your|you)\b)",
    r"\bI(?:'d| would) rather\b",
    r"\b(?:please )?(?:always|never) (?:use|write|add|put|run|call|name|format|answer|reply)\b",
    # decisions
    r"\b(?:we|I)(?:'ve| have)? (?:decided|agreed|chosen|chose|settled on|picked)\b",
    r"\blet'?s (?:go with|use|stick (?:with|to)|switch to)\b",
    r"\b(?:we|I)(?:'re| are| am)? (?:using|switching to|moving to|migrating to|going with|on)\b",
    r"\b(?:we|I) (?:use|run|deploy|build|host|write)\b",
    r"\b(?:our|the|this) (?:project|repo|repository|app|service|team|stack|codebase) "
    r"(?:uses|runs|is|lives|targets|is called|is named)\b",
    # names
    r"\bmy name is\b", r"\bcall me\b", r"\bI(?:'m| am) called\b",
    # versions, paths, conventions stated about us
    r"\b(?:my|our) [\w -]{1,40}? (?:is|are|lives|live)\b",
    r"\b(?:lives?|is|are|sits?|located|stored|kept) (?:in|at|under) (?:~|\.{1,2}|[A-Z]:)?[/\\]\w",
    r"\b(?:our|the) convention\b", r"\bwe (?:always|never|name|prefix|indent|tag|squash)\b",
)]
_ZH = re.compile(
    r"我(?:更|比较|很|最)?(?:喜欢|偏好|偏爱|讨厌|不喜欢|习惯)|我们(?:这个项目|项目)?(?:用|使用|采用|决定|选择|约定|统一)"
    r"|(?:决定|改用|换成|迁移到)|我叫|我的名字是|(?:以后|今后)(?:都|请|一律)|(?:总是|一律|永远不要|不要再?)用"
    r"|(?:项目|仓库|代码|配置)(?:在|放在|用|使用)")
_ADDITIVE = re.compile(r"\b(?:also|too|as well|both|alongside|in addition)\b|也|还", re.I)
_SUBJECT = re.compile(r"\b(?:my|our) ((?:[a-z][\w-]* ){0,3}?[a-z][\w-]*) (?:is|are)\b", re.I)
_NAME = re.compile(r"\bmy name is\b|\bcall me\b|\bI(?:'m| am) called\b|我叫|我的名字是", re.I)
_NEGATED = re.compile(r"\b(?:no|not|never|instead of|rather than|don't use|stop using|"
                      r"away from|off|from|replace|replacing)\s+(?:using\s+)?$"
                      r"|(?:不用|不要|别用|不再用|弃用|而不是|替换)\s*$", re.I)


@dataclass(frozen=True)
class Fact:
    """A durable statement and where it was said."""

    content: str
    seq: int
    topic: str | None


def sentences(text: str) -> Iterable[str]:
    for part in _SENTENCE_END.split(text):
        sentence = " ".join(part.split())
        if len(sentence) >= 4:
            yield sentence


def is_durable(sentence: str) -> bool:
    """A statement of the kind worth keeping across sessions (not a question, not a maybe)."""
    if _QUESTION.search(sentence) or _NOT_A_STATEMENT.search(sentence):
        return False
    return bool(_ZH.search(sentence)) or any(p.search(sentence) for p in _EN)


def topic_of(text: str) -> str | None:
    """What the fact is about, when it can be named: a name, the subject of "my/our X is",
    else the category of the technology it chooses (the last one not negated)."""
    if _NAME.search(text):
        return "name"
    chosen: str | None = None
    for match in _TERM_RE.finditer(text):
        before = text[max(0, match.start() - 24):match.start()]
        if not _NEGATED.search(before):
            chosen = _TERM[match.group(1).lower()]
    if chosen is None:
        terms = [_TERM[m.group(1).lower()] for m in _TERM_RE.finditer(text)]
        chosen = terms[-1] if terms else None
    if chosen is not None and not _ADDITIVE.search(text):  # "we also use Rust" replaces nothing
        return chosen
    subject = _SUBJECT.search(text)
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
    words = re.findall(r"[a-z0-9]+|[\u3400-\u9fff]", text.lower())
    return {w for w in words if len(w) > 2 or w.isdigit() or not w.isascii()}


def near_duplicate(a: str, b: str, threshold: float = 0.7) -> bool:
    """Two statements of the same fact: the same words, give or take a few."""
    wa, wb = _words(a), _words(b)
    if not wa or not wb:
        return normalized(a) == normalized(b)
    return len(wa & wb) / len(wa | wb) >= threshold
