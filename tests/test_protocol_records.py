"""Record batch decode (what producers send) and build (what consumers read)."""

from __future__ import annotations

import random
import struct

import kafka.record
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from crc32c import crc32c
from tmsgate.protocol import (
    CorruptRecords,
    FetchRecord,
    InvalidRecords,
    UnsupportedMessageFormat,
    batch_next_offset,
    build_batch,
    decode_records,
    empty_batch,
    skip_batch,
    split_batches,
)


def produced(n: int = 3, codec: int = 0, **kw: int) -> bytes:
    b = DefaultRecordBatchBuilder(
        2,
        codec,
        kw.get("txn", 0),
        kw.get("pid", -1),
        kw.get("epoch", -1),
        kw.get("seq", -1),
        1 << 30,
    )
    for i in range(n):
        b.append(
            i,
            1000 + i,
            b"k%d" % i if i % 2 else None,
            b"v%d" % i * 50,
            [("h", b"%d" % i)] if i else [],
        )
    return bytes(b.build())


def recrc(raw: bytearray) -> bytes:
    struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
    return bytes(raw)


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_decode_every_codec(codec: int) -> None:
    [batch] = decode_records(produced(4, codec, pid=7, epoch=1, seq=10))
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (7, 1, 10)
    assert batch.last_sequence == 13 and batch.compression_type == codec
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch.records]
    assert got[1] == (1, 1001, b"k1", b"v1" * 50, [("h", b"1")])
    assert got[0][2] is None and len(got) == 4


def test_sequence_wraps_like_kafka() -> None:
    [batch] = decode_records(produced(3, seq=(1 << 31) - 2, pid=1, epoch=0))
    assert batch.last_sequence == 0


def test_null_records_field() -> None:
    assert decode_records(None) == []


def test_bad_crc() -> None:
    raw = bytearray(produced())
    raw[-3] ^= 1
    with pytest.raises(CorruptRecords, match="CRC"):
        decode_records(bytes(raw))


def test_truncated_and_trailing_bytes() -> None:
    raw = produced()
    with pytest.raises(CorruptRecords):
        decode_records(raw[:-1])
    with pytest.raises(CorruptRecords):
        decode_records(raw + b"\x00\x01")


def test_legacy_magic_is_refused() -> None:
    raw = bytearray(produced())
    raw[16] = 1
    with pytest.raises(UnsupportedMessageFormat):
        decode_records(bytes(raw))


def test_record_count_must_match_last_offset_delta() -> None:
    raw = bytearray(produced(3))
    struct.pack_into(">i", raw, 23, 5)
    with pytest.raises(InvalidRecords):
        decode_records(recrc(raw))


def test_declared_count_above_contents_is_corrupt() -> None:
    raw = bytearray(produced(3))
    struct.pack_into(">i", raw, 57, 4)
    struct.pack_into(">i", raw, 23, 3)
    with pytest.raises(CorruptRecords):
        decode_records(recrc(raw))


def test_control_batches_cannot_be_produced() -> None:
    raw = bytearray(produced(1))
    struct.pack_into(">h", raw, 21, 0x20)
    with pytest.raises(InvalidRecords):
        decode_records(recrc(raw))


def test_split_batches_counts_batches() -> None:
    assert len(split_batches(produced(1) + produced(2))) == 2


def read_with_kafka_python(raw: bytes) -> list[tuple[int, list]]:
    out = []
    mr = kafka.record.MemoryRecords(raw)
    while (b := mr.next_batch()) is not None:
        assert b.validate_crc()
        out.append((b.next_offset, [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in b]))
    return out


def test_build_batch_with_gaps_and_span() -> None:
    recs = [FetchRecord(100, 5, b"k", b"v", [("a", b"b")]), FetchRecord(103, 6, None, None, [])]
    raw = build_batch(recs, last_offset=110)
    assert batch_next_offset(raw) == 111
    assert read_with_kafka_python(raw) == [
        (111, [(100, 5, b"k", b"v", [("a", b"b")]), (103, 6, None, None, [])])
    ]


