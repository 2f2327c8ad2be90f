"""JoinGroup: long-polls until the group's rebalance completes (or the request is refused).

v4+ members first get MEMBER_ID_REQUIRED with their id (KIP-394); v5+ may be static
(group.instance.id); v9 lets a returning static leader skip the assignment."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import JoinGroupRequest, JoinGroupResponse
from tmsgate.protocol import ErrorCode

from ...acls import Operation, ResourceType
from ..context import RequestContext
from ..groups import JoinRequest, client_host
from ..routes import Route

_Member = JoinGroupResponse.JoinGroupResponseMember


async def handle(ctx: RequestContext, req: Any) -> Any:
    v = ctx.version
    paced = ctx.broker.paced  # a client may name any number of protocols
    if not ctx.allowed(Operation.READ, ResourceType.GROUP, req.group_id):
        return ctx.response(
            throttle_time_ms=0,
            error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
            generation_id=-1,
            protocol_type=None,
            protocol_name=None if v >= 7 else "",
            leader="",
            skip_assignment=False,
            member_id=req.member_id,
            members=[],
        )
    protocols = tuple([(p.name, bytes(p.metadata)) async for p in paced(req.protocols)])
    join = JoinRequest(
        group_id=req.group_id,
        member_id=req.member_id,
        instance_id=req.group_instance_id if v >= 5 else None,
        protocol_type=req.protocol_type,
        protocols=protocols,
        session_timeout_ms=req.session_timeout_ms,
        # v0 has no rebalance timeout: Kafka uses the session timeout (so do we for a
        # negative one, which would otherwise end every rebalance at once).
        rebalance_timeout_ms=(
            req.rebalance_timeout_ms
            if v >= 1 and req.rebalance_timeout_ms >= 0
            else req.session_timeout_ms
        ),
        client_id=ctx.request.client_id or "",
        client_host=client_host(ctx.peer),
        require_known_member_id=v >= 4,
        supports_skip_assignment=v >= 9,
        reason=req.reason if v >= 8 else None,
    )
    result = await ctx.broker.groups.join(join)
    members = [
        _Member(member_id=m.member_id, group_instance_id=m.instance_id, metadata=m.metadata)
        async for m in paced(result.members)
    ]
    return ctx.response(
        throttle_time_ms=0,
        error_code=result.error,
        generation_id=result.generation,
        protocol_type=result.protocol_type,
        # Nullable only from v7.
        protocol_name=result.protocol_name if v >= 7 else (result.protocol_name or ""),
        leader=result.leader,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=members,
    )


ROUTE = Route(JoinGroupRequest.API_KEY, 0, 9, handle)
