"""Requests built from kafka-python's schemas, for tests that cover every API and version.

``sample(api_key, version)`` fills every (untagged) field of the request with a small
valid value, one element per array. ``null_fields`` lists every field a null can be
written into (strings, bytes, arrays and their string elements, nullable structs),
with whether the schema allows the null at that version; ``with_null`` writes one.
Paths are tuples of attribute names and list indexes, e.g. ("topic_data", 0, "name").
``random_request`` fills the fields with random legal values (extreme ints, odd
strings, 0-3 elements per array, nulls where allowed), which decode but may mean
nothing; ``illegal_nulls`` is a slow reference of what protocol/_nulls.py refuses.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from typing import Any

from kafka.protocol.api_message import ApiMessage
from tmsgate.protocol import request_class, request_classes

Path = tuple[str | int, ...]
NULL_TYPES = frozenset({"string", "bytes", "records"})
# A few values that make the sample a request the gateway answers at once, not a
# long poll or a request without a response (acks=0).
_INTS = {
    "acks": -1,
    "timeout_ms": 1000,
    "max_wait_ms": 0,
    "session_timeout_ms": 10_000,
    "rebalance_timeout_ms": 10_000,
    "replica_id": -1,
    "generation_id": -1,
    "generation_id_or_member_epoch": -1,
    "producer_id": -1,
    "producer_epoch": -1,
    "num_partitions": 1,
    "replication_factor": 1,
    "timestamp": -1,
}
SAMPLE_UUID = uuid.UUID("5eed0000-0000-4000-8000-00000000f022")


@dataclass(frozen=True)
class NullField:
    path: Path
    nullable: bool

    @property
    def name(self) -> str:
        """As MalformedRequest names it: topic_data[0].name."""
        out = ""
        for part in self.path:
            out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else part
        return out


def _simple_value(field: Any, strings: str, records: bytes) -> Any:
    kind = field.type_str
    if kind.startswith("int") or kind == "uint16":
        return _INTS.get(field.name, 0)
    return {
        "string": strings,
        "bytes": strings.encode(),
        "records": records,
        "bool": False,
        "float64": 0.0,
        "uuid": SAMPLE_UUID,
    }[kind]


def _fill(struct: Any, version: int, strings: str, records: bytes) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for f in struct.untagged_fields(version):
        if f.is_struct_array():
            values[f.name] = [f.data_class(**_fill(f.array_of, version, strings, records))]
        elif f.is_struct():
            values[f.name] = f.data_class(**_fill(f, version, strings, records))
        elif f.is_array():
            values[f.name] = [_simple_value(f.array_of, strings, records)]
        else:
            values[f.name] = _simple_value(f, strings, records)
    return values


def sample(api_key: int, version: int, strings: str = "fz", records: bytes = b"") -> Any:
    """A request with every field of this version set (tagged fields left out)."""
    cls = request_class(api_key)
    assert cls is not None
    return cls(version=version, **_fill(cls._struct, version, strings, records))


def _null_fields(struct: Any, version: int, prefix: Path) -> list[NullField]:
    out = []
    for f in struct.untagged_fields(version):
        path = (*prefix, f.name)
        nullable = f.nullable_for_version_q(version)
        if f.is_struct_array():
            out.append(NullField(path, nullable))
            out += _null_fields(f.array_of, version, (*path, 0))
        elif f.is_struct():
            if nullable:  # a non-nullable struct has no null marker on the wire
                out.append(NullField(path, True))
            out += _null_fields(f, version, path)
        elif f.is_array():
            out.append(NullField(path, nullable))
            if f.array_of.type_str in NULL_TYPES:
                out.append(NullField((*path, 0), False))  # array elements never are
        elif f.type_str in NULL_TYPES:
            out.append(NullField(path, nullable))
    return out


def null_fields(api_key: int, version: int) -> list[NullField]:
    cls = request_class(api_key)
    assert cls is not None
    return _null_fields(cls._struct, version, ())


def get(obj: Any, path: Path) -> Any:
    for part in path:
        obj = obj[part] if isinstance(part, int) else getattr(obj, part)
    return obj


def with_null(request: Any, path: Path) -> Any:
    """Set the field at path (in place) to None; returns the request."""
    parent, last = get(request, path[:-1]), path[-1]
    if isinstance(last, int):
        parent[last] = None
    else:
        setattr(parent, last, None)
    return request


def encode(request: Any, version: int, correlation_id: int = 7, framed: bool = False) -> bytes:
    """Header and body (with the length prefix if framed), exactly as the fields are set
    (the generic encoder: MetadataRequest's own would send a null v0 topic list as [])."""
    request.with_header(correlation_id=correlation_id, client_id="fz")
    return bytes(ApiMessage.encode(request, version=version, header=True, framed=framed))


def all_versions() -> list[tuple[int, int]]:
    """(api_key, version) for every request kafka-python (so decode_request) decodes."""
    out = []
    for key, cls in sorted(request_classes().items()):
        low, high = cls.valid_versions
        out += [(key, v) for v in range(low, high + 1)]
    return out


def illegal_nulls(body: Any, struct: Any, version: int, prefix: Path = ()) -> list[Path]:
    """Every null in a decoded request where the schema allows none (a slow reference
    for protocol/_nulls.py: walks every field of every element)."""
    out: list[Path] = []
    for f in struct.untagged_fields(version):
        path, value = (*prefix, f.name), getattr(body, f.name)
        if value is None:
            may_be_null = f.nullable_for_version_q(version) or not (
                f.is_array() or f.is_struct() or f.type_str in NULL_TYPES
            )
            if not may_be_null:
                out.append(path)
        elif f.is_struct_array():
            for i, item in enumerate(value):
                out += illegal_nulls(item, f.array_of, version, (*path, i))
        elif f.is_struct():
            out += illegal_nulls(value, f, version, path)
        elif f.is_array() and f.array_of.type_str in NULL_TYPES:
            out += [(*path, i) for i, item in enumerate(value) if item is None]
    return out


INT_RANGES = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "uint16": (0, (1 << 16) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
}
STRINGS = ["", "fz", "*", ".", "..", "-", "fz" * 200, "\u00e9t\u00e9", "a/b", " ", "\x00"]


def _random_simple(rng: random.Random, kind: str, records: bytes) -> Any:
    if kind in INT_RANGES:
        low, high = INT_RANGES[kind]
        return rng.choice([0, -1, 1, 2, low, high, rng.randint(low, high), rng.randint(-5, 100)])
    if kind == "string":
        return rng.choice([*STRINGS, "".join(rng.choices("abz-._*", k=rng.randint(1, 8)))])
    if kind == "bytes":
        return rng.choice([b"", b"\x00", rng.randbytes(rng.randint(1, 40))])
    if kind == "records":
        return rng.choice(
            [b"", records, records[: rng.randrange(len(records) + 1)], rng.randbytes(70)]
        )
    if kind == "uuid":
        # The zero UUID (reads as None) is "no topic id" to Kafka.
        return rng.choice([SAMPLE_UUID, uuid.UUID(int=0), uuid.UUID(int=rng.getrandbits(128))])
    return {"bool": rng.random() < 0.5, "float64": rng.choice([0.0, -1.0, 1e300])}[kind]


def _random_fill(rng: random.Random, struct: Any, version: int, records: bytes) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for f in struct.untagged_fields(version):
        n = rng.choice([0, 1, 1, 2, 3])
        if f.is_struct_array():
            make = f.data_class
            values[f.name] = [
                make(**_random_fill(rng, f.array_of, version, records)) for _ in range(n)
            ]
        elif f.is_struct():
            values[f.name] = f.data_class(**_random_fill(rng, f, version, records))
        elif f.is_array():
            values[f.name] = [_random_simple(rng, f.array_of.type_str, records) for _ in range(n)]
        else:
            values[f.name] = _random_simple(rng, f.type_str, records)
        if f.nullable_for_version_q(version) and rng.random() < 0.2:
            values[f.name] = None
    return values


def random_request(rng: random.Random, api_key: int, version: int, records: bytes = b"") -> Any:
    """A request of this version whose every field holds a random legal value."""
    cls = request_class(api_key)
    assert cls is not None
    return cls(version=version, **_random_fill(rng, cls._struct, version, records))
