"""Record columns: the HTTP API's bulk record format, laid out as Apache Arrow lays out
columns, so that a reader turns a body into Arrow arrays without a per-record loop and the
server builds one with a few joins (docs/http-api.md, "Bulk reads and writes").

``POST .../read`` answers it and ``POST .../store`` takes it (Content-Type
``application/vnd.tmsgate.records``); the Spark data source uses both. Little-endian, as
Arrow and numpy are:

    magic "TMSR" | version u8 (=1) | flags u8 | reserved u16 (=0)
    count u32 | next_offset i64
    offsets        i64[count]
    timestamps     i64[count]          (-1: none; a store then takes its own time)
    write_pointers i64[count]          (0: none)
    ids            20 bytes x count    (the TMS message ids; zeros when writing)
    keys           i32[count] lengths (-1: null), then the bytes of all keys
    values         i32[count] lengths (-1: null), then the bytes of all values
    header_counts  i32[count]
    header names   i32[H] lengths, then UTF-8 bytes          (H = sum of header_counts)
    header values  i32[H] lengths (-1: null), then the bytes

flags: 1 = the timestamps are log-append times (Kafka's timestampType 1). When writing,
offsets, write pointers, ids and next_offset are ignored. Nothing here touches a socket.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate

MEDIA_TYPE = "application/vnd.tmsgate.records"
MAGIC = b"TMSR"
VERSION = 1
LOG_APPEND_TIME = 1
ID_SIZE = 20
HEAD = struct.Struct("<4sBBHIq")
_ZERO_ID = bytes(ID_SIZE)
_LITTLE = sys.byteorder == "little"

Header = tuple[str, bytes | None]


class MalformedColumns(ValueError):
    """A body that is not a well-formed record-columns body; the message says where."""


@dataclass(slots=True)
class RecordColumns:
    """Records column by column (Python lists; readers wanting Arrow read the buffers)."""

    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    write_pointers: list[int] = field(default_factory=list)
    ids: list[bytes] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    headers: list[list[Header]] = field(default_factory=list)
    next_offset: int = 0
    log_append_time: bool = False

    def __len__(self) -> int:
        return len(self.values)


def _i32(values: Sequence[int]) -> bytes:
    arr = array("i", values)
    if not _LITTLE:
        arr.byteswap()
    return arr.tobytes()


def _i64(values: Sequence[int]) -> bytes:
    arr = array("q", values)
    if not _LITTLE:
        arr.byteswap()
    return arr.tobytes()


def _blobs(items: Sequence[bytes | None]) -> tuple[bytes, bytes]:
    """-> (lengths, data) of a nullable binary column."""
    lengths = [-1 if b is None else len(b) for b in items]
    return _i32(lengths), b"".join([b for b in items if b])


def encode_columns(cols: RecordColumns) -> bytes:
    n = len(cols.values)
    for name in ("offsets", "timestamps", "write_pointers", "keys", "headers"):
        if len(getattr(cols, name)) != n:
            raise ValueError(f"column {name} has {len(getattr(cols, name))} rows, values {n}")
    ids = cols.ids or [_ZERO_ID] * n
    if len(ids) != n or any(len(i) != ID_SIZE for i in ids):
        raise ValueError(f"ids must be {n} values of {ID_SIZE} bytes")
    names: list[bytes | None] = []
    hvalues: list[bytes | None] = []
    for hs in cols.headers:
        for name, value in hs:
            names.append(name.encode("utf-8"))
            hvalues.append(value)
    flags = LOG_APPEND_TIME if cols.log_append_time else 0
    return b"".join(
        (
            HEAD.pack(MAGIC, VERSION, flags, 0, n, cols.next_offset),
            _i64(cols.offsets),
            _i64(cols.timestamps),
            _i64(cols.write_pointers),
            b"".join(ids),
            *_blobs(cols.keys),
            *_blobs(cols.values),
            _i32([len(h) for h in cols.headers]),
            *_blobs(names),
            *_blobs(hvalues),
        )
    )


class _Cursor:
    def __init__(self, body: bytes | memoryview) -> None:
        self.view = memoryview(body)
        self.pos = 0

    def take(self, size: int, what: str) -> memoryview:
        end = self.pos + size
        if size < 0 or end > len(self.view):
            raise MalformedColumns(
                f"{what}: needs {size} bytes at byte {self.pos}, the body has {len(self.view)}"
            )
        part = self.view[self.pos : end]
        self.pos = end
        return part

    def ints(self, code: str, count: int, what: str) -> list[int]:
        arr = array(code)
        arr.frombytes(self.take(count * arr.itemsize, what))
        if not _LITTLE:
            arr.byteswap()
        return arr.tolist()

    def blobs(self, count: int, what: str) -> list[bytes | None]:
        lengths = self.ints("i", count, f"{what} lengths")
        if any(n < -1 for n in lengths):
            raise MalformedColumns(f"{what}: a length below -1")
        data = bytes(self.take(sum(n for n in lengths if n > 0), f"{what} data"))
        out: list[bytes | None] = []
        pos = 0
        for n in lengths:
            if n < 0:
                out.append(None)
            else:
                out.append(data[pos : pos + n])
                pos += n
        return out


def decode_columns(body: bytes | memoryview) -> RecordColumns:
    """The inverse of encode_columns; MalformedColumns saying what is wrong otherwise."""
    cur = _Cursor(body)
    magic, version, flags, _, n, next_offset = HEAD.unpack(cur.take(HEAD.size, "header"))
    if magic != MAGIC:
        raise MalformedColumns(f"not a record-columns body (starts with {bytes(magic)!r})")
    if version != VERSION:
        raise MalformedColumns(f"record-columns version {version} is unknown (expected 1)")
    # Every record costs at least 56 bytes (three i64, an id, three i32): a count the
    # body cannot hold is refused before any list is sized by it.
    if n * 56 > len(cur.view) - HEAD.size:
        raise MalformedColumns(f"count {n} does not fit in a body of {len(cur.view)} bytes")
    cols = RecordColumns(next_offset=next_offset, log_append_time=bool(flags & LOG_APPEND_TIME))
    cols.offsets = cur.ints("q", n, "offsets")
    cols.timestamps = cur.ints("q", n, "timestamps")
    cols.write_pointers = cur.ints("q", n, "write_pointers")
    raw_ids = bytes(cur.take(ID_SIZE * n, "ids"))
    cols.ids = [raw_ids[i : i + ID_SIZE] for i in range(0, len(raw_ids), ID_SIZE)]
    cols.keys = cur.blobs(n, "keys")
    cols.values = cur.blobs(n, "values")
    counts = cur.ints("i", n, "header_counts")
    if any(c < 0 for c in counts):
        raise MalformedColumns("header_counts: a negative count")
    total = sum(counts)
    if total * 8 > len(cur.view) - cur.pos:
        raise MalformedColumns(f"{total} headers do not fit in what is left of the body")
    names = cur.blobs(total, "header names")
    hvalues = cur.blobs(total, "header values")
    if cur.pos != len(cur.view):
        raise MalformedColumns(f"{len(cur.view) - cur.pos} bytes follow the last column")
    try:
        decoded = [None if b is None else b.decode("utf-8") for b in names]
    except UnicodeDecodeError as exc:
        raise MalformedColumns(f"header names: not UTF-8 ({exc})") from None
    if any(name is None for name in decoded):
        raise MalformedColumns("header names: a name cannot be null")
    pairs = list(zip(decoded, hvalues, strict=True))
    bounds = [0, *accumulate(counts)]
    cols.headers = [pairs[bounds[i] : bounds[i + 1]] for i in range(n)]  # type: ignore[misc]
    return cols
