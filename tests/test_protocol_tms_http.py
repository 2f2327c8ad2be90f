"""The TMS HTTP API's body codecs: golden bytes, parity with fastavro, round trips, the
JSON encoding's friendly forms, error messages, and fuzzing of every decoder (whatever
arrives, the decoders answer with a value or a BodyError, nothing else)."""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tmsgate.protocol import tms_http as t
from tmsgate.protocol.tms_http import (
    AVRO,
    JSON,
    BodyError,
    ConsumeRequest,
    PublishRequest,
    PublishResponse,
)

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ID = bytes(range(20))

# --- golden bytes ---------------------------------------------------------------------------
GOLDEN_AVRO: list[tuple[str, Any, bytes]] = [
    ("publish_request", PublishRequest(None, [b"a", b"bc"]), b"\x02\x04\x02a\x04bc\x00"),
    ("publish_request", PublishRequest(5, []), b"\x00\x0a\x00"),
    ("publish_request", PublishRequest(-1, [b""]), b"\x00\x01\x02\x00\x00"),
    (
        "publish_request",
        PublishRequest(1 << 62, [b"\xff" * 64]),
        b"\x00\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01\x02\x80\x01" + b"\xff" * 64 + b"\x00",
    ),
    ("publish_response", PublishResponse(5, 1, 2, 3, 4), b"\x00\x0a\x02\x04\x06\x08"),
    (
        "publish_response",
        PublishResponse(None, 64, 0, 64, 65535),
        b"\x02\x80\x01\x00\x80\x01\xfe\xff\x07",
    ),
    (
        "consume_request",
        ConsumeRequest(b"x" * 20, False, 7, b"tx"),
        b"\x00\x28" + b"x" * 20 + b"\x00\x00\x0e\x00\x04tx",
    ),
    ("consume_request", ConsumeRequest(12345, True, None, None), b"\x02\xf2\xc0\x01\x01\x02\x02"),
    ("consume_request", ConsumeRequest(), b"\x04\x01\x02\x02"),
    ("consume_request", ConsumeRequest(-3, True, -1, b""), b"\x02\x05\x01\x00\x01\x00\x00"),
]

GOLDEN_JSON: list[tuple[str, Any, str]] = [
    (
        "publish_request",
        PublishRequest(None, [b"a", b"\xff\x00"]),
        '{"transactionWritePointer":null,"messages":["a","\u00ff\\u0000"]}',
    ),
    (
        "publish_request",
        PublishRequest(7, []),
        '{"transactionWritePointer":{"long":7},"messages":[]}',
    ),
    (
        "publish_response",
        PublishResponse(5, 1, 2, 3, 4),
        '{"transactionWritePointer":{"long":5},"startTimestamp":1,"startSequenceId":2,'
        '"endTimestamp":3,"endSequenceId":4}',
    ),
    (
        "consume_request",
        ConsumeRequest(b"\x80", False, 3, None),
        '{"startFrom":{"bytes":"\u0080"},"inclusive":false,"limit":{"int":3},"transaction":null}',
    ),
    (
        "consume_request",
        ConsumeRequest(99, True, None, b"t"),
        '{"startFrom":{"long":99},"inclusive":true,"limit":null,"transaction":{"bytes":"t"}}',
    ),
]


def encoder(codec: Any, what: str) -> Any:
    return getattr(codec, f"encode_{what}")


def decoder(codec: Any, what: str) -> Any:
    return getattr(codec, f"decode_{what}")


@pytest.mark.parametrize(("what", "value", "raw"), GOLDEN_AVRO)
def test_avro_golden(what: str, value: Any, raw: bytes) -> None:
    assert encoder(AVRO, what)(value) == raw
    assert decoder(AVRO, what)(raw) == value


@pytest.mark.parametrize(("what", "value", "text"), GOLDEN_JSON)
def test_json_golden(what: str, value: Any, text: str) -> None:
    assert encoder(JSON, what)(value) == text.encode()
    assert decoder(JSON, what)(text.encode()) == value


