"""Every row key and row value layout of the store, in one place.

One ordered key space holds all tables, each under a one-byte table prefix, so that a
single backend batch can write a message, its offset-index entry and producer state
atomically on LevelDB. Data keys follow the TMS seed:

    MessageTable  M | topic | generation(4) | publish_ts(8) | seq(2)
    PayloadTable  P | topic | generation(4) | write_pointer(8) | write_ts(8) | pseq(2)

``topic`` is ``namespace:name`` followed by a NUL byte. The seed concatenates the bare
name; the terminator keeps the prefix of topic ``a`` from also matching topic ``ab``.
All integers are big-endian so byte order is numeric order.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence

from tmsgate.protocol import (
    CorruptRecords,
    batch_keys,
    batch_messages,
    iter_batch_messages,
)

from .errors import StorageError
from .ids import TopicId

MESSAGE = b"M"
PAYLOAD = b"P"
REFERENCED = b"R"  # R | topic | generation | wp: that wp's payloads were published
OPEN_TX = b"W"  # W | topic | generation | wp | base offset: a transactional row to watch
TOPIC = b"T"
CHECKPOINT = b"C"
TX = b"X"
STATE = b"S"
INTENT = b"I"  # I | topic: the rows a write in flight appends to the topic (intents.py)
LEASE = b"L"  # L | name: a lease with its fencing epoch (leases.py); never deleted
TX_LAST_WP = TX + b"w"  # the last write pointer handed out
TX_IN_PROGRESS = TX + b"p"  # X p | wp -> expiry (epoch ms)
TX_INVALID = TX + b"i"  # X i | wp

GENERATION = struct.Struct(">i")
MESSAGE_SUFFIX = struct.Struct(">QH")  # publish_ts, seq
PAYLOAD_SUFFIX = struct.Struct(">QQH")  # write_pointer, write_ts, pseq
PAYLOAD_ROW = struct.Struct(">QH")  # write_ts, pseq (after the write-pointer prefix)
U64 = struct.Struct(">Q")
OPEN_TX_SUFFIX = struct.Struct(">QQ")  # write_pointer, base offset
MAX_SEQ = 0xFFFF

# There is no offset index: offsets grow with row keys, and reader.start_for_offset
# searches the rows themselves (a second key range would make LevelDB rewrite every file).


def topic_name(topic: TopicId) -> bytes:
    return f"{topic.namespace}:{topic.topic}".encode() + b"\x00"


def topic_meta_key(topic: TopicId) -> bytes:
    return TOPIC + topic_name(topic)


def namespace_meta_prefix(namespace: str) -> bytes:
    return TOPIC + namespace.encode() + b":"


def topic_from_meta_key(key: bytes) -> TopicId:
    namespace, _, name = key[1:-1].decode().partition(":")
    return TopicId.stored(namespace, name)


def checkpoint_key(topic: TopicId) -> bytes:
    return CHECKPOINT + topic_name(topic)


def data_prefix(table: bytes, topic: TopicId, generation: int) -> bytes:
    return table + topic_name(topic) + GENERATION.pack(generation)


def all_generations_prefix(table: bytes, topic: TopicId) -> bytes:
    return table + topic_name(topic)


def generation_of(key: bytes, name_len: int) -> int:
    """The generation in a data key whose table prefix plus topic name is ``name_len`` bytes."""
    return GENERATION.unpack_from(key, name_len)[0]


def prefix_end(prefix: bytes) -> bytes:
    """The smallest key greater than every key that starts with ``prefix``."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        raise ValueError("a prefix of only 0xff bytes has no end")
    return trimmed[:-1] + bytes([trimmed[-1] + 1])


def intent_key(topic: TopicId) -> bytes:
    return INTENT + topic_name(topic)


def state_key(area: str, key: str) -> bytes:
    return STATE + area.encode() + b"\x00" + key.encode()


def state_prefix(area: str, prefix: str = "") -> bytes:
    return STATE + area.encode() + b"\x00" + prefix.encode()


# --- row values -------------------------------------------------------------------------
# LevelDB has no columns, so a row's columns are packed into its value:
#   flags(1) base_offset(8) count(4) [t: write pointer, signed(8)] [ttl_ms(8)]
#   [meta_len(4) meta] [payload...]
# ``o`` (base offset, count) is always present; the flags say which optional column is.
# A row with F_TX and without F_PAYLOAD/F_NULL is a PayloadTable reference (seed: no p
# column). F_NULL marks a message whose payload is absent (a Kafka null value).

