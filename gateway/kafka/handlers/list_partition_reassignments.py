"""ListPartitionReassignments (``kafka-reassign-partitions.sh --list``, the web
consoles): the store does the replicating, so no partition is ever being reassigned and
the answer is always empty."""

from __future__ import annotations

from typing import Any

from tmsgate.protocol import ApiKey, ErrorCode

from ...acls import CLUSTER_NAME, Operation, ResourceType
from ..context import RequestContext
from ..routes import Route


async def handle(ctx: RequestContext, req: Any) -> Any:
    if not ctx.allowed(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return ctx.response(
            throttle_time_ms=0,
            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            error_message="Authorization failed.",
            topics=[],
        )
    return ctx.response(
        throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, topics=[]
    )


ROUTE = Route(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, 0, handle)
