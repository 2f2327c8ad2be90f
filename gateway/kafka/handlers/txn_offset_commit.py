"""TxnOffsetCommit: a transactional producer's offsets for a consumer group, held by the
transaction and committed with it (EndTxn). v3+ names the group member (KIP-447), which
must belong to the group's current generation. Capped at v4: v5 goes with transactions
v2 (KIP-890)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.producer.transaction import TxnOffsetCommitResponse
from tmsgate.protocol import ApiKey, ErrorCode

from ...acls import Operation, ResourceType
from ..context import RequestContext
from ..groups import OffsetCommit
from ..routes import Route
from ..txn import PendingOffset, TxnError, for_version

_Topic = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
_Partition = _Topic.TxnOffsetCommitResponsePartition


def _denied(ctx: RequestContext, req: Any) -> dict[str, ErrorCode] | None:
    """Kafka: Write on the transactional id, Read on the group and on each topic; the
    topics refused, and why (None: all allowed). The offsets of the others are committed,
    as Kafka does."""
    if not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        return {t.name: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for t in req.topics}
    if not ctx.allowed(Operation.READ, ResourceType.GROUP, req.group_id):
        return {t.name: ErrorCode.GROUP_AUTHORIZATION_FAILED for t in req.topics}
    refused = {
        t.name: ErrorCode.TOPIC_AUTHORIZATION_FAILED
        for t in req.topics
        if not ctx.allowed(Operation.READ, ResourceType.TOPIC, t.name)
    }
    return refused or None


async def _codes(ctx: RequestContext, req: Any, items: list[OffsetCommit]) -> dict[Any, int]:
    broker = ctx.broker
    v = ctx.version
    try:
        await broker.groups.ready(req.group_id)
        if broker.txns.coordinates:  # else the controller, asked below
            await broker.txns.ready()
    except Exception as exc:
        return dict.fromkeys(((i.topic, i.partition) for i in items), getattr(exc, "code", 15))
    if v >= 3:
        code, _ = broker.groups.check_transactional_member(
            req.group_id, req.generation_id, req.member_id, req.group_instance_id
        )
        if code:
            return dict.fromkeys(((i.topic, i.partition) for i in items), code)
    offsets = broker.groups.offsets
    topics = await offsets.topics(i.topic for i in items)
    codes: dict[Any, int] = dict(await offsets.check(items, topics))
    # Single gateway: no await from here on (add_offsets_anywhere awaits nothing then),
    # so the transaction cannot end between its check and the put. Several: the
    # controller checks and puts in one step.
    adds = {
        (i.topic, i.partition): PendingOffset(i.offset, i.leader_epoch, i.metadata or "")
        for i in items
        if (i.topic, i.partition) not in codes
    }
    try:
        await broker.txns.add_offsets_anywhere(
            req.transactional_id, req.producer_id, req.producer_epoch, req.group_id, adds
        )
    except TxnError as exc:
        return dict.fromkeys(((i.topic, i.partition) for i in items), for_version(exc.code, v, 3))
    codes.update(dict.fromkeys(adds, ErrorCode.NONE))
    return codes


async def handle(ctx: RequestContext, req: Any) -> Any:
    paced = ctx.broker.paced
    items = [
        OffsetCommit(
            topic=t.name,
            partition=p.partition_index,
            offset=p.committed_offset,
            leader_epoch=p.committed_leader_epoch if ctx.version >= 2 else -1,
            metadata=p.committed_metadata,
        )
        async for t in paced(req.topics)
        async for p in paced(t.partitions)
    ]
    denied = _denied(ctx, req)
    if denied is None:
        codes = await _codes(ctx, req, items)
    else:
        allowed = [i for i in items if i.topic not in denied]
        codes = await _codes(ctx, req, allowed) if allowed else {}
        codes.update({(i.topic, i.partition): denied[i.topic] for i in items if i.topic in denied})
    topics = [
        _Topic(
            name=t.name,
            partitions=[
                _Partition(
                    partition_index=p.partition_index, error_code=codes[(t.name, p.partition_index)]
                )
                async for p in paced(t.partitions)
            ],
        )
        async for t in paced(req.topics)
    ]
    return ctx.response(throttle_time_ms=0, topics=topics)


ROUTE = Route(ApiKey.TXN_OFFSET_COMMIT, 0, 4, handle)
