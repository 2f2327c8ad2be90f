"""The opaque ``meta`` bytes the store keeps beside a payload for Kafka-only data.

A Kafka record has a key, headers and a client timestamp that the TMS data model
does not know about. They travel in one small blob per message:

    version u8 (=1) | flags u8 | [timestamp i64] | [key u32 len, bytes] |
    [header count u16, then per header: key u16 len, UTF-8 | value i32 len (-1 null), bytes]

flags: 1 = timestamp present, 2 = key present, 4 = headers present. Absent parts
cost nothing, and a message published over HTTP simply has no meta: no key, no
headers, its timestamp is the publish time. A null value is not encoded here; the
store keeps payload None itself.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence

from ._errors import InvalidRecords, MalformedMeta

VERSION = 1
HAS_TIMESTAMP = 1
HAS_KEY = 2
HAS_HEADERS = 4
_PREFIX = struct.Struct(">BB")
_PREFIX_TS = struct.Struct(">BBq")
_U32 = struct.Struct(">I")
_TS_KEY = struct.Struct(">qI")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

Header = tuple[str, bytes | None]

# pack_timestamp_meta(ts) == encode_meta(None, [], ts) for ts >= 0: the meta of nearly
# every produced record, as one C call (produce runs it once per record).
pack_timestamp_meta = functools.partial(_PREFIX_TS.pack, VERSION, HAS_TIMESTAMP)


def encode_meta(
    key: bytes | None, headers: Sequence[Header], timestamp: int | None
) -> bytes | None:
    """-> the blob, or None when there is nothing to keep."""
    flags = 0
    if timestamp is not None and timestamp >= 0:
        flags |= HAS_TIMESTAMP
    if key is not None:
        flags |= HAS_KEY
    if headers:
        flags |= HAS_HEADERS
    if not flags:
        return None
    if flags == HAS_TIMESTAMP:  # the common case: a value with a client timestamp
        return _PREFIX_TS.pack(VERSION, flags, timestamp)
    parts = [
        _PREFIX_TS.pack(VERSION, flags, timestamp)
        if flags & HAS_TIMESTAMP
        else _PREFIX.pack(VERSION, flags)
    ]
    if key is not None:
        parts += (_U32.pack(len(key)), key)
    if headers:
        if len(headers) > 0xFFFF:
            raise InvalidRecords(f"{len(headers)} headers are more than a record may keep")
        parts.append(_U16.pack(len(headers)))
        for name, value in headers:
            raw_name = name.encode("utf-8")
            if len(raw_name) > 0xFFFF:
                raise InvalidRecords("a header name is longer than 65535 bytes")
            parts += (_U16.pack(len(raw_name)), raw_name)
            if value is None:
                parts.append(_I32.pack(-1))
            else:
                parts += (_I32.pack(len(value)), value)
    return b"".join(parts)


def decode_meta(meta: bytes | None) -> tuple[bytes | None, list[Header], int | None]:
    """-> (key, headers, client timestamp or None). Raises MalformedMeta."""
    if not meta:
        return None, [], None
    # Fast paths for what nearly every record is (fetch decodes one per message):
    # a timestamp, with or without a key, no headers.
    size = len(meta)
    if size >= 10 and meta[0] == VERSION:
        flags = meta[1]
        if flags == HAS_TIMESTAMP and size == 10:
            return None, [], _PREFIX_TS.unpack_from(meta, 0)[2]
        if flags == HAS_TIMESTAMP | HAS_KEY and size >= 14:
            timestamp, key_size = _TS_KEY.unpack_from(meta, 2)
            if size == 14 + key_size:
                return meta[14:], [], timestamp
    try:
        return _decode(memoryview(meta))
    except (struct.error, UnicodeDecodeError, IndexError) as exc:
        raise MalformedMeta(f"Kafka meta does not decode: {exc}") from exc


def meta_timestamp(meta: bytes | None) -> int | None:
    """Just the client timestamp, without decoding key and headers (time lookups)."""
    if meta and len(meta) >= 10 and meta[0] == VERSION and meta[1] & HAS_TIMESTAMP:
        return int(_I64.unpack_from(meta, 2)[0])
    return None


def _take(view: memoryview, pos: int, size: int) -> tuple[bytes, int]:
    end = pos + size
    if end > len(view):
        raise MalformedMeta("Kafka meta is truncated")
    return bytes(view[pos:end]), end


def _decode(view: memoryview) -> tuple[bytes | None, list[Header], int | None]:
    version, flags = _PREFIX.unpack_from(view, 0)
    if version != VERSION:
        raise MalformedMeta(f"unknown Kafka meta version {version}")
    pos = _PREFIX.size
    timestamp = key = None
    headers: list[Header] = []
    if flags & HAS_TIMESTAMP:
        (timestamp,) = _I64.unpack_from(view, pos)
        pos += 8
    if flags & HAS_KEY:
        (size,) = _U32.unpack_from(view, pos)
        key, pos = _take(view, pos + 4, size)
    if flags & HAS_HEADERS:
        (count,) = _U16.unpack_from(view, pos)
        pos += 2
        for _ in range(count):
            (size,) = _U16.unpack_from(view, pos)
            raw_name, pos = _take(view, pos + 2, size)
            (size,) = _I32.unpack_from(view, pos)
            pos += 4
            value = None
            if size >= 0:
                value, pos = _take(view, pos, size)
            headers.append((raw_name.decode("utf-8"), value))
    if pos != len(view):
        raise MalformedMeta(f"{len(view) - pos} unexpected bytes after Kafka meta")
    return key, headers, timestamp
