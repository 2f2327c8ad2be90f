"""Produce: validate each partition's batch, write it with publish_async, answer after fsync.

All partitions of a request are submitted to the store before any is awaited, and
the next pipelined request is let in (ctx.release) right after submitting, so a
producer's in-flight requests share the topic writer's group commit. acks=1 and
acks=-1 both wait for the fsync; acks=0 gets no response at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tmsgate.protocol import (
    ApiKey,
    ErrorCode,
    PartitionResult,
    ProducedBatch,
    ProduceResult,
    ProtocolError,
    TopicResult,
    batch_base_offset,
    batch_next_offset,
    decode_batch,
    split_batches,
)
from tmsgate.storage import (
    KAFKA_BATCH_MAX_BYTES,
    KAFKA_BATCH_MAX_RECORDS,
    PublishResult,
    StateConflict,
    StorageError,
    StoredRange,
    TopicNotFound,
)

from ...acls import Operation, ResourceType
from ..batch_cache import ZSTD
from ..context import CloseConnection, RequestContext
from ..errors import FailureLog, error_code, error_of
from ..producers import MAX_UNWRITTEN_TXN_BYTES, BatchRecord, check, describe
from ..records import to_entries
from ..routes import Route
from ..topics import TopicInfo
from ..txn import TxnError

if TYPE_CHECKING:
    from ..broker import Broker

log = logging.getLogger("tmsgate.kafka.produce")
# Failed produces are logged once with their cause, then counted (a full disk refuses
# every produce; each used to log a traceback).
FAILURES = FailureLog("produce", log)


@dataclass(slots=True)
class Outcome:
    error: ErrorCode = ErrorCode.NONE
    base_offset: int = -1
    log_append_time: int = -1
    message: str | None = None
    record_errors: tuple[tuple[int, str | None], ...] = ()


def _keyless(info: TopicInfo, batch: ProducedBatch) -> Outcome | None:
    """A compacted topic refuses a batch holding records without a key, naming each
    (KIP-467), as Kafka's LogValidator does; other partitions are unaffected."""
    missing = [i for i, r in enumerate(batch.records) if r.key is None]
    if not missing:
        return None
    why = (
        "Compacted topic cannot accept message without key in topic partition "
        f"{info.name}-{info.partition}"
    )
    errors = tuple((i, why) for i in missing)
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{why}')" for i in missing[:3])
    return Outcome(
        ErrorCode.INVALID_RECORD,
        message=f"One or more records have been rejected due to {len(missing)} record errors "
        f"in total, and only showing the first three errors at most: [{shown}]",
        record_errors=errors,
    )


def _fail(code: ErrorCode, message: str) -> Outcome:
    return Outcome(code, message=message)


async def _duplicate(rec: BatchRecord, log_append: bool, transactional: bool = False) -> Outcome:
    if rec.done is not None:  # the original is still being written: answer as it is
        try:
            await asyncio.shield(rec.done)
        except Exception as exc:
            code, message = error_of(exc, "produce (duplicate of a failed batch)", FAILURES)
            return _fail(code, message)
    if (rec.transactional or transactional) and rec.base_offset < 0:
        # Its offsets come with the commit (a record read back from the store, with
        # several gateways, does not say it was transactional: the batch does).
        return Outcome(ErrorCode.NONE)
    if rec.base_offset < 0:
        # Persisted state from an older version that did not record offsets: Kafka
        # answers the same when it lacks a batch's metadata.
        return _fail(ErrorCode.DUPLICATE_SEQUENCE_NUMBER, "batch was already written")
    return Outcome(ErrorCode.NONE, rec.base_offset, rec.log_append_time if log_append else -1)


