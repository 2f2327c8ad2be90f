"""Small builders of kafka-python request objects and record batches for wire tests."""

from __future__ import annotations

from typing import Any

from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest

Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def batch(
    records: list[Record] | int,
    *,
    producer_id: int = -1,
    epoch: int = -1,
    base_sequence: int = -1,
    codec: int = 0,
    timestamp: int = 1_700_000_000_000,
) -> bytes:
    if isinstance(records, int):
        records = [(None, b"v%d" % i, []) for i in range(records)]
    b = DefaultRecordBatchBuilder(2, codec, 0, producer_id, epoch, base_sequence, 1 << 30)
    for i, (key, value, headers) in enumerate(records):
        b.append(i, timestamp + i, key, value, headers)
    return bytes(b.build())


def produce(topic: str, records: bytes | None, acks: int = -1, partition: int = 0) -> Any:
    pd = ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=records)
    td = ProduceRequest.TopicProduceData(name=topic, partition_data=[pd])
    return ProduceRequest(transactional_id=None, acks=acks, timeout_ms=5000, topic_data=[td])


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


def init_producer_id() -> Any:
    return InitProducerIdRequest(
        transactional_id=None, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1
    )


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
