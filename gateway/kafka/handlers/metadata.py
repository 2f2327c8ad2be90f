"""Metadata: this gateway is the only broker and leads every partition of every topic;
with several gateways on one store (gateway/cluster.py), every live gateway is a broker,
each partition's leader is the gateway holding its lease (none while it moves:
LEADER_NOT_AVAILABLE, and clients ask again), and the controller coordinates the groups.

Topics are auto-created here (auto.create.topics.enable, and the request's
allow_auto_topic_creation from v4) as Kafka does, at most MAX_AUTO_CREATE_PER_REQUEST
per request. Leader epochs are reported as -1 (unknown) so clients skip epoch
validation: a TMS topic has no leader changes.

A request may name hundreds of thousands of topics (1 MB of empty names is 500,000):
each topic is answered once however often it is named, as Kafka does, and the lists
are walked with ``broker.paced`` so that other clients are served meanwhile.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tmsgate.protocol import (
    ApiKey,
    ErrorCode,
    MetadataBroker,
    MetadataPartition,
    MetadataResult,
    MetadataTopic,
    encode_metadata_topic,
)

from ...acls import Operation, ResourceType
from ..context import RequestContext
from ..routes import Route
from ..topics import TopicInfo

if TYPE_CHECKING:
    from ..broker import Broker


def _partition(index: int, node_id: int) -> MetadataPartition:
    if node_id < 0:  # moving between gateways
        return MetadataPartition(ErrorCode.LEADER_NOT_AVAILABLE, index, -1, ())
    return MetadataPartition(ErrorCode.NONE, index, node_id, (node_id,))


def _entry(ctx: RequestContext, info: TopicInfo) -> MetadataTopic | bytes:
    """A topic's answer; encoded once per version while the topic stays as it is (with
    one gateway: with several, leaders move without the topic changing)."""
    broker = ctx.broker
    if broker.cluster is not None:
        return _topic(info, broker)
    version = ctx.version
    return info.memo(
        ("metadata", version, broker.config.node_id),
        lambda: encode_metadata_topic(version, _topic(info, broker)),
    )


def _topic(info: TopicInfo, broker: Broker) -> MetadataTopic:
    cluster = broker.cluster
    if cluster is None:
        node_id = broker.config.node_id
        partitions = [_partition(index, node_id) for index in range(info.partitions)]
    else:
        partitions = []
        for index in range(info.partitions):
            leader = cluster.leader(broker.topics.topic_id(info.name, index))
            partitions.append(_partition(index, -1 if leader is None else leader.node_id))
    return MetadataTopic(ErrorCode.NONE, info.name, info.uuid, partitions)


def _missing(name: str | None, code: ErrorCode, topic_id: Any = None) -> MetadataTopic:
    return MetadataTopic(code, name, topic_id, ())


# Kafka creates every unknown topic a Metadata request names, in the background, and
# answers LEADER_NOT_AVAILABLE meanwhile. Here each creation is an fsync'd store write
# made before answering, so one request creates at most this many; the others get
# that same retriable answer, and the client's next request creates the next ones
# (a client naming thousands of new topics, or a hostile one, cannot fill the store
# or hold one answer for minutes).
MAX_AUTO_CREATE_PER_REQUEST = 100


async def _requested(ctx: RequestContext, req: Any) -> list[MetadataTopic | bytes]:
    broker = ctx.broker
    auto = bool(req.allow_auto_topic_creation) if ctx.version >= 4 else True
    auto = auto and broker.config.auto_create_topics
    creations_left = MAX_AUTO_CREATE_PER_REQUEST
    names: dict[str, None] = {}  # once each, in request order
    ids: dict[Any, None] = {}  # v10+: asked by topic id
    async for wanted in broker.paced(req.topics):
        if wanted.name is None:
            ids[wanted.topic_id] = None
        else:
            names[wanted.name] = None
    out = []
    async for name in broker.paced(names):
        if not ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, name):
            out.append(_missing(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            continue
        info, code = await broker.topics.resolve(name)
        if info is None and code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and auto:
            if not ctx.may_create_topic(name):
                # Kafka: a topic that would be created, for who may not, is not authorized.
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif creations_left:
                creations_left -= 1
                info, code = await broker.topics.resolve(name, True)
            else:
                code = ErrorCode.LEADER_NOT_AVAILABLE
        out.append(_missing(name, code) if info is None else _entry(ctx, info))
    async for topic_id in broker.paced(ids):
        info = await broker.topics.by_uuid(topic_id)
        if info is not None and not ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, info.name):
            # Kafka: not authorized, and the name not told
            out.append(_missing(None, ErrorCode.TOPIC_AUTHORIZATION_FAILED, topic_id))
        elif info is None:
            out.append(_missing(None, ErrorCode.UNKNOWN_TOPIC_ID, topic_id))
        else:
            out.append(_entry(ctx, info))
    return out


async def handle(ctx: RequestContext, req: Any) -> MetadataResult:
    broker = ctx.broker
    # v0 asks for all topics with an empty list, v1+ with null.
    if req.topics is None or (ctx.version == 0 and not req.topics):
        # Only the topics the principal may describe, as Kafka lists them.
        topics = [
            _entry(ctx, info)
            async for info in broker.paced(await broker.topics.list())
            if ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, info.name, log=False)
        ]
    else:
        topics = await _requested(ctx, req)
    if broker.cluster is None:
        node = broker.config.node_id
        brokers = [MetadataBroker(node, broker.advertised_host, broker.advertised_port)]
    else:
        brokers = [MetadataBroker(n.node_id, n.host, n.port) for n in broker.cluster.nodes()]
        controller = broker.cluster.controller()
        node = -1 if controller is None else controller.node_id
    # Encoded directly (protocol/_metadata_response.py): the generic encoder cost ~50 µs
    # a topic, and clients spread over many topics ask for all of them again and again.
    return MetadataResult(ctx.version, brokers, broker.config.cluster_id, node, topics)


ROUTE = Route(ApiKey.METADATA, 1, 13, handle)