F_TX = 1
F_PAYLOAD = 2
F_META = 4
F_TTL = 8
F_NULL = 16
# A sealed reference (a Kafka transaction's records): visible to no reader at all while
# its transaction is in progress, and read as plain messages (no write pointer) once it
# committed, so that Kafka consumers of either isolation level see the same records.
F_SEALED = 32
# A gap: offsets base .. base+count-1 that hold no message (a migrated partition keeps its
# source's offsets, and the source's gaps: compaction, transaction markers, aborted
# records). Every reader passes over it; a row of only the o column.
F_GAP = 64
# A row holding several messages (``count`` of them) packed in its payload column
# (PACKED below): in the PayloadTable, one store call's; in the MessageTable, one plain
# publish's (no transaction), cut at MESSAGE_ROW_BYTES. The row's key has the first
# message's sequence (pseq, or seq) and message i takes sequence + i, so message ids are
# what one row per message would give them, at one row write (value-log entry, LevelDB
# put) and one row read per run of messages instead of per message. F_PAYLOAD is set
# too, so a backend with columns keeps the packed bytes in ``p``.
F_PACKED = 128
# A packed row with the meta column: its messages are one Kafka v2 record batch, kept as
# the producer sent it (encode_kafka_batch_row: a plain Kafka produce in the MessageTable,
# a transactional one in the PayloadTable). ``m`` holds the batch's header
# (KAFKA_BATCH_HEADER bytes, base offset first) and ``p`` its records, so the two
# columns, one after the other, are the batch. A Kafka fetch sends a MessageTable row's
# bytes with only the base offset and leader epoch replaced (protocol.served_head), as
# Kafka serves the batches it stored; any other reader gets each record's (payload, meta)
# from protocol.batch_messages: what Produce stores per record otherwise. (The flags
# byte has no bit left for a kind of its own.)
F_KAFKA_BATCH = F_PACKED | F_META | F_PAYLOAD
KAFKA_BATCH_HEADER = 61

ROW_HEAD = struct.Struct(">BQI")
MAX_ROW_COUNT = 0xFFFFFFFF  # the most offsets one row spans (its count column)
ROW_HEAD_META = struct.Struct(">BQII")  # the head, then meta's length (F_META rows)
_HEAD_META_SIZE = ROW_HEAD_META.size
TX_COLUMN = struct.Struct(">q")
TTL_COLUMN = struct.Struct(">Q")
META_LEN = struct.Struct(">I")
_HEAD_SIZE = ROW_HEAD.size


def encode_row(
    base_offset: int,
    count: int,
    payload: bytes | None,
    write_pointer: int | None = None,
    meta: bytes | None = None,
    ttl_ms: int | None = None,
    reference: bool = False,
    sealed: bool = False,
) -> bytes:
    flags = F_SEALED if sealed else 0
    parts: list[bytes] = []
    if write_pointer is not None:
        flags |= F_TX
        parts.append(TX_COLUMN.pack(write_pointer))
    if ttl_ms is not None:
        flags |= F_TTL
        parts.append(TTL_COLUMN.pack(ttl_ms))
    if meta is not None:
        flags |= F_META
        parts.append(META_LEN.pack(len(meta)))
        parts.append(meta)
    if not reference:
        if payload is None:
            flags |= F_NULL
        else:
            flags |= F_PAYLOAD
            parts.append(payload)
    return ROW_HEAD.pack(flags, base_offset, count) + b"".join(parts)


# Per message of a packed row: meta length, payload length, ttl (-1: none / null), then
# meta and payload.
PACKED = struct.Struct(">iiq")
_PACKED_SIZE = PACKED.size
# The most messages one packed row holds: their pseqs must fit in one write time.
MAX_PACKED_COUNT = MAX_SEQ + 1
# A packed row is cut at about this many bytes: HBase refuses cells above 10 MiB by
# default (hbase.client.keyvalue.maxsize), and a reader slices the row it reads.
MAX_PACKED_BYTES = 1 << 20
# A MessageTable row is cut smaller: a consumer reading from an offset inside a row reads
# the whole row (Kafka returns whole batches too), so a row stays around a fetch's size.
MESSAGE_ROW_BYTES = 64 << 10

# A payload alone, or (payload, meta, ttl): the store's Item (bytes or an Entry).
Packable = bytes | tuple[bytes | None, bytes | None, int | None]


