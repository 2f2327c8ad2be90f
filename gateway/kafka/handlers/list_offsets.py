"""ListOffsets: earliest, latest, max timestamp and offset-for-time, from the store's
dense offsets.

Kafka answers a time lookup with the first record (in offset order) whose timestamp
is >= the target. The store indexes publish time only, so the lookup starts where
publishing reached the target (store.offset_for_time): a producer stamps a record
before it is published, so no record before that point can have a CreateTime at or
after the target. From there the records' own timestamps are scanned, which for
ordinary data ends at the first record and for back-dated data (imports, replays)
finds what Kafka would. LogAppendTime topics need no scan: the timestamp is the
publish time.
"""

from __future__ import annotations

import logging
from typing import Any

from kafka.protocol.consumer import ListOffsetsResponse
from tmsgate.protocol import ApiKey, ErrorCode, meta_timestamp
from tmsgate.storage import StorageError

from ..context import RequestContext
from ..errors import error_of
from ..routes import Route
from ..topics import TopicInfo

log = logging.getLogger("tmsgate.kafka.list_offsets")
_TopicResp = ListOffsetsResponse.ListOffsetsTopicResponse
_PartResp = _TopicResp.ListOffsetsPartitionResponse
LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
READ_COMMITTED = 1


SCAN_CHUNK = 2000
SCAN_LIMIT = 1_000_000  # records read for one lookup before settling for publish time


def record_timestamp(msg: Any, log_append_time: bool) -> int:
    """The timestamp a consumer sees for this message (see records._fetch_record)."""
    ts = None if log_append_time else meta_timestamp(msg.meta)
    return int(msg.publish_ts) if ts is None else ts


def _timestamp_at(store: Any, info: TopicInfo, offset: int) -> int:
    res = store.read(info.id, offset=offset, max_messages=1)
    for msg in res.messages:
        if msg.offset == offset:
            return record_timestamp(msg, info.config.log_append_time)
    return -1


def _first_at_or_after(store: Any, info: TopicInfo, target: int, end: int) -> tuple[int, int]:
    start = store.offset_for_time(info.id, target)
    if start >= end:
        return -1, -1
    if info.config.log_append_time:
        return start, _timestamp_at(store, info, start)
    offset, scanned = start, 0
    while offset < end and scanned < SCAN_LIMIT:
        res = store.read(info.id, offset=offset, max_messages=SCAN_CHUNK)
        for msg in res.messages:
            if msg.offset >= end:
                return -1, -1
            ts = record_timestamp(msg, False)
            if ts >= target:
                return msg.offset, ts
        scanned += len(res.messages)
        if res.next_offset <= offset:
            break
        offset = res.next_offset
    if scanned >= SCAN_LIMIT:
        log.warning(
            "ListOffsets of %s at %d: gave up scanning record timestamps after %d "
            "records; answering by publish time",
            info.id,
            target,
            scanned,
        )
        return start, _timestamp_at(store, info, start)
    return -1, -1


def lookup(store: Any, info: TopicInfo, spec: int, committed: bool) -> tuple[int, int]:
    """Blocking (executor): -> (offset, timestamp); (-1, -1) when Kafka has no answer."""
    earliest, nxt = store.offsets(info.id)
    end = min(store.last_stable_offset(info.id), nxt) if committed else nxt
    if spec == LATEST:
        return end, -1
    if spec in (EARLIEST, EARLIEST_LOCAL):
        return earliest, -1
    if spec == MAX_TIMESTAMP:  # the newest record (by publish time; see the docs)
        if end <= earliest:
            return -1, -1
        return end - 1, _timestamp_at(store, info, end - 1)
    if spec < 0:  # tiered-storage specs (-5, -6): no remote tier, no answer
        return -1, -1
    return _first_at_or_after(store, info, spec, end)


async def _partition(
    ctx: RequestContext, info: TopicInfo | None, p: Any, committed: bool, missing: ErrorCode
) -> Any:
    kwargs = {"partition_index": p.partition_index, "leader_epoch": -1}
    if info is not None:
        info = await ctx.broker.topics.partition(info, p.partition_index)
        missing = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if info is None:
        return _PartResp(error_code=missing, timestamp=-1, offset=-1, **kwargs)
    try:
        offset, ts = await ctx.broker.run(lookup, ctx.broker.store, info, p.timestamp, committed)
    except StorageError as exc:
        code, _ = error_of(exc, f"list offsets of {info.id}")
        return _PartResp(error_code=code, timestamp=-1, offset=-1, **kwargs)
    return _PartResp(error_code=ErrorCode.NONE, timestamp=ts, offset=offset, **kwargs)


async def handle(ctx: RequestContext, req: Any) -> Any:
    broker = ctx.broker
    committed = ctx.version >= 2 and req.isolation_level == READ_COMMITTED
    topics = []
    # Paced: a 1 MB request names ~80,000 partitions, and those the store need not be
    # asked about (unknown topics and partitions) are answered without an
    # await, which held the loop 180 ms in one piece.
    async for t in broker.paced(req.topics):
        info, missing = await broker.topics.resolve(t.name)
        parts = [
            await _partition(ctx, info, p, committed, missing)
            async for p in broker.paced(t.partitions)
        ]
        topics.append(_TopicResp(name=t.name, partitions=parts))
    return ctx.response(throttle_time_ms=0, topics=topics)


ROUTE = Route(ApiKey.LIST_OFFSETS, 1, 11, handle)
