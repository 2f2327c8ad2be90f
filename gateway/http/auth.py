"""Who sent an HTTP request: the principal ``User:<name>`` of its ``Authorization`` header.

- ``Basic``: a user's password, checked against the user's SCRAM credential (the SASL
  users, gateway/users.py). Only over HTTPS: over plain HTTP the password would travel in
  the clear, so it is refused without being checked.
- ``Bearer``: a token of ``tmsgate users token`` (gateway/tokens.py), while it has not
  expired and its user still exists.

A password check costs 4096 rounds of PBKDF2, and a token check two store reads, so both
run on the I/O executor and their outcomes are kept for ``CACHE_TTL_S`` (by the SHA-256 of
the credentials, never the credentials), in bounded caches; concurrent checks of the same
credentials share one run. A changed password, a revoked token or a deleted user therefore
takes effect within CACHE_TTL_S on a running gateway; a token's own expiry is exact.
Times are the store's clock (``Store.now_ms``), which tests move instead of waiting.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar

from tmsgate.gateway.tokens import Tokens, digest_of
from tmsgate.gateway.users import Users

if TYPE_CHECKING:
    from tmsgate.gateway.services import Services

CACHE_TTL_S = 10.0
MAX_CACHED = 10_000  # credentials kept per cache; the oldest go first
MAX_HEADER_CHARS = 8192  # a longer Authorization header is refused unread
V = TypeVar("V")


class Unauthenticated(Exception):
    """No principal: the message says why (the 401's body)."""


class _TtlCache(Generic[V]):
    """key -> (value, until_ms), bounded: the oldest entry goes when it is full."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: dict[str, tuple[V, int]] = {}

    def get(self, key: str, now_ms: int) -> tuple[bool, V | None]:
        hit = self._items.get(key)
        if hit is None or hit[1] <= now_ms:
            return False, None
        return True, hit[0]

    def put(self, key: str, value: V, until_ms: int) -> None:
        self._items.pop(key, None)
        if len(self._items) >= self._size:
            del self._items[next(iter(self._items))]
        self._items[key] = (value, until_ms)


class Authenticator:
    def __init__(self, services: Services) -> None:
        self._run = services.run
        self._clock = services.store.now_ms
        self._users = Users(services.store)
        self._tokens = Tokens(services.store)
        self._ttl_ms = int(CACHE_TTL_S * 1000)
        # By the SHA-256 of the credentials: the user, or None when they name nobody.
        self._basic: _TtlCache[str | None] = _TtlCache(MAX_CACHED)
        self._bearer: _TtlCache[tuple[str, int] | None] = _TtlCache(MAX_CACHED)  # user, expiry
        self._running: dict[str, asyncio.Future[object]] = {}

    async def principal(self, header: str, https: bool) -> str:
        """``User:<name>`` of an Authorization header; Unauthenticated if it names none."""
        if len(header) > MAX_HEADER_CHARS:
            raise Unauthenticated("the Authorization header is too long")
        scheme, _, credentials = header.strip().partition(" ")
        scheme, credentials = scheme.lower(), credentials.strip()
        if scheme == "basic":
            if not https:
                raise Unauthenticated(
                    "HTTP Basic needs HTTPS (the password would travel in the clear): "
                    "use a bearer token, or the gateway's https:// URL"
                )
            name = await self._basic_user(credentials)
        elif scheme == "bearer":
            name = await self._bearer_user(credentials)
        else:
            raise Unauthenticated("the Authorization header is neither Basic nor Bearer")
        return f"User:{name}"

    async def _basic_user(self, credentials: str) -> str:
        try:
            decoded = base64.b64decode(credentials, validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            raise Unauthenticated("malformed Basic credentials (base64 of user:password)") from None
        name, sep, password = decoded.partition(":")
        if not sep or not name:
            raise Unauthenticated("malformed Basic credentials (base64 of user:password)")
        key = hashlib.sha256(b"basic\0" + decoded.encode()).hexdigest()
        user = await self._cached(self._basic, key, self._check_password, name, password)
        if user is None:
            raise Unauthenticated(f"invalid user name or password for {name!r}"[:300])
        return user

    def _check_password(self, name: str, password: str) -> str | None:
        return name if self._users.check_plain(name, password) else None

    async def _bearer_user(self, token: str) -> str:
        if not token:
            raise Unauthenticated("no bearer token after 'Bearer'")
        found = await self._cached(self._bearer, digest_of(token), self._check_token, token)
        if found is None or found[1] <= self._clock():
            raise Unauthenticated("the bearer token is unknown, revoked or expired")
        return found[0]

    def _check_token(self, token: str) -> tuple[str, int] | None:
        info = self._tokens.lookup(token)
        if info is None or not info.live(self._clock()) or not self._users.entries(info.user):
            return None
        return info.user, info.expires_ms

    async def _cached(
        self, cache: _TtlCache[V], key: str, check: Callable[..., V], *args: str
    ) -> V | None:
        """The cached outcome of ``check(*args)``, else one run of it on the I/O executor,
        shared by concurrent callers with the same key."""
        hit, value = cache.get(key, self._clock())
        if hit:
            return value
        running = self._running.get(key)
        if running is None:
            running = asyncio.ensure_future(self._check(cache, key, check, args))
            self._running[key] = running
            running.add_done_callback(functools.partial(self._done, key))
        return await asyncio.shield(running)  # type: ignore[return-value]

    async def _check(
        self, cache: _TtlCache[V], key: str, check: Callable[..., V], args: tuple[str, ...]
    ) -> V:
        value = await self._run(check, *args)
        cache.put(key, value, self._clock() + self._ttl_ms)
        return value

    def _done(self, key: str, future: asyncio.Future[object]) -> None:
        self._running.pop(key, None)
        if not future.cancelled():
            future.exception()  # retrieved: a failed check is its callers' error, not a log line
