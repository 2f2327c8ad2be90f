"""The transaction manager of a store shared by several gateways (``--cluster``).

Tephra has one transaction manager, and so does a cluster of gateways: the gateway holding
the controller lease (gateway/cluster.py) runs the store's ``TransactionManager`` over the
transaction rows of the MetadataTable, and it alone hands out write pointers, commits,
aborts and invalidates. Every other gateway keeps a **view**: the last snapshot the
manager sent it (the read pointer, the in-progress list with expiries, the invalid list),
which is all its readers and its writes' checks need. The other gateways send their
transitions to the manager over the cluster's calls (gateway/cluster_calls.py).

``SharedTransactions`` is what ``Store.transactions`` is in a shared store: while this
process leads (``lead``, until a time by the store's clock) it answers from its manager,
otherwise from its view. The rules the issue sets, and how they hold:

- **A write pointer is never handed out twice and never goes back, across failovers.**
  The manager writes only before its lease's end less the margin (``_fenced``, checked on
  the store's writer right before each write, as a partition's leader does); the next
  leader takes the lease only after it expired by its own clock and then reads the rows
  (``lead``: a fresh manager, after ``Store.sync_clock``), so it starts above every
  pointer the last one made durable, and no pointer is used before it is durable. Write
  pointers also carry the time (Tephra's milliseconds times a million).
- **A stale snapshot only delays visibility; it never shows uncommitted data.** A view
  holds every pointer above its read pointer (unknown yet) and every one in its in-progress
  list; it accepts a pointer only when the manager's snapshot (one consistent copy, taken
  under the manager's lock) had it at or below its read pointer and in neither list, or
  when the manager said it committed (``ended``).
- **A new leader recovers the state from the store**: the manager is built from the rows;
  open transactions stay open with their timeouts, and the gateway's services then finish
  recorded commit decisions before anything expires (gateway/services.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from .errors import StorageError
from .transactions import (
    COMMITTED,
    IN_PROGRESS,
    INVALID,
    UNKNOWN,
    Transaction,
    TransactionManager,
    Visibility,
)

if TYPE_CHECKING:
    from .backend import Mutation
    from .tables import MetadataTable
    from .writer import Batch

# How many pointers a view remembers as committed above its read pointer (told by the
# manager's ``ended`` notices between two snapshots): the next snapshot covers them.
_REMEMBER_COMMITTED = 10_000


class NotTransactionLeader(StorageError):
    """A transition asked of a gateway that does not run the cluster's transaction
    manager now (it lost the controller lease, or never held it)."""

    def __init__(self, detail: str = "") -> None:
        super().__init__(
            "this gateway does not run the cluster's transaction manager now"
            + (f": {detail}" if detail else "")
        )


class SharedTransactions:
    """``Store.transactions`` of a shared store: the manager while leading, else a view.

    The queries (``is_in_progress``, ``visibility_now``, ``snapshot``, ...) are answered
    either way; the transitions (``start_queued``, ``commit_async``, ``decide``, ...) only
    while leading, NotTransactionLeader otherwise."""

    def __init__(
        self,
        metadata: MetadataTable,
        submit: Callable[[Callable[[Batch], Any]], Future[Any]],
        clock_ms: Callable[[], int],
        on_finish: Callable[[int], None] | None = None,
    ) -> None:
        self._metadata = metadata
        self._submit = submit
        self._clock = clock_ms
        self._on_finish = on_finish
        self._lock = threading.Lock()
        self._manager: TransactionManager | None = None
        self._until = 0  # leading until (store clock); 0: not leading
        # The view: the manager's last snapshot. Nothing known yet: every pointer held.
        self._read_pointer = 0
        self._in_progress: dict[int, int] = {}
        self._invalid: frozenset[int] = frozenset()
        self._committed_above: set[int] = set()  # told committed, above the read pointer
        self._may_expire = False

    # --- leadership --------------------------------------------------------------------------
    def lead(self, until_ms: int) -> bool:
        """Run the manager until ``until_ms``: on taking the lease, a manager read afresh
        from the rows (the caller synced the clock first); on a renewal, a later end.
        -> True when this call made this process the leader."""
        with self._lock:
            self._until = until_ms
            if self._manager is not None:
                return False
            self._may_expire = False  # until the caller finished what was recorded
            self._manager = TransactionManager(
                self._metadata, self._fenced, self._clock, on_finish=self._on_finish
            )
            return True

    def follow(self) -> None:
        """Stop running the manager (the lease was handed over or lost): from now on the
        view answers, starting from the manager's last state."""
        with self._lock:
            manager, self._manager, self._until = self._manager, None, 0
            if manager is not None:
                snap = manager.snapshot()
                self._read_pointer = snap.read_pointer
                self._in_progress = manager.in_progress()
                self._invalid = snap.invalid

    @property
    def leading(self) -> bool:
        return self._manager is not None and self._clock() < self._until

    def _fenced(self, mutations: list[Mutation], then: list[Mutation] | None = None) -> Future[Any]:
        """The manager's durable write, refused once the lease's time is up."""

        def op(batch: Batch) -> None:
            if not self._clock() < self._until:
                raise NotTransactionLeader("its lease ran out before the write")
            batch.mutations.extend(mutations)
            if then:
                batch.then.extend(then)

        return self._submit(op)

    def _leader(self) -> TransactionManager:
        manager = self._manager
        if manager is None or not self._clock() < self._until:
            raise NotTransactionLeader()
        return manager

    # --- the view (followers) ----------------------------------------------------------------
    def apply(self, snapshot: Transaction, expiries: dict[int, int]) -> None:
        """A snapshot from the manager (a follower refreshes its view with it). Pointers
        that left the in-progress list wake their readers (``on_finish``). An older
        snapshot than the view's is ignored: it only ever moves forward."""
        with self._lock:
            if self._manager is not None or snapshot.read_pointer < self._read_pointer:
                return
            ended = [wp for wp in self._in_progress if wp not in snapshot.in_progress]
            self._read_pointer = snapshot.read_pointer
            self._in_progress = {wp: expiries.get(wp, 0) for wp in snapshot.in_progress}
            self._invalid = snapshot.invalid
            self._committed_above = {w for w in self._committed_above if w > self._read_pointer}
        self._finished(ended)

    def ended(self, wp: int, committed: bool) -> None:
        """The manager says ``wp`` ended (a commit's notice to the partitions' leaders):
        its readers need not wait for the next snapshot."""
        with self._lock:
            if self._manager is not None:
                return
            self._in_progress.pop(wp, None)
            if committed:
                if wp > self._read_pointer and len(self._committed_above) < _REMEMBER_COMMITTED:
                    self._committed_above.add(wp)
            else:
                self._invalid = self._invalid | {wp}
        self._finished([wp])

    def _finished(self, wps: list[int]) -> None:
        if self._on_finish is not None:
            for wp in wps:
                self._on_finish(wp)

    def _view_holds(self, wp: int) -> bool:
        return wp in self._in_progress or (
            wp > self._read_pointer and wp not in self._committed_above
        )

    # --- queries (either way) ----------------------------------------------------------------
    def is_in_progress(self, wp: int) -> bool:
        manager = self._manager
        if manager is not None:
            return manager.is_in_progress(wp)
        return wp not in self._invalid and self._view_holds(wp)

    def is_decided(self, wp: int) -> bool:
        manager = self._manager
        return manager is not None and manager.is_decided(wp)

    def visibility_now(self, wp: int) -> Visibility:
        manager = self._manager
        if manager is not None:
            return manager.visibility_now(wp)
        if wp < 0 or wp in self._invalid:
            return Visibility.SKIP
        return Visibility.HOLD if self._view_holds(wp) else Visibility.ACCEPT

    def state(self, wp: int) -> str:
        manager = self._manager
        if manager is not None:
            return manager.state(wp)
        if wp in self._invalid:
            return INVALID
        if wp in self._in_progress:
            return IN_PROGRESS
        if wp in self._committed_above or 0 < wp <= self._read_pointer:
            return COMMITTED
        return UNKNOWN

    def snapshot(self) -> Transaction:
        manager = self._manager
        if manager is not None:
            return manager.snapshot()
        with self._lock:
            return Transaction(
                0, self._read_pointer, frozenset(self._in_progress), frozenset(self._invalid)
            )

    def in_progress(self) -> dict[int, int]:
        manager = self._manager
        if manager is not None:
            return manager.in_progress()
        with self._lock:
            return dict(self._in_progress)

    def invalid(self) -> list[int]:
        manager = self._manager
        if manager is not None:
            return manager.invalid()
        return sorted(self._invalid)

    @property
    def issued_high(self) -> int:
        manager = self._manager
        return manager.issued_high if manager is not None else self._read_pointer

    def reload(self, metadata: MetadataTable) -> None:
        """After a failed write: the manager reads its rows again (a view has none)."""
        manager = self._manager
        if manager is not None:
            manager.reload(metadata)

    # --- transitions (the leader only) -------------------------------------------------------
    def recovered(self) -> None:
        """The new leader's services finished the commits recorded before it took over
        (their decisions hold past any timeout): from now on timed-out transactions are
        invalidated (``expire``, by the janitor too)."""
        self._may_expire = True

    def expire(self) -> list[int]:
        if not (self.leading and self._may_expire):
            return []
        return self._leader().expire()

    def spoil(self, wp: int) -> None:
        manager = self._manager
        if manager is not None:
            manager.spoil(wp)

    def start_queued(
        self, timeout_s: float = 30.0, rows_of: Callable[[int], list[Mutation]] | None = None
    ) -> tuple[Transaction, Future[object]]:
        return self._leader().start_queued(timeout_s, rows_of)

    def start_async(self, timeout_s: float = 30.0) -> Future[Transaction]:
        return self._leader().start_async(timeout_s)

    def start(self, timeout_s: float = 30.0) -> Transaction:
        return self._leader().start(timeout_s)

    def commit_async(self, tx: Transaction | int) -> Future[None]:
        return self._leader().commit_async(tx)

    def commit(self, tx: Transaction | int) -> None:
        self._leader().commit(tx)

    def commit_decided(self, wp: int) -> tuple[list[Mutation], Callable[[Future[Any]], None]]:
        return self._leader().commit_decided(wp)

    def abort_async(self, tx: Transaction | int) -> Future[None]:
        return self._leader().abort_async(tx)

    def abort(self, tx: Transaction | int) -> None:
        self._leader().abort(tx)

    def invalidate_async(self, write_pointer: int) -> Future[bool]:
        return self._leader().invalidate_async(write_pointer)

    def invalidate(self, write_pointer: int) -> bool:
        return self._leader().invalidate(write_pointer)

    def decide(self, wp: int, *, recovering: bool = False) -> None:
        self._leader().decide(wp, recovering=recovering)
