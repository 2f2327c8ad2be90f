"""Bodies of the TMS HTTP API (the seed's Avro schemas), in Avro binary and Avro JSON.

No I/O. Two codecs with the same methods, picked by content type (``codec_for``):

- ``AVRO``, ``avro/binary``: Avro's binary encoding of the schemas, schemaless. Encoding
  uses fastavro; decoding reads the small scalar fields here, strictly (fastavro accepts a
  negative union index as the last branch, an ``int`` of 64 bits, any non-zero byte as
  ``true``), and hands the one large field, PublishRequest's array of messages, to
  fastavro's compiled reader.
- ``JSON``, ``application/json``: Avro's JSON encoding. Bytes are strings whose code
  points 0-255 are the bytes (ISO-8859-1); a union value is ``{"long": 5}``, and a bare
  ``5`` is accepted too; a missing nullable field is null, a missing field with a default
  takes the default; an unknown field is refused (a misspelt ``transactionWritePointer``
  would otherwise publish outside the transaction). Message lists carry each id in hex
  too (``idHex``).
- ``json_codec("utf-8")``, ``json_codec("base64")``: the same, but payloads (a
  PublishRequest's messages, a Message's payload) are text stored as its UTF-8 bytes, or
  base64. A payload that is not UTF-8 is answered in base64 in a utf-8 list, flagged by
  its ``payloadEncoding``. Ids and encoded transactions stay Avro JSON bytes.

Every decoding failure raises ``BodyError`` naming the field and the type it expected.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from fastavro import parse_schema, schemaless_reader, schemaless_writer

AVRO_CONTENT_TYPE = "avro/binary"
JSON_CONTENT_TYPE = "application/json"

# The seed's schemas (tms-design-v2), record names without a namespace (the contract).
PUBLISH_REQUEST_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "PublishRequest",
    "fields": [
        {"name": "transactionWritePointer", "type": ["long", "null"]},
        {"name": "messages", "type": {"type": "array", "items": "bytes"}},
    ],
}
PUBLISH_RESPONSE_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "PublishResponse",
    "fields": [
        {"name": "transactionWritePointer", "type": ["long", "null"]},
        {"name": "startTimestamp", "type": "long"},
        {"name": "startSequenceId", "type": "int"},
        {"name": "endTimestamp", "type": "long"},
        {"name": "endSequenceId", "type": "int"},
    ],
}
CONSUME_REQUEST_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "ConsumeRequest",
    "fields": [
        {"name": "startFrom", "type": ["bytes", "long", "null"]},
        {"name": "inclusive", "type": "boolean", "default": True},
        {"name": "limit", "type": ["int", "null"]},
        {"name": "transaction", "type": ["bytes", "null"]},
    ],
}
MESSAGES_SCHEMA: dict[str, Any] = {
    "type": "array",
    "items": {
        "type": "record",
        "name": "Message",
        "fields": [{"name": "id", "type": "bytes"}, {"name": "payload", "type": "bytes"}],
    },
}

_PUBLISH_REQUEST = parse_schema(PUBLISH_REQUEST_SCHEMA)
_PUBLISH_RESPONSE = parse_schema(PUBLISH_RESPONSE_SCHEMA)
_CONSUME_REQUEST = parse_schema(CONSUME_REQUEST_SCHEMA)
_BYTES_ARRAY = parse_schema({"type": "array", "items": "bytes"})

LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1
INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1


class BodyError(ValueError):
    """A request body that does not decode; the message names the field and what it expected."""


class PublishRequest(NamedTuple):
    write_pointer: int | None
    messages: list[bytes]


class PublishResponse(NamedTuple):
    """What a transactional publish wrote; posting it back to rollback undoes exactly that."""

    write_pointer: int | None
    start_ts: int
    start_seq: int
    end_ts: int
    end_seq: int


class ConsumeRequest(NamedTuple):
    start_from: bytes | int | None = None  # a 20-byte message id, or a publish time in ms
    inclusive: bool = True
    limit: int | None = None
    transaction: bytes | None = None


Message = tuple[bytes, bytes]  # (id, payload)
# How JSON bodies carry payloads (?payload= of the HTTP API); avro: the seed's Avro JSON.
PAYLOAD_MODES = ("avro", "utf-8", "base64")


# --- Avro binary: strict readers of the scalar fields ---------------------------------------
class _Reader:
    """A position in a body; each read names the field it is for in its error."""

    __slots__ = ("buf", "pos", "record")

    def __init__(self, buf: bytes, record: str) -> None:
        self.buf = buf
        self.pos = 0
        self.record = record

    def fail(self, field: str, expected: str, problem: str) -> BodyError:
        return BodyError(f"{self.record}.{field}: expected {expected}, {problem}")

    def varint(self, field: str, expected: str, max_bytes: int) -> int:
        buf, pos = self.buf, self.pos
        shift = result = 0
        for i in range(max_bytes):
            if pos + i >= len(buf):
                raise self.fail(field, expected, f"the body ends at byte {len(buf)}")
            b = buf[pos + i]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                self.pos = pos + i + 1
                return (result >> 1) ^ -(result & 1)  # zigzag
            shift += 7
        raise self.fail(field, expected, f"a varint longer than {max_bytes} bytes at {pos}")

    def long(self, field: str, expected: str = "a long") -> int:
        value = self.varint(field, expected, 10)
        if not LONG_MIN <= value <= LONG_MAX:
            raise self.fail(field, expected, f"got {value}, outside 64 bits")
        return value

    def int(self, field: str, expected: str = "an int") -> int:
        value = self.varint(field, expected, 5)
        if not INT_MIN <= value <= INT_MAX:
            raise self.fail(field, expected, f"got {value}, outside 32 bits")
        return value

    def bytes(self, field: str, expected: str = "bytes") -> bytes:
        size = self.long(field, expected)
        start = self.pos
        if size < 0:
            raise self.fail(field, expected, f"a negative length {size}")
        if start + size > len(self.buf):
            raise self.fail(field, expected, f"{size} bytes but only {len(self.buf) - start} left")
        self.pos = start + size
        return self.buf[start : self.pos]

    def boolean(self, field: str) -> bool:
        if self.pos >= len(self.buf):
            raise self.fail(field, "a boolean", f"the body ends at byte {len(self.buf)}")
        b = self.buf[self.pos]
        if b > 1:
            raise self.fail(field, "a boolean", f"byte {b:#04x} is neither 0 nor 1")
        self.pos += 1
        return b == 1

    def branch(self, field: str, branches: tuple[str, ...]) -> str:
        expected = f"a union index of {list(branches)}"
        index = self.varint(field, expected, 10)
        if not 0 <= index < len(branches):
            raise self.fail(field, expected, f"got index {index}")
        return branches[index]

    def end(self) -> None:
        if self.pos != len(self.buf):
            extra = len(self.buf) - self.pos
            raise BodyError(f"{self.record}: {extra} bytes after the end of the record")


def _avro_bytes_array(r: _Reader, field: str) -> list[bytes]:
    """The array of messages: fastavro's compiled reader (the hot path of every publish)."""
    stream = io.BytesIO(r.buf)
    stream.seek(r.pos)
    try:
        items = schemaless_reader(stream, _BYTES_ARRAY, None)
    except Exception as exc:  # fastavro's errors vary (EOFError, IndexError, ...): all are ours
        detail = str(exc) or type(exc).__name__
        raise r.fail(field, "an array of bytes", f"it does not decode ({detail})") from None
    r.pos = stream.tell()
    return items  # type: ignore[no-any-return]