def test_messages_golden() -> None:
    msgs = [(ID, b"p"), (ID, b"\x00" * 70)]
    avro = b"\x04" + b"\x28" + ID + b"\x02p" + b"\x28" + ID + b"\x8c\x01" + b"\x00" * 70 + b"\x00"
    assert AVRO.encode_messages([]) == b"\x00"
    assert AVRO.encode_messages(msgs) == avro
    assert AVRO.decode_messages(avro) == msgs
    one = {"id": ID.decode("latin-1"), "idHex": ID.hex(), "payload": "p"}
    assert json.loads(JSON.encode_messages(msgs[:1])) == [one]
    assert JSON.decode_messages(JSON.encode_messages(msgs)) == msgs


# --- parity with fastavro (the reference implementation of both encodings) -----------------
def fastavro_binary(schema: dict[str, Any], record: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def fastavro_json(schema: dict[str, Any], record: Any) -> bytes:
    out = io.StringIO()
    fastavro.json_writer(out, fastavro.parse_schema(schema), [record])
    return out.getvalue().encode()


longs = st.integers(t.LONG_MIN, t.LONG_MAX)
ints = st.integers(t.INT_MIN, t.INT_MAX)
blobs = st.binary(max_size=300)
publish_requests = st.builds(PublishRequest, st.none() | longs, st.lists(blobs, max_size=20))
publish_responses = st.builds(PublishResponse, st.none() | longs, longs, ints, longs, ints)
consume_requests = st.builds(
    ConsumeRequest, st.none() | longs | blobs, st.booleans(), st.none() | ints, st.none() | blobs
)
message_lists = st.lists(st.tuples(st.binary(min_size=20, max_size=20), blobs), max_size=30)


def publish_request_record(r: PublishRequest) -> dict[str, Any]:
    return {"transactionWritePointer": r.write_pointer, "messages": r.messages}


def publish_response_record(r: PublishResponse) -> dict[str, Any]:
    return dict(zip(t._PUBLISH_RESPONSE_FIELDS, r, strict=True))


def consume_request_record(r: ConsumeRequest) -> dict[str, Any]:
    return dict(zip(t._CONSUME_REQUEST_FIELDS, r, strict=True))


@FUZZ
@given(publish_requests)
def test_publish_request_matches_fastavro(req: PublishRequest) -> None:
    record = publish_request_record(req)
    raw = fastavro_binary(t.PUBLISH_REQUEST_SCHEMA, record)
    assert AVRO.encode_publish_request(req) == raw
    assert AVRO.decode_publish_request(raw) == req
    assert JSON.decode_publish_request(fastavro_json(t.PUBLISH_REQUEST_SCHEMA, record)) == req
    assert JSON.decode_publish_request(JSON.encode_publish_request(req)) == req


@FUZZ
@given(publish_responses)
def test_publish_response_matches_fastavro(resp: PublishResponse) -> None:
    record = publish_response_record(resp)
    raw = fastavro_binary(t.PUBLISH_RESPONSE_SCHEMA, record)
    assert AVRO.encode_publish_response(resp) == raw
    assert AVRO.decode_publish_response(raw) == resp
    text = fastavro_json(t.PUBLISH_RESPONSE_SCHEMA, record)
    assert json.loads(JSON.encode_publish_response(resp)) == json.loads(text)
    assert JSON.decode_publish_response(text) == resp


@FUZZ
@given(consume_requests)
def test_consume_request_matches_fastavro(req: ConsumeRequest) -> None:
    record = consume_request_record(req)
    raw = fastavro_binary(t.CONSUME_REQUEST_SCHEMA, record)
    assert AVRO.encode_consume_request(req) == raw
    assert AVRO.decode_consume_request(raw) == req
    assert JSON.decode_consume_request(fastavro_json(t.CONSUME_REQUEST_SCHEMA, record)) == req
    assert JSON.decode_consume_request(JSON.encode_consume_request(req)) == req


@FUZZ
@given(message_lists)
def test_messages_match_fastavro(msgs: list[tuple[bytes, bytes]]) -> None:
    records = [{"id": i, "payload": p} for i, p in msgs]
    assert AVRO.encode_messages(msgs) == fastavro_binary(t.MESSAGES_SCHEMA, records)
    assert AVRO.decode_messages(AVRO.encode_messages(msgs)) == msgs
    text = fastavro_json(t.MESSAGES_SCHEMA, records)
    # The seed's fields as fastavro writes them, and each id in hex beside them.
    answered = json.loads(JSON.encode_messages(msgs))
    assert [m.pop("idHex") for m in answered] == [i.hex() for i, _ in msgs]
    assert answered == json.loads(text)
    assert JSON.decode_messages(JSON.encode_messages(msgs)) == msgs


def test_avro_array_in_several_blocks() -> None:
    """Writers may split an array into blocks, some with their byte size (negative count)."""
    raw = b"\x02" + b"\x02\x02a" + b"\x03\x08\x02b\x02c" + b"\x00"
    assert AVRO.decode_publish_request(raw) == PublishRequest(None, [b"a", b"b", b"c"])


# --- Avro JSON: the friendly forms the contract accepts ------------------------------------
@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ({"messages": []}, PublishRequest(None, [])),  # missing nullable field: null
        ({"transactionWritePointer": 5, "messages": ["x"]}, PublishRequest(5, [b"x"])),
        ({"transactionWritePointer": {"long": 5}, "messages": []}, PublishRequest(5, [])),
        (
            {"transactionWritePointer": None, "messages": ["\u00e9"]},
            PublishRequest(None, [b"\xe9"]),
        ),
    ],
)
def test_json_publish_request_forms(doc: dict[str, Any], expected: PublishRequest) -> None:
    assert JSON.decode_publish_request(json.dumps(doc).encode()) == expected


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ({}, ConsumeRequest(None, True, None, None)),  # every field missing: null or default
        ({"startFrom": "x" * 20}, ConsumeRequest(b"x" * 20)),
        ({"startFrom": 17, "limit": 3}, ConsumeRequest(17, True, 3)),
        ({"startFrom": {"long": 17}, "limit": {"int": 3}}, ConsumeRequest(17, True, 3)),
        ({"startFrom": {"bytes": "ab"}, "inclusive": False}, ConsumeRequest(b"ab", False)),
        ({"transaction": "\x01\x02"}, ConsumeRequest(transaction=b"\x01\x02")),
        ({"transaction": {"bytes": ""}}, ConsumeRequest(transaction=b"")),
    ],
)
def test_json_consume_request_forms(doc: dict[str, Any], expected: ConsumeRequest) -> None:
    assert JSON.decode_consume_request(json.dumps(doc).encode()) == expected


