"""``hermes-redis``: a thin click skin over SessionMemory.

The library does the work; this module parses arguments and formats results. Every
read command takes ``--json``. Expected errors (the HermesError family) print one
``Error: …`` line on stderr and exit with the error's code, never a traceback.
SessionMemory is built on first use, so ``--help`` works without Redis.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import click

from hermes_redis import __version__, embedded
from hermes_redis import config as config_mod
from hermes_redis.backends import open_archive
from hermes_redis.client import HermesClient
from hermes_redis.config import Config
from hermes_redis.errors import ConfigError, HermesError
from hermes_redis.keys import KeyStore
from hermes_redis.models import (
    Context,
    Message,
    SessionInfo,
    memories_text,
    recalled_text,
    summary_text,
)
from hermes_redis.models import Memory as MemoryRecord
from hermes_redis.render import (
    clean,
    clean_block,
    context_shape,
    full_stamp,
    plural,
    report_lines,
    seqs_upto,
    session_report,
    stamp,
    table,
    truncate,
    usage_line,
)
from hermes_redis.session_memory import SessionMemory

Memory = SessionMemory | HermesClient  # what a command operates: in-process, or --server

STATUS_CHOICES = ("active", "archived", "deleted", "all")
TITLE_CELLS = 32
SNIPPET_CELLS = 60


def one_line(text: str) -> str:
    return " ".join(text.split())


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
            raise CliError(err) from None
        except click.UsageError as err:
            raise BadUsage.from_usage(err) from None


class State:
    """The config path from ``--config`` (or a remote ``--server``); config and SessionMemory
    (or the HermesClient) are made on first use."""

    def __init__(self, config_path: str | None, server_url: str | None = None,
                 api_key: str | None = None) -> None:
        self.config_path = config_path
        self.server_url, self.api_key = server_url, api_key
        self._config: Config | None = None
        self._mem: Memory | None = None

    def config(self) -> Config:
        if self._config is None:
            self._config = config_mod.load(self.config_path)
        return self._config

    def mem(self) -> Memory:
        if self._mem is None:
            self._mem = (HermesClient(self.server_url, self.api_key) if self.server_url
                         else SessionMemory(self.config()))
        return self._mem

    def local(self, what: str) -> SessionMemory:
        """The in-process SessionMemory: ``what`` runs on the server's host, not via --server."""
        if self.server_url:
            raise ConfigError(f"{what} runs on the server's host, not through --server; "
                              "drop --server (and $HERMES_SERVER_URL)")
        mem = self.mem()
        assert isinstance(mem, SessionMemory)
        return mem

    def sid(self, prefix: str) -> str:
        """A full session id from what the user typed (a unique prefix is enough)."""
        return self.mem().resolve(prefix)

    def close(self) -> None:
        if self._mem is not None:
            self._mem.close()
            self._mem = None


pass_state = click.make_pass_decorator(State)


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, ensure_ascii=False, indent=2))


def json_option(fn: Any) -> Any:
    return click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")(fn)


def user_option(fn: Any) -> Any:
    return click.option("--user", "user_id", metavar="U", help="Only this user's sessions.")(fn)


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


# --- session -----------------------------------------------------------------------------------
@cli.group()
def session() -> None:
    """List, resume, forget, archive and export sessions."""


@session.command("list")
@user_option
@click.option("--status", type=click.Choice(STATUS_CHOICES), default="active", show_default=True,
              help="Which sessions to show.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True,
              help="Sessions per page.")
@click.option("--cursor", metavar="CURSOR", default=None,
              help="Continue a listing where the previous page ended.")
@json_option
@pass_state
def list_cmd(state: State, user_id: str | None, status: str, limit: int, cursor: str | None,
             as_json: bool) -> None:
    """Sessions from both tiers, newest first, a page at a time."""
    mem = state.mem()
    infos = mem.list_sessions(user_id=user_id, status=status, limit=limit, cursor=cursor)
    more = (f"More: hermes-redis session list --cursor {infos.next_cursor}"
            if infos.next_cursor else None)
    if as_json:
        emit_json([_list_entry(i) for i in infos])
        if more:
            click.echo(more, err=True)
        return
    if not infos:
        which = "" if status == "all" else f"{status} "
        who = f" for user {user_id}" if user_id else ""
        click.echo(f"No {which}sessions{who}.")
        return
    short = mem.short_ids([i.session_id for i in infos])
    rows = [
        (short[i.session_id], truncate(clean(i.title) or "(untitled)", TITLE_CELLS),
         truncate(clean(i.user_id), 16), i.status, i.message_count, stamp(i.updated_at))
        for i in infos
    ]
    click.echo(table(("ID", "TITLE", "USER", "STATUS", "MESSAGES", "UPDATED"), rows, right=(4,)))
    if more:
        click.echo(more)


