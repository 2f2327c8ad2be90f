"""DescribeCluster (the AdminClient's describeCluster, kafka-features.sh, the web
consoles): the cluster id, the gateways as brokers, and the controller (this gateway,
or with --cluster the one that holds the controller lease), as Metadata reports them."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeClusterResponse
from tmsgate.protocol import ApiKey, ErrorCode

from ...acls import CLUSTER_NAME, Operation, ResourceType
from ..context import RequestContext
from ..routes import Route

_Broker = DescribeClusterResponse.DescribeClusterBroker
BROKER_ENDPOINT = 1
# Kafka's AclOperation codes a cluster reports (KIP-430), when asked for them.
_CLUSTER_OPERATIONS = (5, 7, 8, 9, 10, 11, 12)


async def handle(ctx: RequestContext, req: Any) -> Any:
    broker = ctx.broker
    endpoint = getattr(req, "endpoint_type", BROKER_ENDPOINT) if ctx.version >= 1 else 1
    if endpoint != BROKER_ENDPOINT:
        return ctx.response(
            throttle_time_ms=0,
            error_code=ErrorCode.MISMATCHED_ENDPOINT_TYPE,
            error_message="The request was sent to an endpoint of type BROKER, but we "
            "wanted an endpoint of type CONTROLLER",
            endpoint_type=BROKER_ENDPOINT,
            cluster_id="",
            controller_id=-1,
            brokers=[],
            authorized_operations=None,
        )
    if broker.cluster is None:
        nodes = [(broker.config.node_id, broker.advertised_host, broker.advertised_port)]
        controller = broker.config.node_id
    else:
        nodes = [(n.node_id, n.host, n.port) for n in broker.cluster.nodes()]
        lead = broker.cluster.controller()
        controller = -1 if lead is None else lead.node_id
    brokers = [
        _Broker(broker_id=n, host=h, port=p, rack=None, is_fenced=False) for n, h, p in nodes
    ]
    ops = None  # not asked: Kafka's -2^31 (kafka-python's bitfield encodes None so)
    if req.include_cluster_authorized_operations:
        ops = [
            op
            for op in _CLUSTER_OPERATIONS
            if ctx.allowed(Operation(op), ResourceType.CLUSTER, CLUSTER_NAME, log=False)
        ]
    return ctx.response(
        throttle_time_ms=0,
        error_code=ErrorCode.NONE,
        error_message=None,
        endpoint_type=BROKER_ENDPOINT,
        cluster_id=broker.config.cluster_id,
        controller_id=controller,
        brokers=brokers,
        authorized_operations=ops,
    )


ROUTE = Route(ApiKey.DESCRIBE_CLUSTER, 0, 2, handle)
