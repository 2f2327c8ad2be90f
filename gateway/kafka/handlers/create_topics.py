"""CreateTopics: each partition is an unpartitioned TMS topic (gateway/kafka/topics.py);
num_partitions -1 is the broker default (num.partitions). The store does the
replicating, so replication_factor must be 1 (or -1); manual assignments may only name
this broker. Anything else is refused with a message saying why. Configs are validated
against Kafka 4.1's topic configs (config.py)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from kafka.protocol.admin import CreateTopicsResponse
from tmsgate.protocol import ApiKey, ErrorCode
from tmsgate.storage import TopicAlreadyExists
from tmsgate.storage.ids import MAX_PARTITIONS

from ..config import CONFIG_SOURCE, TOPIC_CONFIGS, InvalidConfig, apply_configs, topic_config
from ..context import RequestContext
from ..errors import error_of
from ..routes import Route
from ..topics import InvalidTopicName

_Result = CreateTopicsResponse.CreatableTopicResult
_Config = _Result.CreatableTopicConfigs


class Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def check_partition_count(count: int) -> None:
    if not 0 < count < MAX_PARTITIONS:
        raise Refused(
            ErrorCode.INVALID_PARTITIONS,
            f"Number of partitions must be between 1 and {MAX_PARTITIONS - 1}, got {count}.",
        )


async def check_assignments(broker: Any, assignments: Any, first: int) -> None:
    """Manual assignments (kafka-topics.sh --replica-assignment) may only name this
    broker, one replica each (Kafka: INVALID_REPLICA_ASSIGNMENT)."""
    node_id = broker.config.node_id
    index = first
    async for a in broker.paced(assignments):
        if getattr(a, "partition_index", index) != index or list(a.broker_ids) != [node_id]:
            raise Refused(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"partition {index} can only be assigned to broker {node_id}, alone",
            )
        index += 1


async def validate(broker: Any, topic: Any) -> tuple[dict[str, str], int]:
    """-> the store properties and partition count for this topic; raises Refused. The
    assignments and configs are paced: one topic may carry tens of thousands."""
    partitions = topic.num_partitions
    if topic.assignments:
        if partitions != -1 or topic.replication_factor != -1:
            raise Refused(  # Kafka's message
                ErrorCode.INVALID_REQUEST,
                "Both numPartitions or replicationFactor and replicasAssignments were set. "
                "Both cannot be used at the same time.",
            )
        partitions = len(topic.assignments)
        await check_assignments(broker, topic.assignments, 0)
    elif partitions == -1:
        partitions = broker.config.default_partitions
    check_partition_count(partitions)
    if topic.replication_factor not in (1, -1):
        raise Refused(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"replication is the store's job: replication_factor must be 1 (or -1), "
            f"got {topic.replication_factor}",
        )
    nulls = [c.name async for c in broker.paced(topic.configs) if c.value is None]
    if nulls:  # as KRaft Kafka answers (a null would otherwise mean "the default")
        raise Refused(
            ErrorCode.INVALID_CONFIG, f"Null value not supported for topic configs: {nulls}"
        )
    changes = {c.name: c.value async for c in broker.paced(topic.configs)}
    try:
        return apply_configs({}, changes), partitions
    except InvalidConfig as exc:
        raise Refused(ErrorCode.INVALID_CONFIG, str(exc)) from None


def _configs(props: dict[str, str], default_max: int, defaults: Any) -> list[Any]:
    cfg = topic_config(props, default_max, defaults)
    return [
        _Config(
            name=name,
            value=cfg.value(name),
            read_only=False,
            config_source=CONFIG_SOURCE[cfg.source(name)],
            is_sensitive=False,
        )
        for name in TOPIC_CONFIGS
    ]


async def _create(ctx: RequestContext, topic: Any, validate_only: bool) -> Any:
    broker = ctx.broker
    name = topic.name
    exists = Refused(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    try:
        broker.topics.topic_id(name)
        # Kafka looks for the topic before its settings: Connect and Streams create their
        # internal topics every start and take TOPIC_ALREADY_EXISTS as "there".
        if await broker.topics.get(name) is not None:
            raise exists
        props, partitions = await validate(broker, topic)
        uuid = None
        if not validate_only:
            uuid = (await broker.topics.create(name, props, partitions)).uuid
    except TopicAlreadyExists:  # created meanwhile by another request
        return _Result(name=name, error_code=exists.code, error_message=str(exists))
    except Refused as exc:
        return _Result(name=name, error_code=exc.code, error_message=str(exc))
    except InvalidTopicName as exc:
        return _Result(
            name=name, error_code=ErrorCode.INVALID_TOPIC_EXCEPTION, error_message=str(exc)
        )
    except Exception as exc:
        code, message = error_of(exc, f"create topic {name}")
        return _Result(name=name, error_code=code, error_message=message)
    kwargs = {"topic_id": uuid} if uuid is not None else {}
    return _Result(
        name=name,
        error_code=ErrorCode.NONE,
        error_message=None,
        num_partitions=partitions,
        replication_factor=1,
        configs=_configs(
            props, broker.config.default_max_message_bytes, broker.config.topic_defaults
        ),
        **kwargs,
    )


async def handle(ctx: RequestContext, req: Any) -> Any:
    validate_only = bool(req.validate_only) if ctx.version >= 1 else False
    # Counted once (not list.count: 50k topics took 52 s), the names gathered paced.
    named = Counter([t.name async for t in ctx.broker.paced(req.topics)])
    results = []
    # Paced: a topic refused for its name or settings awaits nothing, and 50,000 of them
    # (a 1 MB request) held the loop ~400 ms in one piece.
    async for topic in ctx.broker.paced(req.topics):
        if named[topic.name] > 1:
            results.append(
                _Result(
                    name=topic.name,
                    error_code=ErrorCode.INVALID_REQUEST,
                    error_message="topic named more than once in the request",
                )
            )
            continue
        if not ctx.may_create_topic(topic.name):
            results.append(
                _Result(
                    name=topic.name,
                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    error_message="Authorization failed.",
                )
            )
            continue
        results.append(await _create(ctx, topic, validate_only))
    return ctx.response(throttle_time_ms=0, topics=results)


ROUTE = Route(ApiKey.CREATE_TOPICS, 2, 7, handle)
