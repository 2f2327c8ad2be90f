"""Fuzz targets for every decoder the gateway exposes to the network.

Whatever bytes arrive, the decoders answer with a request, a BadFrame or one of the
protocol's typed errors; nothing else may escape (the connection driver relies on
it to close only the offending connection).
"""

from __future__ import annotations

import contextlib
import struct

import kafka_requests as kr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tmsgate.gateway.kafka.routes import default_routes
from tmsgate.protocol import (
    BadFrame,
    ConnectionClosed,
    FrameTooLarge,
    KafkaConnection,
    MalformedRequest,
    ProtocolError,
    Request,
    decode_records,
    decode_request,
    parse_header,
)

FUZZ = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
ROUTES = [(r.api_key, v) for r in default_routes() for v in range(r.min_version, r.max_version + 1)]


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def header(api_key: int, version: int, flexible: bool) -> bytes:
    return struct.pack(">hhih", api_key, version, 1, 4) + b"fuzz" + (b"\x00" if flexible else b"")


def valid_requests() -> list[bytes]:
    out = []
    for req, v in [
        (kr.produce("t", kr.batch(2)), 9),
        (kr.produce("t", kr.batch(2)), 3),
        (kr.fetch("t", 0), 12),
        (kr.fetch("t", 0), 4),
        (kr.list_offsets("t", -1), 7),
        (kr.metadata("t"), 12),
        (kr.metadata("t"), 1),
        (kr.init_producer_id(), 4),
        (kr.create_topic("t", configs={"retention.ms": "1"}), 5),
    ]:
        req.with_header(correlation_id=3, client_id="fuzz")
        out.append(bytes(req.encode(version=v, header=True)))
    return out


VALID = valid_requests()


def check_events(events: list) -> None:
    for e in events:
        assert isinstance(e, Request | BadFrame)
    assert all(not isinstance(e, BadFrame) for e in events[:-1])


@FUZZ
@given(st.lists(st.binary(max_size=300), max_size=20))
def test_frame_decoder_on_arbitrary_chunks(chunks: list[bytes]) -> None:
    conn = KafkaConnection(max_frame_bytes=4096)
    for chunk in chunks:
        try:
            check_events(conn.receive_data(chunk))
        except (FrameTooLarge, ConnectionClosed):
            return


@FUZZ
@given(st.binary(max_size=200))
def test_header_parser(data: bytes) -> None:
    try:
        _api_key, version, _cid, _client_id, pos = parse_header(memoryview(data))
    except MalformedRequest:
        return
    assert pos >= 8 and version == struct.unpack_from(">h", data, 2)[0]


@FUZZ
@given(st.sampled_from(ROUTES), st.binary(max_size=400), st.booleans())
def test_request_bodies_for_every_route(route: tuple[int, int], body: bytes, flex: bool) -> None:
    api_key, version = route
    try:
        req = decode_request(header(api_key, version, flex) + body)
    except MalformedRequest:
        return
    assert req.api_key == api_key


@FUZZ
@given(st.sampled_from(VALID), st.data())
def test_mutated_valid_requests(valid: bytes, data: st.DataObject) -> None:
    raw = bytearray(valid)
    for _ in range(data.draw(st.integers(1, 8))):
        pos = data.draw(st.integers(0, len(raw) - 1))
        raw[pos] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    for candidate in (bytes(raw), bytes(raw[:cut])):
        conn = KafkaConnection(max_frame_bytes=1 << 16)
        with contextlib.suppress(FrameTooLarge, ConnectionClosed):
            check_events(conn.receive_data(frame(candidate)))


def _recrc(raw: bytearray) -> None:
    from crc32c import crc32c

    if len(raw) >= 21:
        struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))


BATCHES = [kr.batch([(b"k", b"v" * 30, [("h", b"x")])] * 3, codec=c) for c in range(5)]


@FUZZ
@given(st.sampled_from(BATCHES), st.data(), st.booleans())
def test_record_batch_decoder(valid: bytes, data: st.DataObject, fix_crc: bool) -> None:
    raw = bytearray(valid)
    for _ in range(data.draw(st.integers(1, 6))):
        # bias towards the header and the first records, where lengths live
        pos = data.draw(st.integers(0, min(len(raw) - 1, 90)))
        raw[pos] = data.draw(st.integers(0, 255))
    raw = raw[: data.draw(st.integers(0, len(raw)))] if data.draw(st.booleans()) else raw
    if fix_crc:
        _recrc(raw)  # get past the CRC check to reach the record parser
    with contextlib.suppress(ProtocolError):
        decode_records(bytes(raw))


@FUZZ
@given(st.binary(max_size=500))
def test_record_batch_decoder_on_arbitrary_bytes(data: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        decode_records(data)