def _write(schema: Any, record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, schema, record)
    return out.getvalue()


def _zigzag(n: int) -> bytes:
    """Avro's long encoding of ``n`` (the poll answer's lengths)."""
    z = (n << 1) ^ (n >> 63)
    if z < 0x80:
        return _SMALL[z]
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_SMALL = [bytes((i,)) for i in range(0x80)]
_ID_LENGTH = _zigzag(20)  # every message id has 20 bytes


class AvroCodec:
    content_type = AVRO_CONTENT_TYPE

    # --- what the server decodes -----------------------------------------------------------
    @staticmethod
    def decode_publish_request(body: bytes) -> PublishRequest:
        r = _Reader(body, "PublishRequest")
        wp = None
        if r.branch("transactionWritePointer", ("long", "null")) == "long":
            wp = r.long("transactionWritePointer")
        messages = _avro_bytes_array(r, "messages")
        r.end()
        return PublishRequest(wp, messages)

    @staticmethod
    def decode_publish_response(body: bytes) -> PublishResponse:
        r = _Reader(body, "PublishResponse")
        wp = None
        if r.branch("transactionWritePointer", ("long", "null")) == "long":
            wp = r.long("transactionWritePointer")
        resp = PublishResponse(
            wp,
            r.long("startTimestamp"),
            r.int("startSequenceId"),
            r.long("endTimestamp"),
            r.int("endSequenceId"),
        )
        r.end()
        return resp

    @staticmethod
    def decode_consume_request(body: bytes) -> ConsumeRequest:
        r = _Reader(body, "ConsumeRequest")
        start: bytes | int | None = None
        kind = r.branch("startFrom", ("bytes", "long", "null"))
        if kind == "bytes":
            start = r.bytes("startFrom")
        elif kind == "long":
            start = r.long("startFrom")
        inclusive = r.boolean("inclusive")
        limit = r.int("limit") if r.branch("limit", ("int", "null")) == "int" else None
        tx = None
        if r.branch("transaction", ("bytes", "null")) == "bytes":
            tx = r.bytes("transaction")
        r.end()
        return ConsumeRequest(start, inclusive, limit, tx)

    # --- what the server encodes -----------------------------------------------------------
    @staticmethod
    def encode_publish_response(resp: PublishResponse) -> bytes:
        return _write(_PUBLISH_RESPONSE, _publish_response_record(resp))

    @staticmethod
    def encode_messages(messages: Iterable[Message]) -> bytes:
        """The poll answer. Written here rather than by fastavro, which wants a dict per
        message; a test holds it to fastavro's bytes."""
        parts = []
        count = 0
        for mid, payload in messages:
            parts += (_ID_LENGTH, mid, _zigzag(len(payload)), payload)
            count += 1
        if not count:
            return b"\x00"
        return b"".join((_zigzag(count), *parts, b"\x00"))

    # --- what a client encodes and decodes (the SDK, tests, docs) --------------------------
    @staticmethod
    def encode_publish_request(req: PublishRequest) -> bytes:
        record = {"transactionWritePointer": req.write_pointer, "messages": list(req.messages)}
        return _write(_PUBLISH_REQUEST, record)

    @staticmethod
    def encode_consume_request(req: ConsumeRequest) -> bytes:
        return _write(_CONSUME_REQUEST, _consume_request_record(req))

    @staticmethod
    def decode_messages(body: bytes) -> list[Message]:
        r = _Reader(body, "Message[]")
        out: list[Message] = []
        while True:
            count = r.long("items", "an array block count")
            if count == 0:
                break
            if count < 0:  # a block with its size in bytes after the count
                count = -count
                r.long("items", "an array block size")
            for _ in range(count):
                out.append((r.bytes("id"), r.bytes("payload")))
        r.end()
        return out


