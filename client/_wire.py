"""Bodies of the TMS HTTP API, both encodings, no I/O.

The schemas are the seed's (tms-design-v2), kept here rather than imported from the
server so the SDK depends only on what the API publishes. Avro bodies are schemaless
binary (fastavro); JSON bodies are Avro's JSON encoding, where bytes travel as strings
whose code points 0-255 are the bytes (ISO-8859-1) and a union value is ``{"long": 5}``.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer


class Encoding(StrEnum):
    """The body encoding of publish, store, rollback and poll (the Content-Type)."""

    AVRO = "avro/binary"
    JSON = "application/json"


PUBLISH_REQUEST = parse_schema(
    {
        "type": "record",
        "name": "PublishRequest",
        "fields": [
            {"name": "transactionWritePointer", "type": ["long", "null"]},
            {"name": "messages", "type": {"type": "array", "items": "bytes"}},
        ],
    }
)
PUBLISH_RESPONSE = parse_schema(
    {
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
)
CONSUME_REQUEST = parse_schema(
    {
        "type": "record",
        "name": "ConsumeRequest",
        "fields": [
            {"name": "startFrom", "type": ["bytes", "long", "null"]},
            {"name": "inclusive", "type": "boolean", "default": True},
            {"name": "limit", "type": ["int", "null"]},
            {"name": "transaction", "type": ["bytes", "null"]},
        ],
    }
)
MESSAGE_LIST = parse_schema(
    {
        "type": "array",
        "items": {
            "type": "record",
            "name": "Message",
            "fields": [{"name": "id", "type": "bytes"}, {"name": "payload", "type": "bytes"}],
        },
    }
)


def _avro(schema: Any, datum: Any) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, schema, datum)
    return out.getvalue()


def _from_avro(schema: Any, body: bytes) -> Any:
    return schemaless_reader(io.BytesIO(body), schema, None)


def _text(data: bytes) -> str:
    return data.decode("latin-1")


def _raw(text: str) -> bytes:
    # A code point above 255 is not a byte: latin-1 refuses it, which is what we want.
    return text.encode("latin-1")


def _union(value: Any, branch: str) -> Any:
    return None if value is None else {branch: value}


def _unwrap(value: Any) -> Any:
    """A union value in Avro JSON is {"type": value}; servers may also send it bare."""
    if isinstance(value, dict) and len(value) == 1:
        return next(iter(value.values()))
    return value


# --- requests ------------------------------------------------------------------------------
def publish_request(
    encoding: Encoding, write_pointer: int | None, messages: Sequence[bytes]
) -> bytes:
    if encoding is Encoding.AVRO:
        return _avro(
            PUBLISH_REQUEST,
            {"transactionWritePointer": write_pointer, "messages": list(messages)},
        )
    body = {
        "transactionWritePointer": _union(write_pointer, "long"),
        "messages": [_text(m) for m in messages],
    }
    return json.dumps(body).encode()


def consume_request(
    encoding: Encoding,
    start_from: bytes | int | None,
    inclusive: bool,
    limit: int | None,
    transaction: bytes | None,
) -> bytes:
    if encoding is Encoding.AVRO:
        return _avro(
            CONSUME_REQUEST,
            {
                "startFrom": start_from,
                "inclusive": inclusive,
                "limit": limit,
                "transaction": transaction,
            },
        )
    start: Any = None
    if isinstance(start_from, bytes):
        start = {"bytes": _text(start_from)}
    elif start_from is not None:
        start = {"long": start_from}
    body = {
        "startFrom": start,
        "inclusive": inclusive,
        "limit": _union(limit, "int"),
        "transaction": _union(None if transaction is None else _text(transaction), "bytes"),
    }
    return json.dumps(body).encode()


# --- responses -----------------------------------------------------------------------------
def publish_response(encoding: Encoding, body: bytes) -> dict[str, Any]:
    """The PublishResponse fields (the SDK keeps the raw bytes for rollback regardless)."""
    if encoding is Encoding.AVRO:
        return dict(_from_avro(PUBLISH_RESPONSE, body))
    return {k: _unwrap(v) for k, v in json.loads(body).items()}


def message_list(encoding: Encoding, body: bytes) -> list[tuple[bytes, bytes]]:
    if encoding is Encoding.AVRO:
        return [(m["id"], m["payload"]) for m in _from_avro(MESSAGE_LIST, body)]
    return [(_raw(m["id"]), _raw(m["payload"])) for m in json.loads(body)]


def latin1_bytes(text: str) -> bytes:
    """Bytes carried in a JSON string (the ``encoded`` field of a transaction)."""
    return _raw(text)


# --- the transaction codec (contract: version 1, then big-endian fields) --------------------
_TX_HEAD = struct.Struct(">bqqI")
_COUNT = struct.Struct(">I")
TX_CODEC_VERSION = 1


def decode_transaction(data: bytes) -> tuple[int, int, tuple[int, ...], tuple[int, ...]]:
    """-> (write pointer, read pointer, in progress, invalid); ValueError if malformed."""
    try:
        version, wp, rp, n_progress = _TX_HEAD.unpack_from(data, 0)
        if version != TX_CODEC_VERSION:
            raise ValueError(f"unknown transaction codec version {version}")
        pos = _TX_HEAD.size
        in_progress = struct.unpack_from(f">{n_progress}q", data, pos)
        pos += 8 * n_progress
        (n_invalid,) = _COUNT.unpack_from(data, pos)
        pos += _COUNT.size
        invalid = struct.unpack_from(f">{n_invalid}q", data, pos)
        pos += 8 * n_invalid
    except struct.error as exc:
        raise ValueError(f"truncated transaction bytes: {exc}") from None
    if pos != len(data):
        raise ValueError(f"{len(data) - pos} bytes after the transaction")
    return wp, rp, in_progress, invalid


def encode_transaction(
    write_pointer: int, read_pointer: int, in_progress: Sequence[int], invalid: Sequence[int]
) -> bytes:
    return b"".join(
        [
            _TX_HEAD.pack(TX_CODEC_VERSION, write_pointer, read_pointer, len(in_progress)),
            struct.pack(f">{len(in_progress)}q", *in_progress),
            _COUNT.pack(len(invalid)),
            struct.pack(f">{len(invalid)}q", *invalid),
        ]
    )
