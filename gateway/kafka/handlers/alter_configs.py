"""IncrementalAlterConfigs and the legacy AlterConfigs, for topic configs.

Incremental: SET and DELETE per config, APPEND and SUBTRACT on list configs
(cleanup.policy, the throttled-replica lists) against the topic's current value, as
Kafka's ConfigAdminManager does. Legacy AlterConfigs replaces the whole set: configs not
named go back to their defaults, as in Kafka."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import AlterConfigsResponse, IncrementalAlterConfigsResponse
from tmsgate.protocol import ApiKey, ErrorCode

from ...acls import Operation, ResourceType
from ..config import LIST_CONFIGS, TOPIC_CONFIGS, InvalidConfig, apply_configs
from ..context import RequestContext
from ..errors import error_of
from ..routes import Route
from ..topics import InvalidTopicName, TopicInfo

TOPIC = 2
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_ITEM = {
    True: IncrementalAlterConfigsResponse.AlterConfigsResourceResponse,
    False: AlterConfigsResponse.AlterConfigsResourceResponse,
}


# The resources, and each resource's configs, are what the client sent: every loop over
# them is paced (a 1 MB request holds ~50,000), and a resource refused for its name,
# type or configs awaits nothing.


async def _changes_incremental(
    ctx: RequestContext, res: Any, current: TopicInfo | None
) -> dict[str, str | None]:
    changes: dict[str, str | None] = {}
    async for c in ctx.broker.paced(res.configs):
        if c.config_operation == SET:
            changes[c.name] = c.value
        elif c.config_operation == DELETE:
            changes[c.name] = None
        elif c.config_operation in (APPEND, SUBTRACT):
            if c.name not in LIST_CONFIGS:
                verb = "APPEND to" if c.config_operation == APPEND else "SUBTRACT from"
                raise InvalidConfig(f"Can't {verb} key {c.name} because its type is not LIST.")
            was = changes.get(c.name, current.config.value(c.name) if current else None)
            items = [v for v in (was or "").split(",") if v]
            given = [v.strip() for v in (c.value or "").split(",") if v.strip()]
            if c.config_operation == APPEND:
                items += [v for v in given if v not in items]
            else:
                items = [v for v in items if v not in given]
            changes[c.name] = ",".join(items)
        else:
            raise InvalidConfig(f"unknown config operation {c.config_operation}")
    return changes


async def _changes_replace(ctx: RequestContext, res: Any) -> dict[str, str | None]:
    changes: dict[str, str | None] = dict.fromkeys(TOPIC_CONFIGS)
    async for c in ctx.broker.paced(res.configs):
        changes[c.name] = c.value
    return changes


async def _null_values(ctx: RequestContext, res: Any, incremental: bool) -> str | None:
    """Kafka refuses a null value (nullable in the schema) except for an incremental
    DELETE: INVALID_REQUEST, before looking at anything else of the resource
    (ConfigAdminManager.preprocess). Left through, a null would reset the config."""
    names = [
        c.name
        async for c in ctx.broker.paced(res.configs)
        if c.value is None and not (incremental and c.config_operation == DELETE)
    ]
    return "Null value not supported for : " + ", ".join(names) if names else None


async def _alter(ctx: RequestContext, res: Any, incremental: bool, validate_only: bool) -> Any:
    nulls = await _null_values(ctx, res, incremental)
    if incremental and nulls:
        return ErrorCode.INVALID_REQUEST, nulls
    if res.resource_type != TOPIC:
        return ErrorCode.INVALID_REQUEST, "only topic configs can be altered"
    if nulls:  # legacy AlterConfigs checks the resource type first
        return ErrorCode.INVALID_REQUEST, nulls
    if not ctx.allowed(Operation.ALTER_CONFIGS, ResourceType.TOPIC, res.resource_name):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed."
    topics = ctx.broker.topics
    try:
        info = await topics.get(res.resource_name)
        if incremental:
            changes = await _changes_incremental(ctx, res, info)
        else:
            changes = await _changes_replace(ctx, res)
        if info is None:
            return (
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"topic {res.resource_name!r} does not exist",
            )
        apply_configs(info.metadata.properties, changes)  # validates; raises InvalidConfig
        if not validate_only:
            # Applied again to the current properties inside the store's writer, so
            # concurrent alterations of different configs both take effect.
            await topics.update(res.resource_name, lambda current: apply_configs(current, changes))
    except InvalidConfig as exc:
        return ErrorCode.INVALID_CONFIG, str(exc)
    except InvalidTopicName as exc:
        return ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc)
    except Exception as exc:
        return error_of(exc, f"alter configs of {res.resource_name}")
    return ErrorCode.NONE, None


def _handler(incremental: bool) -> Any:
    async def handle(ctx: RequestContext, req: Any) -> Any:
        item = _ITEM[incremental]
        responses = []
        async for res in ctx.broker.paced(req.resources):
            code, message = await _alter(ctx, res, incremental, bool(req.validate_only))
            responses.append(
                item(
                    error_code=code,
                    error_message=message,
                    resource_type=res.resource_type,
                    resource_name=res.resource_name,
                )
            )
        return ctx.response(throttle_time_ms=0, responses=responses)

    return handle


INCREMENTAL_ROUTE = Route(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1, _handler(True))
ROUTE = Route(ApiKey.ALTER_CONFIGS, 0, 2, _handler(False))
