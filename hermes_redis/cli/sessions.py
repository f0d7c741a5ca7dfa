"""``hermes-redis session …``: list, resume, change and remove sessions."""

from __future__ import annotations

import sys
from typing import Any

import click

from hermes_redis.cli.render import (
    clean,
    clean_block,
    context_parts,
    context_shape,
    context_usage,
    lineage_text,
    plural,
    progress_line,
    seqs_upto,
    short_id,
    stamp,
    table,
    truncate,
    usage_warning,
)
from hermes_redis.cli.state import (
    SNIPPET_CELLS,
    STATUS_CHOICES,
    TITLE_CELLS,
    State,
    emit_json,
    json_option,
    one_line,
    pass_state,
    user_option,
)
from hermes_redis.cli.transfer import export, import_cmd
from hermes_redis.core.models import (
    ROLES,
    Context,
    SessionInfo,
    memories_text,
    recalled_text,
    summary_text,
)


@click.group()
def session() -> None:
    """Create, append to, list, resume, forget, archive, export and import sessions."""


@session.command("list")
@user_option
@click.option("--status", type=click.Choice(STATUS_CHOICES), default="active", show_default=True,
              help="Which sessions to show.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True,
              help="Sessions per page.")
@click.option("--cursor", metavar="CURSOR", default=None,
              help="Continue a listing where the previous page ended.")
@json_option
@pass_state
def list_cmd(state: State, user_id: str | None, status: str, limit: int, cursor: str | None,
             as_json: bool) -> None:
    """Sessions from both tiers, newest first, a page at a time."""
    mem = state.mem()
    infos = mem.list_sessions(user_id=user_id, status=status, limit=limit, cursor=cursor)
    more = (f"More: hermes-redis session list --cursor {infos.next_cursor}"
            if infos.next_cursor else None)
    if as_json:
        emit_json([_list_entry(i) for i in infos])
        if more:
            click.echo(more, err=True)
        return
    if not infos:
        which = "" if status == "all" else f"{status} "
        who = f" for user {user_id}" if user_id else ""
        click.echo(f"No {which}sessions{who}.")
        return
    short = mem.short_ids([i.session_id for i in infos])
    rows = [
        (short[i.session_id], _title_cell(i),
         truncate(clean(i.user_id), 16), i.status, i.message_count, stamp(i.updated_at))
        for i in infos
    ]
    click.echo(table(("ID", "TITLE", "USER", "STATUS", "MESSAGES", "UPDATED"), rows, right=(4,)))
    if more:
        click.echo(more)


def _title_cell(info: SessionInfo) -> str:
    """The title, then where a continued or forked session came from (issue 30)."""
    title = truncate(clean(info.title) or "(untitled)", TITLE_CELLS)
    lineage = lineage_text(info)
    if lineage is None or info.parent_session_id is None:
        return title
    return f"{title} ({lineage.replace(info.parent_session_id, short_id(info.parent_session_id))})"


def _list_entry(info: SessionInfo) -> dict[str, Any]:
    """The list knows no per-tier counts or TTL: leave them out rather than report zeros."""
    data = info.as_dict()
    for key in ("hot_count", "archived_count", "ttl_left"):
        data.pop(key, None)
    return data


@session.command()
@click.option("--user", "user_id", metavar="U", default=None,
              help="Whose session (default: the default user; with --server, the key's).")
@click.option("--title", metavar="T", default="",
              help="Its title (default: from the first user message).")
@json_option
@pass_state
def create(state: State, user_id: str | None, title: str, as_json: bool) -> None:
    """A new active session; prints its id (for `sid=$(hermes-redis session create …)`)."""
    mem = state.mem()
    sid = mem.create_session(user_id=user_id, title=title) if user_id else \
        mem.create_session(title=title)
    if as_json:
        emit_json(mem.info(sid).as_dict())
        return
    click.echo(sid)


@session.command()
@click.argument("session_id")
@click.option("--role", type=click.Choice(ROLES), required=True, help="Who says it.")
@click.option("--content", metavar="TEXT", default=None,
              help="What is said (default: stdin, less one trailing newline).")
