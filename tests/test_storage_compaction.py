"""Log compaction (storage/compaction.py) against a dict model, with kills at every step.

Random histories of keyed values, tombstones, keyless messages, Kafka batches kept as
sent, committed and rolled-back transactions are written to a compacted topic; the
cleaner then runs on the memory:// engine (atomic per row only, rows of a write landing
in a shuffled order) armed to crash after a chosen number of rows. After each crash the
store is opened again on what is left, as a restarted process would, and the guarantees
Kafka gives are checked against the model: every message read has the offset, payload
and meta it was written with; for every key its latest message is there (or, for a
tombstone past delete.retention.ms, no message of that key at all); keyless messages
all stay; nothing rolled back comes back. Then the cleaner runs to the end and the
topic must hold exactly the latest message of each key.

``TMSGATE_COMPACTION_EXAMPLES`` sets the number of histories (a soak: 2000).
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from tmsgate.protocol import build_batch, decode_meta, encode_meta
from tmsgate.storage import (
    BackendError,
    Entry,
    Store,
    TopicId,
    memory,
    open_store,
)
from tmsgate.storage.compaction import PACE_SLICE_S, CompactionSettings, Pacer
from tmsgate.storage.memory import Faults, MemoryBackend

EXAMPLES = int(os.environ.get("TMSGATE_COMPACTION_EXAMPLES", "60"))
TOPIC = TopicId("default", "compacted")
SETTINGS = CompactionSettings(
    min_cleanable_dirty_ratio=0.0,
    segment_ms=0,
    delete_retention_ms=10_000,
    buffer_bytes=128 * 1500,  # ~1500 keys: histories with more keys take several passes
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


def _open(
    table: memory.MemoryTable, faults: Faults, clock: Clock, settings: CompactionSettings
) -> Store:
    while True:
        try:
            return Store(MemoryBackend(table, faults), clock=clock, compaction=settings)
        except BackendError:
            faults.crash_after_rows = None


def _read_all(store: Store) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    earliest, nxt = store.offsets(TOPIC)
    offset = earliest
    while offset < nxt:
        res = store.read(TOPIC, offset=offset, max_messages=1000, tx=store.transactions.snapshot())
        out += [(m.offset, m.payload, m.meta) for m in res.messages]
        if res.next_offset <= offset:
            break
        offset = res.next_offset
    return out


def _key(meta: bytes | None) -> bytes | None:
    return decode_meta(meta)[0]


def _write_history(store: Store, rng: random.Random, clock: Clock) -> dict[int, tuple]:
    """-> offset -> (payload, meta, visible) of everything written."""
    written: dict[int, tuple] = {}
    n_keys = rng.choice([3, 20, 300, 3000])
    for _ in range(rng.randint(5, 40)):
        clock.now += rng.randint(0, 3)
        kind = rng.random()
        size = rng.randint(1, 120)
        items = []
        for _ in range(size):
            k = f"k{rng.randrange(n_keys)}".encode() if rng.random() > 0.03 else None
            value = None if (k is not None and rng.random() < 0.1) else os.urandom(8)
            items.append((k, value))
        if kind < 0.25:  # a Kafka batch kept as sent
            batch = bytes(build_batch([(i, clock.now, k, v, []) for i, (k, v) in enumerate(items)]))
            # Half with the keys Produce decoded (the cleaner then reads the row back only
            # to rewrite it), half without (it reads and decodes the row).
            produced = None
            if rng.random() < 0.5:
                produced = (
                    [k for k, _ in items],
                    [i for i, (_, v) in enumerate(items) if v is None],
                )
            r = store.publish_kafka_batch_async(TOPIC, batch, len(items), None, produced).result()
            metas = [encode_meta(k, [], clock.now) for k, _ in items]
            for i, ((_, v), m) in enumerate(zip(items, metas, strict=True)):
                written[r.base_offset + i] = (v, m, True)
            continue
        entries = [Entry(v, meta=encode_meta(k, [], clock.now)) for k, v in items]
        if kind < 0.4:  # a transaction: committed, or rolled back
            tx = store.transactions.start()
            store.store(TOPIC, entries, tx)
            r = store.publish(TOPIC, [], tx=tx)
            commit = rng.random() < 0.7
            if commit:
                store.transactions.commit(tx)
            else:
                store.rollback(TOPIC, r)
                store.transactions.abort(tx)
        else:
            r = store.publish(TOPIC, entries)
            commit = True
        for i, e in enumerate(entries):
            written[r.base_offset + i] = (e.payload, e.meta, commit)
    return written


def _check(
    read: list[tuple], written: dict[int, tuple], final: bool, tombstones_gone: bool
) -> None:
    latest: dict[bytes, int] = {}
    for offset, (_, meta, visible) in sorted(written.items()):
        k = _key(meta)
        if visible and k is not None:
            latest[k] = offset
    seen = {}
    last = -1
    for offset, payload, meta in read:
        assert offset > last, "offsets go up"
        last = offset
        want = written.get(offset)
        assert want is not None and want[2], f"offset {offset} was never visible"
        assert (payload, meta) == (want[0], want[1]), f"offset {offset} changed"
        seen[offset] = _key(meta)
    for k, offset in latest.items():
        tomb = written[offset][0] is None
        if tomb and tombstones_gone:
            assert not any(v == k for v in seen.values()), f"key {k!r} came back"
        elif tomb:
            # kept, unless the cleaner may remove it already: then nothing older either
            if offset not in seen:
                assert not any(v == k for v in seen.values()), f"key {k!r} came back"
        else:
            assert offset in seen, f"latest value of {k!r} (offset {offset}) is gone"
    keyless = [o for o, (_, m, v) in written.items() if v and _key(m) is None]
    assert all(o in seen for o in keyless), "a keyless message was removed"
    if final:  # exactly the latest of each key (a tombstone: while it is kept)
        values = {o for o in latest.values() if written[o][0] is not None}
        tombs = {o for o in latest.values() if written[o][0] is None}
        assert set(seen) - tombs == set(keyless) | values
        if tombstones_gone:
            assert not set(seen) & tombs


@pytest.mark.parametrize("seed", range(EXAMPLES))
def test_compaction_model_with_kills(seed: int) -> None:
    rng = random.Random(seed)
    name = f"compaction-{uuid.uuid4().hex}"
    table = memory.table(name)
    faults = Faults(seed=seed)
    clock = Clock()
    try:
        store = _open(table, faults, clock, SETTINGS)
        store.create_topic(TOPIC, {"cleanup.policy": "compact"})
        written = _write_history(store, rng, clock)
        clock.now += 5
        for _ in range(rng.randint(1, 4)):  # cleaner runs, each killed after some rows
            faults.crash_after_rows = rng.randint(0, 60)
            with contextlib.suppress(BackendError):
                store.compact()
            faults.crash_after_rows = None
            store = _open(table, faults, clock, SETTINGS)
            _check(_read_all(store), written, final=False, tombstones_gone=False)
            clock.now += rng.choice([1, 20_000])
        clock.now += 61_000  # past compaction.TX_SETTLE_MS: transactions are cleaned too
        store.compact()
        store.compact()
        _check(_read_all(store), written, final=True, tombstones_gone=False)
        # Past delete.retention.ms since the passes that cleaned them: tombstones go.
        clock.now += 20_000
        store.compact()
        store.compact()
        _check(_read_all(store), written, final=True, tombstones_gone=True)
        store.close()
    finally:
        memory.drop(name)


def test_cleaning_on_every_engine(any_engine_url: str) -> None:
    """min.compaction.lag.ms and the head hold rows back; then plain rows, a Kafka batch
    kept as sent and a committed transaction's rows are cleaned, on leveldb://,
    memory:// and hbase:// (the Thrift stand-in), offsets unchanged."""
    clock = Clock()
    settings = CompactionSettings(min_cleanable_dirty_ratio=0.0, segment_ms=0)
    store = open_store(any_engine_url, clock=clock, compaction=settings)
    store.create_topic(TOPIC, {"cleanup.policy": "compact", "min.compaction.lag.ms": "1000"})
    meta = encode_meta(b"k", [], clock.now)
    for i in range(5):
        store.publish(TOPIC, [Entry(b"v%d" % i, meta=meta)])
    batch = bytes(build_batch([(i, clock.now, b"k", b"b%d" % i, []) for i in range(3)]))
    store.publish_kafka_batch_async(TOPIC, batch, 3).result()
    tx = store.transactions.start()
    store.store(TOPIC, [Entry(b"t0", meta=meta), Entry(b"t1", meta=encode_meta(b"j", [], 0))], tx)
    store.publish(TOPIC, [], tx=tx)
    store.transactions.commit(tx)
    store.compact()
    assert len(_read_all(store)) == 10  # all newer than min.compaction.lag.ms
    clock.now += 1001
    store.compact()
    # up to the transaction's rows, not yet TX_SETTLE_MS old: b2 is k's latest before them
    assert [o for o, _, _ in _read_all(store)] == [7, 8, 9]
    clock.now += 60_000
    store.compact()
    assert [(o, p) for o, p, _ in _read_all(store)] == [(8, b"t0"), (9, b"t1")]
    assert store.offsets(TOPIC) == (0, 10)  # offsets never change
    stats = store.cleaner.stats[TOPIC]
    assert stats.messages_removed == 8 and stats.passes == 2 and stats.bytes_reclaimed > 0
    assert store.compaction_status(TOPIC)["first_dirty_offset"] == 10
    store.close()


