"""DeleteAcls (v1-3, kafka-acls.sh --remove): the bindings any filter matches are deleted
in one write, and each filter lists what it matched. Needs Alter on the cluster."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DeleteAclsResponse
from tmsgate.protocol import ApiKey, ErrorCode

from ...acls import AclBinding, AclError, AclFilter, Operation
from ..acl_wire import filter_of, refusal
from ..context import RequestContext
from ..errors import error_of
from ..routes import Route

_Result = DeleteAclsResponse.DeleteAclsFilterResult
_Match = _Result.DeleteAclsMatchingAcl


def _matched(gone: list[AclBinding]) -> Any:
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


async def _delete(ctx: RequestContext, wires: list[Any]) -> list[Any]:
    """Every valid filter against the ACLs as they were before the request (Kafka's
    AclControlManager), in one write; an invalid filter gets INVALID_REQUEST alone."""
    results: list[Any] = []
    filters: dict[int, AclFilter] = {}
    async for i, wire in ctx.broker.paced(enumerate(wires)):
        try:
            filters[i] = filter_of(wire)
            results.append(None)
        except AclError as exc:
            results.append(
                _Result(
                    error_code=ErrorCode.INVALID_REQUEST, error_message=str(exc), matching_acls=[]
                )
            )
    try:
        matched = await ctx.broker.run(ctx.broker.authorizer.delete_all, list(filters.values()))
    except Exception as exc:
        code, message = error_of(exc, "delete ACLs")
        failed = _Result(error_code=code, error_message=message, matching_acls=[])
        return [failed if r is None else r for r in results]
    for i, gone in zip(filters, matched, strict=True):
        results[i] = _matched(gone)
    return results


async def handle(ctx: RequestContext, req: Any) -> Any:
    refused = refusal(ctx, Operation.ALTER)
    if refused is not None:
        code, message = refused
        results = [
            _Result(error_code=code, error_message=message, matching_acls=[]) for _ in req.filters
        ]
    else:
        results = await _delete(ctx, list(req.filters))
    return ctx.response(throttle_time_ms=0, filter_results=results)


ROUTE = Route(ApiKey.DELETE_ACLS, 1, 3, handle)
