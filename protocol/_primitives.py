"""Kafka's primitive wire types, for the responses encoded directly: lengths of arrays
and strings (int32/int16, or unsigned varint n + 1 in flexible versions) and tags."""

from __future__ import annotations

import struct

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
EMPTY_TAGS = b"\x00"  # a flexible structure without tagged fields
_ONE_BYTE = [bytes((n,)) for n in range(0x80)]


def uvarint(n: int) -> bytes:
    if n < 0x80:
        return _ONE_BYTE[n]  # nearly every length in a response
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def length(n: int, flexible: bool) -> bytes:
    """An array's or bytes field's length: compact (n + 1, unsigned varint) when flexible."""
    return uvarint(n + 1) if flexible else _I32.pack(n)


def null_length(flexible: bool) -> bytes:
    """A null array or bytes field: length -1, or compact 0 when flexible."""
    return b"\x00" if flexible else b"\xff\xff\xff\xff"


def string(value: str | None, flexible: bool) -> bytes:
    """A (nullable) string: int16 length, or compact length when flexible."""
    if value is None:
        return b"\x00" if flexible else b"\xff\xff"
    raw = value.encode()
    return (uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw))) + raw
