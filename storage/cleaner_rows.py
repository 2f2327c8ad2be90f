"""The MessageTable rows as the compaction cleaner sees them (compaction.py): for each
message of a row, its compaction key, whether it is a tombstone and whether it is
already gone, read from the row or, for a Kafka batch kept as sent, taken from the keys
Produce decoded (produced_keys.py) without reading the row."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from . import keys, reader
from .produced_keys import ProducedKeys
from .topics import TopicState
from .transactions import Visibility

if TYPE_CHECKING:  # janitor.py runs the cleaner: imported for the type only
    from .janitor import Housekeeping

log = logging.getLogger(__name__)

# A transactional row is cleaned only this long after its commit: a reader that took its
# snapshot before the commit still holds the row back, and must not see it change.
TX_SETTLE_MS = 60_000
_HEAD = keys.ROW_HEAD

Msg = tuple[bytes | None, bytes | None, int | None]  # payload, meta, ttl
KeyOf = Callable[[bytes | None], bytes | None]


@dataclass(slots=True)
class Row:
    """A MessageTable row as the cleaner sees it. Per message (by index in the row): its
    compaction key (``keys``, None: keyless), whether it is a tombstone (``tombstones``)
    and whether it is already gone (``gone``: removed before, or past its own TTL)."""

    key: bytes
    value: bytes | None  # None once mapped (compaction._Mapped): read again if a rewrite needs it
    base: int
    count: int
    ts: int
    size: int
    keys: list[bytes | None] | None  # None: nothing to clean in it (a gap)
    tombstones: list[int] = field(default_factory=list)
    gone: list[int] = field(default_factory=list)
    wp: int | None = None  # a reference row's write pointer (its PayloadTable rows)
    aborted: bool = False  # an aborted transaction's row: becomes a gap
    loaded: list[Msg] | None = None  # its messages, once decoded

    def messages(self) -> list[Msg]:
        """Decoded when a rewrite needs them: a Kafka batch's keys come without building
        each record's meta (most rows of a compacted topic lose every message)."""
        if self.loaded is None:
            assert self.value is not None
            self.loaded = keys.unpack_messages(self.value)
        return self.loaded


