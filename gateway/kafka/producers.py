"""Idempotent producer state: producer ids, epochs and the last five batches per topic.

Mirrors Kafka's ProducerStateManager. A batch is accepted when its first sequence
follows the last one written for (producer, topic); a retry of one of the last five
batches is answered with its original offsets and not written again; anything else
is OUT_OF_ORDER_SEQUENCE_NUMBER (or UNKNOWN_PRODUCER_ID for a producer with no state
and a sequence above 0).

The state is persisted through publish_async(state=...), in the same atomic batch
as the records, so a crash can never keep the data but lose the sequence (which
would let a retry write it twice). The state is a callable the store runs once it
has assigned the base offset, so the persisted copy of every batch has its real
offset and a retry after a restart is answered with its original offsets. Those
callables run on the store's writer thread, in submission order; the persisted view
they build (``_persisted``) is touched only there.
"""

from __future__ import annotations

import asyncio
import struct
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tmsgate.protocol import ErrorCode, ProducedBatch
from tmsgate.storage import PublishResult, StateConflict, TopicId

if TYPE_CHECKING:
    from tmsgate.storage import Store

    from ..cluster import Cluster
    from .store_futures import Blocking
    from .topics import TopicInfo

STATE_AREA = "kafka.producer"
ID_AREA = "kafka.producer-id"
ID_KEY = "next"
ID_BLOCK = 1000
# Several gateways take blocks from one counter (gateway/cluster.py), above every id a
# single gateway handed out before (its blocks count up from 0).
CLUSTER_ID_BASE = 1 << 40
KEEP_BATCHES = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN
MAX_CACHED = 100_000
# Transactional batches answered before their write lands (handlers/produce.py): at most
# this many bytes of them queued for the writer. Past it a Produce waits for its write,
# as any other does, so a producer cannot queue more than this in the gateway's memory.
MAX_UNWRITTEN_TXN_BYTES = 32 << 20
NO_EPOCH = -1
_HEAD = struct.Struct(">hB")
_BATCH = struct.Struct(">iiqq")
_ID = struct.Struct(">q")
_SEQ_MOD = 1 << 31


@dataclass(slots=True)
class BatchRecord:
    first_seq: int
    last_seq: int
    base_offset: int = -1  # -1: not known (still being written, or lost at restart)
    log_append_time: int = -1
    done: asyncio.Future[None] | None = None  # set while the write is in flight
    # A Kafka transaction's batch: stored in the PayloadTable, no offset until the commit.
    transactional: bool = False


@dataclass(slots=True)
class ProducerEntry:
    epoch: int = NO_EPOCH
    batches: deque[BatchRecord] = field(default_factory=lambda: deque(maxlen=KEEP_BATCHES))
    # The store's lead_epoch of the topic when this was read (not stored): with several
    # gateways, a view read before this gateway took the topic is stale.
    lead_epoch: int = field(default=0, compare=False)

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


@dataclass(frozen=True, slots=True)
class Verdict:
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    duplicate: BatchRecord | None = None


ACCEPT = Verdict()


def encode_entry(entry: ProducerEntry) -> bytes:
    parts = [_HEAD.pack(entry.epoch, len(entry.batches))]
    parts += [
        _BATCH.pack(b.first_seq, b.last_seq, b.base_offset, b.log_append_time)
        for b in entry.batches
    ]
    return b"".join(parts)


def decode_entry(raw: bytes | None) -> ProducerEntry:
    if not raw:
        return ProducerEntry()
    epoch, count = _HEAD.unpack_from(raw, 0)
    entry = ProducerEntry(epoch)
    for i in range(count):
        first, last, base, ts = _BATCH.unpack_from(raw, _HEAD.size + i * _BATCH.size)
        entry.batches.append(BatchRecord(first, last, base, ts))
    return entry


