"""InitProducerId for idempotent producers: a fresh producer id, or (KIP-360, v3+) the
same id with the next epoch when the client asks to bump it after an error.

Kafka transactions (a transactional.id) are not implemented: TMS transactions are
used through the ``tms.tx.write_pointer`` record header instead."""

from __future__ import annotations

from typing import Any

from tmsgate.protocol import ApiKey, ErrorCode

from ..context import RequestContext
from ..routes import Route

MAX_EPOCH = 32767


async def handle(ctx: RequestContext, req: Any) -> Any:
    if req.transactional_id is not None:
        return ctx.response(
            throttle_time_ms=0,
            error_code=ErrorCode.UNSUPPORTED_VERSION,
            producer_id=-1,
            producer_epoch=-1,
        )
    pid, epoch = -1, -1
    if ctx.version >= 3:
        pid, epoch = req.producer_id, req.producer_epoch
    if pid >= 0 and 0 <= epoch < MAX_EPOCH - 1:
        return ctx.response(
            throttle_time_ms=0, error_code=ErrorCode.NONE, producer_id=pid, producer_epoch=epoch + 1
        )
    pid = await ctx.broker.producers.allocate_id()
    return ctx.response(
        throttle_time_ms=0, error_code=ErrorCode.NONE, producer_id=pid, producer_epoch=0
    )


ROUTE = Route(ApiKey.INIT_PRODUCER_ID, 0, 5, handle)
