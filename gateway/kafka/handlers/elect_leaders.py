"""ElectLeaders (``kafka-leader-election.sh``): every partition has one leader, the
gateway that writes it (or, with --cluster, the one holding its lease), and no replicas
to elect from, so Kafka's answer for a partition already led by its preferred replica
is the answer here: ELECTION_NOT_NEEDED per partition, UNKNOWN_TOPIC_OR_PARTITION for
one that does not exist. Null topic partitions (all of them) answer an empty list per
topic, as Kafka 4.1 does."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import ElectLeadersResponse
from tmsgate.protocol import ApiKey, ErrorCode

from ...acls import CLUSTER_NAME, Operation, ResourceType
from ..context import RequestContext
from ..routes import Route

_Result = ElectLeadersResponse.ReplicaElectionResult
_Partition = _Result.PartitionResult
NOT_NEEDED = "Leader election not needed for topic partition."


async def handle(ctx: RequestContext, req: Any) -> Any:
    if not ctx.allowed(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return ctx.response(
            throttle_time_ms=0,
            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            replica_election_results=[],
        )
    results = []
    if req.topic_partitions is None:
        async for info in ctx.broker.paced(await ctx.broker.topics.list()):
            results.append(_Result(topic=info.name, partition_result=[]))
    else:
        async for t in ctx.broker.paced(req.topic_partitions):
            info, _ = await ctx.broker.topics.resolve(t.topic)  # a bad name: unknown
            parts = []
            async for index in ctx.broker.paced(t.partitions):
                if info is None or not 0 <= index < info.partitions:
                    parts.append(
                        _Partition(
                            partition_id=index,
                            error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            error_message="The partition does not exist.",
                        )
                    )
                else:
                    parts.append(
                        _Partition(
                            partition_id=index,
                            error_code=ErrorCode.ELECTION_NOT_NEEDED,
                            error_message=NOT_NEEDED,
                        )
                    )
            results.append(_Result(topic=t.topic, partition_result=parts))
    return ctx.response(
        throttle_time_ms=0, error_code=ErrorCode.NONE, replica_election_results=results
    )


ROUTE = Route(ApiKey.ELECT_LEADERS, 0, 2, handle)
