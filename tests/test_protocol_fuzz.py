"""Fuzz targets for every decoder the gateway exposes to the network.

Whatever bytes arrive, the decoders answer with a request, a BadFrame or one of the
protocol's typed errors; nothing else may escape (the connection driver relies on
it to close only the offending connection).
"""

from __future__ import annotations

import contextlib
import random
import struct

import kafka_requests as kr
import schema_requests as sr
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
    request_class,
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


# --- nulls (protocol/_nulls.py) ------------------------------------------------------
# Every request kafka-python decodes, with the fields a null can be written into.
NULL_CASES = [(key, v, sr.null_fields(key, v)) for key, v in sr.all_versions()]
NULL_CASES = [case for case in NULL_CASES if case[2]]


def _applied(chosen: list[sr.NullField]) -> list[sr.NullField]:
    """The chosen fields minus those inside one already made null."""
    out: list[sr.NullField] = []
    for field in sorted(chosen, key=lambda f: len(f.path)):
        if not any(field.path[: len(done.path)] == done.path for done in out):
            out.append(field)
    return out


@FUZZ
@given(st.sampled_from(NULL_CASES), st.data(), st.text(max_size=4), st.booleans())
def test_nulls_injected_into_request_fields(
    case: tuple[int, int, list[sr.NullField]], data: st.DataObject, text: str, stream: bool
) -> None:
    """A null in a field that does not allow one makes the frame bad; in nullable
    fields nulls decode, and the rest of the request with them."""
    api_key, version, fields = case
    chosen = _applied(data.draw(st.lists(st.sampled_from(fields), min_size=1, max_size=4)))
    request = sr.sample(api_key, version, strings=text)
    for field in chosen:
        sr.with_null(request, field.path)
    raw = sr.encode(request, version, correlation_id=9)
    conn = KafkaConnection()
    events = conn.receive_data(frame(raw)) if stream else conn.receive_frame(raw)
    assert len(events) == 1
    if all(f.nullable for f in chosen):
        assert isinstance(events[0], Request)
        for field in chosen:
            assert sr.get(events[0].body, field.path) is None
    else:
        assert isinstance(events[0], BadFrame) and events[0].correlation_id == 9
        assert "is null but not nullable" in events[0].reason


NULLS = [b"\xff\xff", b"\xff\xff\xff\xff", b"\x00"]  # null string/array/compact length


@FUZZ
@given(st.sampled_from(NULL_CASES), st.data())
def test_null_lengths_written_into_valid_requests(
    case: tuple[int, int, list[sr.NullField]], data: st.DataObject
) -> None:
    """Null lengths anywhere in a valid request: whatever then decodes holds no null
    the schema forbids (checked against a slow reference walk of the schema)."""
    api_key, version, _fields = case
    raw = bytearray(sr.encode(sr.sample(api_key, version), version))
    for _ in range(data.draw(st.integers(1, 3))):
        pos = data.draw(st.integers(8, len(raw) - 1))
        null = data.draw(st.sampled_from(NULLS))
        raw[pos : pos + len(null)] = null
    try:
        req = decode_request(bytes(raw))
    except MalformedRequest:
        return
    if req.api_key == api_key and req.api_version == version and req.body is not None:
        assert sr.illegal_nulls(req.body, request_class(api_key)._struct, version) == []


ALL_SAMPLES = [sr.encode(sr.sample(key, v, records=kr.batch(1)), v) for key, v in sr.all_versions()]


@FUZZ
@given(st.sampled_from(ALL_SAMPLES), st.data())
def test_a_request_cut_short_never_decodes(valid: bytes, data: st.DataObject) -> None:
    """Not even when only a string or bytes field at the end is short: the slice that
    reads it would quietly return less (a topic "orders" arriving as "ord")."""
    cut = data.draw(st.integers(0, len(valid) - 1))
    try:
        decode_request(valid[:cut])
    except MalformedRequest:
        return
    raise AssertionError(f"{len(valid) - cut} bytes short, and it decoded")


@FUZZ
@given(st.sampled_from(sr.all_versions()), st.integers(0, 2**32))
def test_random_legal_requests_decode(case: tuple[int, int], seed: int) -> None:
    """Random values, legal nulls included, are never taken for an illegal null."""
    api_key, version = case
    request = sr.random_request(random.Random(seed), api_key, version, records=kr.batch(1))
    req = decode_request(sr.encode(request, version))
    assert (req.api_key, req.api_version) == (api_key, version) and req.body is not None
