"""AddOffsetsToTxn: a group's offsets (sent next with TxnOffsetCommit) commit with the
transaction. Capped at v3: v4 goes with transactions v2 (KIP-890)."""

from __future__ import annotations

from typing import Any

from tmsgate.protocol import ApiKey, ErrorCode

from ...acls import Operation, ResourceType
from ..context import RequestContext
from ..routes import Route
from ..txn import TxnError, for_version


async def handle(ctx: RequestContext, req: Any) -> Any:
    code = ErrorCode.NONE
    if not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not ctx.allowed(Operation.READ, ResourceType.GROUP, req.group_id):
        code = ErrorCode.GROUP_AUTHORIZATION_FAILED
    if code:
        return ctx.response(throttle_time_ms=0, error_code=code)
    try:
        await ctx.broker.txns.add_offsets(
            req.transactional_id, req.producer_id, req.producer_epoch, req.group_id
        )
    except TxnError as exc:
        code = for_version(exc.code, ctx.version, 2)
    return ctx.response(throttle_time_ms=0, error_code=code)


ROUTE = Route(ApiKey.ADD_OFFSETS_TO_TXN, 0, 3, handle)
