"""FindCoordinator: this gateway coordinates every group and every transactional id (the
transaction coordinator is gateway/kafka/txn). With several gateways on one store
(gateway/cluster.py), a group's coordinator is the gateway holding its slot's lease, and
transactional ids go to the controller. v4+ asks for several keys at once."""

from __future__ import annotations

from typing import Any

from kafka.protocol.metadata import FindCoordinatorResponse
from tmsgate.protocol import ApiKey, ErrorCode

from ...acls import Operation, ResourceType
from ..context import RequestContext
from ..routes import Route

GROUP = 0
TRANSACTION = 1
KEY_TYPES = (GROUP, TRANSACTION)  # share groups (2) are not implemented
_Coordinator = FindCoordinatorResponse.Coordinator


def _answer(ctx: RequestContext, key_type: int, key: str) -> dict[str, Any]:
    broker = ctx.broker
    if key_type not in KEY_TYPES:
        return {
            "error_code": ErrorCode.INVALID_REQUEST,
            "error_message": f"coordinator key type {key_type} is not supported",
            "node_id": -1,
            "host": "",
            "port": -1,
        }
    if broker.cluster is not None:
        if key_type == GROUP:
            node = broker.cluster.group_coordinator(key)
            missing = "no gateway coordinates this group's slot at the moment"
        else:
            node = broker.cluster.controller()
            missing = "no gateway is the controller at the moment"
        if node is None:  # a slot moving (or between controllers): clients ask again
            return {
                "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
                "error_message": missing,
                "node_id": -1,
                "host": "",
                "port": -1,
            }
        return {
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "node_id": node.node_id,
            "host": node.host,
            "port": node.port,
        }
    return {
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "node_id": broker.config.node_id,
        "host": broker.advertised_host,
        "port": broker.advertised_port,
    }


# Kafka: Describe on the group or transactional id the key names.
_RESOURCE = {GROUP: ResourceType.GROUP, TRANSACTION: ResourceType.TRANSACTIONAL_ID}
_DENIED = {
    GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
    TRANSACTION: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}


def _denied(ctx: RequestContext, key_type: int, key: str) -> dict[str, Any] | None:
    if key_type not in KEY_TYPES or ctx.allowed(Operation.DESCRIBE, _RESOURCE[key_type], key):
        return None
    return {
        "error_code": _DENIED[key_type],
        "error_message": None,  # as Kafka: clients name the error themselves
        "node_id": -1,
        "host": "",
        "port": -1,
    }


async def handle(ctx: RequestContext, req: Any) -> Any:
    key_type = req.key_type if ctx.version >= 1 else GROUP
    if ctx.version >= 4:
        found = [
            _Coordinator(key=key, **(_denied(ctx, key_type, key) or _answer(ctx, key_type, key)))
            async for key in ctx.broker.paced(req.coordinator_keys)
        ]
        return ctx.response(throttle_time_ms=0, coordinators=found)
    answer = _denied(ctx, key_type, req.key) or _answer(ctx, key_type, req.key)
    return ctx.response(throttle_time_ms=0, **answer)


ROUTE = Route(ApiKey.FIND_COORDINATOR, 0, 5, handle)