def test_json_publish_response_bare_pointer() -> None:
    doc = {
        "transactionWritePointer": 9,
        "startTimestamp": 1,
        "startSequenceId": 0,
        "endTimestamp": 1,
        "endSequenceId": 4,
    }
    assert JSON.decode_publish_response(json.dumps(doc).encode()) == PublishResponse(9, 1, 0, 1, 4)


# --- errors say what was wrong ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("what", "body", "message"),
    [
        ("publish_request", b"not json", "PublishRequest: the body is not JSON"),
        ("publish_request", b"\xff\xfe\x00", "PublishRequest: the body is not JSON"),
        ("publish_request", b"[]", "PublishRequest: expected a JSON object, got an array"),
        ("publish_request", b"{}", "PublishRequest.messages: missing (expected an array of bytes)"),
        (
            "publish_request",
            b'{"messages": "abc"}',
            "PublishRequest.messages: expected an array of bytes, got a string",
        ),
        (
            "publish_request",
            b'{"messages": ["a", 1]}',
            "PublishRequest.messages[1]: expected bytes (a string of code points 0-255), "
            "got the number 1",
        ),
        (
            "publish_request",
            '{"messages": ["\u20ac"]}'.encode(),
            "PublishRequest.messages[0]: expected bytes (a string of code points 0-255), "
            "found U+20AC at index 0",
        ),
        (
            "publish_request",
            b'{"transactionWritePointer": "5", "messages": []}',
            "PublishRequest.transactionWritePointer: expected one of ['long', 'null'], "
            "got a string",
        ),
        (
            "publish_request",
            b'{"transactionWritePointer": true, "messages": []}',
            "PublishRequest.transactionWritePointer: expected one of ['long', 'null'], "
            "got a boolean",
        ),
        (
            "publish_request",
            b'{"transactionWritePointer": 1.5, "messages": []}',
            "got the number 1.5",
        ),
        (
            "publish_request",
            b'{"transactionWritePointer": 9223372036854775808, "messages": []}',
            "PublishRequest.transactionWritePointer: expected a long, 9223372036854775808 is "
            "outside 64 bits",
        ),
        (
            "publish_request",
            b'{"transactionWritePointer": {"int": 5}, "messages": []}',
            "an object with one key of ['long']; got an object with keys ['int']",
        ),
        (
            # a branch named with no value in it (the HTTP fuzz's find, CI of 2026-11-29)
            "publish_request",
            b'{"transactionWritePointer": {"long": null}, "messages": []}',
            "PublishRequest.transactionWritePointer: the 'long' branch needs a value",
        ),
        (
            "publish_request",
            b'{"transactionwritepointer": 5, "messages": []}',
            "PublishRequest: unknown field 'transactionwritepointer'",
        ),
        ("publish_response", b"{}", "PublishResponse.startTimestamp: missing (expected a long)"),
        (
            "publish_response",
            b'{"startTimestamp": 1, "startSequenceId": 2147483648, "endTimestamp": 1, '
            b'"endSequenceId": 0}',
            "PublishResponse.startSequenceId: expected an int, 2147483648 is outside 32 bits",
        ),
        (
            "consume_request",
            b'{"inclusive": "yes"}',
            "ConsumeRequest.inclusive: expected a boolean, got a string",
        ),
        (
            "consume_request",
            b'{"limit": "10"}',
            "ConsumeRequest.limit: expected one of ['int', 'null'], got a string",
        ),
        (
            "consume_request",
            b'{"transaction": 5}',
            "ConsumeRequest.transaction: expected one of ['bytes', 'null'], got the number 5",
        ),
        (
            "consume_request",
            b'{"startFrom": [1]}',
            "ConsumeRequest.startFrom: expected one of ['bytes', 'long', 'null'], got an array",
        ),
    ],
)
def test_json_errors(what: str, body: bytes, message: str) -> None:
    with pytest.raises(BodyError) as info:
        decoder(JSON, what)(body)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("what", "body", "message"),
    [
        ("publish_request", b"", "PublishRequest.transactionWritePointer: expected a union index"),
        (
            "publish_request",
            b"\x01\x00",  # index -1: fastavro would take it as the last branch
            "PublishRequest.transactionWritePointer: expected a union index of ['long', 'null'], "
            "got index -1",
        ),
        ("publish_request", b"\x00", "PublishRequest.transactionWritePointer: expected a long"),
        ("publish_request", b"\x00" + b"\xff" * 9 + b"\x7f", "outside 64 bits"),
        ("publish_request", b"\x00" + b"\xff" * 10 + b"\x01", "a varint longer than 10 bytes"),
        ("publish_request", b"\x02", "PublishRequest.messages: expected an array of bytes"),
        ("publish_request", b"\x02\x02\x10ab", "PublishRequest.messages: expected an array"),
        ("publish_request", b"\x02\x00\x00", "PublishRequest: 1 bytes after the end of the record"),
        ("publish_response", b"\x02\x02", "PublishResponse.startSequenceId: expected an int"),
        (
            "publish_response",
            b"\x02\x02\xfe\xff\xff\xff\x7f",
            "PublishResponse.startSequenceId: expected an int, got 17179869183, outside 32 bits",
        ),
        ("consume_request", b"\x06", "ConsumeRequest.startFrom: expected a union index"),
        (
            "consume_request",
            b"\x00\x50ab",
            "ConsumeRequest.startFrom: expected bytes, 40 bytes but only 2 left",
        ),
        ("consume_request", b"\x00\x03", "ConsumeRequest.startFrom: expected bytes, a negative"),
        (
            "consume_request",
            b"\x04\x05",
            "ConsumeRequest.inclusive: expected a boolean, byte 0x05 is neither 0 nor 1",
        ),
        ("consume_request", b"\x04\x01", "ConsumeRequest.limit: expected a union index"),
        ("consume_request", b"\x04\x01\x02\x00\x02", "ConsumeRequest.transaction: expected bytes"),
    ],
)
def test_avro_errors(what: str, body: bytes, message: str) -> None:
    with pytest.raises(BodyError) as info:
        decoder(AVRO, what)(body)
    assert message in str(info.value)


