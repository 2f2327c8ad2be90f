"""DeleteAcls (v1-3, kafka-acls.sh --remove): each filter deletes the bindings it
matches and lists them. Needs Alter on the cluster."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DeleteAclsResponse
from tmsgate.protocol import ApiKey, ErrorCode

from ...acls import AclError, Operation
from ..context import RequestContext
from ..errors import error_of
from ..routes import Route
from .describe_acls import filter_of, refusal

_Result = DeleteAclsResponse.DeleteAclsFilterResult
_Match = _Result.DeleteAclsMatchingAcl


async def _delete(ctx: RequestContext, wire: Any) -> Any:
    try:
        gone = await ctx.broker.run(ctx.broker.authorizer.delete, filter_of(wire))
    except AclError as exc:
        return _Result(
            error_code=ErrorCode.INVALID_REQUEST, error_message=str(exc), matching_acls=[]
        )
    except Exception as exc:
        code, message = error_of(exc, "delete ACLs")
        return _Result(error_code=code, error_message=message, matching_acls=[])
    matches = [
        _Match(
            error_code=ErrorCode.NONE,
            error_message=None,
            resource_type=b.resource_type,
            resource_name=b.resource_name,
            pattern_type=b.pattern_type,
            principal=b.principal,
            host=b.host,
            operation=b.operation,
            permission_type=b.permission,
        )
        for b in gone
    ]
    return _Result(error_code=ErrorCode.NONE, error_message=None, matching_acls=matches)


async def handle(ctx: RequestContext, req: Any) -> Any:
    refused = refusal(ctx, Operation.ALTER)
    if refused is not None:
        code, message = refused
        results = [
            _Result(error_code=code, error_message=message, matching_acls=[])
            for _ in req.filters
        ]
    else:
        results = [await _delete(ctx, f) async for f in ctx.broker.paced(req.filters)]
    return ctx.response(throttle_time_ms=0, filter_results=results)


ROUTE = Route(ApiKey.DELETE_ACLS, 1, 3, handle)