def pack_messages(
    items: Sequence[Packable], base: int | None = None, max_bytes: int | None = None
) -> list[tuple[int, bytes]]:
    """``items`` as row values, in order: -> (messages in the row, value). Several
    messages are packed, cut where a row would pass ``max_bytes`` (MAX_PACKED_BYTES) or
    MAX_PACKED_COUNT; a lone message is a plain row, as every row was before packed rows.

    ``base`` None: PayloadTable rows (offset and count 0: a reference row numbers them).
    ``base`` an offset: MessageTable rows, each head carrying its first offset."""
    limit = MAX_PACKED_BYTES if max_bytes is None else max_bytes
    if len(items) == 1:
        item = items[0]
        payload, meta, ttl = (item, None, None) if type(item) is bytes else item
        if base is None:
            return [(1, encode_row(0, 0, payload, None, meta, ttl))]
        return [(1, encode_row(base, 1, payload, None, meta, ttl))]
    out: list[tuple[int, bytes]] = []
    parts: list[bytes] = []
    add, pack = parts.extend, PACKED.pack
    size = n = 0
    off = 0 if base is None else base
    for item in items:
        payload, meta, ttl = (item, None, None) if type(item) is bytes else item
        if n and (size >= limit or n == MAX_PACKED_COUNT):
            out.append(_packed_row(n, parts, off, base is not None))
            off += n if base is not None else 0
            parts, size, n = [], 0, 0
            add = parts.extend
        m = -1 if meta is None else len(meta)
        p = -1 if payload is None else len(payload)
        add((pack(m, p, -1 if ttl is None else ttl), meta or b"", payload or b""))
        size += _PACKED_SIZE + m + p
        n += 1
    out.append(_packed_row(n, parts, off, base is not None))
    return out


def _packed_row(n: int, parts: list[bytes], base: int, numbered: bool) -> tuple[int, bytes]:
    if n == 1:  # a lone message after a cut: a plain row
        m, p, ttl = PACKED.unpack_from(parts[0])
        return 1, encode_row(
            base,
            1 if numbered else 0,
            parts[2] if p >= 0 else None,
            None,
            parts[1] if m >= 0 else None,
            None if ttl < 0 else ttl,
        )
    return n, ROW_HEAD.pack(F_PACKED | F_PAYLOAD, base, n) + b"".join(parts)


def encode_kafka_batch_row(base_offset: int, count: int, batch: bytes | memoryview) -> bytes:
    """The row of a Kafka v2 record batch of ``count`` records (F_KAFKA_BATCH); in the
    PayloadTable ``base_offset`` is 0, as in every row there (a reference numbers them)."""
    return ROW_HEAD_META.pack(F_KAFKA_BATCH, base_offset, count, KAFKA_BATCH_HEADER) + batch


def kafka_batch_of(value: bytes) -> memoryview:
    """The record batch an F_KAFKA_BATCH row holds, as produced (base offset and all)."""
    return memoryview(value)[_HEAD_META_SIZE:]


def unpack_messages(value: bytes) -> list[tuple[bytes | None, bytes | None, int | None]]:
    """The (payload, meta, ttl) of each message of a row, plain or packed."""
    flags, _, count = ROW_HEAD.unpack_from(value)
    if not flags & F_PACKED:
        _, _, _, _, ttl, meta, payload = decode_row(value)
        return [(payload, meta, ttl)]
    if flags == F_KAFKA_BATCH:
        try:
            found = batch_messages(kafka_batch_of(value))
        except CorruptRecords as exc:
            raise StorageError(f"a stored Kafka batch is damaged: {exc}") from exc
        if len(found) != count:
            raise StorageError(f"a stored Kafka batch holds {len(found)} records, not {count}")
        return found  # type: ignore[return-value]
    out = []
    pos, unpack = _HEAD_SIZE, PACKED.unpack_from
    for _ in range(count):
        m, p, ttl = unpack(value, pos)
        pos += _PACKED_SIZE
        meta = value[pos : pos + m] if m >= 0 else None
        pos += max(m, 0)
        payload = value[pos : pos + p] if p >= 0 else None
        pos += max(p, 0)
        out.append((payload, meta, None if ttl < 0 else ttl))
    return out


def kafka_batch_keys(value: bytes) -> tuple[list[bytes | None], list[int]]:
    """The record keys of an F_KAFKA_BATCH row, and the indices of its records whose
    value is null, without building each record's meta: what compaction needs of most
    rows."""
    try:
        return batch_keys(kafka_batch_of(value))
    except CorruptRecords as exc:
        raise StorageError(f"a stored Kafka batch is damaged: {exc}") from exc


