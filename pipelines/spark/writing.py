"""Rows to write (Arrow record batches with ``value`` and optional ``key``, ``headers``,
``topic``, ``partition``) as record-columns bodies for ``store``, one TMS topic at a time,
without a loop per record: Arrow's binary buffers are the body's lengths and bytes."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tmsgate.protocol.columns import HEAD, ID_SIZE, MAGIC, VERSION

from .gateway import tms_topic

CHUNK_BYTES = 4 << 20  # a store call's body: big enough to share its fsync widely


def _blobs(arr: pa.Array) -> tuple[bytes, bytes]:
    """A nullable binary column's i32 lengths (-1 null) and its bytes."""
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        arr = arr.cast(pa.large_binary() if pa.types.is_large_string(arr.type) else pa.binary())
    if pa.types.is_large_binary(arr.type):
        arr = arr.cast(pa.binary())
    if not pa.types.is_binary(arr.type):
        raise ValueError(f"a column of type {arr.type} cannot be written as bytes")
    n = len(arr)
    _, offsets_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(offsets_buf, dtype="<i4", count=n + 1, offset=arr.offset * 4)
    lengths = np.diff(offsets).astype("<i4")
    if arr.null_count:
        lengths[np.asarray(arr.is_null())] = -1
    data = b"" if data_buf is None else data_buf.to_pybytes()[offsets[0] : offsets[-1]]
    return lengths.tobytes(), data


def _headers(batch: pa.RecordBatch) -> tuple[bytes, bytes, bytes]:
    n = batch.num_rows
    if "headers" not in batch.schema.names:
        return np.zeros(n, "<i4").tobytes(), b"", b""
    col = batch.column("headers")
    counts = col.value_lengths().fill_null(0).to_numpy(zero_copy_only=False).astype("<i4")
    flat = col.flatten()  # the structs of every header, row after row (nulls dropped)
    names = b"".join(_blobs(flat.field("key")))
    values = b"".join(_blobs(flat.field("value")))
    if flat.field("key").null_count:
        raise ValueError("a header needs a key")
    return counts.tobytes(), names, values


def encode(batch: pa.RecordBatch) -> bytes:
    n = batch.num_rows
    zeros = bytes(8 * n)
    no_keys = (np.full(n, -1, "<i4").tobytes(), b"")  # every key null
    keys = _blobs(batch.column("key")) if "key" in batch.schema.names else no_keys
    counts, names, hvalues = _headers(batch)
    return b"".join(
        (
            HEAD.pack(MAGIC, VERSION, 0, 0, n, 0),
            zeros,  # offsets: the store's
            np.full(n, -1, "<i8").tobytes(),  # timestamps: the store's time
            zeros,  # write pointers: the header's
            bytes(ID_SIZE * n),
            *keys,
            *_blobs(batch.column("value")),
            counts,
            names,
            hvalues,
        )
    )


def _groups(
    batch: pa.RecordBatch, default_topic: str | None
) -> Iterator[tuple[str, int, pa.RecordBatch]]:
    names = batch.schema.names
    if "topic" not in names and "partition" not in names:
        yield default_topic or "", 0, batch
        return
    topics = (
        batch.column("topic") if "topic" in names else pa.array([default_topic] * batch.num_rows)
    )
    if topics.null_count and not default_topic:
        raise ValueError("a row has a null topic and there is no topic option")
    topics = topics.fill_null(default_topic) if default_topic else topics
    parts = (
        batch.column("partition").fill_null(0)
        if "partition" in names
        else pa.array(np.zeros(batch.num_rows, np.int32))
    )
    table = pa.Table.from_batches([batch]).append_column("_t", topics).append_column("_p", parts)
    for key in table.group_by(["_t", "_p"]).aggregate([]).to_pylist():
        mask = pc.and_(pc.equal(table["_t"], key["_t"]), pc.equal(table["_p"], key["_p"]))
        rows = table.filter(mask).drop_columns(["_t", "_p"]).combine_chunks()
        for part in rows.to_batches():
            yield str(key["_t"]), int(key["_p"]), part


def bodies(
    batch: pa.RecordBatch, default_topic: str | None, partitions: dict[str, int]
) -> Iterator[tuple[str, bytes]]:
    """-> (TMS topic, body) for every chunk of the batch. ``partitions``: the topics known
    to exist; rows for any other topic go to the gateway, which creates the topic (its
    auto-create setting) or refuses it, and checks the partition."""
    for topic, p, rows in _groups(batch, default_topic):
        if not topic:
            raise ValueError("a row has an empty topic")
        if p < 0:
            raise ValueError(f"topic {topic!r}: no partition {p}")
        if topic in partitions and p >= partitions[topic]:
            raise ValueError(f"topic {topic!r} has {partitions[topic]} partition(s); no {p}")
        size = max(1, rows.nbytes)
        step = max(1, int(rows.num_rows * CHUNK_BYTES / size))
        for start in range(0, rows.num_rows, step):
            yield tms_topic(topic, p), encode(rows.slice(start, step))
