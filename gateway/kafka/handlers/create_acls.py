"""CreateAcls (v1-3, kafka-acls.sh --add): each creation is stored on its own (one row
per binding, gateway/acls.py) and answered on its own, as Kafka does; the decisions of
every connection change at once. Needs Alter on the cluster."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import CreateAclsResponse
from tmsgate.protocol import ApiKey, ErrorCode

from ...acls import AclBinding, AclError, Operation, PatternType, Permission, ResourceType
from ..acl_wire import enum_of, refusal
from ..context import RequestContext
from ..errors import error_of
from ..routes import Route

_Result = CreateAclsResponse.AclCreationResult


def binding_of(wire: Any) -> AclBinding:
    return AclBinding(
        enum_of(ResourceType, wire.resource_type),
        wire.resource_name or "",
        enum_of(PatternType, wire.resource_pattern_type),
        wire.principal or "",
        wire.host or "",
        enum_of(Operation, wire.operation),
        enum_of(Permission, wire.permission_type),
    ).validate()


async def _create(ctx: RequestContext, wire: Any) -> Any:
    try:
        binding = binding_of(wire)
        await ctx.broker.run(ctx.broker.authorizer.create, binding)
    except AclError as exc:
        return _Result(error_code=ErrorCode.INVALID_REQUEST, error_message=str(exc))
    except Exception as exc:
        code, message = error_of(exc, "create an ACL")
        return _Result(error_code=code, error_message=message)
    return _Result(error_code=ErrorCode.NONE, error_message=None)


async def handle(ctx: RequestContext, req: Any) -> Any:
    refused = refusal(ctx, Operation.ALTER)
    if refused is not None:
        code, message = refused
        results = [_Result(error_code=code, error_message=message) for _ in req.creations]
    else:
        results = [await _create(ctx, c) async for c in ctx.broker.paced(req.creations)]
    return ctx.response(throttle_time_ms=0, results=results)


ROUTE = Route(ApiKey.CREATE_ACLS, 1, 3, handle)