def test_delete_records_moves_the_log_start(tmp_path) -> None:
    from tmsgate.storage import OffsetOutOfRange

    store = open_store(f"leveldb://{tmp_path}")
    store.create_topic(TOPIC)
    for i in range(10):
        store.publish(TOPIC, [b"m%d" % i])
    assert store.delete_records(TOPIC, 4) == 4
    assert store.offsets(TOPIC) == (4, 10)
    with pytest.raises(OffsetOutOfRange):
        store.read(TOPIC, offset=3)
    assert store.read(TOPIC, offset=4).messages[0].payload == b"m4"
    assert store.delete_records(TOPIC, 2) == 4  # never back
    with pytest.raises(OffsetOutOfRange):
        store.delete_records(TOPIC, 11)
    store.cleanup()
    store.close()
    store = open_store(f"leveldb://{tmp_path}")  # durable
    assert store.offsets(TOPIC) == (4, 10)
    assert store.delete_records(TOPIC, -1) == 10
    store.cleanup()
    store.publish(TOPIC, [b"after"])
    assert store.offsets(TOPIC) == (10, 11)
    store.close()


def test_retention_bytes_deletes_the_oldest_rows(tmp_path) -> None:
    store = open_store(f"leveldb://{tmp_path}")
    store.create_topic(TOPIC, {"retention.bytes": "5000"})
    for i in range(20):
        store.publish(TOPIC, [b"%04d" % i + bytes(996)])  # a row of about 1 KiB each
    store.cleanup()
    earliest, nxt = store.offsets(TOPIC)
    assert nxt == 20 and 14 <= earliest <= 16  # at least 5000 bytes kept, the oldest gone
    assert store.read(TOPIC, offset=earliest).messages[0].payload[:4] == b"%04d" % earliest
    store.update_topic(TOPIC, {"retention.bytes": "5000", "cleanup.policy": "compact"})
    store.publish(TOPIC, [bytes(1000)] * 1)
    store.cleanup()
    assert store.offsets(TOPIC)[0] == earliest  # compact alone deletes nothing by size
    store.close()


