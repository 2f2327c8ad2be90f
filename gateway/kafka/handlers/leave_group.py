"""LeaveGroup: one member (v0-2) or a batch, by member id or by static instance id
(v3+, KIP-345). The group rebalances without the members that left."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import LeaveGroupRequest, LeaveGroupResponse
from tmsgate.protocol import ErrorCode

from ...acls import Operation, ResourceType
from ..context import RequestContext
from ..routes import Route

_Member = LeaveGroupResponse.MemberResponse


async def handle(ctx: RequestContext, req: Any) -> Any:
    paced = ctx.broker.paced  # v3+ names members by the batch
    if not ctx.allowed(Operation.READ, ResourceType.GROUP, req.group_id):
        fields = {"members": []} if ctx.version >= 3 else {}
        return ctx.response(
            throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, **fields
        )
    if ctx.version >= 3:
        leaving = [(m.member_id, m.group_instance_id) async for m in paced(req.members)]
    else:
        leaving = [(req.member_id, None)]
    top, codes = await ctx.broker.groups.leave(req.group_id, leaving)
    if ctx.version >= 3:
        members = [
            _Member(member_id=mid, group_instance_id=iid, error_code=code)
            async for (mid, iid), code in paced(zip(leaving, codes, strict=True))
        ]
        return ctx.response(throttle_time_ms=0, error_code=top, members=members)
    # v0-2 have one error: the group's, else the member's (Kafka's LeaveGroupResponse).
    code = top or next((c for c in codes if c), ErrorCode.NONE)
    return ctx.response(throttle_time_ms=0, error_code=code)


ROUTE = Route(LeaveGroupRequest.API_KEY, 0, 5, handle)
