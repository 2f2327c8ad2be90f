"""Retention: the seed's cleanup thread, for every engine.

Each pass expires timed-out transactions, then per topic deletes MessageTable rows older
than the topic's TTL (with their offset-index entries and the PayloadTable rows they
referred to), PayloadTable rows of invalid transactions past the TTL, and every row of
older (or deleted) generations. Before deleting a topic's newest rows it checkpoints the
topic's next offset and last timestamp, so offsets never restart after a topic empties.

The janitor is handed what it works with (``Housekeeping``, built by the Store), rather
than reaching into the Store: the backend to scan, the store's writer to delete through
(so deletes are ordered with every other write), the topics' writer state, the clock and
the transaction manager.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from . import keys, reader
from .backend import Backend, Mutation
from .errors import StorageError, TopicNotFound
from .ids import TopicId, TopicMetadata
from .tables import Tables
from .topics import TopicState
from .transactions import TransactionManager

log = logging.getLogger(__name__)
CHUNK = 10_000
# While writes are refused for a full disk, the value log is collected this often in the
# middle of a pass too: deleting a large topic frees its segments one by one, and the
# space is what the store is waiting for (the deletes themselves take LevelDB space).
FULL_DISK_COLLECT_S = 1.0
# ... and passes come at least this often: a segment deleted in one pass gives its space
# back in the next (its mapping is kept for scans that began before), and writes resume
# only once the space is back.
FULL_DISK_INTERVAL_S = 5.0


@dataclass(frozen=True, slots=True)
class Housekeeping:
    """What cleanup works with, handed over by the Store."""

    backend: Backend  # for collect_garbage; rows are read through ``tables``
    tables: Tables
    write: Callable[[list[Mutation]], Future[Any]]  # the store's writer: durable, in order
    topic_state: Callable[[TopicId], TopicState]  # TopicNotFound once deleted
    all_topics: Callable[[], list[TopicMetadata]]  # every generation, deleted ones too
    transactions: TransactionManager
    clock: Callable[[], int]
    writes_refused: Callable[[], bool]  # the disk is full (storage/space.py)
    # Store.delete_records: the log start moves up (retention.bytes), durably
    move_log_start: Callable[[TopicId, int], int] | None = None


class Janitor:
    """The cleanup thread: a retention pass every ``interval_s``, and a run of the
    compaction cleaner (``cleaner``) every ``cleaner.settings.backoff_ms``. One thread
    for both, so the cleaner's rewrites never race the janitor's deletes."""

    def __init__(self, house: Housekeeping, interval_s: float, cleaner: Any = None) -> None:
        self._house = house
        self._interval = interval_s
        self._cleaner = cleaner
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by stop() and clean_soon()
        self._clean_now = False
        self._thread = threading.Thread(target=self._run, name="tmsgate-janitor", daemon=True)
        self._thread.start()

    def _interval_s(self) -> float:
        if self._house.writes_refused():
            return min(self._interval, FULL_DISK_INTERVAL_S)
        return self._interval

    def _run(self) -> None:
        last_error, logged_at = "", 0.0
        now = time.monotonic()
        due = {"janitor": now + self._interval_s(), "cleaner": now}
        while True:
            wait = max(min(due.values()) - time.monotonic(), 0.0)
            self._wake.wait(wait)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                now = time.monotonic()
                if self._clean_now:
                    self._clean_now = False
                    due["cleaner"] = now
                if self._cleaner is not None and now >= due["cleaner"]:
                    due["cleaner"] = now + self._cleaner.settings.backoff_ms / 1000
                    stats = self._cleaner.run()
                    if any(stats.values()):
                        log.info("cleaner: %s", stats)
                if self._cleaner is None:
                    due["cleaner"] = float("inf")
                if now >= due["janitor"]:
                    due["janitor"] = now + self._interval_s()
                    stats = run_cleanup(self._house)
                    if any(stats.values()):
                        log.info("janitor: %s", stats)
                last_error = ""
            except StorageError as exc:
                # Typed (a full disk, LevelDB refusing writes): one line, and the same one
                # at most once a minute, not a traceback every pass.
                now = time.monotonic()
                if str(exc) != last_error or now - logged_at >= 60:
                    log.error("janitor pass failed: %s", exc)
                    last_error, logged_at = str(exc), now
            except Exception:
                log.exception("janitor pass failed")

    def clean_soon(self) -> None:
        """Run the cleaner now rather than at its next turn: a topic's compaction
        settings changed (the cleaner's backoff is for finding new work, not for this)."""
        self._clean_now = True
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._cleaner is not None:
            self._cleaner.stop()  # a long cleaning pass ends at its next pause
        self._thread.join()


def run_cleanup(house: Housekeeping) -> dict[str, int]:
    stats = {"expired_transactions": len(house.transactions.expire()), "rows_deleted": 0}
    for md in house.all_topics():
        try:
            stats["rows_deleted"] += _clean_topic(house, md)
        except TopicNotFound:
            continue  # deleted during the pass; the next pass removes its rows
    stats.update(house.backend.collect_garbage())
    return stats


def _clean_topic(house: Housekeeping, md: TopicMetadata) -> int:
    # Only generations at or below the one read here: the topic may have been deleted and
    # re-created since, and a newer generation's rows must not be touched.
    deleted = _delete_keys(house, house.tables.old_generation_keys(md.topic, md.generation))
    if md.generation > 0:
        deleted += _forget_finished_tx_rows(house, md)
        _retain_bytes(house, md)
        deleted += _truncate(house, md)
        if md.ttl_ms is not None:
            deleted += _expire(house, md)
    return deleted


RETENTION_BYTES = "retention.bytes"


def _retain_bytes(house: Housekeeping, md: TopicMetadata) -> None:
    """Kafka's retention.bytes, on a topic whose cleanup.policy deletes: the oldest rows
    go while the rest still hold at least that many bytes (Kafka deletes whole segments
    the same way). The log start moves past them; _truncate deletes them."""
    raw = md.properties.get(RETENTION_BYTES)
    if raw is None or house.move_log_start is None:
        return
    try:
        limit = int(raw)
    except ValueError:
        return
    policy = md.properties.get("cleanup.policy", "delete")
    if limit < 0 or "delete" not in policy.split(","):
        return
    st = house.topic_state(md.topic)
    if st.metadata.generation != md.generation:
        return
    rows = [  # heads and sizes only: the messages are not read (Backend.scan_heads)
        (keys.ROW_HEAD.unpack_from(head)[1:], size)
        for _, head, size in house.tables.messages.topic_row_heads(st)
    ]
    total = sum(size for _, size in rows)
    start = st.start_offset
    for (base, count), size in rows:
        if total - size < limit or base + count > st.visible_offset:
            break
        total -= size
        start = max(start, base + count)
    if start > st.start_offset:
        house.move_log_start(md.topic, start)


def _truncate(house: Housekeeping, md: TopicMetadata) -> int:
    """Delete the rows wholly below the log start that delete_records set."""
    st = house.topic_state(md.topic)
    start = st.start_offset
    if start <= 0 or st.metadata.generation != md.generation:
        return 0
    if start >= st.next_offset:  # every row goes: keep where offsets and time stand
        _checkpoint(house, st)

    def doomed() -> Iterator[bytes]:
        for key, value in house.tables.messages.topic_rows(st):
            _, base, count = keys.ROW_HEAD.unpack_from(value)
            if base + count > start:
                return
            yield from _row_and_payloads(house, st, key, value)

    return _delete_keys(house, doomed())


def _checkpoint(house: Housekeeping, st: TopicState) -> None:
    checkpoint = {
        "generation": st.metadata.generation,
        "next_offset": st.next_offset,
        "last_ts": st.last_ts,
        "last_seq": st.last_seq,
    }
    house.write([(keys.checkpoint_key(st.topic), json.dumps(checkpoint).encode())]).result()


def _row_and_payloads(
    house: Housekeeping, st: TopicState, key: bytes, value: bytes
) -> Iterator[bytes]:
    """A MessageTable row's key, after the PayloadTable rows it refers to."""
    flags, _, _, wp, *_ = keys.decode_row(value)
    if wp is not None and not flags & (keys.F_PAYLOAD | keys.F_NULL):
        yield from house.tables.payloads.row_keys(st, abs(wp))
        yield st.referenced_prefix + keys.U64.pack(abs(wp))
    yield key


def _forget_finished_tx_rows(house: Housekeeping, md: TopicMetadata) -> int:
    """Markers of transactional rows whose transaction has ended are no longer needed."""
    st = house.topic_state(md.topic)
    markers = house.tables.metadata.open_tx_markers(st)
    in_progress = house.transactions.is_in_progress
    return _delete_keys(house, (k for k, wp, _ in markers if not in_progress(wp)))


def _expire(house: Housekeeping, md: TopicMetadata) -> int:
    messages, payloads = house.tables.messages, house.tables.payloads
    st = house.topic_state(md.topic)
    if st.metadata.generation != md.generation:
        return 0  # re-created meanwhile: the next pass sees the new generation
    md = st.metadata  # the latest properties (ttl)
    if md.ttl_ms is None:
        return 0
    # Not the TTL floor itself: the log start, which moves in steps (reader.log_start_ms).
    # Rows between the two are already unreadable, but the earliest offset still names
    # the first of them, and a fetch there must find its place.
    cutoff = reader.log_start_ms(md.ttl_ms, house.clock())
    if cutoff <= 0:
        return 0
    stop = st.msg_prefix + keys.MESSAGE_SUFFIX.pack(cutoff, 0)
    if next(messages.topic_rows(st, stop), None) is None:
        # Every row is expiring: remember where offsets and time stand before they go.
        _checkpoint(house, st)

    def doomed() -> Iterator[bytes]:
        for key, value in messages.rows(st.msg_prefix, stop):
            yield from _row_and_payloads(house, st, key, value)
        # Payloads of invalid transactions that were never published are garbage once past
        # the TTL; published ones go with their MessageTable row above.
        for wp in house.transactions.invalid():
            if house.tables.metadata.is_published(st, wp):
                continue
            skip = len(payloads.prefix(st, wp))
            for k in payloads.row_keys(st, wp):
                if keys.PAYLOAD_ROW.unpack_from(k, skip)[0] < cutoff:
                    yield k

    return _delete_keys(house, doomed())


def _delete_keys(house: Housekeeping, found: Iterator[bytes]) -> int:
    # Through the writer, so a delete is ordered with every other write: a rollback that
    # rewrites a row cannot put back a row deleted here, nor lose a delete to a race.
    n = 0
    chunk: list[Mutation] = []
    collected = time.monotonic()
    for key in found:
        chunk.append((key, None))
        if len(chunk) >= CHUNK:
            house.write(chunk).result()
            n += len(chunk)
            chunk = []
            if house.writes_refused() and time.monotonic() - collected >= FULL_DISK_COLLECT_S:
                house.backend.collect_garbage()
                collected = time.monotonic()
    if chunk:
        house.write(chunk).result()
        n += len(chunk)
    return n
