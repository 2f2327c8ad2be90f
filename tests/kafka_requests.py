"""Small builders of kafka-python request objects and record batches for wire tests."""

from __future__ import annotations

from typing import Any

from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.consumer import (
    FetchRequest,
    ListOffsetsRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
)
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest
from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    TxnOffsetCommitRequest,
)

Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def batch(
    records: list[Record] | int,
    *,
    producer_id: int = -1,
    epoch: int = -1,
    base_sequence: int = -1,
    codec: int = 0,
    timestamp: int = 1_700_000_000_000,
    transactional: bool = False,
) -> bytes:
    if isinstance(records, int):
        records = [(None, b"v%d" % i, []) for i in range(records)]
    b = DefaultRecordBatchBuilder(
        2, codec, int(transactional), producer_id, epoch, base_sequence, 1 << 30
    )
    for i, (key, value, headers) in enumerate(records):
        b.append(i, timestamp + i, key, value, headers)
    return bytes(b.build())


def produce(
    topic: str,
    records: bytes | None,
    acks: int = -1,
    partition: int = 0,
    transactional_id: str | None = None,
) -> Any:
    pd = ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=records)
    td = ProduceRequest.TopicProduceData(name=topic, partition_data=[pd])
    return ProduceRequest(
        transactional_id=transactional_id, acks=acks, timeout_ms=5000, topic_data=[td]
    )


def fetch(
    topic: str,
    offset: int,
    *,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    isolation_level: int = 0,
    max_bytes: int = 1 << 20,
) -> Any:
    part = FetchRequest.FetchTopic.FetchPartition(
        partition=0,
        fetch_offset=offset,
        partition_max_bytes=max_bytes,
        log_start_offset=-1,
        current_leader_epoch=-1,
        last_fetched_epoch=-1,
    )
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation_level,
        session_id=0,
        session_epoch=-1,
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[part])],
        forgotten_topics_data=[],
        rack_id="",
    )


def list_offsets(topic: str, timestamp: int, isolation_level: int = 0) -> Any:
    part = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
        partition_index=0, timestamp=timestamp, current_leader_epoch=-1
    )
    return ListOffsetsRequest(
        replica_id=-1,
        isolation_level=isolation_level,
        topics=[ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[part])],
        timeout_ms=1000,
    )


def metadata(*topics: str, auto_create: bool = True) -> Any:
    wanted = [MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
    return MetadataRequest(
        topics=wanted,
        allow_auto_topic_creation=auto_create,
        include_topic_authorized_operations=False,
    )


def init_producer_id(
    transactional_id: str | None = None,
    timeout_ms: int = 60000,
    producer_id: int = -1,
    epoch: int = -1,
) -> Any:
    return InitProducerIdRequest(
        transactional_id=transactional_id,
        transaction_timeout_ms=timeout_ms,
        producer_id=producer_id,
        producer_epoch=epoch,
    )


def add_partitions_to_txn(
    transactional_id: str, producer_id: int, epoch: int, topics: dict[str, list[int]]
) -> Any:
    """AddPartitionsToTxn v0-3 (the client form)."""
    topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    return AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=transactional_id,
        v3_and_below_producer_id=producer_id,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[topic(name=t, partitions=ps) for t, ps in topics.items()],
    )


def add_offsets_to_txn(transactional_id: str, producer_id: int, epoch: int, group: str) -> Any:
    return AddOffsetsToTxnRequest(
        transactional_id=transactional_id,
        producer_id=producer_id,
        producer_epoch=epoch,
        group_id=group,
    )


def end_txn(transactional_id: str, producer_id: int, epoch: int, commit: bool) -> Any:
    return EndTxnRequest(
        transactional_id=transactional_id,
        producer_id=producer_id,
        producer_epoch=epoch,
        committed=commit,
    )


def txn_offset_commit(
    transactional_id: str,
    producer_id: int,
    epoch: int,
    group: str,
    offsets: dict[tuple[str, int], int],
    *,
    generation: int = -1,
    member_id: str = "",
) -> Any:
    topic_cls = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
    part_cls = topic_cls.TxnOffsetCommitRequestPartition
    by_topic: dict[str, list[Any]] = {}
    for (t, p), offset in offsets.items():
        by_topic.setdefault(t, []).append(
            part_cls(
                partition_index=p,
                committed_offset=offset,
                committed_leader_epoch=-1,
                committed_metadata="",
            )
        )
    return TxnOffsetCommitRequest(
        transactional_id=transactional_id,
        group_id=group,
        producer_id=producer_id,
        producer_epoch=epoch,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=None,
        topics=[topic_cls(name=t, partitions=ps) for t, ps in by_topic.items()],
    )


def offset_commit(group: str, topic: str, offset: int) -> Any:
    """OffsetCommit (v2+) by a client outside the group (generation -1, no member)."""
    part = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
        partition_index=0,
        committed_offset=offset,
        committed_leader_epoch=-1,
        committed_metadata="",
    )
    return OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        retention_time_ms=-1,
        topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[part])],
    )


def offset_fetch(group: str, topic: str, require_stable: bool = False) -> Any:
    """OffsetFetch v1-7 (one group) for partition 0 of ``topic``."""
    wanted = OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])
    return OffsetFetchRequest(group_id=group, topics=[wanted], require_stable=require_stable)


def create_topic(
    name: str, partitions: int = 1, configs: dict[str, str] | None = None, replication: int = 1
) -> Any:
    cfg = [
        CreateTopicsRequest.CreatableTopic.CreatableTopicConfig(name=k, value=v)
        for k, v in (configs or {}).items()
    ]
    topic = CreateTopicsRequest.CreatableTopic(
        name=name,
        num_partitions=partitions,
        replication_factor=replication,
        assignments=[],
        configs=cfg,
    )
    return CreateTopicsRequest(topics=[topic], timeout_ms=5000, validate_only=False)


def partition(resp: Any) -> Any:
    """The single partition of a single-topic Produce/Fetch/ListOffsets response."""
    topic = (getattr(resp, "responses", None) or getattr(resp, "topics", None))[0]
    parts = getattr(topic, "partition_responses", None) or getattr(topic, "partitions", None)
    return parts[0]


def records_of(raw: bytes | None) -> list[tuple[int, Any]]:
    """[(batch next offset, [records])] of a fetched records field."""
    out = []
    data = memoryview(raw or b"")
    pos = 0
    while pos + 12 <= len(data):
        length = int.from_bytes(data[pos + 8 : pos + 12], "big")
        b = DefaultRecordBatch(bytes(data[pos : pos + 12 + length]))
        assert b.validate_crc()
        out.append((b.next_offset, list(b)))
        pos += 12 + length
    return out
