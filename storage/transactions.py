"""Tephra-style transactions: write pointers from time, snapshots, in-progress and invalid.

The manager is a separate component with durable state of its own; non-transactional
publishing and reading never call it. Its state changes are persisted through the
store's writer (``persist``), so they are fsynced and ordered with publishes.
"""

from __future__ import annotations

import enum
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from . import keys
from .errors import TransactionNotInProgress
from .keys import U64

if TYPE_CHECKING:
    from .backend import Mutation
    from .tables import MetadataTable

T = TypeVar("T")
# Tephra: write pointers are milliseconds times a million, so they carry their start time.
TX_PER_MS = 1_000_000
_LAST_WP = keys.TX_LAST_WP
_IN_PROGRESS = keys.TX_IN_PROGRESS
_INVALID = keys.TX_INVALID
# How many ended transactions are remembered by how they ended (in memory only), so that
# state() can tell "aborted" from "invalid" and a commit's double from an unknown pointer.
_REMEMBER_ENDED = 100_000

IN_PROGRESS = "in_progress"
COMMITTED = "committed"
ABORTED = "aborted"
INVALID = "invalid"
UNKNOWN = "unknown"
# In progress, but a store of its records failed (spoil()): it can no longer commit.
INCOMPLETE = "incomplete"


class Visibility(enum.Enum):
    ACCEPT = "accept"
    SKIP = "skip"
    HOLD = "hold"


@dataclass(frozen=True, slots=True)
class Transaction:
    """A snapshot. ``write_pointer`` is 0 for a read-only snapshot."""

    write_pointer: int
    read_pointer: int
    in_progress: frozenset[int]
    invalid: frozenset[int]

    def visibility(self, entry_wp: int) -> Visibility:
        """How a transactional reader treats a MessageTable entry with this t column."""
        if entry_wp < 0:
            return Visibility.SKIP  # rolled back
        if entry_wp == self.write_pointer:
            return Visibility.ACCEPT
        if entry_wp in self.invalid:
            return Visibility.SKIP
        if entry_wp > self.read_pointer or entry_wp in self.in_progress:
            return Visibility.HOLD
        return Visibility.ACCEPT


