"""tmsgate.protocol framing and request/response codecs: golden bytes, chunking, limits."""

from __future__ import annotations

import struct

import pytest
from kafka.protocol.metadata import ApiVersionsResponse, MetadataRequest
from tmsgate.protocol import (
    ApiKey,
    BadFrame,
    ConnectionClosed,
    FrameTooLarge,
    KafkaConnection,
    MalformedRequest,
    Request,
    decode_request,
    encode_response,
    parse_header,
    request_classes,
    response_class,
)

# Metadata v1: api_key 3, version 1, correlation id 1, client id "c", topics ["t"]
METADATA_V1 = bytes.fromhex("00000012 0003 0001 00000001 000163 00000001 000174")
# ApiVersions v3 (flexible, header v2): client id "c", empty tags, body "a","1", empty tags
API_VERSIONS_V3 = bytes.fromhex("00000011 0012 0003 00000009 000163 00 0261 0231 00")


def test_request_table_knows_the_apis() -> None:
    table = request_classes()
    assert table[ApiKey.PRODUCE].name == "ProduceRequest"
    assert table[ApiKey.API_VERSIONS].name == "ApiVersionsRequest"
    assert len(table) > 40


def test_golden_metadata_v1() -> None:
    [req] = KafkaConnection().receive_data(METADATA_V1)
    assert isinstance(req, Request)
    assert (req.api_key, req.api_version, req.correlation_id, req.client_id) == (3, 1, 1, "c")
    assert [t.name for t in req.body.topics] == ["t"]
    assert req.size == len(METADATA_V1) - 4


def test_golden_flexible_header() -> None:
    [req] = KafkaConnection().receive_data(API_VERSIONS_V3)
    assert (req.api_key, req.api_version, req.correlation_id) == (18, 3, 9)
    assert (req.body.client_software_name, req.body.client_software_version) == ("a", "1")


def test_header_with_tagged_fields_is_skipped() -> None:
    frame = bytes.fromhex("0012 0003 00000009 000163 01 05 02 abcd 0261 0231 00")
    assert parse_header(memoryview(frame))[:4] == (18, 3, 9, "c")
    assert decode_request(frame).body.client_software_name == "a"


def test_byte_by_byte_equals_whole() -> None:
    stream = METADATA_V1 + API_VERSIONS_V3 + METADATA_V1
    whole = KafkaConnection().receive_data(stream)
    conn = KafkaConnection()
    dribbled = []
    for i in range(len(stream)):
        dribbled += conn.receive_data(stream[i : i + 1])
    assert [(r.api_key, r.correlation_id) for r in whole] == [(3, 1), (18, 9), (3, 1)]
    assert [(r.api_key, r.correlation_id) for r in dribbled] == [(3, 1), (18, 9), (3, 1)]


def test_whole_frames_read_by_the_caller_equal_the_stream() -> None:
    stream = METADATA_V1 + API_VERSIONS_V3
    conn = KafkaConnection()
    events, pos = [], 0
    while pos < len(stream):
        size = conn.frame_size(stream[pos : pos + 4])
        events += conn.receive_frame(stream[pos + 4 : pos + 4 + size])
        pos += 4 + size
    expected = KafkaConnection().receive_data(stream)
    assert [(r.api_key, r.correlation_id) for r in events] == [
        (r.api_key, r.correlation_id) for r in expected
    ]


@pytest.mark.parametrize("size", [101, -1])
def test_frame_size_refuses_before_the_body(size: int) -> None:
    conn = KafkaConnection(max_frame_bytes=100)
    with pytest.raises(FrameTooLarge):
        conn.frame_size(struct.pack(">i", size))
    with pytest.raises(ConnectionClosed):
        conn.receive_frame(METADATA_V1[4:])


def test_bad_whole_frame_breaks_the_connection() -> None:
    conn = KafkaConnection()
    (event,) = conn.receive_frame(struct.pack(">hhih", 0, 9, 42, 0) + b"\xff\xff")
    assert isinstance(event, BadFrame) and event.correlation_id == 42 and conn.broken


def test_bytes_needed() -> None:
    conn = KafkaConnection()
    assert conn.bytes_needed() == 4
    conn.receive_data(METADATA_V1[:6])
    assert conn.bytes_needed() == len(METADATA_V1) - 6


