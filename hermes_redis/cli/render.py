"""Human output: tables whose columns line up with CJK text, and the session report
that ``hermes-redis info`` and ``/info`` share.

Terminals draw East Asian wide characters in two cells, so padding by ``len()`` breaks
alignment as soon as a title is Chinese; every width here is counted in cells.
"""

from __future__ import annotations

import time
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hermes_redis.core.errors import StateError
from hermes_redis.core.models import Context, SessionInfo, memories_text, recalled_text, summary_text
from hermes_redis.core.tokens import MESSAGE_OVERHEAD, Tokenizer
from hermes_redis.core.urls import redact_url

if TYPE_CHECKING:
    from hermes_redis.session_memory import SessionMemory

WARN_USAGE = 0.8
ELLIPSIS = "…"


# --- cells ------------------------------------------------------------------------------------
def char_width(ch: str) -> int:
    """Cells a character takes: 2 for wide/fullwidth, 0 for combining and format marks."""
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def width(text: str) -> int:
    return sum(char_width(ch) for ch in text)


def clean(text: str) -> str:
    """One line, no control characters: user text must not move the cursor or break a row."""
    flat = " ".join(text.split())
    return "".join("?" if unicodedata.category(ch) == "Cc" else ch for ch in flat)


def clean_block(text: str) -> str:
    """Like ``clean`` but keeps line breaks and tabs, for message bodies."""
    return "".join(
        ch if ch in "\n\t" or unicodedata.category(ch) != "Cc" else "?" for ch in text
    )


def truncate(text: str, cells: int) -> str:
    """Cut ``text`` to at most ``cells`` cells, marking the cut with an ellipsis."""
    if width(text) <= cells:
        return text
    out, used = [], 0
    for ch in text:
        w = char_width(ch)
        if used + w > cells - 1:
            break
        out.append(ch)
        used += w
    return "".join(out) + ELLIPSIS


def pad(text: str, cells: int, right: bool = False) -> str:
    gap = " " * max(0, cells - width(text))
    return gap + text if right else text + gap