def test_body_error_is_a_value_error() -> None:
    assert issubclass(BodyError, ValueError)


# --- content types ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("header", "codec"),
    [
        (None, JSON),
        ("", JSON),
        ("application/json", JSON),
        ("Application/JSON; charset=utf-8", JSON),
        ("avro/binary", AVRO),
        ("avro/binary;v=1", AVRO),
        ("text/plain", None),
        ("application/octet-stream", None),
    ],
)
def test_codec_for(header: str | None, codec: Any) -> None:
    assert t.codec_for(header) is codec


# --- fuzz: nothing but BodyError escapes a decoder -------------------------------------------
JSON_CODECS = [t.json_codec(mode) for mode in t.PAYLOAD_MODES]
DECODERS = [
    decoder(c, w)
    for c in (AVRO, *JSON_CODECS)
    for w in ("publish_request", "publish_response", "consume_request", "messages")
]


def decodes_or_body_error(decode: Any, body: bytes) -> None:
    with contextlib.suppress(BodyError):
        decode(body)


@FUZZ
@given(st.binary(max_size=200))
def test_fuzz_random_bytes(body: bytes) -> None:
    for decode in DECODERS:
        decodes_or_body_error(decode, body)


VALID_BODIES = [(AVRO, w, raw) for w, _v, raw in GOLDEN_AVRO] + [
    (JSON, w, text.encode()) for w, _v, text in GOLDEN_JSON
]


