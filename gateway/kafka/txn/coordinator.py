"""The transaction coordinator: Kafka's transaction protocol over TMS transactions.

A Kafka transaction IS a TMS transaction (the store's one TransactionManager, which the
HTTP API and SDK use too, so ``GET /v1/transactions`` lists it). Its records go to the
PayloadTable under the transaction's write pointer, invisible to everyone; EndTxn(commit)
makes each topic's records one sealed reference row (a run of dense offsets, held from
every reader until the TMS commit) and commits the TMS transaction, which makes every
topic visible at once; the group offsets follow. docs/transactions.md has the whole
mapping; the steps of a commit:

  1. decide      TransactionManager.decide(wp) on the store's writer, after every store
                 of the transaction: no timeout or abort can end it now (refused if a
                 store failed: the Produce was answered before it landed)
  2. record      the transactional id's row in state PrepareCommit (one row: the decision)
  3. reference   Store.publish_sealed_async per topic (idempotent)
  4. commit      TransactionManager.commit_async(wp): every topic visible at once
  5. offsets     the group offsets, committed with the decision's time
  6. complete    the row in state CompleteCommit

Each step is durable before the next starts and each is idempotent, so a restart that
finds a row in PrepareCommit runs steps 3-6 again (``recover``); without a recorded
decision (a row still Ongoing) the transaction is aborted and the producer fenced.
A fresh commit writes steps 2-4 as one write (Store.commit_sealed_async: one fsync
instead of three in a row), whose phases keep that order where the backend is atomic
per row only; a write that lands in part leaves what a stop between those steps leaves,
and a retried EndTxn or a restart takes them one by one.

Several gateways (``--cluster``): the controller coordinates every transactional id
(gateway/cluster_calls.py says why one), since it runs the transaction manager; the
others answer NOT_COORDINATOR and FindCoordinator names it. Step 3 runs on each
partition's leader (gateway/partition_work.py), step 5 on each group's coordinator, and
the records' rows are written only while the controller's lease lasts (fenced). A
partition led elsewhere learns a transaction's write pointer from its record in the
store (``write_pointer_from_store``), which therefore lists every partition added. A new
controller loads the records as a restart does: it finishes recorded commits and aborts
the open transactions, fencing their producers.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import quote, unquote

from tmsgate.protocol import ErrorCode
from tmsgate.storage import StorageError, TopicId, TopicNotFound, TransactionNotInProgress
from tmsgate.storage.transactions import COMMITTED, INCOMPLETE

from ...commits import CommitPlan, Commits, GroupOffsets, Part
from ...partition_work import PartitionWork
from ..groups import GroupError
from ..loading import loaded
from ..store_futures import on_loop
from .links import ClusterLinks
from .model import (
    TXN_AREA,
    CorruptTxnRecord,
    PendingOffset,
    TopicPartition,
    TxnError,
    TxnRecord,
    TxnState,
    decode_record,
    encode_record,
    producing_write_pointer,
)

if TYPE_CHECKING:
    from tmsgate.storage import Store

    from ...cluster_calls import ClusterCalls
    from ..groups import GroupCoordinator
    from ..metrics import Metrics
    from ..pacing import Paced
    from ..producers import ProducerStates
    from ..store_futures import Blocking
    from ..topics import TopicRegistry

log = logging.getLogger("tmsgate.kafka.txn")
E = ErrorCode
T = TypeVar("T")
MAX_EPOCH = 32766  # Kafka: at Short.MAX_VALUE - 1 the producer gets a new id
DEFAULT_MAX_TIMEOUT_MS = 900_000  # Kafka's transaction.max.timeout.ms
DEFAULT_ID_EXPIRATION_MS = 7 * 24 * 3600 * 1000  # Kafka's transactional.id.expiration.ms
IDLE_CHECK_INTERVAL_MS = 60_000  # how often expire() looks for idle transactional ids
# How long a committed transaction's CompleteCommit row may wait to be written: the next
# transaction of the same id usually replaces it first (one write per transaction fewer).
COMPLETE_WRITE_DELAY_S = 0.1


@dataclass(frozen=True, slots=True)
class TxnConfig:
    max_timeout_ms: int = DEFAULT_MAX_TIMEOUT_MS
    id_expiration_ms: int = DEFAULT_ID_EXPIRATION_MS


@functools.lru_cache(maxsize=4096)
def _row_name(transactional_id: str) -> str:
    """The state row's name of a transactional id (quoted: any string may be an id);
    cached, since every transaction writes its id's row once or twice."""
    return quote(transactional_id, safe="")


