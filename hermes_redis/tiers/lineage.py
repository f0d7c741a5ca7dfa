"""A session that continues or forks another (issue 30), written to both tiers.

Both start the same way: the new session's row and messages go to the archive in one
transaction, then the hot tier is loaded from it exactly as an expired session is loaded
back (``Loader.load``). Either the whole new session exists or none of it does; the parent is
only read (its backlog is archived first, so the copies hold its full texts).

- ``continue_session``: a new session of the same user, ``parent_session_id`` the parent,
  whose first message (seq 1, role ``system``) carries the parent's thread: its summary (the
  stored one with the newer turns folded in, offline) and where it left off (its last turn).
  It is the session's opening turn, so the context keeps it while ``keep_first`` keeps it.
- ``fork``: a new session of the same user holding copies of the parent's messages up to
  ``at_seq``, at the same seqs, each with a new message_id: a later write, forget or pop in
  either never touches the other. The parent's summary comes along when it ends at or
  before ``at_seq``.
"""

from __future__ import annotations

import time
from dataclasses import replace

from hermes_redis.context.summarizers import ExtractiveSummarizer
from hermes_redis.core.config import Config
from hermes_redis.core.errors import ValidationError
from hermes_redis.core.models import Message, SessionMeta, new_message_id
from hermes_redis.core.tokens import Tokenizer
from hermes_redis.store.archive import ArchiveStore
from hermes_redis.store.hot import HotStore
from hermes_redis.tiers.flush import Flusher
from hermes_redis.tiers.load import Loader
from hermes_redis.tiers.read import Reader, split_turns

CARRY_READ = 200  # newest messages of the parent the carried summary folds in
LEFT_OFF_TOKENS = 400  # the parent's last turn, at most this many tokens of it


class Lineage:
    def __init__(self, config: Config, hot: HotStore, cold: ArchiveStore, tokenizer: Tokenizer,
                 loader: Loader, reader: Reader, flusher: Flusher) -> None:
        self.config, self.hot, self.cold, self.tokenizer = config, hot, cold, tokenizer
        self.loader, self.reader, self.flusher = loader, reader, flusher
        self.offline = ExtractiveSummarizer(tokenizer)

    def continue_session(self, sid: str, new_sid: str) -> None:
        """``new_sid`` continues ``sid`` (NotFoundError: no such session; StateError: deleted)."""
        parent = self.loader.load(sid)
        self.flusher.flush(sid)
        text = self.carried(sid, parent)
        now = time.time()
        meta = replace(SessionMeta.new(parent.user_id, parent.title, now),
                       parent_session_id=sid)
        opening = Message.new(new_sid, 1, "system", text, self.tokenizer.count(text),
                              new_message_id(), "", (), (), round(now, 6), "")
        self._start(new_sid, replace(meta, last_seq=1), [opening])

    def carried(self, sid: str, parent: SessionMeta) -> str:
        """The parent's thread as one system message: what it was about, where it left off."""
        newest = [m for m in self.reader.newest(sid, CARRY_READ)
                  if m.seq > max(parent.summary_seq, parent.cleared_seq)]
        share = max(50, self.config.context_budget // 20)  # the opening turn's tenth holds it
        room = min(self.config.session.compression.summary_max_tokens, share)
        about = self.offline.summarize(parent.summary, newest, room)
        lines = [f"This session continues session {sid}"
                 + (f" ({parent.title})" if parent.title else "") + "."]
        lines.append("What it was about:\n" + about if about.strip()
                     else "What it was about: nothing was said in it.")
        turns = split_turns(newest)
        if turns:
            last = "\n".join(f"{m.role}: {m.content}" for m in turns[-1] if m.content.strip())
            if last:
                lines.append("Where it left off:\n"
                             + self.tokenizer.cap(last, min(LEFT_OFF_TOKENS, share), "the parent session"))
        return "\n\n".join(lines)

    def fork(self, sid: str, new_sid: str, at_seq: int | None) -> int:
        """``new_sid`` holds copies of ``sid``'s messages up to ``at_seq`` (None: all); returns
        the seq the copy ends at. A seq outside 1..last_seq is a ValidationError, nothing written."""
        parent = self.loader.load(sid)
        if parent.last_seq < 1:
            raise ValidationError(f"session {sid} has no messages to fork; use continue, or "
                                  "create a new session")
        upto = parent.last_seq if at_seq is None else at_seq
        if not 1 <= upto <= parent.last_seq:
            raise ValidationError(f"at_seq {at_seq} is outside session {sid}'s history: give a "
                                  f"seq from 1 to {parent.last_seq}")
        self.flusher.flush(sid)
        copies = [Message.new(new_sid, m.seq, m.role, m.content, m.token_count,
                              new_message_id(), m.tool_calls, m.file_refs, m.memory_refs,
                              m.created_at, m.item_json)
                  for m in self.reader.history(sid, upto)]
        meta = replace(SessionMeta.new(parent.user_id, parent.title, time.time()),
                       parent_session_id=sid, forked_at_seq=upto, last_seq=upto)
        if parent.cleared_seq <= upto:  # a /clear before the fork point holds in the fork
            meta = replace(meta, cleared_seq=parent.cleared_seq)
        if parent.summary_seq <= upto:  # the summary covers only copied seqs
            meta = replace(meta, summary=parent.summary, summary_seq=parent.summary_seq)
        self._start(new_sid, meta, copies)
        return upto

    def _start(self, sid: str, meta: SessionMeta, messages: list[Message]) -> None:
        """The new session in the archive (row and messages in one transaction), then loaded
        into the hot tier from there."""
        if self.hot.meta(sid) is not None or self.cold.session(sid) is not None:
            raise ValidationError(f"session {sid} already exists; pick another id")
        self.cold.write(meta.to_row(sid), messages)
        self.loader.load(sid)