@json_option
@pass_state
def append(state: State, session_id: str, role: str, content: str | None, as_json: bool) -> None:
    """Append one message to the session; prints its seq and tokens."""
    if content is None:
        if sys.stdin.isatty():
            raise click.UsageError("give --content TEXT, or pipe the content on stdin")
        content = sys.stdin.read()
        content = content.removesuffix("\n").removesuffix("\r")
    sid = state.sid(session_id)
    msg = state.mem().append(sid, role, content)
    if as_json:
        emit_json(msg.as_dict())
        return
    click.echo(f"Appended message {msg.seq} ({msg.role}, {plural(msg.token_count, 'token')}) "
               f"to session {sid}.")


@session.command()
@click.argument("session_id", required=False)
@user_option
@click.option("--query", "-q", default=None,
              help="Recall the older messages most relevant to this (default: the newest user "
                   "message; '' for none).")
@click.option("--budget", type=click.IntRange(min=1), default=None,
              help="Tokens the context may use (default: the model's window less the reply).")
@json_option
@pass_state
def resume(state: State, session_id: str | None, user_id: str | None, query: str | None,
           budget: int | None, as_json: bool) -> None:
    """The context that would be injected now (the latest active session without an id)."""
    mem = state.mem()
    ctx = mem.resume(state.sid(session_id) if session_id else None, user_id=user_id,
                     budget=budget, query=query)
    if as_json:
        emit_json({**ctx.as_dict(), "chat": ctx.as_chat()})
        return
    click.echo(_context_text(state, ctx))


def _context_text(state: State, ctx: Context) -> str:
    info = state.mem().info(ctx.session_id)
    head = [
        f"Session {ctx.session_id} · {clean(info.title) or '(untitled)'} · user {clean(info.user_id)}",
        f"Token usage: {context_usage(ctx, context_parts(ctx, state.tokenizer()))}; "
        f"{context_shape(ctx)}",
    ]
    warning = usage_warning(ctx.usage, ctx.session_id, info.user_id)
    if warning:
        head.append(warning)
    head.append(f"Workers: {progress_line(ctx)}")  # issue 30
    blocks = ["\n".join(head)]
    if ctx.memories:
        blocks.append("[system] " + clean_block(memories_text(ctx.memories)))
    blocks.extend(f"[{m.role} #{m.seq}] {clean_block(m.content)}" for m in ctx.opening)
    if ctx.summary:
        blocks.append("[system] " + clean_block(summary_text(ctx.summary)))
    turn = ctx.turn_start  # issue 30: the recalled excerpts just before the newest turn
    blocks.extend(f"[{m.role} #{m.seq}] {clean_block(m.content)}" for m in ctx.messages[:turn])
    if ctx.recalled:
        blocks.append("[system] " + clean_block(recalled_text(ctx.recalled)))
    blocks.extend(f"[{m.role} #{m.seq}] {clean_block(m.content)}" for m in ctx.messages[turn:])
    if not ctx.memories and not ctx.summary and not ctx.messages:
        blocks.append("(empty: nothing would be injected)")
    return "\n\n".join(blocks)


@session.command("continue")
@click.argument("session_id")
@json_option
@pass_state
def continue_cmd(state: State, session_id: str, as_json: bool) -> None:
    """A new session continuing SESSION_ID: its first message carries that session's summary
    and where it left off. Prints the new id."""
    mem = state.mem()
    new_sid = mem.continue_session(state.sid(session_id))
    if as_json:
        emit_json(mem.info(new_sid).as_dict())
        return
    click.echo(new_sid)


@session.command()
@click.argument("session_id")
@click.option("--at", "at_seq", type=click.IntRange(min=1), metavar="SEQ", default=None,
              help="Copy the history up to this seq (default: all of it).")
@json_option
@pass_state
def fork(state: State, session_id: str, at_seq: int | None, as_json: bool) -> None:
    """A new session holding a copy of SESSION_ID's history (up to --at); later writes and
    forgets in either never show in the other. Prints the new id."""
    mem = state.mem()
    new_sid = mem.fork(state.sid(session_id), at_seq)
    if as_json:
        emit_json(mem.info(new_sid).as_dict())
        return
    click.echo(new_sid)


@session.command()
@click.argument("session_id")
@pass_state
def archive(state: State, session_id: str) -> None:
    """Keep everything but stop loading the session into context."""
    sid = state.sid(session_id)
    state.mem().archive(sid)
    click.echo(f"Archived session {sid}; `hermes-redis session restore {short_id(sid)}` undoes it.")


