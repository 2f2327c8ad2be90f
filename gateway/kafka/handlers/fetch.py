"""Fetch: read each partition from the store, long-polling until min_bytes or max_wait.

Reads run as one executor job per round (all partitions), never on the event loop.
A fetch that is not satisfied subscribes to publishes on its topics and waits for
the store's listener to wake it, then reads again: no timer polling of the disk.

Fetch sessions (KIP-227) are not kept: every response is a full response with
session id 0, which clients take as "no session" and keep sending full fetches.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from tmsgate.protocol import ApiKey, ErrorCode, FetchPartition, FetchResult, FetchTopic
from tmsgate.storage import OffsetOutOfRange, StorageError

from ...acls import Operation, ResourceType
from ..batch_cache import BatchCache
from ..context import RequestContext
from ..errors import error_of
from ..readahead import ReadAhead
from ..records import encode_rows, messages_in
from ..routes import Route
from ..topics import TopicInfo

READ_COMMITTED = 1
FETCH_SESSION_ID_NOT_FOUND = 70
# Cap messages per partition read so one fetch of tiny messages stays bounded.
MAX_MESSAGES = 50_000
# A fetch this close to the high watermark reads on the event loop (see _read)...
NEAR_HEAD = 64
# ...if it names at most this many partitions: checking and reading each costs the loop a
# few microseconds, and a 1 MB request names 40,000 (ordinary consumers name a handful).
ON_LOOP_TARGETS = 16
# Partitions read by one executor job when a fetch names many: the job holds the GIL
# throughout, so its length is what the event loop may wait for it (~1 ms).
READ_CHUNK = 512


@dataclass(slots=True)
class Target:
    info: TopicInfo | None
    partition: int
    offset: int
    max_bytes: int
    missing: ErrorCode = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@dataclass(slots=True)
class PartRead:
    error: ErrorCode = ErrorCode.NONE
    high_watermark: int = -1
    last_stable: int = -1
    log_start: int = -1
    # The partition's record batches as chunks, written out as they are: joining them
    # would copy every fetched byte once more (a cache hit is a view of a produced batch).
    records: list[bytes | bytearray | memoryview] = field(default_factory=list)
    size: int = 0  # bytes in records
    messages: int = 0


def _read_one(
    store: Any,
    cache: BatchCache,
    ahead: ReadAhead | None,
    t: Target,
    budget: int,
    committed: bool,
    zstd_ok: bool,
    cache_only: bool = False,
) -> PartRead:
    """Blocking: runs on the executor (on the loop with ``cache_only`` or without
    ``ahead``: a read-ahead in progress is waited for only on the executor)."""
    info = t.info
    if info is None:
        return PartRead(t.missing)
    tid = info.id
    try:
        earliest, nxt = store.offsets(tid)
        lso = min(store.last_stable_offset(tid), nxt)  # Kafka: LSO <= high watermark
        out = PartRead(ErrorCode.NONE, nxt, lso, earliest)
        if t.offset < earliest or t.offset > nxt:
            out.error = ErrorCode.OFFSET_OUT_OF_RANGE
            return out
        limit = nxt if not committed else lso
        if t.offset >= limit or budget <= 0:
            return out
        max_bytes = max(1, min(t.max_bytes, budget))
        # Alternate between produced batches still in the cache (near the head) and the
        # store (older data, transactional records), until the budget or the limit.
        chunks: list[bytes | bytearray | memoryview] = []
        offset, used, tx = t.offset, 0, None
        uuid, log_append = info.metadata.topic_uuid, info.config.log_append_time
        while offset < limit and (not chunks or used < max_bytes):
            cached, upto = cache.read(uuid, offset, limit, max_bytes - used, zstd_ok, not chunks)
            if cached:
                chunks += cached
                used += sum(map(len, cached))
                out.messages += upto - offset
                offset = upto
                continue
            # A chunk read ahead opens a partition's answer (it was read for a fetch from
            # exactly here, with this fetch's size).
            got = None
            if ahead is not None and not chunks:
                got = ahead.take(uuid, offset, limit, not cache_only)
            if got is not None:
                ahead_chunks, offset, count = got
                chunks += ahead_chunks
                used += sum(map(len, ahead_chunks))
                out.messages += count
                continue
            if cache_only:
                break  # on the event loop: no store reads beyond the cache
            if committed and tx is None:
                tx = store.transactions.snapshot()
            room = max(1, max_bytes - used)
            res = store.read(
                tid,
                offset=offset,
                max_messages=min(MAX_MESSAGES, max(1, room // 16)),
                max_bytes=room,
                tx=tx,
                kafka_batches=True,
            )
            if res.next_offset <= offset:
                break  # nothing readable yet (or held at an open transaction)
            batches = encode_rows(res.rows, offset, res.next_offset, log_append)
            chunks += batches
            used += sum(map(len, batches))
            out.messages += messages_in(res.rows)
            offset = res.next_offset
            if res.held:
                break
        if ahead is not None:  # up to the limit: never past a read_committed reader's LSO
            ahead.after(tid, uuid, offset, limit, max_bytes, log_append)
    except OffsetOutOfRange as exc:
        return PartRead(ErrorCode.OFFSET_OUT_OF_RANGE, exc.next_offset, -1, exc.earliest)
    except StorageError as exc:
        return PartRead(error_of(exc, f"fetch from {tid}")[0])
    out.records, out.size = chunks, sum(map(len, chunks))
    return out


def _near_head(store: Any, targets: list[Target]) -> bool:
    """True when every partition asks for at most NEAR_HEAD messages below the end."""
    try:
        return all(
            t.info is None or store.offsets(t.info.id)[1] - t.offset <= NEAR_HEAD for t in targets
        )
    except StorageError:
        return False  # let the executor path produce the proper error


def _read_all(
    store: Any,
    cache: BatchCache,
    ahead: ReadAhead | None,
    targets: list[Target],
    max_bytes: int,
    committed: bool,
    zstd_ok: bool,
    cache_only: bool = False,
) -> list[PartRead]:
    budget = max_bytes
    out = []
    for t in targets:
        part = _read_one(store, cache, ahead, t, budget, committed, zstd_ok, cache_only)
        budget -= part.size
        out.append(part)
    return out


async def _targets(ctx: RequestContext, req: Any) -> list[tuple[Any, list[Target]]]:
    broker = ctx.broker
    topics = broker.topics
    out = []
    async for ft in broker.paced(req.topics):
        if ctx.version >= 13:
            info, missing = await topics.by_uuid(ft.topic_id), ErrorCode.UNKNOWN_TOPIC_ID
            if info is not None and not ctx.allowed(Operation.READ, ResourceType.TOPIC, info.name):
                info, missing = None, ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif ctx.allowed(Operation.READ, ResourceType.TOPIC, ft.topic):
            info, missing = await topics.resolve(ft.topic)
        else:
            info, missing = None, ErrorCode.TOPIC_AUTHORIZATION_FAILED
        parts = []
        async for p in broker.paced(ft.partitions):
            if info is None:
                part, gone = None, missing
            else:
                part = await topics.partition(info, p.partition)
                gone = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                if part is not None and not broker.store.leads(part.id):
                    part, gone = None, ErrorCode.NOT_LEADER_OR_FOLLOWER
            parts.append(Target(part, p.partition, p.fetch_offset, p.partition_max_bytes, gone))
        out.append((ft, parts))
    return out


async def _read(
    broker: Any, flat: list[Target], max_bytes: int, committed: bool, zstd_ok: bool
) -> list[PartRead]:
    """One read round. Store reads run on the executor, except where the executor round
    trip (~0.4 ms) costs more than the read: a consumer at the head (a few messages in
    LevelDB's memtable) or one the batch cache serves from memory."""
    store, cache, ahead = broker.store, broker.batch_cache, broker.readahead
    if len(flat) > ON_LOOP_TARGETS:
        return await _read_chunked(broker, flat, max_bytes, committed, zstd_ok)
    args = (flat, max_bytes, committed, zstd_ok)
    if _near_head(store, flat):
        return _read_all(store, cache, None, *args)
    if all(t.info is not None and _in_memory(cache, ahead, t) for t in flat):
        reads = _read_all(store, cache, ahead, *args, cache_only=True)
        if all(r.size or r.error for r in reads):
            return reads
        # the cache declined a partition (zstd for an old fetch, a limit): read the store
    return await broker.run(_read_all, store, cache, ahead, *args)


def _in_memory(cache: BatchCache, ahead: ReadAhead, t: Target) -> bool:
    uuid = t.info.metadata.topic_uuid  # type: ignore[union-attr]
    return cache.covers(uuid, t.offset) or ahead.ready(uuid, t.offset)


async def _read_chunked(
    broker: Any, flat: list[Target], max_bytes: int, committed: bool, zstd_ok: bool
) -> list[PartRead]:
    """_read_all over READ_CHUNK partitions per executor job, the budget carried from one
    job to the next: one job over 40,000 partitions held the GIL for tens of milliseconds
    at a time, and with it every other client's request."""
    out: list[PartRead] = []
    budget = max_bytes
    args = (broker.store, broker.batch_cache, None)  # no read-ahead for 40,000 partitions
    for start in range(0, len(flat), READ_CHUNK):
        chunk = flat[start : start + READ_CHUNK]
        reads = await broker.run(_read_all, *args, chunk, budget, committed, zstd_ok)
        budget -= sum(r.size for r in reads)
        out += reads
    return out


async def _summary(broker: Any, reads: list[PartRead]) -> tuple[int, bool]:
    """(bytes read, whether any partition failed), without holding the loop for long."""
    size, failed = 0, False
    async for r in broker.paced(reads):
        size += r.size
        failed = failed or bool(r.error)
    return size, failed


async def handle(ctx: RequestContext, req: Any) -> Any:
    broker = ctx.broker
    if ctx.version >= 7 and req.session_id != 0:
        return FetchResult(ctx.version, [], FETCH_SESSION_ID_NOT_FOUND)
    committed = ctx.version >= 4 and req.isolation_level == READ_COMMITTED
    max_bytes = req.max_bytes if ctx.version >= 3 else 0x7FFFFFFF
    zstd_ok = ctx.version >= 10  # Kafka refuses zstd batches to older fetches
    grouped = await _targets(ctx, req)
    flat: list[Target] = []
    async for _ft, parts in broker.paced(grouped):
        flat += parts
    ctx.release()  # a long poll does not hold up the connection's next request
    loop = asyncio.get_running_loop()
    wait_s = min(max(req.max_wait_ms, 0), broker.config.fetch_max_wait_cap_ms) / 1000
    deadline = loop.time() + wait_s
    # Once each: a request may name the same topic's partitions tens of thousands of times.
    watched = list({t.info.id: None async for t in broker.paced(flat) if t.info is not None})
    with broker.notifier.subscribe(watched) as sub:
        while True:
            sub.rearm()  # before the read: a publish during it must still wake us
            reads = await _read(broker, flat, max_bytes, committed, zstd_ok)
            size, failed = await _summary(broker, reads)
            remaining = deadline - loop.time()
            if size >= req.min_bytes or failed or remaining <= 0 or broker.closing or not watched:
                break
            await sub.wait(remaining)
    return await _response(ctx, grouped, reads, committed)


async def _response(
    ctx: RequestContext,
    grouped: list[tuple[Any, list[Target]]],
    reads: list[PartRead],
    committed: bool,
) -> Any:
    broker = ctx.broker
    metrics = broker.metrics
    it = iter(reads)
    topics = []
    async for ft, targets in broker.paced(grouped):
        parts = []
        async for t in broker.paced(targets):
            r = next(it)
            if r.error:
                metrics.partition_errors.labels("Fetch", r.error.name).inc()
            metrics.fetched_messages.inc(r.messages)
            parts.append(
                FetchPartition(
                    t.partition,
                    r.error,
                    r.high_watermark,
                    r.last_stable,
                    r.log_start,
                    [] if committed else None,
                    r.records,
                )
            )
        topics.append(FetchTopic(ft.topic, ft.topic_id, parts))
    # Encoded directly, not through kafka-python's generic encoder: see FetchResult.
    return FetchResult(ctx.version, topics)


ROUTE = Route(ApiKey.FETCH, 4, 17, handle)
