"""OffsetDelete: drop committed offsets of a group, except for topics a live consumer
group still subscribes to (GROUP_SUBSCRIBED_TO_TOPIC)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import OffsetDeleteRequest, OffsetDeleteResponse
from tmsgate.protocol import ErrorCode

from ...acls import Operation, ResourceType
from ..context import RequestContext
from ..routes import Route

_Topic = OffsetDeleteResponse.OffsetDeleteResponseTopic
_Partition = _Topic.OffsetDeleteResponsePartition


async def handle(ctx: RequestContext, req: Any) -> Any:
    paced = ctx.broker.paced  # the topics and partitions are what the client sent
    wanted = [
        (t.name, [p.partition_index async for p in paced(t.partitions)])
        async for t in paced(req.topics)
    ]
    if not ctx.allowed(Operation.DELETE, ResourceType.GROUP, req.group_id):
        denied = ErrorCode.GROUP_AUTHORIZATION_FAILED
        return ctx.response(error_code=denied, throttle_time_ms=0, topics=[])
    refused = {
        name
        async for name, _ in paced(wanted)
        if not ctx.allowed(Operation.READ, ResourceType.TOPIC, name)
    }
    code, codes = await ctx.broker.groups.delete_offsets(
        req.group_id, [w for w in wanted if w[0] not in refused]
    )
    topics = []
    if code is ErrorCode.NONE:
        topics = [
            _Topic(
                name=name,
                partitions=[
                    _Partition(
                        partition_index=p,
                        error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED
                        if name in refused
                        else codes.get((name, p), 0),
                    )
                    async for p in paced(partitions)
                ],
            )
            async for name, partitions in paced(wanted)
        ]
    return ctx.response(error_code=code, throttle_time_ms=0, topics=topics)


ROUTE = Route(OffsetDeleteRequest.API_KEY, 0, 0, handle)
