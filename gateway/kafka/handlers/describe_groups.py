"""DescribeGroups: state, protocol and members (with metadata and assignment once the
group is Stable). An unknown group is reported Dead; from v6 with GROUP_ID_NOT_FOUND."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeGroupsRequest, DescribeGroupsResponse
from tmsgate.protocol import ErrorCode

from ...acls import Operation, ResourceType
from ..context import RequestContext
from ..groups import GroupError, GroupState, GroupSummary
from ..routes import Route

_Group = DescribeGroupsResponse.DescribedGroup
_Member = _Group.DescribedGroupMember
# The group operations Kafka reports: READ (3), DELETE (6), DESCRIBE (8).
GROUP_OPERATIONS = frozenset({3, 6, 8})


def _described(group_id: str, s: GroupSummary | None, version: int, ops: Any) -> Any:
    if s is None:
        missing = version >= 6
        return _Group(
            error_code=ErrorCode.GROUP_ID_NOT_FOUND if missing else ErrorCode.NONE,
            error_message=f"group {group_id!r} does not exist" if missing else None,
            group_id=group_id,
            group_state=GroupState.DEAD.value,
            protocol_type="",
            protocol_data="",
            members=[],
            authorized_operations=ops,
        )
    members = [
        _Member(
            member_id=m.member_id,
            group_instance_id=m.instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            member_metadata=m.metadata,
            member_assignment=m.assignment,
        )
        for m in s.members
    ]
    return _Group(
        error_code=ErrorCode.NONE,
        error_message=None,
        group_id=group_id,
        group_state=s.state.value,
        protocol_type=s.protocol_type,
        protocol_data=s.protocol_data,
        members=members,
        authorized_operations=ops,
    )


_DENIED = GroupError(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Authorization failed.")


def _failed(group_id: str, exc: GroupError, ops: Any) -> Any:
    return _Group(
        error_code=exc.code,
        error_message=str(exc),
        group_id=group_id,
        group_state="",
        protocol_type="",
        protocol_data="",
        members=[],
        authorized_operations=ops,
    )


async def handle(ctx: RequestContext, req: Any) -> Any:
    coordinator = ctx.broker.groups
    want_ops = ctx.version >= 3 and req.include_authorized_operations
    groups = []
    # Paced: the ids are what the client sent, and describing one awaits nothing.
    async for group_id in ctx.broker.paced(req.groups):
        # Kafka: the operations this principal may do on the group (all, without ACLs).
        ops = (
            {
                op
                for op in GROUP_OPERATIONS
                if ctx.allowed(Operation(op), ResourceType.GROUP, group_id, log=False)
            }
            if want_ops
            else None
        )
        if not ctx.allowed(Operation.DESCRIBE, ResourceType.GROUP, group_id):
            groups.append(_failed(group_id, _DENIED, ops))
            continue
        try:
            summary = await coordinator.describe(group_id)
        except GroupError as exc:  # loading failed, or shutting down
            groups.append(_failed(group_id, exc, ops))
            continue
        groups.append(_described(group_id, summary, ctx.version, ops))
    return ctx.response(throttle_time_ms=0, groups=groups)


ROUTE = Route(DescribeGroupsRequest.API_KEY, 0, 6, handle)
