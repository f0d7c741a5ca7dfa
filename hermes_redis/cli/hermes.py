"""``hermes-redis hermes install|uninstall``: hermes-redis inside Hermes Agent (its memory
provider and context engine, docs/hermes-agent.md)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import click

from hermes_redis.cli.state import State, pass_state


@click.group("hermes")
def hermes() -> None:
    """Hermes Agent: install hermes-redis as its memory provider and context engine."""


@hermes.command("install")
@click.option("--home", metavar="DIR", envvar="HERMES_HOME",
              help="The Hermes home to install into ($HERMES_HOME, else ~/.hermes).")
@click.option("--url", metavar="URL", help="Remote mode: a `hermes-redis serve` to share.")
@click.option("--key", metavar="KEY", help="The server's API key (with --url).")
@click.option("--redis", "redis_url", metavar="URL",
              help="Library mode: the Redis to use (a `hermes-redis worker` runs beside it).")
@click.option("--user", "user_id", metavar="ID",
              help="The user a session belongs to when Hermes names none (default: default).")
def install(home: str | None, url: str | None, key: str | None, redis_url: str | None,
            user_id: str | None) -> None:
    """Write both plugins into HOME/plugins/ and select them in HOME/config.yaml (every other
    key and comment is kept). Safe to run again."""
    from hermes_redis.integrations.hermes_agent.install import Target, home_of
    from hermes_redis.integrations.hermes_agent.install import install as run

    changes = run(home, Target(url, key, redis_url, user_id))
    for line in changes:
        click.echo(line)
    root = home_of(home)
    click.echo(f"hermes-redis is installed in {root}" if changes else
               f"nothing to change: hermes-redis is installed in {root} already")
    hint = _hermes_python_hint()
    if hint:
        click.echo(hint, err=True)


@hermes.command("uninstall")
@click.option("--home", metavar="DIR", envvar="HERMES_HOME",
              help="The Hermes home ($HERMES_HOME, else ~/.hermes).")
def uninstall(home: str | None) -> None:
    """Remove both plugins and put back the keys install replaced."""
    from hermes_redis.integrations.hermes_agent.install import home_of
    from hermes_redis.integrations.hermes_agent.install import uninstall as run

    changes = run(home)
    for line in changes:
        click.echo(line)
    click.echo(f"hermes-redis is uninstalled from {home_of(home)}" if changes else
               "nothing to undo: hermes-redis was not installed there")


def _hermes_python_hint() -> str:
    """A line to print when the `hermes` on PATH runs a Python without hermes-redis."""
    found = shutil.which("hermes")
    if not found:
        return ""
    try:
        first = Path(found).read_text(encoding="utf-8", errors="replace").split("\n", 1)[0]
    except OSError:
        return ""
    python = first[2:].strip().split()[0] if first.startswith("#!") and first[2:].strip() else ""
    if not python or not Path(python).exists():
        return ""
    ok = subprocess.run([python, "-c", "import hermes_redis"], capture_output=True,
                        timeout=30).returncode == 0
    return "" if ok else (f"note: Hermes' Python ({python}) has no hermes-redis yet: "
                          f"{python} -m pip install hermes-redis")


@click.group("import")
def import_group() -> None:
    """Import another store's sessions into hermes-redis."""


@import_group.command("hermes-state")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--user", "user_id", metavar="U",
              help="The owner of every imported session (default: each session's user, else "
                   "default).")
@pass_state
def hermes_state(state: State, path: str, user_id: str | None) -> None:
    """Import Hermes Agent's PATH (its $HERMES_HOME/state.db): every session and message, in
    order, with tool calls. Safe to run again: what is stored is not added twice."""
    from hermes_redis.integrations.hermes_agent.state_import import import_state

    report = import_state(state.mem(), path, user_id,
                          progress=lambda line: click.echo(f"… {line}", err=True))
    for problem in report.problems:
        click.echo(f"not imported: {problem}", err=True)
    click.echo(report.line())
