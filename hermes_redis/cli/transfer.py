"""``hermes-redis session export`` and ``session import``: a session's whole history out as
JSON lines or markdown, and either format back in, as a new session or onto one.

The two formats are written and read here side by side. JSON lines are lossless (role,
content, tool calls, file refs, the structured item, the time said); markdown is for people
and carries what it shows (role, content, tool calls, file refs, the minute it was said).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import click

from hermes_redis.cli.render import full_stamp, plural, seqs_upto, stamp
from hermes_redis.cli.state import State, emit_json, json_option, one_line, pass_state
from hermes_redis.core.api import SessionAPI  # issue 29
from hermes_redis.core.errors import HermesError, ValidationError
from hermes_redis.core.incoming import MAX_BATCH
from hermes_redis.core.models import ROLES, Message, SessionInfo, check_role

UNTITLED = "Untitled session"
STAMP = "%Y-%m-%d %H:%M"  # render.stamp: the markdown's times, local, to the minute
HEADING = re.compile(rf"^## (\d+) · ({'|'.join(ROLES)}) · (\d{{4}}-\d\d-\d\d \d\d:\d\d|-)$",
                     re.M)
FILES = re.compile(r"\n\nFiles: (`[^`\n]*`(?:, `[^`\n]*`)*)$")
CALLS = re.compile(r"\n\n```json\n(.*)\n```$", re.S)


@click.command()
@click.argument("session_id")
@click.option("--format", "fmt", type=click.Choice(("jsonl", "markdown")), default="jsonl",
              show_default=True)
@click.option("--output", "-o", metavar="FILE", type=click.Path(dir_okay=False, writable=True),
              help="Write here instead of stdout.")
@pass_state
def export(state: State, session_id: str, fmt: str, output: str | None) -> None:
    """The full history (archived and hot) as JSON lines or markdown."""
    sid = state.sid(session_id)
    mem = state.mem()
    messages = mem.messages(sid)
    if fmt == "jsonl":
        text = "".join(json.dumps(m.as_dict(), ensure_ascii=False) + "\n" for m in messages)
    else:
        text = _markdown(mem.info(sid), messages)
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        Path(output).write_text(text, encoding="utf-8")
    except OSError as err:
        raise click.FileError(output, hint=err.strerror or str(err)) from None
    click.echo(f"Wrote {plural(len(messages), 'message')} of session {sid} to {output}.")


def _markdown(info: SessionInfo, messages: list[Message]) -> str:
    lines = [
        f"# {one_line(info.title) or UNTITLED}",
        "",
        f"- Session: `{info.session_id}`",
        f"- User: {info.user_id}",
        f"- Status: {info.status}",
        f"- Created: {full_stamp(info.created_at)}",
        f"- Messages: {len(messages)}, {sum(m.token_count for m in messages):,} tokens",
    ]
    if info.summary:
        lines += ["", f"## Summary ({seqs_upto(info.summary_seq)})", "", info.summary]
    for m in messages:
        lines += ["", f"## {m.seq} · {m.role} · {stamp(m.created_at)}", "", m.content]
        if m.tool_calls:
            calls = json.dumps(json.loads(m.tool_calls), ensure_ascii=False, indent=2)
            lines += ["", "```json", calls, "```"]
        if m.file_refs:
            lines += ["", "Files: " + ", ".join(f"`{f}`" for f in m.file_refs)]
    return "\n".join(lines) + "\n"


# --- import ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Imported:
    """What a file holds: the messages as ``append_many`` items, and the session's user and
    title when the format carries them (markdown)."""

    rows: list[dict[str, Any]]
    user: str | None = None
    title: str | None = None


@click.command("import")
@click.argument("file", type=click.File("r", encoding="utf-8"))
@click.option("--format", "fmt", type=click.Choice(("jsonl", "markdown")), default=None,
              help="The file's format (default: from its name, else its first character).")
@click.option("--session", "session_id", metavar="SESSION_ID", default=None,
              help="Append to this session instead of creating one.")
@click.option("--user", "user_id", metavar="U", help="The new session's user (default: the "
              "markdown's, else the default user).")
@click.option("--title", metavar="T", help="The new session's title (default: the markdown's, "
              "else from the first user message).")
@json_option
@pass_state
def import_cmd(state: State, file: TextIO, fmt: str | None, session_id: str | None,
               user_id: str | None, title: str | None, as_json: bool) -> None:
    """Read `session export`'s JSON lines or markdown (FILE, or - for stdin) into a new session."""
    if session_id and (user_id or title):
        raise click.UsageError("--user and --title are for a new session, not with --session")
    text = file.read()
    name = "stdin" if file.name == "<stdin>" else file.name
    found = parse(text, name, fmt or detect(name, text))
    mem = state.mem()
    if session_id:
        sid = state.sid(session_id)
    else:
        user, named = user_id or found.user, title or found.title or ""
        sid = (mem.create_session(user_id=user, title=named) if user
               else mem.create_session(title=named))
    stored = append_batches(mem, sid, found.rows)
    if as_json:
        emit_json({"session_id": sid, "messages": len(stored), "first_seq": stored[0].seq,
                   "last_seq": stored[-1].seq})
        return
    click.echo(f"Imported {plural(len(stored), 'message')} from {name} into session {sid} "
               f"(seq {stored[0].seq}–{stored[-1].seq}).")


