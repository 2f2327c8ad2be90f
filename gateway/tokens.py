"""Bearer tokens of the HTTP API (``tmsgate users token``), kept in the store's
MetadataTable: state area ``tokens``, one row per token, keyed by the SHA-256 of the token
(hex) with ``{"user", "created_ms", "expires_ms"}`` as the value. The token itself is
printed once and never stored, so a copy of the store gives no working token.

A token names a user of gateway/users.py and is worth nothing once that user is gone:
the HTTP API checks that the user still exists when it takes a token. A token's id, what
``tmsgate users tokens`` lists and ``--revoke`` takes, is the start of its digest.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from tmsgate.storage import Store

from .users import UserError, Users

AREA = "tokens"
DEFAULT_TTL_DAYS = 30
MAX_TTL_DAYS = 3650
ID_CHARS = 12  # a token's id: this many hex digits of its digest
_DAY_MS = 86_400_000


@dataclass(frozen=True, slots=True)
class TokenInfo:
    digest: str  # SHA-256 of the token, hex
    user: str
    created_ms: int
    expires_ms: int

    @property
    def id(self) -> str:
        return self.digest[:ID_CHARS]

    def live(self, now_ms: int) -> bool:
        return now_ms < self.expires_ms


def digest_of(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


def _decode(digest: str, raw: bytes) -> TokenInfo | None:
    try:
        doc = json.loads(raw)
        return TokenInfo(digest, str(doc["user"]), int(doc["created_ms"]), int(doc["expires_ms"]))
    except (ValueError, KeyError, TypeError):
        return None  # an unreadable row is no token


class Tokens:
    """The tokens of one store. Blocking calls (they read or write the store)."""

    def __init__(self, store: Store, clock: Callable[[], int] | None = None) -> None:
        self._store = store
        self._clock = clock or store.now_ms

    def issue(self, user: str, ttl_days: float = DEFAULT_TTL_DAYS) -> tuple[str, TokenInfo]:
        """A new token for an existing user -> (the token, what the store keeps)."""
        if not Users(self._store).entries(user):
            raise UserError(f"no such user: {user}")
        if not 0 < ttl_days <= MAX_TTL_DAYS:
            raise UserError(f"ttl: more than 0 and at most {MAX_TTL_DAYS} days, got {ttl_days}")
        token = secrets.token_urlsafe(32)
        now = self._clock()
        info = TokenInfo(digest_of(token), user, now, now + int(ttl_days * _DAY_MS))
        doc = {"user": user, "created_ms": info.created_ms, "expires_ms": info.expires_ms}
        self._store.put_state(AREA, info.digest, json.dumps(doc).encode())
        return token, info

    def lookup(self, token: str) -> TokenInfo | None:
        """The token's row, expired or not; None for a token the store does not hold."""
        digest = digest_of(token)
        raw = self._store.get_state(AREA, digest)
        return None if raw is None else _decode(digest, raw)

    def list(self, user: str | None = None) -> list[TokenInfo]:
        found = (_decode(d, raw) for d, raw in self._store.scan_state(AREA))
        return sorted(
            (t for t in found if t is not None and (user is None or t.user == user)),
            key=lambda t: (t.user, t.created_ms, t.digest),
        )

    def revoke(self, user: str, token_id: str | None = None) -> list[TokenInfo]:
        """Delete one of the user's tokens by its id (None: all of them); -> the deleted."""
        gone = [t for t in self.list(user) if token_id is None or t.id == token_id]
        if gone:
            self._store.put_states({(AREA, t.digest): None for t in gone})
        return gone