def table(headers: Sequence[str], rows: Sequence[Sequence[object]],
          right: Sequence[int] = ()) -> str:
    """Columns separated by two spaces, widths in cells; ``right`` lists right-aligned columns."""
    cells = [[clean(str(c)) for c in row] for row in rows]
    widths = [width(h) for h in headers]
    for row in cells:
        widths = [max(w, width(c)) for w, c in zip(widths, row, strict=True)]
    lines = []
    for row in [list(headers), *cells]:
        parts = [pad(c, w, i in right) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def key_values(pairs: Sequence[tuple[str, str]]) -> str:
    """``Key: value`` lines with the values in one column."""
    label = max(width(k) for k, _ in pairs) + 2
    return "\n".join(pad(f"{k}:", label) + v for k, v in pairs)


# --- numbers and times ------------------------------------------------------------------------
def tokens_k(n: int) -> str:
    """178K for 178,000; exact below 10,000 (1,640 / 2,000: as K, both would read 2K); M
    past a million."""
    if n < 10_000:
        return f"{n:,}"
    if n < 1_000_000:
        return f"{round(n / 1000)}K"
    return f"{round(n / 1_000_000, 1):g}M"


def short_id(sid: str) -> str:
    """A generated id (32 hex digits) by its first 8, a unique prefix the commands take; an id
    someone chose (``demo-session``) whole."""
    if len(sid) == 32 and all(c in "0123456789abcdef" for c in sid):
        return sid[:8]
    return sid


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def seqs_upto(n: int) -> str:
    """``seq 1–n``, or ``seq 1`` when the range is one message."""
    return "seq 1" if n <= 1 else f"seq 1–{n}"


def percent(share: float) -> str:
    if 0 < share < 0.005:
        return "<1%"
    return f"{round(share * 100)}%"


def usage_line(tokens: int, window: int) -> str:
    share = tokens / window if window else 0.0
    return f"{tokens_k(tokens)} / {tokens_k(window)} ({percent(share)})"


def usage_warning(share: float, sid: str, user: str, slash: bool = False) -> str | None:
    """Past 80 % of the window, the seed's advice: /remember what matters, then /clear to
    start afresh (the archive keeps every turn). Never "forget turns": once the session no
    longer fits whole, the context is assembled to fill its budget, so dropping turns frees
    nothing. ``slash``: in the words of the slash commands only (for ``/info``)."""
    if share <= WARN_USAGE:
        return None
    how = ("/remember what matters, then /clear" if slash else
           f"/remember what matters (`hermes-redis memory add TEXT --user {clean(user)}`), then "
           f"/clear (`hermes-redis session clear {short_id(sid)}`)")
    return f"⚠ context is {percent(share)} full: {how} to start afresh; the archive keeps every turn"


def context_parts(ctx: Context, tokenizer: Tokenizer) -> dict[str, int]:
    """Tokens of each part of ``ctx`` as the assembly counts them (memories, opening, summary,
    recalled, newest); with the tokenizer that built it they add up to ``ctx.tokens``.
    ``Context.parts`` when the context carries it (a server's, counted by its tokenizer)."""
    if ctx.parts:  # issue 30
        return dict(ctx.parts)

    def verbatim(messages: Sequence[Any]) -> int:
        return sum(m.token_count + MESSAGE_OVERHEAD for m in messages)

    return {
        "memories": tokenizer.count_message(memories_text(ctx.memories)) if ctx.memories else 0,
        "opening": verbatim(ctx.opening),
        "summary": tokenizer.count_message(summary_text(ctx.summary)) if ctx.summary else 0,
        "recalled": tokenizer.count_message(recalled_text(ctx.recalled)) if ctx.recalled else 0,
        "newest": verbatim(ctx.messages),
    }


def context_usage(ctx: Context, parts: Mapping[str, int]) -> str:
    """'960 / 1K (96%): summary 334, recalled 117, verbatim 509': how full the window is and
    what fills it (memories, summary and recalled when there are any; verbatim always)."""
    shown = [(name, parts[name]) for name in ("memories", "summary", "recalled") if parts[name]]
    shown.append(("verbatim", parts["opening"] + parts["newest"]))
    split = ", ".join(f"{name} {tokens_k(n)}" for name, n in shown)
    return f"{usage_line(ctx.tokens, ctx.window)}: {split}"


def progress_line(ctx: Context) -> str:  # issue 30
    """How current the context is: how far each background step has run ('archived #120,
    summarized #96, extracted #120 of #124'; #0: not yet, or that step is off); the newest
    messages are in it either way."""
    last = max([ctx.first_seq - 1, *(m.seq for m in ctx.messages)])
    return (f"archived #{ctx.archived_through}, summarized #{ctx.summarized_through}, "
            f"extracted #{ctx.extracted_through} of #{last}")


def duration(seconds: float) -> str:
    s = max(0, int(seconds))
    for unit, size, sub, sub_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60),
                                      ("m", 60, "s", 1)):
        if s >= size:
            rest = (s % size) // sub_size
            return f"{s // size}{unit}" + (f" {rest}{sub}" if rest else "")
    return f"{s}s"


def stamp(ts: float) -> str:
    """Local time to the minute, for tables."""
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if ts else "-"