def _list_entry(info: SessionInfo) -> dict[str, Any]:
    """The list knows no per-tier counts or TTL: leave them out rather than report zeros."""
    data = info.as_dict()
    for key in ("hot_count", "archived_count", "ttl_left"):
        data.pop(key, None)
    return data


@session.command()
@click.argument("session_id", required=False)
@user_option
@click.option("--query", "-q", default=None,
              help="Recall the older messages most relevant to this (default: the newest user "
                   "message; '' for none).")
@click.option("--budget", type=click.IntRange(min=1), default=None,
              help="Tokens the context may use (default: the model's window less the reply).")
@json_option
@pass_state
def resume(state: State, session_id: str | None, user_id: str | None, query: str | None,
           budget: int | None, as_json: bool) -> None:
    """The context that would be injected now (the latest active session without an id)."""
    mem = state.mem()
    ctx = mem.resume(state.sid(session_id) if session_id else None, user_id=user_id,
                     budget=budget, query=query)
    if as_json:
        emit_json({**ctx.as_dict(), "chat": ctx.as_chat()})
        return
    click.echo(_context_text(mem, ctx))


def _context_text(mem: Memory, ctx: Context) -> str:
    info = mem.info(ctx.session_id)
    head = [
        f"Session {ctx.session_id} · {clean(info.title) or '(untitled)'} · user {clean(info.user_id)}",
        f"Token usage: {usage_line(ctx.tokens, ctx.window)}; {context_shape(ctx)}",
    ]
    blocks = ["\n".join(head)]
    if ctx.memories:
        blocks.append("[system] " + clean_block(memories_text(ctx.memories)))
    blocks.extend(f"[{m.role} #{m.seq}] {clean_block(m.content)}" for m in ctx.opening)
    if ctx.summary:
        blocks.append("[system] " + clean_block(summary_text(ctx.summary)))
    if ctx.recalled:
        blocks.append("[system] " + clean_block(recalled_text(ctx.recalled)))
    blocks.extend(f"[{m.role} #{m.seq}] {clean_block(m.content)}" for m in ctx.messages)
    if not ctx.memories and not ctx.summary and not ctx.messages:
        blocks.append("(empty: nothing would be injected)")
    return "\n\n".join(blocks)


@session.command()
@click.argument("session_id")
@pass_state
def archive(state: State, session_id: str) -> None:
    """Keep everything but stop loading the session into context."""
    sid = state.sid(session_id)
    state.mem().archive(sid)
    click.echo(f"Archived session {sid}; `hermes-redis session restore {sid[:8]}` undoes it.")


@session.command()
@click.argument("session_id")
@pass_state
def restore(state: State, session_id: str) -> None:
    """Make an archived session active again."""
    sid = state.sid(session_id)
    state.mem().restore(sid)
    click.echo(f"Restored session {sid}; it is active again.")


@session.command()
@click.argument("session_id")
@click.option("--purge", is_flag=True, help="Also remove its messages from the archive.")
@pass_state
def delete(state: State, session_id: str, purge: bool) -> None:
    """Mark the session deleted and drop its hot keys."""
    sid = state.sid(session_id)
    mem = state.mem()
    count = mem.info(sid).message_count
    mem.delete(sid, purge=purge)
    if purge:
        click.echo(f"Deleted session {sid} and purged its {plural(count, 'archived message')}.")
    else:
        click.echo(f"Deleted session {sid}; the archive keeps its {plural(count, 'message')} "
                   "(--purge removes them).")


@session.command()
@click.argument("session_id")
@click.option("--last", type=click.IntRange(min=1), metavar="N", help="Forget the last N turns.")
@click.option("--keyword", metavar="WORD",
              help="Forget every message containing WORD (case-insensitive).")
@pass_state
def forget(state: State, session_id: str, last: int | None, keyword: str | None) -> None:
    """Remove messages from both tiers for good (exactly one of --last, --keyword)."""
    if (last is None) == (keyword is None):
        raise click.UsageError("give exactly one of --last N or --keyword WORD")
    sid = state.sid(session_id)
    mem = state.mem()
    if last is not None:
        n = mem.forget_last(sid, last)
        what = f"in the last {last} turn{'' if last == 1 else 's'}"
    else:
        assert keyword is not None
        n = mem.forget_keyword(sid, keyword)
        what = f"containing {keyword!r}"
    if n == 0:
        click.echo(f"Nothing forgotten: no message {what} in session {sid}.")
        return
    info = mem.info(sid)
    click.echo(f"Forgot {plural(n, 'message')} {what} from session {sid}; "
               f"{plural(info.message_count, 'message')}, {plural(info.total_tokens, 'token')} "
               "remain.")


