"""DescribeAcls (v1-3, kafka-acls.sh --list): the bindings a filter matches, grouped by
resource pattern. Needs Describe on the cluster, as in Kafka; with the authorizer off
Kafka answers SECURITY_DISABLED, and so does this."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeAclsResponse
from tmsgate.protocol import ApiKey, ErrorCode

from ...acls import (
    AclBinding,
    AclError,
    Operation,
)
from ..acl_wire import filter_of, refusal
from ..context import RequestContext
from ..routes import Route

_Resource = DescribeAclsResponse.DescribeAclsResource
_Acl = _Resource.AclDescription


def _grouped(bindings: list[AclBinding]) -> list[Any]:
    by_resource: dict[tuple[int, str, int], list[Any]] = {}
    for b in bindings:
        by_resource.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(
            _Acl(
                principal=b.principal,
                host=b.host,
                operation=b.operation,
                permission_type=b.permission,
            )
        )
    return [
        _Resource(resource_type=rt, resource_name=name, pattern_type=pt, acls=acls)
        for (rt, name, pt), acls in sorted(by_resource.items())
    ]


async def handle(ctx: RequestContext, req: Any) -> Any:
    refused = refusal(ctx, Operation.DESCRIBE)
    if refused is None:
        try:
            found = ctx.broker.authorizer.bindings(filter_of(req))
        except AclError as exc:
            refused = ErrorCode.INVALID_REQUEST, str(exc)
    if refused is not None:
        code, message = refused
        return ctx.response(
            throttle_time_ms=0, error_code=code, error_message=message, resources=[]
        )
    return ctx.response(
        throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, resources=_grouped(found)
    )


ROUTE = Route(ApiKey.DESCRIBE_ACLS, 1, 3, handle)
