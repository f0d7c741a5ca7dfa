"""The provider's one writer thread and its outage state: Hermes' hooks queue, this thread
writes, in order, each item exactly once (a retry carries the same message ids, which the
append script stores once), with backoff while hermes-redis is away. What is still queued
when Hermes exits is spooled to a file in the Hermes home and written by the next Hermes
process that starts there (a one-shot ``hermes chat -q`` exits after every turn)."""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermes_redis.core.api import SessionAPI
from hermes_redis.core.errors import (
    AuthError,
    ConflictError,
    NotFoundError,
    StateError,
    ValidationError,
)
from hermes_redis.integrations import Store

log = logging.getLogger("hermes_redis.hermes_agent")
CLOCK_SLACK = 2.0  # seconds between this host's clock and the store's, at most
SKIP_SECONDS = 5.0  # after a failure, reads give up at once for this long
BACKOFF_MAX = 5.0
Item = tuple[str, str, str, Any]  # (kind, session id, user id, rows or text)


def one_line(err: BaseException) -> str:
    return " ".join(str(err).split())[:300] or type(err).__name__


class Outage:
    """Whether hermes-redis is reachable: one log line when it goes, one when it is back."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.lock = threading.Lock()
        self.since: float | None = None
        self.last_failure = 0.0

    def down(self, err: BaseException, where: str) -> None:
        with self.lock:
            self.last_failure = time.monotonic()
            if self.since is None:
                self.since = self.last_failure
                log.warning("%s: %s is unreachable (%s); Hermes goes on without it, and the "
                            "queued turns are written when it is back", self.name, where,
                            one_line(err))

    def up(self) -> None:
        with self.lock:
            if self.since is not None:
                log.warning("%s: back after %.1f s", self.name, time.monotonic() - self.since)
                self.since = None

    def skipping(self) -> bool:
        """Reads return empty at once: a call failed less than SKIP_SECONDS ago."""
        with self.lock:
            return self.since is not None and \
                time.monotonic() - self.last_failure < SKIP_SECONDS


class Writer(threading.Thread):
    """A bounded FIFO of writes and the daemon thread that performs them."""

    def __init__(self, connect: Callable[[], SessionAPI], limit: int, outage: Outage,
                 where: str, spool: Path | None = None) -> None:
        super().__init__(name="hermes-redis-writer", daemon=True)
        self.connect, self.limit, self.outage, self.where = connect, limit, outage, where
        self.spool = spool  # the directory of what earlier processes left unwritten
        self.queue: collections.deque[Item] = collections.deque()
        self.cond = threading.Condition()
        self.busy = False
        self.head_since: float | None = None  # when the head item was first tried, if it was
        self.carried: set[str] = set()  # first ids of spooled turns an earlier process tried
        self.stopping = False
        self.dropped = 0  # turns refused because the queue was full
        self.written = 0

    def put(self, item: Item) -> bool:
        """Queue ``item``; False (counted in ``dropped``, logged) when the queue is full."""
        with self.cond:
            if len(self.queue) >= self.limit:
                self.dropped += 1
                log.warning("hermes-redis: the write queue is full (%d items while %s is "
                            "away): dropped a %s, %d dropped so far", self.limit, self.where,
                            item[0], self.dropped)
                return False
            self.queue.append(item)
            self.cond.notify_all()
            return True

    def drain(self, timeout: float) -> bool:
        """Wait until the queue is empty and no write is under way; False after ``timeout``."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while self.queue or self.busy:
                left = deadline - time.monotonic()
                if left <= 0 or not self.is_alive():
                    return not (self.queue or self.busy)
                self.cond.wait(min(left, 0.05))
            return True

    def stop(self, timeout: float) -> None:
        """Drain for at most ``timeout`` seconds, then end the thread; what is left goes to
        the spool for the next process."""
        self.drain(timeout)
        with self.cond:
            self.stopping = True
            left = list(self.queue)
            self.queue.clear()
            self.cond.notify_all()
        if left and self.spool is not None:
            try:
                self.spool.mkdir(parents=True, exist_ok=True)
                path = self.spool / f"{time.time_ns()}-{os.getpid()}.jsonl"
                tmp = path.with_suffix(".tmp")
                tried = self.head_since is not None  # the head may have landed already
                tmp.write_text("".join(json.dumps([*i, tried and n == 0], ensure_ascii=False)
                                       + "\n" for n, i in enumerate(left)), encoding="utf-8")
                os.replace(tmp, path)
            except OSError as err:
                log.warning("hermes-redis: %d queued writes lost at shutdown: cannot spool "
                            "them (%s)", len(left), one_line(err))
                return
            log.warning("hermes-redis: %d queued writes kept in %s for the next Hermes run "
                        "(%s unreachable)", len(left), path, self.where)
        elif left:
            log.warning("hermes-redis: %d queued writes lost at shutdown (%s unreachable)",
                        len(left), self.where)

    def unspool(self) -> int:
        """Queue what earlier processes spooled, oldest first; how many items."""
        if self.spool is None or not self.spool.is_dir():
            return 0
        taken = 0
        for path in sorted(self.spool.glob("*.jsonl")):
            try:
                lines = path.read_text(encoding="utf-8").splitlines()
                path.unlink()
            except OSError:
                continue  # another process took it
            with self.cond:
                for line in lines:
                    with contextlib.suppress(ValueError, TypeError):
                        kind, sid, user, payload, *tried = json.loads(line)
                        self.queue.append((kind, sid, user, payload))
                        if tried and tried[0] and kind == "turn" and payload:
                            self.carried.add(str(payload[0].get("message_id")))
                        taken += 1
                self.cond.notify_all()
        return taken

    def start(self) -> None:
        """Queue what earlier processes spooled (a local file read), then start writing."""
        self.unspool()
        super().start()

    def run(self) -> None:
        delay = 0.1
        while True:
            with self.cond:
                while not self.queue and not self.stopping:
                    self.cond.wait()
                if self.stopping:
                    return
                item = self.queue[0]
                self.busy = True
                fresh = self.head_since is None and not (
                    item[0] == "turn" and item[3] and
                    str(item[3][0].get("message_id")) in self.carried)
                if self.head_since is None:
                    self.head_since = time.time()
            try:
                self._write(item, fresh)
            except (ValidationError, NotFoundError, StateError, AuthError) as err:  # for good
                log.warning("hermes-redis: a %s for session %s was refused (%s); skipped",
                            item[0], item[1], one_line(err))
                with self.cond:
                    self.head_since = None
            except Exception as err:  # away (HermesError, OSError, ...): retry
                self.outage.down(err, self.where)
                with self.cond:
                    self.busy = False
                    self.cond.notify_all()
                    self.cond.wait(delay)
                delay = min(delay * 2, BACKOFF_MAX)
                continue
            self.outage.up()
            delay = 0.1
            with self.cond:
                self.queue.popleft()
                self.busy = False
                self.head_since = None
                self.written += 1
                self.cond.notify_all()

    def _write(self, item: Item, fresh: bool) -> None:
        kind, sid, user, payload = item
        api = self.connect()
        if kind == "turn":
            self._turn(api, Store(sid, api, user), payload, fresh)
        elif kind == "remember":
            api.remember(user, payload, sid or None)
        elif kind == "forget":
            for memory in api.memories(user):
                if memory.content.strip() == payload:
                    api.forget_memory(memory.memory_id, user)
        else:
            raise ValidationError(f"unknown write {kind}")

    def _turn(self, api: SessionAPI, store: Store, batch: list[dict[str, Any]],
              fresh: bool) -> None:
        """One append_many. A first try whose ids the store already holds for other messages
        (ConflictError) or for messages stored before this turn was queued (the same words
        said again where Hermes' list was cut) is not a retry: the turn is stored under ids
        derived from those, which the queue keeps for its own retries."""
        try:
            got = api.append_many(store.session_id, batch)
        except NotFoundError:
            store.create()
            got = api.append_many(store.session_id, batch)
        except ConflictError:
            got = None
        except StateError:
            store.add(batch)  # a deleted session starts over with the same id
            return
        since = self.head_since or time.time()
        if got is not None and not (fresh and got and
                                    max(m.created_at for m in got) < since - CLOCK_SLACK):
            return
        again = [{**row, "message_id": _derived(str(row.get("message_id")))} for row in batch]
        with self.cond:
            if self.queue and self.queue[0][3] is batch:
                self.queue[0] = (self.queue[0][0], self.queue[0][1], self.queue[0][2], again)
        log.info("hermes-redis: a turn's ids named earlier messages of %s; stored it under "
                 "new ids", store.session_id)
        api.append_many(store.session_id, again)


def _derived(message_id: str) -> str:
    return hashlib.sha256(f"again:{message_id}".encode()).hexdigest()[:32]
