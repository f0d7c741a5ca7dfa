"""``hermes-redis embeddings …``: vectors for recall by meaning (docs/embeddings.md)."""

from __future__ import annotations

import click

from hermes_redis.cli.state import State, pass_state
from hermes_redis.core.errors import ConfigError


@click.group()
def embeddings() -> None:
    """Vectors for recall by meaning: the worker embeds what it archives; this fills the rest."""


@embeddings.command()
@click.argument("session_id", required=False)
@pass_state
def backfill(state: State, session_id: str | None) -> None:
    """Embed the archived messages that have no vector of the configured model: SESSION_ID's,
    or every active and archived session's (an archive from before embeddings were on, or
    after the model changed). Runs on the archive's host; safe to run again."""
    mem = state.local("embeddings backfill")
    if mem.config.embeddings.provider == "none":  # also when there is nothing to embed yet
        from hermes_redis.core.embeddings import OFF

        raise ConfigError(OFF)
    if session_id:
        sids = [state.sid(session_id)]
    else:
        sids = [s.session_id for status in ("active", "archived")
                for s in mem.list_sessions(status=status, limit=None)]
    total = 0
    for i, sid in enumerate(sids, 1):
        stored = mem.embed_archived(sid)
        total += stored
        click.echo(f"[{i}/{len(sids)}] {sid}: {stored} message(s) embedded", err=True)
    click.echo(f"Embedded {total} archived message(s) in {len(sids)} session(s) with "
               f"{mem.config.embeddings.provider} embeddings.")
