"""What a migration forwards from a fetched partition: pure functions over record batches.

A migration copies record batches as the source sent them (no decoding, no
re-encoding: the target decodes each record once, as it would for a producer), and
the target keeps every batch's offsets (gateway/kafka/handlers/produce.py, migrated
topics). What a read_committed consumer would not see becomes a gap the target keeps:
control batches (transaction markers), batches of aborted transactions, and offsets
no batch covers (compaction, retention). Every offset from the copy's position on is
covered by exactly one forwarded batch, so the target can refuse any write that does
not continue where the last one ended.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass, field

from tmsgate.protocol import empty_batch

_BASE_LEN = struct.Struct(">qi")  # base offset, batch length (after these 12 bytes)
_ATTRS_LOD = struct.Struct(">hi")  # attributes, last offset delta (at 21)
_PRODUCER_ID = struct.Struct(">q")  # at 43
_COUNT = struct.Struct(">i")  # record count (at 57)
_CONTROL_KEY = struct.Struct(">hh")  # version, type (0 abort, 1 commit)
LOG_OVERHEAD = 12
BATCH_OVERHEAD = 61
CONTROL_BIT = 0x20
TRANSACTIONAL_BIT = 0x10


def split_fetched(raw: bytes | memoryview | None) -> list[memoryview]:
    """The whole v2 batches of a fetched partition. A fetch may end with part of a batch
    (the response's size limit cut it): that part is left for the next fetch."""
    out: list[memoryview] = []
    if not raw:
        return out
    view = memoryview(raw)
    pos, end = 0, len(view)
    while pos + LOG_OVERHEAD <= end:
        _, length = _BASE_LEN.unpack_from(view, pos)
        total = LOG_OVERHEAD + length
        if length < BATCH_OVERHEAD - LOG_OVERHEAD or pos + total > end:
            break
        if view[pos + 16] != 2:
            raise ValueError(f"message format v{view[pos + 16]}: only v2 batches are copied")
        out.append(view[pos : pos + total])
        pos += total
    return out


def _base(batch: memoryview) -> int:
    return _BASE_LEN.unpack_from(batch, 0)[0]


def _last(batch: memoryview) -> int:
    return _base(batch) + _ATTRS_LOD.unpack_from(batch, 21)[1]


def _skip_varint(data: memoryview, pos: int) -> int:
    while data[pos] & 0x80:
        pos += 1
    return pos + 1


def _control_type(batch: memoryview) -> int | None:
    """0 (abort) or 1 (commit) for a control batch's marker, None if unreadable.
    Control batches are never compressed; the record's key is (version, type)."""
    if _COUNT.unpack_from(batch, 57)[0] < 1:
        return None
    try:
        pos = _skip_varint(batch, BATCH_OVERHEAD)  # record length
        pos += 1  # attributes
        pos = _skip_varint(batch, pos)  # timestamp delta
        pos = _skip_varint(batch, pos)  # offset delta
        pos = _skip_varint(batch, pos)  # key length
        return _CONTROL_KEY.unpack_from(batch, pos)[1]
    except (IndexError, struct.error):
        return None


@dataclass
class AbortedTracker:
    """Kafka's read_committed filter (the consumer's side of KIP-98): a fetch lists the
    aborted transactions (producer id, first offset) of its range; a transactional batch
    of such a producer at or after that first offset is aborted, until that producer's
    ABORT marker."""

    pending: list[tuple[int, int]] = field(default_factory=list)  # (first offset, pid)
    ongoing: set[int] = field(default_factory=set)

    def add(self, aborted: Iterable[tuple[int, int]]) -> None:
        """``aborted``: (producer id, first offset) pairs of a fetch response."""
        self.pending = sorted({*self.pending, *((first, pid) for pid, first in aborted)})

    def is_aborted(self, batch: memoryview) -> bool:
        """Call for every batch in offset order."""
        attributes = _ATTRS_LOD.unpack_from(batch, 21)[0]
        if not attributes & TRANSACTIONAL_BIT:
            return False
        last = _last(batch)
        while self.pending and self.pending[0][0] <= last:
            self.ongoing.add(self.pending.pop(0)[1])
        pid = _PRODUCER_ID.unpack_from(batch, 43)[0]
        if attributes & CONTROL_BIT:
            if pid in self.ongoing and _control_type(batch) == 0:
                self.ongoing.discard(pid)
            return False
        return pid in self.ongoing


@dataclass
class Forward:
    """What to send for one fetched partition."""

    batches: list[bytes | memoryview]
    position: int  # the copy's position after them
    records: int  # records forwarded (batch record counts; gaps count none)
    size: int  # bytes forwarded


def forward(
    batches: list[memoryview], position: int, aborted: AbortedTracker, limit: int | None = None
) -> Forward:
    """The batches to send so that the target continues at ``position`` and ends where
    the last fetched batch ends. Batches wholly before ``position`` were copied already;
    control and aborted batches become gaps (an empty batch over their offsets); offsets
    between batches become gaps too. ``limit``: stop before a batch starting at or after
    it (a copy that ends at a fixed offset)."""
    out: list[bytes | memoryview] = []
    records = size = 0
    for batch in batches:
        base, last = _base(batch), _last(batch)
        if limit is not None and base >= limit:
            break
        gone = aborted.is_aborted(batch)  # in order, even for batches copied before
        if last < position:
            continue
        if base > position:
            out.append(empty_batch(position, base - 1))
            position = base
        attributes = _ATTRS_LOD.unpack_from(batch, 21)[0]
        if gone or attributes & CONTROL_BIT:
            out.append(empty_batch(position, last))
        else:
            out.append(batch)
            count = _COUNT.unpack_from(batch, 57)[0]
            # a batch reaching back before the position: the target skips that part
            records += count if base >= position else min(count, last - position + 1)
            size += len(batch)
        position = last + 1
    return Forward(out, position, records, size)


def gap(position: int, end: int) -> bytes:
    """An explicit gap [position, end): offsets the source no longer has (retention)."""
    return empty_batch(position, end - 1)


def start_marker(offset: int) -> bytes:
    """An empty span at ``offset``: where a copied partition starts when the source's
    log starts there (the target then starts its offsets there too)."""
    return empty_batch(offset, offset - 1)
