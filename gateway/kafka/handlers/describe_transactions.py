"""DescribeTransactions (``kafka-transactions.sh describe``): a transactional id's state,
producer, timeout, start time and topics; TRANSACTIONAL_ID_NOT_FOUND for unknown ids."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin.transactions import DescribeTransactionsResponse
from tmsgate.protocol import ApiKey, ErrorCode
from tmsgate.storage.ids import PARTITION_MARK

from ...acls import Operation, ResourceType
from ..context import RequestContext
from ..routes import Route
from ..txn import TxnError

_State = DescribeTransactionsResponse.TransactionState
_Topic = _State.TopicData


def _describe(ctx: RequestContext, tid: str, loaded: ErrorCode) -> Any:
    if not ctx.allowed(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid):
        loaded = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    rec = ctx.broker.txns.describe(tid) if not loaded else None
    if rec is None:
        return _State(
            error_code=loaded or ErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
            transactional_id=tid,
            transaction_state="",
            transaction_timeout_ms=0,
            transaction_start_time_ms=-1,
            producer_id=-1,
            producer_epoch=-1,
            topics=[],
        )
    return _State(
        error_code=ErrorCode.NONE,
        transactional_id=tid,
        transaction_state=rec.state.value,
        transaction_timeout_ms=rec.timeout_ms,
        transaction_start_time_ms=rec.started_ms,
        producer_id=rec.producer_id,
        producer_epoch=rec.epoch,
        # Kafka leaves out the topics the principal may not describe.
        topics=[
            _Topic(topic=t, partitions=ps)
            for t, ps in sorted(_partitions(rec.topics))
            if ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, t, log=False)
        ],
    )


def _partitions(stored: set[str]) -> list[tuple[str, list[int]]]:
    """The transaction's TMS topics as Kafka topics and partitions."""
    out: dict[str, list[int]] = {}
    for name in stored:
        kafka_name, _, index = name.partition(PARTITION_MARK)
        out.setdefault(kafka_name, []).append(int(index or 0))
    return [(t, sorted(ps)) for t, ps in out.items()]


async def handle(ctx: RequestContext, req: Any) -> Any:
    loaded = ErrorCode.NONE
    try:
        await ctx.broker.txns.ready()
    except TxnError as exc:
        loaded = exc.code
    states = [_describe(ctx, tid, loaded) async for tid in ctx.broker.paced(req.transactional_ids)]
    return ctx.response(throttle_time_ms=0, transaction_states=states)


ROUTE = Route(ApiKey.DESCRIBE_TRANSACTIONS, 0, 0, handle)