@session.command()
@click.argument("session_id")
@click.option("--history", is_flag=True,
              help="Also forget every message from both tiers for good (memories stay).")
@pass_state
def clear(state: State, session_id: str, history: bool) -> None:
    """Empty the session's context; the archive and persistent memories stay."""
    sid = state.sid(session_id)
    mem = state.mem()
    count = mem.info(sid).message_count if history else 0
    mem.clear(sid, history=history)
    if history:
        click.echo(f"Cleared session {sid} and forgot its {plural(count, 'message')} from both "
                   "tiers; persistent memories stay.")
        return
    kept = mem.info(sid).message_count
    click.echo(f"Cleared the context of session {sid}; the archive keeps its "
               f"{plural(kept, 'message')} and persistent memories stay.")


@session.command()
@click.argument("session_id")
@json_option
@pass_state
def pop(state: State, session_id: str, as_json: bool) -> None:
    """Remove the newest message from both tiers for good and show it."""
    sid = state.sid(session_id)
    msg = state.mem().pop(sid)
    if as_json:
        emit_json(None if msg is None else msg.as_dict())
        return
    if msg is None:
        click.echo(f"Nothing popped: session {sid} has no messages.")
        return
    click.echo(f"Popped message {msg.seq} ({msg.role}) from session {sid}: "
               f"{truncate(one_line(msg.content), SNIPPET_CELLS)}")


@session.command()
@click.argument("session_id")
@pass_state
def compact(state: State, session_id: str) -> None:
    """Summarize older turns now instead of waiting for a worker."""
    sid = state.sid(session_id)
    result = state.mem().compact(sid)
    if result is None:
        click.echo(f"Nothing to compact in session {sid}.")
        return
    click.echo(f"Compacted session {sid}: the summary covers "
               f"{seqs_upto(result.summarized_upto)} "
               f"({result.summary_tokens:,} tokens), {result.kept} messages stay verbatim.")


@session.command()
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
        f"# {one_line(info.title) or 'Untitled session'}",
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


# --- top-level commands ------------------------------------------------------------------------
@cli.command()
@click.argument("session_id")
@json_option
@pass_state
def info(state: State, session_id: str, as_json: bool) -> None:
    """Both tiers in one view: counts, tokens, context usage, TTL, summary, backlog."""
    mem = state.mem()
    if isinstance(mem, HermesClient):
        _remote_info(mem, state.sid(session_id), as_json)
        return
    report = session_report(mem, state.sid(session_id))
    if as_json:
        emit_json(report.as_dict())
        return
    click.echo("\n".join(report_lines(report)))


# --- memory ------------------------------------------------------------------------------------
@cli.group()
def memory() -> None:
    """A user's persistent memories: what every new session of theirs starts with."""


def _memory_user(user_id: str | None) -> str:
    if not user_id:
        raise click.UsageError("say whose memories: --user U")
    return user_id


def _show_memories(rows: list[MemoryRecord], user: str, as_json: bool, empty: str) -> None:
    if as_json:
        emit_json([m.as_dict() for m in rows])
        return
    if not rows:
        click.echo(empty)
        return
    table_rows = [(m.memory_id, truncate(clean(m.content), SNIPPET_CELLS),
                   m.kind if m.current else f"replaced by {m.superseded_by}",
                   (m.session_id or "")[:8] + (f" #{m.seq}" if m.seq is not None else ""),
                   full_stamp(m.created_at)[:16])
                  for m in rows]
    click.echo(table(("MEMORY", "CONTENT", "KIND", "SAID IN", "CREATED"), table_rows))


@memory.command("list")
@user_option
@click.option("--all", "superseded", is_flag=True,
              help="Also the memories newer ones replaced (their history).")
@json_option
@pass_state
def memory_list(state: State, user_id: str | None, superseded: bool, as_json: bool) -> None:
    """The user's current memories, oldest first."""
    user = _memory_user(user_id)
    _show_memories(state.mem().memories(user, superseded=superseded), user, as_json,
                   f"No memories for user {user}.")


@memory.command("add")
@click.argument("text")
@user_option
@click.option("--session", "session_id", metavar="SESSION_ID", default=None,
              help="The session it came from.")
