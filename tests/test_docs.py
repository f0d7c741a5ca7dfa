"""The docs cover the code and name nothing that is not there (as sqlite-utils' test_docs):
every CLI command, argument and option is in the summary at the top of docs/cli.md, every
``### `command```  heading there names a real command, and every config key (the seed's
aliases too) and environment override is in docs/config.md's tables."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import typing
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from hermes_redis.cli.main import cli
from hermes_redis.core import config as config_module
from tests.http_server import ServeProcess, serve_config
from tests.http_server import cli as serve_cli
from tests.redis_server import RedisServer

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
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
                       for p in (DOCS.parent / "hermes_redis").rglob("*.py"))
    for var in set(rows) - set(config_module.ENV_OVERRIDES):
        assert f"{var}" in source, f"docs/config.md documents {var}, which nothing reads"


# --- the examples run as written ----------------------------------------------------------------
# Every ```python block of these pages runs, as its own process, against a real `hermes-redis
# serve` (a private Redis and archive) from a directory whose config.yml is that deployment's, with
# $HERMES_SERVER_URL and $HERMES_API_KEY (alice's key) set as the pages say. A python block
# followed at once by a plain ``` block must print exactly that block.
EXAMPLE_PAGES = ("http.md", "mcp.md", "integrations.md", "../README.md")
NEEDS_A_MODEL = "from agents import"  # the OpenAI Agents SDK example calls OpenAI's API


def python_examples(page: str) -> list[tuple[str, str | None]]:
    """The page's python blocks in order, each with the output block right after it (or None)."""
    text = (DOCS / page).read_text(encoding="utf-8")
    fences = list(re.finditer(r"^```(\w*)\n(.*?)^```$", text, re.S | re.M))
    out: list[tuple[str, str | None]] = []
    for i, fence in enumerate(fences):
        if fence.group(1) != "python":
            continue
        after = fences[i + 1] if i + 1 < len(fences) else None
        shown = (after.group(2) if after is not None and after.group(1) == ""
                 and not text[fence.end():after.start()].strip() else None)
        out.append((fence.group(2), shown))
    return out


EXAMPLES = [(page, i) for page in EXAMPLE_PAGES for i in range(len(python_examples(page)))]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer
               ) -> Iterator[tuple[Path, dict[str, str]]]:
    """A directory holding the deployment's config.yml, and the environment the pages assume."""
    if redis_server.proc is None:
        redis_server.start()
    directory = tmp_path_factory.mktemp("examples")
    config = serve_config(directory, redis_server.url)
    key = json.loads(serve_cli(config, "key", "create", "--user", "alice", "--json").stdout)["key"]
    server = ServeProcess(config).start()
    try:
        yield directory, {"HERMES_SERVER_URL": server.url, "HERMES_API_KEY": key,
                          "HERMES_CONFIG": str(config)}
    finally:
        server.stop()


@pytest.mark.parametrize(("page", "index"), EXAMPLES, ids=[f"{p}#{i + 1}" for p, i in EXAMPLES])
def test_the_python_examples_run(page: str, index: int,
                                 deployment: tuple[Path, dict[str, str]]) -> None:
    code, shown = python_examples(page)[index]
    if NEEDS_A_MODEL in code:
        pytest.skip("calls OpenAI's API (needs OPENAI_API_KEY); the adapter's tests run its calls")
    directory, env = deployment
    script = directory / f"example-{Path(page).stem}-{index}.py"
    script.write_text(code, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=directory, timeout=120, env={**os.environ, **env})
    assert done.returncode == 0, f"docs/{page} example {index + 1} failed:\n{done.stderr}"
    if shown is not None:
        assert done.stdout == shown, f"docs/{page} example {index + 1} prints otherwise"


