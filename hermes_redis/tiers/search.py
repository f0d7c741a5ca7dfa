"""Full-text search over both tiers: the archive's ranked hits, then the not-yet-archived
messages matched the same way, so a hit does not change when its message is flushed."""

from __future__ import annotations

import time

from hermes_redis.core.models import SearchHit
from hermes_redis.core.text import fts_matches, snippet
from hermes_redis.store.archive import ArchiveStore
from hermes_redis.store.hot import HotStore


def search(hot: HotStore, cold: ArchiveStore, query: str, user_id: str | None,
           limit: int) -> list[SearchHit]:
    """Archived messages matching every word of ``query``, best first, then unarchived ones
    (tier "hot"), each message once, at most ``limit``; ``user_id`` keeps to one user's."""
    hits = cold.search(query, user_id=user_id, limit=limit)
    seen = {(h.session_id, h.seq) for h in hits}
    # Not yet archived: only the backlog's sessions, only their unarchived messages, and
    # matched as the archive matches (fts_matches), so a hit does not change on a flush.
    backlog = hot.backlog_sessions(time.time())
    for sid, meta in zip(backlog, hot.metas(backlog), strict=True):
        if meta is None or (user_id is not None and meta.user_id != user_id):
            continue
        if meta.status == "deleted":
            continue
        for m in hot.tail(sid, page_size=256):
            if m.seq <= meta.flushed_seq:
                break
            if (sid, m.seq) not in seen and fts_matches(query, m.content):
                hits.append(SearchHit(sid, m.seq, m.role, snippet(m.content, query),
                                      meta.title, 0.0, "hot"))
    return hits[:limit]
