"""InitProducerId for idempotent producers: always a fresh producer id with epoch 0, as
Kafka answers requests without a transactional id (also a KIP-360 bump request: the
client then simply continues under the new id, and no client can take over another's).

Kafka transactions (a transactional.id) are not implemented: TMS transactions are
used through the ``tms.tx.write_pointer`` record header instead."""

from __future__ import annotations

from typing import Any

from tmsgate.protocol import ApiKey, ErrorCode

from ..context import RequestContext
from ..routes import Route


async def handle(ctx: RequestContext, req: Any) -> Any:
    if req.transactional_id is not None:
        # Kafka tells null (idempotence only) from "": an empty id is INVALID_REQUEST.
        empty = req.transactional_id == ""
        return ctx.response(
            throttle_time_ms=0,
            error_code=ErrorCode.INVALID_REQUEST if empty else ErrorCode.UNSUPPORTED_VERSION,
            producer_id=-1,
            producer_epoch=-1,
        )
    pid = await ctx.broker.producers.allocate_id()
    return ctx.response(
        throttle_time_ms=0, error_code=ErrorCode.NONE, producer_id=pid, producer_epoch=0
    )


ROUTE = Route(ApiKey.INIT_PRODUCER_ID, 0, 5, handle)
