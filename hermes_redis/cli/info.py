"""``hermes-redis info``: one session from both tiers in one view."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from hermes_redis.cli.render import (
    clean,
    context_parts,
    context_shape,
    context_usage,
    plural,
    progress_line,
    report_lines,
    session_report,
    usage_warning,
)
from hermes_redis.cli.state import State, emit_json, json_option, pass_state

if TYPE_CHECKING:
    from hermes_redis.client import HermesClient


@click.command()
@click.argument("session_id")
@json_option
@pass_state
def info(state: State, session_id: str, as_json: bool) -> None:
    """Both tiers in one view: counts, tokens, context usage, TTL, summary, backlog."""
    from hermes_redis.client import HermesClient

    mem = state.mem()
    if isinstance(mem, HermesClient):
        _remote_info(state, mem, state.sid(session_id), as_json)
        return
    report = session_report(state.local("info"), state.sid(session_id))  # issue 29
    if as_json:
        emit_json(report.as_dict())
        return
    click.echo("\n".join(report_lines(report)))


def _remote_info(state: State, mem: HermesClient, sid: str, as_json: bool) -> None:
    """``info`` through --server: what the HTTP API reports (no server-side config)."""
    info = mem.info(sid)
    ctx = mem.context(sid, touch=False) if info.status == "active" else None
    if as_json:
        emit_json({**info.as_dict(), "context": None if ctx is None else {
            "tokens": ctx.tokens, "window": ctx.window, "budget": ctx.budget,
            "usage": round(ctx.usage, 4), "shape": context_shape(ctx),
            "parts": ctx.parts, "whole": ctx.whole,  # issue 30
            "archived_through": ctx.archived_through,
            "summarized_through": ctx.summarized_through,
            "extracted_through": ctx.extracted_through}})
        return
    lines = [f"Session {sid} · {clean(info.title) or '(untitled)'} · user {clean(info.user_id)}",
             f"Status: {info.status}; {plural(info.message_count, 'message')}, "
             f"{plural(info.total_tokens, 'token')}; {plural(info.backlog, 'message')} not yet archived"]
    if ctx is not None:
        lines.append(f"Token usage: {context_usage(ctx, context_parts(ctx, state.tokenizer()))}; "
                     f"{context_shape(ctx)}")
        lines.append(f"Workers: {progress_line(ctx)}")  # issue 30
        warning = usage_warning(ctx.usage, sid, info.user_id)
        if warning:
            lines.append(warning)
    click.echo("\n".join(lines))