def iter_messages(
    value: bytes, first: int = 0
) -> Iterator[tuple[bytes | None, bytes | None, int | None]]:
    """unpack_messages(value)[first:], lazily for a row holding a Kafka batch (a large one
    read from inside, or only partly, decodes only what is taken)."""
    if value[0] != F_KAFKA_BATCH:
        yield from unpack_messages(value)[first:]
        return
    try:
        yield from iter_batch_messages(kafka_batch_of(value), first)
    except CorruptRecords as exc:
        raise StorageError(f"a stored Kafka batch is damaged: {exc}") from exc


def messages_in_row(value: bytes) -> int:
    """How many messages a PayloadTable row holds (1 unless packed; a MessageTable row's
    count column says it for every row)."""
    flags, _, count = ROW_HEAD.unpack_from(value)
    return count if flags & F_PACKED else 1


def encode_gap(base_offset: int, count: int) -> bytes:
    return ROW_HEAD.pack(F_GAP, base_offset, count)


def decode_row(
    value: bytes,
) -> tuple[int, int, int, int | None, int | None, bytes | None, bytes | None]:
    """-> (flags, base_offset, count, write_pointer, ttl_ms, meta, payload)."""
    flags, base, count = ROW_HEAD.unpack_from(value)
    pos = _HEAD_SIZE
    wp = ttl = meta = payload = None
    if flags & F_TX:
        wp = TX_COLUMN.unpack_from(value, pos)[0]
        pos += 8
    if flags & F_TTL:
        ttl = TTL_COLUMN.unpack_from(value, pos)[0]
        pos += 8
    if flags & F_META:
        n = META_LEN.unpack_from(value, pos)[0]
        pos += 4
        meta = value[pos : pos + n]
        pos += n
    if flags & F_PAYLOAD:
        payload = value[pos:]
    return flags, base, count, wp, ttl, meta, payload


def negate_write_pointer(value: bytes) -> bytes:
    """The same row with its t column negated (the seed's rollback); idempotent."""
    flags = value[0]
    if not flags & F_TX:
        return value
    wp = TX_COLUMN.unpack_from(value, _HEAD_SIZE)[0]
    if wp < 0:
        return value
    return value[:_HEAD_SIZE] + TX_COLUMN.pack(-wp) + value[_HEAD_SIZE + 8 :]


# --- the same rows as columns (a backend with columns: HBase) -------------------------
# The seed's column layout: ``o`` (flags, base offset, count: the head above), ``t``
# (write pointer), ``l`` (ttl), ``m`` (Kafka metadata) and ``p`` (payload), each present
# only when the row has it. row_from_columns(row_columns(v)) == v for every row value.
COL_HEAD = b"o"
COL_TX = b"t"
COL_TTL = b"l"
COL_META = b"m"
COL_PAYLOAD = b"p"


def row_columns(value: bytes) -> dict[bytes, bytes]:
    """A MessageTable or PayloadTable row value split into its columns."""
    flags = value[0]
    cols = {COL_HEAD: value[:_HEAD_SIZE]}
    pos = _HEAD_SIZE
    if flags & F_TX:
        cols[COL_TX] = value[pos : pos + 8]
        pos += 8
    if flags & F_TTL:
        cols[COL_TTL] = value[pos : pos + 8]
        pos += 8
    if flags & F_META:
        n = META_LEN.unpack_from(value, pos)[0]
        cols[COL_META] = value[pos + 4 : pos + 4 + n]
        pos += 4 + n
    if flags & F_PAYLOAD:
        cols[COL_PAYLOAD] = value[pos:]
    return cols


def row_from_columns(cols: dict[bytes, bytes]) -> bytes:
    """The inverse of row_columns."""
    parts = [cols[COL_HEAD], cols.get(COL_TX, b""), cols.get(COL_TTL, b"")]
    meta = cols.get(COL_META)
    if meta is not None:
        parts += [META_LEN.pack(len(meta)), meta]
    parts.append(cols.get(COL_PAYLOAD, b""))
    return b"".join(parts)


def message_key_int(key: bytes, prefix_len: int) -> int:
    """A MessageTable key's suffix as one integer (publish_ts << 16 | seq): keys grow with
    it, so the offset searches (reader.py, hbase.py) interpolate between keys with it."""
    ts, seq = MESSAGE_SUFFIX.unpack_from(key, prefix_len)
    return ts << 16 | seq


def message_key_suffix(value: int) -> bytes:
    """The key suffix of ``message_key_int``'s integer."""
    return MESSAGE_SUFFIX.pack(value >> 16, value & 0xFFFF)
