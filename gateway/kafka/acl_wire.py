"""What the three ACL APIs share: Kafka's wire codes as the ACL model's enums, filters from
their wire form, and the checks that refuse a whole request (handlers/*_acls.py)."""

from __future__ import annotations

from typing import Any

from tmsgate.protocol import ErrorCode

from ..acls import CLUSTER_NAME, AclFilter, Operation, PatternType, Permission, ResourceType
from .context import RequestContext

NO_AUTHORIZER = "No Authorizer is configured on the broker"  # Kafka's words


def enum_of(kind: type[Any], value: int) -> Any:
    """A wire code as its enum, UNKNOWN (0) for a code Kafka does not define."""
    try:
        return kind(value)
    except ValueError:
        return kind(0)


def filter_of(wire: Any) -> AclFilter:
    """A DescribeAcls request or a DeleteAcls filter (the same fields) as an AclFilter."""
    return AclFilter(
        resource_type=enum_of(ResourceType, wire.resource_type_filter),
        resource_name=wire.resource_name_filter,
        pattern_type=enum_of(PatternType, wire.pattern_type_filter),
        principal=wire.principal_filter,
        host=wire.host_filter,
        operation=enum_of(Operation, wire.operation),
        permission=enum_of(Permission, wire.permission_type),
    ).validate()


def refusal(ctx: RequestContext, operation: Operation) -> tuple[ErrorCode, str] | None:
    """Why an ACL request is refused as a whole, if it is."""
    if not ctx.broker.authorizer.enabled:
        return ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER
    if not ctx.allowed(operation, ResourceType.CLUSTER, CLUSTER_NAME):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."
    return None
