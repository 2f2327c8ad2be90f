"""Bulk reads and writes by offset, with Kafka's columns (key, value, headers, timestamp,
offset) and the TMS ones (message id, write pointer): what the Spark data source reads and
writes (docs/spark.md). Bodies are record columns (tmsgate.protocol.columns): a reader
makes Arrow arrays of them without a loop per record.

    GET  .../topics/{topic}/offsets[?timestamp=MS]  earliest, latest, stable, forTimestamp
    POST .../topics/{topic}/read                    JSON query -> record columns
    POST .../topics/{topic}/store                   record columns -> a store receipt
                                                    (with X-Transaction-Write-Pointer)
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from tmsgate.gateway.acls import Operation
from tmsgate.gateway.errors import BadRequest
from tmsgate.gateway.kafka.config import TIMESTAMP_TYPE
from tmsgate.gateway.offsets import lookup
from tmsgate.protocol import (
    CorruptRecords,
    InvalidRecords,
    MalformedMeta,
    decode_meta,
    encode_meta,
    iter_batch_records,
)
from tmsgate.protocol.columns import (
    MEDIA_TYPE,
    MalformedColumns,
    RecordColumns,
    decode_columns,
    encode_columns,
)
from tmsgate.storage import MessageRow, ReadResult, StoredBatch, StoredRange, TopicId

from .config import HttpConfig
from .errors import json_response, read_body, read_json_object, topic_id, write_pointer_of
from .openapi import COLUMNS_BODY, COLUMNS_TYPE, JSON_TYPE, json_ok, query_param, ref
from .routes import Doc, Need, On, Route
from .topic_lookup import TopicLookup

if TYPE_CHECKING:
    from tmsgate.gateway.services import Services

BASE = "/v1/namespaces/{namespace}/topics/{topic}"
WRITE_POINTER_HEADER = "x-transaction-write-pointer"
DEFAULT_MAX_RECORDS = 10_000
MAX_RECORDS = 100_000
DEFAULT_MAX_BYTES = 8 << 20
ISOLATIONS = ("read_uncommitted", "read_committed")
_QUERY_FIELDS = {"offset", "endOffset", "maxRecords", "maxBytes", "isolation"}
_MAX_QUERY_BODY = 4096


def _int_field(doc: dict[str, Any], name: str, default: int | None, low: int, high: int) -> int:
    value = doc.get(name, default)
    if value is None:
        raise BadRequest(f"{name} is required")
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise BadRequest(f"{name}: expected an integer in [{low}, {high}], got {value!r}"[:200])
    return value


def columns_of(
    rows: list[MessageRow | StoredBatch],
    next_offset: int,
    log_append_time: bool,
    end: int | None = None,
) -> bytes:
    """The record-columns body of what the store read (ReadResult.rows, StoredBatch items
    among them; hot path: one pass per record), up to offset ``end`` (exclusive)."""
    cols = RecordColumns(next_offset=next_offset, log_append_time=log_append_time)
    offsets, stamps, pointers = cols.offsets, cols.timestamps, cols.write_pointers
    ids, keys, values, headers = cols.ids, cols.keys, cols.values, cols.headers
    for row in rows:
        if type(row) is StoredBatch:
            _add_batch(cols, row, end)
            continue
        mid, payload, offset, publish_ts, wp, meta = row
        if end is not None and offset >= end:
            break
        try:
            key, hs, ts = decode_meta(meta)
        except MalformedMeta:
            key, hs, ts = None, [], None  # served without it, as the Kafka fetch does
        offsets.append(offset)
        stamps.append(publish_ts if log_append_time or ts is None else ts)
        pointers.append(wp or 0)
        ids.append(mid)
        keys.append(key)
        values.append(payload)
        headers.append(hs)
    return encode_columns(cols)


def _add_batch(cols: RecordColumns, batch: StoredBatch, end: int | None) -> None:
    """A Kafka batch kept as produced, record by record, without the meta each record
    would have as a message (storage keys.F_KAFKA_BATCH)."""
    n = batch.count if end is None else max(min(batch.count, end - batch.base_offset), 0)
    publish_ts = batch.publish_ts
    use_publish = cols.log_append_time
    stamps, keys, values, headers = cols.timestamps, cols.keys, cols.values, cols.headers
    for key, value, hs, ts in itertools.islice(iter_batch_records(batch.batch), n):
        stamps.append(publish_ts if use_publish or ts < 0 else ts)
        keys.append(key)
        values.append(value)
        headers.append(hs)
    if len(stamps) != len(cols.offsets) + n:
        raise CorruptRecords(f"a stored batch at offset {batch.base_offset} is short")
    cols.offsets += range(batch.base_offset, batch.base_offset + n)
    cols.write_pointers += [0] * n
    cols.ids += batch.message_ids()[:n]


class RecordHandlers:
    ROUTES = (
        Route(
            "GET",
            BASE + "/offsets",
            "offsets",
            Need(On.TOPIC, (Operation.DESCRIBE,)),
            Doc(
                "Earliest, latest and last stable offsets (and one for a time)",
                json_ok("Offsets"),
                (400, 404, 503),
                query=(
                    query_param(
                        "timestamp",
                        {"type": "integer", "minimum": 0},
                        "also answer the first offset with a timestamp >= this",
                    ),
                ),
            ),
        ),
        Route(
            "POST",
            BASE + "/read",
            "read",
            Need(On.TOPIC, (Operation.READ,)),
            Doc(
                "Read records by offset, with keys, headers, timestamps, message ids and "
                "write pointers, as record columns",
                {
                    "200": {
                        "description": "record columns",
                        "content": {COLUMNS_TYPE: COLUMNS_BODY},
                    },
                    "416": {
                        "description": "the offset is outside [earliest, latest]",
                        "content": {JSON_TYPE: {"schema": ref("Error")}},
                    },
                },
                (400, 404, 413, 415, 503),
                body={"required": True, "content": {JSON_TYPE: {"schema": ref("ReadQuery")}}},
            ),
        ),
    )

    def __init__(self, services: Services, config: HttpConfig) -> None:
        self.services = services
        self._store = services.store
        self.max_body = config.max_body_bytes

    def _log_append_time(self, tid: TopicId) -> bool:
        return self._store.get_topic(tid).properties.get(TIMESTAMP_TYPE) == "LogAppendTime"

    async def offsets(self, request: Request) -> Response:
        tid = topic_id(request.path_params["namespace"], request.path_params["topic"])
        raw_ts = request.query_params.get("timestamp")
        if raw_ts is not None and not (raw_ts.isascii() and raw_ts.isdigit() and len(raw_ts) < 19):
            raise BadRequest(f"timestamp: expected epoch milliseconds >= 0, got {raw_ts[:40]!r}")
        store = self._store
        log_append = await self.services.run(self._log_append_time, tid)
        earliest, latest = await self.services.run(store.offsets, tid)
        stable = min(await self.services.run(store.last_stable_offset, tid), latest)
        doc: dict[str, Any] = {"earliest": earliest, "latest": latest, "stable": stable}
        if raw_ts is not None:
            offset, _ = await self.services.run(lookup, store, tid, log_append, int(raw_ts), False)
            doc["forTimestamp"] = None if offset < 0 else offset
        return json_response(doc)

    async def read(self, request: Request) -> Response:
        tid = topic_id(request.path_params["namespace"], request.path_params["topic"])
        doc = await read_json_object(request, _MAX_QUERY_BODY, required=True)
        unknown = sorted(set(doc) - _QUERY_FIELDS)
        if unknown:
            raise BadRequest(f"unknown field {unknown[0]!r}; fields: {sorted(_QUERY_FIELDS)}")
        offset = _int_field(doc, "offset", None, 0, 2**63 - 1)
        end = _int_field(doc, "endOffset", 2**63 - 1, 0, 2**63 - 1)
        limit = _int_field(doc, "maxRecords", DEFAULT_MAX_RECORDS, 1, MAX_RECORDS)
        max_bytes = _int_field(doc, "maxBytes", DEFAULT_MAX_BYTES, 1, 1 << 30)
        isolation = doc.get("isolation", "read_uncommitted")
        if isolation not in ISOLATIONS:
            wanted = list(ISOLATIONS)
            raise BadRequest(f"isolation: expected one of {wanted}, got {isolation!r}"[:200])
        tx = None
        if isolation == "read_committed":
            tx = await self.services.transactions.snapshot()
        body = await self.services.run(self._read_blocking, tid, offset, end, limit, max_bytes, tx)
        return Response(body, media_type=MEDIA_TYPE)

    def _read_blocking(
        self, tid: TopicId, offset: int, end: int, limit: int, max_bytes: int, tx: Any
    ) -> bytes:
        log_append = self._log_append_time(tid)
        if offset >= end:
            return columns_of([], offset, log_append)
        res: ReadResult = self._store.read(
            tid, offset=offset, max_messages=limit, max_bytes=max_bytes, tx=tx, kafka_batches=True
        )
        # A stored Kafka batch counts as one toward max_messages: maxRecords bounds the
        # offsets instead (gaps make that fewer records, never more).
        stop = min(end, offset + limit)
        return columns_of(res.rows, min(res.next_offset, stop), log_append, stop)


async def store_columns(
    services: Services, request: Request, tid: TopicId, max_body: int, lookup: TopicLookup
) -> Response:
    """``POST .../store`` with a record-columns body (MessageHandlers.store hands it over
    by Content-Type): the records' values, keys, headers and timestamps go to the
    PayloadTable under the header's write pointer; -> the store receipt (JSON)."""
    raw_wp = request.headers.get(WRITE_POINTER_HEADER)
    if raw_wp is None:
        raise BadRequest(f"a record-columns store needs the header {WRITE_POINTER_HEADER}")
    wp = write_pointer_of(raw_wp)
    body = await read_body(request, max_body)
    items = await services.compute(_items_of, body)
    if not items:
        raise BadRequest("store needs at least one record")
    stored = await lookup.writing(
        request, tid, lambda: services.wait(services.store.store_async(tid, items, wp))
    )
    return json_response(receipt_json(stored))


def _items_of(body: bytes) -> list[tuple[bytes | None, bytes | None, None]]:
    try:
        cols = decode_columns(body)
        return [
            (value, encode_meta(key, hs, ts if ts >= 0 else None), None)
            for value, key, hs, ts in zip(
                cols.values, cols.keys, cols.headers, cols.timestamps, strict=True
            )
        ]
    except (MalformedColumns, InvalidRecords) as exc:
        raise BadRequest(f"record columns: {exc}") from None


def receipt_json(stored: StoredRange) -> dict[str, int]:
    """A store receipt: the PublishResponse fields of the PayloadTable rows written."""
    return {
        "transactionWritePointer": stored.write_pointer,
        "startTimestamp": stored.start_ts,
        "startSequenceId": stored.start_seq,
        "endTimestamp": stored.end_ts,
        "endSequenceId": stored.end_seq,
        "count": stored.count,
    }