@session.command()
@click.argument("session_id")
@pass_state
def restore(state: State, session_id: str) -> None:
    """Make an archived session active again."""
    sid = state.sid(session_id)
    state.mem().restore(sid)
    click.echo(f"Restored session {sid}; it is active again.")


@session.command()
@click.argument("session_id")
@click.option("--purge", is_flag=True, help="Also remove its messages from the archive.")
@pass_state
def delete(state: State, session_id: str, purge: bool) -> None:
    """Mark the session deleted and drop its hot keys."""
    sid = state.sid(session_id)
    mem = state.mem()
    count = mem.info(sid).message_count
    mem.delete(sid, purge=purge)
    if purge:
        click.echo(f"Deleted session {sid} and purged its {plural(count, 'archived message')}.")
    else:
        click.echo(f"Deleted session {sid}; the archive keeps its {plural(count, 'message')} "
                   "(--purge removes them).")


@session.command()
@click.argument("session_id")
@click.option("--last", type=click.IntRange(min=1), metavar="N", help="Forget the last N turns.")
@click.option("--keyword", metavar="WORD",
              help="Forget every message containing WORD (case-insensitive).")
@pass_state
def forget(state: State, session_id: str, last: int | None, keyword: str | None) -> None:
    """Remove messages from both tiers for good (exactly one of --last, --keyword)."""
    if (last is None) == (keyword is None):
        raise click.UsageError("give exactly one of --last N or --keyword WORD")
    sid = state.sid(session_id)
    mem = state.mem()
    if last is not None:
        n = mem.forget_last(sid, last)
        what = f"in the last {last} turn{'' if last == 1 else 's'}"
    else:
        assert keyword is not None
        n = mem.forget_keyword(sid, keyword)
        what = f"containing {keyword!r}"
    if n == 0:
        click.echo(f"Nothing forgotten: no message {what} in session {sid}.")
        return
    info = mem.info(sid)
    click.echo(f"Forgot {plural(n, 'message')} {what} from session {sid}; "
               f"{plural(info.message_count, 'message')}, {plural(info.total_tokens, 'token')} "
               "remain.")


@session.command()
@click.argument("session_id")
@click.option("--history", is_flag=True,
              help="Also forget every message from both tiers for good (memories stay).")
@pass_state
def clear(state: State, session_id: str, history: bool) -> None:
    """Empty the session's context; the archive and persistent memories stay."""
    sid = state.sid(session_id)
    mem = state.mem()
    count = mem.info(sid).message_count if history else 0
    mem.clear(sid, history=history)
    if history:
        click.echo(f"Cleared session {sid} and forgot its {plural(count, 'message')} from both "
                   "tiers; persistent memories stay.")
        return
    kept = mem.info(sid).message_count
    click.echo(f"Cleared the context of session {sid}; the archive keeps its "
               f"{plural(kept, 'message')} and persistent memories stay.")


@session.command()
@click.argument("session_id")
@json_option
@pass_state
def pop(state: State, session_id: str, as_json: bool) -> None:
    """Remove the newest message from both tiers for good and show it."""
    sid = state.sid(session_id)
    msg = state.mem().pop(sid)
    if as_json:
        emit_json(None if msg is None else msg.as_dict())
        return
    if msg is None:
        click.echo(f"Nothing popped: session {sid} has no messages.")
        return
    click.echo(f"Popped message {msg.seq} ({msg.role}) from session {sid}: "
               f"{truncate(one_line(msg.content), SNIPPET_CELLS)}")


@session.command()
@click.argument("session_id")
@pass_state
def compact(state: State, session_id: str) -> None:
    """Summarize older turns now instead of waiting for a worker."""
    sid = state.sid(session_id)
    result = state.mem().compact(sid)
    if result is None:
        click.echo(f"Nothing to compact in session {sid}.")
        return
    click.echo(f"Compacted session {sid}: the summary covers "
               f"{seqs_upto(result.summarized_upto)} "
               f"({result.summary_tokens:,} tokens), {result.kept} messages stay verbatim.")


session.add_command(export)
session.add_command(import_cmd)
