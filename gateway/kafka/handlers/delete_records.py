"""DeleteRecords (``kafka-delete-records.sh``; Kafka Streams purges repartition topics
with it): each partition's log start moves up to the offset given (-1: the high
watermark), durably (Store.delete_records); earlier offsets then read as out of range
and the janitor deletes their rows. An offset past the high watermark is
OFFSET_OUT_OF_RANGE, as in Kafka."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DeleteRecordsResponse
from tmsgate.protocol import ApiKey, ErrorCode
from tmsgate.storage import OffsetOutOfRange

from ...acls import Operation, ResourceType
from ..context import RequestContext
from ..errors import error_of
from ..routes import Route

_Topic = DeleteRecordsResponse.DeleteRecordsTopicResult
_Partition = _Topic.DeleteRecordsPartitionResult


async def _partition(ctx: RequestContext, info: Any, p: Any) -> tuple[int, ErrorCode]:
    if p.offset < -1:
        return -1, ErrorCode.OFFSET_OUT_OF_RANGE
    part = await ctx.broker.topics.partition(info, p.partition_index)
    if part is None:
        return -1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    try:
        low = await ctx.broker.run(ctx.broker.store.delete_records, part.id, p.offset)
    except OffsetOutOfRange:
        return -1, ErrorCode.OFFSET_OUT_OF_RANGE
    except Exception as exc:
        return -1, error_of(exc, f"delete records of {info.name}-{p.partition_index}")[0]
    return low, ErrorCode.NONE


async def handle(ctx: RequestContext, req: Any) -> Any:
    topics = []
    async for t in ctx.broker.paced(req.topics):
        if not ctx.allowed(Operation.DELETE, ResourceType.TOPIC, t.name):
            code, info = ErrorCode.TOPIC_AUTHORIZATION_FAILED, None
        else:
            info, code = await ctx.broker.topics.resolve(t.name)
        results = []
        async for p in ctx.broker.paced(t.partitions):
            low, err = (-1, code) if info is None else await _partition(ctx, info, p)
            results.append(
                _Partition(partition_index=p.partition_index, low_watermark=low, error_code=err)
            )
        topics.append(_Topic(name=t.name, partitions=results))
    return ctx.response(throttle_time_ms=0, topics=topics)


ROUTE = Route(ApiKey.DELETE_RECORDS, 0, 2, handle)
