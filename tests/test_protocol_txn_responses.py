"""The direct AddPartitionsToTxn (v0-3) and EndTxn (v0-4) response encoders write exactly
what kafka-python's generic encoder writes, for every version the gateway answers and
any field values."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.producer.transaction import AddPartitionsToTxnResponse
from tmsgate.protocol import (
    AddPartitionsResult,
    AddPartitionsTopicResult,
    ApiKey,
    EndTxnResult,
    encode_add_partitions_response,
    encode_end_txn_response,
    encode_response,
    response_class,
)

_Topic = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
_Partition = _Topic.AddPartitionsToTxnPartitionResult

i16 = st.integers(-(2**15), 2**15 - 1)
i32 = st.integers(-(2**31), 2**31 - 1)
topics = st.builds(
    AddPartitionsTopicResult,
    st.text(min_size=1, max_size=200),  # long enough for a two-byte compact length
    st.lists(st.tuples(i32, i16), max_size=4),
)


def by_kafka_python(correlation_id: int, api_key: int, version: int, **fields: object) -> bytes:
    response = response_class(api_key, version)(**fields)
    return bytes(encode_response(correlation_id, response)[0])


@settings(max_examples=200, deadline=None)
@given(version=st.integers(0, 4), correlation_id=i32, error=i16, throttle=i32)
def test_end_txn_matches_kafka_python_byte_for_byte(
    version: int, correlation_id: int, error: int, throttle: int
) -> None:
    result = EndTxnResult(version, error, throttle)
    expected = by_kafka_python(
        correlation_id, ApiKey.END_TXN, version, throttle_time_ms=throttle, error_code=error
    )
    assert encode_end_txn_response(version, correlation_id, result) == expected
    assert encode_response(correlation_id, result) == [expected]


@settings(max_examples=300, deadline=None)
@given(
    version=st.integers(0, 3),
    correlation_id=i32,
    tops=st.lists(topics, max_size=3),
    throttle=i32,
)
def test_add_partitions_matches_kafka_python_byte_for_byte(
    version: int, correlation_id: int, tops: list[AddPartitionsTopicResult], throttle: int
) -> None:
    result = AddPartitionsResult(version, tops, throttle)
    expected = by_kafka_python(
        correlation_id,
        ApiKey.ADD_PARTITIONS_TO_TXN,
        version,
        throttle_time_ms=throttle,
        results_by_topic_v3_and_below=[
            _Topic(
                name=t.name,
                results_by_partition=[
                    _Partition(partition_index=p, partition_error_code=e) for p, e in t.partitions
                ],
            )
            for t in tops
        ],
    )
    assert encode_add_partitions_response(version, correlation_id, result) == expected
    assert encode_response(correlation_id, result) == [expected]


def test_golden_bytes() -> None:
    """EndTxn v3 (flexible): size, correlation id, header tags, throttle, error, tags.
    AddPartitionsToTxn v0: size, correlation id, throttle, one topic "t", partition 0."""
    assert encode_end_txn_response(3, 7, EndTxnResult(3, 47)) == bytes.fromhex(
        "0000000c 00000007 00 00000000 002f 00"
    )
    one = AddPartitionsResult(0, [AddPartitionsTopicResult("t", [(0, 0)])])
    assert encode_add_partitions_response(0, 7, one) == bytes.fromhex(
        "00000019 00000007 00000000 00000001 0001 74 00000001 00000000 0000"
    )


def test_versions_beyond_those_answered_are_refused() -> None:
    with pytest.raises(ValueError, match="EndTxn v5"):
        encode_end_txn_response(5, 1, EndTxnResult(5, 0))
    with pytest.raises(ValueError, match="AddPartitionsToTxn v4"):
        encode_add_partitions_response(4, 1, AddPartitionsResult(4, []))
