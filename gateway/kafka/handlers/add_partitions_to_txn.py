"""AddPartitionsToTxn: the topics a transactional producer is about to write. The first
call of a transaction starts its TMS transaction. Capped at v3: v4+ is the batched,
broker-to-broker form (KIP-890), which clients do not send."""

from __future__ import annotations

from typing import Any

from tmsgate.protocol import AddPartitionsResult, AddPartitionsTopicResult, ApiKey, ErrorCode

from ...acls import Operation, ResourceType
from ..context import RequestContext
from ..routes import Route
from ..txn import TxnError, for_version


async def _denied(
    ctx: RequestContext, tid: str, topics: list[tuple[str, list[int]]]
) -> dict[tuple[str, int], ErrorCode] | None:
    """Kafka: Write on the transactional id (else every partition is refused with
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and on each topic (the topics refused get
    TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED); None if allowed."""
    if not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return {(t, p): code for t, ps in topics for p in ps}
    refused = {
        t
        async for t, _ in ctx.broker.paced(topics)
        if not ctx.allowed(Operation.WRITE, ResourceType.TOPIC, t)
    }
    if not refused:
        return None
    return {
        (t, p): ErrorCode.TOPIC_AUTHORIZATION_FAILED
        if t in refused
        else ErrorCode.OPERATION_NOT_ATTEMPTED
        for t, ps in topics
        for p in ps
    }


async def handle(ctx: RequestContext, req: Any) -> Any:
    paced = ctx.broker.paced
    topics = [(t.name, list(t.partitions)) async for t in paced(req.v3_and_below_topics)]
    try:
        denied = await _denied(ctx, req.v3_and_below_transactional_id, topics)
        codes = (
            denied
            if denied is not None
            else await ctx.broker.txns.add_partitions(
                req.v3_and_below_transactional_id,
                req.v3_and_below_producer_id,
                req.v3_and_below_producer_epoch,
                topics,
            )
        )
    except TxnError as exc:
        code = for_version(exc.code, ctx.version, 2)
        codes = {(t, p): code for t, ps in topics for p in ps}
    results = [
        AddPartitionsTopicResult(name, [(p, codes.get((name, p), 0)) for p in partitions])
        async for name, partitions in paced(topics)
    ]
    for code in set(codes.values()) - {ErrorCode.NONE}:
        ctx.broker.metrics.partition_errors.labels("AddPartitionsToTxn", code.name).inc()
    # Encoded directly: one per transaction.
    return AddPartitionsResult(ctx.version, results)


ROUTE = Route(ApiKey.ADD_PARTITIONS_TO_TXN, 0, 3, handle)
