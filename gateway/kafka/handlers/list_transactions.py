"""ListTransactions (``kafka-transactions.sh list``): transactional ids with their producer
and state, filtered by state, producer id and (v1) how long they have been open."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin.transactions import ListTransactionsResponse
from tmsgate.protocol import ApiKey, ErrorCode

from ...acls import Operation, ResourceType
from ..context import RequestContext
from ..routes import Route
from ..txn import TxnError, TxnState

_State = ListTransactionsResponse.TransactionState
_KNOWN_STATES = {s.value for s in TxnState} | {"Dead", "PrepareEpochFence"}


async def handle(ctx: RequestContext, req: Any) -> Any:
    txns = ctx.broker.txns
    if not txns.coordinates:  # several gateways: the controller lists them all
        return ctx.response(
            throttle_time_ms=0, error_code=0, unknown_state_filters=[], transaction_states=[]
        )
    try:
        await txns.ready()
    except TxnError as exc:
        return ctx.response(
            throttle_time_ms=0, error_code=exc.code, unknown_state_filters=[], transaction_states=[]
        )
    filters = list(req.state_filters or [])
    duration = req.duration_filter if ctx.version >= 1 else -1
    listed = txns.list(filters, req.producer_id_filters or [], duration)
    states = [
        _State(
            transactional_id=rec.transactional_id,
            producer_id=rec.producer_id,
            transaction_state=rec.state.value,
        )
        async for rec in ctx.broker.paced(listed)
        if ctx.allowed(
            Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, rec.transactional_id, log=False
        )
    ]
    return ctx.response(
        throttle_time_ms=0,
        error_code=ErrorCode.NONE,
        unknown_state_filters=[f for f in filters if f not in _KNOWN_STATES],
        transaction_states=states,
    )


ROUTE = Route(ApiKey.LIST_TRANSACTIONS, 0, 1, handle)
