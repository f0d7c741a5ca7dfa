"""``HermesRedisMemoryProvider``: Hermes Agent's memory-provider slot over hermes-redis.

One hermes-redis session per Hermes conversation (``session``); turns go through a bounded
queue to one writer thread (``writer``), so no hook waits on the network longer than its
bound, and Hermes keeps answering while hermes-redis is away. What each hook does is in
docs/hermes-agent.md."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hermes_redis.core.api import SessionAPI
from hermes_redis.core.errors import ConfigError, HermesError, NotFoundError, ValidationError
from hermes_redis.core.models import Memory, SearchHit
from hermes_redis.core.tokens import Tokenizer, get_tokenizer
from hermes_redis.integrations.hermes_agent import session as lineage
from hermes_redis.integrations.hermes_agent.settings import Settings, api_for, load_settings
from hermes_redis.integrations.hermes_agent.turns import conversation, rows, turn_start
from hermes_redis.integrations.hermes_agent.writer import Outage, Writer

try:  # inside Hermes: its base class, so its loader and MemoryManager take us
    from agent.memory_provider import MemoryProvider as _Base  # type: ignore[import-not-found]
except ImportError:  # outside Hermes (our tests, our CLI): a plain object
    _Base = object

log = logging.getLogger("hermes_redis.hermes_agent")
NAME = "hermes-redis"
DRAIN_SECONDS = 4.0  # Hermes waits at most 5 s for shutdown
MEMORIES_MAX = 20  # memories in the system prompt block
_active: dict[str, HermesRedisMemoryProvider] = {}  # Hermes session id -> its provider


def provider_for(hermes_session_id: str) -> HermesRedisMemoryProvider | None:
    """The provider of this process serving ``hermes_session_id`` (the context engine's way
    to the same session and the same writer); the only one when there is one."""
    found = _active.get(hermes_session_id)
    if found is None and len(set(_active.values())) == 1:
        found = next(iter(_active.values()))
    return found


TOOLS: list[dict[str, Any]] = [
    {"name": "hermes_redis_search",
     "description": "Search everything this user said in earlier conversations and in the "
                    "part of this one that was compressed away (hermes-redis's archive). "
                    "Returns session ids, seqs and snippets; use hermes_redis_recall to read "
                    "the turns around a hit.",
     "parameters": {"type": "object", "properties": {
         "query": {"type": "string", "description": "words to find"},
         "limit": {"type": "integer", "description": "at most this many hits (default 10)"}},
         "required": ["query"]}},
    {"name": "hermes_redis_recall",
     "description": "Read stored turns of a conversation by seq, exactly as they were said: "
                    "the turns around a search hit, or older turns of this conversation.",
     "parameters": {"type": "object", "properties": {
         "session_id": {"type": "string",
                        "description": "a session id from hermes_redis_search (default: "
                                       "this conversation)"},
         "seq": {"type": "integer", "description": "the seq to read around"},
         "before": {"type": "integer", "description": "turns before it (default 2)"},
         "after": {"type": "integer", "description": "turns after it (default 2)"}},
         "required": ["seq"]}},
    {"name": "hermes_redis_remember",
     "description": "Keep a fact about the user for every future conversation, on every "
                    "machine that shares this memory.",
     "parameters": {"type": "object", "properties": {
         "text": {"type": "string", "description": "the fact, in one sentence"}},
         "required": ["text"]}},
]


class HermesRedisMemoryProvider(_Base):  # type: ignore[misc, valid-type]
    """A Hermes memory provider whose store is hermes-redis (library or remote mode)."""

    def __init__(self, settings: Settings | None = None) -> None:
        self._settings = settings
        self.sid = ""  # the hermes-redis session written to
        self.hermes_id = ""  # Hermes' current session id
        self.user_id = "default"
        self.gateway_key: str | None = None
        self.writes = True  # False for a subagent, cron or flush context
        self.writer: Writer | None = None
        self.outage = Outage(NAME)
        self.tokenizer: Tokenizer = get_tokenizer("o200k_base")
        self._block: str | None = None
        self._in_block: set[str] = set()
        self._synced: int | None = None  # entries of Hermes' list stored (None: none yet)
        self._epoch = 0  # in-place compressions of this Hermes session
        self.held_from: int | None = None  # Hermes holds this session verbatim from this seq
        self.home: str | None = None

    # -- identity and availability ---------------------------------------------------------
    @property
    def name(self) -> str:
        return NAME

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = load_settings(self.home)
        return self._settings

    def is_available(self) -> bool:
        """Configured (no network is touched): the ``hermes_redis`` block reads cleanly."""
        try:
            self.settings  # noqa: B018 - loading is the check
        except ConfigError as err:
            log.warning("hermes-redis: %s", err)
            return False
        return True

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        return [dict(t) for t in TOOLS]

    # -- lifecycle -------------------------------------------------------------------------
    def initialize(self, session_id: str, **kwargs: Any) -> None:
        """Take the session Hermes names (by its gateway key when it gives one) and start
        the writer. Touches no network: the first write or read does."""
        self.home = kwargs.get("hermes_home") or self.home
        settings = self.settings
        self.user_id = str(kwargs.get("user_id") or settings.user_id)
        self.gateway_key = kwargs.get("gateway_session_key") or None
        self.writes = kwargs.get("agent_context", "primary") in ("primary", None, "")
        self._switch(session_id, *lineage.lookup(self.home, session_id, self.gateway_key))
        if self.writer is None:
            spool = Path(self.home) / "hermes-redis" / "spool" if self.home else None
            self.writer = Writer(lambda: api_for(settings, "write"), settings.queue_max,
                                 self.outage, settings.where(), spool)
            self.writer.start()

    def _switch(self, hermes_id: str, sid: str, held_from: int | None = None) -> None:
        _active.pop(self.hermes_id, None)
        self.hermes_id, self.sid, self.held_from = hermes_id, sid, held_from
        self._synced, self._epoch, self._block, self._in_block = None, 0, None, set()
        _active[hermes_id] = self

    def api(self) -> SessionAPI:
        return api_for(self.settings, "read")

    def shutdown(self) -> None:
        """Write what is queued (at most DRAIN_SECONDS), then stop the writer."""
        if self.writer is not None:
            self.writer.stop(DRAIN_SECONDS)
            self.writer = None
        _active.pop(self.hermes_id, None)

    def on_session_end(self, messages: list[dict[str, Any]]) -> None:
        self.flush(DRAIN_SECONDS)

    def flush(self, timeout: float) -> bool:
        """Wait until every queued write is done (True), at most ``timeout`` seconds."""
        return self.writer.drain(timeout) if self.writer is not None else True

    # -- writes ----------------------------------------------------------------------------
    def sync_turn(self, user_content: str, assistant_content: str, *, session_id: str = "",
                  messages: list[dict[str, Any]] | None = None, **_: Any) -> None:
        """Queue the turn's messages not stored yet (user, assistant, tool calls and results)
        as one append_many; returns at once."""
        if not self.writes or self.writer is None:
            return
        convo = conversation(messages or [])
        if not convo:  # an older Hermes: only the two texts
            convo = [{"role": "user", "content": user_content},
                     {"role": "assistant", "content": assistant_content}]
        start = turn_start(convo) if self._synced is None or self._synced > len(convo) \
            else self._synced
        self._synced = len(convo)
        batch = rows(self.namespace(), convo, start)
        if batch:
            self.writer.put(("turn", self.sid, self.user_id, batch))

    def compressed(self, held_from: int | None) -> None:
        """The context engine's report: Hermes now holds this session verbatim from
        ``held_from`` on (None: unknown, so recall none of it)."""
        self.held_from = held_from

    def namespace(self) -> str:
        """What a message id is counted in: one Hermes session's list between compressions."""
        return f"{self.sid}/{self.hermes_id}/{self._epoch}"

    def on_pre_compress(self, messages: list[dict[str, Any]]) -> str:
        """Every turn Hermes is about to compress is stored before this returns (within
        DRAIN_SECONDS): the turns it still holds unsynced are queued, then the queue drains."""
        if self.writes and self.writer is not None:
            convo = conversation(messages)
            start = self._synced if self._synced is not None else turn_start(convo)
            if 0 < start < len(convo):
                done = [m for m in convo[start:] if m.get("role") != "user"] and \
                    convo[-1].get("role") == "assistant" and not convo[-1].get("tool_calls")
                if done:  # a finished exchange Hermes has not synced: keep it
                    self.writer.put(("turn", self.sid, self.user_id,
                                     rows(self.namespace(), convo, start)))
                    self._synced = len(convo)
            self.flush(DRAIN_SECONDS)
        return ""

    def on_session_switch(self, new_session_id: str, *, parent_session_id: str = "",
                          reset: bool = False, rewound: bool = False, **kwargs: Any) -> None:
        """Follow Hermes to its new session id: a compression continues the same hermes-redis
        session, ``/branch`` forks it, ``/new`` starts another, ``/resume`` takes that one's."""
        reason = kwargs.get("reason", "")
        if rewound or (reason == "compression" and new_session_id == self.hermes_id):
            self._epoch += 1  # the list was cut in place: count ids afresh
            self._synced = None
            return
        if not new_session_id or new_session_id == self.hermes_id:
            return
        if reset:
            key = f"{self.gateway_key}#{new_session_id}" if self.gateway_key else None
            self._switch(new_session_id, lineage.resolve(self.home, new_session_id, key))
        elif reason == "compression" or (reason == "" and parent_session_id == self.hermes_id
                                          and not kwargs.get("branch")):
            lineage.alias(self.home, new_session_id, self.sid, self.held_from)
            self._switch(new_session_id, self.sid, self.held_from)
        elif reason == "branch":
            self.flush(DRAIN_SECONDS)
            child = self._fork()
            self._switch(new_session_id, child or lineage.resolve(self.home, new_session_id,
                                                                  None))
            if child:
                lineage.alias(self.home, new_session_id, child)
        else:  # resume
            self._switch(new_session_id, lineage.resolve(self.home, new_session_id,
                                                         self.gateway_key))

    def _fork(self) -> str | None:
        try:
            child = self.api().fork(self.sid)
        except NotFoundError:
            return None  # nothing stored yet: the branch starts a session of its own
        except HermesError as err:
            self.outage.down(err, self.settings.where())
            return None
        return child

    def on_memory_write(self, action: str, target: str, content: str,
                        metadata: Mapping[str, Any] | None = None) -> None:
        """Mirror Hermes' MEMORY.md / USER.md writes: an add or replace is remembered, a
        remove forgets the memory of that exact text."""
        if not self.writes or self.writer is None or not content or not content.strip():
            return
        kind = "forget" if action == "remove" else "remember"
        self.writer.put((kind, self.sid, self.user_id, content.strip()))

    # -- reads -----------------------------------------------------------------------------
    def system_prompt_block(self) -> str:
        """The user's memories, read once per session: the same text on every turn, so the
        prompt cache holds."""
        if self._block is None:
            memories = self._read(lambda api: api.memories(self.user_id), [])
            if memories is None:
                return ""  # away: try again next time
            shown = memories[-MEMORIES_MAX:]
            self._block = memories_block(shown)
            self._in_block = {m.content for m in shown}
        return self._block

    def prefetch(self, query: str, *, session_id: str = "") -> str:
        """The user's memories relevant to ``query`` and what earlier conversations (and the
        compressed-away part of this one) said about it, within ``prefetch_tokens``."""
        query = " ".join((query or "").split())[:1000]
        if not query:
            return ""
        memories = self._read(lambda api: api.memories(self.user_id, query=query), [])
        hits = self._read(lambda api: recall_hits(api, query, self.user_id), [])
        if memories is None and hits is None:
            return ""
        known = self._in_block  # already in the system prompt: not sent twice
        lines = [f"- {m.content}" for m in (memories or []) if m.content not in known]
        for h in hits or []:
            if h.session_id == self.sid and (self.held_from is None or h.seq >= self.held_from):
                continue  # Hermes holds it verbatim
            where = "this conversation" if h.session_id == self.sid else \
                f"conversation {h.session_id}"
            lines.append(f"- ({where}, #{h.seq}, {h.role}) {' '.join(h.snippet.split())}")
        return fit(lines, self.settings.prefetch_tokens, self.tokenizer,
                   "From hermes-redis (earlier conversations and memories):")

    def _read(self, call: Any, empty: Any) -> Any:
        """``call(api)``, or None while hermes-redis is away (one log line per outage)."""
        if self.outage.skipping():
            return None
        try:
            result = call(self.api())
        except (ValidationError, NotFoundError):
            return empty
        except (HermesError, OSError) as err:
            self.outage.down(err, self.settings.where())
            return None
        self.outage.up()
        return result

    # -- tools -----------------------------------------------------------------------------
    def handle_tool_call(self, tool_name: str, args: dict[str, Any], **kwargs: Any) -> str:
        """A JSON result for one of TOOLS; errors as ``{"error": ...}``, never a raise."""
        try:
            result = self._tool(tool_name, args or {})
        except (ValidationError, NotFoundError) as err:
            return json.dumps({"error": str(err)}, ensure_ascii=False)
        except (HermesError, OSError) as err:
            self.outage.down(err, self.settings.where())
            return json.dumps({"error": f"hermes-redis is unreachable ({err}); try later"},
                              ensure_ascii=False)
        return json.dumps(result, ensure_ascii=False)

    def _tool(self, name: str, args: dict[str, Any]) -> Any:
        api = self.api()
        if name == "hermes_redis_search":
            query = str(args.get("query") or "").strip()
            if not query:
                raise ValidationError("query is required: the words to find")
            hits = recall_hits(api, query, self.user_id, _int(args, "limit", 10, 1, 50))
            return {"hits": [{"session_id": h.session_id, "seq": h.seq, "role": h.role,
                              "title": h.title, "snippet": h.snippet} for h in hits]}
        if name == "hermes_redis_recall":
            sid = str(args.get("session_id") or self.sid)
            if api.info(sid).user_id != self.user_id:
                raise NotFoundError(f"session {sid} not found")  # another user's: not shown
            seq = _int(args, "seq", 1, 1, 1 << 62)
            before, after = _int(args, "before", 2, 0, 20), _int(args, "after", 2, 0, 20)
            found = api.messages(sid, after_seq=max(0, seq - before - 1),
                                 limit=before + after + 1)
            return {"session_id": sid, "messages": [
                {"seq": m.seq, "role": m.role, "content": m.content} for m in found]}
        if name == "hermes_redis_remember":
            text = str(args.get("text") or "").strip()
            if not text:
                raise ValidationError("text is required: the fact to keep")
            return {"memory_id": api.remember(self.user_id, text, self.sid or None)}
        raise ValidationError(f"unknown tool {name}")


