"""DescribeClientQuotas (v0-1): ``kafka-configs.sh --describe --entity-type users`` asks it
beside DescribeUserScramCredentials. tmsgate sets no client quotas, so a valid filter gets
no entries; an invalid one Kafka 4.1's error (ClientQuotasImage.describe, measured). It
needs DescribeConfigs on the cluster."""

from __future__ import annotations

from typing import Any

from tmsgate.protocol import ApiKey, ErrorCode

from ...acls import CLUSTER_NAME, Operation, ResourceType
from ..context import RequestContext
from ..routes import Route
from .describe_user_scram_credentials import DENIED

QUOTA_ENTITY_TYPES = ("user", "client-id", "ip")
EXACT, DEFAULT, SPECIFIED = 0, 1, 2  # match types


def _quota_filter_error(components: list[Any]) -> tuple[ErrorCode, str] | None:
    """Kafka's checks of a DescribeClientQuotas filter, in its order and words."""
    invalid = ErrorCode.INVALID_REQUEST
    seen: set[str] = set()
    for c in components:
        kind = c.entity_type
        if not kind:
            return invalid, "Invalid empty entity type."
        if kind in seen:
            return invalid, f"Entity type {kind} cannot appear more than once in the filter."
        if kind not in QUOTA_ENTITY_TYPES:
            return ErrorCode.UNSUPPORTED_VERSION, f"Unsupported entity type {kind}"
        if c.match_type == EXACT and c.match is None:
            return invalid, "Request specified MATCH_TYPE_EXACT, but set match string to null."
        for match_type, name in ((DEFAULT, "DEFAULT"), (SPECIFIED, "SPECIFIED")):
            if c.match_type == match_type and c.match is not None:
                return invalid, (
                    f"Request specified MATCH_TYPE_{name}, but also specified a match string."
                )
        if c.match_type not in (EXACT, DEFAULT, SPECIFIED):
            return invalid, f"Unknown match type {c.match_type}"
        seen.add(kind)
    if "ip" in seen and seen & {"user", "client-id"}:
        return invalid, (
            "Invalid entity filter component combination. IP filter component should not be "
            "used with user or clientId filter component."
        )
    return None


async def handle(ctx: RequestContext, req: Any) -> Any:
    if not ctx.allowed(Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        error: tuple[ErrorCode, str] | None = (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, DENIED)
    else:
        error = _quota_filter_error(list(req.components))
    code, message = error or (ErrorCode.NONE, "")
    entries = None if error else []
    return ctx.response(throttle_time_ms=0, error_code=code, error_message=message, entries=entries)


ROUTE = Route(ApiKey.DESCRIBE_CLIENT_QUOTAS, 0, 1, handle)
