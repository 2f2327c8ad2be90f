"""The direct ProduceResponse encoder writes exactly what kafka-python's generic encoder
writes, for every version the gateway answers (3-13) and any field values."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.producer import ProduceResponse
from tmsgate.protocol import (
    PartitionResult,
    ProduceResult,
    TopicResult,
    encode_produce_response,
    encode_response,
    response_class,
)

_Topic = ProduceResponse.TopicProduceResponse
_Partition = _Topic.PartitionProduceResponse

i16 = st.integers(-(2**15), 2**15 - 1)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
partitions = st.builds(
    PartitionResult,
    i32,
    i16,
    i64,
    i64,
    i64,
    st.none() | st.text(max_size=300),  # long enough for a two-byte compact length
    st.lists(st.tuples(i32, st.none() | st.text(max_size=200)), max_size=3),  # KIP-467
)
topics = st.builds(
    TopicResult,
    st.text(min_size=1, max_size=200),
    st.builds(uuid.UUID, int=st.integers(0, 2**128 - 1)),
    st.lists(partitions, max_size=3),
)


def by_kafka_python(version: int, correlation_id: int, result: ProduceResult) -> bytes:
    responses = [
        _Topic(
            name=t.name,
            topic_id=t.topic_id,
            partition_responses=[
                _Partition(
                    index=p.index,
                    error_code=p.error_code,
                    base_offset=p.base_offset,
                    log_append_time_ms=p.log_append_time_ms,
                    log_start_offset=p.log_start_offset,
                    record_errors=[
                        _Partition.BatchIndexAndErrorMessage(
                            batch_index=i, batch_index_error_message=m
                        )
                        for i, m in p.record_errors
                    ],
                    error_message=p.error_message,
                )
                for p in t.partitions
            ],
        )
        for t in result.topics
    ]
    response = response_class(0, version)(
        responses=responses, throttle_time_ms=result.throttle_time_ms
    )
    return bytes(encode_response(correlation_id, response)[0])


@settings(max_examples=400, deadline=None)
@given(
    version=st.integers(3, 13),
    correlation_id=i32,
    tops=st.lists(topics, max_size=3),
    throttle=i32,
)
def test_every_version_matches_kafka_python_byte_for_byte(
    version: int, correlation_id: int, tops: list[TopicResult], throttle: int
) -> None:
    result = ProduceResult(version, tops, throttle)
    expected = by_kafka_python(version, correlation_id, result)
    assert encode_produce_response(version, correlation_id, result) == expected
    assert encode_response(correlation_id, result) == [expected]


def test_a_single_partition_answer_v9() -> None:
    """Golden bytes: size, correlation id, header tags, one topic "t" with partition 0 at
    offset 5, no error, throttle 0, flexible tags."""
    result = ProduceResult(9, [TopicResult("t", None, [PartitionResult(0, 0, 5)])])
    assert encode_produce_response(9, 7, result) == bytes.fromhex(
        "00000030 00000007 00 02 0274 02 00000000 0000 0000000000000005"
        " ffffffffffffffff ffffffffffffffff 01 00 00 00 00000000 00"
    )