async def _prepare(
    ctx: RequestContext, info: TopicInfo, raw: Any
) -> Outcome | asyncio.Future[Outcome]:
    """Validate and submit one partition's records; -> an outcome now, or one to await."""
    broker = ctx.broker
    # Size first, from the batch header alone: an oversized batch is refused before any
    # CRC, decompression or record parsing happens on the event loop.
    try:
        views = split_batches(raw) if raw is not None else []
    except ProtocolError as exc:
        return _fail(getattr(exc, "code", ErrorCode.CORRUPT_MESSAGE), str(exc))
    if info.config.migration_source is not None:
        return _prepare_migrated(ctx, info, views)
    if len(views) != 1:
        return _fail(ErrorCode.INVALID_RECORD, "a produce request carries one batch per partition")
    if len(views[0]) > info.config.max_message_bytes:
        return _fail(
            ErrorCode.MESSAGE_TOO_LARGE,
            f"batch of {len(views[0])} bytes exceeds max.message.bytes="
            f"{info.config.max_message_bytes} of topic {info.name}",
        )
    try:
        batch: ProducedBatch = decode_batch(views[0])
    except ProtocolError as exc:
        return _fail(getattr(exc, "code", ErrorCode.CORRUPT_MESSAGE), str(exc))
    if info.config.compacted:
        refused = _keyless(info, batch)
        if refused is not None:
            return refused
    log_append = info.config.log_append_time
    # A batch that fits one row (_fits_a_row) is stored as sent, its records then needing
    # no entries (unless a header might be the transaction header, which to_entries
    # finds): a transactional one always (its records reach readers only as messages,
    # after the commit), a plain one if its records read back exactly as sent
    # (_reads_back), for a fetch sends its bytes.
    reads_back = not batch.is_transactional and _reads_back(batch, log_append)
    if batch.is_transactional:
        as_sent = _fits_a_row(batch)
    else:
        as_sent = reads_back and batch.compression_type != ZSTD and _fits_a_row(batch)
    entries: list[Any] | None = None
    wp = None
    if not as_sent or any(r.headers for r in batch.records):
        try:
            entries, wp = to_entries(batch.records)
        except ProtocolError as exc:
            return _fail(getattr(exc, "code", ErrorCode.INVALID_RECORD), str(exc))
    if batch.is_transactional:
        return await _prepare_transactional(ctx, info, batch, None if as_sent else entries, wp)
    as_sent, reads_back = as_sent and wp is None, reads_back and wp is None
    state = rec = key = None
    if batch.is_idempotent:
        key = broker.producers.key(info, batch.producer_id)
        entry = await broker.producers.entry(key, info.id)
        # No await from here to publish_async: the check and the submit must not
        # interleave with another request of the same producer.
        verdict = check(entry, batch)
        if verdict.duplicate is not None:
            return asyncio.ensure_future(_duplicate(verdict.duplicate, log_append))
        if verdict.error:
            # Counted and logged (rate-limited) with what the gateway knew: librdkafka
            # makes a refused sequence fatal, so an operator needs to see why.
            message = verdict.message or verdict.error.name
            FAILURES.failed(verdict.error, f"{message} (state: {describe(entry)})", str(info.id))
            return _fail(verdict.error, message)
        rec, state = broker.producers.record(key, entry, batch, info.id)
    store = broker.store
    try:
        if as_sent:
            fut = store.publish_kafka_batch_async(
                info.id, batch.raw, len(batch.records), state, _record_keys(info, batch)
            )
        else:
            fut = store.publish_async(info.id, entries or [], tx=wp, state=state)
    except Exception as exc:
        if rec is not None and key is not None:
            broker.producers.failed(key, rec, exc)
        return _fail(*error_of(exc, f"produce to {info.id}", FAILURES))
    return _when_written(
        fut, functools.partial(_completed, ctx, info, rec, key, batch, log_append, reads_back)
    )


def _record_keys(
    info: TopicInfo, batch: ProducedBatch
) -> tuple[list[bytes | None], list[int]] | None:
    """A compacted topic's records' keys and null values, for its cleaner (so that it
    need not read the batch back from the disk and decode it again)."""
    if not info.config.compacted:
        return None
    records = batch.records
    return [r.key for r in records], [i for i, r in enumerate(records) if r.value is None]


def _reads_back(batch: ProducedBatch, log_append: bool) -> bool:
    """Whether a plain batch's records read back byte for byte as sent (a CreateTime
    topic, client timestamps present), so that fetches near the head may take it from the
    batch cache. The caller checks the transaction header (to_entries)."""
    return not log_append and batch.max_timestamp >= 0 and batch.records[0].timestamp >= 0