def full_stamp(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


def when(ts: float, now: float | None = None) -> str:
    """Local time with how long ago, for ``info``."""
    if not ts:
        return "-"
    now = time.time() if now is None else now
    return f"{full_stamp(ts)} ({duration(now - ts)} ago)"


# --- the session report -----------------------------------------------------------------------
@dataclass(frozen=True)
class SessionReport:
    """Everything ``info`` shows, gathered once from both tiers."""

    info: SessionInfo
    context: Context | None  # None: the session is not active
    window: int
    budget: int
    turns: int
    turns_summarized: int
    summary_tokens: int
    ttl_config: int
    encoding: str
    backend: str
    redis_url: str | None
    archive_path: str
    redis_warnings: tuple[str, ...] = ()
    parts: Mapping[str, int] | None = None  # tokens per part of the context (context_parts)

    @property
    def context_tokens(self) -> int | None:
        return None if self.context is None else self.context.tokens

    @property
    def usage(self) -> float | None:
        if self.context_tokens is None or not self.window:
            return None
        return self.context_tokens / self.window

    @property
    def warning(self) -> str | None:
        usage = self.usage
        return None if usage is None else usage_warning(usage, self.info.session_id,
                                                        self.info.user_id)

    def usage_text(self) -> str:
        """The ``Token usage`` value: how full the window is and what fills it."""
        if self.context is None or self.parts is None:
            return "n/a (session is " + self.info.status + ")"
        return context_usage(self.context, self.parts)

    def as_dict(self) -> dict[str, Any]:
        usage = self.usage
        return {
            **self.info.as_dict(),
            "context": None if usage is None else {
                "tokens": self.context_tokens, "window": self.window, "budget": self.budget,
                "usage": round(usage, 4), "shape": context_shape(self.context),
                "first_seq": self.context.first_seq if self.context else None,
                "opening": [m.seq for m in self.context.opening] if self.context else [],
                "recalled": [m.seq for m in self.context.recalled] if self.context else [],
                **({} if self.context is None else {  # issue 30
                    "parts": dict(self.parts or {}), "whole": self.context.whole,
                    "archived_through": self.context.archived_through,
                    "summarized_through": self.context.summarized_through,
                    "extracted_through": self.context.extracted_through}),
            },
            "warning": self.warning,
            "turns": self.turns,
            "turns_summarized": self.turns_summarized,
            "summary_tokens": self.summary_tokens,
            "ttl_config": self.ttl_config,
            "encoding": self.encoding,
            "backend": self.backend,
            "redis_url": self.redis_url,
            "archive_path": self.archive_path,
            "redis_warnings": list(self.redis_warnings),
        }


def session_report(mem: SessionMemory, sid: str) -> SessionReport:
    """Read both tiers for ``sid`` without renewing its TTL."""
    info = mem.info(sid)
    ctx: Context | None = None
    if info.status == "active":
        try:
            ctx = mem.context(sid, touch=False)
        except StateError:  # archived or deleted between the two reads
            ctx = None
    turns, summarized = mem.turns(sid)
    return SessionReport(
        info=info, context=ctx, window=mem.config.model.context_window,
        budget=mem.config.context_budget, turns=turns, turns_summarized=summarized,
        summary_tokens=mem.tokenizer.count(info.summary) if info.summary else 0,
        ttl_config=mem.config.session.ttl, encoding=mem.tokenizer.describe(),
        backend=mem.hot.name, redis_url=mem.hot.url,
        archive_path=redact_url(mem.config.archive.url) if mem.config.archive.url
        else str(mem.config.archive_path),
        redis_warnings=tuple(mem.hot.warnings),
        parts=None if ctx is None else context_parts(ctx, mem.tokenizer),
    )


def ttl_text(r: SessionReport) -> str:
    i = r.info
    if i.status == "deleted":
        return "none (deleted: its hot keys were dropped)"
    if i.tier == "archive":
        hot = "Redis" if r.redis_url else "the in-process hot tier"
        if r.context_tokens is not None:
            return f"had expired from {hot}; reloaded from the archive to measure the context"
        return f"expired from {hot} (the archive has it; it reloads on next use)"
    if r.ttl_config == 0:
        return "never (memory.session.ttl is 0)"
    if i.ttl_left is None:
        if i.backlog:
            return f"no expiry: {plural(i.backlog, 'message')} not yet archived"
        return "no expiry"
    return f"{duration(i.ttl_left)} left (of {duration(r.ttl_config)} idle)"


def summary_line(r: SessionReport) -> str:
    i = r.info
    if i.summary:
        turns = (f"turns 1–{r.turns_summarized}" if r.turns_summarized != 1 else "turn 1")
        return (f"covers {seqs_upto(i.summary_seq)} ({turns} of {r.turns}), "
                f"{r.summary_tokens:,} tokens; newer turns verbatim")
    if i.summary_seq:
        kept = "the archive keeps them" if i.message_count else "and were forgotten"
        return f"none; {seqs_upto(i.summary_seq)} left the context (cleared), {kept}"
    return "none yet: every turn is verbatim"


def context_shape(ctx: Context | None) -> str:
    """What the model gets, part by part: 'summary + 3 recalled (#12, #40, #41) + 20 newest
    from #230'; or n/a."""
    if ctx is None:
        return "n/a"
    parts = []
    if ctx.memories:
        parts.append(f"{len(ctx.memories)} memor{'y' if len(ctx.memories) == 1 else 'ies'}")
    if ctx.opening:
        parts.append(f"{len(ctx.opening)} opening")
    if ctx.summary:
        parts.append("summary")
    if ctx.recalled:
        seqs = ", ".join(f"#{m.seq}" for m in ctx.recalled[:6]) + (", …" if len(ctx.recalled) > 6 else "")
        parts.append(f"{len(ctx.recalled)} recalled ({seqs})")
    if not (ctx.opening or ctx.summary or ctx.recalled):
        parts.append(f"{plural(len(ctx.messages), 'message')} verbatim from #{ctx.first_seq}")
    else:
        parts.append(f"{len(ctx.messages)} newest from #{ctx.first_seq}")
    return " + ".join(parts)


def messages_text(r: SessionReport) -> str:
    i = r.info
    where = "Redis" if r.redis_url else "in-process"
    if i.tier == "archive":
        return f"{i.message_count} total: 0 hot (not loaded), {i.archived_count} archived"
    return f"{i.message_count} total: {i.hot_count} hot ({where}), {i.archived_count} archived"


def lineage_text(i: SessionInfo) -> str | None:  # issue 30
    """Where a continued or forked session came from ('fork of ID at #N', 'continues ID')."""
    if not i.parent_session_id:
        return None
    if i.forked_at_seq:
        return f"fork of {i.parent_session_id} at #{i.forked_at_seq}"
    return f"continues {i.parent_session_id}"


def report_lines(r: SessionReport) -> list[str]:
    """The ``info`` view: one ``Key: value`` line per fact, then the warning if any."""
    i = r.info
    backend = r.backend + (f" {r.redis_url}" if r.redis_url else " (in-process)")
    backlog = (f"{plural(i.backlog, 'message')} not yet archived "
               f"(seq {i.flushed_seq + 1}–{i.last_seq})"
               if i.backlog else "0 (everything is archived)")
    pairs = [
        ("Session", i.session_id),
        ("Title", clean(i.title) or "(untitled)"),
        ("User", clean(i.user_id)),
        ("Status", i.status),
        *((("From", lineage_text(i) or ""),) if i.parent_session_id else ()),  # issue 30
        ("Created", when(i.created_at)),
        ("Updated", when(i.updated_at)),
        ("Messages", messages_text(r)),
        ("Tokens", f"{i.total_tokens:,} in the stored history ({plural(r.turns, 'turn')})"),
        ("Token usage", r.usage_text()),
        ("Context", context_shape(r.context)),
        *([("Workers", progress_line(r.context))] if r.context is not None else []),  # issue 30
        ("TTL", ttl_text(r)),
        ("Summary", summary_line(r)),
        ("Backlog", backlog),
        ("Encoding", r.encoding),
        ("Backend", backend),
        ("Archive", r.archive_path),
    ]
    lines = key_values(pairs).splitlines()
    lines += [f"Warning: Redis {w}" for w in r.redis_warnings]
    if r.warning:
        lines.append(r.warning)
    return lines


def report_brief(r: SessionReport) -> str:
    """The ``/info`` answer: the same facts in a few lines an agent loop can show."""
    i = r.info
    usage = "n/a" if r.context is None else r.usage_text()
    lines = [
        f"Session {short_id(i.session_id)} · {clean(i.title) or '(untitled)'} · {i.status}",
        f"Messages: {messages_text(r)}; {i.total_tokens:,} tokens",
        f"Token usage: {usage}",
        f"Context: {context_shape(r.context)}",
        f"Summary: {summary_line(r)}",
        f"Backlog: {i.backlog} · TTL: {ttl_text(r)}",
    ]
    warning = None if r.usage is None else usage_warning(r.usage, i.session_id, i.user_id,
                                                         slash=True)
    if warning:
        lines.append(warning)
    return "\n".join(lines)