@functools.lru_cache(maxsize=4096)
def _topic_id_of(namespace: str, topic: str) -> TopicId:
    """TopicId validates its names: built once per topic, as every commit names its
    topics again."""
    return TopicId(namespace, topic)


class _Undecided(Exception):
    """The commit could not be decided (timed out, or a store of its records failed):
    nothing of it was recorded, so it is aborted."""

    def __init__(self, cause: TransactionNotInProgress) -> None:
        super().__init__(str(cause))
        self.state = cause.state


def _discarded(fut: Future[int]) -> None:
    exc = fut.exception()
    if exc is not None and not isinstance(exc, TopicNotFound):
        log.warning("freeing an aborted transaction's records failed: %s", exc)


def _discarded_elsewhere(task: asyncio.Future[int]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.info("freeing an aborted transaction's records elsewhere failed: %s", task.exception())


class _Turn:
    """TxnCoordinator._turn: a class, not an asynccontextmanager, which costs three times
    as much, twice in every transaction."""

    __slots__ = ("lock", "transactional_id")

    def __init__(self, transactional_id: str, lock: asyncio.Lock) -> None:
        self.transactional_id, self.lock = transactional_id, lock

    async def __aenter__(self) -> None:
        await self.lock.acquire()

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, _tb: object
    ) -> None:
        self.lock.release()
        if isinstance(exc, (StorageError, OSError)):
            log.warning("transactional id %r: %s", self.transactional_id, exc)
            raise TxnError(E.COORDINATOR_NOT_AVAILABLE, f"storage: {exc}") from exc


def for_version(code: ErrorCode, version: int, fenced_since: int) -> ErrorCode:
    """PRODUCER_FENCED came with KIP-588; older request versions get INVALID_PRODUCER_EPOCH
    (InitProducerId < v4, AddPartitionsToTxn/AddOffsetsToTxn/EndTxn < v2, TxnOffsetCommit
    < v3), as Kafka answers them."""
    if code is E.PRODUCER_FENCED and version < fenced_since:
        return E.INVALID_PRODUCER_EPOCH
    return code


