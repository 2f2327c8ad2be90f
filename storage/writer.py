"""Group commit: one thread turns every queued write into one backend batch and one fsync.

Callers hand in an operation (a function that validates, then appends mutations to the
batch and returns its result) and get a future. The thread takes everything queued,
applies the operations in arrival order, writes the batch with sync, and only then
resolves the futures, so a result never leaves before its data is on disk. While one
fsync runs, new operations queue up and share the next one.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from .backend import Backend, Mutation
from .errors import StorageError, StoreClosed
from .intents import encode_intents

log = logging.getLogger(__name__)

MAX_OPS_PER_BATCH = 4096
# Failed batches are logged once with their cause, then counted: at most one line per
# this many seconds (a full disk used to log every failed batch).
FAILURE_LOG_INTERVAL_S = 10.0


class Batch:
    """What operations append to while the writer gathers one backend write.

    The backend writes a row atomically and nothing more (backend.py), so the rows go in
    phases, each durable before the next: ``first`` (what the commit rows count on being
    done: deletes before a reference), ``mutations`` (the commit rows), ``then`` (what
    follows from them: markers, producer state). A topic's appended rows are also
    described by an *intent* row written before them and deleted after ``then``: after a
    crash, an intent left behind says which rows may have landed in part and what they
    imply (``intents.py``). A backend that writes a whole batch atomically needs none of
    that, and gets all phases as one write without intents."""

    __slots__ = ("after", "derived", "first", "mutations", "ranges", "then", "track")

    def __init__(self, track_intents: bool = False) -> None:
        self.first: list[Mutation] = []
        self.mutations: list[Mutation] = []
        self.then: list[Mutation] = []
        self.after: list[Callable[[], None]] = []  # run once the batch is durable
        self.track = track_intents
        # (intent key, first row key, last row key, rows): rows this batch appends
        self.ranges: list[tuple[bytes, bytes, bytes, int]] = []
        self.derived: list[tuple[bytes, Mutation]] = []  # (intent key, what the rows imply)

    def appended(self, intent_key: bytes, first: bytes, last: bytes, rows: int) -> None:
        """Rows ``first`` .. ``last`` (``rows`` of them, all new keys) are in ``mutations``."""
        if self.track:
            self.ranges.append((intent_key, first, last, rows))

    def derive(self, intent_key: bytes, mutations: list[Mutation]) -> None:
        """Mutations that follow from rows appended under ``intent_key`` (written after
        them, and again after a crash if those rows all landed)."""
        if self.track:
            self.derived += [(intent_key, m) for m in mutations]
        else:
            self.then += mutations

    def mark(self) -> tuple[int, ...]:
        return tuple(
            len(x)
            for x in (self.first, self.mutations, self.then, self.after, self.ranges, self.derived)
        )

    def reset(self, mark: tuple[int, ...]) -> None:
        """Drop what one operation added since ``mark`` (it raised)."""
        for part, n in zip(
            (self.first, self.mutations, self.then, self.after, self.ranges, self.derived),
            mark,
            strict=True,
        ):
            del part[n:]

    def phases(self) -> list[list[Mutation]]:
        if not self.track:
            if not self.first and not self.then:
                return [self.mutations]  # the common batch: no copy
            return [self.first + self.mutations + self.then]
        intents = encode_intents(self.ranges, self.derived)
        derived = [m for _, m in self.derived]
        return [
            self.first + list(intents.items()),
            self.mutations,
            self.then + derived,
            [(key, None) for key in intents],
        ]

    @property
    def empty(self) -> bool:
        return not (self.first or self.mutations or self.then or self.derived)


Operation = Callable[[Batch], Any]
_STOP = object()


class Writer:
    def __init__(
        self,
        backend: Backend,
        on_failure: Callable[[], None],
        name: str = "tmsgate-writer",
    ) -> None:
        self._backend = backend
        # LevelDB writes a batch atomically: it needs no intents (see Batch).
        self._track_intents = not backend.atomic_batches
        self._on_failure = on_failure
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self.batches = 0
        self.operations = 0
        self.write_seconds = 0.0  # of successful batches: the backend's write, fsync included
        # Fault tests only (gateway/faults.py): called with each batch's mutations just
        # before they are written, on this thread; it may block (kill -9 there).
        self.before_write: Callable[[list[Mutation]], None] | None = None
        self.failed_batches = 0
        self._unlogged_failures = 0  # failed batches not logged yet
        self._last_failure_log = float("-inf")
        self._last_failure = ""

    def submit(self, op: Operation) -> Future[Any]:
        if self._closed:
            raise StoreClosed("the store is closed")
        fut: Future[Any] = Future()
        self._queue.put((op, fut))
        return fut

    def mutate(self, mutations: list[Mutation], then: list[Mutation] | None = None) -> Future[Any]:
        """Queue plain mutations (metadata, transaction state) for the next durable batch;
        ``then``: mutations that may land only once ``mutations`` all have."""

        def op(batch: Batch) -> None:
            batch.mutations.extend(mutations)
            if then:
                batch.then.extend(then)

        return self.submit(op)

    def close(self) -> None:
        """Finish everything queued so far, then stop the thread."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        self._thread.join()

    def _run(self) -> None:
        stopping = False
        while not stopping:
            item = self._queue.get()
            pending = []
            while True:
                if item is _STOP:
                    stopping = True
                else:
                    pending.append(item)
                if stopping or len(pending) >= MAX_OPS_PER_BATCH:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            if pending:
                self._commit(pending)

    def _commit(self, pending: list[tuple[Operation, Future[Any]]]) -> None:
        batch = Batch(self._track_intents)
        done: list[tuple[Future[Any], Any]] = []
        for op, fut in pending:
            if not fut.set_running_or_notify_cancel():
                continue
            mark = batch.mark()
            try:
                result = op(batch)
            except Exception as exc:  # the operation's own error goes back to its caller only
                batch.reset(mark)
                if not isinstance(exc, StorageError):
                    log.exception("store operation failed unexpectedly")
                fut.set_exception(exc)
                continue
            done.append((fut, result))
        started = time.perf_counter()
        try:
            if not batch.empty:
                phases = batch.phases()
                if self.before_write is not None:
                    self.before_write([m for phase in phases for m in phase])
                if len(phases) == 1:
                    self._backend.write(phases[0], sync=True)
                else:
                    self._backend.write_phases(phases, sync=True)
        except Exception as exc:
            self._log_failure(len(batch.mutations), exc)
            # Operations already moved in-memory state (offsets, timestamps) forward;
            # the store re-reads it from the backend so nothing unwritten is believed,
            # and settles any rows the failed write left in part: before the callers
            # hear of the failure, so that what they read next is settled.
            try:
                self._on_failure()
            except Exception:
                log.exception("re-reading the store after a failed write failed")
            for fut, _ in done:
                fut.set_exception(exc)
            return
        self.batches += 1
        self.operations += len(done)
        self.write_seconds += time.perf_counter() - started
        if self._unlogged_failures:
            self._log_failure(0, None)
        for action in batch.after:
            try:
                action()
            except Exception:
                log.exception("post-commit action failed")
        for fut, result in done:
            fut.set_result(result)

    def _log_failure(self, mutations: int, exc: BaseException | None) -> None:
        """The first failure after a quiet spell is logged with its cause; later ones are
        counted and summed up at most once per FAILURE_LOG_INTERVAL_S (also once writes
        work again, with exc None)."""
        if exc is not None:
            self.failed_batches += 1
            self._unlogged_failures += 1
            self._last_failure = str(exc)
        now = time.monotonic()
        if now - self._last_failure_log < FAILURE_LOG_INTERVAL_S:
            return
        if self._unlogged_failures == 1 and exc is not None:
            log.error("durable write of %d mutations failed: %s", mutations, exc)
        else:
            log.error(
                "durable writes failed since last report: %d (last: %s)%s",
                self._unlogged_failures,
                self._last_failure,
                "; writes succeed again" if exc is None else "",
            )
        self._unlogged_failures = 0
        self._last_failure_log = now
