"""Metadata: this gateway is the only broker and leads partition 0 of every topic.

Topics are auto-created here (auto.create.topics.enable, and the request's
allow_auto_topic_creation from v4) as Kafka does. Leader epochs are reported as -1
(unknown) so clients skip epoch validation: a TMS topic has no leader changes.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.metadata import MetadataResponse
from tmsgate.protocol import ApiKey, ErrorCode

from ..context import RequestContext
from ..routes import Route
from ..topics import TopicInfo

_Broker = MetadataResponse.MetadataResponseBroker
_Topic = MetadataResponse.MetadataResponseTopic
_Partition = _Topic.MetadataResponsePartition


def _topic(info: TopicInfo, node_id: int) -> Any:
    partition = _Partition(
        error_code=ErrorCode.NONE,
        partition_index=0,
        leader_id=node_id,
        leader_epoch=-1,
        replica_nodes=[node_id],
        isr_nodes=[node_id],
        offline_replicas=[],
    )
    return _Topic(
        error_code=ErrorCode.NONE,
        name=info.name,
        topic_id=info.uuid,
        is_internal=False,
        partitions=[partition],
    )


def _missing(name: str | None, code: ErrorCode, topic_id: Any = None) -> Any:
    kwargs = {"topic_id": topic_id} if topic_id is not None else {}
    return _Topic(error_code=code, name=name, is_internal=False, partitions=[], **kwargs)


async def _requested(ctx: RequestContext, req: Any) -> list[Any]:
    broker = ctx.broker
    node = broker.config.node_id
    auto = bool(req.allow_auto_topic_creation) if ctx.version >= 4 else True
    out = []
    for wanted in req.topics:
        name = wanted.name
        if name is None:  # v10+: asked by topic id
            info = await broker.topics.by_uuid(wanted.topic_id)
            if info is None:
                out.append(_missing(None, ErrorCode.UNKNOWN_TOPIC_ID, wanted.topic_id))
            else:
                out.append(_topic(info, node))
            continue
        info, code = await broker.topics.resolve(name, auto)
        if info is None:
            out.append(_missing(name, code))
        else:
            out.append(_topic(info, node))
    return out


async def handle(ctx: RequestContext, req: Any) -> Any:
    broker = ctx.broker
    node = broker.config.node_id
    # v0 asks for all topics with an empty list, v1+ with null.
    if req.topics is None or (ctx.version == 0 and not req.topics):
        topics = [_topic(info, node) for info in await broker.topics.list()]
    else:
        topics = await _requested(ctx, req)
    brokers = [
        _Broker(node_id=node, host=broker.advertised_host, port=broker.advertised_port, rack=None)
    ]
    return ctx.response(
        throttle_time_ms=0,
        brokers=brokers,
        cluster_id=broker.config.cluster_id,
        controller_id=node,
        topics=topics,
    )


ROUTE = Route(ApiKey.METADATA, 1, 13, handle)
