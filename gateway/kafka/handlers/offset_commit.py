"""OffsetCommit: answered once the offsets are fsynced. A member commits with its
generation; a client without group management (or an admin) commits with generation
-1 to an empty group. Capped at v9: v10 names topics by id (KIP-848)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import OffsetCommitResponse
from tmsgate.protocol import ApiKey, ErrorCode

from ...acls import Operation, ResourceType
from ..context import RequestContext
from ..groups import OffsetCommit
from ..routes import Route

_Topic = OffsetCommitResponse.OffsetCommitResponseTopic
_Partition = _Topic.OffsetCommitResponsePartition


async def _refused(ctx: RequestContext, req: Any) -> dict[str, ErrorCode]:
    """Topics whose offsets are not committed, and why: Kafka needs Read on the group
    (else every partition gets GROUP_AUTHORIZATION_FAILED) and on each topic."""
    if not ctx.allowed(Operation.READ, ResourceType.GROUP, req.group_id):
        return {t.name: ErrorCode.GROUP_AUTHORIZATION_FAILED for t in req.topics}
    return {
        t.name: ErrorCode.TOPIC_AUTHORIZATION_FAILED
        async for t in ctx.broker.paced(req.topics)
        if not ctx.allowed(Operation.READ, ResourceType.TOPIC, t.name)
    }


async def handle(ctx: RequestContext, req: Any) -> Any:
    v = ctx.version
    paced = ctx.broker.paced  # a 1 MB request names ~60,000 partitions
    refused = await _refused(ctx, req)
    items = [
        OffsetCommit(
            topic=t.name,
            partition=p.partition_index,
            offset=p.committed_offset,
            leader_epoch=p.committed_leader_epoch if v >= 6 else -1,
            metadata=p.committed_metadata,
        )
        async for t in paced(req.topics)
        if t.name not in refused
        async for p in paced(t.partitions)
    ]
    codes = await ctx.broker.groups.commit(
        req.group_id,
        req.generation_id_or_member_epoch,
        req.member_id,
        req.group_instance_id if v >= 7 else None,
        items,
    )
    topics = [
        _Topic(
            name=t.name,
            partitions=[
                _Partition(
                    partition_index=p.partition_index,
                    error_code=refused.get(t.name) or codes[(t.name, p.partition_index)],
                )
                async for p in paced(t.partitions)
            ],
        )
        async for t in paced(req.topics)
    ]
    return ctx.response(throttle_time_ms=0, topics=topics)


ROUTE = Route(ApiKey.OFFSET_COMMIT, 2, 9, handle)
