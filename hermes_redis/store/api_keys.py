"""API keys for the HTTP server: each scoped to one user, or an admin key.

A key is shown once, when it is created; the archive keeps only its SHA-256 (table
``api_keys``), so a copy of the database gives no way in. A key reads
``hrk_<key_id>_<secret>``: the id lets ``key list`` and ``key revoke`` name it without it.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Any

from hermes_redis.core.errors import NotFoundError, ValidationError
from hermes_redis.core.models import parse_ts
from hermes_redis.store.archive import ArchiveStore

PREFIX = "hrk_"


@dataclass(frozen=True)
class ApiKey:
    key_id: str
    user_id: str | None  # None: an admin key, which sees every user
    created_at: float
    revoked_at: float | None = None

    @property
    def admin(self) -> bool:
        return self.user_id is None

    def as_dict(self) -> dict[str, object]:
        return {"key_id": self.key_id, "user_id": self.user_id, "admin": self.admin,
                "created_at": self.created_at, "revoked_at": self.revoked_at}


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _key(row: dict[str, Any]) -> ApiKey:
    revoked = row.get("revoked_at")
    return ApiKey(str(row["key_id"]), row["user_id"], parse_ts(row["created_at"]),
                  None if revoked is None else parse_ts(revoked))


class KeyStore:
    """Create, list, revoke and check keys; the archive stores them."""

    def __init__(self, archive: ArchiveStore) -> None:
        self.archive = archive

    def create(self, user_id: str | None) -> tuple[ApiKey, str]:
        """A new key for ``user_id`` (None: admin) and its secret text, which is never stored."""
        if user_id is not None and (not user_id or len(user_id) > 128 or not user_id.isprintable()):
            raise ValidationError("user_id must be 1-128 printable characters")
        key_id = secrets.token_hex(6)
        token = f"{PREFIX}{key_id}_{secrets.token_urlsafe(32)}"
        self.archive.add_api_key(key_id, user_id, _hash(token))
        row = self.archive.api_key_by_hash(_hash(token))
        assert row is not None
        return _key(row), token

    def list(self) -> list[ApiKey]:
        return [_key(r) for r in self.archive.api_keys()]

    def revoke(self, key_id: str) -> None:
        if not self.archive.revoke_api_key(key_id):
            raise NotFoundError(f"no active key {key_id[:40]!r}; see `hermes-redis key list`")

    def active(self) -> int:
        """How many unrevoked keys exist (none: the server runs open, on loopback only)."""
        return self.archive.active_api_keys()

    def check(self, token: str) -> ApiKey | None:
        """The unrevoked key ``token`` is, or None. Looked up by its hash: the secret itself is
        never compared, stored or logged."""
        if not token.startswith(PREFIX) or len(token) > 200:
            return None
        row = self.archive.api_key_by_hash(_hash(token))
        if row is None or row["revoked_at"] is not None:
            return None
        return _key(row)