class RowReader:
    """Reads a topic's rows for the cleaner; ``pace()`` is called between rows (the
    cleaner's pauses)."""

    def __init__(
        self,
        house: Housekeeping,
        key_of: KeyOf,
        produced: ProducedKeys,
        pace: Callable[[], None],
    ) -> None:
        self._house = house
        self._key_of = key_of
        self._produced = produced
        self._pace = pace

    def _start(self, st: TopicState, from_offset: int) -> bytes:
        """The key of the row holding ``from_offset`` (or of the first row after it)."""
        if from_offset > 0:
            return reader.start_for_offset(self._house.backend, st, from_offset).key
        return st.msg_prefix

    def sizes(
        self, st: TopicState, from_offset: int, end: int, now: int, pace: bool
    ) -> Iterator[tuple[int, int, int]]:
        """(end offset, size, publish time) of the MessageTable rows covering
        [from_offset, end), their messages not read (a transaction's row is, to see
        whether it may be cleaned yet); stops where ``rows`` would."""
        plen = len(st.msg_prefix)
        start = self._start(st, from_offset)
        for key, flags, base, count, size in self._heads(st, start, from_offset, end, pace):
            if flags & keys.F_TX and not flags & keys.F_GAP:
                value = self._house.backend.get(key)
                row = self._decode(st, key, value, now) if value is not None else None
                if row is None:
                    return  # in progress, committed too recently, or gone meanwhile
                size = row.size  # with its PayloadTable rows
            yield base + count, size, keys.MESSAGE_SUFFIX.unpack_from(key, plen)[0]

    def rows(self, st: TopicState, from_offset: int, end: int, now: int) -> Iterator[Row]:
        """The MessageTable rows covering [from_offset, end), with their messages' keys;
        stops at a transaction still in progress or committed too recently."""
        messages = self._house.tables.messages
        start = self._start(st, from_offset)
        if self._produced.topic_has(st.topic, st.metadata.generation):
            yield from self._rows_with_produced_keys(st, start, from_offset, end, now)
            return
        for key, value in messages.topic_rows(st, start):
            self._pace()
            base, count = _HEAD.unpack_from(value)[1:]
            if base >= end:
                return
            if base + count <= from_offset:
                continue
            row = self._decode(st, key, value, now)
            if row is None:
                return  # the cleanable part ends here (Kafka: the last stable offset)
            yield row

    def _rows_with_produced_keys(
        self, st: TopicState, start: bytes, from_offset: int, end: int, now: int
    ) -> Iterator[Row]:
        """``rows`` for a topic some of whose batches' keys Produce gave (ProducedKeys):
        the rows' heads first, and only the values of the others read."""
        gen, plen = st.metadata.generation, len(st.msg_prefix)
        get = self._house.backend.get
        for key, flags, base, count, size in self._heads(st, start, from_offset, end, True):
            if flags == keys.F_KAFKA_BATCH:
                produced = self._produced.keys_of(st.topic, gen, base, count)
                if produced is not None:
                    found, nulls = produced
                    ts = keys.MESSAGE_SUFFIX.unpack_from(key, plen)[0]
                    digests = [k if k is None or len(k) <= 16 else hashed(k) for k in found]
                    yield Row(key, None, base, count, ts, size, digests, list(nulls))
                    continue
            value = get(key)
            if value is None:
                continue  # deleted meanwhile (a scan promises no snapshot)
            row = self._decode(st, key, value, now)
            if row is None:
                return  # the cleanable part ends here (Kafka: the last stable offset)
            yield row

    def _heads(
        self, st: TopicState, start: bytes, from_offset: int, end: int, pace: bool
    ) -> Iterator[tuple[bytes, int, int, int, int]]:
        """(key, flags, first offset, count, size) of the rows from ``start`` covering
        [from_offset, end), from their heads (Backend.scan_heads)."""
        for key, head, size in self._house.tables.messages.topic_row_heads(st, start):
            if pace:
                self._pace()
            flags, base, count = _HEAD.unpack_from(head)
            if base >= end:
                return
            if base + count > from_offset:
                yield key, flags, base, count, size

    def _decode(self, st: TopicState, key: bytes, value: bytes, now: int) -> Row | None:
        """One MessageTable row with its messages' keys; None at a transaction still in
        progress or committed too recently."""
        flags, base, count = _HEAD.unpack_from(value)
        ts = keys.MESSAGE_SUFFIX.unpack_from(key, len(st.msg_prefix))[0]
        if flags & keys.F_GAP:
            return Row(key, value, base, count, ts, len(value), None)
        if flags == keys.F_KAFKA_BATCH:
            found, nulls = keys.kafka_batch_keys(value)
            digests = [k if k is None or len(k) <= 16 else hashed(k) for k in found]
            return Row(key, value, base, count, ts, len(value), digests, nulls)
        if flags & keys.F_PACKED:
            msgs = keys.unpack_messages(value)
            return self._row(key, value, base, count, ts, len(value), msgs, now)
        flags, base, count, wp, ttl, meta, payload = keys.decode_row(value)
        if wp is None:
            msgs = [(payload, meta, ttl)]
            return self._row(key, value, base, count, ts, len(value), msgs, now)
        vis = self._house.transactions.visibility_now(wp)
        if vis is Visibility.HOLD or (vis is Visibility.ACCEPT and ts > now - TX_SETTLE_MS):
            return None
        reference = not flags & (keys.F_PAYLOAD | keys.F_NULL)
        if vis is Visibility.SKIP:
            ref = abs(wp) if reference else None
            return Row(key, value, base, count, ts, len(value), [], wp=ref, aborted=True)
        if not reference:
            msgs = [(payload, meta, ttl)]
            return self._row(key, value, base, count, ts, len(value), msgs, now)
        msgs, size = self._payload_messages(st, wp)
        if len(msgs) != count:  # not what the row says: leave it alone
            log.warning(
                "%s: reference row at offset %d holds %d of %d messages: not cleaned",
                st.topic,
                base,
                len(msgs),
                count,
            )
            return Row(key, value, base, count, ts, len(value), None)
        row = self._row(key, value, base, count, ts, len(value) + size, msgs, now)
        row.wp = wp
        return row

    def _row(
        self,
        key: bytes,
        value: bytes,
        base: int,
        count: int,
        ts: int,
        size: int,
        msgs: list[Msg],
        now: int,
    ) -> Row:
        found = [self._key(meta) for _, meta, _ in msgs]
        nulls = [i for i, (payload, _, _) in enumerate(msgs) if payload is None]
        gone = [i for i, (_, _, ttl) in enumerate(msgs) if is_removed(ttl, ts, now)]
        return Row(key, value, base, count, ts, size, found, nulls, gone, loaded=msgs)

    def _payload_messages(self, st: TopicState, wp: int) -> tuple[list[Msg], int]:
        prefix = st.payload_prefix + keys.U64.pack(abs(wp))
        msgs: list[Msg] = []
        size = 0
        for _, value in self._house.backend.scan(prefix, keys.prefix_end(prefix)):
            size += len(value)
            msgs.extend(keys.iter_messages(value))
        return msgs, size

    def reread(self, st: TopicState, row: Row, now: int) -> Row | None:
        """A mapped row read again for its messages (None: it changed meanwhile, left
        alone until the next pass)."""
        value = self._house.backend.get(row.key)
        if value is None:
            return None
        again = self._decode(st, row.key, value, now)
        if again is None or (again.base, again.count) != (row.base, row.count):
            return None
        return again

    # --- rows ----------------------------------------------------------------------------
    def _key(self, meta: bytes | None) -> bytes | None:
        try:
            k = self._key_of(meta)
        except Exception:  # a meta that does not decode has no key we can compare
            return None
        if k is None:
            return None
        k = bytes(k)
        return k if len(k) <= 16 else hashed(k)


def hashed(k: bytes) -> bytes:
    """What the key map holds of a key longer than 16 bytes (shorter ones as they are)."""
    return hashlib.blake2b(k, digest_size=16).digest()


def is_removed(ttl: int | None, ts: int, now: int) -> bool:
    """Already unreadable: a removed message (TTL 0) or one whose own TTL ran out."""
    return ttl is not None and ts + ttl < now
