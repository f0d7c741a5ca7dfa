"""``hermes-redis key …``: API keys for ``hermes-redis serve``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from hermes_redis.cli.render import clean, stamp, table
from hermes_redis.cli.state import State, emit_json, json_option, pass_state

if TYPE_CHECKING:  # issue 43: loaded by the key commands only
    from hermes_redis.store.api_keys import KeyStore


@click.group()
def key() -> None:
    """API keys for `hermes-redis serve` (only their hashes are stored)."""


def _keys(state: State) -> KeyStore:
    from hermes_redis.store.api_keys import KeyStore
    from hermes_redis.store.open import open_archive

    state.refuse_remote("key commands run")
    archive = open_archive(state.config())
    click.get_current_context().call_on_close(archive.close)  # a PostgreSQL pool's threads
    return KeyStore(archive)


@key.command("create")
@click.option("--user", "user_id", metavar="U", help="The user this key acts for (sees only theirs).")
@click.option("--admin", is_flag=True, help="A key that sees every user.")
@json_option
@pass_state
def key_create(state: State, user_id: str | None, admin: bool, as_json: bool) -> None:
    """Make a key and print it once; it cannot be shown again."""
    if admin == (user_id is not None):
        raise click.UsageError("give exactly one of --user U or --admin")
    record, token = _keys(state).create(None if admin else user_id)
    if as_json:
        emit_json({**record.as_dict(), "key": token})
        return
    who = "admin (every user)" if admin else f"user {user_id}"
    click.echo(f"Created key {record.key_id} for {who}. It is shown only now; store it safely:")
    click.echo(token)


@key.command("list")
@json_option
@pass_state
def key_list(state: State, as_json: bool) -> None:
    """Every key's id, user and dates (never the key itself)."""
    keys = _keys(state).list()
    if as_json:
        emit_json([k.as_dict() for k in keys])
        return
    if not keys:
        click.echo("No API keys; `hermes-redis key create --user U` makes one.")
        return
    rows = [(k.key_id, "(admin)" if k.admin else clean(k.user_id or ""), stamp(k.created_at),
             "revoked " + stamp(k.revoked_at) if k.revoked_at else "active") for k in keys]
    click.echo(table(("KEY_ID", "USER", "CREATED", "STATUS"), rows))


@key.command("revoke")
@click.argument("key_id")
@pass_state
def key_revoke(state: State, key_id: str) -> None:
    """Revoke a key; requests with it answer 401 from now on."""
    _keys(state).revoke(key_id)
    click.echo(f"Revoked key {key_id}.")