@pass_state
def memory_add(state: State, text: str, user_id: str | None, session_id: str | None) -> None:
    """Remember TEXT for the user (as /remember does)."""
    user = _memory_user(user_id)
    sid = state.sid(session_id) if session_id else None
    memory_id = state.mem().remember(user, text, session_id=sid)
    click.echo(f"Remembered for {user}: {memory_id}")


@memory.command("forget")
@click.argument("memory_id")
@user_option
@pass_state
def memory_forget(state: State, memory_id: str, user_id: str | None) -> None:
    """Forget one memory for good (by the id `memory list` shows)."""
    state.mem().forget_memory(memory_id, user_id=user_id)
    click.echo(f"Forgot memory {memory_id}.")


@memory.command("search")
@click.argument("query")
@user_option
@json_option
@pass_state
def memory_search(state: State, query: str, user_id: str | None, as_json: bool) -> None:
    """The user's memories that share a distinctive word with QUERY, best first."""
    user = _memory_user(user_id)
    rows = state.mem().memories(user, query=query)
    _show_memories(rows, user, as_json, f"No memories of {user} match {query!r}.")


@cli.command()
@click.argument("query")
@user_option
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True,
              help="At most this many hits.")
@json_option
@pass_state
def search(state: State, query: str, user_id: str | None, limit: int, as_json: bool) -> None:
    """Full-text search over archived and hot messages, best match first."""
    mem = state.mem()
    hits = mem.search(query, user_id=user_id, limit=limit)
    if as_json:
        emit_json([h.as_dict() for h in hits])
        return
    if not hits:
        click.echo(f"No messages match {query!r}.")
        return
    short = mem.short_ids([h.session_id for h in hits])
    rows = [
        (short[h.session_id], h.seq, h.role, truncate(clean(h.title) or "(untitled)", 24),
         truncate(clean(h.snippet), SNIPPET_CELLS))
        for h in hits
    ]
    click.echo(table(("SESSION", "SEQ", "ROLE", "TITLE", "SNIPPET"), rows, right=(1,)))


def _remote_info(mem: HermesClient, sid: str, as_json: bool) -> None:
    """``info`` through --server: what the HTTP API reports (no server-side config)."""
    info = mem.info(sid)
    ctx = mem.context(sid, touch=False) if info.status == "active" else None
    if as_json:
        emit_json({**info.as_dict(), "context": None if ctx is None else {
            "tokens": ctx.tokens, "window": ctx.window, "budget": ctx.budget,
            "usage": round(ctx.usage, 4), "shape": context_shape(ctx)}})
        return
    lines = [f"Session {sid} · {clean(info.title) or '(untitled)'} · user {clean(info.user_id)}",
             f"Status: {info.status}; {plural(info.message_count, 'message')}, "
             f"{plural(info.total_tokens, 'token')}; {plural(info.backlog, 'message')} not yet archived"]
    if ctx is not None:
        lines.append(f"Token usage: {usage_line(ctx.tokens, ctx.window)}; {context_shape(ctx)}")
    click.echo("\n".join(lines))


@cli.command()
@click.option("--burst", is_flag=True, help="Sweep, drain the queue, then exit.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=0, metavar="PORT",
              help="Serve Prometheus metrics on 127.0.0.1:PORT/metrics (0: off).")
@pass_state
def worker(state: State, burst: bool, metrics_port: int) -> None:
    """Run an RQ worker that archives and compacts sessions (redis backend only)."""
    mem = state.local("worker")
    if not mem.hot.needs_worker:
        raise ConfigError(f"{mem.config.source}: the worker needs memory.session.backend: redis "
                          f"(it is {mem.hot.name}: appends flush in-process)")
    from workers.worker import run

    where = f"queue {mem.config.redis.queue!r} on {mem.hot.url}"
    if not burst:
        click.echo(f"Worker listening on {where}; Ctrl-C stops it.", err=True)
    if metrics_port:
        click.echo(f"Metrics on http://127.0.0.1:{metrics_port}/metrics", err=True)
    run(mem, burst=burst, metrics_port=metrics_port)
    if burst:
        click.echo(f"Burst done: swept every session and drained {where}.")


@cli.command()
@json_option
@pass_state
def doctor(state: State, as_json: bool) -> None:
    """Is this deployment safe? One line per check, a fix for each; exit 1 on any failure."""
    from hermes_redis import doctor as doctor_mod

    if state.server_url:
        raise ConfigError("doctor runs on the server's host, not through --server; drop --server "
                          "(and $HERMES_SERVER_URL)")
    checks = doctor_mod.run(state.config())
    if as_json:
        emit_json({"ok": not doctor_mod.failed(checks), "checks": [c.as_dict() for c in checks]})
    else:
        width = max(len(c.name) for c in checks)
        for c in checks:
            fix = f" -> {c.fix}" if c.fix and c.status != doctor_mod.OK else ""
            click.echo(f"{c.status.upper():<4}  {c.name:<{width}}  {c.detail}{fix}")
    if doctor_mod.failed(checks):
        sys.exit(1)