def detect(name: str, text: str) -> str:
    """jsonl or markdown: by the file's extension, else by its first character."""
    suffix = Path(name).suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    if suffix in (".md", ".markdown"):
        return "markdown"
    return "jsonl" if text.lstrip().startswith("{") else "markdown"


def parse(text: str, name: str, fmt: str) -> Imported:
    """Every message of the file, checked before anything is written: a line that is not a
    message is an error naming it, and a file with none is an error too."""
    found = parse_jsonl(text, name) if fmt == "jsonl" else parse_markdown(text, name)
    if not found.rows:
        raise ValidationError(f"{name} holds no messages as `hermes-redis session export` writes "
                              f"them ({fmt}); check the file, or --format")
    return found


def parse_jsonl(text: str, name: str) -> Imported:
    """One message per line, as ``Message.as_dict``; the message id, session and seq are the
    new session's (ids are unique in the archive), memory refs are left out."""
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError as err:
            raise ValidationError(f"{name} line {number} is not JSON ({err}); import reads the "
                                  "JSON lines or markdown of `hermes-redis session export`") from None
        if not isinstance(data, dict) or not isinstance(data.get("content"), str):
            raise ValidationError(f"{name} line {number} is not a message: an object with role "
                                  "and content")
        rows.append(_row(name, number, data.get("role"), data["content"],
                         tool_calls=data.get("tool_calls"), file_refs=data.get("file_refs"),
                         created_at=data.get("created_at"), item=data.get("item")))
    return Imported(rows)


def parse_markdown(text: str, name: str) -> Imported:
    """The messages under ``## SEQ · ROLE · TIME`` headings (seqs rising, so a heading quoted
    inside a message stays text), with the tool calls and files written under each; the
    title and the user from the head. The summary section is not a message: skipped."""
    rows: list[dict[str, Any]] = []
    heads: list[re.Match[str]] = []
    for m in HEADING.finditer(text):
        if not heads or int(m.group(1)) > int(heads[-1].group(1)):
            heads.append(m)
    for i, head in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        body = text[head.end():end].removeprefix("\n\n")
        body = body.removesuffix("\n\n" if i + 1 < len(heads) else "\n")
        body, files = _tail(FILES, body)
        body, calls = _tail(CALLS, body)
        number = text.count("\n", 0, head.start()) + 1
        stamp_text = head.group(3)
        rows.append(_row(name, number, head.group(2), body,
                         tool_calls=None if calls is None else _calls(name, number, calls),
                         file_refs=None if files is None else re.findall(r"`([^`]*)`", files),
                         created_at=None if stamp_text == "-" else
                         time.mktime(time.strptime(stamp_text, STAMP))))
    title = re.match(r"# (.*)\n", text)
    user = re.search(r"^- User: (.+)$", text[:heads[0].start()] if heads else text, re.M)
    return Imported(rows, user=user.group(1).strip() if user else None,
                    title=None if title is None or title.group(1) == UNTITLED else title.group(1))


def _tail(pattern: re.Pattern[str], body: str) -> tuple[str, str | None]:
    """``body`` without the trailing block ``pattern`` matches, and that block's group."""
    found = pattern.search(body)
    return (body, None) if found is None else (body[:found.start()], found.group(1))


def _calls(name: str, number: int, text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as err:
        raise ValidationError(f"{name} line {number}: the tool calls are not JSON ({err})") from None


def _row(name: str, number: int, role: object, content: str, **extra: Any) -> dict[str, Any]:
    """An ``append_many`` item; its role checked here so a bad one names its line."""
    try:
        check_role(role)
    except ValidationError as err:
        raise ValidationError(f"{name} line {number}: {err}") from None
    kept = {k: v for k, v in extra.items() if v is not None and not (k == "file_refs" and not v)}
    return {"role": role, "content": content, **kept}


def append_batches(mem: SessionAPI, sid: str, rows: list[dict[str, Any]]) -> list[Message]:
    """``rows`` appended in order, ``MAX_BATCH`` at a time (each batch one atomic step). An
    error past the first batch says how far the import got."""
    stored: list[Message] = []
    for start in range(0, len(rows), MAX_BATCH):
        try:
            stored += mem.append_many(sid, rows[start:start + MAX_BATCH])
        except HermesError as err:
            if not stored:
                raise
            raise type(err)(f"{one_line(str(err))} (in the batch from message {start + 1}; "
                            f"messages 1–{start} were imported into session {sid})") from None
    return stored
