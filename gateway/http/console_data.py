"""What the console's pages show that gateway/views.py does not: messages as a browser
shows them (key, value and headers as text or hex), where a browse starts, and the open
transactions, Kafka's and the TMS's, with their age.

``browse`` reads the store (blocking: the I/O executor); ``open_transactions`` reads the
coordinators' memory (on the event loop, where they change).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tmsgate.gateway.errors import BadRequest
from tmsgate.protocol import MalformedMeta, decode_meta
from tmsgate.storage import TX_PER_MS, MessageId, Store, TopicId, Transaction
from tmsgate.storage.ids import PARTITION_MARK

if TYPE_CHECKING:
    from starlette.datastructures import QueryParams
    from tmsgate.gateway.services import Services

DEFAULT_LIMIT = 20
MAX_LIMIT = 500
MAX_SHOWN_BYTES = 4096  # of a key, value or header: the rest is counted, not shown


# --- messages -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Shown:
    """Bytes as the page shows them: as text when they are UTF-8, else as hex."""

    size: int
    text: str | None  # None: not UTF-8 (the first MAX_SHOWN_BYTES)
    hex: str
    cut: bool  # longer than MAX_SHOWN_BYTES

    @classmethod
    def of(cls, raw: bytes) -> Shown:
        head = raw[:MAX_SHOWN_BYTES]
        try:
            text: str | None = head.decode("utf-8")
        except UnicodeDecodeError as exc:
            # A cut through a multi-byte character at the end is still text.
            cut_char = len(raw) > MAX_SHOWN_BYTES and exc.start >= len(head) - 3
            text = head[: exc.start].decode("utf-8") if cut_char else None
        if text is not None and _controls(text):
            text = None  # binary that happens to decode: hex says more
        return cls(len(raw), text, head.hex(" "), len(raw) > MAX_SHOWN_BYTES)


def _controls(text: str) -> bool:
    return any(ord(c) < 32 and c not in "\t\n\r" for c in text)


@dataclass(frozen=True, slots=True)
class MessageRow:
    offset: int
    id_hex: str
    publish_ms: int
    client_ms: int | None  # the Kafka record's own timestamp
    write_pointer: int | None  # published in a transaction: its write pointer
    key: Shown | None
    value: Shown | None  # None: a null value (a tombstone)
    headers: tuple[tuple[str, Shown | None], ...]
    meta_error: str | None = None  # the Kafka metadata did not decode


@dataclass(frozen=True, slots=True)
class Browse:
    """Where a browse starts and how much it shows: one of offset, start (a time in epoch
    ms or a message id); none: the last ``limit`` messages of the partition."""

    partition: int
    offset: int | None
    start: int | MessageId | None
    limit: int
    committed: bool  # read as a read_committed consumer: only committed transactions
    query: dict[str, str]  # the browse's own query parameters, for links that keep them


def browse_of(params: QueryParams, partitions: int) -> Browse:
    """The browse a page's query asks for; BadRequest says what is wrong with it."""
    partition = _whole(params.get("partition", "0"), "partition")
    if partition >= partitions:
        raise BadRequest(f"partition {partition}: the topic has partitions 0-{partitions - 1}")
    limit = _whole(params.get("limit", str(DEFAULT_LIMIT)), "limit")
    if not 1 <= limit <= MAX_LIMIT:
        raise BadRequest(f"limit {limit}: expected 1-{MAX_LIMIT}")
    given = {k: params[k].strip() for k in ("offset", "time", "id") if params.get(k, "").strip()}
    if len(given) > 1:
        raise BadRequest(f"browse from one of offset, time or id, not {' and '.join(given)}")
    offset, start = None, None
    if "offset" in given:
        offset = _whole(given["offset"], "offset")
    elif "time" in given:
        start = time_of(given["time"])
    elif "id" in given:
        start = message_id_of(given["id"])
    committed = params.get("isolation", "") == "read_committed"
    query = {"partition": str(partition), "limit": str(limit), **given}
    if committed:
        query["isolation"] = "read_committed"
    return Browse(partition, offset, start, limit, committed, query)


