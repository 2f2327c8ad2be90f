"""Record batches (message format v2): decode what producers send, build what consumers read.

Decoding and building use aiokafka's compiled codec (about 15x kafka-python's pure
Python one). The batch framing and the header fields we rewrite (base offset, last
offset delta, timestamp type) are handled here with struct, per the layout in
Kafka's DefaultRecordBatch.java:

    0 BaseOffset i64 | 8 Length i32 | 12 PartitionLeaderEpoch i32 | 16 Magic i8 |
    17 CRC u32 | 21 Attributes i16 | 23 LastOffsetDelta i32 | 27 BaseTimestamp i64 |
    35 MaxTimestamp i64 | 43 ProducerId i64 | 51 ProducerEpoch i16 |
    53 BaseSequence i32 | 57 RecordCount i32 | 61 records...

The CRC covers bytes 21 to the end, so rewriting the base offset or the leader
epoch does not touch it.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from aiokafka.record.default_records import DefaultRecordBatch
from crc32c import crc32c

from ._errors import CorruptRecords, InvalidRecords, UnsupportedMessageFormat
from ._meta import encode_meta, pack_timestamp_meta

BATCH_OVERHEAD = 61
LOG_OVERHEAD = 12  # base offset + length: the part not counted in Length
_HEADER = struct.Struct(">qiibIhiqqqhii")
_LENGTH_MAGIC = struct.Struct(">i4xb")  # Length, (leader epoch), Magic at offset 8
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
COMPRESSION_MASK = 0x07
NO_LEADER_EPOCH = -1


@dataclass(slots=True)
class ProducedBatch:
    """One v2 batch from a Produce request, CRC-checked and decompressed."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_offset_delta: int
    attributes: int
    max_timestamp: int
    size: int
    records: list[Any]  # aiokafka records: .offset .timestamp .key .value .headers
    raw: memoryview | bytes = b""  # the batch as sent (a view into the request)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def compression_type(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_idempotent(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record; sequences wrap at 2**31 like Kafka's."""
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)


def split_batches(raw: bytes | memoryview) -> list[memoryview]:
    """Cut a records field into its batches; refuses trailing or truncated bytes."""
    view = memoryview(raw)
    out: list[memoryview] = []
    pos = 0
    end = len(view)
    while pos < end:
        if end - pos < LOG_OVERHEAD + 5:
            raise CorruptRecords(f"{end - pos} trailing bytes are not a record batch")
        length, magic = _LENGTH_MAGIC.unpack_from(view, pos + 8)
        total = LOG_OVERHEAD + length
        if length < 5 or pos + total > end:
            raise CorruptRecords(f"record batch length {length} does not fit the request")
        if magic != 2:
            raise UnsupportedMessageFormat(
                f"message format v{magic} is not accepted; Produce v3+ carries v2 batches"
            )
        if total < BATCH_OVERHEAD:
            raise CorruptRecords(f"record batch of {total} bytes is shorter than its header")
        out.append(view[pos : pos + total])
        pos += total
    return out


_CRC = struct.Struct(">I")
_CRC_AT = 17  # base offset 8, length 4, leader epoch 4, magic 1
_CRC_FROM = 21


