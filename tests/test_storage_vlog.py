"""The value log beside LevelDB: large values round-trip, survive reopening, roll over
segments, and segments no row points into any more are deleted (and only those)."""

from __future__ import annotations

import ctypes
import mmap
import os
import random
from pathlib import Path

import plyvel
import pytest
from tmsgate.storage import BackendError, TopicId, leveldb, open_backend, vlog
from tmsgate.storage.leveldb import VALUE_LOG_MIN_BYTES, VLOG_DIR, LevelDBBackend
from tmsgate.storage.vlog import MAGIC


@pytest.fixture(autouse=True)
def every_write_uses_the_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests write a few values at a time; small writes normally stay inline."""
    monkeypatch.setattr(leveldb, "SMALL_WRITE_MUTATIONS", 0)


def segments(path: Path) -> list[str]:
    return sorted(n for n in os.listdir(path / VLOG_DIR) if n.endswith(".vlog"))


def value(i: int, size: int = 1000) -> bytes:
    return (f"{i:08d}".encode() * (size // 8 + 1))[:size]


def test_small_values_stay_inline_and_large_ones_go_to_the_log(tmp_path: Path) -> None:
    b = LevelDBBackend(str(tmp_path))
    small, large = b"s" * (VALUE_LOG_MIN_BYTES - 1), b"L" * VALUE_LOG_MIN_BYTES
    b.write([(b"a", small), (b"b", large), (b"c", b"")])
    assert b.get(b"a") == small and b.get(b"b") == large and b.get(b"c") == b""
    assert list(b.scan(b"a", b"d")) == [(b"a", small), (b"b", large), (b"c", b"")]
    assert next(iter(b.scan(b"a", b"d", reverse=True))) == (b"c", b"")
    b.close()
    db = plyvel.DB(str(tmp_path))
    try:
        assert db.get(b"a") == b"\x00" + small  # inline, behind its tag
        stored = db.get(b"b")  # a pointer and the value's head, not the value
        assert stored == vlog.STORED_POINTER.pack(*vlog.POINTER.unpack_from(stored), large)
    finally:
        db.close()
    data = b"".join((tmp_path / VLOG_DIR / n).read_bytes() for n in segments(tmp_path))
    assert large in data and small not in data


def test_a_small_write_keeps_its_values_inline_unless_they_are_huge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(leveldb, "SMALL_WRITE_MUTATIONS", 16)
    b = LevelDBBackend(str(tmp_path))
    one_kib = [(f"s{i:02d}".encode(), value(i)) for i in range(16)]
    bulk = [(f"b{i:02d}".encode(), value(i)) for i in range(17)]
    huge = [(b"h", value(1, leveldb.SMALL_WRITE_VALUE_LOG_MIN_BYTES))]
    # Few mutations but many bytes (packed rows: a produced batch each) go to the log too.
    packed = [(f"p{i}".encode(), value(i, 40_000)) for i in range(2)]
    for write in (one_kib, bulk, huge, packed):
        b.write(write)
    b.close()
    db = plyvel.DB(str(tmp_path))
    try:
        assert all(db.get(k) == b"\x00" + v for k, v in one_kib)  # a trickle: inline
        pointer = vlog.STORED_POINTER.size
        assert all(len(db.get(k)) == pointer for k, _ in bulk)  # bulk: in the log
        assert len(db.get(b"h")) == pointer
        assert all(len(db.get(k)) == pointer for k, _ in packed)
    finally:
        db.close()
    b = LevelDBBackend(str(tmp_path))
    try:
        assert dict(b.scan(b"", b"\xff")) == dict(one_kib + bulk + huge + packed)
    finally:
        b.close()


def test_pointers_written_without_the_values_head_still_read(tmp_path: Path) -> None:
    """A store written before LevelDB kept each value's head with its pointer: its values,
    heads and sizes read the same, and its segments are still collected."""
    b = LevelDBBackend(str(tmp_path), vlog_segment_bytes=8 << 10)
    rows = {b"k%02d" % i: value(i, 2000) for i in range(20)}
    b.write(list(rows.items()))
    b.write([(b"z", value(99, 9000))])  # the next segments: the first ones complete
    b.close()
    db = plyvel.DB(str(tmp_path))
    try:
        for k in rows:
            db.put(k, db.get(k)[: vlog.POINTER.size])  # as an older version wrote it
    finally:
        db.close()
    b = LevelDBBackend(str(tmp_path), vlog_segment_bytes=8 << 10)
    assert all(b.get(k) == v for k, v in rows.items())
    assert list(b.scan(b"k", b"l")) == sorted(rows.items())
    assert list(b.scan_heads(b"k", b"l", 13)) == [
        (k, v[:13], len(v)) for k, v in sorted(rows.items())
    ]
    b.write([(k, None) for k in rows])
    assert b.collect_garbage()["vlog_segments_deleted"] > 0
    b.close()


def test_values_survive_reopen_and_segments_roll_over(tmp_path: Path) -> None:
    b = LevelDBBackend(str(tmp_path), vlog_segment_bytes=8 << 10)
    written = {}
    for batch in range(10):
        muts = [(f"k{batch:02d}{i:03d}".encode(), value(batch * 100 + i)) for i in range(7)]
        b.write(muts)
        written.update(muts)
    # one write of more entries than one pwritev takes, across several segments
    bulk = [(f"m{i:05d}".encode(), value(i, 300)) for i in range(1500)]
    b.write(bulk)
    written.update(bulk)
    # one value larger than a whole segment gets a segment of its own
    written[b"huge"] = value(1, 50_000)
    b.write([(b"huge", written[b"huge"])])
    assert len(segments(tmp_path)) > 5
    b.close()
    b = LevelDBBackend(str(tmp_path), vlog_segment_bytes=8 << 10)
    try:
        assert dict(b.scan(b"", b"\xff")) == written
        assert b.get(b"huge") == written[b"huge"]
    finally:
        b.close()


def test_garbage_collection_deletes_only_dead_segments(tmp_path: Path) -> None:
    b = LevelDBBackend(str(tmp_path), vlog_segment_bytes=16 << 10)
    keys = [f"k{i:04d}".encode() for i in range(120)]
    for i in range(0, len(keys), 10):
        b.write([(k, value(j)) for j, k in enumerate(keys[i : i + 10], start=i)])
    before = segments(tmp_path)
    assert len(before) >= 6
    assert b.collect_garbage()["vlog_segments_deleted"] == 0  # everything is live

    # The first 60 values are deleted and the next 30 overwritten: their old entries die.
    b.write([(k, None) for k in keys[:60]])
    b.write([(k, value(10_000 + i)) for i, k in enumerate(keys[60:90])])
    stats = b.collect_garbage()
    assert stats["vlog_segments_deleted"] > 0 and stats["vlog_bytes_freed"] > 0
    after = segments(tmp_path)
    assert set(before) - set(after), "no segment of the deleted values went away"
    for i, k in enumerate(keys):
        expected = None if i < 60 else value(10_000 + i - 60) if i < 90 else value(i)
        assert b.get(k) == expected, k
    b.close()
    b = LevelDBBackend(str(tmp_path), vlog_segment_bytes=16 << 10)
    try:
        assert len(list(b.scan(b"", b"\xff"))) == 60
        b.collect_garbage()  # a reopened log is judged from LevelDB the same way
        assert len(list(b.scan(b"", b"\xff"))) == 60
    finally:
        b.close()


def test_the_active_segment_is_never_collected(tmp_path: Path) -> None:
    b = LevelDBBackend(str(tmp_path))
    b.write([(b"k", value(1))])
    b.write([(b"k", None)])
    b.collect_garbage()
    b.write([(b"k2", value(2))])  # still appending to the same, active segment
    assert b.get(b"k2") == value(2)
    b.close()


def test_a_crash_between_the_log_and_leveldb_leaves_only_garbage(tmp_path: Path) -> None:
    b = LevelDBBackend(str(tmp_path), vlog_segment_bytes=16 << 10)
    b.write([(b"kept", value(1))])
    b.close()
    # What a kill between the value log's fsync and LevelDB's write leaves: an entry
    # in the log that no row points at (here: appended by hand to the last segment).
    last = tmp_path / VLOG_DIR / segments(tmp_path)[-1]
    with open(last, "ab") as f:
        f.write(b"\x00\x00\x00\x04\x00\x00\x00\x05lostvalue")
    b = LevelDBBackend(str(tmp_path), vlog_segment_bytes=16 << 10)
    try:
        assert list(b.scan(b"", b"\xff")) == [(b"kept", value(1))]
        b.write([(b"next", value(2))])
        assert b.get(b"next") == value(2)
    finally:
        b.close()


def test_a_store_from_before_the_value_log_is_refused(tmp_path: Path) -> None:
    db = plyvel.DB(str(tmp_path), create_if_missing=True)
    db.put(b"Tdefault:t\x00", b"{}")
    db.close()
    with pytest.raises(BackendError, match="older tmsgate"):
        LevelDBBackend(str(tmp_path))


def test_empty_and_torn_segment_files_are_tolerated(tmp_path: Path) -> None:
    b = LevelDBBackend(str(tmp_path))
    b.write([(b"k", value(1))])
    b.close()
    (tmp_path / VLOG_DIR / "0000000000000099.vlog").write_bytes(b"")
    (tmp_path / VLOG_DIR / "0000000000000100.vlog").write_bytes(MAGIC + b"\x00\x00\x00\x09")
    b = LevelDBBackend(str(tmp_path))
    try:
        assert b.get(b"k") == value(1)
        b.write([(b"k3", value(3))])
        b.collect_garbage()
        assert b.get(b"k3") == value(3)
        assert "0000000000000100.vlog" not in segments(tmp_path)
    finally:
        b.close()


def test_a_snapshot_copy_reads_values_from_the_log(tmp_path: Path) -> None:
    store = tmp_path / "store"
    b = LevelDBBackend(str(store))
    b.write([(b"k", value(7)), (b"s", b"small")])
    try:
        # the gateway still holds the store open: tools read a point-in-time copy
        copy = open_backend(f"leveldb://{store}", snapshot=True)
        try:
            assert copy.get(b"k") == value(7) and copy.get(b"s") == b"small"
        finally:
            copy.close()
    finally:
        b.close()


def test_expired_messages_free_their_segments(
    open_test_store, clock, store_url, monkeypatch
) -> None:
    monkeypatch.setattr(vlog, "SEGMENT_BYTES", 256 << 10)
    store = open_test_store()
    topic = TopicId("ns", "t")
    store.create_topic(topic, {"ttl": "10"})
    payloads = [value(i, 2000) for i in range(2000)]  # ~4 MB
    for i in range(0, len(payloads), 100):
        store.publish(topic, payloads[i : i + 100])
    got = store.read(topic, offset=0, max_messages=len(payloads)).messages
    assert [m.payload for m in got] == payloads
    path = Path(store_url.removeprefix("leveldb://"))
    before = segments(path)
    assert len(before) > 10
    clock.advance(20_000)
    store.publish(topic, [value(1, 2000)])
    stats = store.cleanup()
    # Every message went: 20 publishes of 100, in packed rows of about 64 KiB.
    assert stats["rows_deleted"] >= 20
    assert stats["vlog_segments_deleted"] >= len(before) - 2
    assert len(segments(path)) <= 2
    assert [m.payload for m in store.read(topic, offset=2000, max_messages=10).messages] == [
        value(1, 2000)
    ]


@pytest.mark.parametrize("window", ["default", "tiny"])
def test_a_scan_that_began_before_a_collection_still_reads_its_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, window: str
) -> None:
    """With a tiny cache window the old values are read from the files (vlog._pread) and
    a deleted segment's values from the mapping the scan's first read made."""
    if window == "tiny":
        monkeypatch.setattr(vlog, "CACHE_WINDOW", 4 << 10)
        monkeypatch.setattr(vlog, "_DROP_STEP", 4 << 10)
    b = LevelDBBackend(str(tmp_path), vlog_segment_bytes=8 << 10)
    keys = [f"k{i:03d}".encode() for i in range(40)]
    for i in range(0, 40, 5):
        b.write([(k, value(j)) for j, k in enumerate(keys[i : i + 5], start=i)])
    b.write([(b"z", value(99))])  # the active segment holds only this
    scan = b.scan(b"k", b"l")
    assert next(scan) == (keys[0], value(0))  # the scan's snapshot is taken
    b.write([(k, None) for k in keys])
    assert b.collect_garbage()["vlog_segments_deleted"] > 0
    rest = list(scan)  # its pointers lead into segments deleted just now
    assert rest == [(k, value(i)) for i, k in enumerate(keys[1:], start=1)]
    b.close()


def test_a_failed_log_write_writes_no_row_and_the_next_write_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = LevelDBBackend(str(tmp_path))
    b.write([(b"a", value(1))])
    real_pwritev, real_fdatasync = os.pwritev, os.fdatasync
    for broken in ("pwritev", "fdatasync"):

        def fail(*args: object) -> int:
            raise OSError(28, "No space left on device (injected)")

        monkeypatch.setattr(os, broken, fail)
        big = [(f"{broken}{i:04d}".encode(), value(i)) for i in range(400)]  # > one O_DSYNC
        with pytest.raises(BackendError, match="No space left"):
            b.write(big)
        monkeypatch.setattr(os, "pwritev", real_pwritev)
        monkeypatch.setattr(os, "fdatasync", real_fdatasync)
        assert b.get(big[0][0]) is None  # LevelDB never got the rows
        b.write([(b"b", value(2)), *big[:3]])  # the log goes on, in a new segment
        assert b.get(b"b") == value(2) and b.get(big[2][0]) == value(2)
    b.close()
    b = LevelDBBackend(str(tmp_path))
    try:
        assert dict(b.scan(b"", b"\xff")) == {
            b"a": value(1),
            b"b": value(2),
            **{
                f"{name}{i:04d}".encode(): value(i)
                for name in ("pwritev", "fdatasync")
                for i in range(3)
            },
        }
    finally:
        b.close()


def test_live_values_of_mostly_dead_segments_are_moved_and_the_segments_freed(
    tmp_path: Path,
) -> None:
    """One long-lived key per ten short-lived ones in every segment: once the short ones
    are gone, the long ones are copied to the head and the old segments deleted."""
    b = LevelDBBackend(str(tmp_path), vlog_segment_bytes=32 << 10)
    long_keys = []
    for i in range(40):
        batch = [(f"short{i:03d}-{j}".encode(), value(j)) for j in range(10)]
        batch.append((f"long{i:03d}".encode(), value(1000 + i)))
        long_keys.append(batch[-1][0])
        b.write(batch)
    b.write([(b"zz", value(1))])
    before = set(segments(tmp_path))
    assert len(before) >= 10
    b.write([(k, None) for k, _ in b.scan(b"short", b"shortz")])
    stats = b.collect_garbage()
    assert stats["vlog_values_relocated"] >= 30
    assert stats["vlog_segments_deleted"] >= len(before) - 3
    after = set(segments(tmp_path))
    assert len(before - after) >= len(before) - 3
    expected = {k: value(1000 + i) for i, k in enumerate(long_keys)} | {b"zz": value(1)}
    assert dict(b.scan(b"", b"\xff")) == expected
    b.close()
    b = LevelDBBackend(str(tmp_path), vlog_segment_bytes=32 << 10)
    try:
        assert dict(b.scan(b"", b"\xff")) == expected
        # The segment that was active during the first pass is complete now, and mostly
        # dead too; after it, nothing is left to move.
        b.collect_garbage()
        assert b.collect_garbage()["vlog_values_relocated"] == 0
        assert dict(b.scan(b"", b"\xff")) == expected
        assert len(segments(tmp_path)) <= 3
    finally:
        b.close()


def test_relocation_never_undoes_a_newer_write_or_a_delete(tmp_path: Path) -> None:
    b = LevelDBBackend(str(tmp_path))
    b.write([(b"k1", value(1)), (b"k2", value(2)), (b"k3", value(3))])
    stale = {k: b._db.get(k) for k in (b"k1", b"k2", b"k3")}  # the pointers as read
    b.write([(b"k1", value(11)), (b"k2", None)])  # written after the pointers were read
    moved = b._relocate([(k, stale[k], value(int(k[1:]))) for k in (b"k1", b"k2", b"k3")])
    assert moved == 1  # only k3 still held its pointer
    assert b.get(b"k1") == value(11) and b.get(b"k2") is None and b.get(b"k3") == value(3)
    assert b._db.get(b"k3") != stale[b"k3"]  # k3 now points at its copy
    b.close()


def test_counting_live_bytes_goes_on_across_passes_within_the_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vlog, "CENSUS_BUDGET", 7)
    b = LevelDBBackend(str(tmp_path), vlog_segment_bytes=32 << 10)
    for i in range(12):
        b.write(
            [(f"s{i:02d}{j}".encode(), value(j)) for j in range(9)] + [(b"L%02d" % i, value(i))]
        )
    b.write([(b"zz", value(1))])
    b.write([(k, None) for k, _ in b.scan(b"s", b"t")])
    first = b.collect_garbage()
    assert first["vlog_values_relocated"] == 0  # 7 entries looked at: no count finished yet
    relocated = first["vlog_values_relocated"]
    for _ in range(40):
        relocated += b.collect_garbage()["vlog_values_relocated"]
    assert relocated >= 8
    assert {k: v for k, v in b.scan(b"L", b"M")} == {b"L%02d" % i: value(i) for i in range(12)}
    b.close()


def test_after_a_failed_write_the_log_never_appends_behind_a_hole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed write may leave a hole in its segment; an acknowledged value appended
    after the hole would be invisible to the collector's walk, which would then delete
    it. So the next write starts a new segment."""
    b = LevelDBBackend(str(tmp_path), vlog_segment_bytes=64 << 10)
    a = [(b"a%03d" % i, value(i, 300)) for i in range(20)]
    b.write(a)
    real = os.pwritev, os.pwrite

    def full(*args: object) -> int:
        raise OSError(28, "No space left on device (injected)")

    # A full disk: the write fails, and so would starting a new segment right away.
    monkeypatch.setattr(os, "pwritev", full)
    monkeypatch.setattr(os, "pwrite", full)
    with pytest.raises(BackendError):
        b.write([(b"b%03d" % i, value(i, 300)) for i in range(20)])
    monkeypatch.setattr(os, "pwritev", real[0])
    monkeypatch.setattr(os, "pwrite", real[1])
    c = [(b"c%03d" % i, value(i, 300)) for i in range(20)]
    b.write(c)
    seg_of = lambda key: int.from_bytes(b._db.get(key)[1:5], "big")  # noqa: E731
    assert seg_of(b"c000") > seg_of(b"a000")
    b.write([(k, None) for k, _ in a])
    b.write([(b"z%03d" % i, value(i, 40_000)) for i in range(17)])  # rolls past C's segment
    for _ in range(3):
        b.collect_garbage()
    assert dict(b.scan(b"c", b"d")) == dict(c)
    b.close()
    b = LevelDBBackend(str(tmp_path), vlog_segment_bytes=64 << 10)
    try:
        assert dict(b.scan(b"c", b"d")) == dict(c)
    finally:
        b.close()


