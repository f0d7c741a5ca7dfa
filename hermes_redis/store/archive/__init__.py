"""The cold tier: the durable, searchable record of every session.

``base.ArchiveStore`` is the interface; ``sqlite.Archive`` (embedded, one file) and
``postgres.PostgresArchive`` (at scale) answer it, sharing their statements in ``sql``.
"""

from hermes_redis.store.archive.base import SCHEMA_VERSION, ArchiveStore, Forgotten
from hermes_redis.store.archive.sqlite import Archive

__all__ = ["SCHEMA_VERSION", "Archive", "ArchiveStore", "Forgotten"]
