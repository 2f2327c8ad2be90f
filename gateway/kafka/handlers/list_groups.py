"""ListGroups: every group with its protocol type; v4 filters by state, v5 by type (all
groups here are "classic")."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import ListGroupsRequest, ListGroupsResponse
from tmsgate.protocol import ErrorCode

from ...acls import CLUSTER_NAME, Operation, ResourceType
from ..context import RequestContext
from ..groups import GroupError, GroupState
from ..routes import Route

_Listed = ListGroupsResponse.ListedGroup
CLASSIC = "classic"


async def handle(ctx: RequestContext, req: Any) -> Any:
    states: set[GroupState] | None = None
    if ctx.version >= 4 and req.states_filter:
        # A state name Kafka does not know matches no group.
        states = {
            s
            async for s in ctx.broker.paced(map(GroupState.parse, req.states_filter))
            if s is not None
        }
        if not states:
            return ctx.response(throttle_time_ms=0, error_code=ErrorCode.NONE, groups=[])
    types = set(req.types_filter) if ctx.version >= 5 and req.types_filter else None
    try:
        listed = await ctx.broker.groups.list(states, types)
    except GroupError as exc:  # loading failed, or shutting down
        return ctx.response(throttle_time_ms=0, error_code=exc.code, groups=[])
    if not ctx.allowed(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME, log=False):
        # Kafka: without Describe on the cluster, the groups one may describe.
        listed = [
            g
            async for g in ctx.broker.paced(listed)
            if ctx.allowed(Operation.DESCRIBE, ResourceType.GROUP, g.group_id, log=False)
        ]
    groups = [
        _Listed(
            group_id=g.group_id,
            protocol_type=g.protocol_type,
            group_state=g.state.value,
            group_type=CLASSIC,
        )
        async for g in ctx.broker.paced(listed)  # clients can make groups by the thousand
    ]
    return ctx.response(throttle_time_ms=0, error_code=ErrorCode.NONE, groups=groups)


ROUTE = Route(ListGroupsRequest.API_KEY, 0, 5, handle)
