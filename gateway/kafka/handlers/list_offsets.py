"""ListOffsets: earliest, latest, max timestamp and offset-for-time, from the store's
dense offsets (the lookups themselves: tmsgate.gateway.offsets, shared with HTTP).
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import ListOffsetsResponse
from tmsgate.protocol import ApiKey, ErrorCode
from tmsgate.storage import StorageError

from ...acls import Operation, ResourceType
from ...offsets import lookup
from ..context import RequestContext
from ..errors import error_of
from ..routes import Route
from ..topics import TopicInfo

_TopicResp = ListOffsetsResponse.ListOffsetsTopicResponse
_PartResp = _TopicResp.ListOffsetsPartitionResponse
READ_COMMITTED = 1


async def _partition(
    ctx: RequestContext, info: TopicInfo | None, p: Any, committed: bool, missing: ErrorCode
) -> Any:
    kwargs = {"partition_index": p.partition_index, "leader_epoch": -1}
    if info is not None:
        info = await ctx.broker.topics.partition(info, p.partition_index)
        missing = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if info is not None and not ctx.broker.store.leads(info.id):
            info, missing = None, ErrorCode.NOT_LEADER_OR_FOLLOWER
    if info is None:
        return _PartResp(error_code=missing, timestamp=-1, offset=-1, **kwargs)
    try:
        offset, ts = await ctx.broker.run(
            lookup, ctx.broker.store, info.id, info.config.log_append_time, p.timestamp, committed
        )
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
        if ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, t.name):
            info, missing = await broker.topics.resolve(t.name)
        else:
            info, missing = None, ErrorCode.TOPIC_AUTHORIZATION_FAILED
        parts = [
            await _partition(ctx, info, p, committed, missing)
            async for p in broker.paced(t.partitions)
        ]
        topics.append(_TopicResp(name=t.name, partitions=parts))
    return ctx.response(throttle_time_ms=0, topics=topics)


ROUTE = Route(ApiKey.LIST_OFFSETS, 1, 11, handle)
