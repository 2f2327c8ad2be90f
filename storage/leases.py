"""Leases with fencing epochs, kept in the MetadataTable (issue 14: several gateways on one
store, each partition led by the gateway that holds its lease).

A lease is one row, ``L`` + the lease's name (UTF-8), holding a small JSON object::

    {"epoch": 7, "expires_ms": 1700000030000, "holder": "gw-a/4711", "ttl_ms": 30000}

Every change goes through the backend's ``check_and_put`` against the exact bytes read
(or written) before, so two gateways racing for a lease can never both get it: one
check_and_put wins, the others find the row changed and see the winner. The rows are
never deleted, so the epoch never goes back.

The rules:

- ``acquire`` takes a lease that is absent, expired (``expires_ms <= now``) or released,
  and then always with a **new epoch**: one more than the row's. The epoch is the fencing
  token: whoever takes a lease has a larger epoch than every earlier holder, so anything
  the holder writes can carry it and be refused once a larger one is seen. Acquiring a
  lease one already holds, unexpired, extends it with the same epoch.
- ``renew`` extends the lease while it is still the holder's with the same epoch (nobody
  took it over meanwhile, which would have changed the epoch); ``None`` once it is lost.
  A renew whose write failed with an unknown outcome can simply be retried with the same
  ``Lease``: a row with the holder's name and epoch can only be the holder's own.
- ``release`` hands it back early: expires now, same epoch, so the next ``acquire``
  (by anyone) takes it at once, with a new epoch.

Time: expiry is judged by each caller's own clock (``clock_ms``), so it is only as good
as the clocks agree; bounding the skew is the caller's job. A holder computes
``expires_ms`` from a time taken *before* its write, so by its own clock its lease ends no
later than anyone else sees it end, give or take the skew. It must stop acting as the
holder at ``expires_ms - margin`` by its own clock, where the margin covers the clock
skew between machines plus the longest pause it may take (GC, a stalled call), and renew
well before that: say every third of the ttl, so that one or two failed renewals still
leave time. Fencing is what makes a late holder harmless: writes that carry the epoch
are refused once a larger epoch is recorded.

``holder`` names one process incarnation (say ``host/pid/start time``): two processes
using the same name would share the lease and its epoch.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from . import keys
from .backend import Backend
from .errors import StorageError

LEASE = keys.LEASE

# A lost check_and_put means someone else changed the row; the next look normally shows
# the lease held. More attempts than this only happen when rows change all the time.
ACQUIRE_ATTEMPTS = 8


class LeaseError(StorageError):
    """A lease row that is not one (written by something else, or damaged)."""


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class Lease:
    """A lease as it was read or written: ``holder`` holds it with ``epoch`` until
    ``expires_ms`` (exclusive) by the clock of whoever looks. ``row`` is the row's exact
    bytes, which the next change compares against."""

    name: str
    holder: str
    epoch: int
    expires_ms: int
    ttl_ms: int
    row: bytes = field(default=b"", repr=False, compare=False)

    def held_at(self, now_ms: int) -> bool:
        """Still held (not expired, not released) at ``now_ms``."""
        return now_ms < self.expires_ms

    def act_until(self, margin_ms: int) -> int:
        """The holder's own deadline: stop acting as the holder from this time on (its
        clock), ``margin_ms`` before the lease ends (the module's notes on time)."""
        return self.expires_ms - margin_ms


def lease_key(name: str) -> bytes:
    if not isinstance(name, str) or not name:
        raise ValueError(f"a lease name is a non-empty string, not {name!r}")
    return LEASE + name.encode()


def encode_lease(holder: str, epoch: int, expires_ms: int, ttl_ms: int) -> bytes:
    return json.dumps(
        {"epoch": epoch, "expires_ms": expires_ms, "holder": holder, "ttl_ms": ttl_ms},
        sort_keys=True,
        separators=(",", ":"),
    ).encode()


def decode_lease(name: str, row: bytes) -> Lease:
    try:
        data = json.loads(row)
        holder, epoch = data["holder"], data["epoch"]
        expires_ms, ttl_ms = data["expires_ms"], data["ttl_ms"]
    except (ValueError, TypeError, KeyError) as exc:
        raise LeaseError(f"lease {name!r}: the row {row[:80]!r} is not a lease ({exc})") from exc
    ints = (epoch, expires_ms, ttl_ms)
    if (
        not isinstance(holder, str)
        or not all(type(v) is int for v in ints)
        or epoch < 1
        or ttl_ms < 1
    ):
        raise LeaseError(f"lease {name!r}: the row {row[:80]!r} is not a lease")
    return Lease(name, holder, epoch, expires_ms, ttl_ms, row)


class LeaseTable:
    """The leases of one store: ``backend`` is the store's backend (every engine has
    check_and_put), ``clock_ms`` this process's clock in epoch milliseconds."""

    def __init__(self, backend: Backend, clock_ms: Callable[[], int] = wall_clock_ms) -> None:
        self._backend = backend
        self._clock = clock_ms

    # --- reading ---------------------------------------------------------------------------
    def current(self, name: str) -> Lease | None:
        """The lease's row as it is (held or not: see ``Lease.held_at``), or None if the
        lease was never taken."""
        row = self._backend.get(lease_key(name))
        return None if row is None else decode_lease(name, row)

    def all(self, prefix: str = "") -> list[Lease]:
        """Every lease whose name starts with ``prefix``, in name (UTF-8 byte) order."""
        start = LEASE + prefix.encode()
        return [
            decode_lease(key[len(LEASE) :].decode(), row)
            for key, row in self._backend.scan(start, keys.prefix_end(start))
        ]

    # --- changing --------------------------------------------------------------------------
    def acquire(self, name: str, holder: str, ttl_ms: int) -> Lease | None:
        """Take the lease for ``ttl_ms`` if it is free (absent, expired, released), with
        a new epoch, or extend it if ``holder`` already holds it. None: someone else
        holds it, unexpired."""
        key = lease_key(name)
        _check_holder(holder)
        _check_ttl(ttl_ms)
        for _ in range(ACQUIRE_ATTEMPTS):
            now = self._clock()  # before reading: expiry judged late, our own ends early
            row = self._backend.get(key)
            current = None if row is None else decode_lease(name, row)
            if current is None:
                epoch = 1
            elif current.held_at(now):
                if current.holder != holder:
                    return None
                epoch = current.epoch  # ours already: extend
            else:
                epoch = current.epoch + 1
            new = encode_lease(holder, epoch, now + ttl_ms, ttl_ms)
            if self._backend.check_and_put(key, row, new):
                return Lease(name, holder, epoch, now + ttl_ms, ttl_ms, new)
        return None

    def renew(self, lease: Lease, ttl_ms: int | None = None) -> Lease | None:
        """Extend ``lease`` to now + ``ttl_ms`` (its own ttl by default) if it is still
        the holder's with the same epoch, that is if nobody took it since (even when it
        expired meanwhile: it was nobody else's); None once it is lost (taken over)."""
        ttl = lease.ttl_ms if ttl_ms is None else ttl_ms
        _check_ttl(ttl)
        now = self._clock()
        new = encode_lease(lease.holder, lease.epoch, now + ttl, ttl)
        if self._replace_ours(lease, new):
            return replace(lease, expires_ms=now + ttl, ttl_ms=ttl, row=new)
        return None

    def renew_many(self, leases: Sequence[Lease]) -> list[Lease | None]:
        """``renew(lease)`` for each (its own ttl), with one conditional write for all
        (Backend.check_and_put_many: one fsync where the store can, not one a lease). A
        lease whose row changed since it was read gets renew()'s second look."""
        now = self._clock()
        news = [encode_lease(x.holder, x.epoch, now + x.ttl_ms, x.ttl_ms) for x in leases]
        first = [i for i, x in enumerate(leases) if x.row]
        won = self._backend.check_and_put_many(
            [(lease_key(leases[i].name), leases[i].row, news[i]) for i in first]
        )
        out: list[Lease | None] = [None] * len(leases)
        for i, ok in zip(first, won, strict=True):
            if ok:
                x = leases[i]
                out[i] = replace(x, expires_ms=now + x.ttl_ms, row=news[i])
        for i, x in enumerate(leases):
            if out[i] is None:
                out[i] = self.renew(x)
        return out

    def release(self, lease: Lease) -> bool:
        """Hand the lease back: it expires now (same epoch; the next holder gets a new
        one). False if it was no longer the holder's."""
        now = self._clock()
        new = encode_lease(lease.holder, lease.epoch, min(now, lease.expires_ms), lease.ttl_ms)
        return self._replace_ours(lease, new)

    def next_number(self, name: str) -> int:
        """1, 2, 3, ...: a number nobody was given before from the counter ``name`` (kept
        as a lease row whose epoch is the count, so the same check-and-put guards it; it is
        never held). For handing out disjoint blocks, e.g. producer ids, across gateways."""
        key = lease_key(name)
        while True:  # a lost check_and_put: another took a number meanwhile; take the next
            row = self._backend.get(key)
            n = 1 if row is None else decode_lease(name, row).epoch + 1
            if self._backend.check_and_put(key, row, encode_lease("counter", n, 0, 1)):
                return n

    def shared_value(self, name: str, make: Callable[[], str]) -> str:
        """A value every process of this store reads alike, written once by the first to
        ask (``make()``; check-and-put against an absent row, so two first askers agree
        on one): kept as a lease row's holder, never held."""
        key = lease_key(name)
        while True:
            row = self._backend.get(key)
            if row is not None:
                return decode_lease(name, row).holder
            if self._backend.check_and_put(key, None, encode_lease(make(), 1, 0, 1)):
                continue  # read back what landed

    def _replace_ours(self, lease: Lease, new: bytes) -> bool:
        """Replace the lease's row with ``new`` if it is still ``lease``'s holder's with
        the same epoch: first against the row ``lease`` came from; if that changed, once
        against the row there now when that still names our holder and epoch (an earlier
        write of ours whose answer was lost, or a renew through another ``Lease`` copy)."""
        key = lease_key(lease.name)
        if lease.row and self._backend.check_and_put(key, lease.row, new):
            return True
        row = self._backend.get(key)
        if row is None:
            return False
        current = decode_lease(lease.name, row)
        if current.holder != lease.holder or current.epoch != lease.epoch:
            return False  # taken over
        return self._backend.check_and_put(key, row, new)


def _check_holder(holder: str) -> None:
    if not isinstance(holder, str) or not holder:
        raise ValueError(f"a lease holder is a non-empty string, not {holder!r}")


def _check_ttl(ttl_ms: int) -> None:
    if type(ttl_ms) is not int or ttl_ms < 1:
        raise ValueError(f"a lease ttl is a positive number of milliseconds, not {ttl_ms!r}")