class TransactionManager:
    def __init__(
        self,
        metadata: MetadataTable,
        persist: Callable[..., Future[object]],
        clock_ms: Callable[[], int],
        on_finish: Callable[[int], None] | None = None,
    ) -> None:
        # persist(mutations, then=None) queues a durable write (``then`` landing only after
        # all of ``mutations``) and returns its future. It is called under the
        # lock so writes reach the disk in the order of the transitions, and awaited after
        # releasing it so that concurrent transitions share one fsync.
        self._persist = persist
        self._clock = clock_ms
        self._on_finish = on_finish
        self._lock = threading.Lock()
        self._last_wp = 0
        # The highest write pointer this process has handed out or loaded: unlike
        # _last_wp, never lowered by a reload (see issued_high).
        self._issued_high = 0
        self._in_progress: dict[int, int] = {}  # write pointer -> expiry (epoch ms)
        self._invalid: set[int] = set()
        self._committing: set[int] = set()  # commit written, fsync not yet done
        # Commit decided (a Kafka transaction's commit record is durable): such a
        # transaction no longer times out and cannot be aborted, only committed.
        self._decided: set[int] = set()
        # A store under it failed before its commit was decided (spoil): decide() refuses.
        self._spoiled: set[int] = set()
        self._ended: OrderedDict[int, str] = OrderedDict()  # recent: write pointer -> how
        self.reload(metadata)

    def reload(self, metadata: MetadataTable) -> None:
        with self._lock:
            self._last_wp, self._in_progress, self._invalid = metadata.transaction_state()
            # A write that landed in part (the backend is atomic per row only): invalid
            # was written before in-progress was deleted, so invalid wins; and the last
            # pointer is never below one in use, or a restart could hand it out again.
            for wp in self._invalid:
                self._in_progress.pop(wp, None)
            self._last_wp = max(self._last_wp, *self._in_progress, *self._invalid, 0)
            self._issued_high = max(self._issued_high, self._last_wp)
            self._spoiled &= self._in_progress.keys()

    @property
    def issued_high(self) -> int:
        """No write pointer above this was handed out yet, in this process or before it
        (the store keeps the last one durable before any row of it can land), so nothing
        of a later one is on disk unless this process wrote it."""
        return self._issued_high

    # --- transitions ----------------------------------------------------------------------
    # Each has a blocking form and an ``_async`` one returning a Future that resolves once
    # the transition is durable: the HTTP service awaits those from the event loop without
    # holding a thread per call (the follow-up runs on the writer thread).
    def start(self, timeout_s: float = 30.0) -> Transaction:
        self.expire()
        return self.start_async(timeout_s).result()

    def start_async(self, timeout_s: float = 30.0) -> Future[Transaction]:
        """Like start(), without expiring others first (commit checks its own timeout)."""
        tx, durable = self.start_queued(timeout_s)
        return _then(durable, lambda: tx)

    def start_queued(
        self,
        timeout_s: float = 30.0,
        rows_of: Callable[[int], list[Mutation]] | None = None,
    ) -> tuple[Transaction, Future[object]]:
        """Start a transaction; -> it at once, and the future of its durable write, which
        carries ``rows_of(write pointer)``'s rows too (a Kafka transaction's record, which
        names it). The transaction may be used only once the future resolved."""
        with self._lock:
            now = self._clock()
            wp = max(self._last_wp + 1, now * TX_PER_MS)
            expiry = now + int(timeout_s * 1000)
            extra = rows_of(wp) if rows_of is not None else []  # may raise: nothing changed
            tx = Transaction(
                wp, self._last_wp, frozenset(self._in_progress), frozenset(self._invalid)
            )
            self._last_wp = self._issued_high = wp
            self._in_progress[wp] = expiry
            # The last pointer before the transaction (``then``): were only the transaction
            # to land, a restart after its commit would hand its pointer out again.
            done = self._persist(
                [(_LAST_WP, U64.pack(wp)), *extra],
                then=[(_IN_PROGRESS + U64.pack(wp), U64.pack(expiry))],
            )
        return tx, done

    def commit(self, tx: Transaction | int) -> None:
        self.commit_async(tx).result()

    def commit_async(self, tx: Transaction | int) -> Future[None]:
        wp = _wp(tx)
        with self._lock:
            if wp not in self._in_progress or wp in self._committing:
                raise TransactionNotInProgress(wp, self._state_locked(wp))
            if self._in_progress[wp] < self._clock() and wp not in self._decided:
                # Timed out, whether or not expire() has run since: too late to commit.
                timed_out = self._invalidate_locked(wp)
                return _then(timed_out, lambda: self._timed_out(wp))
            self._committing.add(wp)
            done = self._persist([], then=self._commit_rows(wp))
        return _then(done, lambda: self._committed(wp), lambda: self._commit_failed(wp))

    def commit_decided(self, wp: int) -> tuple[list[Mutation], Callable[[Future[Any]], None]]:
        """Commit a decided transaction (decide()) as part of a larger write that its
        caller queues (Store.commit_sealed_async: a Kafka transaction's decision, its
        references and this commit in one fsync). -> the rows that commit it, for the
        write's last phase, and the callback for that write's future, which makes it
        committed in memory once the write is durable (or lets it be retried if not).
        TransactionNotInProgress unless decided and not already being committed."""
        with self._lock:
            if wp not in self._decided or wp in self._committing:
                raise TransactionNotInProgress(wp, self._state_locked(wp))
            self._committing.add(wp)

        def landed(done: Future[Any]) -> None:
            if done.exception() is None:
                self._committed(wp)
            else:
                self._commit_failed(wp)

        return self._commit_rows(wp), landed

    @staticmethod
    def _commit_rows(wp: int) -> list[Mutation]:
        # In the phase where start puts the row (``then``): were a start and its commit
        # ever in one batch, the delete must land after the put, not before it.
        return [(_IN_PROGRESS + U64.pack(wp), None)]

    def _committed(self, wp: int) -> None:
        # Visible as committed only now that the commit is on disk: a snapshot taken
        # while the fsync ran still saw it in progress.
        with self._lock:
            self._committing.discard(wp)
            self._decided.discard(wp)
            self._spoiled.discard(wp)
            self._in_progress.pop(wp, None)
            self._remember(wp, COMMITTED)
        self._finished(wp)

    def _commit_failed(self, wp: int) -> None:
        with self._lock:
            self._committing.discard(wp)

    def _timed_out(self, wp: int) -> None:
        self._finished(wp)
        raise TransactionNotInProgress(wp, INVALID)

    def abort(self, tx: Transaction | int) -> None:
        self.abort_async(tx).result()

    def abort_async(self, tx: Transaction | int) -> Future[None]:
        """End a transaction without committing. Its entries stay invisible to transactional
        readers for good: the write pointer joins the invalid list (whether or not the client
        rolled its messages back), because an entry whose pointer is neither in progress nor
        invalid would read as committed."""
        wp = _wp(tx)
        with self._lock:
            if wp not in self._in_progress or wp in self._committing or wp in self._decided:
                raise TransactionNotInProgress(wp, self._state_locked(wp))
            done = self._invalidate_locked(wp)
            self._remember(wp, ABORTED)
        return _then(done, lambda: self._finished(wp))

    def invalidate(self, write_pointer: int) -> bool:
        """Move an in-progress transaction to the invalid list; False (and nothing changes)
        if it is not in progress, as in Tephra: a committed transaction stays committed."""
        return self.invalidate_async(write_pointer).result()

    def invalidate_async(self, write_pointer: int) -> Future[bool]:
        with self._lock:
            if write_pointer not in self._in_progress or write_pointer in self._decided:
                done: Future[bool] = Future()
                done.set_result(False)
                return done
            invalidated = self._invalidate_locked(write_pointer)

        def finished() -> bool:
            self._finished(write_pointer)
            return True

        return _then(invalidated, finished)

    def _invalidate_locked(self, wp: int) -> Future[object]:
        self._in_progress.pop(wp, None)
        self._spoiled.discard(wp)
        self._invalid.add(wp)
        self._remember(wp, INVALID)
        # Invalid first, then no longer in progress: in the other order, a crash between
        # the two rows would leave the pointer in neither list, which reads as committed.
        return self._persist(
            [(_INVALID + U64.pack(wp), b"")], then=[(_IN_PROGRESS + U64.pack(wp), None)]
        )

    def expire(self) -> list[int]:
        """Invalidate every in-progress transaction past its timeout."""
        now = self._clock()
        with self._lock:
            expired = [
                wp
                for wp, expiry in self._in_progress.items()
                if expiry < now and wp not in self._decided
            ]
            pending = [self._invalidate_locked(wp) for wp in expired]
        for done in pending:
            done.result()
        for wp in expired:
            self._finished(wp)
        return expired

    def decide(self, wp: int, *, recovering: bool = False) -> None:
        """Mark an in-progress transaction as decided to commit: from now on it neither
        times out nor can be aborted or invalidated, only committed (commit_async, which
        then ignores its timeout). Called before a commit record is written (a Kafka
        transaction's commit, recorded and applied in steps); in memory only, so that
        recovery calls it again (``recovering``: even past the timeout, since the
        decision is already durable). Raises TransactionNotInProgress otherwise, with
        state INCOMPLETE if a store of its records failed (spoil)."""
        with self._lock:
            if wp not in self._in_progress or wp in self._committing:
                raise TransactionNotInProgress(wp, self._state_locked(wp))
            if wp in self._spoiled:
                raise TransactionNotInProgress(wp, INCOMPLETE)
            if not recovering and wp not in self._decided and self._in_progress[wp] < self._clock():
                raise TransactionNotInProgress(wp, INVALID)  # timed out: too late
            self._decided.add(wp)

    def spoil(self, wp: int) -> None:
        """A store of records under ``wp`` failed: the transaction may no longer be
        decided (decide() refuses, so it can only be aborted). For callers told of their
        stores' success only after answering their client (a Kafka transaction's Produce):
        called on the writer thread as the store fails, so before any later write of the
        writer decides. No effect once decided: a store after the decision was refused
        and is not part of the commit."""
        with self._lock:
            if wp in self._in_progress and wp not in self._decided:
                self._spoiled.add(wp)

    def _finished(self, wp: int) -> None:
        if self._on_finish is not None:
            self._on_finish(wp)

    def _remember(self, wp: int, how: str) -> None:
        self._ended[wp] = how
        if len(self._ended) > _REMEMBER_ENDED:
            self._ended.popitem(last=False)

    # --- queries --------------------------------------------------------------------------
    def state(self, wp: int) -> str:
        """in_progress, committed, aborted, invalid (timed out or invalidated) or unknown.

        What Tephra's visibility rule implies where nothing better is remembered: a pointer
        no later than the last one issued, neither in progress nor invalid, reads as
        committed (how it ended is remembered for the last 100,000 ended transactions
        only, and not across restarts); a later pointer is unknown."""
        with self._lock:
            return self._state_locked(wp)

    def _state_locked(self, wp: int) -> str:
        if wp in self._in_progress:
            return COMMITTED if wp in self._committing else IN_PROGRESS
        how = self._ended.get(wp)
        if wp in self._invalid:
            return ABORTED if how == ABORTED else INVALID
        if how is not None:
            return how
        return COMMITTED if 0 < wp <= self._last_wp else UNKNOWN

    def snapshot(self) -> Transaction:
        """A fresh read-only view: everything committed so far is visible."""
        with self._lock:
            return Transaction(
                0, self._last_wp, frozenset(self._in_progress), frozenset(self._invalid)
            )

    def is_in_progress(self, wp: int) -> bool:
        return wp in self._in_progress

    def is_decided(self, wp: int) -> bool:
        """Its commit was decided (decide()): it takes no more writes, only the commit."""
        return wp in self._decided

    def visibility_now(self, wp: int) -> Visibility:
        """How an entry with this write pointer reads right now (no snapshot): held while
        in progress, skipped once invalid or rolled back, accepted once committed."""
        if wp < 0 or wp in self._invalid:
            return Visibility.SKIP
        return Visibility.HOLD if wp in self._in_progress else Visibility.ACCEPT

    def in_progress(self) -> dict[int, int]:
        with self._lock:
            return dict(self._in_progress)

    def invalid(self) -> list[int]:
        with self._lock:
            return sorted(self._invalid)


