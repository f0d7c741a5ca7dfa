"""What goes to the model: the whole session while it fits, the best of it when it does not.

The seed's resume rule (invariant 6): while every message since the last clear fits in
``compression.threshold`` × the budget, the context *is* that history, verbatim, with the
older part read from the archive (``max_messages`` bounds what Redis keeps, not what the
model sees). Past that, in this order of claim on the budget:

1. persistent memories, at most a quarter;
2. the opening turns (``keep_first``), at most a tenth;
3. the newest turn, always, its big messages capped if it alone is too big;
4. the summary of everything older than the verbatim turns, at most ``summary_share``
   (a budget smaller than the workers compacted for folds the turns between the stored
   summary and the first verbatim turn in, offline, and shrinks the result evenly);
5. messages recalled for the query (by default the newest user message) from the archive
   by full-text rank, at most ``recall_share`` plus what the summary left;
6. the newest turns that fit in the rest, read from the hot list and then the archive.

Cost grows with the budget, never with the length of the history, apart from the ranked
archive lookup of step 5.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any, NamedTuple, Protocol

from hermes_redis.context.summarizers import Summarizer
from hermes_redis.core.config import Compression
from hermes_redis.core.models import (
    PARTS,
    Context,
    Message,
    SessionMeta,
    memories_text,
    recalled_text,
    summary_text,
)
from hermes_redis.core.text import relevant
from hermes_redis.core.tokens import MESSAGE_OVERHEAD, Tokenizer
from hermes_redis.store.hot import HotStore, page_size

OPENING_SHARE = 10  # keep_first turns take at most 1/10 of the budget
MEMORY_SHARE = 4  # persistent memories take at most 1/4
EXCERPT_MAX_TOKENS = 300  # one recalled message, capped
FOLD_MAX_MESSAGES = 256  # unsummarized turns folded in at read time, at most
ANCHOR_STEP = 16  # the verbatim turns start on a multiple of this many seqs past the summary


class History(Protocol):
    """The older conversation as ``context()`` reads it; each method returns None when the
    archive cannot be read (the hot tier alone still gives a context)."""

    def since(self, after_seq: int) -> list[Message] | None:
        """Every message with seq > ``after_seq``, in seq order."""

    def first(self, after_seq: int, limit: int) -> list[Message] | None:
        """The oldest ``limit`` messages with seq > ``after_seq``, in seq order."""

    def before(self, before_seq: int, after_seq: int, limit: int) -> Iterator[Message] | None:
        """Up to ``limit`` messages with ``after_seq`` < seq < ``before_seq``, newest first."""

    def recall(self, query: str, after_seq: int, before_seq: int,
               limit: int) -> Iterator[Message] | None:
        """Messages in that seq range that match ``query``, best first (each followed by the
        message after it)."""


def _cost(messages: Sequence[Message]) -> int:
    return sum(m.token_count + MESSAGE_OVERHEAD for m in messages)


def build_context(hot: HotStore, sid: str, meta: SessionMeta, memories: Sequence[str], budget: int,
                  window: int, tokenizer: Tokenizer, *, history: History | None = None,
                  compression: Compression | None = None, folds: SummaryFolds | None = None,
                  query: str | None = None,
                  first_page: tuple[list[Any], int] | None = None,
                  extracts: bool = True) -> Context:
    """``first_page``: the newest page of the hot list already read with the meta;
    ``extracts``: the workers extract memories after each flush (``extracted_through``)."""
    c = compression or Compression()
    kept_memories, used = _fit_memories(memories, budget, tokenizer, query or "")
    start = meta.cleared_seq
    whole = _whole(meta, history, budget, used, c.threshold,
                   lambda: _all_hot(hot, sid, meta, first_page))
    progress = _Progress(meta.flushed_seq, meta.summary_seq, meta.flushed_seq if extracts else 0)
    if whole is not None:
        first = whole[0].seq if whole else meta.last_seq + 1
        parts = _parts(used, 0, 0, 0, _cost(whole))
        return Context(sid, tuple(whole), "", tuple(kept_memories), used + _cost(whole), budget,
                       window, first, parts=parts, whole=True, **progress._asdict())
    memory_tokens = used
    strategy = c.strategy if c.enabled else "rolling_window"
    archived = meta.flushed_seq  # the archive holds seq <= this
    if archived <= start:  # nothing to read there: the common case of a young session
        history = None
    opening = _opening(history, start, c.keep_first, budget // OPENING_SHARE, tokenizer)
    opening_tokens = _cost(opening)
    used += opening_tokens
    floor = opening[-1].seq if opening else start  # verbatim, summary and recall lie above it
    summary_seq = meta.summary_seq
    summary_room = 0 if strategy == "rolling_window" else int(budget * c.summary_share)
    if not meta.summary and summary_seq <= floor:  # no summary to send: no share
        summary_room = 0
    recall_room = int(budget * c.recall_share) if c.recall and history is not None else 0
    # (with nothing archived the hot tier holds the whole session: no opening, no recall)

    older = _older(hot, sid, meta, history, floor, budget, first_page)
    room = budget - used - recall_room
    picked, rest = _newest(older, room, budget - used, tokenizer,
                           turn_only=strategy == "summary")
    reaches_floor = not rest.more or (picked and picked[0].seq <= floor + 1)
    if strategy == "hybrid" and not reaches_floor:
        # leave the summary its share (and never start on a tool result without its call)
        older_turns, cost = _turn_start(picked), _cost(picked)
        while older_turns > 0 and (cost > room - summary_room or picked[0].role == "tool"):
            cost -= picked[0].token_count + MESSAGE_OVERHEAD
            rest.push(picked.pop(0))
            older_turns -= 1
    if strategy == "summary":
        summary_room = budget - used - _cost(picked) - recall_room
    if strategy == "hybrid" and folds is not None and c.summarize_older and summary_room > 0 \
            and picked and picked[0].seq > floor + 1 and (meta.summary or summary_seq > floor):
        _anchor(picked, rest, max(summary_seq, floor))
    used += _cost(picked)
    shown = picked[0].seq if picked else meta.last_seq + 1

    summary, cost = "", 0
    if strategy != "rolling_window" and summary_room > 0 and shown > floor + 1:
        summary, cost = _summary(sid, meta.summary, summary_seq, rest, shown, floor,
                                 min(summary_room, budget - used), folds, c, tokenizer)
    used += cost
    summary_tokens = cost

    recalled: list[Message] = []
    recall_tokens = 0
    if recall_room and history is not None and shown > floor + 1:
        q = query if query is not None else next(
            (m.content for m in reversed(picked) if m.role == "user"), "")
        room_r = min(budget - used, recall_room + max(0, summary_room - cost))
        recalled, recall_tokens = _recall(history, q, floor, shown, room_r, tokenizer)
        used += recall_tokens
    if strategy != "summary":  # what the shares left: older verbatim turns
        taken = {m.seq for m in recalled}
        for m in rest:
            if m.seq in taken or used + m.token_count + MESSAGE_OVERHEAD > budget:
                break
            picked.insert(0, m)
            used += m.token_count + MESSAGE_OVERHEAD
        while len(picked) > 1 and picked[0].role == "tool":
            used -= picked.pop(0).token_count + MESSAGE_OVERHEAD
        shown = picked[0].seq if picked else shown
    parts = _parts(memory_tokens, opening_tokens, summary_tokens, recall_tokens, _cost(picked))
    return Context(sid, tuple(picked), summary, tuple(kept_memories), used, budget, window, shown,
                   opening=tuple(opening), recalled=tuple(recalled), parts=parts,
                   **progress._asdict())


class _Progress(NamedTuple):
    """How far the background steps have run (``Context``'s fields of that name)."""

    archived_through: int
    summarized_through: int
    extracted_through: int


def _parts(memories: int, opening: int, summary: int, recalled: int,
           newest: int) -> dict[str, int]:
    """``Context.parts``: tokens per part, in ``PARTS`` order."""
    return dict(zip(PARTS, (memories, opening, summary, recalled, newest), strict=True))


def _anchor(picked: list[Message], rest: _Older, base: int) -> None:
    """Start the verbatim turns at the next multiple of ``ANCHOR_STEP`` seqs above ``base``
    (the stored summary's end) at or after where they start (a user message, never past
    the newest turn), the ones before it put back into ``rest`` for the read-time fold. The
    fold, and so the text before the newest turns, then changes once every ``ANCHOR_STEP``
    messages instead of on every append: what a provider's prompt cache reuses."""
    shown = picked[0].seq
    anchor = base + 1 + -(-(shown - base - 1) // ANCHOR_STEP) * ANCHOR_STEP
    newest = _turn_start(picked)
    cut = next((i for i, m in enumerate(picked[:newest]) if m.seq >= anchor and m.role == "user"),
               newest)
    for m in picked[:cut]:  # put back oldest first: ``rest`` gives the newest of them first
        rest.push(m)
    del picked[:cut]


def _turn_start(picked: list[Message]) -> int:
    """Index of the newest user message in ``picked`` (the newest turn starts there)."""
    for i in range(len(picked) - 1, -1, -1):
        if picked[i].role == "user":
            return i
    return 0


def _all_hot(hot: HotStore, sid: str, meta: SessionMeta,
             first_page: tuple[list[Any], int] | None) -> list[Message] | None:
    """Every message of the session, oldest first, when the page already read holds the
    whole list and the list holds every message (its length is the message count)."""
    if first_page is None:
        return None
    entries, asked = first_page
    if len(entries) >= asked or len(entries) != meta.message_count:
        return None
    return list(hot.tail(sid, asked, first=first_page))[::-1]


def _whole(meta: SessionMeta, history: History | None, budget: int, used: int, threshold: float,
           hot_whole: Callable[[], list[Message] | None]) -> list[Message] | None:
    """Every message since the last clear, when the session's counters say it fits within
    ``threshold`` × the budget (checked again on what was read); None when it does not.
    ``hot_whole``: the whole session from the hot tier when it holds all of it (then the
    archive is not read), asked only once the counters say it fits."""
    room = min(int(budget * threshold), budget - used)
    count = meta.message_count
    if meta.total_tokens + count * MESSAGE_OVERHEAD > room:
        return None
    after = meta.cleared_seq
    all_hot = hot_whole()
    if all_hot is not None:
        messages: list[Message] | None = [m for m in all_hot if m.seq > after]
    elif history is None:
        return None
    else:
        messages = history.since(after)
    if messages is None or _cost(messages) > room:
        return None
    return messages


def _opening(history: History | None, start: int, turns: int, room: int,
             tokenizer: Tokenizer) -> list[Message]:
    """The first ``turns`` turns after the last clear, verbatim, within ``room`` (capped)."""
    if history is None or turns <= 0 or room <= 0:
        return []
    first = history.first(start, 16 * turns)
    if not first:
        return []
    out: list[Message] = []
    users = 0
    for m in first:
        if m.role == "user":
            users += 1
            if users > turns:
                break
        out.append(m)
    return out if _cost(out) <= room else _fit_turn(out, room, tokenizer)


class _Older:
    """The session newest first: the hot list, then the archive below what it holds.
    Messages put back with ``push`` come out again first."""

    def __init__(self, messages: Iterator[Message]) -> None:
        self._it = messages
        self._back: list[Message] = []
        self.more = True

    def __iter__(self) -> _Older:
        return self

    def __next__(self) -> Message:
        if self._back:
            return self._back.pop()
        try:
            return next(self._it)
        except StopIteration:
            self.more = False
            raise

    def push(self, m: Message) -> None:
        self._back.append(m)
        self.more = True


def _older(hot: HotStore, sid: str, meta: SessionMeta, history: History | None, floor: int,
           budget: int, first_page: tuple[list[Any], int] | None) -> _Older:
    def gen() -> Iterator[Message]:
        low = None
        for m in hot.tail(sid, page_size=page_size(budget, meta), first=first_page):
            if m.seq <= floor:
                return
            low = m.seq
            yield m
        if history is None:
            return
        low = low if low is not None else meta.last_seq + 1
        low = min(low, meta.flushed_seq + 1)
        page = page_size(budget, meta) // 2
        while low > floor + 1:
            got = history.before(low, floor, page)
            if got is None:
                return
            n = 0
            for m in got:
                n += 1
                low = m.seq
                yield m
            if n < page:
                return
            page = min(1024, page * 2)

    return _Older(gen())


def _newest(older: _Older, room: int, turn_room: int, tokenizer: Tokenizer,
            turn_only: bool = False) -> tuple[list[Message], _Older]:
    """The newest messages that fit ``room``, oldest first (only the newest turn when
    ``turn_only``). The newest turn (from the newest user message on) is always in: when it
    does not fit ``room`` it takes up to ``turn_room``, its big messages capped to fit; a
    leading tool result without its call is put back."""
    picked: list[Message] = []  # newest first while reading
    used = 0
    has_user = False  # the newest user message is picked: the newest turn is in
    for m in older:
        cost = m.token_count + MESSAGE_OVERHEAD
        if has_user and (turn_only or used + cost > room):
            older.push(m)
            break
        if used + cost > room:  # the newest turn does not fit: cap its big messages
            turn = [*picked, m]
            for o in older if m.role != "user" else ():
                turn.append(o)
                if o.role == "user" or len(turn) >= 256:
                    break
            turn.reverse()
            if _cost(turn) <= turn_room:
                return turn, older
            return _fit_turn(turn, turn_room, tokenizer), older
        picked.append(m)
        used += cost
        has_user = has_user or m.role == "user"
    picked.reverse()
    while picked and picked[0].role == "tool":  # a tool result without its call confuses models
        older.push(picked.pop(0))
    return picked, older


class SummaryFolds:
    """Read-time folds of the turns between a session's stored summary and its first verbatim
    turn (the ones the workers have not summarized yet), kept per session so that a read folds
    only the turns that are new since the last one. A fold is reused only while the stored
    summary is the same and the turns it folded are still there, in the same order (a forget
    invalidates it: invariant 4). At most ``size`` sessions are kept, least recent out first.
    Offline: ``summarizer`` is the extractive one, so a read never waits on the network."""

    def __init__(self, summarizer: Summarizer, size: int = 256) -> None:
        self.summarizer, self.size = summarizer, size
        self._folds: OrderedDict[str, tuple[str, int, int, tuple[str, ...], str]] = OrderedDict()
        self._lock = threading.Lock()

    def fold(self, sid: str, stored: str, base: int, gap: list[Message], max_tokens: int) -> str:
        """``stored`` (covering seq <= ``base``) with ``gap`` (in seq order) folded in, within
        ``max_tokens``."""
        ids = tuple(m.message_id for m in gap)
        with self._lock:
            hit = self._folds.get(sid)
        if hit is not None and hit[:3] == (stored, base, max_tokens) and \
                ids[: len(hit[3])] == hit[3]:
            new, text = gap[len(hit[3]):], hit[4]
        else:
            new, text = gap, stored
        if new:
            text = self.summarizer.summarize(text, new, max_tokens)
        with self._lock:
            self._folds[sid] = (stored, base, max_tokens, ids, text)
            self._folds.move_to_end(sid)
            while len(self._folds) > self.size:
                self._folds.popitem(last=False)
        return text


def _summary(sid: str, stored: str, summary_seq: int, rest: _Older, shown: int, floor: int,
             room: int, folds: SummaryFolds | None, c: Compression,
             tokenizer: Tokenizer) -> tuple[str, int]:
    """The summary of everything between the opening and the first verbatim message: the
    stored one, plus (offline) the turns it does not cover yet, shrunk evenly to ``room``.
    Those turns are folded in once the workers have summarized the session and only while
    they are at most ``FOLD_MAX_MESSAGES`` (the workers keep them few): with no worker, or the
    workers far behind, the stored summary alone is sent and a read stays cheap."""
    room -= MESSAGE_OVERHEAD + tokenizer.count(summary_text(""))
    if room <= 16:
        return "", 0
    text = stored
    base = max(summary_seq, floor)
    workers_summarized = summary_seq > floor or bool(stored)
    if folds is not None and workers_summarized and 0 < shown - 1 - base <= FOLD_MAX_MESSAGES \
            and c.summarize_older:
        gap: list[Message] = []  # newest first
        for m in rest:
            if m.seq <= base:
                rest.push(m)
                break
            gap.append(m)
        for m in reversed(gap):  # read again by whoever comes next, newest first
            rest.push(m)
        gap = [m for m in reversed(gap) if m.seq < shown]
        if gap:
            text = folds.fold(sid, stored, base, gap, c.summary_max_tokens)
    if not text:
        return "", 0
    if tokenizer.count(text) > room:
        text = folds.summarizer.shrink(text, room) if folds is not None else \
            tokenizer.cap(text, room, "the archive")
    return (text, tokenizer.count_message(summary_text(text))) if text else ("", 0)


def _recall(history: History, query: str, floor: int, shown: int, room: int,
            tokenizer: Tokenizer) -> tuple[list[Message], int]:
    """The best-ranked older messages for ``query`` that fit ``room``, in seq order."""
    lines = room - MESSAGE_OVERHEAD - tokenizer.count(recalled_text(()))  # for the excerpts
    if lines <= 16 or not query.strip():
        return [], 0
    hits = history.recall(query, floor, shown, max(16, min(256, lines // 32))) or iter(())
    cap = max(24, min(EXCERPT_MAX_TOKENS, lines // 3))
    picked: list[Message] = []
    used = misses = 0
    for m in hits:
        m = _capped(m, cap + MESSAGE_OVERHEAD, tokenizer) or m
        cost = m.token_count + 12  # the line's date, role and separators
        if used + cost > lines:
            misses += 1
            if misses >= 8 or lines - used < 24:  # full enough: the rest is not decoded
                break
            continue
        picked.append(m)
        used += cost
    picked.sort(key=lambda m: m.seq)
    while picked:
        total = tokenizer.count_message(recalled_text(picked))
        if total <= room:
            return picked, total
        picked.pop(max(range(len(picked)), key=lambda i: picked[i].token_count))
    return [], 0


def _fit_turn(turn: list[Message], room: int, tokenizer: Tokenizer) -> list[Message]:
    """The newest turn within ``room``: the small messages stay whole and the big ones share
    what is left equally, each capped (head and tail kept). Water-filling: the total fits."""
    costs = sorted(m.token_count + MESSAGE_OVERHEAD for m in turn)
    left, level = room, room
    for i, c in enumerate(costs):
        if c * (len(costs) - i) > left:
            level = left // (len(costs) - i)
            break
        left -= c
    out = []
    for m in turn:
        capped = _capped(m, level, tokenizer)
        if capped is not None:
            out.append(capped)
    return out


def _capped(m: Message, room: int, tokenizer: Tokenizer) -> Message | None:
    """``m`` within ``room`` tokens including its overhead (head and tail kept); None when
    there is no room at all."""
    limit = room - MESSAGE_OVERHEAD
    if m.token_count <= limit:
        return m
    if limit < 8:
        return None
    content = tokenizer.cap(m.content, limit, "the archive")
    return replace(m, content=content, token_count=tokenizer.count(content)) if content else None


def _fit_memories(memories: Sequence[str], budget: int, tokenizer: Tokenizer,
                  query: str = "") -> tuple[list[str], int]:
    """All memories while they fit a quarter of the budget. Past that, those relevant to
    ``query`` first (the recall's terms), then the newest; kept in their stored order."""
    room = budget // MEMORY_SHARE
    if memories:
        whole = tokenizer.count_message(memories_text(list(memories)))
        if whole <= room:
            return list(memories), whole
    order = list(range(len(memories) - 1, -1, -1))  # newest first
    if query.strip():
        first = relevant(order, query, key=lambda i: memories[i])
        order = first + [i for i in order if i not in set(first)]
    chosen: list[int] = []
    for i in order:
        trial = sorted([*chosen, i])
        if tokenizer.count_message(memories_text([memories[j] for j in trial])) <= room:
            chosen = trial
    kept = [memories[j] for j in chosen]
    return kept, tokenizer.count_message(memories_text(kept)) if kept else 0