def _int(args: Mapping[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = args.get(key, default)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValidationError(f"{key} must be a whole number from {low} to {high}")
    return value


def recall_hits(api: SessionAPI, query: str, user_id: str, limit: int = 8) -> list[SearchHit]:
    """The user's messages matching ``query``: every word first, then its longest words one
    by one when no message holds them all."""
    hits = api.search(query, user_id=user_id, limit=limit)
    if hits:
        return hits
    words = sorted({w.strip(".,;:!?\"'()[]") for w in query.split()}, key=len, reverse=True)
    seen: dict[tuple[str, int], SearchHit] = {}
    for word in [w for w in words if len(w) > 3][:3]:
        for h in api.search(word, user_id=user_id, limit=limit):
            seen.setdefault((h.session_id, h.seq), h)
    return sorted(seen.values(), key=lambda h: -h.score)[:limit]


def memories_block(memories: list[Memory]) -> str:
    if not memories:
        return ""
    return "What hermes-redis remembers about the user:\n" + "\n".join(
        f"- {' '.join(m.content.split())}" for m in memories)


def fit(lines: list[str], budget: int, tokenizer: Tokenizer, header: str) -> str:
    """``header`` and as many of ``lines`` (in order) as fit in ``budget`` tokens; "" if none."""
    out, used = [header], tokenizer.count(header)
    for line in lines:
        cost = tokenizer.count(line) + 1
        if used + cost > budget:
            break
        out.append(line)
        used += cost
    return "\n".join(out) if len(out) > 1 else ""


def register(ctx: Any) -> None:
    """Hermes' plugin entry: ``ctx.register_memory_provider``."""
    ctx.register_memory_provider(HermesRedisMemoryProvider())

