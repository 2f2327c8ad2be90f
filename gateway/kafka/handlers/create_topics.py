"""CreateTopics: a TMS topic is unpartitioned and unreplicated, so num_partitions and
replication_factor must be 1 (or -1, "broker default"); anything else is refused
with a message saying why. Configs are validated against what tmsgate supports."""

from __future__ import annotations

from collections import Counter
from typing import Any

from kafka.protocol.admin import CreateTopicsResponse
from tmsgate.protocol import ApiKey, ErrorCode

from ..config import TOPIC_CONFIGS, InvalidConfig, apply_configs, topic_config
from ..context import RequestContext
from ..errors import error_of
from ..routes import Route
from ..topics import InvalidTopicName

_Result = CreateTopicsResponse.CreatableTopicResult
_Config = _Result.CreatableTopicConfigs
DEFAULT_CONFIG = 5
DYNAMIC_TOPIC_CONFIG = 1


class Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


async def validate(broker: Any, topic: Any) -> dict[str, str]:
    """-> the store properties for this topic; raises Refused. The assignments and
    configs are paced: one topic may carry tens of thousands."""
    node_id = broker.config.node_id
    if topic.num_partitions not in (1, -1):
        raise Refused(
            ErrorCode.INVALID_PARTITIONS,
            f"tmsgate topics are unpartitioned: num_partitions must be 1 (or -1), "
            f"got {topic.num_partitions}",
        )
    if topic.replication_factor not in (1, -1):
        raise Refused(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"replication is the store's job: replication_factor must be 1 (or -1), "
            f"got {topic.replication_factor}",
        )
    async for a in broker.paced(topic.assignments):
        if a.partition_index != 0 or list(a.broker_ids) != [node_id]:
            raise Refused(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"the only possible assignment is partition 0 on broker {node_id}",
            )
    nulls = [c.name async for c in broker.paced(topic.configs) if c.value is None]
    if nulls:  # as KRaft Kafka answers (a null would otherwise mean "the default")
        raise Refused(
            ErrorCode.INVALID_CONFIG, f"Null value not supported for topic configs: {nulls}"
        )
    changes = {c.name: c.value async for c in broker.paced(topic.configs)}
    try:
        return apply_configs({}, changes)
    except InvalidConfig as exc:
        raise Refused(ErrorCode.INVALID_CONFIG, str(exc)) from None


def _configs(props: dict[str, str], default_max: int) -> list[Any]:
    cfg = topic_config(props, default_max)
    return [
        _Config(
            name=name,
            value=cfg.value(name),
            read_only=False,
            config_source=DYNAMIC_TOPIC_CONFIG if name in cfg.explicit else DEFAULT_CONFIG,
            is_sensitive=False,
        )
        for name in TOPIC_CONFIGS
    ]


async def _create(ctx: RequestContext, topic: Any, validate_only: bool) -> Any:
    broker = ctx.broker
    name = topic.name
    try:
        props = await validate(broker, topic)
        broker.topics.topic_id(name)
        if validate_only:
            if await broker.topics.get(name) is not None:
                raise Refused(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
            uuid = None
        else:
            uuid = (await broker.topics.create(name, props)).uuid
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
        num_partitions=1,
        replication_factor=1,
        configs=_configs(props, broker.config.default_max_message_bytes),
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
        results.append(await _create(ctx, topic, validate_only))
    return ctx.response(throttle_time_ms=0, topics=results)


ROUTE = Route(ApiKey.CREATE_TOPICS, 2, 7, handle)
