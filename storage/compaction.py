"""Log compaction: Kafka's cleaner, over the MessageTable (docs/compaction.md).

A topic whose ``cleanup.policy`` property holds ``compact`` keeps, for every message key,
at least its latest message. The cleaner works as Kafka's does, on the rows below the
head of the topic:

1. **Survey** the dirty part (from the checkpoint's first dirty offset to the topic's
   end): where the cleanable part ends. It ends at the first message newer than
   ``min.compaction.lag.ms``, at the first transaction still in progress (or committed
   within the last ``cleaner_rows.TX_SETTLE_MS``, so a reader's snapshot taken before
   its commit never sees it change), and at the *head*: the newest rows, less than
   ``segment.bytes`` of them and all published within ``segment.ms`` (Kafka's active
   segment, which it never cleans). It also gives the dirty ratio: dirty bytes over all
   bytes since the topic began; below ``min.cleanable.dirty.ratio`` nothing is cleaned
   unless a dirty message is older than ``max.compaction.lag.ms``.
2. **Map** the keys of the cleanable dirty part to their latest offset, in bounded
   memory (``CompactionSettings.buffer_bytes``): when the map is full, the pass ends
   there and the next pass takes the rest.
3. **Rewrite** every row from the topic's start to that end whose messages lose one:
   a message is removed when the map names a later offset for its key. Rows keep their
   keys, first offsets and counts, so offsets and message ids never change: a row
   whose messages all go becomes a gap row (``F_GAP``), one that keeps some becomes a
   packed row whose removed messages are empty and already expired (TTL 0), which every
   reader passes over. A Kafka batch kept as sent is rewritten the same way (its
   survivors keep their offsets). A committed transaction's reference row is written
   out as a packed row first (its PayloadTable rows deleted after), and an aborted
   one's becomes a gap.
4. **Tombstones** (a null payload) that are the latest for their key are removed once
   ``delete.retention.ms`` has passed since a pass first cleaned them, in a second
   phase, after every older message of their key is durably gone.
5. The **checkpoint** (state area ``cleaner``) records the new first dirty offset, the
   clean part's size and when each pass ended.

Every write is one row, through the store's writer, and each phase's writes are
durable before the next phase's begin: after kill -9 at any point, every key still has
its latest message (a removal needs a later message of its key that the same phase
keeps), a removed tombstone's older messages were gone first, and the pass simply runs
again from the old checkpoint (its decisions are the same). Messages without a key (a
message published over HTTP has none) are never removed.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from . import keys
from .backend import Mutation
from .cleaner_rows import KeyOf, Row, RowReader
from .errors import TopicNotFound
from .ids import TopicId, TopicMetadata
from .produced_keys import PRODUCED_KEY_BYTES, ProducedKeys
from .topics import TopicState

if TYPE_CHECKING:  # janitor.py runs the cleaner: imported for the type only
    from .janitor import Housekeeping

log = logging.getLogger(__name__)

CLEANUP_POLICY = "cleanup.policy"
AREA = "cleaner"
MAX_LONG = (1 << 63) - 1
# What one key of the map costs in memory (a dict entry, a 16-byte digest, an int).
ENTRY_BYTES = 128
WRITE_CHUNK = 500  # rows per writer batch
PACE_SLICE_S = 0.02  # the cleaner's work between two pauses (CompactionSettings.max_share)
PASSES_KEPT = 200  # pass end times remembered for tombstones (dropping one only delays)
_PLACEHOLDER = keys.PACKED.pack(-1, -1, 0)  # a removed message: no meta or payload, TTL 0
_HEAD = keys.ROW_HEAD
_DROPPED: list[bytes | None] = []  # a mapped row's keys, no longer needed (never changed)


@dataclass(frozen=True, slots=True)
class CompactionSettings:
    """Kafka's compaction configs: the gateway's (broker) defaults, which a topic's own
    properties of the same names override (``for_topic``)."""

    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = MAX_LONG
    delete_retention_ms: int = 86_400_000
    segment_ms: int = 604_800_000
    segment_bytes: int = 1 << 30
    buffer_bytes: int = 128 << 20  # the key map's memory (log.cleaner.dedupe.buffer.size)
    backoff_ms: int = 15_000  # between cleaner runs (log.cleaner.backoff.ms)
    produced_keys_bytes: int = 64 << 20  # ProducedKeys' memory
    # The most of the time the cleaner's thread runs (its CPU time over the wall time,
    # see _pace); it sleeps the rest. The cleaner's Python holds the interpreter lock the
    # event loop and the store's writer need (Kafka's cleaner threads take other cores,
    # and log.cleaner.io.max.bytes.per.second bounds them). A million records just
    # written need about 0.2 s of it: at 0.2 that is about a second, with produce to
    # another topic at 0.8x or more of its rate (docs/benchmarks.md, compaction).
    max_share: float = 0.2

    def for_topic(self, props: Mapping[str, str]) -> CompactionSettings:
        changes: dict[str, Any] = {}
        for attr, name, conv in _TOPIC_PROPERTIES:
            raw = props.get(name)
            if raw is not None:
                try:
                    changes[attr] = conv(raw)
                except ValueError:
                    log.warning("topic property %s=%r is not a number: ignored", name, raw)
        return replace(self, **changes) if changes else self


_TOPIC_PROPERTIES: tuple[tuple[str, str, Callable[[str], Any]], ...] = (
    ("min_cleanable_dirty_ratio", "min.cleanable.dirty.ratio", float),
    ("min_compaction_lag_ms", "min.compaction.lag.ms", int),
    ("max_compaction_lag_ms", "max.compaction.lag.ms", int),
    ("delete_retention_ms", "delete.retention.ms", int),
    ("segment_ms", "segment.ms", int),
    ("segment_bytes", "segment.bytes", int),
)


def policies(props: Mapping[str, str]) -> set[str]:
    raw = props.get(CLEANUP_POLICY, "delete")
    return {p.strip() for p in raw.split(",") if p.strip()}


def is_compacted(props: Mapping[str, str]) -> bool:
    return "compact" in policies(props)


@dataclass(slots=True)
class TopicCleanerStats:
    """What ``topics describe`` and the metrics show of one topic's cleaning."""

    dirty_ratio: float = 0.0
    lag_ms: int = 0  # age of the oldest dirty message (0: none)
    bytes_reclaimed: int = 0  # since the gateway started
    messages_removed: int = 0
    passes: int = 0
    last_pass_ms: int = 0  # when the last pass ended (store clock)
    first_dirty_offset: int = 0