def _publish_response_record(resp: PublishResponse) -> dict[str, Any]:
    return {
        "transactionWritePointer": resp.write_pointer,
        "startTimestamp": resp.start_ts,
        "startSequenceId": resp.start_seq,
        "endTimestamp": resp.end_ts,
        "endSequenceId": resp.end_seq,
    }


def _consume_request_record(req: ConsumeRequest) -> dict[str, Any]:
    start: Any = req.start_from
    if isinstance(start, bytes):
        start = ("bytes", start)  # fastavro's explicit branch: bytes and long never mix up
    return {
        "startFrom": start,
        "inclusive": req.inclusive,
        "limit": req.limit,
        "transaction": req.transaction,
    }


# --- Avro JSON --------------------------------------------------------------------------------
def _loads(body: bytes, record: str) -> dict[str, Any]:
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise BodyError(f"{record}: the body is not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise BodyError(f"{record}: expected a JSON object, got {_json_type(doc)}")
    return doc


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


class _Fields:
    """A decoded JSON record: reads its fields and refuses the unknown ones."""

    __slots__ = ("doc", "record")

    def __init__(self, doc: dict[str, Any], record: str, names: tuple[str, ...]) -> None:
        unknown = sorted(set(doc) - set(names))
        if unknown:
            raise BodyError(f"{record}: unknown field {unknown[0]!r}; the fields are {list(names)}")
        self.doc = doc
        self.record = record

    def fail(self, field: str, expected: str, value: object) -> BodyError:
        return BodyError(f"{self.record}.{field}: expected {expected}, got {_json_type(value)}")

    def required(self, field: str, expected: str) -> Any:
        if field not in self.doc:
            raise BodyError(f"{self.record}.{field}: missing (expected {expected})")
        return self.doc[field]

    def long(self, field: str, value: object, bits: int = 64) -> int:
        expected = "a long" if bits == 64 else "an int"
        if type(value) is not int:  # bool is an int subclass, and not an Avro long
            raise self.fail(field, expected, value)
        bound = 1 << (bits - 1)
        if not -bound <= value < bound:
            raise BodyError(
                f"{self.record}.{field}: expected {expected}, {value} is outside {bits} bits"
            )
        return value

    def bytes(self, field: str, value: object) -> bytes:
        if type(value) is not str:
            raise self.fail(field, "bytes (a string of code points 0-255)", value)
        try:
            return value.encode("latin-1")
        except UnicodeEncodeError as exc:
            bad = ord(value[exc.start])
            raise BodyError(
                f"{self.record}.{field}: expected bytes (a string of code points 0-255), "
                f"found U+{bad:04X} at index {exc.start}"
            ) from None

    def text(self, field: str, value: object) -> bytes:
        """A payload given as text: its UTF-8 bytes."""
        if type(value) is not str:
            raise self.fail(field, "text (a string)", value)
        try:
            return value.encode()
        except UnicodeEncodeError as exc:  # JSON's "\ud800" escapes allow lone surrogates
            bad = ord(value[exc.start])
            raise BodyError(
                f"{self.record}.{field}: expected text, found the lone surrogate "
                f"U+{bad:04X} at index {exc.start} (not a character: no UTF-8 for it)"
            ) from None

    def base64(self, field: str, value: object) -> bytes:
        if type(value) is not str:
            raise self.fail(field, "base64 (a string)", value)
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise BodyError(
                f"{self.record}.{field}: expected base64 (A-Z a-z 0-9 + /, = padding): {exc}"
            ) from None

    def union(self, field: str, branches: tuple[str, ...]) -> tuple[str, object]:
        """-> (branch, value). Missing or null is the null branch (every union here has it);
        ``{"long": 5}`` names its branch; a bare value takes the branch its JSON type fits."""
        value = self.doc.get(field)
        if value is None:
            return "null", None
        if type(value) is dict:
            if len(value) != 1 or next(iter(value)) not in branches[:-1]:
                raise BodyError(
                    f"{self.record}.{field}: expected one of {list(branches)}, "
                    f"as a bare value or an object with one key of {list(branches[:-1])}; "
                    f"got an object with keys {sorted(value)[:5]}"
                )
            branch, inner = next(iter(value.items()))
            if inner is None:  # {"long": null}: a branch named, then no value in it
                raise BodyError(f"{self.record}.{field}: the {branch!r} branch needs a value")
            return branch, inner
        if type(value) is str and "bytes" in branches:
            return "bytes", value
        if type(value) is int:
            for number in ("long", "int"):
                if number in branches:
                    return number, value
        raise self.fail(field, f"one of {list(branches)}", value)


def _dumps(doc: object) -> bytes:
    # ensure_ascii=False: bytes 128-255 take two UTF-8 bytes rather than six of \u00XX.
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()


def _long_union(value: int | None) -> object:
    return None if value is None else {"long": value}


_ARRAY_OF = {
    "avro": "an array of bytes",
    "utf-8": "an array of text",
    "base64": "an array of base64",
}


def _utf8_or_base64(payload: bytes) -> tuple[str, str]:
    """-> (text, how): a utf-8 list answers bytes that are not UTF-8 in base64, flagged,
    rather than refusing the poll (a consumer could never get past such a message) or
    replacing bytes with U+FFFD (which would lose them without a trace)."""
    try:
        return payload.decode(), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(payload).decode("ascii"), "base64"


class JsonCodec:
    """Avro JSON; ``payload`` is how payloads are written (one of PAYLOAD_MODES)."""

    content_type = JSON_CONTENT_TYPE

    def __init__(self, payload: str = "avro") -> None:
        if payload not in PAYLOAD_MODES:
            raise ValueError(f"payload: expected one of {list(PAYLOAD_MODES)}, got {payload!r}")
        self.payload = payload
        self._read: Callable[[_Fields, str, object], bytes] = {
            "avro": _Fields.bytes,
            "utf-8": _Fields.text,
            "base64": _Fields.base64,
        }[payload]

    def __repr__(self) -> str:
        return f"JsonCodec(payload={self.payload!r})"

    def decode_publish_request(self, body: bytes) -> PublishRequest:
        f = _Fields(_loads(body, "PublishRequest"), "PublishRequest", _PUBLISH_REQUEST_FIELDS)
        _, wp = f.union("transactionWritePointer", ("long", "null"))
        if wp is not None:
            wp = f.long("transactionWritePointer", wp)
        expected = _ARRAY_OF[self.payload]
        raw = f.required("messages", expected)
        if type(raw) is not list:
            raise f.fail("messages", expected, raw)
        read = self._read
        messages = [read(f, f"messages[{i}]", m) for i, m in enumerate(raw)]
        return PublishRequest(wp, messages)

    @staticmethod
    def decode_publish_response(body: bytes) -> PublishResponse:
        f = _Fields(_loads(body, "PublishResponse"), "PublishResponse", _PUBLISH_RESPONSE_FIELDS)
        _, wp = f.union("transactionWritePointer", ("long", "null"))
        if wp is not None:
            wp = f.long("transactionWritePointer", wp)
        values = [
            f.long(name, f.required(name, expected), bits)
            for name, expected, bits in (
                ("startTimestamp", "a long", 64),
                ("startSequenceId", "an int", 32),
                ("endTimestamp", "a long", 64),
                ("endSequenceId", "an int", 32),
            )
        ]
        return PublishResponse(wp, *values)

    @staticmethod
    def decode_consume_request(body: bytes) -> ConsumeRequest:
        f = _Fields(_loads(body, "ConsumeRequest"), "ConsumeRequest", _CONSUME_REQUEST_FIELDS)
        kind, value = f.union("startFrom", ("bytes", "long", "null"))
        start: bytes | int | None = None
        if kind == "bytes":
            start = f.bytes("startFrom", value)
        elif kind == "long":
            start = f.long("startFrom", value)
        inclusive = f.doc.get("inclusive", True)
        if type(inclusive) is not bool:
            raise f.fail("inclusive", "a boolean", inclusive)
        kind, value = f.union("limit", ("int", "null"))
        limit = None if kind == "null" else f.long("limit", value, 32)
        kind, value = f.union("transaction", ("bytes", "null"))
        tx = None if kind == "null" else f.bytes("transaction", value)
        return ConsumeRequest(start, inclusive, limit, tx)

    @staticmethod
    def encode_publish_response(resp: PublishResponse) -> bytes:
        record = _publish_response_record(resp)
        record["transactionWritePointer"] = _long_union(resp.write_pointer)
        return _dumps(record)

    def encode_messages(self, messages: Iterable[Message]) -> bytes:
        if self.payload == "avro":
            return _dumps(
                [
                    {
                        "id": mid.decode("latin-1"),
                        "idHex": mid.hex(),
                        "payload": p.decode("latin-1"),
                    }
                    for mid, p in messages
                ]
            )
        out = []
        for mid, p in messages:
            if self.payload == "utf-8":
                text, how = _utf8_or_base64(p)
            else:
                text, how = base64.b64encode(p).decode("ascii"), "base64"
            out.append(
                {
                    "id": mid.decode("latin-1"),
                    "idHex": mid.hex(),
                    "payload": text,
                    "payloadEncoding": how,
                }
            )
        return _dumps(out)

    def encode_publish_request(self, req: PublishRequest) -> bytes:
        return _dumps(
            {
                "transactionWritePointer": _long_union(req.write_pointer),
                "messages": [self._write_payload(m) for m in req.messages],
            }
        )

    def _write_payload(self, payload: bytes) -> str:
        if self.payload == "avro":
            return payload.decode("latin-1")
        if self.payload == "utf-8":
            return payload.decode()  # UnicodeDecodeError: not text, say base64
        return base64.b64encode(payload).decode("ascii")

    @staticmethod
    def encode_consume_request(req: ConsumeRequest) -> bytes:
        start: object = None
        if isinstance(req.start_from, bytes):
            start = {"bytes": req.start_from.decode("latin-1")}
        elif req.start_from is not None:
            start = {"long": req.start_from}
        tx = req.transaction
        return _dumps(
            {
                "startFrom": start,
                "inclusive": req.inclusive,
                "limit": None if req.limit is None else {"int": req.limit},
                "transaction": None if tx is None else {"bytes": tx.decode("latin-1")},
            }
        )

    def decode_messages(self, body: bytes) -> list[Message]:
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise BodyError(f"Message[]: the body is not JSON ({exc})") from None
        if type(doc) is not list:
            raise BodyError(f"Message[]: expected an array, got {_json_type(doc)}")
        out = []
        for i, item in enumerate(doc):
            if type(item) is not dict:
                raise BodyError(f"Message[{i}]: expected an object, got {_json_type(item)}")
            f = _Fields(item, f"Message[{i}]", ("id", "idHex", "payload", "payloadEncoding"))
            how = item.get("payloadEncoding", self.payload)
            if type(how) is not str or how not in PAYLOAD_MODES:
                raise BodyError(
                    f"Message[{i}].payloadEncoding: expected one of {', '.join(PAYLOAD_MODES)}, "
                    f"got {_json_type(how)}"
                )
            read = {"utf-8": _Fields.text, "base64": _Fields.base64}.get(how, _Fields.bytes)
            out.append(
                (
                    f.bytes("id", f.required("id", "bytes")),
                    read(f, "payload", f.required("payload", "a payload")),
                )
            )
        return out


def _names(schema: dict[str, Any]) -> tuple[str, ...]:
    return tuple(field["name"] for field in schema["fields"])


_PUBLISH_REQUEST_FIELDS = _names(PUBLISH_REQUEST_SCHEMA)
_PUBLISH_RESPONSE_FIELDS = _names(PUBLISH_RESPONSE_SCHEMA)
_CONSUME_REQUEST_FIELDS = _names(CONSUME_REQUEST_SCHEMA)

AVRO = AvroCodec()
JSON = JsonCodec()
_JSON_BY_PAYLOAD = {"avro": JSON, "utf-8": JsonCodec("utf-8"), "base64": JsonCodec("base64")}
Codec = AvroCodec | JsonCodec
_BY_TYPE: dict[str, Codec] = {AVRO_CONTENT_TYPE: AVRO, JSON_CONTENT_TYPE: JSON}


def json_codec(payload: str = "avro") -> JsonCodec:
    """The JSON codec whose payloads are ``payload`` (one of PAYLOAD_MODES; else KeyError)."""
    return _JSON_BY_PAYLOAD[payload]


def media_type(header: str | None) -> str:
    """``Content-Type`` without parameters, lower case; a missing header means JSON."""
    if not header:
        return JSON_CONTENT_TYPE
    return header.partition(";")[0].strip().lower()


def codec_for(content_type: str | None) -> Codec | None:
    """The codec of a ``Content-Type`` header (parameters ignored), None if unsupported."""
    return _BY_TYPE.get(media_type(content_type))
