"""DeleteGroups: an empty group and its committed offsets go away (NON_EMPTY_GROUP while
it has members, GROUP_ID_NOT_FOUND if it does not exist)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DeleteGroupsRequest, DeleteGroupsResponse

from ..context import RequestContext
from ..groups import GroupError
from ..routes import Route

_Result = DeleteGroupsResponse.DeletableGroupResult


async def handle(ctx: RequestContext, req: Any) -> Any:
    names = list(req.groups_names)
    try:
        codes = await ctx.broker.groups.delete_groups(names)
    except GroupError as exc:  # loading failed, or shutting down
        codes = [exc.code for _ in names]
    results = [
        _Result(group_id=g, error_code=c)
        async for g, c in ctx.broker.paced(zip(names, codes, strict=True))  # client's list
    ]
    return ctx.response(throttle_time_ms=0, results=results)


ROUTE = Route(DeleteGroupsRequest.API_KEY, 0, 2, handle)
