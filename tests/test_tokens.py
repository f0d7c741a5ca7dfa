"""Token counts: the ASCII fast path gives exactly tiktoken's count."""

from __future__ import annotations

import random
import re

import pytest

from hermes_redis.core import tokens
from hermes_redis.core.tokens import get_tokenizer

TOK = get_tokenizer("cl100k_base")
ENC = TOK._enc

TEXTS = [
    "Sure! Here's the fix:\n\n```python\ndef total(xs: list[int]) -> int:\n"
    "    return sum(x for x in xs if x > 0)  # 3 cases\n```\n",
    '{"status": "ok", "rows": [12, 345, 6789012], "path": "/var/log/app-2026.log"}\n',
    "I'D say we're done; THEY'LL disagree. 1,234,567.89 vs 0.001 -- see RFC-2616.\r\n",
    "trailing spaces   \n\n   \t\n",
    "  leading\tand\x0b\x0cvertical\x1c\x1dseparators\x1e\x1f\x7f\x00",
    "",
]


def test_the_fast_path_is_in_use() -> None:
    assert TOK._split is not None


@pytest.mark.parametrize("text", TEXTS)
def test_realistic_ascii_counts_equal_tiktoken(text: str) -> None:
    assert TOK.count(text) == len(ENC.encode_ordinary(text))


def test_random_ascii_counts_equal_tiktoken() -> None:
    """Runs of whitespace, contractions in any case, digits and punctuation are where the
    split rules differ; the alphabet is weighted toward them."""
    rng = random.Random(16)
    alphabet = (" \t\n\r\x0b\x0c\x1c\x1f\x00\x7f'sdmtlvreSDMTLVRE0123456789xyzXYZ"
                "!?.,-_()[]{}\"/\\:;$#@%^&*+=<>|`~")
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert TOK.count(text) == len(ENC.encode_ordinary(text)), repr(text)


def test_non_ascii_text_is_counted_by_tiktoken() -> None:
    for text in ("Grüße, 世界! I'm here", "naïve café 123", "emoji 🎉🎉 ok", "ſ's K"):
        assert TOK.count(text) == len(ENC.encode_ordinary(text))


def test_pieces_held_are_short_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "PIECES_HELD", 3)
    tok = tokens.Tokenizer("cl100k_base")
    short, long = "q" * tokens.PIECE_CHARS, "z" * (tokens.PIECE_CHARS + 1)
    assert tok.count(f"{short} {long}") == len(ENC.encode_ordinary(f"{short} {long}"))
    assert short in tok._pieces and f" {long}" not in tok._pieces
    tok.count("a b c d e")
    assert 0 < len(tok._pieces) <= 3


def test_other_unicode_properties_have_no_translation() -> None:
    assert tokens._ascii_pattern(r"[\p{Lu}]+|\s+") is None
    assert tokens._ascii_pattern(r"\P{L}+") is None


def test_a_translation_that_disagrees_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "_ascii_pattern", lambda pat: re.compile(r"\S+|\s+"))
    assert tokens._ascii_split(ENC, tokens._Pieces(ENC)) is None
