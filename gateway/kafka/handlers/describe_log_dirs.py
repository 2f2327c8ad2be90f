"""DescribeLogDirs (``kafka-log-dirs.sh``, and the web consoles: AKHQ, kafka-ui, Redpanda
Console): the store is the one log dir, with each partition's size (its MessageTable
rows, Store.topic_bytes) and the file system's total and usable bytes. Sizes are a scan
of the rows, kept for SIZE_CACHE_S so a console polling every few seconds costs one."""

from __future__ import annotations

import time
from typing import Any

from kafka.protocol.admin import DescribeLogDirsResponse
from tmsgate.protocol import ApiKey, ErrorCode

from ...acls import CLUSTER_NAME, Operation, ResourceType
from ..context import RequestContext
from ..routes import Route

_Result = DescribeLogDirsResponse.DescribeLogDirsResult
_Topic = _Result.DescribeLogDirsTopic
_Partition = _Topic.DescribeLogDirsPartition
SIZE_CACHE_S = 30.0
_sizes: dict[Any, tuple[float, int]] = {}


async def _size(ctx: RequestContext, part: Any) -> int:
    key = (id(ctx.broker.store), part.id, part.metadata.generation)
    hit = _sizes.get(key)
    now = time.monotonic()
    if hit is not None and hit[0] > now:
        return hit[1]
    size = await ctx.broker.run(ctx.broker.store.topic_bytes, part.id)
    if len(_sizes) > 100_000:
        _sizes.clear()
    _sizes[key] = (now + SIZE_CACHE_S, size)
    return size


async def _topic(ctx: RequestContext, info: Any, wanted: list[int] | None) -> Any:
    indexes = range(info.partitions) if wanted is None else wanted
    parts = []
    async for index in ctx.broker.paced(indexes):
        part = await ctx.broker.topics.partition(info, index)
        if part is None:
            continue
        parts.append(
            _Partition(
                partition_index=index,
                partition_size=await _size(ctx, part),
                offset_lag=0,
                is_future_key=False,
            )
        )
    return _Topic(name=info.name, partitions=parts)


async def handle(ctx: RequestContext, req: Any) -> Any:
    # Kafka: DESCRIBE on the cluster; without it, an empty answer with the error (v3+).
    if not ctx.allowed(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return ctx.response(
            throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results=[]
        )
    topics = []
    if req.topics is None:
        async for info in ctx.broker.paced(await ctx.broker.topics.list()):
            topics.append(await _topic(ctx, info, None))
    else:
        async for t in ctx.broker.paced(req.topics):
            # Unknown topics, and names no topic can have, are left out (as Kafka does).
            info, _ = await ctx.broker.topics.resolve(t.topic)
            if info is not None:
                topics.append(await _topic(ctx, info, list(t.partitions)))
    path, total, usable = await ctx.broker.run(ctx.broker.store.log_dir)
    result = _Result(
        error_code=ErrorCode.NONE,
        log_dir=path,
        topics=topics,
        total_bytes=total,
        usable_bytes=usable,
        is_cordoned=False,
    )
    return ctx.response(throttle_time_ms=0, error_code=ErrorCode.NONE, results=[result])


ROUTE = Route(ApiKey.DESCRIBE_LOG_DIRS, 1, 4, handle)