class TxnCoordinator:
    def __init__(
        self,
        store: Store,
        config: TxnConfig | None = None,
        *,
        run: Blocking,
        paced: Paced,
        topics: TopicRegistry,
        producers: ProducerStates,
        groups: GroupCoordinator,
        metrics: Metrics,
        namespace: str,
    ) -> None:
        """The broker's parts it works with: ``run`` and ``paced`` (its executor, its
        paced loops), ``topics`` (AddPartitionsToTxn's partitions), ``producers`` (new
        producer ids), ``groups`` (a commit's offsets, step 5), ``metrics``, and the
        Kafka ``namespace`` a partition's TMS topic is in."""
        self.store = store
        self.config = config or TxnConfig()
        self.run = run
        self._paced = paced
        self._topics = topics
        self._producers = producers
        self.groups = groups
        self._namespace = namespace
        self._by_id: dict[str, TxnRecord] = {}
        self._by_pid: dict[int, TxnRecord] = {}
        self._by_wp: dict[int, TxnRecord] = {}  # open transactions by write pointer
        self._locks: dict[str, asyncio.Lock] = {}
        self._loading: asyncio.Task[None] | None = None
        # Committed transactions whose CompleteCommit row is not yet queued (_complete).
        self._unwritten: dict[str, TxnRecord] = {}
        self._flush_handle: asyncio.TimerHandle | None = None
        self._next_idle_check = 0  # store time (ms) of the next look for idle ids
        self._ended = metrics.transactions_ended
        self._committed = self._ended.labels("committed")  # labels() costs, once a commit
        metrics.transactions_open.set_function(self.open_count)
        # Several gateways (attach_cluster): where each step runs, and the rows' fence.
        self._links: ClusterLinks | None = None
        self._fence: Callable[[], bool] | None = None
        # The steps after the decision, which every commit takes (gateway/commits.py).
        self._commits = Commits(self.store, PartitionWork(self.store))
        self._commits.commit_offsets = self.commit_group_offsets

    def use_commits(self, commits: Commits) -> None:
        """The gateway's one commit runner (its fault hook, its partitions' work)."""
        self._commits = commits
        commits.commit_offsets = self.commit_group_offsets

    def attach_cluster(self, calls: ClusterCalls) -> None:
        """Several gateways: steps run where their partition or group is, the records are
        written only while this gateway is the controller (links.py)."""
        self._links = ClusterLinks(self, calls)
        self._fence = calls.cluster.may_write_as_controller

    @property
    def coordinates(self) -> bool:
        """Does this gateway coordinate transactional ids now (always, alone)."""
        return self._links is None or self._links.cluster.is_controller

    def reset(self) -> None:
        """The controller's role came or went: forget every record (a new controller
        loads them afresh at its first request, or at once: services.py)."""
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        self._by_id.clear()
        self._by_pid.clear()
        self._by_wp.clear()
        self._unwritten.clear()
        self._loading = None

    # --- life cycle ------------------------------------------------------------------------
    async def ready(self) -> None:
        """Load the records once, finishing decided commits and aborting open transactions
        (the gateway's start-up awaits this before it listens)."""
        if loaded(self._loading) and self._links is None:
            return  # every request after the start: no shield to build
        if not self.coordinates:
            raise TxnError(
                E.NOT_COORDINATOR,
                "transactional ids are coordinated by the controller (FindCoordinator)",
            )
        if loaded(self._loading):
            return
        if self._loading is None:
            self._loading = asyncio.get_running_loop().create_task(self._load())
        try:
            await asyncio.shield(self._loading)
        except Exception as exc:
            self._loading = None
            log.warning("loading Kafka transactions failed (the client retries): %s", exc)
            raise TxnError(E.COORDINATOR_NOT_AVAILABLE, f"loading transactions: {exc}") from exc

    async def _load(self) -> None:
        rows = await self.run(self.store.scan_state, TXN_AREA)
        for key, raw in rows:
            try:
                self._register(decode_record(unquote(key), raw))
            except CorruptTxnRecord as exc:
                log.error("skipping transaction record %r: %s", key, exc)
        for rec in list(self._by_id.values()):
            if rec.state is TxnState.PREPARE_COMMIT:
                log.info(
                    "transactional id %r: finishing the commit of write pointer %d decided "
                    "before the restart",
                    rec.transactional_id,
                    rec.write_pointer,
                )
                if self._redecide(rec):
                    await self._apply_commit(rec, replay=True)
                    self._ended.labels("recovered").inc()
                else:
                    await self._persist(rec)
            elif rec.state.is_open:
                log.info(
                    "transactional id %r: aborting write pointer %d, open when the gateway "
                    "stopped; producer %d fenced",
                    rec.transactional_id,
                    rec.write_pointer,
                    rec.producer_id,
                )
                await self._abort(rec, fence=True)
        log.info("loaded %d transactional ids", len(self._by_id))

    def _redecide(self, rec: TxnRecord) -> bool:
        """After a restart: the decision of a recorded commit holds again (unless the TMS
        commit already happened, which the replay then skips)."""
        impossible = self._commits.redecide(rec.write_pointer)
        if impossible is None:
            return True
        # Cannot happen (a decided transaction is never aborted or invalidated), but a
        # gateway must start: the transaction is reported lost, not half applied.
        log.error(
            "transactional id %r: commit of write pointer %d was decided but the "
            "transaction is %s; dropping it",
            rec.transactional_id,
            rec.write_pointer,
            impossible,
        )
        rec.clear_transaction(TxnState.COMPLETE_ABORT, self.store.now_ms())
        return False

    def _register(self, rec: TxnRecord) -> None:
        old = self._by_id.get(rec.transactional_id)
        if old is not None and self._by_pid.get(old.producer_id) is old:
            del self._by_pid[old.producer_id]
        self._by_id[rec.transactional_id] = rec
        self._by_pid[rec.producer_id] = rec
        if rec.state.is_open:
            self._by_wp[rec.write_pointer] = rec

    def _lock(self, transactional_id: str) -> asyncio.Lock:
        lock = self._locks.get(transactional_id)
        if lock is None:
            lock = self._locks[transactional_id] = asyncio.Lock()
        return lock

    def _turn(self, transactional_id: str) -> _Turn:
        """One request of a transactional id at a time; a storage failure becomes
        COORDINATOR_NOT_AVAILABLE, which clients retry."""
        return _Turn(transactional_id, self._lock(transactional_id))

    async def _persist(self, rec: TxnRecord) -> None:
        await on_loop(self._queue_persist(rec))

    def _queue_persist(self, rec: TxnRecord) -> Future[object]:
        """Queue the record's durable write now (from the event loop, so the writes of one
        transactional id reach the disk in the order they were queued)."""
        self._unwritten.pop(rec.transactional_id, None)  # this write replaces that one
        return self.store.put_states_async(self._record_row(rec), self._fence)

    def _complete(self, rec: TxnRecord) -> None:
        """Write a committed transaction's CompleteCommit row soon, not now: the commit is
        whole without it (a restart that still finds PrepareCommit replays the steps,
        which change nothing now, and a replay never moves a group offset back), and the
        producer's next transaction replaces the row anyway, usually well within
        COMPLETE_WRITE_DELAY_S. Saves one write per transaction of a busy producer."""
        self._unwritten[rec.transactional_id] = rec
        if self._flush_handle is None:
            loop = asyncio.get_running_loop()
            self._flush_handle = loop.call_later(COMPLETE_WRITE_DELAY_S, self.flush_complete)

    def flush_complete(self) -> Future[object] | None:
        """Queue the CompleteCommit rows not yet written (also at shutdown) -> the write."""
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        if not self._unwritten:
            return None
        rows: dict[tuple[str, str], bytes | None] = {}
        for rec in self._unwritten.values():
            rows.update(self._record_row(rec))
        self._unwritten.clear()
        written = self.store.put_states_async(rows, self._fence)
        written.add_done_callback(self._log_failed_write)
        return written

    @staticmethod
    def _record_row(rec: TxnRecord) -> dict[tuple[str, str], bytes | None]:
        return {(TXN_AREA, _row_name(rec.transactional_id)): encode_record(rec)}

    # --- InitProducerId ----------------------------------------------------------------------
    async def init_producer(
        self, transactional_id: str, timeout_ms: int, producer_id: int, epoch: int
    ) -> tuple[int, int]:
        """-> (producer id, epoch). Each call bumps the epoch, fencing the previous
        instance, after aborting its open transaction. ``producer_id``/``epoch`` (v3+,
        KIP-360): a producer asking to bump its own epoch; -1 for a new instance."""
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            raise TxnError(
                E.INVALID_TRANSACTION_TIMEOUT,
                f"transaction.timeout.ms={timeout_ms} is not within "
                f"1..{self.config.max_timeout_ms} (transaction.max.timeout.ms)",
            )
        await self.ready()
        async with self._turn(transactional_id):
            rec = self._by_id.get(transactional_id)
            if rec is None:
                pid = await self._producers.allocate_id()
                rec = TxnRecord(
                    transactional_id, pid, 0, timeout_ms, updated_ms=self.store.now_ms()
                )
                await self._persist(rec)
                self._register(rec)
                return rec.producer_id, rec.epoch
            named = (producer_id, epoch)
            if producer_id >= 0 and named == rec.previous and rec.state is TxnState.EMPTY:
                return rec.producer_id, rec.epoch  # a retry of the bump that made this epoch
            if producer_id >= 0 and named != (rec.producer_id, rec.epoch):
                raise TxnError(
                    E.PRODUCER_FENCED,
                    f"producer {producer_id} epoch {epoch} is not the current instance of "
                    f"{transactional_id!r} ({rec.producer_id} epoch {rec.epoch})",
                )
            if rec.state is TxnState.PREPARE_COMMIT:
                # A decided commit whose steps failed: it is finished, never aborted.
                try:
                    await self._apply_commit(rec, replay=False)
                except _Undecided:  # never decided after all: aborted below
                    rec.move(TxnState.ONGOING)
            if rec.state.is_open:
                await self._abort(rec, fence=False)
            await self._bump(rec, own=producer_id >= 0)
            rec.timeout_ms = timeout_ms
            rec.clear_transaction(TxnState.EMPTY, self.store.now_ms())
            await self._persist(rec)
            return rec.producer_id, rec.epoch

    async def _bump(self, rec: TxnRecord, own: bool = False) -> None:
        """The next epoch. ``own``: the producer asked for it naming its own epoch
        (KIP-360); only then is a retry naming the old epoch answered as it was."""
        rec.previous = (rec.producer_id, rec.epoch) if own else (-1, -1)
        if rec.epoch >= MAX_EPOCH:
            # A new producer id, as Kafka does; the old one fenced with it.
            self._by_pid.pop(rec.producer_id, None)
            rec.producer_id = await self._producers.allocate_id()
            rec.epoch = 0
            self._by_pid[rec.producer_id] = rec
        else:
            rec.epoch += 1

    # --- the transaction's members ----------------------------------------------------------
    def _current(self, transactional_id: str, producer_id: int, epoch: int) -> TxnRecord:
        rec = self._by_id.get(transactional_id)
        if rec is None or rec.producer_id != producer_id:
            raise TxnError(
                E.INVALID_PRODUCER_ID_MAPPING,
                f"producer {producer_id} is not the producer of transactional id "
                f"{transactional_id!r} (InitProducerId first)",
            )
        if epoch != rec.epoch:
            raise TxnError(
                E.PRODUCER_FENCED,
                f"producer epoch {epoch} of {transactional_id!r} was fenced by epoch {rec.epoch}",
            )
        if rec.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            raise TxnError(
                E.CONCURRENT_TRANSACTIONS,
                f"the transaction of {transactional_id!r} is still ending ({rec.state.value})",
            )
        return rec

    async def _begin(self, rec: TxnRecord) -> None:
        """Start the TMS transaction and record it (Ongoing, with the write pointer), both
        durable before the request that began it is answered, as Kafka writes its
        transaction log first: a restart then knows the transaction, aborts it and fences
        the producer. Were the answer to go first, a restart could lose both, and the
        producer's EndTxn would read as a retry of its previous commit (answered as
        committed, its records lost), or its next AddPartitionsToTxn would start afresh
        without what it had already produced. The two are one operation of the store's
        writer; the Produce requests and commit that follow queue behind it."""
        if rec.state is TxnState.ONGOING:
            return
        now = self.store.now_ms()

        def record(wp: int) -> dict[tuple[str, str], bytes | None]:
            rec.clear_transaction(TxnState.ONGOING, now)
            rec.write_pointer, rec.started_ms = wp, now
            self._unwritten.pop(rec.transactional_id, None)  # this write replaces that one
            return self._record_row(rec)

        # A second more than Kafka's timeout: the coordinator's own expiry (which fences the
        # producer, as Kafka does) normally gets there first.
        try:
            tx, started = self.store.start_with_states_async(rec.timeout_ms / 1000 + 1.0, record)
        except Exception:
            if rec.state is TxnState.ONGOING:  # recorded as begun, but nothing was queued
                rec.clear_transaction(TxnState.COMPLETE_ABORT, now)
            raise
        wp = tx.write_pointer
        self._by_wp[wp] = rec
        try:
            await on_loop(started)
        except Exception as exc:
            # Not started after all: the next AddPartitionsToTxn starts afresh (a record
            # that landed without its transaction is aborted at the restart as a no-op).
            log.warning(
                "transactional id %r: starting a transaction failed: %s", rec.transactional_id, exc
            )
            if rec.write_pointer == wp and rec.state is TxnState.ONGOING:
                self._by_wp.pop(wp, None)
                rec.clear_transaction(TxnState.COMPLETE_ABORT, self.store.now_ms())
            raise

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        topics: list[tuple[str, list[int]]],
    ) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn: per-partition codes. One unknown partition fails the
        request: the others get OPERATION_NOT_ATTEMPTED, as in Kafka."""
        await self.ready()
        async with self._turn(transactional_id):
            rec = self._current(transactional_id, producer_id, epoch)
            codes: dict[TopicPartition, ErrorCode] = {}
            stored: set[str] = set()  # the partitions' TMS topics (rec.topics holds those)
            registry = self._topics
            async for name, partitions in self._paced(topics):
                info, code = await registry.resolve(name)
                for p in partitions:
                    part = await registry.partition(info, p) if info is not None else None
                    if part is not None:
                        stored.add(part.id.topic)
                        code = E.NONE
                    elif info is not None:
                        code = E.UNKNOWN_TOPIC_OR_PARTITION
                    codes[(name, p)] = code
            if any(codes.values()):
                return {tp: c or E.OPERATION_NOT_ATTEMPTED for tp, c in codes.items()}
            await self._begin(rec)
            added = stored - rec.topics
            rec.topics.update(stored)
            if added and self._links is not None:
                # Several gateways: the partitions' leaders read the record to take the
                # transaction's records (write_pointer_from_store), so it names them all.
                await self._persist(rec)
            return codes

    async def add_offsets(
        self, transactional_id: str, producer_id: int, epoch: int, group_id: str
    ) -> None:
        """AddOffsetsToTxn: the group's offsets will commit with the transaction."""
        await self.ready()
        async with self._turn(transactional_id):
            rec = self._current(transactional_id, producer_id, epoch)
            await self._begin(rec)
            rec.groups.add(group_id)

    def pending_offsets(
        self, transactional_id: str, producer_id: int, epoch: int, group_id: str
    ) -> dict[TopicPartition, PendingOffset]:
        """TxnOffsetCommit: where the transaction keeps the group's offsets until EndTxn
        (the caller fills it, after the group's own checks)."""
        rec = self._current(transactional_id, producer_id, epoch)
        if rec.state is not TxnState.ONGOING or group_id not in rec.groups:
            raise TxnError(
                E.INVALID_TXN_STATE,
                f"group {group_id!r} was not added to the transaction of "
                f"{transactional_id!r} (AddOffsetsToTxn first)",
            )
        return rec.offsets.setdefault(group_id, {})

    def unstable_offsets(self, group_id: str) -> set[TopicPartition]:
        """Partitions of the group with offsets an open transaction will commit
        (OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for those)."""
        out: set[TopicPartition] = set()
        for rec in self._by_wp.values():  # the open transactions only
            if rec.state.is_open:
                out.update(rec.pending_for(group_id))
        return out

    def write_pointer_for(
        self, transactional_id: str, producer_id: int, epoch: int, topic: str
    ) -> int:
        """Produce: the write pointer a transactional batch is stored under. ``topic``:
        the partition's TMS topic name. The producer id must be the transactional id's
        (Kafka's check since KIP-890): the request's id is the one whose ACL was checked."""
        rec = self._by_pid.get(producer_id)
        if rec is not None and rec.transactional_id != transactional_id:
            rec = None  # another transactional id's producer
        return producing_write_pointer(rec, transactional_id, producer_id, epoch, topic)

    async def write_pointer_from_store(
        self, transactional_id: str, producer_id: int, epoch: int, topic: str
    ) -> int:
        """write_pointer_for on a partition's leader that is not the controller (several
        gateways): from the transactional id's record (links.py)."""
        assert self._links is not None
        return await self._links.write_pointer_from_store(
            transactional_id, producer_id, epoch, topic, _row_name(transactional_id)
        )

    async def add_offsets_anywhere(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        group_id: str,
        offsets: dict[TopicPartition, PendingOffset],
    ) -> None:
        """TxnOffsetCommit's offsets into the transaction (pending_offsets), on the
        controller when this gateway is another one (the group's coordinator)."""
        if self._links is None or self.coordinates:
            await self.ready()
            self.pending_offsets(transactional_id, producer_id, epoch, group_id).update(offsets)
            return
        await self._links.send_offsets(transactional_id, producer_id, epoch, group_id, offsets)

    def offsets_ended(self, group_id: str, transactional_id: str) -> None:
        if self._links is not None:
            self._links.offsets_ended(group_id, transactional_id)

    def unstable_anywhere(self, group_id: str) -> set[TopicPartition]:
        """unstable_offsets; on a group coordinator that is not the controller, the
        offsets it sent to transactions still open (links.py)."""
        if self._links is None or self.coordinates:
            return self.unstable_offsets(group_id)
        return self._links.unstable(group_id)

    # --- EndTxn -----------------------------------------------------------------------------
    async def end(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> None:
        await self.ready()
        async with self._turn(transactional_id):
            rec = self._by_id.get(transactional_id)
            if rec is not None and rec.state is TxnState.PREPARE_COMMIT and commit:
                # A commit whose steps failed (storage error): the client retries.
                self._current_ids(rec, transactional_id, producer_id, epoch)
                await self._commit_or_abort(rec, whole=False)
                return
            rec = self._current(transactional_id, producer_id, epoch)
            done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
            if rec.state is done:
                return  # a retry of the request that ended it
            if rec.state is not TxnState.ONGOING:
                raise TxnError(
                    E.INVALID_TXN_STATE,
                    f"{'commit' if commit else 'abort'} of {transactional_id!r} in state "
                    f"{rec.state.value}",
                )
            if not commit:
                await self._abort(rec, fence=False)
                return
            rec.move(TxnState.PREPARE_COMMIT)
            rec.decided_ms = self.store.now_ms()
            await self._commit_or_abort(rec, whole=not self._commits.stepwise)

    async def _commit_or_abort(self, rec: TxnRecord, whole: bool) -> None:
        """Commit (decided on the store's writer, after every store of the transaction);
        if it cannot be decided, abort it and fence the producer, as Kafka does when a
        transaction times out."""
        try:
            await self._apply_commit(rec, replay=False, whole=whole)
        except _Undecided as exc:
            rec.move(TxnState.ONGOING)
            await self._abort(rec, fence=True)
            failed = exc.state == INCOMPLETE
            self._ended.labels("failed" if failed else "timed_out").inc()
            why = "a write of its records failed" if failed else "it timed out"
            raise TxnError(
                E.PRODUCER_FENCED,
                f"the transaction of {rec.transactional_id!r} was aborted: {why}",
            ) from None

    @staticmethod
    def _current_ids(rec: TxnRecord, transactional_id: str, producer_id: int, epoch: int) -> None:
        if rec.producer_id != producer_id or rec.epoch != epoch:
            raise TxnError(
                E.PRODUCER_FENCED, f"producer {producer_id} epoch {epoch} of {transactional_id!r}"
            )

    async def _apply_commit(self, rec: TxnRecord, replay: bool, whole: bool = False) -> None:
        """Steps 2-6 of a commit (the module docstring); each is durable before the next,
        and each may run again; 3-5 are every commit's (gateway/commits.py). ``whole``:
        steps 2-4 as one write (a fresh decision; a retry or replay takes them one by
        one). Unless ``replay``, the commit is decided first, on the store's writer after
        every store of the transaction (in the one write when ``whole``): _Undecided if it
        cannot be, with nothing recorded. On a storage error the record stays
        PrepareCommit (a retried EndTxn, or the next start, carries on) and the client is
        told to retry."""
        wp = rec.write_pointer
        plan = self._plan(rec)
        if whole and self._links is not None:
            # One write only where every partition is led here: elsewhere the leaders
            # seal theirs (step 3 as calls), after the decision (step 2) is durable.
            whole = all(self.store.leads(p.topic) for p in plan.parts)
        try:
            if not replay and not whole:
                await self._decide(wp)
            if not replay:
                await self._commits.step("record")
            records = 0
            if whole:
                # Steps 2-4 as one durable write (Store.commit_sealed_async), ordered so
                # that a write landing in part is finished by the replay.
                try:
                    referenced = await on_loop(
                        self.store.commit_sealed_async(
                            wp, [p.topic for p in plan.parts], self._record_row(rec)
                        )
                    )
                except TransactionNotInProgress as exc:  # decide() refused: nothing written
                    raise _Undecided(exc) from exc
                records = sum(referenced)
            elif not replay:
                await self._persist(rec)  # the decision
            records += await self._commits.run(plan, replay, parts_done=whole)
            rec.clear_transaction(TxnState.COMPLETE_COMMIT, self.store.now_ms())
            self._complete(rec)
            self._by_wp.pop(wp, None)
        except (StorageError, OSError, GroupError, TxnError) as exc:
            log.error(
                "commit of %r (write pointer %d) stopped: %s; it is finished by a retried "
                "EndTxn or at the next start",
                rec.transactional_id,
                wp,
                exc,
            )
            raise TxnError(E.COORDINATOR_NOT_AVAILABLE, f"commit not finished: {exc}") from exc
        self._committed.inc()
        log.debug("committed %r wp=%d: %d records", rec.transactional_id, wp, records)

    def _plan(self, rec: TxnRecord) -> CommitPlan:
        """A recorded commit's plan: a sealed part on every partition it wrote, the group
        offsets it carries."""
        return CommitPlan(
            rec.write_pointer,
            tuple(Part(self._topic_id(t)) for t in sorted(rec.topics)),
            {
                group: {tp: (o.offset, o.leader_epoch, o.metadata) for tp, o in offsets.items()}
                for group, offsets in rec.offsets.items()
            },
            rec.decided_ms,
            rec.transactional_id,
        )

    async def commit_group_offsets(
        self, plan: CommitPlan, group_id: str, offsets: GroupOffsets, replay: bool
    ) -> None:
        """Step 5 for one group, on the group's coordinator (here, or elsewhere)."""
        if self._links is None or self._links.serves_group(group_id):
            await self.groups.commit_transactional(group_id, dict(offsets), plan.decided_ms, replay)
        else:
            await self._links.commit_offsets(plan, group_id, offsets, replay)

    async def _decide(self, wp: int) -> None:
        try:
            await on_loop(self.store.decide_async(wp))
        except TransactionNotInProgress as exc:
            if exc.state == COMMITTED:
                # A retried EndTxn of a commit that stopped after the TMS commit (its
                # group offsets failed): committed, so carried on, never aborted.
                return
            raise _Undecided(exc) from exc

    @staticmethod
    def _log_failed_write(fut: Future[object]) -> None:
        exc = fut.exception()
        if exc is not None:
            log.warning("writing a transaction record failed (replayed at restart): %s", exc)

    def _topic_id(self, topic: str) -> TopicId:
        """A TMS topic of rec.topics (a partition: ``name`` or ``name~p``)."""
        return _topic_id_of(self._namespace, topic)

    async def _abort(self, rec: TxnRecord, fence: bool) -> None:
        """Abort the open transaction: its PayloadTable rows are never referenced and its
        write pointer joins the invalid list. ``fence``: bump the epoch too (a timeout, a
        restart), so the producer learns its transaction is gone."""
        wp, topics = rec.write_pointer, sorted(rec.topics)
        if wp:
            # Timed out in the transaction manager already: invalid either way.
            with contextlib.suppress(TransactionNotInProgress):
                await on_loop(self.store.transactions.abort_async(wp))
            for topic in topics:  # its records can never be read: free their space now
                tid = self._topic_id(topic)
                if self._links is None or self.store.leads(tid):
                    self.store.discard_payloads_async(tid, wp).add_done_callback(_discarded)
                else:  # on its leader; if that fails, the leader's janitor frees them
                    task = asyncio.ensure_future(self._commits.partitions.discard(tid, wp))
                    task.add_done_callback(_discarded_elsewhere)
        if self._links is not None and rec.groups:
            self._links.tell_groups_ended(rec)
        if fence:
            await self._bump(rec)
        rec.clear_transaction(TxnState.COMPLETE_ABORT, self.store.now_ms())
        await self._persist(rec)
        self._by_wp.pop(wp, None)
        self._ended.labels("aborted").inc()

    async def expire(self) -> list[str]:
        """Abort (and fence) every transaction open longer than its timeout."""
        if self._loading is None or not self._loading.done():
            return []
        now = self.store.now_ms()
        expired = []
        for rec in list(self._by_wp.values()):
            if rec.state is TxnState.ONGOING and now > rec.started_ms + rec.timeout_ms:
                async with self._lock(rec.transactional_id):
                    if rec.state is TxnState.ONGOING and now > rec.started_ms + rec.timeout_ms:
                        await self._abort(rec, fence=True)
                        self._ended.labels("timed_out").inc()
                        expired.append(rec.transactional_id)
        if now >= self._next_idle_check:
            self._next_idle_check = now + IDLE_CHECK_INTERVAL_MS
            await self.forget_idle()
        return expired

    async def forget_idle(self) -> list[str]:
        """Kafka's transactional.id.expiration.ms: a transactional id with no transaction
        open and no state change for that long is forgotten, its row deleted. Its producer
        id no longer maps to it (INVALID_PRODUCER_ID_MAPPING), DescribeTransactions does
        not know it, and a later InitProducerId starts it afresh (a new producer id,
        epoch 0). Without this, every transactional id ever used stays in memory and on
        disk (applications that make a new id per run or per task). ``expire`` calls this
        once a minute. -> the ids forgotten."""
        now = self.store.now_ms()
        limit = self.config.id_expiration_ms
        forgotten = []
        for rec in [r for r in self._by_id.values() if not r.state.is_open]:
            if now - rec.updated_ms <= limit:
                continue
            tid = rec.transactional_id
            async with self._lock(tid):
                if self._by_id.get(tid) is not rec or rec.state.is_open:
                    continue  # used again meanwhile
                if now - rec.updated_ms <= limit:
                    continue
                self._unwritten.pop(tid, None)
                gone = {(TXN_AREA, _row_name(tid)): None}
                await on_loop(self.store.put_states_async(gone, self._fence))
                del self._by_id[tid]
                if self._by_pid.get(rec.producer_id) is rec:
                    del self._by_pid[rec.producer_id]
                forgotten.append(tid)
            lock = self._locks.get(tid)
            if lock is not None and not lock.locked():
                del self._locks[tid]
        if forgotten:
            log.info(
                "forgot %d transactional ids idle for over %d ms: %s",
                len(forgotten),
                limit,
                forgotten[:10],
            )
        return forgotten

    # --- DescribeTransactions / ListTransactions --------------------------------------------
    def describe(self, transactional_id: str) -> TxnRecord | None:
        return self._by_id.get(transactional_id)

    def list(
        self, states: Iterable[str], producer_ids: Iterable[int], min_duration_ms: int
    ) -> list[TxnRecord]:
        wanted_states, wanted_pids = set(states), set(producer_ids)
        now = self.store.now_ms()
        return [
            rec
            for rec in self._by_id.values()
            if (not wanted_states or rec.state.value in wanted_states)
            and (not wanted_pids or rec.producer_id in wanted_pids)
            and (
                min_duration_ms < 0
                or (rec.state.is_open and now - rec.started_ms >= min_duration_ms)
            )
        ]

    def owner_of(self, write_pointer: int) -> str | None:
        """The transactional id whose open transaction ``write_pointer`` is, if any."""
        rec = self._by_wp.get(write_pointer)
        if rec is None or rec.write_pointer != write_pointer or not rec.state.is_open:
            return None
        return rec.transactional_id

    def open_count(self) -> int:
        return sum(1 for rec in self._by_wp.values() if rec.state.is_open)
