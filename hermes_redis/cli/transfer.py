"""``hermes-redis session export`` and ``session import``: a session's whole history out as
JSON lines or markdown, and either format back in, as a new session or onto one.

The two formats are written and read here side by side. JSON lines are lossless (role,
content, tool calls, file refs, the structured item, the time said); markdown is for people
and carries what it shows (role, content, tool calls, file refs, the minute it was said).
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import click

from hermes_redis.cli.render import full_stamp, plural, seqs_upto, stamp
from hermes_redis.cli.state import State, emit_json, json_option, one_line, pass_state
from hermes_redis.core.api import SessionAPI  # issue 29
from hermes_redis.core.config import Config
from hermes_redis.core.errors import HermesError, ValidationError
from hermes_redis.core.incoming import MAX_BATCH, check_message
from hermes_redis.core.models import ROLES, Message, SessionInfo

UNTITLED = "Untitled session"
STAMP = "%Y-%m-%d %H:%M"  # render.stamp: the markdown's times, local, to the minute
HEADING = re.compile(rf"## (\d+) · ({'|'.join(ROLES)}) · (\d{{4}}-\d\d-\d\d \d\d:\d\d|-)")
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
# issue 44: the file is streamed twice, never held whole. The first pass reads and checks
# every message (a line over the limit, not UTF-8, not JSON, a bad field or date: one error
# naming the line) and nothing is written; the second makes the session and appends the
# messages in batches. A backend failure in the second pass removes the session it made.
CHUNK = 1 << 20  # bytes read at a time when spooling stdin or finding the first character
BATCH_BYTES = 4 << 20  # one append_many's messages as JSON, at most (one may be larger alone)
MAX_DIGITS = 4000  # a JSON integer longer than this is refused (Python's own cap is 4,300)
LAST_STAMP = 253402300800  # 10000-01-01: check_created_at's end


@dataclass
class Head:
    """What a markdown file's head says of its session (JSON lines carry neither)."""

    user: str | None = None
    title: str | None = None
    messages: int = field(default=0)


class _Digits(ValueError):
    def __init__(self, digits: int) -> None:
        super().__init__(digits)
        self.digits = digits


@click.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
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
def import_cmd(state: State, file: str, fmt: str | None, session_id: str | None,
               user_id: str | None, title: str | None, as_json: bool) -> None:
    """Read `session export`'s JSON lines or markdown (FILE, or - for stdin) into a new session.

    Every message is checked before anything is written; a file with a bad line changes
    nothing."""
    if session_id and (user_id or title):
        raise click.UsageError("--user and --title are for a new session, not with --session")
    name = "stdin" if file == "-" else file
    limit, cap = _limits(state)
    with _opened(file) as source:
        fmt = fmt or detect(name, _first_char(source))
        head = Head()
        for number, row in _rows(source, name, fmt, cap, head):
            _check(name, number, row, limit)
            head.messages += 1
        if not head.messages:
            raise ValidationError(f"{name} holds no messages as `hermes-redis session export` "
                                  f"writes them ({fmt}); check the file, or --format")
        source.seek(0)
        mem = state.mem()
        sid = state.sid(session_id) if session_id else None
        made = sid is None
        if sid is None:
            user, named = user_id or head.user, title or head.title or ""
            sid = (mem.create_session(user_id=user, title=named) if user
                   else mem.create_session(title=named))
        try:
            first, last = append_batches(mem, sid, (row for _, row in
                                                    _rows(source, name, fmt, cap, Head())),
                                         partial=not made)
        except BaseException as err:
            if not made:
                raise
            removed = _remove(mem, sid)
            if not isinstance(err, HermesError):
                raise
            raise type(err)(f"{one_line(str(err))}; nothing was imported"
                            + (f" (the new session {sid} was removed)" if removed else
                               f" (remove the new session: hermes-redis session delete {sid} "
                               "--purge)")) from None
    count = last - first + 1
    if as_json:
        emit_json({"session_id": sid, "messages": count, "first_seq": first, "last_seq": last})
        return
    click.echo(f"Imported {plural(count, 'message')} from {name} into session {sid} "
               f"(seq {first}–{last}).")


def _limits(state: State) -> tuple[int, int]:
    """The largest content and the largest line (one message as JSON, or one markdown
    message): the config's ``limits.max_content_bytes`` and ``server.max_body_bytes``.
    Through ``--server`` the content is held to the line's limit only: the server checks it
    against its own."""
    cfg = Config() if state.server_url else state.config()
    cap = cfg.server.max_body_bytes
    return (cap if state.server_url else cfg.limits.max_content_bytes), cap


