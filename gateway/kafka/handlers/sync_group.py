"""SyncGroup: the leader hands in the assignment it computed (client-side assignors, so
every assignor a client ships works); every member waits for, and gets, its share."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import SyncGroupRequest
from tmsgate.protocol import ErrorCode

from ...acls import Operation, ResourceType
from ..context import RequestContext
from ..groups import SyncRequest
from ..routes import Route


async def handle(ctx: RequestContext, req: Any) -> Any:
    v = ctx.version
    if not ctx.allowed(Operation.READ, ResourceType.GROUP, req.group_id):
        return ctx.response(
            throttle_time_ms=0,
            error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
            protocol_type=None,
            protocol_name=None,
            assignment=b"",
        )
    # Paced: the leader's list (one per member, but a client may send any number).
    assignments = {
        a.member_id: bytes(a.assignment) async for a in ctx.broker.paced(req.assignments)
    }
    sync = SyncRequest(
        group_id=req.group_id,
        generation=req.generation_id,
        member_id=req.member_id,
        instance_id=req.group_instance_id if v >= 3 else None,
        assignments=assignments,
        protocol_type=req.protocol_type if v >= 5 else None,
        protocol_name=req.protocol_name if v >= 5 else None,
    )
    result = await ctx.broker.groups.sync(sync)
    return ctx.response(
        throttle_time_ms=0,
        error_code=result.error,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )


ROUTE = Route(SyncGroupRequest.API_KEY, 0, 5, handle)