# --- the walkthrough in docs/cli.md runs as written --------------------------------------------
# "A session, start to finish" up to "Slash commands": every `$ ` line, in order, in one bash
# script, on the embedded default (a private Redis under the walkthrough's data directory, which
# is a temporary one here). Each command's output must be what the page shows after it, once
# ids, times, scores and the temporary directory are set aside. `WRITE_DOCS=1` pastes
# the outputs of the run into the page instead (then review the diff).
WALK = ("## A session, start to finish", "## Slash commands")
WALK_DIR = "/tmp/hermes-demo"
VARYING = [  # (pattern, what it stands for): what differs from run to run
    # an id: 8 to 32 hex digits with a letter and a digit, or exactly 8 or 32 of them (an
    # 8-character id is all digits about one time in 40)
    (re.compile(r"(?<![0-9a-f])(?:(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,32}|[0-9a-f]{32}"
                r"|[0-9a-f]{8})(?![0-9a-f])"), "<id>"),
    (re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d(:\d\d)?"), "<time>"),
    (re.compile(r"\(\d+[smhd]( \d+[smh])? ago\)"), "(<ago>)"),
    (re.compile(r"\d+[mh]( \d+[sm])? left"), "<n> left"),
    (re.compile(r"\d+\.\d+"), "<float>"),
    (re.compile(r'"ttl_left": \d+'), '"ttl_left": <n>'),
]


@dataclasses.dataclass
class Step:
    command: str
    shown: list[str]


def walkthrough_steps(text: str) -> list[Step]:
    start, end = (text.index(h) for h in WALK)
    steps: list[Step] = []
    for block in re.findall(r"^```console\n(.*?)^```$", text[start:end], re.S | re.M):
        for line in block.splitlines():
            if line.startswith("$ "):
                steps.append(Step(line[2:], []))
            elif steps:
                steps[-1].shown.append(line)
    return steps


def normalize(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        for pattern, stand_in in VARYING:
            line = pattern.sub(stand_in, line)
        out.append(line.rstrip())
    return out


def run_walkthrough(steps: list[Step], directory: Path) -> list[tuple[int, list[str]]]:
    """Each step's exit code and output (stdout and stderr, as a terminal shows them)."""
    (directory / "home").mkdir()
    outputs = directory / ".out"
    outputs.mkdir()
    script = ["set +e", f"cd {directory}", f'export PATH="{Path(sys.executable).parent}:$PATH"',
              f'export PYTHONPATH="{ROOT}"',  # this checkout's code, whatever the venv installed
              f'export HOME="{directory}/home"', "unset $(env | grep -o '^HERMES_[A-Z_]*')"]
    for i, step in enumerate(steps):
        command = step.command.replace(WALK_DIR, str(directory))
        cat = re.fullmatch(r"cat (\S+)", command)
        if cat:  # the page shows the file: write it first
            (directory / cat.group(1)).write_text(
                "\n".join(step.shown).replace(WALK_DIR, str(directory)) + "\n", encoding="utf-8")
        script.append(f"{{ {command}\n}} >{outputs}/{i} 2>&1; rc=$?; echo $rc >{outputs}/{i}.rc; "
                      "(exit $rc)")
    (directory / "walk.sh").write_text("\n".join(script) + "\n", encoding="utf-8")
    try:
        subprocess.run(["bash", str(directory / "walk.sh")], timeout=600, check=False,
                       env={k: v for k, v in os.environ.items() if not k.startswith("HERMES_")})
    finally:
        subprocess.run([sys.executable, "-m", "hermes_redis", "--config",
                        str(directory / "config.yml"), "server", "stop"],
                       capture_output=True, timeout=60, check=False, env={"HOME": str(directory / "home"),
                                                                          "PATH": os.environ["PATH"]})
    results = []
    for i in range(len(steps)):
        rc = int((outputs / f"{i}.rc").read_text() or 1) if (outputs / f"{i}.rc").exists() else -1
        text = (outputs / f"{i}").read_text(encoding="utf-8") if (outputs / f"{i}").exists() else ""
        results.append((rc, text.replace(str(directory), WALK_DIR).splitlines()))
    return results


@pytest.mark.stack("default", reason="the walkthrough runs on the embedded Redis and a SQLite "
                   "archive whatever the stack: once is enough")
def test_the_cli_walkthrough_runs_as_shown(tmp_path: Path) -> None:
    page = DOCS / "cli.md"
    text = page.read_text(encoding="utf-8")
    steps = walkthrough_steps(text)
    assert len(steps) > 50
    results = run_walkthrough(steps, tmp_path)
    if os.environ.get("WRITE_DOCS"):
        start, end = (text.index(h) for h in WALK)
        region, done = text[start:end], iter(results)

        def paste(block: re.Match[str]) -> str:
            lines: list[str] = []
            for line in block.group(1).splitlines():
                if line.startswith("$ "):
                    lines.append(line)
                    lines.extend(next(done)[1])
            return "```console\n" + "".join(f"{line}\n" for line in lines) + "```"

        region = re.sub(r"^```console\n(.*?)^```$", paste, region, flags=re.S | re.M)
        page.write_text(text[:start] + region + text[end:], encoding="utf-8")
    failures = []
    for step, (rc, got) in zip(steps, results, strict=True):
        if rc < 0:
            failures.append(f"$ {step.command}\n  did not run (an earlier step stopped the script)")
        elif normalize(got) != normalize(step.shown):
            failures.append(f"$ {step.command}\n  shown:\n    " + "\n    ".join(step.shown)
                            + "\n  printed:\n    " + "\n    ".join(got))
    assert not failures, "docs/cli.md walkthrough differs:\n" + "\n".join(failures[:5])