def describe(entry: ProducerEntry) -> str:
    """``entry`` in one line for a log: epoch, then each kept batch's sequences (``*``:
    still being written) and the lead epoch it was read under."""
    batches = " ".join(
        f"{b.first_seq}-{b.last_seq}{'*' if b.done is not None else ''}" for b in entry.batches
    )
    return f"epoch {entry.epoch}, batches [{batches}], lead epoch {entry.lead_epoch}"


def check(entry: ProducerEntry, batch: ProducedBatch) -> Verdict:
    """Kafka's ProducerAppendInfo.checkSequence plus the duplicate lookup."""
    epoch, first, last = batch.producer_epoch, batch.base_sequence, batch.last_sequence
    if entry.epoch == NO_EPOCH:
        # A transactional producer's sequences are kept in memory only (its transaction
        # ends with the process), so no state may also mean "forgotten": accepted, as
        # Kafka 2.5+ accepts any first sequence from a producer it has no state for.
        if first != 0 and not batch.is_transactional:
            return Verdict(
                ErrorCode.UNKNOWN_PRODUCER_ID,
                f"no state for producer {batch.producer_id} on this topic; "
                f"its first batch must have sequence 0, not {first}",
            )
        return ACCEPT
    if epoch < entry.epoch:
        return Verdict(
            ErrorCode.INVALID_PRODUCER_EPOCH,
            f"producer epoch {epoch} is older than the current epoch {entry.epoch}",
        )
    if epoch > entry.epoch:
        if first != 0:
            return Verdict(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"a new producer epoch must start at sequence 0, not {first}",
            )
        return ACCEPT
    for b in entry.batches:
        if b.first_seq == first and b.last_seq == last:
            return Verdict(duplicate=b)
    expected = (entry.last_seq + 1) % _SEQ_MOD
    if first != expected:
        return Verdict(
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
            f"expected sequence {expected} from producer {batch.producer_id}, got {first}",
        )
    return ACCEPT


