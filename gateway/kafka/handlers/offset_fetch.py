"""OffsetFetch: committed offsets (-1 where none), for some topics or (null, v2+) all of
them; v8+ for several groups at once. An offset committed to a topic that has since
been deleted (or deleted and recreated) is not returned. Capped at v9: v10 names
topics by id (KIP-848)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import OffsetFetchResponse
from tmsgate.protocol import ApiKey, ErrorCode

from ...acls import Operation, ResourceType
from ..context import RequestContext
from ..groups import FetchedOffset
from ..routes import Route

_Topic = OffsetFetchResponse.OffsetFetchResponseTopic
_Partition = _Topic.OffsetFetchResponsePartition
_Group = OffsetFetchResponse.OffsetFetchResponseGroup
_GroupTopic = _Group.OffsetFetchResponseTopics
_GroupPartition = _GroupTopic.OffsetFetchResponsePartitions

Fetched = list[tuple[str, list[tuple[int, FetchedOffset]]]]


async def _wanted(ctx: RequestContext, topics: Any) -> list[tuple[str, list[int]]] | None:
    if topics is None:
        return None
    return [(t.name, list(t.partition_indexes)) async for t in ctx.broker.paced(topics)]


def _partition(cls: Any, p: int, f: FetchedOffset, group_error: ErrorCode) -> Any:
    return cls(
        partition_index=p,
        committed_offset=f.offset,
        committed_leader_epoch=f.leader_epoch,
        metadata=f.metadata,
        error_code=group_error or f.error,
    )


async def _topics(
    ctx: RequestContext, fetched: Fetched, topic: Any, part: Any, error: ErrorCode
) -> list[Any]:
    """The response's topics, paced: a 1 MB request names ~80,000 (answered 370 ms in
    one piece)."""
    paced = ctx.broker.paced
    return [
        topic(name=name, partitions=[_partition(part, p, f, error) async for p, f in paced(parts)])
        async for name, parts in paced(fetched)
    ]


_UNSTABLE = FetchedOffset(error=ErrorCode.UNSTABLE_OFFSET_COMMIT)


async def _stable_only(ctx: RequestContext, group_id: str, fetched: Fetched) -> Fetched:
    """require_stable (v7+): partitions whose offsets an open Kafka transaction will
    commit get UNSTABLE_OFFSET_COMMIT (retriable) instead of the offset before it."""
    unstable = ctx.broker.txns.unstable_anywhere(group_id)
    if not unstable:
        return fetched
    return [
        (name, [(p, _UNSTABLE if (name, p) in unstable else f) for p, f in parts])
        async for name, parts in ctx.broker.paced(fetched)
    ]


_DENIED_TOPIC = FetchedOffset(error=ErrorCode.TOPIC_AUTHORIZATION_FAILED)


async def _fetch(ctx: RequestContext, group_id: str, topics: Any) -> tuple[ErrorCode, Fetched]:
    """The group's committed offsets, as the principal may see them (Kafka): without
    Describe on the group, GROUP_AUTHORIZATION_FAILED; a topic it may not describe is
    left out of an all-topics answer, and named gets TOPIC_AUTHORIZATION_FAILED."""
    wanted = await _wanted(ctx, topics)
    if not ctx.allowed(Operation.DESCRIBE, ResourceType.GROUP, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, []
    code, fetched = await ctx.broker.groups.fetch_offsets(group_id, wanted)
    if not ctx.broker.authorizer.enabled:
        return code, fetched
    named = wanted is not None
    out: Fetched = []
    async for name, parts in ctx.broker.paced(fetched):
        if ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, name, log=named):
            out.append((name, parts))
        elif named:
            out.append((name, [(p, _DENIED_TOPIC) for p, _ in parts]))
    return code, out


async def _one_group(
    ctx: RequestContext, group_id: str, topics: Any, require_stable: bool = False
) -> Any:
    code, fetched = await _fetch(ctx, group_id, topics)
    if require_stable:
        fetched = await _stable_only(ctx, group_id, fetched)
    return _Group(
        group_id=group_id,
        topics=await _topics(ctx, fetched, _GroupTopic, _GroupPartition, ErrorCode.NONE),
        error_code=code,
    )


async def handle(ctx: RequestContext, req: Any) -> Any:
    if ctx.version >= 8:
        groups = [
            await _one_group(ctx, g.group_id, g.topics, req.require_stable)
            async for g in ctx.broker.paced(req.groups)
        ]
        return ctx.response(throttle_time_ms=0, groups=groups)
    code, fetched = await _fetch(ctx, req.group_id, req.topics)
    if code == ErrorCode.GROUP_AUTHORIZATION_FAILED and ctx.version < 2:
        # v1 has no top-level error: the named partitions carry it.
        named = await _wanted(ctx, req.topics) or []
        fetched = [(name, [(p, FetchedOffset()) for p in parts]) for name, parts in named]
    if ctx.version >= 7 and req.require_stable:
        fetched = await _stable_only(ctx, req.group_id, fetched)
    # v1 has no top-level error: a group error goes on every partition.
    partition_error = code if ctx.version < 2 else ErrorCode.NONE
    topics = await _topics(ctx, fetched, _Topic, _Partition, partition_error)
    return ctx.response(throttle_time_ms=0, topics=topics, error_code=code)


ROUTE = Route(ApiKey.OFFSET_FETCH, 1, 9, handle)
