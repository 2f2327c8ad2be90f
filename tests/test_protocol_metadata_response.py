"""The direct MetadataResponse encoder writes exactly what kafka-python's generic encoder
writes, for every version (0-13) and any values of the fields the gateway fills."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.metadata import MetadataResponse
from tmsgate.protocol import (
    MetadataBroker,
    MetadataPartition,
    MetadataResult,
    MetadataTopic,
    encode_metadata_response,
    encode_metadata_topic,
    encode_response,
    response_class,
)

_Broker = MetadataResponse.MetadataResponseBroker
_Topic = MetadataResponse.MetadataResponseTopic
_Partition = _Topic.MetadataResponsePartition

i16 = st.integers(-(2**15), 2**15 - 1)
i32 = st.integers(-(2**31), 2**31 - 1)
names = st.text(min_size=1, max_size=200)  # long enough for a two-byte compact length
partitions = st.builds(MetadataPartition, i16, i32, i32, st.lists(i32, max_size=3))
brokers = st.builds(MetadataBroker, i32, names, i32, st.none() | names)


def topics(version: int) -> st.SearchStrategy[MetadataTopic]:
    return st.builds(
        MetadataTopic,
        i16,
        (st.none() | names) if version >= 12 else names,  # nullable from version 12
        st.none() | st.builds(uuid.UUID, int=st.integers(0, 2**128 - 1)),
        st.lists(partitions, max_size=130),  # past a one-byte compact length
    )


def by_kafka_python(version: int, correlation_id: int, result: MetadataResult) -> bytes:
    response = response_class(3, version)(
        throttle_time_ms=result.throttle_time_ms,
        brokers=[
            _Broker(node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
            for b in result.brokers
        ],
        cluster_id=result.cluster_id,
        controller_id=result.controller_id,
        topics=[
            _Topic(
                error_code=t.error_code,
                name=t.name,
                topic_id=t.topic_id if t.topic_id is not None else uuid.UUID(int=0),
                is_internal=False,
                partitions=[
                    _Partition(
                        error_code=p.error_code,
                        partition_index=p.index,
                        leader_id=p.leader_id,
                        leader_epoch=-1,
                        replica_nodes=list(p.replicas),
                        isr_nodes=list(p.replicas),
                        offline_replicas=[],
                    )
                    for p in t.partitions
                ],
            )
            for t in result.topics
        ],
    )
    return bytes(encode_response(correlation_id, response)[0])


@st.composite
def results(draw: st.DrawFn) -> MetadataResult:
    version = draw(st.integers(0, 13))
    return MetadataResult(
        version,
        draw(st.lists(brokers, max_size=3)),
        draw(st.none() | names) if version >= 2 else None,
        draw(i32),
        draw(st.lists(topics(version), max_size=3)),
        draw(i32) if version >= 3 else 0,
    )


@settings(max_examples=400, deadline=None)
@given(result=results(), correlation_id=i32)
def test_every_version_matches_kafka_python_byte_for_byte(
    result: MetadataResult, correlation_id: int
) -> None:
    expected = by_kafka_python(result.version, correlation_id, result)
    assert encode_metadata_response(result.version, correlation_id, result) == expected
    assert encode_response(correlation_id, result) == [expected]
    # Topics kept already encoded (as the gateway keeps those that do not change) give
    # the same bytes.
    mixed = [
        encode_metadata_topic(result.version, t) if i % 2 == 0 else t
        for i, t in enumerate(result.topics)
    ]
    kept = result._replace(topics=mixed)
    assert encode_metadata_response(result.version, correlation_id, kept) == expected


def test_one_topic_v12() -> None:
    """Golden bytes: size, correlation id, header tags, throttle 0, broker 1 at h:9092
    (no rack), cluster "c", controller 1, topic "t" (zero id) with partition 0 led by 1,
    no leader epoch, replicas and ISR [1], no offline replicas, operations not asked for."""
    result = MetadataResult(
        12,
        [MetadataBroker(1, "h", 9092)],
        "c",
        1,
        [MetadataTopic(0, "t", None, [MetadataPartition(0, 0, 1, [1])])],
    )
    assert encode_metadata_response(12, 7, result) == bytes.fromhex(
        "00000053 00000007 00 00000000"
        " 02 00000001 0268 00002384 00 00"
        " 0263 00000001"
        " 02 0000 0274 00000000000000000000000000000000 00"
        " 02 0000 00000000 00000001 ffffffff 02 00000001 02 00000001 01 00"
        " 80000000 00 00"
    )
    assert result.entries == 2