class ProducerStates:
    def __init__(self, store: Store, run: Blocking, cluster: Cluster | None) -> None:
        """``run``: the broker's (store calls on its executor); ``cluster``: where producer
        ids come from when several gateways share the store (None: this store)."""
        self._store, self._run, self._cluster = store, run, cluster
        self._entries: OrderedDict[str, ProducerEntry] = OrderedDict()
        self._persisted: dict[str, ProducerEntry] = {}  # writer thread only
        self._failures_seen = 0  # writer thread only
        self._ids_lock = asyncio.Lock()
        self._next_id = 0
        self._id_limit = 0
        self.unwritten_txn_bytes = 0  # event loop only: see MAX_UNWRITTEN_TXN_BYTES

    @staticmethod
    def key(info: TopicInfo, producer_id: int) -> str:
        # The generation keeps a recreated topic from inheriting the old sequences.
        return f"{info.id}/{info.metadata.generation}/{producer_id}"

    async def allocate_id(self) -> int:
        """A producer id never handed out before, also across restarts (blocks of 1000
        are reserved durably, so a restart skips at most the rest of a block)."""
        async with self._ids_lock:
            cluster = self._cluster
            if self._next_id >= self._id_limit and cluster is not None:
                block = await self._run(cluster.producer_id_block)
                start = CLUSTER_ID_BASE + (block - 1) * ID_BLOCK
                self._next_id, self._id_limit = start, start + ID_BLOCK
            elif self._next_id >= self._id_limit:
                store = self._store
                raw = await self._run(store.get_state, ID_AREA, ID_KEY)
                start = _ID.unpack(raw)[0] if raw else 0
                await self._run(store.put_state, ID_AREA, ID_KEY, _ID.pack(start + ID_BLOCK))
                self._next_id, self._id_limit = start, start + ID_BLOCK
            pid = self._next_id
            self._next_id += 1
            return pid

    async def entry(self, key: str, topic: TopicId) -> ProducerEntry:
        """``key``'s state (``key(info, ...)``; ``topic``: ``info.id``)."""
        store = self._store
        lead = store.lead_epoch(topic)
        entry = self._entries.get(key)
        if entry is not None and entry.lead_epoch == lead:
            self._entries.move_to_end(key)
            return entry
        raw = await self._run(store.get_state, STATE_AREA, key)
        # Another request may have loaded it while we waited: keep the first copy.
        current = self._entries.get(key)
        if current is not None and current.lead_epoch == store.lead_epoch(topic):
            return current
        entry = decode_entry(raw)
        entry.lead_epoch = lead  # read after ``lead``: a later change reloads it again
        self._entries[key] = entry
        self._evict()
        return entry

    def record(
        self, key: str, entry: ProducerEntry, batch: ProducedBatch, topic: TopicId
    ) -> tuple[BatchRecord, Callable[[PublishResult], dict[tuple[str, str], bytes | None]]]:
        """Accept the batch into the state; -> its record and the store's state callable."""
        if batch.producer_epoch != entry.epoch:
            entry.epoch = batch.producer_epoch
            entry.batches.clear()
        loop = asyncio.get_running_loop()
        rec = BatchRecord(
            batch.base_sequence,
            batch.last_sequence,
            done=loop.create_future(),
            transactional=batch.is_transactional,
        )
        entry.batches.append(rec)
        epoch, first, last = entry.epoch, rec.first_seq, rec.last_seq
        store = self._store

        def persist(result: PublishResult) -> dict[tuple[str, str], bytes | None]:
            # On the writer thread, in write order. The check on the event loop passed
            # against state that may include batches whose write then failed; here the
            # batch is checked again against what is durable, so a gap never gets written.
            if self._failures_seen != store.write_failures:
                self._persisted.clear()  # a failed write: views may hold phantom batches
                self._failures_seen = store.write_failures
            lead = store.lead_epoch(topic)
            view = self._persisted.get(key)
            if view is None or view.lead_epoch != lead:  # new, or led elsewhere meanwhile
                view = self._persisted[key] = decode_entry(store.get_state(STATE_AREA, key))
                view.lead_epoch = lead
            if epoch != view.epoch:
                if view.epoch != NO_EPOCH and epoch < view.epoch:
                    raise StateConflict(f"producer epoch {epoch} was fenced by {view.epoch}")
                # Read under this lead too: without it the next batch re-read the view from
                # the store, where this batch is not yet when both share one durable write.
                view = self._persisted[key] = ProducerEntry(epoch, lead_epoch=lead)
            expected = (view.last_seq + 1) % _SEQ_MOD
            if first != expected:
                raise StateConflict(
                    f"sequence {first} does not follow the last written one ({view.last_seq});"
                    " an earlier batch was not written"
                )
            view.batches.append(BatchRecord(first, last, result.base_offset, result.publish_ts))
            if len(self._persisted) > MAX_CACHED:
                self._persisted.pop(next(iter(self._persisted)))
            return {(STATE_AREA, key): encode_entry(view)}

        return rec, persist

    @staticmethod
    def completed(rec: BatchRecord, base_offset: int, log_append_time: int) -> None:
        rec.base_offset, rec.log_append_time = base_offset, log_append_time
        if rec.done is not None and not rec.done.done():
            rec.done.set_result(None)
        rec.done = None

    def failed(self, key: str, rec: BatchRecord, exc: BaseException) -> None:
        # The write did not happen; forget the in-memory state so the next request
        # reloads what is durable (which does not include this batch).
        self._entries.pop(key, None)
        if rec.done is not None and not rec.done.done():
            rec.done.set_exception(exc)
            rec.done.exception()  # mark retrieved: nobody may be waiting on it

    def _evict(self) -> None:
        while len(self._entries) > MAX_CACHED:
            key, entry = next(iter(self._entries.items()))
            if any(b.done is not None for b in entry.batches):
                self._entries.move_to_end(key)  # a write in flight: keep it
                break
            del self._entries[key]
