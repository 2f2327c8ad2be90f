"""The direct FetchResponse encoder writes exactly what kafka-python's generic encoder
writes, for every version the gateway answers (4-17) and any field values."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer import FetchResponse
from tmsgate.protocol import (
    FetchPartition,
    FetchResult,
    FetchTopic,
    encode_fetch_response,
    encode_response,
    response_class,
)

_Topic = FetchResponse.FetchableTopicResponse
_Partition = _Topic.PartitionData
_Aborted = _Partition.AbortedTransaction

i16 = st.integers(-(2**15), 2**15 - 1)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
partitions = st.builds(
    FetchPartition,
    i32,
    i16,
    i64,
    i64,
    i64,
    st.none() | st.lists(st.tuples(i64, i64), max_size=2),
    st.none() | st.binary(max_size=300),  # long enough for a two-byte compact length
)
topics = st.builds(
    FetchTopic,
    st.text(min_size=1, max_size=200),
    st.builds(uuid.UUID, int=st.integers(0, 2**128 - 1)),
    st.lists(partitions, max_size=3),
)


def by_kafka_python(version: int, correlation_id: int, result: FetchResult) -> bytes:
    responses = [
        _Topic(
            topic=t.name,
            topic_id=t.topic_id,
            partitions=[
                _Partition(
                    partition_index=p.index,
                    error_code=p.error_code,
                    high_watermark=p.high_watermark,
                    last_stable_offset=p.last_stable_offset,
                    log_start_offset=p.log_start_offset,
                    aborted_transactions=None
                    if p.aborted_transactions is None
                    else [
                        _Aborted(producer_id=pid, first_offset=first)
                        for pid, first in p.aborted_transactions
                    ],
                    preferred_read_replica=-1,
                    records=p.records,
                )
                for p in t.partitions
            ],
        )
        for t in result.topics
    ]
    response = response_class(1, version)(
        throttle_time_ms=result.throttle_time_ms,
        error_code=result.error_code,
        session_id=result.session_id,
        responses=responses,
    )
    return bytes(encode_response(correlation_id, response)[0])


@settings(max_examples=400, deadline=None)
@given(
    version=st.integers(4, 17),
    correlation_id=i32,
    tops=st.lists(topics, max_size=3),
    error_code=i16,
    session_id=i32,
    throttle=i32,
)
def test_every_version_matches_kafka_python_byte_for_byte(
    version: int,
    correlation_id: int,
    tops: list[FetchTopic],
    error_code: int,
    session_id: int,
    throttle: int,
) -> None:
    if version < 7:  # no top-level error code or session before v7
        error_code = session_id = 0
    result = FetchResult(version, tops, error_code, session_id, throttle)
    expected = by_kafka_python(version, correlation_id, result)
    chunks = encode_fetch_response(version, correlation_id, result)
    assert b"".join(chunks) == expected
    assert b"".join(encode_response(correlation_id, result)) == expected


def test_records_are_passed_through_without_a_copy() -> None:
    records = bytearray(b"r" * 1000)
    partition = FetchPartition(0, 0, 5, 5, 0, None, records)
    result = FetchResult(12, [FetchTopic("t", None, [partition])])
    chunks = encode_fetch_response(12, 1, result)
    assert any(chunk is records for chunk in chunks)


@settings(max_examples=60, deadline=None)
@given(
    version=st.integers(4, 17),
    pieces=st.lists(st.binary(min_size=0, max_size=40), max_size=5),
)
def test_records_as_chunks_encode_as_their_join(version: int, pieces: list[bytes]) -> None:
    # A fetch hands a partition's batches over as chunks (cache views, store batches):
    # the frame is the one the joined bytes give, and each chunk goes out uncopied.
    views = [memoryview(p) for p in pieces]

    def frame(records: object) -> list:
        part = FetchPartition(0, 0, 5, 5, 0, None, records)  # type: ignore[arg-type]
        topic = FetchTopic("t", uuid.UUID(int=7) if version >= 13 else None, [part])
        return encode_fetch_response(version, 3, FetchResult(version, [topic]))

    as_chunks = frame(views)
    assert b"".join(as_chunks) == b"".join(frame(b"".join(pieces)))
    assert all(any(c is v for c in as_chunks) for v in views if len(v))