def test_a_failed_segment_creation_leaves_nothing_in_the_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = LevelDBBackend(str(tmp_path), vlog_segment_bytes=64 << 10)
    real_open = os.open
    failures = [1]

    def flaky_open(path: str, flags: int, *args: object) -> int:
        if failures and flags & os.O_DSYNC:
            failures.pop()
            raise OSError(24, "Too many open files (injected)")
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", flaky_open)
    written = {}
    for i in range(6):  # each write needs a new segment
        batch = [(b"k%02d%02d" % (i, j), value(j, 4000)) for j in range(20)]
        try:
            b.write(batch)
        except BackendError:
            assert i == 0  # only the write that met the failure fails
            continue
        written.update(batch)
    monkeypatch.setattr(os, "open", real_open)
    assert len(written) == 100
    assert dict(b.scan(b"", b"\xff")) == written
    b.close()


def test_mappings_are_bounded_and_values_stay_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each mapping holds a file descriptor: only MAX_MAPPED segments stay mapped."""
    monkeypatch.setattr(vlog, "MAX_MAPPED", 3)
    b = LevelDBBackend(str(tmp_path), vlog_segment_bytes=16 << 10)
    written = {}
    for i in range(20):
        batch = [(b"k%02d%d" % (i, j), value(i * 10 + j)) for j in range(8)]
        b.write(batch)
        written.update(batch)
    fds_before = len(os.listdir("/proc/self/fd"))
    for _ in range(2):
        assert dict(b.scan(b"", b"\xff")) == written
    assert sum(1 for s in b._vlog._segments.values() if s.map is not None) <= 3
    assert len(os.listdir("/proc/self/fd")) <= fds_before + 3
    b.close()


def test_a_snapshot_on_another_file_system_copies_what_was_appended_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tmsgate.storage.leveldb import snapshot_copy

    store = tmp_path / "store"
    b = LevelDBBackend(str(store))
    b.write([(b"a", value(1))])
    real_link, real_copy = os.link, leveldb.shutil.copy2

    def cross_device(src: str, dst: str) -> None:
        raise OSError(18, "Invalid cross-device link (injected)")

    copies = [0]

    def copy_then_write(src: str, dst: str) -> object:
        out = real_copy(src, dst)
        copies[0] += 1
        if copies[0] == 1:  # between the first segment copy and LevelDB's files
            b.write([(b"b", value(2))])
        return out

    monkeypatch.setattr(os, "link", cross_device)
    monkeypatch.setattr(leveldb.shutil, "copy2", copy_then_write)
    dest = snapshot_copy(str(store))
    monkeypatch.setattr(os, "link", real_link)
    monkeypatch.setattr(leveldb.shutil, "copy2", real_copy)
    copy = LevelDBBackend(dest, temporary=True)
    try:
        assert copy.get(b"a") == value(1)
        assert copy.get(b"b") in (None, value(2))  # never zeros: all or nothing
    finally:
        copy.close()
        b.close()


def resident_pages(path: str) -> list[bool]:
    """Which of a file's pages are in the page cache (mincore over a private mapping)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY)
    try:
        start = ctypes.c_char.from_buffer(m)
        vec = (ctypes.c_ubyte * ((size + mmap.PAGESIZE - 1) // mmap.PAGESIZE))()
        assert libc.mincore(ctypes.addressof(start), size, vec) == 0, ctypes.get_errno()
        del start
        return [bool(v & 1) for v in vec]
    finally:
        m.close()


def test_only_the_newest_writes_stay_in_the_page_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Older durable bytes are dropped from the page cache, even pages a reader mapped;
    every value still reads back (from the disk)."""
    monkeypatch.setattr(vlog, "CACHE_WINDOW", 256 << 10)
    monkeypatch.setattr(vlog, "_DROP_STEP", 32 << 10)
    b = LevelDBBackend(str(tmp_path), vlog_segment_bytes=512 << 10)
    written: dict[bytes, bytes] = {}
    for i in range(80):  # ~2.5 MiB: five segments
        batch = [(b"k%03d%02d" % (i, j), value(i * 100 + j)) for j in range(32)]
        b.write(batch)
        written.update(batch)
        if i == 4:  # a reader maps the first segment's pages before they leave the window
            assert b.get(b"k00000") == written[b"k00000"]
    names = segments(tmp_path)
    assert len(names) >= 5
    first = resident_pages(str(tmp_path / VLOG_DIR / names[0]))
    last = resident_pages(str(tmp_path / VLOG_DIR / names[-1]))
    assert not any(first[:-1]), "the oldest segment is still cached"
    head = b._vlog._pos // mmap.PAGESIZE
    newest = last[head - (192 << 10) // mmap.PAGESIZE : head]
    assert all(newest), "the newest writes were dropped"
    b.collect_garbage()  # counts the live bytes of every old segment, reading them back
    first = resident_pages(str(tmp_path / VLOG_DIR / names[0]))
    assert not any(first[:-1]), "the collector left the oldest segment cached"
    assert dict(b.scan(b"", b"\xff")) == written
    b.close()


def test_the_collectors_walk_reads_every_head_whatever_the_entries_sizes(
    tmp_path: Path,
) -> None:
    """_walk_heads reads heads in chunks that grow over small entries and shrink to one
    head after a large one; every entry comes out exactly, wherever the chunks end: runs
    of small entries, values larger than the largest chunk, keys longer than the smallest,
    and a torn last entry (its value runs past the end), which ends the walk."""
    rng = random.Random(7)
    sizes = [rng.randrange(1, 300) for _ in range(3000)]  # chunks grow to the maximum
    sizes += [vlog.HEADS_MAX_READ * 3, 5, vlog.HEADS_MIN_READ - 3, 0, 1 << 20]
    sizes += [rng.randrange(1, 5000) for _ in range(500)]
    body, expected = bytearray(MAGIC), []
    for i, n in enumerate(sizes):
        key = b"k%06d" % i + (b"x" * (vlog.HEADS_MIN_READ + 100) if i % 997 == 3 else b"")
        pos = len(body)
        body += vlog.ENTRY_HEAD.pack(len(key), n) + key + bytes([i % 251]) * n
        expected.append((pos, key, pos + vlog.ENTRY_HEAD.size + len(key), n))
    end = len(body)
    body += vlog.ENTRY_HEAD.pack(3, 1 << 30) + b"abc" + b"\x01" * 100  # torn: runs past end
    path = tmp_path / "segment"
    path.write_bytes(bytes(body))
    fd = os.open(path, os.O_RDONLY)
    try:
        walked = list(vlog._walk_heads(fd, len(MAGIC), len(body)))
        assert walked == expected
        # From an entry in the middle, and up to a given end (a hole after it).
        middle = expected[1234][0]
        assert list(vlog._walk_heads(fd, middle, end)) == expected[1234:]
    finally:
        os.close(fd)