class _opened:
    """FILE as a seekable binary file; stdin (or a pipe) is spooled to a temporary file,
    ``CHUNK`` at a time, so it can be read twice."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.handles: list[IO[bytes]] = []

    def __enter__(self) -> IO[bytes]:
        raw: IO[bytes]
        if self.file == "-":
            raw = sys.stdin.buffer
        else:
            raw = Path(self.file).open("rb")  # closed in __exit__
            self.handles.append(raw)
        try:
            seekable = raw.seekable()
        except (OSError, ValueError):
            seekable = False
        if seekable and self.file != "-":
            return raw
        spool = tempfile.TemporaryFile()  # closed in __exit__
        self.handles.append(spool)
        shutil.copyfileobj(raw, spool, CHUNK)
        spool.seek(0)
        return spool

    def __exit__(self, *exc: object) -> None:
        for handle in self.handles:
            handle.close()


def _first_char(source: IO[bytes]) -> str:
    """The file's first character that is not blank (after a UTF-8 BOM), or "" ; read a
    chunk at a time and the file rewound."""
    try:
        start = True
        while chunk := source.read(CHUNK):
            if start:
                chunk, start = chunk.removeprefix(b"\xef\xbb\xbf"), False
            rest = chunk.lstrip()
            if rest:
                return chr(rest[0])
        return ""
    finally:
        source.seek(0)


def detect(name: str, first: str) -> str:
    """jsonl or markdown: by the file's extension, else by its first character."""
    suffix = Path(name).suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    if suffix in (".md", ".markdown"):
        return "markdown"
    return "jsonl" if first == "{" else "markdown"


def _lines(source: IO[bytes], name: str, cap: int) -> Iterator[tuple[int, str]]:
    """Each line (numbered from 1, with its ``\\n``; ``\\r\\n`` read as ``\\n``), never more
    than ``cap`` bytes of it in memory: a longer line, or one not UTF-8, is an error naming it."""
    number = 0
    while raw := source.readline(cap + 1):
        number += 1
        if len(raw) > cap and not (len(raw) == cap + 1 and raw.endswith(b"\n")):
            raise ValidationError(f"{name} line {number} is over {cap:,} bytes, the most one "
                                  "message may take (server.max_body_bytes): shorten it, or "
                                  "split it into several messages")
        if number == 1:
            raw = raw.removeprefix(b"\xef\xbb\xbf")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise ValidationError(_not_utf8(name, number, raw, err)) from None
        yield number, (text[:-2] + "\n" if text.endswith("\r\n") else text)