@pytest.mark.parametrize("size", [101, 1 << 30, -1])
def test_oversized_or_negative_length_is_refused_before_the_body(size: int) -> None:
    conn = KafkaConnection(max_frame_bytes=100)
    with pytest.raises(FrameTooLarge):
        conn.receive_data(struct.pack(">i", size))
    with pytest.raises(ConnectionClosed):
        conn.receive_data(b"more")


def test_requests_before_a_bad_frame_are_kept() -> None:
    bad = struct.pack(">i", 12) + struct.pack(">hhih", 0, 9, 42, 0) + b"\xff\xff"
    conn = KafkaConnection()
    events = conn.receive_data(METADATA_V1 + bad + METADATA_V1)
    assert isinstance(events[0], Request) and isinstance(events[1], BadFrame)
    assert len(events) == 2 and events[1].correlation_id == 42
    assert conn.broken
    with pytest.raises(ConnectionClosed):
        conn.receive_data(METADATA_V1)


def test_short_frame_is_malformed() -> None:
    with pytest.raises(MalformedRequest):
        decode_request(b"\x00\x03\x00")


def test_unknown_versions_decode_without_body() -> None:
    frame = struct.pack(">hhih", 18, 42, 5, -1) + b"\x00"
    req = decode_request(frame)
    assert (req.api_key, req.api_version, req.correlation_id, req.body) == (18, 42, 5, None)
    req = decode_request(struct.pack(">hhih", 1234, 0, 6, -1))
    assert req.body is None and req.api_key == 1234


def test_response_golden_api_versions_v0() -> None:
    resp = ApiVersionsResponse[0](
        error_code=35,
        api_keys=[ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=4)],
    )
    [chunk] = encode_response(7, resp)
    assert bytes(chunk) == bytes.fromhex("00000010 00000007 0023 00000001 0012 0000 0004")


def test_api_versions_v3_response_uses_header_v0() -> None:
    resp = response_class(18, 3)(error_code=0, api_keys=[], throttle_time_ms=0)
    [chunk] = encode_response(1, resp)
    # size, correlation id, then the body (no header tag buffer before the error code)
    assert bytes(chunk)[4:10] == bytes.fromhex("00000001 0000")


def test_request_encode_decode_round_trip_all_metadata_versions() -> None:
    for version in range(1, 13):
        req = MetadataRequest[version](
            topics=[MetadataRequest.MetadataRequestTopic(name="x")],
            allow_auto_topic_creation=True,
            include_topic_authorized_operations=False,
        )
        req.with_header(correlation_id=version, client_id="rt")
        [event] = KafkaConnection().receive_data(req.encode(header=True, framed=True))
        assert event.api_version == version and event.body.topics[0].name == "x"


# A valid request and, in the same write, a bad length prefix: the request must still be
# answered (issue defect 4: it was dropped and the gateway logged a ConnectionClosed).
BAD_PREFIX = bytes.fromhex("ffffffff")


def test_a_request_before_a_refused_prefix_is_still_received_whole_frames() -> None:
    data = METADATA_V1 + BAD_PREFIX
    conn = KafkaConnection()
    size = conn.frame_size(data[:4])  # the caller sizes both frames before decoding either
    with pytest.raises(FrameTooLarge):
        conn.frame_size(data[4 + size : 8 + size])
    [req] = conn.receive_frame(data[4 : 4 + size])
    assert isinstance(req, Request) and (req.api_key, req.correlation_id) == (3, 1)
    assert conn.broken
    with pytest.raises(ConnectionClosed):  # nothing sized after the refusal is accepted
        conn.receive_frame(data[4 : 4 + size])


def test_a_request_before_a_refused_prefix_is_still_received_stream() -> None:
    conn = KafkaConnection()
    [req] = conn.receive_data(METADATA_V1 + BAD_PREFIX)
    assert isinstance(req, Request) and req.correlation_id == 1
    with pytest.raises(FrameTooLarge):
        conn.receive_data(b"")
    with pytest.raises(ConnectionClosed):
        conn.receive_data(METADATA_V1)