def test_build_batch_log_append_time() -> None:
    raw = build_batch([FetchRecord(0, 5, None, b"x", [])], log_append_time=999)
    [(next_offset, [(_, ts, *_rest)])] = read_with_kafka_python(raw)
    assert (next_offset, ts) == (1, 999)


def test_build_batch_golden_header() -> None:
    raw = build_batch([FetchRecord(7, 1000, None, b"x", [])])
    (base, length, epoch, magic, _crc, attrs, lod, first_ts, max_ts, pid, pe, seq, count) = (
        struct.unpack_from(">qiibIhiqqqhii", raw)
    )
    assert (base, length, epoch, magic, attrs, lod) == (7, len(raw) - 12, -1, 2, 0, 0)
    assert (first_ts, max_ts, pid, pe, seq, count) == (1000, 1000, -1, -1, -1, 1)


def _aiokafka_batch(records: list[FetchRecord], log_append_time: int | None = None) -> bytes:
    """What build_batch produced when it used aiokafka's builder: the reference bytes."""
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, (1 << 31) - 1)
    for rec in records:
        builder.append(
            rec.offset - records[0].offset, rec.timestamp, rec.key, rec.value, rec.headers
        )
    buf = builder.build()
    struct.pack_into(">q", buf, 0, records[0].offset)
    struct.pack_into(">i", buf, 12, -1)
    if log_append_time is not None:
        struct.pack_into(">h", buf, 21, 0x08)
        struct.pack_into(">q", buf, 35, log_append_time)
        struct.pack_into(">I", buf, 17, crc32c(memoryview(buf)[21:]))
    return bytes(buf)


@pytest.mark.parametrize("seed", range(40))
def test_build_batch_matches_aiokafkas_builder_byte_for_byte(seed: int) -> None:
    # The hand-written encoder must give exactly the bytes of the library it replaced:
    # keys, null values, headers (null values, non-ASCII names), timestamps before the
    # first, offset gaps and lengths on both sides of the varint table's end.
    rng = random.Random(seed)
    offset, records = rng.randrange(0, 1 << 40), []
    for _ in range(rng.randrange(1, 60)):
        offset += rng.choice((1, 1, 1, 2, 50, 20_000))
        size = rng.choice((0, 1, 127, 128, 1024, 16_383, 16_384, 70_000))
        records.append(
            FetchRecord(
                offset,
                1_700_000_000_000 + rng.randrange(-100_000, 10_000_000),
                rng.choice((None, b"", b"key", bytes(rng.randrange(200)))),
                rng.choice((None, rng.randbytes(size))),
                rng.choice(
                    ([], [("h", b"v")], [("\u00e9t\u00e9", None), ("x" * 300, b"y" * 9000)])
                ),
            )
        )
    stamp = rng.choice((None, 1_800_000_000_000))
    assert build_batch(records, log_append_time=stamp) == _aiokafka_batch(records, stamp)
    plain = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records]
    assert build_batch(plain, log_append_time=stamp) == _aiokafka_batch(records, stamp)


def test_empty_batch_moves_consumers() -> None:
    raw = empty_batch(20, 29)
    assert len(raw) == 61 and batch_next_offset(raw) == 30
    assert read_with_kafka_python(raw) == [(30, [])]
    with pytest.raises(ValueError):
        build_batch([])


def test_skip_batch_is_a_commit_marker_at_the_last_offset() -> None:
    raw = skip_batch(10, 14)
    assert batch_next_offset(raw) == 15
    [(next_offset, [(offset, _ts, key, value, _headers)])] = read_with_kafka_python(raw)
    assert (next_offset, offset, key, value) == (15, 14, b"\x00\x00\x00\x01", bytes(6))
    mr = kafka.record.MemoryRecords(raw)
    batch = mr.next_batch()
    assert batch.is_control_batch and batch.is_transactional and batch.producer_id == -1
