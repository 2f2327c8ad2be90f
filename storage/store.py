"""The Store: topics, publishing, transactions and reading, over one backend.

Every write goes through the group-commit writer, so it is durable before its call
returns and concurrent writers share fsyncs. Reads run on the caller's thread.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from tmsgate.protocol import decode_meta

from . import intents, keys, reader
from .append import Item, RowAppender
from .backend import Backend, Mutation, open_backend
from .compaction import Cleaner, CompactionSettings, KeyOf, is_compacted
from .errors import (
    InvalidTransaction,
    NotLeader,
    OffsetGap,
    OffsetOutOfRange,
    StorageError,
    StoreClosed,
    TopicAlreadyExists,
    TopicNotFound,
    TransactionNotInProgress,
)
from .ids import (
    Message,
    MessageId,
    PublishResult,
    ReadResult,
    RollbackDetail,
    StoredBatch,
    StoredRange,
    TopicId,
    TopicMetadata,
)
from .janitor import Housekeeping, Janitor, run_cleanup
from .leases import LeaseTable
from .shared_transactions import NotTransactionLeader, SharedTransactions
from .tables import Tables
from .topics import (
    OpenTxRow,
    TopicState,
    encode_metadata,
    load_state,
    new_metadata,
    validate_properties,
)
from .transactions import Transaction, TransactionManager, Visibility
from .writer import Batch, Writer

log = logging.getLogger(__name__)


TxArg = Transaction | int | None
StateUpdates = Mapping[tuple[str, str], bytes | None]
# State may depend on where the messages landed: a callable gets the PublishResult.
StateArg = StateUpdates | Callable[[PublishResult], StateUpdates] | None
StoredStateArg = Callable[[StoredRange], StateUpdates] | None
Listener = Callable[[TopicId, int], None]
# Told of every topic change once it is durable: the new metadata (generation < 0: deleted).
TopicListener = Callable[[TopicMetadata], None]

_SUFFIX = keys.MESSAGE_SUFFIX
_U64 = keys.U64
# The tail of the id of a message that is a row of its own (a PayloadTable message's id
# ends with its payload row's key instead).
_NO_PAYLOAD_ID = bytes(10)


def _kafka_key(meta: bytes | None) -> bytes | None:
    """A message's compaction key: the Kafka record key its meta carries (none for a
    message published over HTTP)."""
    return decode_meta(meta)[0]


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def open_store(
    url: str,
    *,
    snapshot: bool = False,
    disk_reserve_bytes: int | None = None,
    **options: object,
) -> Store:
    """Open (creating if missing) the store at ``url``, e.g. ``leveldb:///var/lib/tms``.

    ``snapshot=True`` opens a throwaway point-in-time copy (for inspection tools).
    ``disk_reserve_bytes``: space kept back for a full disk (docs/storage-api.md, "Full
    disk"); None leaves an existing reserve file as it is."""
    backend = open_backend(url, snapshot=snapshot, disk_reserve_bytes=disk_reserve_bytes)
    return Store(backend, **options)  # type: ignore[arg-type]


_LOG_START = "log_start"  # state area: a topic's log start (delete_records)
_RESUME_KEYS = 64  # per topic: one per consumer position worth remembering


class Store:
    def __init__(
        self,
        backend: Backend,
        *,
        clock: Callable[[], int] | None = None,
        janitor_interval_s: float | None = None,
        shared: bool = False,
        compaction: CompactionSettings | None = None,
        message_key: KeyOf | None = None,
    ) -> None:
        """``shared``: several gateways use this store (``tmsgate serve --cluster``), each
        writing only the topics it leads: writes wait for ``lead`` (a topic's writes are
        refused with NotLeader until then), and settling intents, reloading state and
        caching metadata are each limited to what this process may know is current."""
        self._backend = backend
        # The MessageTable, PayloadTable and MetadataTable over the backend (tables.py):
        # what the store reads through; it writes through its writer's batches.
        self.tables = Tables(backend)
        self._shared = shared
        # Shared: the topics this process leads, each until a time by the store's clock
        # (its lease's end less a margin: gateway/cluster.py). Changed under _lock; a
        # single get needs none.
        self._led: dict[TopicId, int] = {}
        self._lead_epochs: dict[TopicId, int] = {}  # see lead_epoch
        self._clock = clock or wall_clock_ms
        self._lock = threading.RLock()
        self._metadata: dict[TopicId, TopicMetadata | None] = {}
        self._states: dict[TopicId, TopicState] = {}
        self._listeners: list[Listener] = []
        self._topic_listeners: list[TopicListener] = []
        self._closed = False
        self._write_failures = 0
        # A full disk: publishes and stores are refused while this says so (space.py).
        self._space = backend.space
        if not shared:  # shared: each topic's as its leader takes it (lead)
            intents.settle(backend)  # writes a crash left in part, before anything reads
        self._writer = Writer(backend, on_failure=self._reload)
        self._rows = RowAppender(self.tables, self._clock, self._made_visible)
        # Shared: one gateway runs the cluster's transaction manager, the others keep a
        # view of it (shared_transactions.py); the same queries answer either way.
        self.transactions: TransactionManager | SharedTransactions = (
            SharedTransactions(
                self.tables.metadata, self._writer.submit, self._clock, self._tx_finished
            )
            if shared
            else TransactionManager(
                self.tables.metadata, self._writer.mutate, self._clock, self._tx_finished
            )
        )
        self._housekeeping = Housekeeping(
            backend=backend,
            tables=self.tables,
            write=self._writer.mutate,
            topic_state=self._state,
            all_topics=self._topics_to_clean,
            transactions=self.transactions,
            clock=self._clock,
            writes_refused=lambda: self.writes_refused,
            move_log_start=self.delete_records,
        )
        # Log compaction (compaction.py): run by the janitor's thread, or by compact().
        self._rewrite_listeners: list[TopicListener] = []
        self.cleaner = Cleaner(
            self._housekeeping,
            compaction or CompactionSettings(),
            message_key or _kafka_key,
            self._rows_rewritten,
        )
        self._janitor = (
            Janitor(self._housekeeping, janitor_interval_s, self.cleaner)
            if janitor_interval_s
            else None
        )

    def now_ms(self) -> int:
        """The store's clock (injectable, see __init__): what its timestamps, TTLs and
        transaction timeouts are measured by."""
        return self._clock()

    # --- topics ---------------------------------------------------------------------------
    def create_topic(
        self, topic: TopicId, properties: dict[str, str] | None = None
    ) -> TopicMetadata:
        props = validate_properties(properties)

        def op(batch: Batch) -> TopicMetadata:
            previous = self._topic_metadata(topic)
            if previous is not None and previous.generation > 0:
                raise TopicAlreadyExists(topic)
            md = new_metadata(topic, previous.generation if previous else 0, props, self._clock())
            self._put_metadata(batch, md, fresh=True)
            return md

        return self._write(op)

    def create_topics(
        self,
        topics: Sequence[TopicId],
        properties: dict[str, str] | None = None,
        unless_exists: TopicId | None = None,
    ) -> list[TopicMetadata]:
        """Create several topics with the same properties, in one write, replacing any that
        exist (each gets a new generation: the old one's data is never visible again).
        For sets of topics only whose creator makes them visible afterwards (a Kafka
        topic's partitions, storage/partitions.py); nothing relies on the rows landing
        together. ``unless_exists``: refuse (TopicAlreadyExists) if that topic exists when
        the write is made."""
        props = validate_properties(properties)

        def op(batch: Batch) -> list[TopicMetadata]:
            if unless_exists is not None:
                live = self._topic_metadata(unless_exists)
                if live is not None and live.generation > 0:
                    raise TopicAlreadyExists(unless_exists)
            out = []
            for topic in topics:
                previous = self._topic_metadata(topic)
                gen = previous.generation if previous else 0
                md = new_metadata(topic, gen, props, self._clock())
                self._put_metadata(batch, md, fresh=True)
                out.append(md)
            return out

        return self._write(op)  # type: ignore[return-value]

    def update_topic(
        self,
        topic: TopicId,
        properties: dict[str, str] | Callable[[dict[str, str]], dict[str, str]],
    ) -> TopicMetadata:
        """Replace all of a topic's properties. With a function, it receives the current
        properties inside the writer and returns the new ones, so concurrent changes to
        different properties do not overwrite each other."""
        fixed = None if callable(properties) else validate_properties(properties)

        def op(batch: Batch) -> TopicMetadata:
            md = self._require(topic)
            props = fixed
            if props is None:
                props = validate_properties(properties(dict(md.properties)))  # type: ignore[operator]
            md = TopicMetadata(topic, md.generation, props, md.topic_uuid, md.created_ms)
            self._put_metadata(batch, md, fresh=False)
            return md

        md = self._write(op)
        self._compaction_settings_changed([md])  # type: ignore[list-item]
        return md  # type: ignore[return-value]

    def delete_topic(self, topic: TopicId) -> None:
        """Negate the topic's generation: its data is invisible at once, cleaned up later."""

        def op(batch: Batch) -> None:
            md = self._require(topic)
            gone = TopicMetadata(topic, -md.generation, md.properties, md.topic_uuid, md.created_ms)
            self._put_metadata(batch, gone, fresh=True)

        self._write(op)

    def update_topics(
        self, topics: Sequence[TopicId], properties: dict[str, str]
    ) -> list[TopicMetadata]:
        """Give those of ``topics`` that exist these properties, in one write."""
        props = validate_properties(properties)

        def op(batch: Batch) -> list[TopicMetadata]:
            out = []
            for topic in topics:
                md = self._topic_metadata(topic)
                if md is None or md.generation <= 0:
                    continue
                md = TopicMetadata(topic, md.generation, props, md.topic_uuid, md.created_ms)
                self._put_metadata(batch, md, fresh=False)
                out.append(md)
            return out

        changed = self._write(op)
        self._compaction_settings_changed(changed)  # type: ignore[arg-type]
        return changed  # type: ignore[return-value]

    def _compaction_settings_changed(self, topics: list[TopicMetadata]) -> None:
        """A compacted topic's properties changed: its cleaning under them starts now."""
        if self._janitor is not None and any(is_compacted(md.properties) for md in topics):
            self._janitor.clean_soon()

    def delete_topics(self, topics: Sequence[TopicId]) -> list[TopicMetadata]:
        """Delete those of ``topics`` that exist, in one write; -> what they were."""

        def op(batch: Batch) -> list[TopicMetadata]:
            out = []
            for topic in topics:
                md = self._topic_metadata(topic)
                if md is None or md.generation <= 0:
                    continue
                gone = TopicMetadata(
                    topic, -md.generation, md.properties, md.topic_uuid, md.created_ms
                )
                self._put_metadata(batch, gone, fresh=True)
                out.append(md)
            return out

        return self._write(op)  # type: ignore[return-value]

    def get_topic(self, topic: TopicId) -> TopicMetadata:
        self._check_open()
        return self._require(topic)

    def peek_topic(self, topic: TopicId) -> TopicMetadata | None:
        """The topic's metadata if the store holds it in memory (a deleted topic's too:
        generation <= 0), else None; never reads the backend, so an event loop may call
        it. Every change goes through the store, so what it holds is current."""
        with self._lock:
            return self._metadata.get(topic)

    def list_topics(self, namespace: str) -> list[TopicId]:
        return [md.topic for md in self.live_topics(namespace)]

    def live_topics(self, namespace: str) -> list[TopicMetadata]:
        """Every topic of ``namespace`` that exists (generation > 0). A topic the store
        holds in memory comes as peek_topic gives it (the same object), unless the store
        is shared: then every record is read, for other gateways' changes."""
        self._check_open()
        known = None if self._shared else self.peek_topic
        return [md for md in self.tables.metadata.topics(namespace, known) if md.generation > 0]

    def all_topic_metadata(self) -> list[TopicMetadata]:
        """Every topic record in every namespace, deleted generations included."""
        return self.tables.metadata.topics()

    # --- several gateways (shared=True) ---------------------------------------------------
    def lead(self, topic: TopicId, until_ms: int) -> dict[str, int]:
        """Write ``topic`` until ``until_ms`` (the store's clock). Its lease was just taken
        (gateway/cluster.py), so no other process writes it any more: a write the previous
        leader left in part is settled, and the topic's state is read afresh from the
        backend. Called again with a later time while leading, it only extends (a renewed
        lease). -> settle counts."""
        self._check_open()
        if not self._shared:
            return {}
        if topic in self._led:
            with self._lock:
                self._led[topic] = until_ms
            return {}
        # After everything the previous leader wrote: its intent row, producer state and
        # checkpoint are rewritten now, and must not hide behind its newer cell versions.
        self._backend.sync_clock()
        stats = intents.settle(self._backend, [topic])
        md = self.tables.metadata.topic(topic)
        with self._lock:
            if md is None:
                self._metadata.pop(topic, None)
            else:
                self._metadata[topic] = md
            self._states.pop(topic, None)
            self._led[topic] = until_ms
            self._lead_epochs[topic] = self._lead_epochs.get(topic, 0) + 1
        return stats

    def follow(self, topic: TopicId) -> None:
        """Stop writing ``topic`` (its lease is handed over or lost): writes raise NotLeader
        from now on, and what this process knew of it is forgotten."""
        with self._lock:
            if self._led.pop(topic, None) is not None:
                self._lead_epochs[topic] = self._lead_epochs.get(topic, 0) + 1
            self._states.pop(topic, None)

    def flush(self) -> None:
        """Wait until every write queued before this call is durable (or failed): the
        writer is first in, first out. A gateway handing a partition over calls it after
        ``follow`` so that no write of its own lands after the next leader has read."""
        self._check_open()
        self._writer.submit(lambda batch: None).result()

    def lead_transactions(self, until_ms: int) -> bool:
        """Shared: run the cluster's transaction manager until ``until_ms`` (the
        controller's lease: gateway/cluster.py); -> True when it starts now, read afresh
        from the rows. The caller synced the clock (``sync_clock``) when it took the lease."""
        txm = self.transactions
        if not isinstance(txm, SharedTransactions):
            return False
        return txm.lead(until_ms)

    def follow_transactions(self) -> None:
        """Shared: stop running the transaction manager (the lease went elsewhere)."""
        txm = self.transactions
        if isinstance(txm, SharedTransactions):
            txm.follow()

    def lead_epoch(self, topic: TopicId) -> int:
        """How often this process took or gave up ``topic`` (0 unless the store is shared):
        a view of the topic's state kept outside the store (the gateway's idempotent
        producer states) is stale once this changed, since another gateway may have
        written meanwhile. Per topic: a change of one topic leaves the others' views."""
        return self._lead_epochs.get(topic, 0)

    def leads(self, topic: TopicId) -> bool:
        """May this process write ``topic`` now (always, unless the store is shared)."""
        return not self._shared or self._clock() < self._led.get(topic, 0)

    def refresh_topics(self) -> list[TopicMetadata]:
        """Shared store: read every topic's metadata again, for changes other gateways made
        (created, reconfigured, deleted); topic listeners hear of each, as of a change made
        here. -> every topic's metadata, deleted generations included."""
        self._check_open()
        changed = []
        found = self.all_topic_metadata()
        for md in found:
            with self._lock:
                old = self._metadata.get(md.topic)
                if old == md:
                    continue
                self._metadata[md.topic] = md
                if old is not None and old.generation != md.generation:
                    self._states.pop(md.topic, None)
                elif (st := self._states.get(md.topic)) is not None:
                    st.metadata = md
            changed.append(md)
        for md in changed:
            self._topic_changed(md)
        return found

    def lease_table(self, clock_ms: Callable[[], int] | None = None) -> LeaseTable:
        """The leases kept in this store's MetadataTable (storage/leases.py)."""
        return LeaseTable(self._backend, clock_ms or self._clock)

    # --- publishing -----------------------------------------------------------------------
    def publish(
        self,
        topic: TopicId,
        items: Sequence[Item],
        tx: TxArg = None,
        state: StateArg = None,
    ) -> PublishResult:
        return self.publish_async(topic, items, tx, state).result()

    def publish_async(
        self,
        topic: TopicId,
        items: Sequence[Item],
        tx: TxArg = None,
        state: StateArg = None,
        sealed: bool = False,
    ) -> Future[PublishResult]:
        """Append messages to the MessageTable (with the t column when ``tx`` is given;
        ``sealed`` with it: held from every reader while the transaction is open, then
        plain messages with no write pointer, as a Kafka transaction's records read:
        keys.F_SEALED).

        With ``tx`` and no items, makes everything stored for the transaction in the
        PayloadTable visible, in place, at this moment. ``state`` updates are written in the
        same atomic batch (the gateway keeps idempotent-producer state there); a callable
        ``state(result)`` runs once offsets are assigned, inside the same batch."""
        wp = _write_pointer(tx)
        if not items and wp is None:
            raise StorageError("nothing to publish: no messages and no transaction")
        entries = list(items)

        def append(batch: Batch, st: TopicState) -> PublishResult:
            if wp is not None and not self.transactions.is_in_progress(wp):
                raise TransactionNotInProgress(wp, self.transactions.state(wp))
            if entries:
                return self._rows.append(batch, st, entries, wp, sealed)
            return self._rows.append_reference(batch, st, wp)  # type: ignore[arg-type]

        return self._publish(topic, append, wp, state)

    def publish_kafka_batch_async(
        self,
        topic: TopicId,
        records: bytes | memoryview,
        count: int,
        state: StateArg = None,
        record_keys: tuple[list[bytes | None], list[int]] | None = None,
    ) -> Future[PublishResult]:
        """Append a Kafka v2 record batch of ``count`` plain records (no write pointer, a
        validated batch with consecutive offset deltas from 0) as one MessageTable row kept
        as sent (keys.F_KAFKA_BATCH): a Kafka fetch serves it as Kafka serves a stored
        batch, and every other reader sees its records as messages with the meta Produce
        would have given each. ``records`` must not change until the write is done (it is
        copied into the row on the writer thread). ``state`` as for publish_async.
        ``record_keys``: the records' keys and the indices of null values, as the caller
        decoded them, for the compaction cleaner of a compacted topic (ProducedKeys)."""
        _check_kafka_batch(records, count)
        produced = self.cleaner.produced

        def append(batch: Batch, st: TopicState) -> PublishResult:
            result = self._rows.append_kafka_batch(batch, st, records, count)
            if record_keys is not None and is_compacted(st.metadata.properties):
                gen = st.metadata.generation
                remember = functools.partial(produced.remember, st.topic, gen, result.base_offset)
                batch.after.append(functools.partial(remember, *record_keys))
            return result

        return self._publish(topic, append, None, state)

    def _publish(
        self,
        topic: TopicId,
        append: Callable[[Batch, TopicState], PublishResult],
        wp: int | None,
        state: StateArg,
    ) -> Future[PublishResult]:
        self._refuse_if_full()
        state_mutations = None if callable(state) else _state_mutations(state)

        def op(batch: Batch) -> PublishResult:
            self._refuse_if_full()  # again: the disk may have filled while it was queued
            st = self._leading(topic)
            saved = (st.last_ts, st.last_seq, st.next_offset)
            result = append(batch, st)
            if state_mutations is None:
                try:
                    updates = _state_mutations(state(result))  # type: ignore[operator]
                except Exception:
                    # Undo this op's claim on offsets and time; the writer drops its rows.
                    st.last_ts, st.last_seq, st.next_offset = saved
                    with st.lock:
                        st.open_tx_rows = [r for r in st.open_tx_rows if r.base_offset < saved[2]]
                    st.published_refs.discard(wp)  # type: ignore[arg-type]
                    raise
                batch.derive(st.intent_key, updates)
            elif state_mutations:
                batch.derive(st.intent_key, state_mutations)
            return result

        return self._writer.submit(op)

    def publish_exact_async(
        self,
        topic: TopicId,
        base_offset: int,
        items: Sequence[tuple[int, Item]],
        end_offset: int,
    ) -> Future[int]:
        """Write offsets ``base_offset`` .. ``end_offset - 1`` as given: ``items`` are
        (offset, message) in increasing order within that span, and offsets without an
        item become a gap, which every reader passes over. For copying a Kafka partition
        with its offsets kept (tmsgate migrate); the topic's offsets stay dense.

        The span must start at or below the topic's next offset (else OffsetGap: a write
        lost before it would otherwise turn into a gap), except on a topic never written
        to: its offsets then start at ``base_offset``, as a Kafka partition's log may start
        anywhere (an empty span records just that). The part below the next offset was
        written before (a copy resumed after its acknowledgement was lost) and is
        skipped, so no message is ever written twice. -> the topic's next offset."""
        if not 0 <= base_offset <= end_offset:
            raise ValueError(f"span [{base_offset}, {end_offset}) is not a span of offsets")
        entries = list(items)
        previous = base_offset - 1
        for offset, _ in entries:  # checked before anything is queued
            if not previous < offset < end_offset:
                raise ValueError(
                    f"offset {offset} after {previous}: items must increase within "
                    f"[{base_offset}, {end_offset})"
                )
            previous = offset
        self._refuse_if_full()

        def op(batch: Batch) -> int:
            self._refuse_if_full()
            st = self._leading(topic)
            saved = (st.last_ts, st.last_seq, st.next_offset)
            if base_offset > st.next_offset:
                if st.next_offset != 0:
                    raise OffsetGap(topic, base_offset, st.next_offset)
                st.next_offset = base_offset  # the log starts there
                if end_offset == base_offset:  # nothing else: one empty row says so
                    self._rows.append_gap(batch, st, 0)
            try:
                expected, run = st.next_offset, []
                for offset, item in entries:
                    if offset < expected:
                        continue
                    if offset > expected:
                        if run:
                            self._rows.append(batch, st, run, None)
                            run = []
                        self._rows.append_gap(batch, st, offset - expected)
                        expected = offset
                    run.append(item)
                    expected += 1
                if run:
                    self._rows.append(batch, st, run, None)
                if end_offset > st.next_offset:
                    self._rows.append_gap(batch, st, end_offset - st.next_offset)
            except Exception:
                st.last_ts, st.last_seq, st.next_offset = saved
                raise
            return st.next_offset

        return self._writer.submit(op)

    def publish_sealed_async(self, topic: TopicId, tx: Transaction | int) -> Future[int]:
        """Make a transaction's PayloadTable rows on ``topic`` one sealed reference row: a
        run of dense offsets that no reader sees until the transaction commits, and that
        then reads as plain messages (a Kafka transaction's commit, docs/transactions.md).

        Idempotent, for replaying a recorded commit decision: -> the rows referenced now,
        0 if there is nothing to reference or the reference was already written (also
        once the transaction has committed). TopicNotFound if the topic is gone."""
        wp = _write_pointer(tx)
        if wp is None:
            raise InvalidTransaction("publish_sealed() needs a transaction")

        def op(batch: Batch) -> int:
            st = self._leading(topic)
            if not self._rows.is_referenced(st, wp) and not self.transactions.is_in_progress(wp):
                raise TransactionNotInProgress(wp, self.transactions.state(wp))
            return self._seal(batch, st, wp)

        self._check_open()
        return self._writer.submit(op)

    def commit_sealed_async(
        self, tx: Transaction | int, topics: Sequence[TopicId], decision: StateUpdates
    ) -> Future[list[int]]:
        """A Kafka transaction's commit as one durable write instead of three in a row:
        the decision (TransactionManager.decide) with ``decision`` (state rows recording
        that it commits), a sealed reference on each of ``topics`` (publish_sealed_async)
        and the TMS commit. Decided on the writer thread, after every store queued before
        this call has landed or failed: a failed one (TransactionManager.spoil), a
        timeout or an abort makes the future fail with TransactionNotInProgress, and
        nothing of this call is written. Where the backend writes a row atomically and
        nothing more, the batch's phases keep the order that matters: the decision and the
        references (with their intent) land before the commit row. A crash part way
        leaves either the decision with some or all references, which its replay (the
        separate calls, each idempotent) finishes, or references without a decision, which
        stay invisible (the transaction is aborted). The decision goes in the same phase
        as any earlier queued write of its row, so the last queued one wins. One write: a
        LevelDB batch, or HBase's phases. -> rows referenced per topic (0 for a topic
        deleted meanwhile)."""
        wp = _write_pointer(tx)
        if wp is None:
            raise InvalidTransaction("commit_sealed() needs a transaction")
        self._check_open()
        txm = self.transactions
        landed: list[Callable[[Future[Any]], None]] = []

        def op(batch: Batch) -> list[int]:
            txm.decide(wp)
            commit_rows, on_landed = txm.commit_decided(wp)
            landed.append(on_landed)
            states = []
            for topic in topics:  # all looked up before anything is appended
                try:
                    states.append(self._leading(topic))
                except TopicNotFound:
                    states.append(None)
            batch.mutations.extend(_state_mutations(decision))
            counts = [0 if st is None else self._seal(batch, st, wp) for st in states]
            batch.then.extend(commit_rows)
            return counts

        def done(fut: Future[list[int]]) -> None:
            for on_landed in landed:
                on_landed(fut)

        fut = self._writer.submit(op)
        fut.add_done_callback(done)
        return fut

    def decide_async(self, tx: Transaction | int) -> Future[None]:
        """TransactionManager.decide on the writer thread, after every store queued before
        this call has landed or failed (a failed one makes it TransactionNotInProgress:
        spoil). For a commit taken step by step (commit_sealed_async decides itself)."""
        wp = _write_pointer(tx)
        if wp is None:
            raise InvalidTransaction("decide() needs a transaction")
        self._check_open()
        return self._writer.submit(lambda batch: self.transactions.decide(wp))

    def _seal(self, batch: Batch, st: TopicState, wp: int) -> int:
        """The sealed reference of ``wp``'s payload rows on a topic (idempotent: 0 once
        referenced) -> rows referenced."""
        if self._rows.is_referenced(st, wp):
            return 0
        return self._rows.append_reference(batch, st, wp, sealed=True).count

    def discard_payloads_async(self, topic: TopicId, tx: Transaction | int) -> Future[int]:
        """Delete an aborted (invalid) transaction's PayloadTable rows on ``topic``, which no
        reference will ever make visible (an aborted Kafka transaction's records); -> messages
        deleted (0 if a reference exists). TransactionNotInProgress unless the transaction
        is invalid. Without it they would stay until the topic's TTL (or for ever)."""
        wp = _write_pointer(tx)
        if wp is None:
            raise InvalidTransaction("discard_payloads() needs a transaction")

        def op(batch: Batch) -> int:
            st = self._leading(topic)
            if self.transactions.visibility_now(wp) is not Visibility.SKIP:
                raise TransactionNotInProgress(wp, self.transactions.state(wp))
            if self._rows.is_referenced(st, wp):
                return 0
            # As many rows as were stored: the scan stops at the last one instead of
            # seeking past it (which skips every delete behind: slow after a large
            # delete, until LevelDB compacts).
            messages, _, _, rows = self._rows.stored(st, wp)
            found = itertools.islice(self.tables.payloads.row_keys(st, wp), rows)
            batch.mutations.extend((key, None) for key in found)
            st.stored.pop(wp, None)
            return messages

        self._check_open()
        return self._writer.submit(op)

    def store(self, topic: TopicId, items: Sequence[Item], tx: Transaction | int) -> StoredRange:
        return self.store_async(topic, items, tx).result()

    def store_async(
        self,
        topic: TopicId,
        items: Sequence[Item],
        tx: Transaction | int,
        spoil: bool = False,
        state: StoredStateArg = None,
    ) -> Future[StoredRange]:
        """Write payloads to the PayloadTable under the transaction's write pointer; -> the
        rows written (what publish_kept_async takes to choose among several stores).
        ``spoil``: if this write fails, the transaction can no longer be decided
        (TransactionManager.spoil), for a caller that answers its client before the write
        lands (a Kafka transaction's Produce). Others hear of the failure and choose."""
        entries = list(items)
        return self._store(
            topic, lambda: keys.pack_messages(entries), len(entries), tx, spoil, state
        )

    def store_kafka_batch_async(
        self,
        topic: TopicId,
        records: bytes | memoryview,
        count: int,
        tx: Transaction | int,
        spoil: bool = False,
        state: StoredStateArg = None,
    ) -> Future[StoredRange]:
        """store_async for a Kafka transaction's v2 batch of ``count`` records, kept as
        sent in one PayloadTable row (keys.F_KAFKA_BATCH): its readers get each record's
        payload and meta as store_async's entries would give them. ``records`` as for
        publish_kafka_batch_async."""
        _check_kafka_batch(records, count)

        def rows_of() -> list[tuple[int, bytes]]:  # on the writer: the copy into the row
            return [(count, keys.encode_kafka_batch_row(0, count, records))]

        return self._store(topic, rows_of, count, tx, spoil, state)

    def _store(
        self,
        topic: TopicId,
        rows_of: Callable[[], list[tuple[int, bytes]]],
        total: int,
        tx: Transaction | int,
        spoil: bool,
        state: StoredStateArg = None,
    ) -> Future[StoredRange]:
        """The PayloadTable write of store_async: ``rows_of()`` gives (messages, value) per
        row, on the writer thread; ``total`` messages in all. ``state(range)``: state rows
        written with them, in the same write (a Kafka producer's sequences, with several
        gateways: the partition's next leader must know them to refuse a retried batch)."""
        wp = _write_pointer(tx)
        if wp is None:
            raise InvalidTransaction("store() needs a transaction")
        self._refuse_if_full()
        txm = self.transactions

        def op(batch: Batch) -> StoredRange:
            self._refuse_if_full()
            st = self._leading(topic)
            if not txm.is_in_progress(wp) or txm.is_decided(wp):
                # Decided: a commit is choosing which stored rows to publish; a store
                # landing now (a retried task's zombie) must not slip in.
                raise TransactionNotInProgress(wp, txm.state(wp))
            self._rows.check_unreferenced(st, wp)
            stored = self._rows.stored(st, wp)
            count, ts, seq, rows = stored
            if not total:
                return StoredRange(wp, 0, 0, 0, 0, 0)  # nothing stored
            now = self._clock()
            if now > ts:  # per write pointer, write times never go back: keys stay unique
                ts, seq = now, -1
            prefix = st.payload_prefix + _U64.pack(wp)
            first: tuple[int, int] | None = None
            key = b""
            for n, value in rows_of():
                # A row's messages take pseqs seq+1 .. seq+n, all of one write time.
                if seq + n > keys.MAX_SEQ:
                    ts, seq = ts + 1, -1
                key = prefix + keys.PAYLOAD_ROW.pack(ts, seq + 1)
                if first is None:
                    first = (ts, seq + 1)
                batch.mutations.append((key, value))
                seq += n
                rows += 1
            assert first is not None
            batch.appended(
                st.intent_key,
                prefix + keys.PAYLOAD_ROW.pack(*first),
                key,
                rows - stored[3],
            )
            written = StoredRange(wp, first[0], first[1], ts, seq, total)
            # May refuse (StateConflict): before this op changes what ``st`` knows.
            updates = _state_mutations(state(written)) if state is not None else None
            stored[:] = [count + total, ts, seq, rows]
            if updates:
                batch.derive(st.intent_key, updates)
            return written

        fut = self._writer.submit(op)
        if not spoil:
            return fut

        def spoil_if_failed(done: Future[StoredRange]) -> None:
            # On the writer thread as the store fails: before any later write decides.
            if done.cancelled() or done.exception() is not None:
                txm.spoil(wp)

        fut.add_done_callback(spoil_if_failed)
        return fut

    def publish_kept_async(
        self, topic: TopicId, wp: int, keep: Sequence[StoredRange]
    ) -> Future[int]:
        """Publish one reference row for the payloads ``keep`` names, after deleting every
        other PayloadTable row of ``wp`` on ``topic`` (rows stored by a writer whose work
        was thrown away: a failed or retried Spark task). -> rows referenced.

        For applying a recorded commit decision, step by step: idempotent (a replay
        deletes nothing more and finds the reference written: 0), and correct without
        multi-row atomicity (the deletes come before the reference, and a replay repeats
        them). Refuses a ``keep`` that does not match the rows stored."""
        row = keys.PAYLOAD_ROW.pack
        ranges = sorted(
            (row(r.start_ts, r.start_seq), row(r.end_ts, r.end_seq)) for r in keep if r.count
        )
        kept_rows = sum(r.count for r in keep)
        if any(r.write_pointer != wp for r in keep):
            raise InvalidTransaction(f"a kept range is not of write pointer {wp}")
        if any(lo > hi for lo, hi in ranges) or any(
            a[1] >= b[0] for a, b in itertools.pairwise(ranges)
        ):
            raise InvalidTransaction("kept ranges must not be empty or overlap")
        txm = self.transactions

        def op(batch: Batch) -> int:
            st = self._leading(topic)
            payloads = self.tables.payloads
            doomed: list[tuple[bytes, int]] = []
            low = b""
            for start, end in ranges:  # the rows between the kept ranges
                doomed += payloads.rows_between(st, wp, low, start)
                low = end + b"\x00"
            doomed += payloads.rows_between(st, wp, low, None)
            # Gone before the reference lands (``first``): it counts the rows it finds.
            batch.first.extend((key, None) for key, _ in doomed)
            if self._rows.is_referenced(st, wp):
                return 0
            if not txm.is_in_progress(wp):
                raise TransactionNotInProgress(wp, txm.state(wp))
            stored = self._rows.stored(st, wp)  # counted before this batch's deletes
            kept = stored[0] - sum(n for _, n in doomed)
            if kept != kept_rows:
                raise InvalidTransaction(
                    f"the kept ranges name {kept_rows} messages; {kept} "
                    f"are stored in them for write pointer {wp} on {topic}"
                )
            stored[0] = kept_rows
            stored[3] -= len(doomed)
            if kept_rows == 0:
                st.stored.pop(wp, None)
                return 0
            return self._rows.append_reference(batch, st, wp).count

        self._check_open()
        return self._writer.submit(op)

    def rollback(self, topic: TopicId, detail: RollbackDetail | PublishResult) -> int:
        """Negate the t column of the rows a transactional publish wrote; -> rows changed.
        ``detail`` is what publish() returned, or its ``rollback`` part.

        Only while the transaction is in progress (or invalid): committed is final."""
        if isinstance(detail, PublishResult):
            if detail.rollback is None:
                raise InvalidTransaction("not a transactional publish: nothing to roll back")
            detail = detail.rollback
        wp = detail.write_pointer
        txm = self.transactions

        def op(batch: Batch) -> int:
            st = self._leading(topic)
            if not (txm.is_in_progress(wp) or wp in txm.invalid()):
                # Accepted messages are immutable (the seed): a committed transaction's
                # rows stay; an unknown pointer has nothing to roll back.
                raise TransactionNotInProgress(wp, txm.state(wp))
            start = st.msg_prefix + _SUFFIX.pack(detail.start_ts, detail.start_seq)
            stop = st.msg_prefix + _SUFFIX.pack(detail.end_ts, detail.end_seq) + b"\x00"
            changed = 0
            bases = set()
            for key, value in self.tables.messages.rows(start, stop):
                _, base, _, row_wp, *_ = keys.decode_row(value)
                if row_wp == wp:
                    batch.mutations.append((key, keys.negate_write_pointer(value)))
                    changed += 1
                if row_wp is not None and abs(row_wp) == wp:
                    # Rows negated before too (a rollback that failed part-way and is
                    # repeated): their marker, on the publish's first row, goes now.
                    bases.add(base)
            with st.lock:
                st.open_tx_rows = [
                    r
                    for r in st.open_tx_rows
                    if not (r.write_pointer == detail.write_pointer and r.base_offset in bases)
                ]
            for base in bases:
                # After the rows are negated (``then``): a marker gone first would stop
                # holding the last stable offset for a row still read as in progress.
                marker = keys.OPEN_TX_SUFFIX.pack(detail.write_pointer, base)
                batch.then.append((st.open_tx_prefix + marker, None))
            batch.after.append(lambda: self._notify(topic, st.visible_offset))
            return changed

        return self._write(op)

    # --- reading --------------------------------------------------------------------------
    def read(
        self,
        topic: TopicId,
        *,
        offset: int | None = None,
        start: MessageId | bytes | int | None = None,
        inclusive: bool = True,
        max_messages: int = 500,
        max_bytes: int | None = None,
        tx: Transaction | None = None,
        kafka_batches: bool = False,
    ) -> ReadResult:
        """Messages from ``offset``, a message id (``start`` bytes) or a publish time
        (``start`` int). ``kafka_batches``: rows holding a Kafka batch come as StoredBatch
        items (reader.read), for a Kafka fetch."""
        self._check_open()
        st = self._state(topic)
        now = self._clock()
        nxt = st.visible_offset
        if offset is not None:
            earliest = self._earliest(st, now, nxt)
            if offset < earliest or offset > nxt:
                raise OffsetOutOfRange(offset, earliest, nxt)
            if offset == nxt:
                return ReadResult([], nxt)
            key = st.resume_keys.get(offset)
            if key is not None and key.startswith(st.msg_prefix):
                scan = reader.ScanStart(key, skip_below_offset=offset)
            else:
                scan = reader.start_for_offset(self._backend, st, offset)
        elif isinstance(start, bytes):
            scan = reader.start_for_id(self._backend, st, MessageId(start), inclusive)
        elif isinstance(start, int):
            scan = reader.start_for_time(st, start, inclusive)
        else:
            scan = reader.ScanStart(st.msg_prefix)
        if offset is None and st.start_offset > max(scan.skip_below_offset, 0):
            scan.skip_below_offset = st.start_offset  # below the log start: deleted
        res = reader.read(
            self._backend,
            st,
            scan,
            now_ms=now,
            max_messages=max(1, max_messages),
            max_bytes=max_bytes,
            tx=tx,
            next_offset=nxt,
            sealed=self.transactions.visibility_now,
            kafka_batches=kafka_batches,
        )
        last = res.rows[-1] if res.rows else None  # (id, payload, offset, ts, wp, meta)
        hint = None
        if res.split is not None:
            # The read stopped inside a packed row: the next read by offset starts there.
            hint = res.split
        elif type(last) is StoredBatch:  # its row was read whole: as below
            hint = last.key + b"\x00"
        elif last is not None and last[4] is None and last[0].endswith(_NO_PAYLOAD_ID):
            # The last message's row (plain, no transaction) was read whole, so the rows
            # for every later offset have greater keys: the next read by offset can start
            # right after it instead of searching.
            hint = st.msg_prefix + last[0][:10] + b"\x00"
        if hint is not None:
            hints = st.resume_keys
            if len(hints) >= _RESUME_KEYS:
                hints.clear()  # atomic, unlike evicting one while other readers do too
            hints[res.next_offset] = hint
        return res

    def poll(
        self,
        topic: TopicId,
        start: MessageId | bytes | int | None = None,
        inclusive: bool = True,
        limit: int = 100,
        tx: Transaction | None = None,
        offset: int | None = None,
    ) -> list[Message]:
        """The seed's poll: up to ``limit`` messages from a message id, a time or an offset."""
        return self.read(
            topic, offset=offset, start=start, inclusive=inclusive, max_messages=limit, tx=tx
        ).messages

    def offsets(self, topic: TopicId) -> tuple[int, int]:
        """(earliest, next): the dense offset range currently readable."""
        self._check_open()
        st = self._state(topic)
        nxt = st.visible_offset
        return self._earliest(st, self._clock(), nxt), nxt

    def delete_records(self, topic: TopicId, offset: int) -> int:
        """Kafka's DeleteRecords: move the log start up to ``offset`` (-1: the next
        offset), durably; offsets below it read as out of range from now on, and the
        janitor deletes their rows. Never moves back. -> the new earliest offset.
        OffsetOutOfRange past the next offset."""
        self._check_open()
        st = self._leading(topic)
        nxt = st.visible_offset
        earliest = self._earliest(st, self._clock(), nxt)
        if offset < 0:
            offset = nxt
        if offset > nxt:
            raise OffsetOutOfRange(offset, earliest, nxt)
        if offset > st.start_offset:
            doc = {"generation": st.metadata.generation, "offset": offset}
            self.put_states({(_LOG_START, str(topic)): json.dumps(doc).encode()})
            st.start_offset = max(st.start_offset, offset)
            st.resume_keys.clear()
        return max(earliest, min(st.start_offset, nxt))

    def _earliest(self, st: TopicState, now: int, nxt: int) -> int:
        """The earliest readable offset, never above ``nxt`` (the caller's view of the
        visible end: the writer may move it on meanwhile, and the pair must agree)."""
        return max(self._first_offset(st, now, nxt), min(st.start_offset, nxt))

    def _first_offset(self, st: TopicState, now: int, nxt: int) -> int:
        """The first row's offset at or above the TTL's log start."""
        # The first row at or above the log start (the retention floor in whole steps,
        # see reader.log_start_ms) stays the first while the floor has not passed it:
        # rows are only appended above it, and the janitor deletes only rows below the
        # floor (or of older generations: another prefix, so another floor, which the
        # check below refuses).
        floor = reader.log_start_key(st, now)
        cached = st.first_row
        # Valid while the floor has not passed the row nor gone back (a longer ttl, or
        # none, uncovers older rows again).
        if cached is not None and cached[0] <= floor <= cached[1]:
            return min(cached[2], nxt)
        row = reader.first_row_at(self._backend, st, floor)
        if row is None or row[1] >= nxt:  # nothing visible yet: not cached
            return nxt
        st.first_row = (floor, *row)
        return row[1]

    def offset_for_time(self, topic: TopicId, ts_ms: int) -> int:
        """The first offset published at or after ``ts_ms`` (the next offset if none)."""
        self._check_open()
        st = self._state(topic)
        key = max(
            reader.start_for_time(st, ts_ms, True).key, reader.ttl_floor_key(st, self._clock())
        )
        return reader.first_offset_at(self._backend, st, key, st.visible_offset)

    def last_stable_offset(self, topic: TopicId) -> int:
        """The offset of the first entry whose transaction is still in progress, else next."""
        self._check_open()
        st = self._state(topic)
        with st.lock:
            st.open_tx_rows = [
                r for r in st.open_tx_rows if self.transactions.is_in_progress(r.write_pointer)
            ]
            if st.open_tx_rows:
                return min(r.base_offset for r in st.open_tx_rows)
        return st.visible_offset

    # --- notifications --------------------------------------------------------------------
    def add_listener(self, listener: Listener) -> None:
        """``listener(topic, next_offset)`` runs on the writer thread after data is durable."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def add_topic_listener(self, listener: TopicListener) -> None:
        """``listener(metadata)`` runs on the writer thread after a topic was created,
        changed or deleted (generation < 0), whoever did it (Kafka, HTTP, tools)."""
        self._topic_listeners.append(listener)

    def remove_topic_listener(self, listener: TopicListener) -> None:
        if listener in self._topic_listeners:
            self._topic_listeners.remove(listener)

    def _topic_changed(self, md: TopicMetadata) -> None:
        for listener in list(self._topic_listeners):
            try:
                listener(md)
            except Exception:
                log.exception("topic listener failed")

    def _made_visible(self, st: TopicState, next_offset: int) -> None:
        if next_offset > st.visible_offset:
            st.visible_offset = next_offset
        self._notify(st.topic, st.visible_offset)

    def _notify(self, topic: TopicId, next_offset: int) -> None:
        for listener in list(self._listeners):
            try:
                listener(topic, next_offset)
            except Exception:
                log.exception("store listener failed")

    def _tx_finished(self, wp: int) -> None:
        # The topics that ever had rows of this pointer (kept apart from open_tx_rows: a
        # concurrent last_stable_offset() may already have pruned those), not every loaded
        # topic: a Kafka transaction ends hundreds of times a second.
        for topic in self._rows.tx_topics.pop(wp, ()):
            st = self._states.get(topic)
            if st is not None:
                self._notify(topic, st.visible_offset)

    # --- small durable state (groups, producers, ...) -------------------------------------
    def get_state(self, area: str, key: str) -> bytes | None:
        self._check_open()
        return self.tables.metadata.state(area, key)

    def put_state(self, area: str, key: str, value: bytes | None) -> None:
        self.put_states({(area, key): value})

    def put_states(self, updates: StateUpdates) -> None:
        self.put_states_async(updates).result()

    def start_with_states_async(
        self, timeout_s: float, states_of: Callable[[int], StateUpdates]
    ) -> tuple[Transaction, Future[object]]:
        """Start a transaction and write the state rows ``states_of(write pointer)``
        returns in the same operation (a Kafka transaction's record, which names it) ->
        the transaction at once, and the future of the write. The transaction may be used
        only once the future resolved."""
        self._check_open()
        return self.transactions.start_queued(timeout_s, lambda wp: _state_mutations(states_of(wp)))

    def put_states_async(
        self, updates: StateUpdates, fence: Callable[[], bool] | None = None
    ) -> Future[object]:
        """Queue the updates for the next durable batch; the future resolves once they are
        on disk. Writes queued one after another from one thread reach the disk in that
        order (the writer is first in, first out). ``fence``: asked on the writer right
        before the rows join a batch; False refuses them (NotTransactionLeader): the rows
        of a role held by lease (the cluster's transaction coordinator's records)."""
        self._check_open()
        mutations = _state_mutations(updates)
        if fence is None:
            return self._writer.mutate(mutations)

        def op(batch: Batch) -> None:
            if not fence():
                raise NotTransactionLeader("its lease ran out before the write")
            batch.mutations.extend(mutations)

        return self._writer.submit(op)

    def sync_clock(self) -> None:
        """Order this process's later writes after every earlier write to the store by any
        process (Backend.sync_clock): when it takes over a role (the groups)."""
        self._backend.sync_clock()

    def scan_state(self, area: str, prefix: str = "") -> list[tuple[str, bytes]]:
        self._check_open()
        return self.tables.metadata.states(area, prefix)

    # --- housekeeping ---------------------------------------------------------------------
    def cleanup(self) -> dict[str, int]:
        """One janitor pass: expire transactions, drop expired and old-generation data."""
        self._check_open()
        return run_cleanup(self._housekeeping)

    def compact(self) -> dict[str, int]:
        """One run of the compaction cleaner over every compacted topic (compaction.py);
        the janitor's thread runs it every CompactionSettings.backoff_ms."""
        self._check_open()
        return self.cleaner.run()

    def compaction_status(self, topic: TopicId) -> dict[str, Any] | None:
        """A compacted topic's cleaning (Cleaner.status); None for a topic not compacted."""
        self._check_open()
        md = self._require(topic)
        return self.cleaner.status(md) if is_compacted(md.properties) else None

    def add_rewrite_listener(self, listener: TopicListener) -> None:
        """``listener(metadata)`` after the cleaner rewrote rows of a topic: what was read
        of it before (a cache of fetched batches) may hold messages it removed."""
        self._rewrite_listeners.append(listener)

    def remove_rewrite_listener(self, listener: TopicListener) -> None:
        if listener in self._rewrite_listeners:
            self._rewrite_listeners.remove(listener)

    def _rows_rewritten(self, md: TopicMetadata) -> None:
        for listener in list(self._rewrite_listeners):
            try:
                listener(md)
            except Exception:
                log.exception("rewrite listener failed")

    @property
    def writes_refused(self) -> bool:
        """True while the disk is full: publishes and stores raise DiskFull at once;
        reads, deletes, metadata and state writes go on (docs/storage-api.md)."""
        space = self._space
        return space is not None and space.refused

    def disk_space(self) -> dict[str, int]:
        """writes_refused (0/1), free_bytes (measured now), reserve_bytes, resume_bytes."""
        if self._space is None:
            return {"writes_refused": 0, "free_bytes": 0, "reserve_bytes": 0, "resume_bytes": 0}
        return self._space.stats()

    def log_dir(self) -> tuple[str, int, int]:
        """Where the store keeps its data, with the file system's total and usable bytes
        (Kafka's DescribeLogDirs); an engine without a local directory (memory, HBase)
        answers its URL scheme and -1, -1."""
        path = self._backend.path
        if not path:
            return type(self._backend).__name__, -1, -1
        usage = shutil.disk_usage(path)
        return os.path.abspath(path), usage.total, usage.free

    def topic_bytes(self, topic: TopicId) -> int:
        """The bytes of a topic's rows, PayloadTable rows of open transactions aside: a
        scan of its MessageTable rows (what DescribeLogDirs reports as its size)."""
        self._check_open()
        st = self._state(topic)
        return sum(len(v) for _, v in self.tables.messages.topic_rows(st))

    def pause_writes_before(self, hook: Callable[[list[Mutation]], None] | None) -> None:
        """Fault tests only: ``hook`` sees each durable write's mutations just before the
        write, on the writer thread, and may block it (kill -9 there)."""
        self._writer.before_write = hook

    def writer_stats(self) -> dict[str, float]:
        """The writer's counts since start: durable batches written, operations in them,
        seconds spent writing them (fsync included), batches that failed."""
        w = self._writer
        return {
            "batches": w.batches,
            "operations": w.operations,
            "write_seconds": w.write_seconds,
            "failed_batches": w.failed_batches,
        }

    def close(self) -> None:
        if self._closed:
            return
        if self._janitor is not None:
            self._janitor.stop()
        self._writer.close()
        self._closed = True
        self._backend.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- internals ------------------------------------------------------------------------
    def _put_metadata(self, batch: Batch, md: TopicMetadata, fresh: bool) -> None:
        """Write a topic's metadata row in ``batch`` (on the writer thread). ``fresh``: a
        new or deleted generation, whose in-memory state starts over."""
        batch.mutations.append((keys.topic_meta_key(md.topic), encode_metadata(md)))
        batch.after.append(functools.partial(self._topic_changed, md))
        with self._lock:
            self._metadata[md.topic] = md
            if fresh:
                self._states.pop(md.topic, None)
            elif (st := self._states.get(md.topic)) is not None:
                st.metadata = md

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed("the store is closed")

    def _refuse_if_full(self) -> None:
        space = self._space
        if space is not None and space.refused:  # one attribute read while not full
            space.check_writable()

    def _write(self, op: Callable[[Batch], object]) -> object:
        self._check_open()
        return self._writer.submit(op).result()

    def _topic_metadata(self, topic: TopicId) -> TopicMetadata | None:
        with self._lock:
            md = self._metadata.get(topic)
            if md is not None or (topic in self._metadata and not self._shared):
                return md
            md = self.tables.metadata.topic(topic)
            if md is not None or not self._shared:  # shared: another gateway may create it
                self._metadata[topic] = md
            return md

    def _require(self, topic: TopicId) -> TopicMetadata:
        md = self._topic_metadata(topic)
        if md is None or md.generation <= 0:
            raise TopicNotFound(topic)
        return md

    def _topics_to_clean(self) -> list[TopicMetadata]:
        """What the janitor cleans: every topic; with a shared store, the live topics this
        process leads (their leader alone writes their checkpoints) and deleted ones."""
        found = self.all_topic_metadata()
        if not self._shared:
            return found
        return [md for md in found if md.generation <= 0 or md.topic in self._led]

    def _leading(self, topic: TopicId) -> TopicState:
        """The state of a topic this process is about to write (on the writer thread):
        with a shared store, only a topic it leads (NotLeader otherwise)."""
        if self._shared and not self._clock() < self._led.get(topic, 0):
            raise NotLeader(topic, "its lease is held elsewhere or ran out")
        return self._state(topic)

    def _state(self, topic: TopicId) -> TopicState:
        st = self._states.get(topic)
        if st is not None:
            return st
        with self._lock:
            st = self._states.get(topic)
            if st is None:
                md = self._require(topic)
                # Before any row is read. Several gateways: the last pointer the cluster's
                # manager made durable, read now. Every row of the topic so far (the last
                # leader's, or this process's before a reload) is under a pointer it had
                # handed out, so at most this; any later pointer's rows and references are
                # written by this leader through this state. (Unbounded instead, every
                # commit's part would scan each salt bucket of the PayloadTable and read
                # the reference marker: 175 Thrift calls a 6-partition commit, measured.)
                known_wp = (
                    self.tables.metadata.last_write_pointer()
                    if self._shared
                    else self.transactions.issued_high
                )
                st = load_state(self.tables, md, self.transactions.is_in_progress)
                st.start_offset = self._stored_start_offset(md)
                st.known_wp = known_wp
                if st.open_tx_rows:
                    st.open_tx_rows = self._still_open(st)
                if self._shared and topic not in self._led:
                    # Another gateway writes it: this view is current only now, so it is
                    # read again next time (a follower's read).
                    return st
                for row in st.open_tx_rows:
                    self._rows.tx_topics.setdefault(row.write_pointer, set()).add(topic)
                self._states[topic] = st
            return st

    def _stored_start_offset(self, md: TopicMetadata) -> int:
        raw = self.tables.metadata.state(_LOG_START, str(md.topic))
        if raw is None:
            return 0
        doc = json.loads(raw)
        return int(doc["offset"]) if doc.get("generation") == md.generation else 0

    def _still_open(self, st: TopicState) -> list[OpenTxRow]:
        """The open transactional rows whose markers still hold the last stable offset:
        not those whose rows were all rolled back. A rollback negates its rows before it
        deletes their marker, and a crash between the two leaves the marker."""
        bases: dict[int, list[int]] = {}
        for row in st.open_tx_rows:
            bases.setdefault(row.write_pointer, []).append(row.base_offset)
        kept = []
        for row in st.open_tx_rows:
            wp, base = row.write_pointer, row.base_offset
            later = [b for b in bases[wp] if b > base]
            stop = min(later, default=st.next_offset)  # where the next publish of wp starts
            scan = reader.start_for_offset(self._backend, st, base)
            for _, value in self.tables.messages.topic_rows(st, scan.key):
                _, row_base, count, row_wp, *_ = keys.decode_row(value)
                if row_base >= stop:
                    break
                if row_base + count > base and row_wp == wp:
                    kept.append(row)
                    break
        return kept

    @property
    def write_failures(self) -> int:
        """Durable writes that failed so far; state callables use it to drop their views."""
        return self._write_failures

    def _reload(self) -> None:
        """After a failed durable write: forget in-memory state and re-read the backend."""
        self._write_failures += 1
        with self._lock:
            led = list(self._led)
        intents.settle(self._backend, led if self._shared else None)
        with self._lock:
            self._metadata.clear()
            self._states.clear()
        self.transactions.reload(self.tables.metadata)


def _check_kafka_batch(records: bytes | memoryview, count: int) -> None:
    if not 1 <= count <= keys.MAX_PACKED_COUNT:
        raise ValueError(f"a stored Kafka batch holds 1 to {keys.MAX_PACKED_COUNT} records")
    if not keys.KAFKA_BATCH_HEADER < len(records) <= keys.MAX_PACKED_BYTES:
        raise ValueError(f"a stored Kafka batch is at most {keys.MAX_PACKED_BYTES} bytes")


def _write_pointer(tx: TxArg) -> int | None:
    if tx is None:
        return None
    if isinstance(tx, Transaction):
        return tx.write_pointer
    if isinstance(tx, int) and not isinstance(tx, bool) and tx > 0:
        return tx
    raise InvalidTransaction(f"not a transaction or write pointer: {tx!r}")


def _state_mutations(updates: StateUpdates | None) -> list[Mutation]:
    if not updates:
        return []
    return [(keys.state_key(area, key), value) for (area, key), value in updates.items()]
