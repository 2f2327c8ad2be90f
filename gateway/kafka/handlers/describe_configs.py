"""DescribeConfigs for topics (every Kafka 4.1 topic config, with where its value comes
from) and for the broker (its listener settings and topic defaults, read-only)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeConfigsResponse
from tmsgate.protocol import ApiKey, ErrorCode

from ...acls import CLUSTER_NAME, Operation, ResourceType
from ..config import (
    CONFIG_SOURCE,
    MAX_MESSAGE_BYTES,
    MIGRATION_SOURCE,
    RETENTION_MS,
    TIMESTAMP_TYPE,
    TOPIC_CONFIGS,
    config_doc,
    config_type,
)
from ..context import RequestContext
from ..routes import Route
from ..topic_config_defs import KAFKA_TOPIC_CONFIGS
from ..topics import InvalidTopicName

_Result = DescribeConfigsResponse.DescribeConfigsResult
_Entry = _Result.DescribeConfigsResourceResult
_Synonym = _Entry.DescribeConfigsSynonym
TOPIC = 2
BROKER = 4
DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
_DOCS = {
    RETENTION_MS: "How long messages are kept; -1 keeps them forever. Stored as the TMS "
    "topic's ttl in whole seconds (rounded up).",
    MAX_MESSAGE_BYTES: "The largest record batch a producer may send to this topic.",
    TIMESTAMP_TYPE: "CreateTime keeps the producer's timestamp; LogAppendTime gives each "
    "record its publish time.",
    MIGRATION_SOURCE: "Set while tmsgate migrate copies this topic in from the named "
    "cluster: only the migration produces to it, keeping the source's offsets.",
}


def _entry(
    ctx: RequestContext,
    req: Any,
    name: str,
    value: str,
    source: int,
    read_only: bool,
    config_type: int,
    doc: str | None,
) -> Any:
    synonyms = []
    if ctx.version >= 1 and req.include_synonyms:
        synonyms = [_Synonym(name=name, value=value, source=source)]
    return _Entry(
        name=name,
        value=value,
        read_only=read_only,
        config_source=source,
        is_default=source == DEFAULT_CONFIG,
        is_sensitive=False,
        synonyms=synonyms,
        config_type=config_type,
        documentation=doc if ctx.version >= 3 and req.include_documentation else None,
    )


async def _topic(ctx: RequestContext, req: Any, res: Any) -> Any:
    try:
        info = await ctx.broker.topics.get(res.resource_name)
    except InvalidTopicName as exc:
        return ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc), []
    if info is None:
        return (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            f"topic {res.resource_name!r} does not exist",
            [],
        )
    names = TOPIC_CONFIGS if res.configuration_keys is None else res.configuration_keys
    cfg = info.config
    # The keys are the client's: paced, like the resources (see handle).
    entries = [
        _entry(
            ctx,
            req,
            n,
            cfg.value(n),
            CONFIG_SOURCE[cfg.source(n)],
            False,
            config_type(n),
            _DOCS.get(n) or config_doc(n),
        )
        async for n in ctx.broker.paced(names)
        if n in TOPIC_CONFIGS
    ]
    return ErrorCode.NONE, None, entries


def _broker_configs(ctx: RequestContext) -> dict[str, tuple[str, int]]:
    c = ctx.broker.config
    extra = {}
    if ctx.broker.http_url is not None:  # tmsgate's own: where its HTTP API listens
        extra["tmsgate.http.url"] = (ctx.broker.http_url, 2)
    return {
        **extra,
        "auto.create.topics.enable": (str(c.auto_create_topics).lower(), 1),
        "message.max.bytes": (str(c.default_max_message_bytes), 3),
        "socket.request.max.bytes": (str(c.max_request_bytes), 3),
        "connections.max.idle.ms": (str(int(c.idle_timeout_s * 1000)), 5),
        "num.partitions": (str(c.default_partitions), 3),
        "default.replication.factor": ("1", 4),
        "log.retention.ms": ("-1", 5),
        **{
            _synonym(name): (value, config_type(name))
            for name, value in c.topic_defaults
            if _synonym(name) is not None
        },
    }


def _synonym(topic_config: str) -> str:
    defn = KAFKA_TOPIC_CONFIGS.get(topic_config)
    return defn.synonym if defn is not None and defn.synonym else topic_config


async def _broker(ctx: RequestContext, req: Any, res: Any) -> Any:
    if res.resource_name not in ("", str(ctx.broker.config.node_id)):
        return ErrorCode.INVALID_REQUEST, f"this gateway is broker {ctx.broker.config.node_id}", []
    configs = _broker_configs(ctx)
    names = configs if res.configuration_keys is None else res.configuration_keys
    entries = [
        _entry(ctx, req, n, configs[n][0], STATIC_BROKER_CONFIG, True, configs[n][1], None)
        async for n in ctx.broker.paced(names)
        if n in configs
    ]
    return ErrorCode.NONE, None, entries


_DENIED = {
    TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    BROKER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
}


def _allowed(ctx: RequestContext, res: Any) -> bool:
    """Kafka: DescribeConfigs on the topic, or on the cluster for a broker's configs."""
    if res.resource_type == TOPIC:
        return ctx.allowed(Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, res.resource_name)
    if res.resource_type == BROKER:
        return ctx.allowed(Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME)
    return True  # refused for its type below


async def handle(ctx: RequestContext, req: Any) -> Any:
    results = []
    # Paced: a 1 MB request names ~100,000 resources, and those answered from the topic
    # cache, or refused for their name or type, await nothing.
    async for res in ctx.broker.paced(req.resources):
        if not _allowed(ctx, res):
            code, message, entries = _DENIED[res.resource_type], "Authorization failed.", []
        elif res.resource_type == TOPIC:
            code, message, entries = await _topic(ctx, req, res)
        elif res.resource_type == BROKER:
            code, message, entries = await _broker(ctx, req, res)
        else:
            code, message, entries = (
                ErrorCode.INVALID_REQUEST,
                f"resource type {res.resource_type} is not supported",
                [],
            )
        results.append(
            _Result(
                error_code=code,
                error_message=message,
                resource_type=res.resource_type,
                resource_name=res.resource_name,
                configs=entries,
            )
        )
    return ctx.response(throttle_time_ms=0, results=results)


ROUTE = Route(ApiKey.DESCRIBE_CONFIGS, 1, 4, handle)