def _fits_a_row(batch: ProducedBatch) -> bool:
    """Whether a batch is within the bounds of one row kept as sent (storage
    F_KAFKA_BATCH); a larger one is stored as messages, in several rows. (A plain zstd
    batch is stored as messages too: fetches before v10 cannot take it as it is.)"""
    return len(batch.raw) <= KAFKA_BATCH_MAX_BYTES and len(batch.records) <= KAFKA_BATCH_MAX_RECORDS


def _when_written(
    fut: Future[Any], finish: Callable[[Future[Any]], Outcome]
) -> asyncio.Future[Outcome]:
    """An asyncio future of ``finish(fut)``, run on the loop once the store's write is
    done, whether or not anyone still waits (acks=0, a closed connection): the producer
    state and metrics must settle. A callback rather than a task per write (with
    wrap_future and shield): at one partition per request, as librdkafka sends them to
    many topics, those were a sixth of the event loop's time per produce."""
    loop = asyncio.get_running_loop()
    out: asyncio.Future[Outcome] = loop.create_future()

    def on_loop(done: Future[Any]) -> None:
        try:
            outcome = finish(done)
        except BaseException as exc:  # a bug: answer it as one
            if not out.done():
                out.set_exception(exc)
            return
        if not out.done():
            out.set_result(outcome)

    def on_writer(done: Future[Any]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed (shutdown)
            loop.call_soon_threadsafe(on_loop, done)

    fut.add_done_callback(on_writer)
    return out


MIGRATE_CLIENT_ID = "tmsgate-migrate"


def _prepare_migrated(
    ctx: RequestContext, info: TopicInfo, views: list[memoryview]
) -> Outcome | asyncio.Future[Outcome]:
    """A topic being migrated in (config tmsgate.migration.source, docs/migration.md):
    the batches (any number, in offset order, as fetched from the source) keep their
    offsets; the offsets their records skip become gaps. The part below the partition's
    next offset was copied before and is skipped, so a resumed copy never writes a
    record twice; a batch starting beyond it is refused (OUT_OF_ORDER_SEQUENCE_NUMBER),
    so a lost write cannot turn into a gap. Only the migration may produce: a producer
    switched over too early would otherwise have its records taken for copies."""
    client_id = ctx.request.client_id or ""
    if not client_id.startswith(MIGRATE_CLIENT_ID):
        return _fail(
            ErrorCode.POLICY_VIOLATION,
            f"topic {info.name} is being migrated from {info.config.migration_source}; "
            "produce to it after the cutover (docs/migration.md)",
        )
    if not views:
        return _fail(ErrorCode.INVALID_RECORD, "no record batch")
    items: list[tuple[int, Any]] = []
    records = size = 0
    expected = base = batch_base_offset(views[0])
    for view in views:
        if batch_base_offset(view) > expected:
            return _fail(ErrorCode.INVALID_RECORD, "batches must follow each other's offsets")
        try:
            batch = decode_batch(view, exact=True)
            # A source's read_committed records are committed: a tms.tx.write_pointer
            # header (a tmsgate source) is copied as it reads, an ordinary header.
            entries, _ = to_entries(batch.records, pointers_in_header=False)
        except ProtocolError as exc:
            return _fail(getattr(exc, "code", ErrorCode.INVALID_RECORD), str(exc))
        # A batch may reach back before the end of the ones before it: a tmsgate source
        # answers a fetch with the whole produced batch holding the fetch offset, and a
        # migration gathers several fetches into one request. Its records there are the
        # ones already taken (the same source offsets): keep each offset once.
        kept = [
            (r.offset, entry)
            for r, entry in zip(batch.records, entries, strict=True)
            if r.offset >= expected
        ]
        items += kept
        records += len(kept)
        size += batch.size
        expected = max(expected, batch_next_offset(view))
    try:
        fut = ctx.broker.store.publish_exact_async(info.id, base, items, expected)
    except Exception as exc:
        return _fail(*error_of(exc, f"produce to {info.id}", FAILURES))
    return asyncio.ensure_future(_complete_migrated(ctx, info, fut, records, size, base))


async def _complete_migrated(
    ctx: RequestContext, info: TopicInfo, fut: Any, records: int, size: int, base: int
) -> Outcome:
    try:
        await ctx.broker.wait_future(fut)
    except Exception as exc:
        return _fail(*error_of(exc, f"produce to {info.id} (migration)", FAILURES))
    FAILURES.succeeded()
    ctx.broker.metrics.produced_messages.inc(records)
    ctx.broker.metrics.produced_bytes.inc(size)
    return Outcome(ErrorCode.NONE, base)


async def _prepare_transactional(
    ctx: RequestContext,
    info: TopicInfo,
    batch: ProducedBatch,
    entries: list[Any] | None,
    wp: int | None,
) -> Outcome | asyncio.Future[Outcome]:
    """A Kafka transaction's batch: into the PayloadTable under the transaction's write
    pointer, where no reader sees it until EndTxn commits (gateway/kafka/txn). The
    response has no offset (-1): the records get theirs at the commit. ``entries`` None:
    the batch is kept as sent, one row."""
    broker = ctx.broker
    if wp is not None:
        return _fail(
            ErrorCode.INVALID_RECORD,
            "records of a Kafka transaction cannot also carry the tms.tx.write_pointer header",
        )
    if not batch.is_idempotent:
        return _fail(ErrorCode.INVALID_RECORD, "a transactional batch needs a producer id")
    tid = ctx.request.body.transactional_id
    if tid is None:
        # Kafka: transactional records come with the request's transactional id, whose
        # Write permission was checked; without it a client could add records to another
        # producer's transaction by naming its producer id.
        return _fail(
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "transactional records need the request's transactional id",
        )
    txns = broker.txns
    here = txns.coordinates
    try:
        if here:
            await txns.ready()
            remote_wp = None
        else:  # several gateways: the coordinator's record says (before any await below)
            remote_wp = await txns.write_pointer_from_store(
                tid, batch.producer_id, batch.producer_epoch, info.id.topic
            )
    except TxnError as exc:
        return _fail(exc.code, str(exc))
    key = broker.producers.key(info, batch.producer_id)
    entry = await broker.producers.entry(key, info.id)
    # No await from here to store_async: EndTxn must not come between the check that the
    # transaction is open and the write (it would not count these records). Elsewhere
    # than on the coordinator, a commit's seal on this partition comes after this write
    # (the writer is first in, first out) or refuses it (the reference is written).
    try:
        wp = (
            txns.write_pointer_for(tid, batch.producer_id, batch.producer_epoch, info.id.topic)
            if remote_wp is None
            else remote_wp
        )
    except TxnError as exc:
        return _fail(exc.code, str(exc))
    txn_wp = wp
    verdict = check(entry, batch)
    if verdict.duplicate is not None:
        return asyncio.ensure_future(_duplicate(verdict.duplicate, False, transactional=True))
    if verdict.error:
        return _fail(verdict.error, verdict.message or verdict.error.name)
    rec, durable_state = broker.producers.record(key, entry, batch, info.id)
    # One gateway: the producer's state in memory only (a restart aborts every open
    # transaction anyway). Several: durable with the records, for the transaction goes on
    # when the partition's leader changes, and the next leader must refuse a batch the
    # producer sends again (its answer lost) instead of storing it twice.
    state = None if broker.cluster is None else _sequences(durable_state)
    if broker.config.transactional_offsets == "produce":
        return _publish_in_place(ctx, info, batch, entries, txn_wp, rec, key, durable_state)
    try:
        if entries is None:
            fut = broker.store.store_kafka_batch_async(
                info.id, batch.raw, len(batch.records), wp, spoil=True, state=state
            )
        else:
            fut = broker.store.store_async(info.id, entries, wp, spoil=True, state=state)
    except Exception as exc:
        broker.producers.failed(key, rec, exc)
        return _fail(*error_of(exc, f"produce to {info.id} in transaction {wp}", FAILURES))
    # Answered now, not once the records are on disk: nobody reads an open transaction's
    # records, and a restart aborts every open transaction, on disk or not, so their
    # fsync protects nothing until the commit. The commit is decided on the store's
    # writer after these records' write: it lands only if they did, and EndTxn is
    # answered once all of it is on disk. If the write fails, the commit is refused
    # (TransactionManager.spoil): EndTxn aborts the transaction and fences the producer.
    # Up to MAX_UNWRITTEN_TXN_BYTES queued; past that, the Produce waits for its write.
    # Several gateways: answered once durable, always. The commit is decided by the
    # controller, which cannot wait for this gateway's writer: an answered Produce must
    # be on disk before the producer's EndTxn can reach it.
    producers = broker.producers
    early = (
        broker.cluster is None
        and producers.unwritten_txn_bytes + batch.size <= MAX_UNWRITTEN_TXN_BYTES
    )
    held = batch.size if early else 0
    producers.unwritten_txn_bytes += held
    loop = asyncio.get_running_loop()

    def on_writer(done: Future[Any]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed (shutdown)
            loop.call_soon_threadsafe(_stored, broker, info, rec, key, held, done)

    fut.add_done_callback(on_writer)
    if not early:
        return asyncio.ensure_future(_written(broker, fut, rec, batch))
    return _accepted(broker, rec, batch)


_NO_OFFSETS = PublishResult(-1, 0, None, None, -1, None)


def _sequences(
    durable_state: Callable[[PublishResult], Any],
) -> Callable[[StoredRange], Any]:
    """A transactional batch's producer state for Store.store_async: its sequences, no
    offsets yet (they come with the commit)."""
    return lambda _stored: durable_state(_NO_OFFSETS)


def _publish_in_place(
    ctx: RequestContext,
    info: TopicInfo,
    batch: ProducedBatch,
    entries: list[Any] | None,
    wp: int,
    rec: BatchRecord,
    key: str,
    durable_state: Callable[[PublishResult], Any],
) -> Outcome | asyncio.Future[Outcome]:
    """``--transactional-offsets produce``: the batch's records published in place under
    the transaction's write pointer, as a TMS transaction's are (the t column), sealed:
    their offsets are theirs from now on, answered as Kafka answers them, they stay held
    from every reader until the commit (the last stable offset waits, as in Kafka), then
    read as plain records, and are skipped for good if it aborts. The commit then has no
    reference to write (its part finds no stored records), only the TMS commit. Answered
    once on disk."""
    broker = ctx.broker
    try:
        if entries is None:
            entries, _ = to_entries(batch.records, pointers_in_header=False)
        # Sealed: read as plain records once committed (no tms.tx.write_pointer header,
        # which a TMS transaction's records carry), by no reader while open.
        state = None if broker.cluster is None else durable_state  # as in the caller
        fut = broker.store.publish_async(info.id, entries, tx=wp, state=state, sealed=True)
    except Exception as exc:
        broker.producers.failed(key, rec, exc)
        if isinstance(exc, ProtocolError):
            return _fail(getattr(exc, "code", ErrorCode.INVALID_RECORD), str(exc))
        return _fail(*error_of(exc, f"produce to {info.id} in transaction {wp}", FAILURES))
    log_append = info.config.log_append_time
    return _when_written(
        fut, functools.partial(_completed, ctx, info, rec, key, batch, log_append, False)
    )


def _accepted(broker: Broker, rec: BatchRecord, batch: ProducedBatch) -> Outcome:
    broker.producers.completed(rec, -1, -1)
    broker.metrics.produced_messages.inc(len(batch.records))
    broker.metrics.produced_bytes.inc(batch.size)
    return Outcome(ErrorCode.NONE)


async def _written(broker: Broker, fut: Any, rec: BatchRecord, batch: ProducedBatch) -> Outcome:
    """A transactional batch answered once its write lands (too much is queued already)."""
    try:
        await broker.wait_future(fut)
    except Exception as exc:  # _stored keeps the books and logs it
        return _fail(error_code(exc), str(exc) or type(exc).__name__)
    return _accepted(broker, rec, batch)


def _stored(
    broker: Broker, info: TopicInfo, rec: BatchRecord, key: str, held: int, fut: Any
) -> None:
    """A transactional batch's write ended. ``held``: its bytes, if it was answered before
    (0 if its Produce waited for this)."""
    broker.producers.unwritten_txn_bytes -= held
    exc = fut.exception() if not fut.cancelled() else StorageError("the produce was cancelled")
    if exc is None:
        FAILURES.succeeded()
        return
    broker.producers.failed(key, rec, exc)
    code, message = error_of(exc, f"produce to {info.id} (transactional)", FAILURES)
    if held:
        log.warning(
            "a transactional write to %s failed after its Produce was answered (%s: %s); "
            "the transaction can no longer commit",
            info.id,
            code.name,
            message,
        )


def _completed(
    ctx: RequestContext,
    info: TopicInfo,
    rec: BatchRecord | None,
    key: str | None,
    batch: ProducedBatch,
    log_append: bool,
    cacheable: bool,
    fut: Future[Any],
) -> Outcome:
    broker = ctx.broker
    exc = fut.exception() if not fut.cancelled() else StorageError("the produce was cancelled")
    if exc is not None:
        if rec is not None and key is not None:
            broker.producers.failed(key, rec, exc)
        if isinstance(exc, TopicNotFound):
            broker.topics.invalidate(info.name)
        code, message = error_of(exc, f"produce to {info.id}", FAILURES)
        if isinstance(exc, StateConflict):  # the durable check refused it: log as above
            FAILURES.failed(code, message, str(info.id))
        return _fail(code, message)
    result = fut.result()
    FAILURES.succeeded()
    if rec is not None:
        broker.producers.completed(rec, result.base_offset, result.publish_ts)
    if cacheable:
        broker.batch_cache.put(
            info.metadata.topic_uuid, result.base_offset, result.count, batch.raw
        )
    broker.metrics.produced_messages.inc(result.count)
    broker.metrics.produced_bytes.inc(batch.size)
    return Outcome(ErrorCode.NONE, result.base_offset, result.publish_ts if log_append else -1)


async def _topic(ctx: RequestContext, td: Any) -> tuple[str | None, TopicInfo | None, ErrorCode]:
    topics = ctx.broker.topics
    if ctx.version >= 13:
        info = await topics.by_uuid(td.topic_id)
        if info is not None and not ctx.allowed(Operation.WRITE, ResourceType.TOPIC, info.name):
            return None, None, ErrorCode.TOPIC_AUTHORIZATION_FAILED
        return None, info, ErrorCode.UNKNOWN_TOPIC_ID
    if not ctx.allowed(Operation.WRITE, ResourceType.TOPIC, td.name):
        return td.name, None, ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if not ctx.broker.authorizer.enabled:
        info, code = await topics.resolve(td.name, auto_create=True)
        return td.name, info, code
    # With ACLs a produce creates a topic only for who may create it (Kafka's Produce
    # creates none; tmsgate's does, where Metadata would have).
    info, code = await topics.resolve(td.name)
    missing = info is None and code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if missing and ctx.may_create_topic(td.name):
        info, code = await topics.resolve(td.name, auto_create=True)
    return td.name, info, code


async def _submit(
    ctx: RequestContext,
    acks: int,
    topic: tuple[str | None, TopicInfo | None, ErrorCode],
    td: Any,
    pd: Any,
) -> Outcome | asyncio.Future[Outcome]:
    """One partition's records: refused now, or submitted to the store."""
    name, info, missing = topic
    if acks not in (0, 1, -1):
        return _fail(ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks} is not 0, 1 or -1")
    if missing == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
        return _fail(missing, f"Not authorized to write to topic {name or td.topic_id}")
    part = None if info is None else await ctx.broker.topics.partition(info, pd.index)
    if info is None or part is None:
        return _fail(
            missing if info is None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            f"topic {name or td.topic_id} partition {pd.index} does not exist"
            + (f" (it has {info.partitions})" if info is not None else ""),
        )
    if not ctx.broker.store.leads(part.id):
        return _fail(
            ErrorCode.NOT_LEADER_OR_FOLLOWER,
            f"this gateway does not lead topic {part.name} partition {pd.index}",
        )
    return await _prepare(ctx, part, pd.records)


async def handle(ctx: RequestContext, req: Any) -> Any:
    acks = req.acks
    pending: list[tuple[Any, list[tuple[int, Outcome | asyncio.Future[Outcome]]]]] = []
    writes: list[asyncio.Future[Outcome]] = []
    paced = ctx.broker.paced
    small = len(req.topic_data) == 1 and len(req.topic_data[0].partition_data) == 1
    if req.transactional_id is not None and not ctx.allowed(
        Operation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id
    ):
        return await _refuse_all(ctx, req, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if small:
        # One partition: what librdkafka sends (one request per partition), so the
        # shape of every produce spread over many topics. No pacing needed.
        td = req.topic_data[0]
        pd = td.partition_data[0]
        outcome = await _submit(ctx, acks, await _topic(ctx, td), td, pd)
        if not isinstance(outcome, Outcome):
            writes.append(outcome)
        pending.append((td, [(pd.index, outcome)]))
    else:
        # Every loop over the request's topics and partitions is paced: a 1 MB request
        # can name ~100,000 partitions, and those refused (an unknown partition, a bad
        # batch) or already answered await nothing.
        async for td in paced(req.topic_data):
            topic = await _topic(ctx, td)
            parts: list[tuple[int, Outcome | asyncio.Future[Outcome]]] = []
            async for pd in paced(td.partition_data):
                outcome = await _submit(ctx, acks, topic, td, pd)
                if not isinstance(outcome, Outcome):
                    writes.append(outcome)
                parts.append((pd.index, outcome))
            pending.append((td, parts))
    ctx.release()  # everything is submitted: the next pipelined request may start
    if acks == 0:
        return await _no_response(ctx, pending)
    # The writes are awaited here, outside the paced loops: a paced loop counts the time
    # its body spends awaiting as time holding the event loop, and would then give the
    # loop back (and switch the interpreter to its heavy-work settings) for every
    # produce. A write goes on (and its producer state settles) even if this request is
    # abandoned, e.g. when an earlier response on the connection fails (_when_written).
    for write in writes:  # a done write costs a method call: no pacing needed
        if not write.done():
            await write
    if small:
        td, parts = pending[0]
        topics = [TopicResult(td.name, td.topic_id, [_result(ctx, *parts[0])])]
    else:
        topics = []
        async for td, parts in paced(pending):
            responses = [_result(ctx, index, outcome) async for index, outcome in paced(parts)]
            topics.append(TopicResult(td.name, td.topic_id, responses))
    # Encoded directly, not through kafka-python's generic encoder: see ProduceResult.
    return ProduceResult(ctx.version, topics)


async def _refuse_all(ctx: RequestContext, req: Any, code: ErrorCode) -> Any:
    """Every partition of the request gets ``code`` (a transactional id the principal
    may not write); with acks=0 the connection closes, the client's only signal."""
    ctx.release()
    if req.acks == 0:
        raise CloseConnection(f"acks=0 produce refused: {code.name}")
    topics = [
        TopicResult(
            td.name,
            td.topic_id,
            [PartitionResult(pd.index, code, -1, -1, -1, None) for pd in td.partition_data],
        )
        async for td in ctx.broker.paced(req.topic_data)
    ]
    return ProduceResult(ctx.version, topics)


async def _no_response(ctx: RequestContext, pending: list[Any]) -> None:
    """acks=0: nothing is sent back. A partition that fails validation closes the
    connection, as Kafka does, because that is the only signal the client gets."""
    paced = ctx.broker.paced
    async for _td, parts in paced(pending):
        async for _index, outcome in paced(parts):
            if isinstance(outcome, Outcome):
                if outcome.error:
                    raise CloseConnection(f"acks=0 produce failed: {outcome.message}")
            else:
                asyncio.ensure_future(outcome).add_done_callback(_log_failure)
    return None


def _result(ctx: RequestContext, index: int, outcome: Any) -> PartitionResult:
    done = outcome if isinstance(outcome, Outcome) else outcome.result()
    if done.error:
        ctx.broker.metrics.partition_errors.labels("Produce", done.error.name).inc()
    return PartitionResult(
        index,
        done.error,
        done.base_offset,
        done.log_append_time,
        -1,
        done.message,
        done.record_errors,
    )


_LOGGED = (ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.UNKNOWN_SERVER_ERROR)


def _log_failure(task: asyncio.Future[Outcome]) -> None:
    if task.cancelled():
        return
    outcome = task.result()
    # Storage and unexpected errors were logged (and counted) where they happened.
    if outcome.error and outcome.error not in _LOGGED:
        FAILURES.failed(outcome.error, outcome.message or "", "acks=0 produce after validation")


ROUTE = Route(ApiKey.PRODUCE, 3, 13, handle)