def decode_batch(raw: memoryview | bytes, *, exact: bool = False) -> ProducedBatch:
    """Validate and decode one v2 batch the way Kafka's LogValidator would.

    ``exact``: a batch copied from another cluster with its offsets (tmsgate migrate):
    as a fetched batch may be, its records may skip offsets (compaction, transaction
    markers) and it may hold none, spanning only its base to last offset delta (or
    nothing, with delta -1: where a copied partition's log starts)."""
    fields = _HEADER.unpack_from(raw, 0)
    attributes, last_offset_delta, max_ts = fields[5], fields[6], fields[8]
    producer_id, producer_epoch, base_sequence, count = fields[9:13]
    if attributes & CONTROL_BIT:
        raise InvalidRecords("clients may not produce control batches")
    if attributes & COMPRESSION_MASK > 4:
        raise CorruptRecords(f"unknown compression type {attributes & COMPRESSION_MASK}")
    # The crc32c package (hardware CRC, GIL released) is ~14x faster than the codec's own
    # check on a 1 MB batch; the CRC covers everything from the attributes on.
    if crc32c(memoryview(raw)[_CRC_FROM:]) != _CRC.unpack_from(raw, _CRC_AT)[0]:
        raise CorruptRecords("record batch CRC does not match its contents")
    batch = DefaultRecordBatch(raw)  # a memoryview slice: no copy of the batch
    if exact:
        # No records and delta -1: an empty span, where a copied partition starts.
        if count < 0 or last_offset_delta < count - 1:
            raise InvalidRecords(
                f"batch has {count} records but last offset delta {last_offset_delta}"
            )
    elif count <= 0 or last_offset_delta != count - 1:
        raise InvalidRecords(f"batch has {count} records but last offset delta {last_offset_delta}")
    try:
        records = list(batch)
    except Exception as exc:  # codec errors come in many types (zstd, lz4, gzip, ...)
        raise CorruptRecords(f"records do not decode: {type(exc).__name__}: {exc}") from exc
    if len(records) != count:
        raise CorruptRecords(f"batch declares {count} records but holds {len(records)}")
    base = fields[0]
    if exact:
        offsets = [r.offset for r in records]
        if offsets and (
            offsets[0] < base
            or offsets[-1] > base + last_offset_delta
            or any(a >= b for a, b in itertools.pairwise(offsets))
        ):
            raise InvalidRecords("record offsets must increase within the batch's span")
    elif [r.offset for r in records] != list(range(base, base + count)):
        raise InvalidRecords("record offsets in the batch are not consecutive from 0")
    return ProducedBatch(
        producer_id,
        producer_epoch,
        base_sequence,
        last_offset_delta,
        attributes,
        max_ts,
        len(raw),
        records,
        raw,
    )


def batch_messages(raw: bytes | memoryview) -> list[tuple[bytes | None, bytes | None, None]]:
    """The store's (payload, meta, ttl) of each record of a v2 batch kept as it was
    produced (a MessageTable row holding a Kafka batch, storage keys.F_KAFKA_BATCH): what
    Produce stores per record otherwise (gateway records.to_entries; such a batch has no
    tms.tx.write_pointer header), built when a reader other than a Kafka fetch wants the
    messages. Raises CorruptRecords if the records do not decode."""
    return list(iter_batch_messages(raw))


def iter_batch_messages(
    raw: bytes | memoryview, skip: int = 0
) -> Iterator[tuple[bytes | None, bytes | None, None]]:
    """batch_messages lazily, from record ``skip`` on: a reader that wants a few records
    of a large batch builds the meta of those only (the ones before are parsed, in C, and
    passed over), and stops decoding where it stops reading."""
    for key, value, headers, ts in itertools.islice(iter_batch_records(raw), skip, None):
        if key is None and not headers and ts >= 0:
            yield value, pack_timestamp_meta(ts), None
        else:
            yield value, encode_meta(key, headers, ts), None


def iter_batch_records(
    raw: bytes | memoryview,
) -> Iterator[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]]:
    """(key, value, headers, timestamp) of each record of a v2 batch kept as produced;
    raises CorruptRecords if the records do not decode."""
    try:
        for rec in DefaultRecordBatch(raw):
            yield rec.key, rec.value, rec.headers, rec.timestamp
    except Exception as exc:  # codec errors come in many types (zstd, lz4, gzip, ...)
        raise CorruptRecords(f"stored batch does not decode: {type(exc).__name__}: {exc}") from exc


