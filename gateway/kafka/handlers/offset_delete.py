"""OffsetDelete: drop committed offsets of a group, except for topics a live consumer
group still subscribes to (GROUP_SUBSCRIBED_TO_TOPIC)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import OffsetDeleteRequest, OffsetDeleteResponse

from ..context import RequestContext
from ..groups import GroupErrorCode
from ..routes import Route

_Topic = OffsetDeleteResponse.OffsetDeleteResponseTopic
_Partition = _Topic.OffsetDeleteResponsePartition


async def handle(ctx: RequestContext, req: Any) -> Any:
    paced = ctx.broker.paced  # the topics and partitions are what the client sent
    wanted = [
        (t.name, [p.partition_index async for p in paced(t.partitions)])
        async for t in paced(req.topics)
    ]
    code, codes = await ctx.broker.groups.delete_offsets(req.group_id, wanted)
    topics = []
    if code is GroupErrorCode.NONE:
        topics = [
            _Topic(
                name=name,
                partitions=[
                    _Partition(partition_index=p, error_code=codes.get((name, p), 0))
                    async for p in paced(partitions)
                ],
            )
            async for name, partitions in paced(wanted)
        ]
    return ctx.response(error_code=code, throttle_time_ms=0, topics=topics)


ROUTE = Route(OffsetDeleteRequest.API_KEY, 0, 0, handle)
