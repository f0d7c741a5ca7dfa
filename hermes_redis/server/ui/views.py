"""The console's pages under /ui: server-rendered HTML over SessionMemory's public methods.

Every page has its own URL (filters, budget and page in the query string), so a reload
shows the same view. A user key sees only its user's data: another user's session answers
exactly as an unknown id (``Principal.owned``). Writes are POSTs to /ui/... with the CSRF
token (``access.form``), then a redirect back to the page (POST/redirect/GET).
"""

import datetime
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

import jinja2
from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from markupsafe import Markup, escape

from hermes_redis.core.errors import HermesError, NotFoundError, ValidationError
from hermes_redis.core.models import (
    STATUSES,
    Context,
    Message,
    memories_text,
    recalled_text,
    summary_text,
)
from hermes_redis.core.tokens import MESSAGE_OVERHEAD
from hermes_redis.server.auth import Principal
from hermes_redis.server.errors import ApiError, error_reply
from hermes_redis.server.ui import access
from hermes_redis.server.ui.health import DoctorChecks, live
from hermes_redis.session_memory import SessionMemory
from hermes_redis.store.api_keys import KeyStore
from hermes_redis.tiers.maintainer import split_turns  # forget_last's own rule

HERE = Path(__file__).parent
PAGE = 50  # sessions on one page of the list
MESSAGES_PAGE = 100  # messages on one page of a session
USAGE_WARN = 0.8  # the context view warns past this share of the window
ACTIONS = ("forget-last", "forget-keyword", "clear", "archive", "restore", "compact")

Form = Annotated[dict[str, str], Depends(access.form)]


def when(ts: float | None) -> str:
    if not ts:
        return "—"
    try:
        return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return "?"


def highlight(text: str, query: str) -> Markup:
    """``text`` escaped, with each word of ``query`` found in it marked."""
    words = sorted({w for w in re.split(r"\s+", query.strip().strip('"*')) if w}, key=len,
                   reverse=True)
    if not words:
        return escape(text)
    pattern = re.compile("|".join(re.escape(w.strip('"*')) for w in words if w.strip('"*')),
                         re.IGNORECASE)
    out, at = [], 0
    for m in pattern.finditer(text):
        out.append(escape(text[at:m.start()]))
        out.append(Markup("<mark>") + escape(m.group(0)) + Markup("</mark>"))
        at = m.end()
    out.append(escape(text[at:]))
    return Markup("").join(out)


@dataclass(frozen=True)
class Part:
    """One part of what the model sees: its name, tokens and exact text."""

    name: str
    tokens: int
    text: str
    count: int = 0  # messages in it (0: one system message)


def context_parts(mem: SessionMemory, ctx: Context) -> list[Part]:
    """The context as the model gets it, in order, each part with its tokens as the
    library counted them (their sum is ``ctx.tokens``)."""
    tok = mem.tokenizer

    def chat(ms: tuple[Message, ...]) -> str:
        return "\n\n".join(f"[{m.role}] {m.content}" for m in ms)

    def cost(ms: tuple[Message, ...]) -> int:
        return sum(m.token_count + MESSAGE_OVERHEAD for m in ms)

    parts = [
        Part("memories", tok.count_message(memories_text(ctx.memories)) if ctx.memories else 0,
             memories_text(ctx.memories) if ctx.memories else "", len(ctx.memories)),
        Part("opening", cost(ctx.opening), chat(ctx.opening), len(ctx.opening)),
        Part("summary", tok.count_message(summary_text(ctx.summary)) if ctx.summary else 0,
             summary_text(ctx.summary) if ctx.summary else ""),
        Part("recalled", tok.count_message(recalled_text(ctx.recalled)) if ctx.recalled else 0,
             recalled_text(ctx.recalled) if ctx.recalled else "", len(ctx.recalled)),
        Part("newest", cost(ctx.messages), chat(ctx.messages), len(ctx.messages)),
    ]
    return parts


def parse_budget(asked: str | None, mem: SessionMemory) -> tuple[int, str]:
    """The budget the context view was asked for (2k, 8k, window or a number) and its name."""
    window = mem.config.model.context_window
    presets = {"2k": 2000, "8k": 8000, "window": window}
    if not asked:
        return mem.config.context_budget, "default"
    key = asked.strip().lower()
    if key in presets:
        return presets[key], key
    try:
        n = int(key.replace("_", "").replace(",", ""))
    except ValueError:
        raise ValidationError(f"budget {asked[:40]!r} is not 2k, 8k, window or a number of "
                              "tokens") from None
    if n < 1:
        raise ValidationError(f"budget must be a positive number of tokens, not {n}")
    return n, str(n)


