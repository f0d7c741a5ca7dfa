"""``hermes-redis search``: full-text search over both tiers."""

from __future__ import annotations

import click

from hermes_redis.cli.render import clean, table, truncate
from hermes_redis.cli.state import SNIPPET_CELLS, State, emit_json, json_option, pass_state, user_option


@click.command()
@click.argument("query", metavar="QUERY...", nargs=-1, required=True)
@user_option
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True,
              help="At most this many hits.")
@json_option
@pass_state
def search(state: State, query: tuple[str, ...], user_id: str | None, limit: int,
           as_json: bool) -> None:
    """Full-text search over archived and hot messages, best match first: the messages with
    every word of QUERY (`search staging password`, no quotes needed)."""
    text = " ".join(query)
    mem = state.mem()
    hits = mem.search(text, user_id=user_id, limit=limit)
    if as_json:
        emit_json([h.as_dict() for h in hits])
        return
    if not hits:
        click.echo(f"No messages match {text!r}.")
        return
    short = mem.short_ids([h.session_id for h in hits])
    rows = [
        (short[h.session_id], h.seq, h.role, truncate(clean(h.title) or "(untitled)", 24),
         truncate(clean(h.snippet), SNIPPET_CELLS))
        for h in hits
    ]
    click.echo(table(("SESSION", "SEQ", "ROLE", "TITLE", "SNIPPET"), rows, right=(1,)))
