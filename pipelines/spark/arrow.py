"""Record columns (tmsgate.protocol.columns) to and from Arrow, without a loop per record:
the read body is laid out as Arrow's buffers, so each column is a numpy view or an Arrow
array over the body's bytes (headers, when there are any, are built from the same buffers).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from tmsgate.protocol.columns import HEAD, ID_SIZE, LOG_APPEND_TIME, MAGIC, MalformedColumns

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
        ("headers", HEADER_TYPE),
        ("messageId", pa.binary()),
        ("writePointer", pa.int64()),
    ]
)
SPARK_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int, "
    "headers array<struct<key: string, value: binary>>, messageId binary, writePointer long"
)


class _Reader:
    def __init__(self, body: bytes) -> None:
        self.buf = pa.py_buffer(body)
        self.pos = 0

    def take(self, size: int, what: str) -> pa.Buffer:
        if size < 0 or self.pos + size > self.buf.size:
            raise MalformedColumns(f"{what}: the body is cut short")
        part = self.buf.slice(self.pos, size)
        self.pos += size
        return part

    def ints(self, dtype: str, count: int, what: str) -> np.ndarray:
        size = np.dtype(dtype).itemsize * count
        return np.frombuffer(self.take(size, what), dtype=dtype, count=count)

    def binary(self, count: int, what: str, string: bool = False) -> pa.Array:
        """A nullable binary (or string) column: i32 lengths (-1 null), then the bytes."""
        lengths = self.ints("<i4", count, f"{what} lengths")
        valid = lengths >= 0
        offsets = np.zeros(count + 1, dtype=np.int32)
        np.cumsum(np.where(valid, lengths, 0), out=offsets[1:])
        data = self.take(int(offsets[-1]), f"{what} data")
        validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
        return pa.Array.from_buffers(
            pa.string() if string else pa.binary(),
            count,
            [validity, pa.py_buffer(offsets), data],
            null_count=int(count - valid.sum()),
        )


def next_offset_of(body: bytes) -> int:
    """The next offset a read body names (its head only)."""
    if len(body) < HEAD.size:
        raise MalformedColumns("header: the body is cut short")
    return int(HEAD.unpack_from(body)[5])


def to_record_batch(body: bytes, topic: str, partition: int) -> tuple[pa.RecordBatch, int]:
    """-> (the batch in SCHEMA, the body's next offset)."""
    r = _Reader(body)
    magic, version, flags, _, n, next_offset = HEAD.unpack(r.take(HEAD.size, "header").to_pybytes())
    if magic != MAGIC or version != 1:
        raise MalformedColumns(f"not a version 1 record-columns body ({magic!r}, {version})")
    offsets = r.ints("<i8", n, "offsets")
    stamps = r.ints("<i8", n, "timestamps")
    pointers = r.ints("<i8", n, "write pointers")
    ids = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(ID_SIZE), n, [None, r.take(ID_SIZE * n, "ids")]
    ).cast(pa.binary())
    keys = r.binary(n, "keys")
    values = r.binary(n, "values")
    counts = r.ints("<i4", n, "header counts")
    if (counts < 0).any():
        raise MalformedColumns("header counts: a count is negative")
    total = int(counts.sum(dtype=np.int64))
    names = r.binary(total, "header names", string=True)
    hvalues = r.binary(total, "header values")
    list_offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=list_offsets[1:])
    headers = pa.ListArray.from_arrays(
        pa.array(list_offsets),
        pa.StructArray.from_arrays([names, hvalues], names=["key", "value"]),
    )
    log_append = bool(flags & LOG_APPEND_TIME)
    columns = [
        keys,
        values,
        pa.array([topic] * n, pa.string()),
        pa.array(np.full(n, partition, dtype=np.int32)),
        pa.array(offsets),
        pa.array(stamps * 1000, pa.timestamp("us", tz="UTC")),
        pa.array(np.full(n, 1 if log_append else 0, dtype=np.int32)),
        headers,
        ids,
        pa.array(pointers, mask=pointers == 0),
    ]
    if r.pos != r.buf.size:
        raise MalformedColumns(f"{r.buf.size - r.pos} bytes follow the last column")
    batch = pa.RecordBatch.from_arrays(columns, schema=SCHEMA)
    try:  # lengths that overflow, header names that are not UTF-8: refused here, not in Spark
        batch.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise MalformedColumns(f"the columns do not hold together: {exc}") from None
    return batch, next_offset
