"""EndTxn: commit (every topic of the transaction and its group offsets become visible at
once, in recoverable steps: gateway/kafka/txn/coordinator.py) or abort (nothing ever
becomes visible). Answered once the outcome is durable. Capped at v4: v5 bumps the epoch
on every transaction (transactions v2, KIP-890)."""

from __future__ import annotations

from typing import Any

from tmsgate.protocol import ApiKey, EndTxnResult, ErrorCode

from ...acls import Operation, ResourceType
from ..context import RequestContext
from ..routes import Route
from ..txn import TxnError, for_version


async def handle(ctx: RequestContext, req: Any) -> Any:
    code = ErrorCode.NONE
    if not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return EndTxnResult(ctx.version, code)
    try:
        await ctx.broker.txns.end(
            req.transactional_id, req.producer_id, req.producer_epoch, req.committed
        )
    except TxnError as exc:
        code = for_version(exc.code, ctx.version, 2)
    return EndTxnResult(ctx.version, code)  # encoded directly: one per transaction


ROUTE = Route(ApiKey.END_TXN, 0, 4, handle)
