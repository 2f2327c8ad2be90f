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

log = logging.getLogger(__name__)

MAX_OPS_PER_BATCH = 4096
# Failed batches are logged once with their cause, then counted: at most one line per
# this many seconds (a full disk used to log every failed batch).
FAILURE_LOG_INTERVAL_S = 10.0


class Batch:
    """What operations append to while the writer gathers one backend write."""

    __slots__ = ("after", "mutations")

    def __init__(self) -> None:
        self.mutations: list[Mutation] = []
        self.after: list[Callable[[], None]] = []  # run once the batch is durable


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
        self._on_failure = on_failure
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self.batches = 0
        self.operations = 0
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

    def mutate(self, mutations: list[Mutation]) -> Future[Any]:
        """Queue plain mutations (metadata, transaction state) for the next durable batch."""

        def op(batch: Batch) -> None:
            batch.mutations.extend(mutations)

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
        batch = Batch()
        done: list[tuple[Future[Any], Any]] = []
        for op, fut in pending:
            if not fut.set_running_or_notify_cancel():
                continue
            mark, after_mark = len(batch.mutations), len(batch.after)
            try:
                result = op(batch)
            except Exception as exc:  # the operation's own error goes back to its caller only
                del batch.mutations[mark:]
                del batch.after[after_mark:]
                if not isinstance(exc, StorageError):
                    log.exception("store operation failed unexpectedly")
                fut.set_exception(exc)
                continue
            done.append((fut, result))
        try:
            if batch.mutations:
                self._backend.write(batch.mutations, sync=True)
        except Exception as exc:
            self._log_failure(len(batch.mutations), exc)
            for fut, _ in done:
                fut.set_exception(exc)
            # Operations already moved in-memory state (offsets, timestamps) forward;
            # the store re-reads it from the backend so nothing unwritten is believed.
            self._on_failure()
            return
        self.batches += 1
        self.operations += len(done)
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