@pytest.mark.parametrize(("codec", "what", "valid"), VALID_BODIES)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_fuzz_mutated_bodies(codec: Any, what: str, valid: bytes, data: st.DataObject) -> None:
    body = bytearray(valid)
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        pos = data.draw(st.integers(0, max(0, len(body) - 1)))
        if op == "flip" and body:
            body[pos] = data.draw(st.integers(0, 255))
        elif op == "cut":
            del body[pos:]
        else:
            body[pos:pos] = data.draw(st.binary(min_size=1, max_size=4))
    decodes_or_body_error(decoder(codec, what), bytes(body))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)
FIELD_NAMES = sorted(
    {
        *t._PUBLISH_REQUEST_FIELDS,
        *t._PUBLISH_RESPONSE_FIELDS,
        *t._CONSUME_REQUEST_FIELDS,
        "id",
        "idHex",
        "payload",
        "payloadEncoding",
    }
)
field_values = json_values | st.dictionaries(
    st.sampled_from(["long", "int", "bytes", "null", "string"]), json_values, max_size=2
)
records = st.dictionaries(st.sampled_from(FIELD_NAMES), field_values, max_size=6)


@FUZZ
@given(json_values | records | st.lists(records, max_size=3))
def test_fuzz_json_documents(doc: Any) -> None:
    body = json.dumps(doc).encode()
    for decode in DECODERS[4:]:
        decodes_or_body_error(decode, body)


def test_deeply_nested_json_is_a_body_error() -> None:
    body = b"[" * 100_000 + b"]" * 100_000
    for decode in DECODERS[4:]:
        with pytest.raises(BodyError):
            decode(body)


# --- payloads as text or base64 (?payload= of the HTTP API) -----------------------------------
UTF8, B64 = t.json_codec("utf-8"), t.json_codec("base64")