class Console:
    """The /ui routes over one SessionMemory and the server's keys."""

    def __init__(self, mem: SessionMemory, keys: KeyStore) -> None:
        self.mem, self.keys = mem, keys
        self.doctor = DoctorChecks(mem)
        self.env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"),
                                      autoescape=True, undefined=jinja2.StrictUndefined)
        self.env.globals.update(when=when, highlight=highlight, urlencode=urlencode,
                                statuses=STATUSES)

    # --- plumbing ---------------------------------------------------------------------------
    def render(self, request: Request, template: str, who: Principal | None,
               status: int = 200, **values: Any) -> HTMLResponse:
        html = self.env.get_template(template).render(
            request=request, who=who, csrf=access.csrf_token(request),
            keyless=who is not None and who.key_id is None, **values)
        response = HTMLResponse(html, status_code=status,
                                headers={"Cache-Control": "no-store",
                                         "Referrer-Policy": "same-origin",
                                         "X-Content-Type-Options": "nosniff"})
        return access.set_cookies(request, response)  # type: ignore[return-value]

    def error(self, request: Request, who: Principal | None, err: Exception) -> HTMLResponse:
        status, body = error_reply(err, where=request.url.path)  # what the API answers
        message = body["error"]["message"]
        return self.render(request, "error.html", who, status=status, message=message)

    async def refused(self, request: Request, err: Exception) -> Response:
        """A form refused by ``access.form``: its one line, as a page."""
        return self.error(request, access.principal(request), err)

    def page(self, request: Request, body: Callable[[Principal], Response]) -> Response:
        """Run a page for its caller: the login page when there is none, the library's
        errors as an error page with their status (4xx), never a 500 for bad input."""
        who = access.principal(request)
        if who is None:
            return RedirectResponse("/ui/login?" + urlencode({"next": request.url.path}), 303)
        try:
            return body(who)
        except (HermesError, ApiError) as err:
            return self.error(request, who, err)

    def router(self) -> APIRouter:
        r = APIRouter(include_in_schema=False)
        r.get("/ui")(self.home)
        r.get("/ui/")(self.sessions)
        r.get("/ui/login")(self.login_page)
        r.post("/ui/login")(self.login)
        r.post("/ui/logout")(self.logout)
        r.get("/ui/sessions/{session_id}")(self.session)
        r.get("/ui/sessions/{session_id}/context")(self.context)
        r.get("/ui/sessions/{session_id}/confirm")(self.confirm)
        r.post("/ui/sessions/{session_id}/act")(self.act)
        r.get("/ui/users/{user_id}/memories")(self.memories)
        r.post("/ui/users/{user_id}/memories/{memory_id}/forget")(self.forget_memory)
        r.get("/ui/health")(self.health)
        r.get("/ui/keys")(self.key_list)
        r.post("/ui/keys")(self.key_create)
        r.post("/ui/keys/{key_id}/revoke")(self.key_revoke)
        return r

    # --- login ------------------------------------------------------------------------------
    def home(self) -> Response:
        return RedirectResponse("/ui/", 307)

    def login_page(self, request: Request, next: str = "/ui/") -> Response:
        return self.render(request, "login.html", access.principal(request),
                           next=next if next.startswith("/ui/") else "/ui/", message="")

    def login(self, request: Request, fields: Form) -> Response:
        key = fields.get("key", "").strip()
        nxt = fields.get("next", "/ui/")
        nxt = nxt if nxt.startswith("/ui/") and "//" not in nxt else "/ui/"
        try:
            request.app.state.auth.principal(f"Bearer {key}" if key else "Bearer -")
        except ApiError as err:  # the key is never echoed
            return self.render(request, "login.html", None, status=401, next=nxt,
                               message=err.message)
        response = RedirectResponse(nxt, 303)
        access.log_in(request, response, key)
        return response

    def logout(self, request: Request, fields: Form) -> Response:
        response = RedirectResponse("/ui/login", 303)
        access.log_out(response)
        return response

    # --- sessions ---------------------------------------------------------------------------
    def sessions(self, request: Request, user: str = "", status: str = "active",
                 prefix: str = "", cursor: str | None = None, q: str = "") -> Response:
        def body(who: Principal) -> Response:
            user_id = who.user(user.strip() or None)
            hits = self.mem.search(q, user_id=user_id, limit=50) if q.strip() else []
            prefix_ = prefix.strip()
            if prefix_:
                sids = self.mem.cold.session_ids_like(prefix_, limit=PAGE)
                infos = [i for i in (self.mem.info(s) for s in sids)
                         if (user_id is None or i.user_id == user_id)
                         and (status == "all" or i.status == status)]
                nxt = None
            else:
                page = self.mem.list_sessions(user_id=user_id, status=status, limit=PAGE,
                                              cursor=cursor or None)
                infos, nxt = list(page), page.next_cursor
            filters = {"user": user, "status": status, "prefix": prefix, "q": q}
            return self.render(request, "sessions.html", who, infos=infos, hits=hits,
                               next_cursor=nxt, filters=filters, q=q,
                               window=self.mem.config.model.context_window)
        return self.page(request, body)

    def _owned(self, who: Principal, sid: str) -> str:
        return who.owned(self.mem, sid)

    def session(self, request: Request, session_id: str, after: int | None = None,
                at: int | None = None, note: str = "") -> Response:
        def body(who: Principal) -> Response:
            sid = self._owned(who, session_id)
            info = self.mem.info(sid)
            if at is not None:
                start = max(0, at - 10)
            elif after is not None:
                start = max(0, after)
            else:
                start = max(0, info.last_seq - MESSAGES_PAGE)
            messages = self.mem.messages(sid, after_seq=start, limit=MESSAGES_PAGE)
            hot = self.mem.messages(sid, last=info.hot_count) if info.hot_count else []
            hot_from = hot[0].seq if hot else info.last_seq + 1
            rows = [(m, tier_of(m.seq, hot_from, info.flushed_seq)) for m in messages]
            turns, covered = self.mem.turns(sid)
            older = max(0, start - MESSAGES_PAGE) if start > 0 else None
            newer = messages[-1].seq if messages and messages[-1].seq < info.last_seq else None
            return self.render(request, "session.html", who, info=info, rows=rows,
                               hot_from=hot_from, turns=turns, covered=covered, note=note,
                               older=older, newer=newer, start=start, at=at)
        return self.page(request, body)

    def context(self, request: Request, session_id: str, budget: str = "",
                query: str = "") -> Response:
        def body(who: Principal) -> Response:
            sid = self._owned(who, session_id)
            info = self.mem.info(sid)
            n, name = parse_budget(budget, self.mem)
            ctx = self.mem.context(sid, n, query=query or None, touch=False)
            parts = context_parts(self.mem, ctx)
            return self.render(request, "context.html", who, info=info, ctx=ctx, parts=parts,
                               budget=name, query=query, warn=ctx.usage > USAGE_WARN,
                               window=ctx.window)
        return self.page(request, body)

    def _preview(self, sid: str, action: str, n: int, keyword: str,
                 history: bool) -> tuple[str, list[Message]]:
        """What an action does, in words, and the messages it removes for good."""
        if action == "forget-last":
            if n < 1:
                raise ValidationError("number of turns must be a positive integer")
            doomed = [m for t in split_turns(self.mem.messages(sid))[-n:] for m in t]
            return f"Forget the last {n} turn(s) from both tiers and the summary, for good", doomed
        if action == "forget-keyword":
            needle = keyword.strip().lower()
            if not needle:
                raise ValidationError("keyword is empty: give the word to forget")
            doomed = [m for m in self.mem.messages(sid) if needle in m.content.lower()]
            return f"Forget every message containing {keyword.strip()!r}, for good", doomed
        if action == "clear":
            if history:
                return ("Clear the context and forget every message from both tiers, for good "
                        "(persistent memories stay)", self.mem.messages(sid))
            return ("Clear the context (the hot turns and the summary); the archive keeps "
                    "every message and memories stay", [])
        if action == "archive":
            return "Archive the session: kept, but no longer loaded into context", []
        if action == "restore":
            return "Restore the session: active again, loaded into context", []
        if action == "compact":
            return ("Compact now: archive the backlog, then fold older turns into the summary "
                    "(the archive keeps every message)", [])
        raise ValidationError(f"unknown action {action[:40]!r}: use one of {', '.join(ACTIONS)}")

    def confirm(self, request: Request, session_id: str, action: str, n: int = 1,
                keyword: str = "", history: bool = False) -> Response:
        def body(who: Principal) -> Response:
            sid = self._owned(who, session_id)
            what, doomed = self._preview(sid, action, n, keyword, history)
            return self.render(request, "confirm.html", who, sid=sid, action=action, n=n,
                               keyword=keyword, history=history, what=what, doomed=doomed)
        return self.page(request, body)

    def act(self, request: Request, session_id: str, fields: Form) -> Response:
        def body(who: Principal) -> Response:
            sid = self._owned(who, session_id)
            action = fields.get("action", "")
            mem = self.mem
            if action == "forget-last":
                try:
                    n = int(fields.get("n", ""))
                except ValueError:
                    raise ValidationError("number of turns must be a positive integer") from None
                note = f"forgot {mem.forget_last(sid, n)} message(s)"
            elif action == "forget-keyword":
                note = f"forgot {mem.forget_keyword(sid, fields.get('keyword', ''))} message(s)"
            elif action == "clear":
                history = fields.get("history") == "1"
                mem.clear(sid, history=history)
                note = "cleared the context" + (" and the history" if history else "")
            elif action == "archive":
                mem.archive(sid)
                note = "archived"
            elif action == "restore":
                mem.restore(sid)
                note = "restored"
            elif action == "compact":
                result = mem.compact(sid)
                note = ("nothing to compact" if result is None else
                        f"compacted: the summary reaches seq {result.summarized_upto}, "
                        f"{result.trimmed} message(s) trimmed from Redis")
            else:
                raise ValidationError(f"unknown action {action[:40]!r}: use one of "
                                      f"{', '.join(ACTIONS)}")
            return RedirectResponse(f"/ui/sessions/{sid}?" + urlencode({"note": note}), 303)
        return self.page(request, body)

    # --- memories ---------------------------------------------------------------------------
    def memories(self, request: Request, user_id: str, note: str = "") -> Response:
        def body(who: Principal) -> Response:
            user = who.user(user_id)
            assert user is not None
            rows = self.mem.memories(user, superseded=True)
            by_id = {m.memory_id: m for m in rows}
            replaced: dict[str, list[Any]] = {}
            for m in rows:
                if m.superseded_by is not None:
                    replaced.setdefault(m.superseded_by, []).append(m)
            sources: dict[str, Message] = {}
            for m in rows[:200]:
                if m.session_id is None or m.seq is None:
                    continue
                try:
                    found = self.mem.messages(m.session_id, after_seq=max(0, m.seq - 1), limit=1)
                except HermesError:
                    continue
                if found and found[0].seq == m.seq:
                    sources[m.memory_id] = found[0]
            current = [m for m in rows if m.superseded_by is None]
            old = [m for m in rows if m.superseded_by is not None]
            return self.render(request, "memories.html", who, user=user, current=current,
                               old=old, replaced=replaced, by_id=by_id, sources=sources,
                               note=note)
        return self.page(request, body)

    def forget_memory(self, request: Request, user_id: str, memory_id: str,
                      fields: Form) -> Response:
        def body(who: Principal) -> Response:
            user = who.user(user_id)
            assert user is not None
            self.mem.forget_memory(memory_id, user_id=user)
            return RedirectResponse(f"/ui/users/{user}/memories?"
                                    + urlencode({"note": "forgot one memory"}), 303)
        return self.page(request, body)

    # --- health -----------------------------------------------------------------------------
    def health(self, request: Request) -> Response:
        def body(who: Principal) -> Response:
            now = live(self.mem)
            checks, at = self.doctor.current()
            return self.render(request, "health.html", who, live=now, checks=checks,
                               checked_ago=time.time() - at if at else None,
                               backend=self.mem.config.session.backend)
        return self.page(request, body)

    # --- keys -------------------------------------------------------------------------------
    def _admin(self, who: Principal) -> None:
        if who.user_id is not None:
            raise ApiError(403, "forbidden", "keys are for an admin key only; log in with one")

    def key_list(self, request: Request, note: str = "") -> Response:
        def body(who: Principal) -> Response:
            self._admin(who)
            return self.render(request, "keys.html", who, keys=self.keys.list(), created=None,
                               note=note)
        return self.page(request, body)

    def key_create(self, request: Request, fields: Form) -> Response:
        def body(who: Principal) -> Response:
            self._admin(who)
            user = fields.get("user_id", "").strip() or None
            key, token = self.keys.create(user)
            return self.render(request, "keys.html", who, keys=self.keys.list(),
                               created=(key, token), note="")
        return self.page(request, body)

    def key_revoke(self, request: Request, key_id: str, fields: Form) -> Response:
        def body(who: Principal) -> Response:
            self._admin(who)
            self.keys.revoke(key_id)
            return RedirectResponse("/ui/keys?" + urlencode({"note": f"revoked key {key_id}"}),
                                    303)
        return self.page(request, body)


def tier_of(seq: int, hot_from: int, flushed_seq: int) -> str:
    """Where a message lives: Redis only (not yet archived), both, or the archive only."""
    if seq >= hot_from:
        return "redis" if seq > flushed_seq else "redis+archive"
    return "archive"


__all__ = ["Console", "NotFoundError", "context_parts", "highlight", "tier_of"]
