"""Recall by meaning (issue 31): the archive's message vectors, filled in by the flush and
searched per session at ``context()``.

Guarantees:
- Embeddings never hold up archiving nor fail a read: a provider that fails leaves the
  messages without vectors (the next flush of the session fills them in, newest
  ``FILL_WINDOW`` first), and a read without vectors is BM25 alone.
- A session's search reads that session's vectors only, of the configured model only; a
  process keeps the matrices of the sessions it searched last (``held_bytes`` in all,
  ``embeddings.cache_mb``) and reads only what is new since, so a search costs one query
  embedding (cached per text) and one product.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from hermes_redis.core.embeddings import Embedder, EmbeddingError, Vectors, need_numpy, pack, unpack
from hermes_redis.core.errors import HermesError
from hermes_redis.store.archive import ArchiveStore

log = logging.getLogger(__name__)

FILL_WINDOW = 1000  # a flush embeds the unembedded among the session's newest this many
# ...once there are at least this many: a model's call costs about the same for 1 text as
# for 16 (the local one: ~10 ms against ~1 ms a text in a batch), and the newest messages
# are in the context verbatim anyway, so they are not missed by recall meanwhile
FILL_MIN = 16


@dataclass
class _Held:
    version: int
    seqs: Any  # int64 array, ascending
    matrix: Vectors

    @property
    def nbytes(self) -> int:
        return int(self.matrix.nbytes + self.seqs.nbytes)


class VectorIndex:
    def __init__(self, cold: ArchiveStore, embedder: Embedder, weight: float = 1.0,
                 held_bytes: int = 512 << 20) -> None:
        self.cold, self.embedder = cold, embedder
        self.weight = weight  # the fusion's weight of these ranks, BM25's being 1
        self.held_bytes = held_bytes
        self._held: OrderedDict[str, _Held] = OrderedDict()
        self._lock = threading.Lock()

    # --- writes (the worker, after a flush) -------------------------------------------------
    def fill(self, sid: str, least: int = FILL_MIN) -> int:
        """Embed the session's archived messages that have no vector yet (among the newest
        ``FILL_WINDOW``), when there are at least ``least``; returns how many were stored.
        A failure is logged, never raised."""
        try:
            key = self._key()
            todo = [(seq, text) for seq, text in self.cold.unembedded(sid, key, FILL_WINDOW)
                    if text.strip()]
            return self._store(sid, todo) if todo and len(todo) >= least else 0
        except HermesError as err:
            log.warning("session %s: embeddings skipped, filled in at a later flush: %s", sid, err)
            return 0

    def backfill(self, sid: str, chunk: int = 256) -> int:
        """Embed every archived message of the session without a vector of this model, oldest
        first, committing each ``chunk``; returns how many were stored. Unlike ``fill`` it
        raises EmbeddingError (an operator runs it and reads the error)."""
        todo = [(seq, text) for seq, text in self.cold.unembedded(sid, self._key(), 1 << 62)
                if text.strip()]
        return sum(self._store(sid, todo[i:i + chunk]) for i in range(0, len(todo), chunk))

    def _store(self, sid: str, todo: list[tuple[int, str]]) -> int:
        """Embed these (seq, text) of the session and store their vectors in one commit."""
        vecs = self.embedder.embed([text for _, text in todo])
        return self.cold.put_vectors(sid, self._key(), [  # the key after the call: its dimension
            (seq, pack(v)) for (seq, _), v in zip(todo, vecs, strict=True)])

    def fill_memories(self, user_id: str, limit: int = 256) -> None:
        """Embed the user's current memories that have no vector of this model."""
        try:
            key = self._key()
            todo = self.cold.unembedded_memories(user_id, key, limit)
            if todo:
                vecs = self.embedder.embed([text for _, text in todo])
                self.cold.put_memory_vectors(self._key(), [(mid, pack(v)) for (mid, _), v
                                                           in zip(todo, vecs, strict=True)])
        except HermesError as err:
            log.warning("memories of %s: embeddings skipped, filled in later: %s", user_id, err)

    # --- reads ------------------------------------------------------------------------------
    def nearest(self, sid: str, query: str, after_seq: int, before_seq: int,
                limit: int) -> list[int]:
        """The seqs in after_seq < seq < before_seq nearest ``query`` by meaning, best first;
        [] when there are no vectors or the provider fails (logged)."""
        if not query.strip():
            return []
        try:
            q = self.embedder.query(query)
            held = self._session(sid)
        except HermesError as err:
            log.warning("session %s: recall by words only: %s", sid, err)
            return []
        if held is None or not len(held.seqs):
            return []
        np = need_numpy()
        lo, hi = np.searchsorted(held.seqs, [after_seq + 1, before_seq])
        if hi <= lo:
            return []
        scores = held.matrix[lo:hi] @ q
        k = min(limit, hi - lo)
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top], kind="stable")]
        return [int(s) for s in held.seqs[lo:hi][top]]

    def nearest_memories(self, user_id: str, query: str, limit: int,
                         floor: float = 0.25) -> list[str]:
        """The user's current memories nearest ``query`` (cosine at least ``floor``), best
        first; [] on any failure."""
        try:
            key = self._key()
            stored = self.cold.memory_vectors(user_id, key)
            if not stored or self.embedder.dim is None:
                return []
            q = self.embedder.query(query)
        except HermesError as err:
            log.warning("memories of %s: search by words only: %s", user_id, err)
            return []
        ids = list(stored)
        scores = unpack(stored.values(), self.embedder.dim) @ q
        ranked = sorted(range(len(ids)), key=lambda i: -float(scores[i]))
        return [ids[i] for i in ranked[:limit] if scores[i] >= floor]

    def _key(self) -> str:
        if self.embedder.key is None:  # the dimension is known after the first call
            self.embedder.query("hermes")
        key = self.embedder.key
        if key is None:
            raise EmbeddingError(f"embeddings {self.embedder.name}: no dimension known")
        return key

    def _session(self, sid: str) -> _Held | None:
        """The session's vectors of this model: held ones, plus what was stored since; all of
        them again when one was removed or stored below the newest (``vector_version``)."""
        key, dim = self._key(), self.embedder.dim
        assert dim is not None
        np = need_numpy()
        version = self.cold.vector_version(sid)
        with self._lock:
            held = self._held.get(sid)
        if held is not None and held.version == version and held.matrix.shape[1] == dim:
            after = int(held.seqs[-1]) if len(held.seqs) else 0
            new = self.cold.vectors(sid, key, after)
            if new:
                held = _Held(version, np.concatenate([held.seqs, [s for s, _ in new]]),
                             np.concatenate([held.matrix, unpack((v for _, v in new), dim)]))
        else:
            rows = self.cold.vectors(sid, key)
            held = _Held(version, np.asarray([s for s, _ in rows], dtype=np.int64),
                         unpack((v for _, v in rows), dim))
        with self._lock:
            self._held[sid] = held
            self._held.move_to_end(sid)
            total = sum(h.nbytes for h in self._held.values())
            while total > self.held_bytes and len(self._held) > 1:
                total -= self._held.popitem(last=False)[1].nbytes
        return held
