"""Listing at scale: pages and cursors from the archive's indexes, id prefixes by range,
and search that matches unarchived messages exactly as the archive does."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from hermes_redis.cli.main import cli
from hermes_redis.core.errors import AmbiguousIdError, NotFoundError, ValidationError
from tests.helpers import write_config


def test_pages_follow_cursors_through_every_session_once_newest_first(mem):
    made = [mem.create_session(user_id="ann" if i % 2 else "bob") for i in range(7)]
    newest_first = made[::-1]
    seen, cursor = [], None
    while True:
        page = mem.list_sessions(status="all", limit=3, cursor=cursor)
        assert len(page) <= 3
        seen += [i.session_id for i in page]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == newest_first
    assert [i.session_id for i in mem.list_sessions(status="all", limit=None)] == newest_first
    ann = mem.list_sessions(user_id="ann", limit=2)
    assert [i.session_id for i in ann] == [s for s in newest_first if made.index(s) % 2][:2]
    assert ann.next_cursor is not None
    rest = mem.list_sessions(user_id="ann", limit=2, cursor=ann.next_cursor)
    assert [i.session_id for i in rest] == [s for s in newest_first if made.index(s) % 2][2:]
    assert rest.next_cursor is None


def test_a_page_shows_live_counts_and_status_filters(mem):
    sid = mem.create_session(user_id="ann")  # listed before anything is flushed
    other = mem.create_session(user_id="ann")
    assert {i.session_id for i in mem.list_sessions(user_id="ann")} == {sid, other}
    mem.append(sid, "user", "hello")
    (info,) = [i for i in mem.list_sessions(user_id="ann") if i.session_id == sid]
    assert info.message_count == 1
    mem.archive(other)
    assert [i.session_id for i in mem.list_sessions(user_id="ann", status="archived")] == [other]
    assert [i.session_id for i in mem.list_sessions(user_id="ann")] == [sid]


@pytest.mark.parametrize("bad", ["nope", "!!", "eyJ4IjogMX0"])
def test_a_bad_cursor_or_limit_is_one_clear_line(mem, bad):
    with pytest.raises(ValidationError, match="next_cursor of the previous page"):
        mem.list_sessions(cursor=bad)
    with pytest.raises(ValidationError, match="limit must be a positive number"):
        mem.list_sessions(limit=0)


def test_prefixes_resolve_by_range(mem):
    for sid in ("abc-one", "abc-two", "abd-three"):
        mem.create_session(session_id=sid)
    assert mem.resolve("abd") == "abd-three"
    assert mem.resolve("abc-t") == "abc-two"
    assert mem.resolve("abc-one") == "abc-one"
    with pytest.raises(AmbiguousIdError, match=r"'abc' matches 2 sessions \(abc-one, abc-two\)"):
        mem.resolve("abc")
    with pytest.raises(NotFoundError, match="no session matches 'abz'"):
        mem.resolve("abz")
    assert mem.short_ids(["abd-three"], minimum=2) == {"abd-three": "abd"}


def test_search_gives_the_same_hits_before_and_after_a_flush(config_factory):
    """Hot (unarchived) and archived messages match alike: word prefixes, CJK substrings;
    "cat" never finds "concatenate" in either tier."""
    from hermes_redis import SessionMemory

    mem = SessionMemory(config_factory("redis"))  # no worker: appends stay unarchived
    sid = mem.create_session(user_id="ann")
    mem.append(sid, "user", "Please concatenate the JWT refresh tokens")
    mem.append(sid, "assistant", "帮我写一个 FastAPI 的用户认证接口")
    queries = ["cat", "conc", "jwt refr", "用户认证", "tokens please", "refresh-token", "FastAPI"]

    def hits() -> dict[str, list[int]]:
        return {q: sorted(h.seq for h in mem.search(q)) for q in queries}

    before = hits()
    assert all(h.tier == "hot" for q in queries for h in mem.search(q))
    mem.flush(sid)
    after = hits()
    assert all(h.tier != "hot" for q in queries for h in mem.search(q))
    assert before == after
    assert after["cat"] == [] and after["conc"] == [1] and after["用户认证"] == [2]
    assert after["refresh-token"] == [1] and after["tokens please"] == [1]
    mem.close()


def test_cli_list_pages_with_limit_and_cursor(tmp_path, config_factory):
    from hermes_redis import SessionMemory

    cfg = config_factory("redis")
    path = write_config(cfg, tmp_path / "c.yml")
    mem = SessionMemory(cfg)
    made = [mem.create_session(user_id="ann", title=f"t{i}") for i in range(3)]
    mem.close()
    first = CliRunner().invoke(cli, ["--config", str(path), "session", "list", "--limit", "2"])
    assert first.exit_code == 0, first.output
    more = first.output.strip().splitlines()[-1]
    assert more.startswith("More: hermes-redis session list --cursor ")
    cursor = more.split()[-1]
    rest = CliRunner().invoke(cli, ["--config", str(path), "session", "list", "--limit", "2",
                                    "--cursor", cursor, "--json"])
    assert rest.exit_code == 0, rest.output
    assert made[0] in rest.output and made[2] not in rest.output
    bad = CliRunner().invoke(cli, ["--config", str(path), "session", "list", "--cursor", "zz"])
    assert bad.exit_code == 2 and bad.output.count("\n") == 1
