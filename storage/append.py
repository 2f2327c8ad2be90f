"""Appending rows: what publish writes into the MessageTable, in the writer's batch.

Runs on the writer thread only. Each call validates first and then moves the topic's
in-memory state (timestamps, sequence ids, offsets) forward, so a later operation in the
same batch continues where this one ended; the rows become visible once the batch is
durable (``on_visible``).
"""

from __future__ import annotations

from collections.abc import Callable

from . import keys
from .errors import InvalidTransaction
from .ids import Entry, MessageId, PublishResult, RollbackDetail, TopicId
from .tables import Tables
from .topics import OpenTxRow, TopicState
from .writer import Batch

_ROW_HEAD = keys.ROW_HEAD
_ROW_HEAD_META = keys.ROW_HEAD_META
_SUFFIX = keys.MESSAGE_SUFFIX
_U64 = keys.U64
_F_PAYLOAD = keys.F_PAYLOAD
_F_PAYLOAD_META = keys.F_PAYLOAD | keys.F_META

Item = bytes | Entry


class RowAppender:
    def __init__(
        self,
        tables: Tables,
        clock: Callable[[], int],
        on_visible: Callable[[TopicState, int], None],
    ) -> None:
        self._tables = tables
        self._clock = clock
        self._on_visible = on_visible
        # Write pointer -> the topics with rows of it in the MessageTable: the topics whose
        # last stable offset (and sealed holds) change when it ends (Store._tx_finished).
        self.tx_topics: dict[int, set[TopicId]] = {}

    def allocate(self, st: TopicState, n: int) -> tuple[int, int]:
        """The (ts, seq) before the first of ``n`` new rows; never goes back in time."""
        now = self._clock()
        if now > st.last_ts:
            return now, -1
        return st.last_ts, st.last_seq

    def append(
        self,
        batch: Batch,
        st: TopicState,
        entries: list[Item],
        wp: int | None,
        sealed: bool = False,
    ) -> PublishResult:
        """Rows for ``entries`` (with the t column when ``wp``; ``sealed``: held from
        every reader until ``wp`` commits, then plain messages: keys.F_SEALED)."""
        ts, seq = self.allocate(st, len(entries))
        n = len(entries)
        if wp is None and seq + n <= keys.MAX_SEQ:
            return self._append_plain(batch, st, entries, ts, seq)
        base = off = st.next_offset
        prefix = st.msg_prefix
        append = batch.mutations.append
        pack, head, head_meta = _SUFFIX.pack, _ROW_HEAD.pack, _ROW_HEAD_META.pack
        first = None
        for item in entries:
            seq += 1
            if seq > keys.MAX_SEQ:  # the 65,536th message of a millisecond takes the next one
                ts += 1
                seq = 0
            suffix = pack(ts, seq)
            if first is None:
                first = suffix
            if wp is None and type(item) is bytes:
                value = head(_F_PAYLOAD, off, 1) + item
            elif type(item) is bytes:
                value = keys.encode_row(off, 1, item, wp, sealed=sealed)
            else:
                payload, meta, ttl = item  # an Entry, or a plain tuple of the same shape
                if wp is None and ttl is None and meta is not None and payload is not None:
                    # A Kafka record's row: payload and meta, no t column, no ttl; one copy.
                    value = b"".join((head_meta(_F_PAYLOAD_META, off, 1, len(meta)), meta, payload))
                else:
                    value = keys.encode_row(off, 1, payload, wp, meta, ttl, sealed=sealed)
            append((prefix + suffix, value))
            off += 1
        st.last_ts, st.last_seq, st.next_offset = ts, seq, off
        assert first is not None
        batch.appended(st.intent_key, prefix + first, prefix + pack(ts, seq), n)
        f_ts, f_seq = _SUFFIX.unpack(first)
        rollback = None
        if wp is not None:
            rollback = RollbackDetail(wp, f_ts, f_seq, ts, seq)
            self.watch_tx_row(batch, st, wp, base)
        batch.after.append(lambda: self._on_visible(st, off))
        return PublishResult(
            base,
            len(entries),
            MessageId(first + bytes(10)),
            MessageId(pack(ts, seq) + bytes(10)),
            f_ts,
            rollback,
        )

    def _append_plain(
        self, batch: Batch, st: TopicState, entries: list[Item], ts: int, seq: int
    ) -> PublishResult:
        """append() for the common publish (a Kafka produce): entries without a write
        pointer that all fit in one millisecond, packed a run at a time into rows of
        about MESSAGE_ROW_BYTES (keys.F_PACKED), message i of a row taking the row's seq
        + i. One row per message cost a key, a value-log entry and a LevelDB put each on
        the writer thread, which every publish waits for, and a row read each."""
        n, base = len(entries), st.next_offset
        prefix, pack = st.msg_prefix, _SUFFIX.pack
        rows = keys.pack_messages(entries, base, keys.MESSAGE_ROW_BYTES)
        first_key = prefix + pack(ts, seq + 1)
        if len(rows) == 1:
            batch.mutations.append((first_key, rows[0][1]))
            last_key = first_key
        else:
            s = seq + 1
            for count, value in rows:
                last_key = prefix + pack(ts, s)
                batch.mutations.append((last_key, value))
                s += count
        batch.appended(st.intent_key, first_key, last_key, len(rows))
        end = base + n
        st.last_ts, st.last_seq, st.next_offset = ts, seq + n, end
        batch.after.append(lambda: self._on_visible(st, end))
        return PublishResult(
            base,
            n,
            MessageId(pack(ts, seq + 1) + bytes(10)),
            MessageId(pack(ts, seq + n) + bytes(10)),
            ts,
            None,
        )

    def append_kafka_batch(
        self, batch: Batch, st: TopicState, records: bytes | memoryview, count: int
    ) -> PublishResult:
        """append() for a plain Kafka produce kept as sent: one row holding the v2 record
        batch of ``count`` records (keys.F_KAFKA_BATCH), message i taking the row's seq + i
        as in any packed row."""
        ts, seq = self.allocate(st, count)
        if seq + count > keys.MAX_SEQ:  # the run's seqs must fit one millisecond
            ts, seq = ts + 1, -1
        base, pack = st.next_offset, _SUFFIX.pack
        key = st.msg_prefix + pack(ts, seq + 1)
        batch.mutations.append((key, keys.encode_kafka_batch_row(base, count, records)))
        batch.appended(st.intent_key, key, key, 1)
        end = base + count
        st.last_ts, st.last_seq, st.next_offset = ts, seq + count, end
        batch.after.append(lambda: self._on_visible(st, end))
        return PublishResult(
            base,
            count,
            MessageId(pack(ts, seq + 1) + bytes(10)),
            MessageId(pack(ts, seq + count) + bytes(10)),
            ts,
            None,
        )

    def watch_tx_row(self, batch: Batch, st: TopicState, wp: int, base: int) -> None:
        marker = st.open_tx_prefix + keys.OPEN_TX_SUFFIX.pack(wp, base)
        batch.derive(st.intent_key, [(marker, b"")])
        with st.lock:
            st.open_tx_rows.append(OpenTxRow(base, wp))
        self.tx_topics.setdefault(wp, set()).add(st.topic)

    def check_unreferenced(self, st: TopicState, wp: int) -> None:
        if self.is_referenced(st, wp):
            raise InvalidTransaction(f"payloads of write pointer {wp} were already published")

    def is_referenced(self, st: TopicState, wp: int) -> bool:
        if wp in st.published_refs:
            return True
        if wp > st.known_wp:
            # Handed out since ``st`` was loaded: any reference of it was written through
            # ``st`` (published_refs), so the backend need not be asked (a read on the
            # writer's path in every commit).
            return False
        if self._tables.metadata.is_published(st, wp):
            st.published_refs.add(wp)
            return True
        return False

    def append_reference(
        self, batch: Batch, st: TopicState, wp: int, sealed: bool = False
    ) -> PublishResult:
        self.check_unreferenced(st, wp)
        count = self.stored(st, wp)[0]
        if count == 0:
            return PublishResult(st.next_offset, 0, None, None, 0, None)
        ts, seq = self.allocate(st, 1)
        seq += 1
        if seq > keys.MAX_SEQ:
            ts, seq = ts + 1, 0
        suffix = _SUFFIX.pack(ts, seq)
        base = st.next_offset
        key = st.msg_prefix + suffix
        batch.mutations.append(
            (key, keys.encode_row(base, count, None, wp, reference=True, sealed=sealed))
        )
        batch.appended(st.intent_key, key, key, 1)
        # After the reference (derived): the marker says the payloads were published.
        batch.derive(st.intent_key, [(st.referenced_prefix + _U64.pack(wp), b"")])
        st.last_ts, st.last_seq, st.next_offset = ts, seq, base + count
        st.published_refs.add(wp)
        st.stored.pop(wp, None)
        self.watch_tx_row(batch, st, wp, base)
        end = base + count
        batch.after.append(lambda: self._on_visible(st, end))
        mid = MessageId(suffix + bytes(10))
        return PublishResult(base, count, mid, mid, ts, RollbackDetail(wp, ts, seq, ts, seq))

    def append_gap(self, batch: Batch, st: TopicState, count: int) -> None:
        """Rows that move the topic's offsets on by ``count`` without any message: one,
        unless the gap is larger than a row's count column holds (2^32 - 1)."""
        while True:
            ts, seq = self.allocate(st, 1)
            seq += 1
            if seq > keys.MAX_SEQ:
                ts, seq = ts + 1, 0
            base, n = st.next_offset, min(count, keys.MAX_ROW_COUNT)
            key = st.msg_prefix + _SUFFIX.pack(ts, seq)
            batch.mutations.append((key, keys.encode_gap(base, n)))
            batch.appended(st.intent_key, key, key, 1)
            end = base + n
            st.last_ts, st.last_seq, st.next_offset = ts, seq, end
            count -= n
            if count <= 0:
                break
        batch.after.append(lambda: self._on_visible(st, end))

    def stored(self, st: TopicState, wp: int) -> list[int]:
        """[messages, last write_ts, last pseq, rows] of a write pointer's PayloadTable rows."""
        stored = st.stored.get(wp)
        if stored is None:
            if wp > st.known_wp:  # handed out since ``st`` was loaded: none not seen here
                stored = st.stored[wp] = [0, 0, -1, 0]
            else:
                stored = st.stored[wp] = list(self._tables.payloads.summary(st, wp))
        return stored
