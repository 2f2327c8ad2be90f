"""ListOffsets: earliest, latest, max timestamp and offset-for-time, from the store's
dense offsets. Time lookups use the publish time (the row key's timestamp), not the
client's CreateTime: that is what the store indexes, and it never goes backwards."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import ListOffsetsResponse
from tmsgate.protocol import ApiKey, ErrorCode
from tmsgate.storage import StorageError

from ..context import RequestContext
from ..errors import error_of
from ..routes import Route
from ..topics import InvalidTopicName, TopicInfo

_TopicResp = ListOffsetsResponse.ListOffsetsTopicResponse
_PartResp = _TopicResp.ListOffsetsPartitionResponse
LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
READ_COMMITTED = 1


def _publish_time(store: Any, info: TopicInfo, offset: int) -> int:
    res = store.read(info.id, offset=offset, max_messages=1)
    for msg in res.messages:
        if msg.offset == offset:
            return int(msg.publish_ts)
    return -1


def lookup(store: Any, info: TopicInfo, spec: int, committed: bool) -> tuple[int, int]:
    """Blocking (executor): -> (offset, timestamp); (-1, -1) when Kafka has no answer."""
    earliest, nxt = store.offsets(info.id)
    end = store.last_stable_offset(info.id) if committed else nxt
    if spec == LATEST:
        return end, -1
    if spec in (EARLIEST, EARLIEST_LOCAL):
        return earliest, -1
    if spec == MAX_TIMESTAMP:
        if end <= earliest:
            return -1, -1
        return end - 1, _publish_time(store, info, end - 1)
    if spec < 0:  # tiered-storage specs (-5, -6): no remote tier, no answer
        return -1, -1
    offset = store.offset_for_time(info.id, spec)
    if offset >= end:
        return -1, -1
    return offset, _publish_time(store, info, offset)


async def _partition(
    ctx: RequestContext, info: TopicInfo | None, p: Any, committed: bool, missing: ErrorCode
) -> Any:
    kwargs = {"partition_index": p.partition_index, "leader_epoch": -1}
    if info is None or p.partition_index != 0:
        return _PartResp(error_code=missing, timestamp=-1, offset=-1, **kwargs)
    try:
        offset, ts = await ctx.broker.run(lookup, ctx.broker.store, info, p.timestamp, committed)
    except StorageError as exc:
        code, _ = error_of(exc, f"list offsets of {info.id}")
        return _PartResp(error_code=code, timestamp=-1, offset=-1, **kwargs)
    return _PartResp(error_code=ErrorCode.NONE, timestamp=ts, offset=offset, **kwargs)


async def handle(ctx: RequestContext, req: Any) -> Any:
    committed = ctx.version >= 2 and req.isolation_level == READ_COMMITTED
    topics = []
    for t in req.topics:
        missing = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        try:
            info = await ctx.broker.topics.get(t.name)
        except InvalidTopicName:
            info, missing = None, ErrorCode.INVALID_TOPIC_EXCEPTION
        parts = [await _partition(ctx, info, p, committed, missing) for p in t.partitions]
        topics.append(_TopicResp(name=t.name, partitions=parts))
    return ctx.response(throttle_time_ms=0, topics=topics)


ROUTE = Route(ApiKey.LIST_OFFSETS, 1, 11, handle)
