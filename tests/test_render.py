"""Rendering for people: token counts, CJK widths, short ids (``hermes_redis.cli.render``)."""

from __future__ import annotations

from hermes_redis.cli.render import short_id, table, tokens_k, truncate, usage_line, width
from hermes_redis.core.models import short_ids


def test_token_counts_read_like_the_design() -> None:
    assert usage_line(178_000, 200_000) == "178K / 200K (89%)"
    assert tokens_k(999) == "999" and tokens_k(177_600) == "178K"
    # issue 45: a small window reads exactly, not "2K / 2K (82%)"
    assert tokens_k(1499) == "1,499" and tokens_k(9_999) == "9,999" and tokens_k(10_400) == "10K"
    assert usage_line(1_640, 2_000) == "1,640 / 2,000 (82%)"
    assert usage_line(48, 200_000) == "48 / 200K (<1%)"


def test_cjk_text_is_measured_in_cells() -> None:
    assert width("认证") == 4 and width("ab") == 2 and width("e\u0301") == 1
    assert truncate("帮我写一个接口", 7) == "帮我写…" and width(truncate("帮我写一个接口", 7)) <= 7
    out = table(("TITLE", "N"), [("用户认证接口", 1), ("login", 22)], right=(1,))
    rows = out.splitlines()
    assert len({width(r) for r in rows}) == 1  # every row ends in the same column


def test_short_ids_grow_until_unique() -> None:
    ids = ["aaaaaaaa1", "aaaaaaaa2", "bbbbbbbbbbbb"]
    assert short_ids(ids, ids) == {"aaaaaaaa1": "aaaaaaaa1", "aaaaaaaa2": "aaaaaaaa2",
                                   "bbbbbbbbbbbb": "bbbbbbbb"}


def test_a_chosen_session_id_is_shown_whole() -> None:
    """Issue 45: ``/info`` printed ``Session demo-ses``; only a generated id is shortened."""
    assert short_id("demo-session") == "demo-session"
    assert short_id("5f3a9c0e" + "0" * 24) == "5f3a9c0e"
    assert short_id("5F3A9C0E" + "0" * 24) == "5F3A9C0E" + "0" * 24  # not what uuid4().hex makes
