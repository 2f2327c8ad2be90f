"""Fetch read-ahead: the next chunk of a partition a consumer reads from the store, read
and encoded while the consumer takes the current one.

Kafka answers a fetch of old data from the page cache with sendfile; the gateway reads
rows and encodes record batches (docs/benchmarks.md: several us of CPU per 1 KiB record),
and the Java client (so every Spark Kafka task) fetches a partition again only once it has
taken the records it has, so client and gateway took turns: each fetch waited for its
whole read. With read-ahead, a fetch that ends well behind the head schedules the read of
the offsets after it on a thread of its own; the consumer's next fetch takes that chunk
(or waits for the read in progress, rather than reading the same rows twice).

A chunk is kept here, for the one fetch that takes it, not in the batch cache: the cache
would keep every chunk read (hundreds of MB for one pass over old data), and on this VM
backing fresh memory cost more than reading the rows (83k page faults per 300k records).

Only settled reads are kept (storage ReadResult.settled: plain messages, which read back
the same until the topic's TTL removes them) of CreateTime topics; where a read finds
transactional records, no read-ahead is tried again below the offset it reached. A
consumer near the head reads produced batches from the batch cache; read-ahead starts
only further back than AHEAD_MIN_LAG offsets.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from tmsgate.storage import StorageError, Store, TopicId

from .batch_cache import BatchCache
from .metrics import Metrics
from .records import encode_rows, messages_in

log = logging.getLogger("tmsgate.kafka.readahead")

AHEAD_MIN_LAG = 256  # offsets behind the end below which a consumer reads produced batches
MAX_IN_FLIGHT = 8  # reads queued or running at once, over all partitions
MAX_READY = 16  # chunks read and not yet taken (the oldest go first)
MAX_UNSETTLED = 10_000  # topics remembered as having transactional records ahead
MAX_CHUNK_BYTES = 4 << 20  # a fetch asking for more reads the rest itself: memory stays bounded
WAIT_S = 5.0  # a fetch waits at most this long for a read-ahead of its offset
MAX_MESSAGES = 50_000
Chunks = list[bytes | bytearray | memoryview]  # record batches to send one after another


class ReadAhead:
    """Owned by the broker (one per gateway); thread-safe."""

    def __init__(self, store: Store, cache: BatchCache, metrics: Metrics) -> None:
        self._store = store
        self._cache = cache
        self._metrics = metrics
        # One thread: the reads hold the GIL while they encode, so more would not finish
        # sooner; they would only take more turns from the event loop.
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="tmsgate-readahead")
        self._lock = threading.Lock()
        self._in_flight: dict[tuple[bytes, int], Future[None]] = {}
        # (topic uuid, offset) -> (its chunks, the offset after them, messages in them)
        self._ready: dict[tuple[bytes, int], tuple[Chunks, int, int]] = {}
        # topic uuid -> the offset a read ahead found unsettled rows below (transactional
        # records): no read-ahead there again, where it would only be thrown away
        self._unsettled: dict[bytes, int] = {}
        self._closed = False

    def after(
        self,
        tid: TopicId,
        uuid: bytes,
        offset: int,
        end: int,
        max_bytes: int,
        log_append_time: bool,
    ) -> None:
        """A fetch of ``tid`` ended at ``offset`` with ``end`` ahead (its limit: the high
        watermark, or a read_committed reader's last stable offset): read from ``offset``
        now unless it is cached, being read, near the end, or where a read ahead found
        transactional records before. Never blocks: callable from the event loop."""
        if end - offset < AHEAD_MIN_LAG or log_append_time:
            return
        if offset < self._unsettled.get(uuid, -1) or self._cache.covers(uuid, offset):
            return
        key = (uuid, offset)
        with self._lock:
            if self._closed or key in self._in_flight or key in self._ready:
                return
            if len(self._in_flight) >= MAX_IN_FLIGHT:
                return
            size = min(max_bytes, MAX_CHUNK_BYTES)
            fut = self._executor.submit(self._read, tid, uuid, offset, size)
            self._in_flight[key] = fut
        fut.add_done_callback(lambda _f: self._forget(key))

    def ready(self, uuid: bytes, offset: int) -> bool:
        """Whether a chunk from ``offset`` waits to be taken (cheap; take() may decline)."""
        return (uuid, offset) in self._ready

    def take(
        self, uuid: bytes, offset: int, limit: int, wait: bool
    ) -> tuple[Chunks, int, int] | None:
        """What was read ahead from ``offset``: (its chunks, the offset after them,
        messages), or None.
        ``wait`` (an executor thread, never the loop): first wait for a read of it still
        in progress. A chunk reaching ``limit`` (a read_committed fetch's last stable
        offset) is not for this fetch."""
        key = (uuid, offset)
        fut = self._in_flight.get(key) if wait else None
        if fut is not None:
            try:
                fut.result(timeout=WAIT_S)
            except FutureTimeout:
                log.warning("read-ahead of offset %d still running after %.0f s", offset, WAIT_S)
            except Exception:  # cancelled at shutdown (_read logs its own failures)
                pass
        with self._lock:
            got = self._ready.get(key)
            if got is None or got[1] > limit:
                return None
            del self._ready[key]
        return got

    def _forget(self, key: tuple[bytes, int]) -> None:
        with self._lock:
            self._in_flight.pop(key, None)

    def _read(self, tid: TopicId, uuid: bytes, offset: int, max_bytes: int) -> None:
        try:
            self._read_chunk(tid, uuid, offset, max_bytes)
        except Exception:  # the consumer's own fetch reads these offsets; it goes on
            log.exception("read-ahead of %s at %d failed unexpectedly", tid, offset)

    def _read_chunk(self, tid: TopicId, uuid: bytes, offset: int, max_bytes: int) -> None:
        try:
            res = self._store.read(
                tid,
                offset=offset,
                max_messages=min(MAX_MESSAGES, max(1, max_bytes // 16)),
                max_bytes=max_bytes,
                kafka_batches=True,
            )
        except StorageError as exc:
            # The consumer's own fetch of these offsets reads them again and reports it.
            log.debug("read-ahead of %s at %d failed: %s", tid, offset, exc)
            return
        if not res.rows or not res.settled:
            with self._lock:
                if len(self._unsettled) >= MAX_UNSETTLED:
                    self._unsettled.clear()
                self._unsettled[uuid] = max(res.next_offset, offset + 1)
            return
        chunks = encode_rows(res.rows, offset, res.next_offset, False)
        count = messages_in(res.rows)
        with self._lock:
            while len(self._ready) >= MAX_READY:  # never taken: the oldest go
                del self._ready[next(iter(self._ready))]
            self._ready[(uuid, offset)] = (chunks, res.next_offset, count)
        self._metrics.readahead_messages.inc(count)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._executor.shutdown(wait=True, cancel_futures=True)