def _not_utf8(name: str, number: int, raw: bytes, err: UnicodeDecodeError) -> str:
    if number == 1 and raw[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return (f"{name} is UTF-16, not UTF-8: convert it first (iconv -f UTF-16 -t UTF-8 "
                f"{name} > converted{Path(name).suffix})")
    return (f"{name} line {number} is not UTF-8 (byte 0x{raw[err.start]:02x} at column "
            f"{err.start + 1}): save the file as UTF-8 (for Latin-1: iconv -f LATIN1 -t UTF-8)")


def _rows(source: IO[bytes], name: str, fmt: str, cap: int,
          head: Head) -> Iterator[tuple[int, dict[str, Any]]]:
    """The file's messages as ``append_many`` items, each with the line it starts on."""
    lines = _lines(source, name, cap)
    return _jsonl(lines, name) if fmt == "jsonl" else _markdown_rows(lines, name, cap, head)


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise _Digits(len(text.lstrip("-")))
    return int(text)


def _jsonl(lines: Iterator[tuple[int, str]], name: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """One message per line, as ``Message.as_dict``; the message id, session and seq are the
    new session's (ids are unique in the archive), memory refs are left out."""
    for number, line in lines:
        if not line.strip():
            continue
        try:
            data = json.loads(line, parse_int=_int)
        except _Digits as err:
            raise ValidationError(f"{name} line {number} holds a number of {err.digits:,} "
                                  f"digits, over {MAX_DIGITS:,}: fix that field") from None
        except RecursionError:
            raise ValidationError(f"{name} line {number} nests too deep to be a message: fix "
                                  "the line") from None
        except ValueError as err:
            hint = " (is the file UTF-16? convert it to UTF-8)" if "\x00" in line else ""
            raise ValidationError(f"{name} line {number} is not JSON ({err}){hint}; import "
                                  "reads the JSON lines or markdown of `hermes-redis session "
                                  "export`") from None
        if not isinstance(data, dict) or not isinstance(data.get("content"), str):
            raise ValidationError(f"{name} line {number} is not a message: an object with role "
                                  "and content")
        yield number, _row(data.get("role"), data["content"], tool_calls=data.get("tool_calls"),
                           file_refs=data.get("file_refs"), created_at=data.get("created_at"),
                           item=data.get("item"))


def _seq_key(digits: str) -> tuple[int, str]:
    """A heading's seq, comparable without making an int of it (any number of digits)."""
    plain = digits.lstrip("0") or "0"
    return len(plain), plain


def _markdown_rows(lines: Iterator[tuple[int, str]], name: str, cap: int,
                   head: Head) -> Iterator[tuple[int, dict[str, Any]]]:
    """The messages under ``## SEQ · ROLE · TIME`` headings (seqs rising, so a heading quoted
    inside a message stays text), with the tool calls and files written under each; the
    title and the user from the head (into ``head``). The summary section is not a message:
    skipped. A message over ``cap`` characters is an error naming its heading."""
    current: tuple[int, re.Match[str]] | None = None
    last: tuple[int, str] | None = None
    body: list[str] = []
    size = 0
    for number, line in lines:
        found = HEADING.fullmatch(line.removesuffix("\n"))
        if found and (last is None or _seq_key(found.group(1)) > last):
            if current is not None:
                yield current[0], _markdown_row(name, current, body, final=False)
            current, last, body, size = (number, found), _seq_key(found.group(1)), [], 0
            continue
        if current is None:  # the head: the title on the first line, the user below it
            if number == 1 and line.startswith("# ") and line.endswith("\n"):
                named = line[2:-1]
                head.title = None if named == UNTITLED else named
            elif head.user is None and line.startswith("- User: ") and line[8:-1].strip():
                head.user = line[8:].strip()
            continue
        size += len(line)
        if size > cap:
            raise ValidationError(f"{name} line {current[0]}: the message under this heading "
                                  f"is over {cap:,} bytes, the most one message may take "
                                  "(server.max_body_bytes): shorten it, or split it")
        body.append(line)
    if current is not None:
        yield current[0], _markdown_row(name, current, body, final=True)


def _markdown_row(name: str, current: tuple[int, re.Match[str]], lines: list[str],
                  final: bool) -> dict[str, Any]:
    number, head = current
    body = ("\n" + "".join(lines)).removeprefix("\n\n").removesuffix("\n" if final else "\n\n")
    body, files = _tail(FILES, body)
    body, calls = _tail(CALLS, body)
    return _row(head.group(2), body,
                tool_calls=None if calls is None else _calls(name, number, calls),
                file_refs=None if files is None else re.findall(r"`([^`]*)`", files),
                created_at=_when(name, number, head.group(3)))


def _when(name: str, number: int, text: str) -> float | None:
    """A heading's local minute as Unix seconds (None for ``-``: now)."""
    if text == "-":
        return None
    try:
        when = time.mktime(time.strptime(text, STAMP))
    except (ValueError, OverflowError):
        raise ValidationError(f"{name} line {number}: {text} is not a date and time "
                              "(YYYY-MM-DD HH:MM, local): fix it, or write - for now") from None
    if not 0 <= when < LAST_STAMP:
        raise ValidationError(f"{name} line {number}: {text} is before 1970 or after 9999: fix "
                              "the date, or write - for now")
    return when


def _tail(pattern: re.Pattern[str], body: str) -> tuple[str, str | None]:
    """``body`` without the trailing block ``pattern`` matches, and that block's group."""
    found = pattern.search(body)
    return (body, None) if found is None else (body[:found.start()], found.group(1))


def _calls(name: str, number: int, text: str) -> Any:
    try:
        return json.loads(text, parse_int=_int)
    except (ValueError, RecursionError) as err:
        raise ValidationError(f"{name} line {number}: the tool calls are not JSON ({err}): fix "
                              "the ```json block") from None


def _row(role: object, content: str, **extra: Any) -> dict[str, Any]:
    """An ``append_many`` item: what the message gives, left out what it does not."""
    kept = {k: v for k, v in extra.items() if v is not None and not (k == "file_refs" and not v)}
    return {"role": role, "content": content, **kept}


def _check(name: str, number: int, row: dict[str, Any], limit: int) -> None:
    """The library's own checks of one message (content up to ``limit`` bytes), its error
    naming the line."""
    try:
        check_message(row, 0, limit, True)
    except ValidationError as err:
        raise ValidationError(f"{name} line {number}: {err}") from None
    except (TypeError, ValueError, OverflowError, RecursionError) as err:
        raise ValidationError(f"{name} line {number} is not a message ({type(err).__name__}: "
                              f"{err}): fix the line") from None


def _remove(mem: SessionAPI, sid: str) -> bool:
    """Remove the session an import made (whether it could); tried twice, as the failure
    that led here may have cost the connection."""
    for attempt in (1, 2):
        try:
            mem.delete(sid, purge=True)
        except HermesError:
            if attempt == 2:
                return False
        else:
            return True
    return False


def append_batches(mem: SessionAPI, sid: str, rows: Iterator[dict[str, Any]],
                   partial: bool = True) -> tuple[int, int]:
    """``rows`` appended in order, ``MAX_BATCH`` at a time and at most ``BATCH_BYTES`` of
    JSON (each batch one atomic step); the first and last seq. With ``partial`` (a session
    that stays), an error past the first batch says how far the import got."""
    first = last = 0
    done = 0
    batch: list[dict[str, Any]] = []
    size = 0

    def send() -> None:
        nonlocal first, last, done, batch, size
        try:
            stored = mem.append_many(sid, batch)
        except HermesError as err:
            if not done or not partial:
                raise
            raise type(err)(f"{one_line(str(err))} (in the batch from message {done + 1}; "
                            f"messages 1–{done} were imported into session {sid})") from None
        first, last = first or stored[0].seq, stored[-1].seq
        done += len(batch)
        batch, size = [], 0

    for row in rows:
        weight = len(json.dumps(row, ensure_ascii=False))
        if batch and (len(batch) >= MAX_BATCH or size + weight > BATCH_BYTES):
            send()
        batch.append(row)
        size += weight
    if batch:
        send()
    return first, last
