"""``hermes-redis memory …``: a user's persistent memories."""

from __future__ import annotations

from typing import Any

import click

from hermes_redis.cli.render import clean, full_stamp, table, truncate
from hermes_redis.cli.state import SNIPPET_CELLS, State, emit_json, json_option, pass_state
from hermes_redis.core.models import Memory as MemoryRecord


@click.group()
def memory() -> None:
    """A user's persistent memories: what every new session of theirs starts with."""


def whose(fn: Any) -> Any:
    """``--user U``: whose memories (required, or as the USER argument where one is taken)."""
    return click.option("--user", "user_id", metavar="U",
                        help="Whose memories (a user id, as given to sessions).")(fn)


def _memory_user(user_id: str | None, given: str | None = None) -> str:
    """The user from ``--user`` or the USER argument; both given must agree."""
    if user_id and given and user_id != given:
        raise click.UsageError(f"two users given, {given!r} and --user {user_id!r}: give one")
    user = user_id or given
    if not user:
        raise click.UsageError("say whose memories: --user U")
    return user


def _show_memories(rows: list[MemoryRecord], user: str, as_json: bool, empty: str) -> None:
    if as_json:
        emit_json([m.as_dict() for m in rows])
        return
    if not rows:
        click.echo(empty)
        return
    table_rows = [(m.memory_id, truncate(clean(m.content), SNIPPET_CELLS),
                   m.kind if m.current else f"replaced by {m.superseded_by}",
                   (m.session_id or "")[:8] + (f" #{m.seq}" if m.seq is not None else ""),
                   full_stamp(m.created_at)[:16])
                  for m in rows]
    click.echo(table(("MEMORY", "CONTENT", "KIND", "SAID IN", "CREATED"), table_rows))


@memory.command("list")
@click.argument("user", metavar="[USER]", required=False)
@whose
@click.option("--all", "superseded", is_flag=True,
              help="Also the memories newer ones replaced (their history).")
@json_option
@pass_state
def memory_list(state: State, user: str | None, user_id: str | None, superseded: bool,
                as_json: bool) -> None:
    """The user's current memories, oldest first (`memory list bob` or `--user bob`)."""
    user = _memory_user(user_id, user)
    _show_memories(state.mem().memories(user, superseded=superseded), user, as_json,
                   f"No memories for user {user}.")


@memory.command("add")
@click.argument("text", metavar="TEXT...", nargs=-1, required=True)
@whose
@click.option("--session", "session_id", metavar="SESSION_ID", default=None,
              help="The session it came from.")
@pass_state
def memory_add(state: State, text: tuple[str, ...], user_id: str | None,
               session_id: str | None) -> None:
    """Remember TEXT for the user (as /remember does); several words need no quotes."""
    user = _memory_user(user_id)
    sid = state.sid(session_id) if session_id else None
    memory_id = state.mem().remember(user, " ".join(text), session_id=sid)
    click.echo(f"Remembered for {user}: {memory_id}")


@memory.command("forget")
@click.argument("memory_id")
@click.option("--user", "user_id", metavar="U",
              help="Forget it only if it is this user's memory.")
@pass_state
def memory_forget(state: State, memory_id: str, user_id: str | None) -> None:
    """Forget one memory for good (by the id `memory list` shows)."""
    state.mem().forget_memory(memory_id, user_id=user_id)
    click.echo(f"Forgot memory {memory_id}.")


@memory.command("search")
@click.argument("query", metavar="QUERY...", nargs=-1, required=True)
@whose
@json_option
@pass_state
def memory_search(state: State, query: tuple[str, ...], user_id: str | None,
                  as_json: bool) -> None:
    """The user's memories that share a distinctive word with QUERY, best first; several
    words need no quotes."""
    text = " ".join(query)
    user = _memory_user(user_id)
    rows = state.mem().memories(user, query=text)
    _show_memories(rows, user, as_json, f"No memories of {user} match {text!r}.")
