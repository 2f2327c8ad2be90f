"""DeleteTopics: by name, or (v6) by topic id. The store negates the generation, so a
topic created again later starts empty with a new topic id."""

from __future__ import annotations

import uuid
from typing import Any

from kafka.protocol.admin import DeleteTopicsResponse
from tmsgate.protocol import ApiKey, ErrorCode
from tmsgate.storage import DiskFull

from ...acls import CLUSTER_NAME, Operation, ResourceType
from ..context import RequestContext
from ..errors import error_of
from ..routes import Route
from ..topics import InvalidTopicName

_Result = DeleteTopicsResponse.DeletableTopicResult


_NO_ID = uuid.UUID(int=0)


def _denied(name: str | None, kwargs: dict[str, Any]) -> Any:
    return _Result(
        name=name,
        error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        error_message="Authorization failed.",
        **kwargs,
    )


async def _delete(ctx: RequestContext, name: str | None, topic_id: Any) -> Any:
    topics = ctx.broker.topics
    kwargs = {"topic_id": topic_id} if topic_id is not None else {}
    if ctx.version >= 6 and (name is None) == (topic_id in (None, _NO_ID)):
        # Kafka's ControllerApis.deleteTopics: exactly one of the two
        message = (
            "Neither topic name nor id were specified."
            if name is None
            else "You may not specify both topic name and topic id."
        )
        return _Result(
            name=name, error_code=ErrorCode.INVALID_REQUEST, error_message=message, **kwargs
        )
    if name is None:
        info = await topics.by_uuid(topic_id)
        if info is None:
            return _Result(
                name=None,
                error_code=ErrorCode.UNKNOWN_TOPIC_ID,
                error_message=f"no topic has id {topic_id}",
                **kwargs,
            )
    # Kafka (ControllerApis.deleteTopics): Delete on the cluster allows every topic;
    # otherwise Describe, then the topic's existence, then Delete on it.
    on_cluster = ctx.allowed(Operation.DELETE, ResourceType.CLUSTER, CLUSTER_NAME, log=False)
    if name is None:
        name = info.name
        if not on_cluster and not ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, name):
            # Kafka does not tell a topic id's name to who may not see the topic.
            return _denied(None, kwargs)
    if not on_cluster and not ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, name):
        return _denied(name, kwargs)
    try:
        info = await topics.get(name)
        if info is None:
            return _Result(
                name=name,
                error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                error_message=f"topic {name!r} does not exist",
                **kwargs,
            )
        if not on_cluster and not ctx.allowed(Operation.DELETE, ResourceType.TOPIC, name):
            return _denied(name, kwargs)
        try:
            await topics.delete(name)
        except DiskFull:
            # The delete shared its durable write with the write that found the disk full;
            # that released the reserve, so deleting now has room (a full disk is what
            # deleting a topic is for).
            if not ctx.broker.store.writes_refused:
                raise
            await topics.delete(name)
    except InvalidTopicName as exc:
        return _Result(
            name=name,
            error_code=ErrorCode.INVALID_TOPIC_EXCEPTION,
            error_message=str(exc),
            **kwargs,
        )
    except Exception as exc:
        code, message = error_of(exc, f"delete topic {name}")
        return _Result(name=name, error_code=code, error_message=message, **kwargs)
    if ctx.version >= 6:
        kwargs["topic_id"] = info.uuid
    return _Result(name=name, error_code=ErrorCode.NONE, error_message=None, **kwargs)


async def handle(ctx: RequestContext, req: Any) -> Any:
    # Paced: a 1 MB request names ~100,000 topics, and an invalid name awaits nothing.
    paced = ctx.broker.paced
    if ctx.version >= 6:
        wanted = [(t.name, t.topic_id) async for t in paced(req.topics)]
    else:
        wanted = [(name, None) async for name in paced(req.topic_names)]
    results = [await _delete(ctx, name, tid) async for name, tid in paced(wanted)]
    return ctx.response(throttle_time_ms=0, responses=results)


ROUTE = Route(ApiKey.DELETE_TOPICS, 1, 6, handle)
