"""Slash commands for agent loops that pass user input through.

``handle(mem, sid, text)`` answers a command with one short human string and returns
``None`` for ordinary text, so a loop can do ``reply = handle(...) or call_the_model()``.
Bad input never raises: a malformed command gets its usage line, a library error comes
back as ``Error: …``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from hermes_redis.cli.render import (
    clean,
    plural,
    report_brief,
    seqs_upto,
    session_report,
    truncate,
)
from hermes_redis.core.errors import HermesError

if TYPE_CHECKING:
    from hermes_redis.session_memory import SessionMemory

# A command is "/name" then optional arguments; "/usr/bin/env" or "//" is ordinary text.
_COMMAND = re.compile(r"/([A-Za-z][\w-]*)(?:\s+(.*))?", re.DOTALL)

USAGE = {
    "clear": "/clear",
    "forget-session": "/forget-session N | /forget-session --keyword WORD",
    "remember": "/remember TEXT",
    "compact": "/compact",
    "info": "/info",
}


def usage(name: str | None = None) -> str:
    if name in USAGE:
        return f"Usage: {USAGE[name]}"
    return "Commands: " + ", ".join(USAGE.values())


def handle(mem: SessionMemory, sid: str, text: str) -> str | None:
    """Run the slash command in ``text`` against session ``sid``; None if it is not one."""
    if not isinstance(text, str):
        return None
    match = _COMMAND.fullmatch(text.strip())
    if match is None:
        return None
    name, args = match.group(1).lower(), (match.group(2) or "").strip()
    action = _ACTIONS.get(name)
    if action is None:
        return f"Unknown command /{name}. " + usage()
    try:
        return action(mem, sid, args)
    except HermesError as err:
        return "Error: " + " ".join(str(err).split())


def _clear(mem: SessionMemory, sid: str, args: str) -> str:
    if args:
        return usage("clear")
    mem.clear(sid)
    kept = mem.info(sid).message_count
    return (f"Cleared the context. The archive keeps its {plural(kept, 'message')}; "
            "persistent memories are kept.")


def _forget(mem: SessionMemory, sid: str, args: str) -> str:
    keyword = _option(args, "--keyword")
    if keyword is not None:
        if not keyword:
            return usage("forget-session")
        n = mem.forget_keyword(sid, keyword)
        what = f"containing {keyword!r}"
    else:
        last = _option(args, "--last")
        count = last if last is not None else args
        if not (count.isascii() and count.isdigit()) or int(count) < 1:
            return usage("forget-session")
        n = mem.forget_last(sid, int(count))
        what = f"in the last {count} turn" + ("" if count == "1" else "s")
    if n == 0:
        return f"Nothing to forget: no message {what}."
    info = mem.info(sid)
    return (f"Forgot {plural(n, 'message')} {what}; {plural(info.message_count, 'message')}, "
            f"{plural(info.total_tokens, 'token')} remain.")


def _option(args: str, flag: str) -> str | None:
    """The value after ``--flag`` (or ``--flag=``), quotes stripped; None if absent."""
    for sep in (" ", "="):
        if args.startswith(flag + sep) or args == flag:
            value = args[len(flag) + 1 :].strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1].strip()
            return value
    return None


def _remember(mem: SessionMemory, sid: str, args: str) -> str:
    if not args:
        return usage("remember")
    user = mem.info(sid).user_id
    mem.remember(user, args, session_id=sid)
    return f"Remembered for {clean(user)}: {truncate(clean(args), 60)}"


def _compact(mem: SessionMemory, sid: str, args: str) -> str:
    if args:
        return usage("compact")
    result = mem.compact(sid)
    if result is None:
        return "Nothing to compact: no turns older than the ones kept verbatim."
    return (f"Compacted: the summary now covers {seqs_upto(result.summarized_upto)} "
            f"({result.summary_tokens:,} tokens); {result.kept} messages stay verbatim, "
            f"{result.trimmed} left Redis (archived).")


def _info(mem: SessionMemory, sid: str, args: str) -> str:
    if args:
        return usage("info")
    return report_brief(session_report(mem, sid))


_ACTIONS: dict[str, Callable[[SessionMemory, str, str], str]] = {
    "clear": _clear,
    "forget-session": _forget,
    "remember": _remember,
    "compact": _compact,
    "info": _info,
}