def _then(
    done: Future[object],
    after: Callable[[], T],
    failed: Callable[[], None] | None = None,
) -> Future[T]:
    """A future for ``after()``'s result once ``done`` succeeded (``done``'s exception,
    after ``failed()``, otherwise). ``after`` may raise: its exception is the result."""
    out: Future[T] = Future()

    def finish(d: Future[object]) -> None:
        exc = d.exception()
        try:
            if exc is not None:
                if failed is not None:
                    failed()
                out.set_exception(exc)
                return
            out.set_result(after())
        except BaseException as err:  # after() refused (a timed-out commit)
            out.set_exception(err)

    done.add_done_callback(finish)
    return out


def _wp(tx: Transaction | int) -> int:
    return tx if isinstance(tx, int) else tx.write_pointer


# --- the transaction codec -----------------------------------------------------------------
# What the HTTP API hands out as a transaction's ``encoded`` bytes and takes back as a
# poll's ``transaction`` (the seed's TransactionCodec), documented in docs/http-api.md:
#   version 0x01, write_pointer i64, read_pointer i64,
#   n_in_progress u32, n_in_progress x i64, n_invalid u32, n_invalid x i64   (big-endian)
CODEC_VERSION = 1
_HEAD = struct.Struct(">bqqI")
_COUNT = struct.Struct(">I")