@dataclass(slots=True)
class _Checkpoint:
    generation: int
    dirty: int = 0  # first dirty offset
    clean_bytes: int = 0
    passes: list[list[int]] = field(default_factory=list)  # [end offset, time] per pass
    due: int | None = None  # when the first kept tombstone may go (a pass then)

    def first_cleaned_ms(self, offset: int) -> int | None:
        for end, when in self.passes:
            if offset < end:
                return when
        return None


@dataclass(slots=True)
class _Mapped:
    """What a pass's map keeps of the dirty rows it read, for the rewrite: rows without
    their values or keys. A row of plain messages (none gone, no transaction) keeps
    exactly the messages whose offsets the map holds as their key's latest, and its
    keyless ones, so the rewrite needs neither a second read nor a look at each message
    (a row that loses them all, most of a compacted topic, is never read again). Other
    rows are read again and decided message by message."""

    rows: list[Row] = field(default_factory=list)
    keyless: dict[int, list[int]] = field(default_factory=dict)  # row base -> offsets
    latest: list[int] = field(default_factory=list)  # the map's offsets, sorted


class _Stopped(Exception):
    """The store is closing: the cleaner's pass ends at its next pause."""


class Pacer:
    """Keeps a thread's CPU time to at most ``share`` of the wall time: ``pause()``,
    called between small steps, sleeps after each slice of PACE_SLICE_S. CPU time is
    what counts, the interpreter lock taken from the event loop; waiting for the disk
    (reads outside the lock) takes none, and the slice's wall time already holds it, so
    the sleep is only what brings the CPU time down to ``share`` of slice and sleep."""

    def __init__(
        self,
        share: float,
        wait: Callable[[float], bool],
        clock: Callable[[], float] = time.perf_counter,
        cpu: Callable[[], float] = time.thread_time,
    ) -> None:
        self.share = min(max(share, 0.01), 1.0)
        self._wait, self._clock, self._cpu = wait, clock, cpu
        self.start_slice()

    def start_slice(self) -> None:
        self._started, self._cpu_at = self._clock(), self._cpu()

    def pause(self) -> bool:
        """-> True if ``wait`` returned True (the thread is asked to stop)."""
        took = self._clock() - self._started
        if took < PACE_SLICE_S:
            return False
        pause = (self._cpu() - self._cpu_at) / self.share - took
        stop = self.share < 1.0 and pause > 0 and self._wait(pause)
        self.start_slice()
        return stop


