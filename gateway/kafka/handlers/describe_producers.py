"""DescribeProducers (``kafka-transactions.sh describe-producers`` and ``find-hanging``):
the idempotent and transactional producers a partition keeps state for, from the
producer state the gateway stores with the data (producers.py).

A Kafka transaction's records take their offsets at the commit here (they wait in the
PayloadTable), so no open transaction holds a partition's last stable offset back:
``current_txn_start_offset`` is always -1, and find-hanging finds nothing to abort.
The gateway keeps no per-producer timestamp: ``last_timestamp`` is -1."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeProducersResponse
from tmsgate.protocol import ApiKey, ErrorCode

from ...acls import Operation, ResourceType
from ..context import RequestContext
from ..producers import STATE_AREA, decode_entry
from ..routes import Route

_Topic = DescribeProducersResponse.TopicResponse
_Partition = _Topic.PartitionResponse
_Producer = _Partition.ProducerState


async def _producers(ctx: RequestContext, part: Any) -> list[Any]:
    prefix = f"{part.id}/{part.metadata.generation}/"
    found = await ctx.broker.run(ctx.broker.store.scan_state, STATE_AREA, prefix)
    out = []
    for key, raw in found:
        entry = decode_entry(raw)
        out.append(
            _Producer(
                producer_id=int(key.rsplit("/", 1)[1]),
                producer_epoch=entry.epoch,
                last_sequence=entry.last_seq,
                last_timestamp=-1,
                coordinator_epoch=-1,
                current_txn_start_offset=-1,
            )
        )
    return out


async def handle(ctx: RequestContext, req: Any) -> Any:
    topics = []
    async for t in ctx.broker.paced(req.topics):
        info, code = None, ErrorCode.TOPIC_AUTHORIZATION_FAILED
        if ctx.allowed(Operation.READ, ResourceType.TOPIC, t.name):
            info, code = await ctx.broker.topics.resolve(t.name)
        parts = []
        async for index in ctx.broker.paced(t.partition_indexes):
            part = None if info is None else await ctx.broker.topics.partition(info, index)
            if part is None:
                err = code if info is None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                parts.append(
                    _Partition(
                        partition_index=index,
                        error_code=err,
                        error_message=None,
                        active_producers=[],
                    )
                )
                continue
            parts.append(
                _Partition(
                    partition_index=index,
                    error_code=ErrorCode.NONE,
                    error_message=None,
                    active_producers=await _producers(ctx, part),
                )
            )
        topics.append(_Topic(name=t.name, partitions=parts))
    return ctx.response(throttle_time_ms=0, topics=topics)


ROUTE = Route(ApiKey.DESCRIBE_PRODUCERS, 0, 0, handle)