def test_changing_a_compaction_setting_starts_the_cleaner_at_once(tmp_path) -> None:
    """The cleaner's backoff (an hour here) is for finding new work: a changed
    min.compaction.lag.ms is cleaned under at once, by the janitor's own thread."""
    url = f"leveldb://{tmp_path}"
    settings = CompactionSettings(min_cleanable_dirty_ratio=0.0, segment_ms=0, backoff_ms=3_600_000)
    store = open_store(url, compaction=settings)  # no janitor: written before it runs
    store.create_topic(TOPIC, {"cleanup.policy": "compact", "min.compaction.lag.ms": "3600000"})
    meta = encode_meta(b"k", [], 0)
    for i in range(5):
        store.publish(TOPIC, [Entry(b"v%d" % i, meta=meta)])
    store.close()
    store = open_store(url, compaction=settings, janitor_interval_s=3600)
    try:
        rewritten = threading.Event()
        store.add_rewrite_listener(lambda md: rewritten.set())
        # The janitor's first run, at start, reads the topic's settings before its stats
        # appear, and finds nothing cleanable; the next would be an hour later.
        deadline = time.monotonic() + 30
        while TOPIC not in store.cleaner.stats and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(_read_all(store)) == 5 and not rewritten.is_set()
        store.update_topic(TOPIC, {"cleanup.policy": "compact", "min.compaction.lag.ms": "0"})
        assert rewritten.wait(30)
        assert [(o, p) for o, p, _ in _read_all(store)] == [(4, b"v4")]
    finally:
        store.close()