def batch_keys(raw: bytes | memoryview) -> tuple[list[bytes | None], list[int]]:
    """The key of each record of a v2 batch kept as produced, and the indices of the
    records whose value is null: all log compaction needs of most batches, without a
    tuple per record (half the cost of ``iter_batch_records``). Raises CorruptRecords if
    the records do not decode."""
    found: list[bytes | None] = []
    nulls: list[int] = []
    append = found.append
    try:
        for rec in DefaultRecordBatch(raw):
            append(rec.key)
            if rec.value is None:
                nulls.append(len(found) - 1)
    except Exception as exc:  # codec errors come in many types (zstd, lz4, gzip, ...)
        raise CorruptRecords(f"stored batch does not decode: {type(exc).__name__}: {exc}") from exc
    return found, nulls


def decode_records(raw: bytes | memoryview | None) -> list[ProducedBatch]:
    """Every batch of a Produce partition's records field."""
    if raw is None:
        return []
    return [decode_batch(view) for view in split_batches(raw)]


class FetchRecord(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


# A record for build_batch: FetchRecord's fields, as a FetchRecord or a plain tuple (the
# fetch path builds plain ones: a NamedTuple's constructor costs a call per record).
RecordFields = tuple[int, int, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]


def build_batch(
    records: Sequence[RecordFields],
    *,
    last_offset: int | None = None,
    log_append_time: int | None = None,
) -> bytearray:
    """One uncompressed v2 batch holding ``records`` (ascending offsets, gaps allowed).

    ``last_offset`` beyond the last record makes the batch span skipped offsets, so
    a consumer continues after them (Kafka keeps lastOffsetDelta through compaction
    for the same reason). ``log_append_time`` marks the batch LogAppendTime: clients
    then give every record the batch's max timestamp.

    Encoded here rather than with aiokafka's DefaultRecordBatchBuilder, whose bytes it
    matches exactly (tests/test_protocol_records.py): every record a fetch serves from the
    store passes through this loop, and on the 2-core VM of docs/benchmarks.md the
    builder's append cost 2.7 us per 1 KiB record against 1.2-1.9 us here (1,000-record
    batches). The records go into one buffer, which is returned as it is: there, backing
    fresh memory costs more than writing it, so every further copy of a 1 MB batch (a
    join, bytes() of the buffer) would add a few tenths of a microsecond per record."""
    if not records:
        raise ValueError("use empty_batch() for a batch without records")
    base, first_ts = records[0][0], records[0][1]
    max_ts = first_ts
    varints, known = _VARINTS, len(_VARINTS)
    buf = bytearray(BATCH_OVERHEAD)
    for offset, ts, key, value, headers in records:
        if ts > max_ts:
            max_ts = ts
        delta, gap = ts - first_ts, offset - base
        stamp = varints[delta] if 0 <= delta < known else _zigzag(delta)
        place = varints[gap] if gap < known else _zigzag(gap)
        if key is None:
            key_len, key = b"\x01", b""  # length -1: null
        else:
            n = len(key)
            key_len = varints[n] if n < known else _zigzag(n)
        if value is None:
            value_len, value = b"\x01", b""
        else:
            n = len(value)
            value_len = varints[n] if n < known else _zigzag(n)
        tail = _NO_HEADERS if not headers else _headers(headers)
        size = (
            1 + len(stamp) + len(place) + len(key_len) + len(key) + len(value_len) + len(value)
        ) + len(tail)
        buf += varints[size] if size < known else _zigzag(size)
        buf += b"\x00"  # attributes
        buf += stamp
        buf += place
        buf += key_len
        buf += key
        buf += value_len
        buf += value
        buf += tail
    attributes = 0
    if log_append_time is not None:
        attributes, max_ts = TIMESTAMP_TYPE_BIT, log_append_time
    last = records[-1][0] if last_offset is None else last_offset
    _HEADER.pack_into(
        buf,
        0,
        base,
        len(buf) - LOG_OVERHEAD,
        NO_LEADER_EPOCH,
        2,
        0,
        attributes,
        last - base,
        first_ts,
        max_ts,
        -1,
        -1,
        -1,
        len(records),
    )
    _U32.pack_into(buf, 17, crc32c(memoryview(buf)[21:]))
    return buf


def _headers(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    out = [_zigzag(len(headers))]
    for name, value in headers:
        raw = name.encode("utf-8")
        out += (_zigzag(len(raw)), raw)
        if value is None:
            out.append(b"\x01")
        else:
            out += (_zigzag(len(value)), value)
    return b"".join(out)


def empty_batch(base_offset: int, last_offset: int, timestamp: int = -1) -> bytes:
    """A batch with no records spanning [base_offset, last_offset] (as compaction
    leaves behind). kafka-python, aiokafka and Java continue at its next offset, but
    librdkafka treats a fetch of only empty batches as "max bytes too small" and
    eventually reports an error, so fetches use skip_batch() instead."""
    buf = bytearray(BATCH_OVERHEAD)
    _HEADER.pack_into(
        buf,
        0,
        base_offset,
        BATCH_OVERHEAD - LOG_OVERHEAD,
        NO_LEADER_EPOCH,
        2,
        0,
        0,
        last_offset - base_offset,
        timestamp,
        timestamp,
        -1,
        -1,
        -1,
        0,
    )
    _U32.pack_into(buf, 17, crc32c(memoryview(buf)[21:]))
    return bytes(buf)


def _zigzag(value: int) -> bytes:
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_NO_HEADERS = b"\x00"  # a record's header count 0
# Zigzag varints of 0..16383: deltas, key and value lengths of a fetch's records
# (values of up to 16 KiB) come from here instead of a loop per number.
_VARINTS = tuple(_zigzag(i) for i in range(1 << 14))

# Control record: key = version 0, type 1 (COMMIT); value = version 0, coordinator epoch 0
_COMMIT_KEY = struct.pack(">hh", 0, 1)
_COMMIT_VALUE = struct.pack(">hi", 0, 0)


def skip_batch(base_offset: int, last_offset: int, timestamp: int = 0) -> bytes:
    """A control batch holding one COMMIT marker at ``last_offset``: every client skips
    control batches in every isolation level and continues after them (librdkafka
    also moves the application's position there), so a fetch over offsets that hold
    nothing visible (rolled back, invalid) moves the consumer past them.

    Producer id -1: no client then relates the marker to a Kafka transaction."""
    delta = last_offset - base_offset
    body = (
        b"\x00"
        + _zigzag(0)
        + _zigzag(delta)
        + _zigzag(len(_COMMIT_KEY))
        + _COMMIT_KEY
        + _zigzag(len(_COMMIT_VALUE))
        + _COMMIT_VALUE
        + _zigzag(0)
    )
    record = _zigzag(len(body)) + body
    buf = bytearray(BATCH_OVERHEAD) + record
    _HEADER.pack_into(
        buf,
        0,
        base_offset,
        len(buf) - LOG_OVERHEAD,
        NO_LEADER_EPOCH,
        2,
        0,
        CONTROL_BIT | TRANSACTIONAL_BIT,
        delta,
        timestamp,
        timestamp,
        -1,
        -1,
        -1,
        1,
    )
    _U32.pack_into(buf, 17, crc32c(memoryview(buf)[21:]))
    return bytes(buf)


SERVED_HEAD = 16  # a stored batch's bytes a fetch replaces: base offset, length, epoch
_SERVED_HEAD = struct.Struct(">qii")


def served_head(base_offset: int, batch: bytes | memoryview) -> bytes:
    """The first SERVED_HEAD bytes of a stored v2 batch as a fetch sends it, the rest
    following as stored: the store's base offset, the batch's length, and leader epoch
    -1, the epoch tmsgate reports everywhere (producers send 0 or -1; Kafka writes its
    leader's). The CRC covers neither field."""
    return _SERVED_HEAD.pack(base_offset, len(batch) - LOG_OVERHEAD, NO_LEADER_EPOCH)


def batch_base_offset(raw: bytes | memoryview) -> int:
    return _I64.unpack_from(raw, 0)[0]


def batch_next_offset(raw: bytes | memoryview) -> int:
    """base offset + last offset delta + 1 of a v2 batch."""
    base = _I64.unpack_from(raw, 0)[0]
    lod = _I32.unpack_from(raw, 23)[0]
    return base + lod + 1
