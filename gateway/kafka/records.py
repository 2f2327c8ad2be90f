"""Kafka records <-> store messages: what Produce writes and what Fetch returns.

Produce keeps key, headers and the client timestamp in the message's meta (see
tmsgate.protocol._meta); the value is the payload, None included. The transaction
header ``tms.tx.write_pointer`` is taken off the record and becomes the publish's
write pointer; Fetch puts it back from Message.write_pointer.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Sequence
from typing import Any

from tmsgate.protocol import (
    SERVED_HEAD,
    TX_HEADER,
    InvalidRecords,
    MalformedMeta,
    RecordFields,
    build_batch,
    decode_meta,
    encode_meta,
    pack_timestamp_meta,
    served_head,
    skip_batch,
)
from tmsgate.storage import Entry, MessageRow, StoredBatch

log = logging.getLogger("tmsgate.kafka.records")
_WP = struct.Struct(">q")


def write_pointer_of(value: bytes | None) -> int:
    if value is None or len(value) != 8:
        raise InvalidRecords(f"header {TX_HEADER} must hold 8 bytes (a big-endian write pointer)")
    return _WP.unpack(value)[0]


def to_entries(
    records: Sequence[Any], pointers_in_header: bool = True
) -> tuple[list[Entry], int | None]:
    """-> (entries, write pointer or None). All records of a batch must agree on the
    write pointer: one batch is one publish, so it gets one set of offsets.
    ``pointers_in_header`` False: the header is kept as any other (a migrated record
    whose transaction committed on its source long ago).

    Entries are plain (payload, meta, ttl) tuples, the shape of Entry: this runs once per
    produced record, and a NamedTuple's constructor costs more than the rest of it."""
    entries: list[Any] = []
    append = entries.append
    pointers: set[int | None] = set()
    plain = False
    for rec in records:
        headers = rec.headers
        if not headers:  # hot path: most records carry no headers
            key, ts = rec.key, rec.timestamp
            if key is None and ts >= 0:
                append((rec.value, pack_timestamp_meta(ts), None))
            else:
                append((rec.value, encode_meta(key, (), ts), None))
            plain = True
            continue
        wp = None
        kept = []
        for name, value in headers:
            if name == TX_HEADER and pointers_in_header:
                wp = write_pointer_of(value)
            else:
                kept.append((name, value))
        pointers.add(wp)
        append((rec.value, encode_meta(rec.key, kept, rec.timestamp), None))
    if plain:
        pointers.add(None)
    if len(pointers) > 1:
        raise InvalidRecords(
            f"all records of a batch must carry the same {TX_HEADER} (or none); "
            "send transactional records in their own batch"
        )
    return entries, pointers.pop() if pointers else None


def _undecodable(offset: int) -> tuple[None, list[tuple[str, bytes | None]], None]:
    # Not written by this gateway (or damaged): serve the value rather than wedging every
    # consumer of the topic on one message.
    log.warning("message at offset %d has undecodable Kafka meta; sent without it", offset)
    return None, [], None


def _records(rows: Sequence[MessageRow], log_append_time: bool) -> list[RecordFields]:
    """build_batch's records for store rows (hot path: one pass per fetched message, with
    plain tuples, not FetchRecords)."""
    out: list[RecordFields] = []
    add = out.append
    for _, payload, offset, publish_ts, wp, meta in rows:
        try:
            key, headers, timestamp = decode_meta(meta)
        except MalformedMeta:
            key, headers, timestamp = _undecodable(offset)
        if wp is not None:
            headers.append((TX_HEADER, _WP.pack(wp)))
        if log_append_time or timestamp is None:
            timestamp = publish_ts
        add((offset, timestamp, key, payload, headers))
    return out


def encode_batches(rows: Sequence[MessageRow], log_append_time: bool) -> list[bytearray]:
    """The record batches of ``rows`` (ReadResult.rows, at least one): one batch, or
    with LogAppendTime one per publish time (clients give every record its batch's max
    timestamp, so each batch holds messages of one store group commit)."""
    if not log_append_time:
        return [build_batch(_records(rows, False))]
    records, out, first = _records(rows, True), [], 0
    for i in range(1, len(rows) + 1):
        if i == len(rows) or rows[i][3] != rows[first][3]:
            out.append(build_batch(records[first:i], log_append_time=rows[first][3]))
            first = i
    return out


def encode_rows(
    rows: Sequence[MessageRow | StoredBatch], start: int, next_offset: int, log_append_time: bool
) -> list[bytes | bytearray | memoryview]:
    """Record batches for a fetch that read ``rows`` (ReadResult.rows, StoredBatch items
    among them) from ``start`` up to ``next_offset`` (exclusive), as chunks to send one
    after another (not joined: a copy of a 1 MB answer costs fresh memory,
    protocol.build_batch). A StoredBatch goes out as stored, its base offset replaced
    (the CRC does not cover it), as Kafka sends the batches it stored.

    Offsets the read skipped (rolled back, invalid, expired) between messages are
    simply absent, as after compaction. Skipped offsets after the last message get a
    control batch (skip_batch) so that every client, librdkafka's application
    position included, moves past them instead of fetching them again."""
    chunks: list[bytes | bytearray | memoryview] = []
    run: list[MessageRow] = []
    covered = start
    for row in rows:
        if type(row) is StoredBatch:
            if run:
                chunks += encode_batches(run, log_append_time)
                run = []
            chunks += (served_head(row.base_offset, row.batch), row.batch[SERVED_HEAD:])
            covered = row.base_offset + row.count
        else:
            run.append(row)  # type: ignore[arg-type]
    if run:
        chunks += encode_batches(run, log_append_time)
        covered = run[-1][2] + 1
    if next_offset > covered:
        chunks.append(skip_batch(covered, next_offset - 1))
    return chunks


def messages_in(rows: Sequence[MessageRow | StoredBatch]) -> int:
    """How many messages a read's rows hold (a StoredBatch holds several)."""
    return sum(row.count if type(row) is StoredBatch else 1 for row in rows)
