"""Heartbeat: keeps a member alive; REBALANCE_IN_PROGRESS tells it to rejoin."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import HeartbeatRequest
from tmsgate.protocol import ErrorCode

from ...acls import Operation, ResourceType
from ..context import RequestContext
from ..routes import Route


async def handle(ctx: RequestContext, req: Any) -> Any:
    if not ctx.allowed(Operation.READ, ResourceType.GROUP, req.group_id):
        denied = ErrorCode.GROUP_AUTHORIZATION_FAILED
        return ctx.response(throttle_time_ms=0, error_code=denied)
    instance_id = req.group_instance_id if ctx.version >= 3 else None
    code, _why = await ctx.broker.groups.heartbeat(
        req.group_id, req.member_id, instance_id, req.generation_id
    )
    return ctx.response(throttle_time_ms=0, error_code=code)


ROUTE = Route(HeartbeatRequest.API_KEY, 0, 4, handle)