@cli.command()
@click.option("--user", "user_id", metavar="U",
              help="Scope the tools to this user's sessions and memories (default: all).")
@pass_state
def mcp(state: State, user_id: str | None) -> None:
    """Serve the MCP tools (append, context, remember, recall, info, forget…) over stdio."""
    from hermes_redis.mcp_server import serve_stdio

    serve_stdio(state.local("hermes-redis mcp"), user_id)


@cli.group()
def server() -> None:
    """The embedded Redis started when no redis.url is configured."""


@server.command()
@pass_state
def stop(state: State) -> None:
    """Shut the embedded Redis down, saving its data."""
    config = state.config()
    if embedded.stop(config.data_dir):
        click.echo(f"Stopped the embedded Redis under {config.data_dir}.")
    else:
        click.echo(f"The embedded Redis under {config.data_dir} is not running.")
    if config.redis.url:
        click.echo("Note: redis.url is configured, so the embedded Redis is not in use.")


@cli.command()
@click.option("--host", metavar="H", help="Interface to listen on (default: server.host, 127.0.0.1).")
@click.option("--port", type=click.IntRange(1, 65535), help="Port (default: server.port, 8080).")
@click.option("--workers", type=click.IntRange(min=1), help="Worker processes (default: 1).")
@click.option("--access-log", is_flag=True, help="Log every request line (never headers or keys).")
@pass_state
def serve(state: State, host: str | None, port: int | None, workers: int | None,
          access_log: bool) -> None:
    """The HTTP API: /v1 routes, OpenAPI at /openapi.json, docs at /docs, /metrics."""
    import uvicorn

    from hermes_redis.server import app_from_env, create_app, is_loopback

    mem = state.local("serve")  # connects now: a bad Redis or archive is one line, not a traceback
    config = mem.config
    host, port = host or config.server.host, port or config.server.port
    workers = workers or config.server.workers
    if workers > 1 and not mem.hot.needs_worker:
        raise ConfigError(f"{config.source}: --workers {workers} needs memory.session.backend: redis "
                          f"(the {mem.hot.name} backend keeps sessions inside one process); "
                          "use --workers 1")
    active = KeyStore(mem.cold).active()
    if active == 0 and not is_loopback(host):
        raise ConfigError(f"refusing to listen on {host} with no API keys: anyone could read every "
                          "session. Create one with `hermes-redis key create --user U` (or --admin), "
                          "or listen on 127.0.0.1")
    os.environ.update(HERMES_SERVER_HOST=host, HERMES_SERVER_PORT=str(port),
                      HERMES_SERVER_WORKERS=str(workers))
    if state.config_path:
        os.environ["HERMES_CONFIG"] = str(Path(state.config_path).resolve())
    auth = (f"{plural(active, 'API key')} active: /v1 needs Authorization: Bearer" if active else
            "no API keys: serving without auth, on loopback only "
            "(`hermes-redis key create` turns auth on)")
    click.echo(f"Serving hermes-redis on http://{host}:{port} ({plural(workers, 'worker')}); "
               f"{auth}. Docs at /docs.", err=True)
    if workers == 1:
        app = create_app(config.with_overrides(server={"host": host, "port": port}), mem=mem)
        uvicorn.run(app, host=host, port=port, access_log=access_log, log_level="info")
        return
    state.close()
    made = None if os.environ.get("PROMETHEUS_MULTIPROC_DIR") else tempfile.mkdtemp(prefix="hermes-metrics-")
    if made:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = made
    try:
        uvicorn.run(f"{app_from_env.__module__}:{app_from_env.__name__}", factory=True, host=host,
                    port=port, workers=workers, access_log=access_log, log_level="info")
    finally:
        if made:
            shutil.rmtree(made, ignore_errors=True)


@cli.group()
def key() -> None:
    """API keys for `hermes-redis serve` (only their hashes are stored)."""


def _keys(state: State) -> KeyStore:
    if state.server_url:
        raise ConfigError("key commands run on the server's host, not through --server; "
                          "drop --server (and $HERMES_SERVER_URL)")
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


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    try:
        cli.main(args=argv, prog_name="hermes-redis")
    except HermesError as err:  # raised outside a command (e.g. while closing)
        click.echo(f"Error: {one_line(str(err))}", err=True)
        sys.exit(err.exit_code)


if __name__ == "__main__":
    main()