class Cleaner:
    """Compacts the store's compacted topics; run by the janitor's thread, so it never
    races the janitor's deletes. ``rewritten(topic)`` is told after rows changed (caches
    of what was read before must go)."""

    def __init__(
        self,
        house: Housekeeping,
        settings: CompactionSettings,
        key_of: KeyOf,
        rewritten: Callable[[TopicMetadata], None] | None = None,
    ) -> None:
        self._house = house
        self.settings = settings
        self._rewritten = rewritten
        self.stats: dict[TopicId, TopicCleanerStats] = {}
        # Per topic: (generation, the dirty rows a survey read), see _survey.
        self._surveyed: dict[TopicId, tuple[int, list[tuple[int, int, int]]]] = {}
        self.produced = ProducedKeys(settings.produced_keys_bytes // PRODUCED_KEY_BYTES)
        self._read = RowReader(house, key_of, self.produced, self._pace)
        # Set by stop(): a pass ends at its next pause (every step is atomic per row, so a
        # pass left half done is what a kill leaves, and the next run carries on).
        self._stopping = threading.Event()
        self._pacer = Pacer(settings.max_share, wait=self._stopping.wait)

    def stop(self) -> None:
        self._stopping.set()

    def _pace(self) -> None:
        """Called between rows: the Pacer's pause (``_Stopped`` once the store closes)."""
        if self._pacer.pause() or self._stopping.is_set():
            raise _Stopped

    # --- one run over every compacted topic ------------------------------------------------
    def run(self) -> dict[str, int]:
        totals = {"compacted_topics": 0, "messages_removed": 0, "bytes_reclaimed": 0}
        # The first slice starts now: measured from the last run's end, the wait between
        # runs would count as work, and the first pause of a run lasted a share of it.
        self._pacer.start_slice()
        for md in self._house.all_topics():
            if md.generation <= 0 or not is_compacted(md.properties):
                continue
            try:
                removed, reclaimed = self.clean(md)
            except TopicNotFound:
                continue  # deleted meanwhile
            except _Stopped:
                log.info("cleaner stopped mid-pass (the store is closing)")
                break
            if removed or reclaimed:
                totals["compacted_topics"] += 1
                totals["messages_removed"] += removed
                totals["bytes_reclaimed"] += reclaimed
        return totals

    def clean(self, md: TopicMetadata) -> tuple[int, int]:
        """Passes over one topic until its cleanable part is clean: (messages removed,
        bytes reclaimed)."""
        removed = reclaimed = 0
        for _ in range(1000):  # each pass ends at the map's capacity or the cleanable end
            r, b, more = self._pass(md)
            removed, reclaimed = removed + r, reclaimed + b
            if not more:
                break
        return removed, reclaimed

    def status(self, md: TopicMetadata) -> dict[str, Any]:
        """A compacted topic's cleaning, read from its checkpoint and a survey of its
        dirty part (no write): what ``tmsgate topics describe`` shows."""
        st: TopicState = self._house.topic_state(md.topic)
        s = self.settings.for_topic(st.metadata.properties)
        now = self._house.clock()
        ck = self._load(st)
        end, dirty, oldest = self._survey(st, ck, s, now, pace=False)
        total = ck.clean_bytes + dirty
        return {
            "first_dirty_offset": ck.dirty,
            "cleanable_end_offset": end,
            "clean_bytes": ck.clean_bytes,
            "dirty_bytes": dirty,
            "dirty_ratio": round(dirty / total, 4) if total else 0.0,
            "lag_ms": now - oldest if oldest is not None else 0,
            "last_pass_ms": ck.passes[-1][1] if ck.passes else None,
        }

    # --- one pass ------------------------------------------------------------------------
    def _pass(self, md: TopicMetadata) -> tuple[int, int, bool]:
        house = self._house
        st: TopicState = house.topic_state(md.topic)
        if st.metadata.generation != md.generation or not is_compacted(st.metadata.properties):
            return 0, 0, False
        s = self.settings.for_topic(st.metadata.properties)
        now = house.clock()
        began, began_cpu = time.perf_counter(), time.thread_time()
        ck = self._load(st)
        stats = self.stats.setdefault(st.topic, TopicCleanerStats())
        stats.first_dirty_offset = ck.dirty
        end, dirty_bytes, oldest = self._survey(st, ck, s, now)
        total = ck.clean_bytes + dirty_bytes
        stats.dirty_ratio = dirty_bytes / total if total else 0.0
        stats.lag_ms = now - oldest if oldest is not None else 0
        tombstones_due = ck.due is not None and now >= ck.due
        if end <= ck.dirty and not tombstones_due:
            return 0, 0, False
        overdue = oldest is not None and now - oldest >= s.max_compaction_lag_ms
        if stats.dirty_ratio < s.min_cleanable_dirty_ratio and not (overdue or tombstones_due):
            return 0, 0, False
        cleanable = end
        if end > ck.dirty:
            key_map, end, mapped = self._map(st, ck, end, s, now)
        else:  # only tombstones to remove from the clean part
            key_map, end, mapped = {}, ck.dirty, _Mapped()
        removed, before, after, due = self._rewrite(st, ck, key_map, mapped, end, s, now)
        ck.dirty, ck.clean_bytes, ck.due = end, after, due
        ck.passes.append([end, now])
        del ck.passes[:-PASSES_KEPT]
        self._save(st, ck)
        stats.passes += 1
        stats.messages_removed += removed
        stats.bytes_reclaimed += max(before - after, 0)
        stats.last_pass_ms = now
        stats.first_dirty_offset = end
        if removed and self._rewritten is not None:
            self._rewritten(st.metadata)
        log.info(
            "compacted %s up to offset %d: %d messages removed, %d bytes reclaimed "
            "(%.2f s, of which %.2f s on the CPU)",
            st.topic,
            end,
            removed,
            before - after,
            time.perf_counter() - began,
            time.thread_time() - began_cpu,
        )
        return removed, max(before - after, 0), end < cleanable

    def _survey(
        self, st: TopicState, ck: _Checkpoint, s: CompactionSettings, now: int, pace: bool = True
    ) -> tuple[int, int, int | None]:
        """(cleanable end offset, its dirty bytes, publish time of its oldest message);
        without ``pace`` (``status``, on a caller's thread), never pausing."""
        lag_cut = now - s.min_compaction_lag_ms
        seg_cut = now - s.segment_ms
        # (end offset, size, ts) of each dirty row, kept from the last survey: a topic's
        # head (up to segment.bytes, a GiB by default) is read once, not every run.
        gen = st.metadata.generation
        known = self._surveyed.get(st.topic)
        rows = [r for r in known[1] if r[0] > ck.dirty] if known and known[0] == gen else []
        start = rows[-1][0] if rows else ck.dirty
        for end, size, ts in self._read.sizes(st, start, st.visible_offset, now, pace):
            if ts > lag_cut:
                break
            rows.append((end, size, ts))
        self._surveyed[st.topic] = (gen, rows)
        # The head: the newest rows, under segment.bytes together, published within
        # segment.ms; the cleanable part ends where it begins.
        tail = 0
        cut = len(rows)
        while cut > 0:
            _, size, ts = rows[cut - 1]
            if tail + size >= s.segment_bytes or ts <= seg_cut:
                break
            tail += size
            cut -= 1
        kept = rows[:cut]
        if not kept:
            return ck.dirty, 0, None
        return kept[-1][0], sum(r[1] for r in kept), kept[0][2]

    def _map(
        self, st: TopicState, ck: _Checkpoint, end: int, s: CompactionSettings, now: int
    ) -> tuple[dict[bytes, int], int, _Mapped]:
        """The latest offset of every key in [dirty, end), where the map stopped, and the
        rows it read."""
        cap = max(1000, s.buffer_bytes // ENTRY_BYTES)
        key_map: dict[bytes | None, int] = {}
        mapped = _Mapped()
        reached = ck.dirty
        for row in self._read.rows(st, ck.dirty, end, now):
            ks = row.keys
            if ks is None:  # a gap: kept as it is
                mapped.rows.append(row)
                reached = row.base + row.count
                continue
            if key_map and len(key_map) + len(ks) > cap:
                break
            base = row.base
            key_map.update(zip(ks, range(base, base + len(ks)), strict=True))
            if None in ks:
                mapped.keyless[base] = [base + i for i, k in enumerate(ks) if k is None]
            row.value, row.loaded, row.keys = None, None, _DROPPED  # read again if rewritten
            mapped.rows.append(row)
            reached = base + row.count
        key_map.pop(None, None)  # keyless messages are never removed
        mapped.latest = sorted(key_map.values())
        return key_map, reached, mapped  # type: ignore[return-value]

    def _rewrite(
        self,
        st: TopicState,
        ck: _Checkpoint,
        key_map: dict[bytes, int],
        mapped: _Mapped,
        end: int,
        s: CompactionSettings,
        now: int,
    ) -> tuple[int, int, int, int | None]:
        """Rewrite rows below ``end``: (messages removed, bytes before, bytes after, when
        the first tombstone kept may be removed). Rows below the first dirty offset are
        read again; the dirty rows are the map's (``mapped``)."""
        # Phase 1 is written as it is found, a chunk at a time (any part of it may land:
        # each removal keeps the later message of its key), each chunk followed by the
        # PayloadTable rows of rows it wrote out; phase 2 (tombstones) after all of it.
        phase1: list[Mutation] = []
        payload_keys: list[bytes] = []  # PayloadTable rows of rows written out or gapped
        phase2: list[Mutation] = []
        totals = [0, 0, 0]  # removed, bytes before, bytes after
        due: list[int] = []  # when kept tombstones may go

        def flush(force: bool = False) -> None:
            if phase1 and (force or len(phase1) >= WRITE_CHUNK):
                self._write(phase1)
                phase1.clear()
            if payload_keys and (force or not phase1):
                self._write([(k, None) for k in payload_keys])
                payload_keys.clear()

        def decide(row: Row) -> None:
            """A row's messages one by one, against the map and the tombstones' age."""
            totals[1] += row.size
            if row.keys is None:
                totals[2] += row.size
                return
            if row.aborted:  # never visible again: its offsets become a gap
                value = keys.encode_gap(row.base, row.count)
                phase1.append((row.key, value))
                if row.wp is not None:
                    payload_keys.extend(self._payload_keys(st, row.wp))
                totals[2] += len(value)
                return
            tombstone_at = set(row.tombstones)
            gone_at = set(row.gone)
            keep: list[bool] = []
            expired: list[int] = []  # tombstones past delete.retention.ms
            for i, k in enumerate(row.keys):
                offset = row.base + i
                if i in gone_at:
                    keep.append(False)
                    continue
                latest = key_map.get(k) if k is not None else None
                if latest is not None and latest > offset:
                    keep.append(False)
                    continue
                keep.append(True)
                if i in tombstone_at and k is not None:
                    cleaned = ck.first_cleaned_ms(offset) if offset < ck.dirty else None
                    if cleaned is not None and cleaned <= horizon:
                        expired.append(i)
                        continue
                    due.append((now if cleaned is None else cleaned) + s.delete_retention_ms)
            lost = [i for i, kept in enumerate(keep) if not kept]
            fresh = [i for i in lost if i not in gone_at]
            if not lost and row.wp is None and not expired:
                totals[2] += row.size
                return
            if row.value is None:  # its keys came from Produce: its messages are read now
                again = self._read.reread(st, row, now)
                if again is None:
                    totals[2] += row.size
                    return
                row = again
            value = row.value
            if lost or row.wp is not None:
                value = _rewritten(row, keep)
                if value != row.value:
                    phase1.append((row.key, value))
                if row.wp is not None:
                    payload_keys.extend(self._payload_keys(st, row.wp))
            if expired:
                for i in expired:
                    keep[i] = False
                value = _rewritten(row, keep)
                phase2.append((row.key, value))
                fresh += expired
            totals[0] += len(fresh)
            totals[2] += len(value)  # type: ignore[arg-type]

        horizon = now - s.delete_retention_ms
        for row in self._read.rows(st, 0, min(end, ck.dirty), now):
            flush()
            decide(row)
        latest = mapped.latest
        for row in mapped.rows:
            self._pace()
            flush()
            if row.base < ck.dirty:
                continue  # decided above, with the clean part
            if row.keys is None:  # a gap
                totals[1] += row.size
                totals[2] += row.size
                continue
            if row.gone or row.wp is not None or row.aborted:
                again = self._read.reread(st, row, now)
                if again is not None:
                    decide(again)
                continue
            # A plain dirty row: it keeps its messages that are their key's latest (the
            # map holds each key's latest offset in the dirty part) and its keyless ones.
            first, stop = row.base, row.base + row.count
            kept = latest[bisect_left(latest, first) : bisect_left(latest, stop)]
            keyless = mapped.keyless.get(row.base, ())
            if row.tombstones and not set(kept).isdisjoint(first + i for i in row.tombstones):
                due.append(now + s.delete_retention_ms)  # first cleaned now: kept for now
            if keyless:
                kept = sorted([*kept, *keyless])
            totals[1] += row.size
            if len(kept) == row.count:
                totals[2] += row.size
                continue
            totals[0] += row.count - len(kept)
            if not kept:
                value = keys.encode_gap(row.base, row.count)
            else:
                again = self._read.reread(st, row, now)
                if again is None:
                    totals[0] -= row.count - len(kept)
                    totals[2] += row.size
                    continue
                keep = [False] * row.count
                for offset in kept:
                    keep[offset - first] = True
                value = _rewritten(again, keep)
            phase1.append((row.key, value))
            totals[2] += len(value)
            self.produced.forget(st.topic, st.metadata.generation, row.base)
        flush(force=True)
        self._write(phase2)
        removed, before, after = totals
        return removed, before, after, min(due) if due else None

    def _payload_keys(self, st: TopicState, wp: int) -> list[bytes]:
        found = list(self._house.tables.payloads.row_keys(st, abs(wp)))
        return [*found, st.referenced_prefix + keys.U64.pack(abs(wp))]

    def _write(self, mutations: list[Mutation]) -> None:
        for i in range(0, len(mutations), WRITE_CHUNK):
            self._house.write(mutations[i : i + WRITE_CHUNK]).result()

    # --- checkpoint ----------------------------------------------------------------------
    def _load(self, st: TopicState) -> _Checkpoint:
        raw = self._house.tables.metadata.state(AREA, str(st.topic))
        gen = st.metadata.generation
        if raw is None:
            return _Checkpoint(gen)
        doc = json.loads(raw)
        if doc.get("generation") != gen:
            return _Checkpoint(gen)
        return _Checkpoint(
            gen, int(doc["dirty"]), int(doc["clean_bytes"]), doc["passes"], doc.get("due")
        )

    def _save(self, st: TopicState, ck: _Checkpoint) -> None:
        doc = {
            "generation": ck.generation,
            "dirty": ck.dirty,
            "clean_bytes": ck.clean_bytes,
            "passes": ck.passes,
            "due": ck.due,
        }
        key = keys.state_key(AREA, str(st.topic))
        self._house.write([(key, json.dumps(doc).encode())]).result()


def _rewritten(row: Row, keep: list[bool]) -> bytes:
    """The row with only the kept messages (same key, first offset and count)."""
    if not any(keep):
        return keys.encode_gap(row.base, row.count)
    parts = [_HEAD.pack(keys.F_PACKED | keys.F_PAYLOAD, row.base, row.count)]
    pack = keys.PACKED.pack
    for kept, (payload, meta, ttl) in zip(keep, row.messages(), strict=True):
        if not kept:
            parts.append(_PLACEHOLDER)
            continue
        m = -1 if meta is None else len(meta)
        p = -1 if payload is None else len(payload)
        parts += (pack(m, p, -1 if ttl is None else ttl), meta or b"", payload or b"")
    return b"".join(bytes(p) for p in parts)