class CountingBackend(MemoryBackend):
    """The memory engine, counting the MessageTable values read in full (scan, get)."""

    def __init__(self) -> None:
        super().__init__()
        self.read: list[bytes] = []

    def get(self, key: bytes) -> bytes | None:
        if key.startswith(b"M"):
            self.read.append(key)
        return super().get(key)

    def scan_heads(
        self, start: bytes, stop: bytes, head: int
    ) -> Iterator[tuple[bytes, bytes, int]]:
        # As MemoryBackend's, without counting: LevelDB's reads only the heads.
        return ((k, v[:head], len(v)) for k, v in MemoryBackend.scan(self, start, stop))

    def scan(self, start: bytes, stop: bytes, **kw: Any) -> Iterator[tuple[bytes, bytes]]:
        for key, value in super().scan(start, stop, **kw):
            if key.startswith(b"M"):
                self.read.append(key)
            yield key, value


def test_cleaning_with_the_keys_produce_gave() -> None:
    """Batches whose keys Produce gave (ProducedKeys) are cleaned as those the cleaner
    reads, reading only what it rewrites with survivors: a batch losing every record
    becomes a gap, one losing some keeps the others (read back for that), one losing none
    stays as sent, unread; the keys of rewritten rows are forgotten. Long keys are
    compared by digest, as when read."""
    clock = Clock()
    settings = CompactionSettings(min_cleanable_dirty_ratio=0.0, segment_ms=0)
    backend = CountingBackend()
    store = Store(backend, clock=clock, compaction=settings)
    try:
        store.create_topic(TOPIC, {"cleanup.policy": "compact"})
        long_key = b"L" * 40
        batches = [
            [(b"a", b"a0"), (b"b", b"b0"), (long_key, b"l0")],  # all replaced below
            [(b"a", b"a1"), (b"c", b"c1")],  # a replaced, c kept
            [(b"b", None), (long_key, b"l1"), (b"a", b"a2")],  # all latest: kept as sent
        ]
        for items in batches:
            raw = bytes(build_batch([(i, clock.now, k, v, []) for i, (k, v) in enumerate(items)]))
            produced = ([k for k, _ in items], [i for i, (_, v) in enumerate(items) if v is None])
            store.publish_kafka_batch_async(TOPIC, raw, len(items), None, produced).result()
        assert store.cleaner.produced.held() == 8
        backend.read.clear()
        store.compact()
        assert len(backend.read) == 1  # the second batch's row, to rewrite it
        clock.now += 1  # removed messages expire (TTL 0) once the clock moves on
        got = [(o, p, decode_meta(m)[0]) for o, p, m in _read_all(store)]
        assert got == [(4, b"c1", b"c"), (5, None, b"b"), (6, b"l1", long_key), (7, b"a2", b"a")]
        assert store.offsets(TOPIC) == (0, 8)
        assert store.cleaner.produced.held() == 3  # the two rewritten rows forgotten
    finally:
        store.close()


def test_the_pacer_keeps_the_cleaners_cpu_to_its_share() -> None:
    """Pacer: after a slice of PACE_SLICE_S, it sleeps until the slice's CPU time is
    ``share`` of slice and sleep; time spent waiting for the disk (wall time without CPU
    time) counts towards the sleep. Clocks of our own: no timing is asserted."""
    wall, cpu, slept = [0.0], [0.0], []

    def wait(s: float) -> bool:
        slept.append(round(s, 6))
        wall[0] += s
        return False

    pacer = Pacer(0.2, wait, clock=lambda: wall[0], cpu=lambda: cpu[0])

    def step(w: float, c: float) -> bool:
        wall[0] += w
        cpu[0] += c
        return pacer.pause()

    assert step(PACE_SLICE_S / 2, PACE_SLICE_S / 2) is False and slept == []  # mid-slice
    assert step(PACE_SLICE_S / 2, PACE_SLICE_S / 2) is False  # a slice all on the CPU:
    assert slept == [round(0.02 / 0.2 - 0.02, 6)]  # 20 ms of CPU in 100 ms of wall time
    assert step(0.02, 0.005) is False  # 5 ms of CPU, 15 ms waiting for the disk
    assert slept[-1] == round(0.005 / 0.2 - 0.02, 6)
    step(0.05, 0.005)  # waits for the disk already long enough: no sleep
    assert len(slept) == 2
    # a stop asked for during the sleep ends the pass
    stopping = Pacer(0.5, lambda s: True, clock=lambda: wall[0], cpu=lambda: cpu[0])
    wall[0] += 0.03
    cpu[0] += 0.03
    assert stopping.pause() is True
    # share 1: never sleeps
    never = Pacer(1.0, wait, clock=lambda: wall[0], cpu=lambda: cpu[0])
    wall[0] += 1
    cpu[0] += 1
    assert never.pause() is False and len(slept) == 2