def _whole(text: str, name: str) -> int:
    if not (text.isascii() and text.isdigit() and len(text) <= 19):
        raise BadRequest(f"{name} {text[:40]!r}: expected a whole number")
    return int(text)


def time_of(text: str) -> int:
    """Epoch ms of an ISO 8601 time (UTC unless it says otherwise) or of epoch ms (at most
    19 digits, as every whole number here: the row keys hold 64 bits)."""
    if text.isascii() and text.isdigit():
        return _whole(text, "time")
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise BadRequest(
            f"time {text[:40]!r}: expected ISO 8601 (2026-01-31T12:00:00, UTC unless it "
            "names a zone) or epoch milliseconds"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return max(0, int(when.timestamp() * 1000))


def message_id_of(text: str) -> MessageId:
    try:
        return MessageId(bytes.fromhex(text))
    except ValueError:
        raise BadRequest(
            f"message id {text[:48]!r}: expected {MessageId.SIZE * 2} hex digits"
        ) from None


@dataclass(frozen=True, slots=True)
class Page:
    messages: list[MessageRow]
    next_offset: int
    held: bool  # stopped at a transaction still in progress (read_committed)


def browse(store: Store, namespace: str, topic: str, b: Browse, tx: Transaction | None) -> Page:
    """One page of messages (blocking). Raises TopicNotFound, OffsetOutOfRange."""
    tid = TopicId.of_partition(namespace, topic, b.partition)
    offset, start = b.offset, b.start
    if offset is None and start is None:  # the last messages, as a tail would show them
        earliest, nxt = store.offsets(tid)
        offset = max(earliest, nxt - b.limit)
    res = store.read(tid, offset=offset, start=start, max_messages=b.limit, tx=tx)
    return Page([row_of(m) for m in res.messages], res.next_offset, res.held)


def row_of(m: Any) -> MessageRow:
    try:
        key, headers, client_ms = decode_meta(m.meta)
        error = None
    except MalformedMeta as exc:
        key, headers, client_ms, error = None, [], None, str(exc)
    return MessageRow(
        offset=m.offset,
        id_hex=m.id.hex(),
        publish_ms=m.publish_ts,
        client_ms=client_ms,
        write_pointer=m.write_pointer,
        key=None if key is None else Shown.of(key),
        value=None if m.payload is None else Shown.of(m.payload),
        headers=tuple((n, None if v is None else Shown.of(v)) for n, v in headers),
        meta_error=error,
    )


# --- open transactions ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class KafkaTxn:
    transactional_id: str
    producer_id: int
    epoch: int
    state: str
    write_pointer: int
    started_ms: int
    timeout_ms: int
    partitions: tuple[tuple[str, int], ...]  # the Kafka topic-partitions it wrote to


@dataclass(frozen=True, slots=True)
class TmsTxn:
    write_pointer: int
    started_ms: int  # a write pointer is its start time in ms, times TX_PER_MS
    expires_ms: int
    kafka_id: str | None  # the transactional id whose Kafka transaction it is


def kafka_transactions(services: Services) -> list[KafkaTxn]:
    """The Kafka transactions open now (the Kafka transaction coordinator's, in memory)."""
    out = []
    for rec in services.broker.txns.list((), (), -1):
        if not rec.state.is_open:
            continue
        parts = sorted(_kafka_partition(name) for name in rec.topics)
        out.append(
            KafkaTxn(
                rec.transactional_id,
                rec.producer_id,
                rec.epoch,
                rec.state.value,
                rec.write_pointer,
                rec.started_ms,
                rec.timeout_ms,
                tuple(parts),
            )
        )
    return sorted(out, key=lambda t: t.started_ms)


def tms_transactions(services: Services) -> list[TmsTxn]:
    """Every transaction in progress in the store's transaction manager, Kafka's too."""
    owner = services.broker.txns.owner_of
    return [
        TmsTxn(wp, wp // TX_PER_MS, expiry, owner(wp))
        for wp, expiry in sorted(services.transactions.in_progress().items())
    ]


def _kafka_partition(stored: str) -> tuple[str, int]:
    name, _, index = stored.partition(PARTITION_MARK)
    return name, int(index or 0)
