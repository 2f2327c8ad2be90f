"""DeleteGroups: an empty group and its committed offsets go away (NON_EMPTY_GROUP while
it has members, GROUP_ID_NOT_FOUND if it does not exist)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DeleteGroupsRequest, DeleteGroupsResponse
from tmsgate.protocol import ErrorCode

from ...acls import Operation, ResourceType
from ..context import RequestContext
from ..groups import GroupError
from ..routes import Route

_Result = DeleteGroupsResponse.DeletableGroupResult


async def handle(ctx: RequestContext, req: Any) -> Any:
    names = list(req.groups_names)
    allowed = [n for n in names if ctx.allowed(Operation.DELETE, ResourceType.GROUP, n)]
    try:
        deleted = dict(zip(allowed, await ctx.broker.groups.delete_groups(allowed), strict=True))
    except GroupError as exc:  # loading failed, or shutting down
        deleted = {n: exc.code for n in allowed}
    codes = [deleted.get(n, ErrorCode.GROUP_AUTHORIZATION_FAILED) for n in names]
    results = [
        _Result(group_id=g, error_code=c)
        async for g, c in ctx.broker.paced(zip(names, codes, strict=True))  # client's list
    ]
    return ctx.response(throttle_time_ms=0, results=results)


ROUTE = Route(DeleteGroupsRequest.API_KEY, 0, 2, handle)