def encode_transaction(tx: Transaction) -> bytes:
    in_progress = sorted(tx.in_progress)
    invalid = sorted(tx.invalid)
    return b"".join(
        (
            _HEAD.pack(CODEC_VERSION, tx.write_pointer, tx.read_pointer, len(in_progress)),
            struct.pack(f">{len(in_progress)}q", *in_progress),
            _COUNT.pack(len(invalid)),
            struct.pack(f">{len(invalid)}q", *invalid),
        )
    )


def decode_transaction(raw: bytes) -> Transaction:
    """The inverse of encode_transaction; ValueError saying what is wrong otherwise."""
    if len(raw) < _HEAD.size:
        raise ValueError(f"an encoded transaction has at least {_HEAD.size} bytes, got {len(raw)}")
    version, wp, rp, n_in = _HEAD.unpack_from(raw)
    if version != CODEC_VERSION:
        raise ValueError(f"unknown transaction codec version {version} (expected 1)")
    pos = _HEAD.size
    end = pos + 8 * n_in + _COUNT.size
    if len(raw) < end:
        raise ValueError("encoded transaction is cut short in its in-progress list")
    in_progress = struct.unpack_from(f">{n_in}q", raw, pos)
    (n_inv,) = _COUNT.unpack_from(raw, end - _COUNT.size)
    if len(raw) != end + 8 * n_inv:
        raise ValueError(
            f"encoded transaction has {len(raw)} bytes; its lists say {end + 8 * n_inv}"
        )
    invalid = struct.unpack_from(f">{n_inv}q", raw, end)
    if wp < 0 or rp < 0:
        raise ValueError("an encoded transaction's pointers cannot be negative")
    return Transaction(wp, rp, frozenset(in_progress), frozenset(invalid))