def test_utf8_payloads_are_their_utf8_bytes() -> None:
    body = json.dumps({"messages": ["Zürich", "5€", "", "😀"]}).encode()
    assert UTF8.decode_publish_request(body) == PublishRequest(
        None, [b"Z\xc3\xbcrich", b"5\xe2\x82\xac", b"", b"\xf0\x9f\x98\x80"]
    )
    # The seed's Avro JSON refuses the euro sign, and reads "ü" as the one byte 0xFC.
    with pytest.raises(BodyError, match="found U\\+20AC at index 1"):
        JSON.decode_publish_request(body)
    assert JSON.decode_publish_request(b'{"messages": ["\\u00fc"]}').messages == [b"\xfc"]


def test_utf8_answers_flag_what_is_not_utf8() -> None:
    msgs = [(ID, "Zürich".encode()), (ID, b"\xfc\xff")]
    answered = json.loads(UTF8.encode_messages(msgs))
    assert answered == [
        {
            "id": ID.decode("latin-1"),
            "idHex": ID.hex(),
            "payload": "Zürich",
            "payloadEncoding": "utf-8",
        },
        {
            "id": ID.decode("latin-1"),
            "idHex": ID.hex(),
            "payload": "/P8=",
            "payloadEncoding": "base64",
        },
    ]
    assert UTF8.decode_messages(UTF8.encode_messages(msgs)) == msgs


@FUZZ
@given(st.lists(st.binary(max_size=40), max_size=5), st.none() | st.integers(0, 1 << 62))
def test_base64_round_trip(payloads: list[bytes], wp: int | None) -> None:
    req = PublishRequest(wp, payloads)
    assert B64.decode_publish_request(B64.encode_publish_request(req)) == req
    msgs = [(ID, p) for p in payloads]
    assert B64.decode_messages(B64.encode_messages(msgs)) == msgs
    assert all(m["payloadEncoding"] == "base64" for m in json.loads(B64.encode_messages(msgs)))


@FUZZ
@given(st.lists(st.text(max_size=20), max_size=5))
def test_utf8_round_trip(texts: list[str]) -> None:
    texts = [x for x in texts if not any(0xD800 <= ord(c) <= 0xDFFF for c in x)]
    req = PublishRequest(None, [x.encode() for x in texts])
    assert UTF8.decode_publish_request(UTF8.encode_publish_request(req)) == req


@pytest.mark.parametrize(
    ("codec", "body", "message"),
    [
        (
            UTF8,
            b'{"messages": ["\\ud800"]}',
            "messages[0]: expected text, found the lone surrogate U+D800 at index 0",
        ),
        (UTF8, b'{"messages": [5]}', "messages[0]: expected text (a string), got the number 5"),
        (UTF8, b'{"messages": "x"}', "messages: expected an array of text, got a string"),
        (B64, b'{"messages": ["not base64!"]}', "messages[0]: expected base64"),
        (B64, b'{"messages": ["YQ"]}', "messages[0]: expected base64"),  # padding missing
        (B64, b'{"messages": [null]}', "messages[0]: expected base64 (a string), got null"),
    ],
)
def test_payload_mode_errors(codec: Any, body: bytes, message: str) -> None:
    with pytest.raises(BodyError) as caught:
        codec.decode_publish_request(body)
    assert message in str(caught.value)


def test_payload_modes_leave_ids_and_transactions_as_avro_json() -> None:
    req = ConsumeRequest(ID, False, 3, b"\x01\xff")
    for codec in (JSON, UTF8, B64):
        assert codec.decode_consume_request(JSON.encode_consume_request(req)) == req


def test_unknown_payload_mode() -> None:
    with pytest.raises(KeyError):
        t.json_codec("latin-9")
    with pytest.raises(ValueError, match="payload: expected one of"):
        t.JsonCodec("text")


@pytest.mark.parametrize("encoding", [{}, [], 1, None, "latin-1"])
def test_a_payload_encoding_not_named_by_the_api_is_a_body_error(encoding: object) -> None:
    # Found by test_fuzz_json_documents: a dict here was a TypeError, not a BodyError.
    body = json.dumps([{"id": "x" * 20, "payload": "p", "payloadEncoding": encoding}])
    with pytest.raises(t.BodyError, match="payloadEncoding: expected one of avro, utf-8"):
        t.json_codec().decode_messages(body.encode())
