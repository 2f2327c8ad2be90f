"""CreatePartitions: grow a topic (kafka-topics.sh --alter --partitions N). Each new
partition is a new TMS topic carrying the topic's configs; the count on partition 0
is written last, so a crash midway leaves the topic as it was (topics.py repair).
Kafka never shrinks a topic, and neither does this."""

from __future__ import annotations

from collections import Counter
from typing import Any

from kafka.protocol.admin import CreatePartitionsResponse
from tmsgate.protocol import ApiKey, ErrorCode

from ...acls import Operation, ResourceType
from ..context import RequestContext
from ..errors import error_of
from ..routes import Route
from ..topics import InvalidTopicName
from .create_topics import Refused, check_assignments, check_partition_count

_Result = CreatePartitionsResponse.CreatePartitionsTopicResult


async def _grow(ctx: RequestContext, topic: Any, validate_only: bool) -> Any:
    broker = ctx.broker
    name = topic.name
    try:
        info = await broker.topics.get(name)
        if info is None:
            raise Refused(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
            )
        check_partition_count(topic.count)
        if topic.count <= info.partitions:
            raise Refused(  # Apache Kafka 4.1's message, measured
                ErrorCode.INVALID_PARTITIONS,
                f"The topic {name} currently has {info.partitions} partition(s); "
                f"{topic.count} would not be an increase.",
            )
        if topic.assignments is not None:
            if len(topic.assignments) != topic.count - info.partitions:
                raise Refused(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Attempted to add {topic.count - info.partitions} additional partitions, "
                    f"but only {len(topic.assignments)} assignments were supplied.",
                )
            await check_assignments(broker, topic.assignments, info.partitions)
        if not validate_only:
            await broker.topics.add_partitions(name, topic.count)
    except Refused as exc:
        return _Result(name=name, error_code=exc.code, error_message=str(exc))
    except InvalidTopicName as exc:
        return _Result(
            name=name, error_code=ErrorCode.INVALID_TOPIC_EXCEPTION, error_message=str(exc)
        )
    except Exception as exc:
        code, message = error_of(exc, f"add partitions to {name}")
        return _Result(name=name, error_code=code, error_message=message)
    return _Result(name=name, error_code=ErrorCode.NONE, error_message=None)


async def handle(ctx: RequestContext, req: Any) -> Any:
    paced = ctx.broker.paced
    named = Counter([t.name async for t in paced(req.topics)])
    results = []
    async for topic in paced(req.topics):
        if named[topic.name] > 1:  # Kafka: every occurrence refused
            results.append(
                _Result(
                    name=topic.name,
                    error_code=ErrorCode.INVALID_REQUEST,
                    error_message="Duplicate topic in request.",
                )
            )
            continue
        if not ctx.allowed(Operation.ALTER, ResourceType.TOPIC, topic.name):
            results.append(
                _Result(
                    name=topic.name,
                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    error_message="Authorization failed.",
                )
            )
            continue
        results.append(await _grow(ctx, topic, bool(req.validate_only)))
    return ctx.response(throttle_time_ms=0, results=results)


ROUTE = Route(ApiKey.CREATE_PARTITIONS, 0, 3, handle)
