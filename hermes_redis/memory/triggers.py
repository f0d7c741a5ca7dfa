"""Plain words that store a persistent memory: "记住：我们用 PostgreSQL", "remember that we
deploy on Fridays", "from now on, answer in English".

``trigger_fact(text)`` is the fact to remember, or None. Guarantees: a question ("你还记得
…吗", "do you remember …?") is never a trigger; a trigger with nothing after it is a
ValidationError, so the message is refused rather than stored with nothing remembered.
"""

from __future__ import annotations

import re

from hermes_redis.core.errors import ValidationError

# The phrase, then an optional separator; what follows is the fact. At the start of the
# message or of a sentence, so "I can't remember that" is not a trigger.
_START = r"(?:^|(?<=[。！？.!?\n]))\s*"
_TRIGGERS = [
    re.compile(_START + r"(?:请|麻烦)?(?:你)?(?:帮我)?(?:记住|记一下|记下来?)(?:一下)?"
               r"[：:，,、\s]*(?P<fact>.*)", re.S),
    re.compile(_START + r"(?P<fact>(?:以后都|以后一律|从现在起|从今以后).*)", re.S),
    re.compile(_START + r"(?:please\s+)?(?:remember|note|keep in mind)\s*(?:\bthat\b|:)\s*(?P<fact>.*)",
               re.S | re.I),
    re.compile(_START + r"(?P<fact>from now on\b.*)", re.S | re.I),
]
# A question asks what is remembered; it stores nothing.
_QUESTION = re.compile(
    r"(还记得|记得.*吗|记住了吗|记不记得|[?？]\s*$|吗\s*[。.]?\s*$|\b(do|did|can|could|will|would)\s+you\s+"
    r"(still\s+)?remember\b|\bremember\s+when\b)", re.I)


# Every trigger holds one of these: a substring test rules most messages out (appends pay
# it). Not a regex: an alternation with re.I cost more than the raw RPUSH of the message.
_ANY = ("记", "以后", "从现在", "从今", "remember", "note", "keep in mind", "from now on")


def trigger_fact(text: str) -> str | None:
    """The fact ``text`` asks to remember, or None when it asks nothing of the kind."""
    low = text.lower()
    if not any(word in low for word in _ANY) or _QUESTION.search(text):
        return None
    for pattern in _TRIGGERS:
        m = pattern.search(text)
        if m is None:
            continue
        fact = m.group("fact").strip(" \t\n：:，,、。.")
        if not fact:
            raise ValidationError(f"{text.strip()[:40]!r} asks to remember nothing: say what "
                                  "to remember after it (记住：… / remember that …)")
        return fact
    return None
