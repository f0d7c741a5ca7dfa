"""``hermes-redis``: a thin click skin over SessionMemory.

The library does the work; the command modules parse arguments and format results
(``sessions``, ``transfer``, ``info``, ``search``, ``memory``, ``keys``, ``ops``). Every read
command takes ``--json``. Expected errors (the HermesError family) print one ``Error: …`` line
on stderr and exit with the error's code, never a traceback. SessionMemory is built on first
use, so ``--help`` works without Redis.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from hermes_redis import __version__
from hermes_redis.cli import embeddings, hermes, info, keys, memory, ops, search, sessions
from hermes_redis.cli.state import State, one_line
from hermes_redis.core.errors import HermesError


class CliError(click.ClickException):
    """A HermesError as click shows it: ``Error: <message>`` and the error's exit code."""

    def __init__(self, err: HermesError) -> None:
        super().__init__(one_line(str(err)) or type(err).__name__)
        self.exit_code = err.exit_code  # type: ignore[misc]  # click declares a ClassVar


class BadUsage(click.ClickException):
    """A usage error on one line that names the help to read (invariant 7)."""

    exit_code = 2

    @classmethod
    def from_usage(cls, err: click.UsageError) -> click.UsageError | BadUsage:
        if type(err).__name__ == "NoArgsIsHelpError":  # click >= 8.2: a bare group's help
            return err
        path = err.ctx.command_path if err.ctx else "hermes-redis"
        return cls(f"{one_line(err.format_message()).rstrip('.')} (see `{path} --help`)")


class HermesGroup(click.Group):
    """Turns expected errors raised anywhere below into one line, never a traceback."""

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as err:
            raise BadUsage.from_usage(err) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except HermesError as err:
            state = ctx.obj if isinstance(ctx.obj, State) else None
            raise CliError(state.explain(err) if state else err) from None
        except click.UsageError as err:
            raise BadUsage.from_usage(err) from None


@click.group("hermes-redis", cls=HermesGroup,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", "config_path", metavar="PATH", type=click.Path(dir_okay=False),
              help="Config file (default: $HERMES_CONFIG, else ./config.yml, else built-in).")
@click.option("--server", "server_url", metavar="URL", envvar="HERMES_SERVER_URL",
              help="Run the command against a remote `hermes-redis serve` ($HERMES_SERVER_URL).")
@click.option("--api-key", metavar="KEY", envvar="HERMES_API_KEY",
              help="API key for --server ($HERMES_API_KEY).")
@click.option("-v", "--verbose", is_flag=True, help="Log what the library does to stderr.")
@click.version_option(__version__, prog_name="hermes-redis")
@click.pass_context
def cli(ctx: click.Context, config_path: str | None, server_url: str | None,
        api_key: str | None, verbose: bool) -> None:
    """Session memory for AI agents: inspect and operate both tiers (Redis and the archive).

    SESSION_ID may be any unique prefix of a session id.
    """
    if verbose:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    state = State(config_path, server_url, api_key)
    ctx.obj = state
    ctx.call_on_close(state.close)


for command in (sessions.session, info.info, search.search, memory.memory, keys.key, ops.worker,
                ops.doctor, ops.mcp, ops.server, ops.serve, embeddings.embeddings,
                hermes.hermes, hermes.import_group):
    cli.add_command(command)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    try:
        cli.main(args=argv, prog_name="hermes-redis")
    except HermesError as err:  # raised outside a command (e.g. while closing)
        click.echo(f"Error: {one_line(str(err))}", err=True)
        sys.exit(err.exit_code)


if __name__ == "__main__":
    main()
