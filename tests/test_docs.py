"""The docs cover the code and name nothing that is not there (as sqlite-utils' test_docs):
every CLI command, argument and option is in the summary at the top of docs/cli.md, every
``### `command```  heading there names a real command, and every config key (the seed's
aliases too) and environment override is in docs/config.md's tables."""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from hermes_redis import config as config_module
from hermes_redis.cli import cli

DOCS = Path(__file__).resolve().parent.parent / "docs"
OPTION_RE = re.compile(r"(?<![\w-])--?[A-Za-z][\w-]*")


# --- the CLI ------------------------------------------------------------------------------------
def commands(group: click.Group = cli, path: tuple[str, ...] = ()) -> Iterator[
        tuple[tuple[str, ...], click.Command]]:
    """Every command under ``group``, depth first, as (its words, the command)."""
    for name, command in sorted(group.commands.items()):
        if command.hidden:
            continue
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))


def leaves() -> dict[tuple[str, ...], click.Command]:
    return {p: c for p, c in commands() if not isinstance(c, click.Group)}


def option_names(command: click.Command) -> set[str]:
    return {o for p in command.params if isinstance(p, click.Option) and not p.hidden
            for o in (*p.opts, *p.secondary_opts)}


def summary() -> list[str]:
    """The lines of the first code block of docs/cli.md: the usage line, then one command a line."""
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    block = re.search(r"^```\n(hermes-redis .*?)^```$", text, re.S | re.M)
    assert block, "docs/cli.md must start with a ``` block of every command"
    return block.group(1).splitlines()


def resolve(words: list[str]) -> tuple[tuple[str, ...], click.Command, list[str]]:
    """The longest command the leading words name, and the words left."""
    command: click.Command = cli
    path: list[str] = []
    while words and isinstance(command, click.Group) and words[0] in command.commands:
        path.append(words[0])
        command = command.commands[words.pop(0)]
    return tuple(path), command, words


def documented_lines() -> dict[tuple[str, ...], str]:
    out: dict[tuple[str, ...], str] = {}
    for line in summary()[1:]:
        path, command, _ = resolve(line.split())
        assert path and not isinstance(command, click.Group), (
            f"docs/cli.md summary line names no command: {line!r}")
        assert path not in out, f"docs/cli.md lists `{' '.join(path)}` twice"
        out[path] = line
    return out


def test_every_command_is_in_the_cli_summary() -> None:
    missing = sorted(" ".join(p) for p in set(leaves()) - set(documented_lines()))
    assert not missing, f"add to the summary at the top of docs/cli.md: {missing}"


@pytest.mark.parametrize("path", sorted(leaves()), ids=" ".join)
def test_every_option_and_argument_is_on_its_summary_line(path: tuple[str, ...]) -> None:
    line = documented_lines().get(path)
    if line is None:
        pytest.skip("the command itself is missing (test_every_command_is_in_the_cli_summary)")
    command = leaves()[path]
    shown = set(OPTION_RE.findall(line))
    missing = [p.opts[0] for p in command.params if isinstance(p, click.Option)
               and not p.hidden and not shown & {*p.opts, *p.secondary_opts}]
    missing += [p.name.upper() for p in command.params if isinstance(p, click.Argument)
                and p.name and p.name.upper() not in line]
    assert not missing, f"docs/cli.md: `{' '.join(path)}` lacks {missing}"
    unknown = sorted(shown - option_names(command))
    assert not unknown, f"docs/cli.md: `{' '.join(path)}` has no option {unknown}"


def test_the_usage_line_shows_the_global_options() -> None:
    usage = summary()[0]
    shown = set(OPTION_RE.findall(usage))
    missing = [p.opts[-1] for p in cli.params if isinstance(p, click.Option) and not p.hidden
               and not shown & {*p.opts, *p.secondary_opts}]
    assert not missing, f"docs/cli.md usage line lacks {missing}"
    assert shown <= option_names(cli), shown - option_names(cli)


def test_every_command_heading_names_a_real_command() -> None:
    text = re.sub(r"^```.*?^```$", "", (DOCS / "cli.md").read_text(encoding="utf-8"),
                  flags=re.S | re.M)  # an exported markdown session has headings of its own
    spans = [span for heading in re.findall(r"^###? (.*)$", text, re.M)
             for span in re.findall(r"`([^`]+)`", heading)]
    assert spans
    for span in spans:
        path, command, rest = resolve(span.split())
        if not path and span.startswith("--"):
            continue  # "Scripting with `--json`": an option of many commands
        assert path, f"docs/cli.md heading `{span}` names no command"
        unknown = [w for w in rest if w not in option_names(command)]
        assert not unknown, f"docs/cli.md heading `{span}`: `{' '.join(path)}` has no {unknown}"


# --- the config ---------------------------------------------------------------------------------
def config_keys(cls: type = config_module.Config, prefix: str = "") -> Iterator[str]:
    """Every leaf key of the config dataclasses, dotted (``memory.session.compression.enabled``)."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name == "source":  # where the config came from, not a key
            continue
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind):
            yield from config_keys(kind, f"{prefix}{f.name}.")  # type: ignore[arg-type]
        else:
            yield f"{prefix}{f.name}"


def documented_keys() -> set[str]:
    """``## section`` headings, then table rows whose first cell is a `key`: section.key."""
    keys: set[str] = set()
    section = None
    for line in (DOCS / "config.md").read_text(encoding="utf-8").splitlines():
        heading = re.match(r"## ([a-z_.]+)\b", line)
        if heading:
            section = heading.group(1)
        elif line.startswith("## "):
            section = None
        row = re.match(r"\| `([a-z_.]+)` \|", line)
        if row and section:
            keys.add(f"{section}.{row.group(1)}")
    return keys


def test_every_config_key_is_documented() -> None:
    missing = sorted(set(config_keys()) - documented_keys())
    assert not missing, f"document in docs/config.md: {missing}"


def test_every_documented_config_key_exists() -> None:
    unknown = sorted(documented_keys() - set(config_keys()))
    assert not unknown, f"docs/config.md documents keys the config does not have: {unknown}"


def test_the_environment_table_is_the_overrides() -> None:
    text = (DOCS / "config.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(HERMES_[A-Z_]+)` \| (.*?) \|$", text, re.M))
    for var, keys in config_module.ENV_OVERRIDES.items():
        assert rows.get(var) == f"`{'.'.join(keys)}`", f"docs/config.md: {var} -> {keys}"
    source = "\n".join(p.read_text(encoding="utf-8")
                       for p in (DOCS.parent / "hermes_redis").glob("*.py"))
    for var in set(rows) - set(config_module.ENV_OVERRIDES):
        assert f"{var}" in source, f"docs/config.md documents {var}, which nothing reads"
