"""A full disk (issue, defect 7): writes are refused at once with DiskFull while reads,
topic deletes, metadata writes and the janitor go on; the reserve file gives the space
for that (and for a restart); writes resume once space is back. Also: a failed LevelDB
write never makes later acknowledged writes vanish at recovery, and failed produces are
logged once, then counted.

Most tests inject ENOSPC (or a fake free-space figure); the ``tmpfs`` ones fill a real,
small tmpfs and are skipped, saying why, where mounting is not allowed."""

from __future__ import annotations

import asyncio
import glob
import logging
import os
import struct
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kafka_requests as kr
import plyvel
import pytest
from kafka.protocol.admin import DeleteTopicsRequest
from tmsgate.gateway.kafka import GatewayConfig
from tmsgate.gateway.kafka.broker import Broker
from tmsgate.gateway.kafka.context import RequestContext
from tmsgate.gateway.kafka.errors import FailureLog
from tmsgate.gateway.kafka.handlers import delete_topics as delete_handler
from tmsgate.gateway.kafka.handlers import produce as produce_handler
from tmsgate.gateway.kafka.metrics import Metrics
from tmsgate.protocol import ErrorCode, Request
from tmsgate.storage import BackendError, DiskFull, TopicId, leveldb, open_store, space
from tmsgate.storage.leveldb import LevelDBBackend
from tmsgate.storage.space import RESERVE_NAME, SpaceGuard, is_enospc

MiB = 1 << 20


def value(i: int, size: int = 1000) -> bytes:
    return (f"{i:08d}".encode() * (size // 8 + 1))[:size]


def enospc(*args: object) -> int:
    raise OSError(28, "No space left on device (injected)")


class Disk:
    """What statvfs says, for a SpaceGuard."""

    def __init__(self, free: int) -> None:
        self.free = free

    def __call__(self, path: str) -> int:
        return self.free


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def reserve_of(path: Path) -> int | None:
    try:
        return (path / RESERVE_NAME).stat().st_size
    except FileNotFoundError:
        return None


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    """``tmpfs(size_mib)`` mounts a small tmpfs to fill; unmounted at teardown."""
    mounted: list[Path] = []

    def mount(size_mib: int) -> Path:
        where = tmp_path / f"tmpfs{len(mounted)}"
        where.mkdir()
        try:
            done = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(where)],
                capture_output=True,
                text=True,
                timeout=30,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            pytest.skip(f"cannot mount a tmpfs to fill ({exc}); needs root or CAP_SYS_ADMIN")
        if done.returncode != 0:
            pytest.skip(
                f"cannot mount a {size_mib} MiB tmpfs to fill (needs root or CAP_SYS_ADMIN): "
                f"{done.stderr.strip() or done.returncode}"
            )
        mounted.append(where)
        return where

    yield mount
    for where in reversed(mounted):
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill(directory: Path, leave: int = 0) -> Path:
    """Fill the file system with a file, leaving about ``leave`` bytes free."""
    path = directory / "filler"
    with open(path, "ab") as f:
        chunk = b"\1" * MiB
        while True:
            free = space.free_bytes_of(str(directory))
            if free <= leave:
                break
            try:
                f.write(chunk[: max(4096, min(MiB, free - leave))])
                f.flush()
            except OSError:
                break
    return path


# --- the guard on its own ---------------------------------------------------------------


def test_the_guard_refuses_below_the_floor_and_resumes_at_three_reserves(tmp_path: Path) -> None:
    disk, clock = Disk(100 * MiB), Clock()
    g = SpaceGuard(str(tmp_path), MiB, free_bytes=disk, clock=clock)
    g.open()
    assert reserve_of(tmp_path) == MiB and not g.refused
    g.check_writable()  # not refused: nothing to say
    disk.free = MiB - 4096  # below the floor (one reserve)
    g.before_write()
    assert g.refused and reserve_of(tmp_path) is None  # released for deletes and LevelDB
    with pytest.raises(DiskFull) as err:
        g.check_writable()
    assert str(err.value) == (
        "disk full: writes are refused until space is free (1.0 MiB free, need 16 MiB)"
    )
    assert (err.value.free_bytes, err.value.need_bytes) == (MiB - 4096, 16 * MiB)
    disk.free = 15 * MiB  # more, not enough
    clock.now += space.REFUSED_LOOK_S
    with pytest.raises(DiskFull):
        g.check_writable()
    disk.free = 16 * MiB
    with pytest.raises(DiskFull):  # looked less than a second ago: not again yet
        g.check_writable()
    clock.now += space.REFUSED_LOOK_S
    g.check_writable()  # looks, and writes resume
    assert not g.refused
    assert reserve_of(tmp_path) is None  # not made on a publisher's thread...
    g.before_write()
    assert reserve_of(tmp_path) == MiB  # ...but by the next write
    assert g.episodes == 1


def test_the_reserve_file_is_the_mode_across_restarts(tmp_path: Path) -> None:
    disk = Disk(10 * MiB)
    g = SpaceGuard(str(tmp_path), MiB, free_bytes=disk)
    g.open()  # no reserve yet and less than three reserves (or 16 MiB) free
    assert g.refused and reserve_of(tmp_path) is None
    disk.free = 100 * MiB
    g = SpaceGuard(str(tmp_path), MiB, free_bytes=disk)
    g.open()
    assert not g.refused and reserve_of(tmp_path) == MiB
    g = SpaceGuard(str(tmp_path), None, free_bytes=Disk(0))  # a tool: leaves it alone
    g.open()
    assert not g.refused and reserve_of(tmp_path) == MiB
    g = SpaceGuard(str(tmp_path), MiB // 2, free_bytes=disk)  # made smaller
    g.open()
    assert reserve_of(tmp_path) == MiB // 2
    SpaceGuard(str(tmp_path), 0, free_bytes=disk).open()  # turned off: the space goes back
    assert reserve_of(tmp_path) is None


def test_enospc_is_recognised_in_every_form_it_comes_in() -> None:
    assert is_enospc(OSError(28, "No space left on device"))
    assert is_enospc(OSError(122, "Disk quota exceeded"))
    assert is_enospc(plyvel.IOError(b"IO error: /s/000003.log: No space left on device"))
    wrapped = BackendError("value log write failed")
    wrapped.__cause__ = OSError(28, "x")
    assert is_enospc(wrapped)
    assert not is_enospc(OSError(5, "Input/output error"))
    assert not is_enospc(BackendError("LevelDB write failed: Corruption"))


# --- the store, with ENOSPC injected ------------------------------------------------------


def test_a_full_disk_refuses_publishes_at_once_and_serves_reads_deletes_and_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "store"
    store = open_store(f"leveldb://{root}", disk_reserve_bytes=MiB)
    guard = store._backend.space
    disk, clock = Disk(100 * MiB), Clock()
    guard._measure_free, guard._clock = disk, clock
    try:
        assert reserve_of(root) == MiB and not store.writes_refused
        doomed, kept = TopicId("default", "doomed"), TopicId("default", "kept")
        store.create_topic(doomed)
        store.create_topic(kept)
        acked = [value(i) for i in range(100)]  # a bulk write: the values go to the log
        store.publish(doomed, acked)
        store.publish(kept, acked)

        writes: list[object] = []

        def full(*args: object) -> int:
            writes.append(args)
            return enospc()

        disk.free = 0
        monkeypatch.setattr(os, "pwritev", full)
        monkeypatch.setattr(os, "pwrite", full)
        with pytest.raises(DiskFull, match="No space left on device"):
            store.publish(doomed, [value(i) for i in range(100)])
        assert store.writes_refused and reserve_of(root) is None
        tried = len(writes)
        with pytest.raises(DiskFull, match=r"^disk full: writes are refused until space is free"):
            store.publish(kept, [value(1)])
        with pytest.raises(DiskFull):
            store.store(kept, [value(1)], tx=store.transactions.start())
        assert len(writes) == tried  # refused before anything was written

        # Reads, deletes and small metadata writes go on.
        assert [m.payload for m in store.read(kept, offset=0, max_messages=1000).messages] == acked
        store.delete_topic(doomed)
        store.put_state("groups", "g1", b"offsets")
        assert store.get_state("groups", "g1") == b"offsets"
        store.update_topic(kept, {"ttl": "3600"})

        # The janitor removes the deleted rows; space comes back; writes resume.
        monkeypatch.undo()
        stats = store.cleanup()
        assert stats["rows_deleted"] >= 2  # 100 messages of 1000 B: packed rows of 64 KiB
        assert store.writes_refused  # the disk still says 0 free
        disk.free = 100 * MiB
        clock.now += space.REFUSED_LOOK_S
        store.cleanup()  # the janitor looks after each pass
        assert not store.writes_refused and reserve_of(root) == MiB
        store.publish(kept, [value(7)])
        assert store.offsets(kept) == (0, 101)
    finally:
        store.close()
    store = open_store(f"leveldb://{root}", disk_reserve_bytes=MiB)
    try:
        assert not store.writes_refused
        assert [m.payload for m in store.read(kept, offset=0, max_messages=1000).messages] == [
            *acked,
            value(7),
        ]
    finally:
        store.close()


def test_after_a_failed_log_write_deletes_need_no_new_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch of deletes and small values after a failed value-log write used to fail
    too ("cannot start a new segment"), so nothing could be deleted on a full disk."""
    b = LevelDBBackend(str(tmp_path))
    try:
        bulk = [(b"k%03d" % i, value(i)) for i in range(100)]
        b.write(bulk)
        monkeypatch.setattr(os, "pwritev", enospc)
        monkeypatch.setattr(os, "pwrite", enospc)
        with pytest.raises(DiskFull):
            b.write([(b"n%03d" % i, value(i)) for i in range(100)])
        b.write([(k, None) for k, _ in bulk[:50]])  # LevelDB only: no segment needed
        b.write([(b"meta", b"small")])
        monkeypatch.undo()
        assert b.get(b"k000") is None and b.get(b"k099") == value(99)
        assert b.get(b"meta") == b"small"
        b.write([(b"n%03d" % i, value(i)) for i in range(100)])  # and the log goes on
        assert b.get(b"n050") == value(50)
    finally:
        b.close()


def test_a_store_opened_on_a_full_disk_serves_reads_and_deletes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "store"
    store = open_store(f"leveldb://{root}", disk_reserve_bytes=MiB)
    t = TopicId("default", "t")
    store.create_topic(t)
    store.publish(t, [value(i) for i in range(100)])
    store.close()
    # Full: LevelDB's open fails for want of space until the reserve is released, and
    # the value log cannot start its segment.
    real_open = LevelDBBackend._open_db
    opens: list[int] = []

    def open_db(self: LevelDBBackend) -> Any:
        opens.append(reserve_of(root) or 0)
        if reserve_of(root):
            raise plyvel.IOError(b"IO error: 000009.ldb: No space left on device")
        return real_open(self)

    monkeypatch.setattr(LevelDBBackend, "_open_db", open_db)
    monkeypatch.setattr(os, "pwrite", enospc)
    monkeypatch.setattr(space, "free_bytes_of", lambda path: MiB)
    store = open_store(f"leveldb://{root}", disk_reserve_bytes=MiB)
    try:
        assert opens == [MiB, 0]  # failed, released the reserve, opened
        assert store.writes_refused
        assert [m.payload for m in store.read(t, offset=0, max_messages=1000).messages] == [
            value(i) for i in range(100)
        ]
        with pytest.raises(DiskFull):
            store.publish(t, [b"x"])
        store.delete_topic(t)
        monkeypatch.undo()
        store.cleanup()
    finally:
        store.close()


def test_without_a_reserve_left_the_open_error_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def open_db(self: LevelDBBackend) -> Any:
        raise plyvel.IOError(b"IO error: 000009.ldb: No space left on device")

    monkeypatch.setattr(LevelDBBackend, "_open_db", open_db)
    monkeypatch.setattr(space, "free_bytes_of", lambda path: 0)
    with pytest.raises(BackendError, match=r"no reserve .* left to release; free some space"):
        open_store(f"leveldb://{tmp_path}", disk_reserve_bytes=MiB)


class TornWrite:
    """A LevelDB handle whose next batch write tears: part of a record lands at the end of
    the log, as a write cut short by ENOSPC leaves it, and the write fails."""

    def __init__(self, db: Any, path: Path) -> None:
        self._db, self._path = db, path

    def write_batch(self, **kwargs: Any) -> Any:
        handle = self

        class Batch:
            def __init__(self) -> None:
                self._batch = handle._db.write_batch(**kwargs)

            def __getattr__(self, name: str) -> Any:
                return getattr(self._batch, name)

            def write(self) -> None:
                logfile = max(glob.glob(str(handle._path / "*.log")))
                with open(logfile, "ab") as f:  # a header promising 1000 bytes, then 10
                    f.write(struct.pack("<IHB", 0xDEADBEEF, 1000, 1) + b"x" * 10)
                raise plyvel.IOError(f"IO error: {logfile}: No space left on device".encode())

        return Batch()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


def test_writes_acknowledged_after_a_torn_leveldb_write_survive_recovery(tmp_path: Path) -> None:
    """LevelDB appends after a torn record, and its recovery then drops the rest of that
    32 KiB block: on a full tmpfs, every one of 501 writes acknowledged after the failure
    was gone after a reopen. The backend starts a new log first."""
    b = LevelDBBackend(str(tmp_path))
    before = [(b"a%03d" % i, b"v" * 100) for i in range(50)]
    after = [(b"b%03d" % i, b"w" * 100) for i in range(50)]
    try:
        for kv in before:
            b.write([kv])
        real = b._db
        b._db = TornWrite(real, tmp_path)
        with pytest.raises(DiskFull):
            b.write([(b"torn", b"t" * 100)])
        b._db = real
        for kv in after:
            b.write([kv])
    finally:
        b.close()
    b = LevelDBBackend(str(tmp_path))
    try:
        assert dict(b.scan(b"", b"\xff")) == dict(before + after)
    finally:
        b.close()


class RefusesAfterFailure(TornWrite):
    """... and LevelDB then refuses every write, as after a failed background write."""

    def compact_range(self, **kwargs: Any) -> None:
        raise plyvel.IOError(b"IO error: 000012.ldb: No space left on device")


def test_leveldb_refusing_writes_after_a_failed_write_is_reopened_at_once(
    tmp_path: Path,
) -> None:
    b = LevelDBBackend(str(tmp_path))
    try:
        for i in range(50):
            b.write([(b"a%03d" % i, b"v" * 100)])
        b._db = RefusesAfterFailure(b._db, tmp_path)
        with pytest.raises(DiskFull):
            b.write([(b"torn", b"t")])
        assert isinstance(b._db, plyvel.DB) and b._wedged is None  # reopened in place
        b.write([(b"b", b"w")])
        assert [k for k, _ in b.scan(b"", b"\xff")] == [*(b"a%03d" % i for i in range(50)), b"b"]
    finally:
        b.close()


# --- real full disks (tmpfs) --------------------------------------------------------------


def test_a_store_fills_a_real_disk_refuses_frees_space_resumes_and_restarts_full(
    tmpfs: Callable[[int], Path],
) -> None:
    root = tmpfs(48) / "store"
    url = f"leveldb://{root}"
    store = open_store(url, disk_reserve_bytes=4 * MiB)
    a, b = TopicId("default", "a"), TopicId("default", "b")
    acked: dict[TopicId, list[bytes]] = {a: [], b: []}
    try:
        store.create_topic(a)
        store.create_topic(b)
        small = [b"keep%d" % i for i in range(50)]
        store.publish(b, small)
        acked[b] += small
        n = 0
        while True:
            items = [value(n * 100 + i) for i in range(100)]
            try:
                store.publish(a, items)
            except DiskFull:
                break
            acked[a] += items
            n += 1
        assert store.writes_refused and reserve_of(root) is None
        assert len(acked[a]) > 10_000
        got = [m.payload for m in store.read(a, offset=0, max_messages=10**6).messages]
        assert got == acked[a]
        store.delete_topic(a)
        store.cleanup()  # deletes the rows and the segments
        store.cleanup()  # their mappings go, the space is back, writes resume
        assert not store.writes_refused and reserve_of(root) == 4 * MiB
        store.publish(b, [b"again"])
        acked[b].append(b"again")
        while True:  # full again, now with b
            items = [value(i) for i in range(100)]
            try:
                store.publish(b, items)
            except DiskFull:
                break
            acked[b] += items
    finally:
        store.close()
    store = open_store(url, disk_reserve_bytes=4 * MiB)  # restarted on the full disk
    try:
        assert store.writes_refused
        got = [m.payload for m in store.read(b, offset=0, max_messages=10**6).messages]
        assert got == acked[b]
        with pytest.raises(DiskFull):
            store.publish(b, [b"x"])
        store.delete_topic(b)
        store.cleanup()
        store.cleanup()
        assert not store.writes_refused
    finally:
        store.close()


def test_leveldb_refusing_every_write_after_a_failed_flush_is_reopened(
    tmpfs: Callable[[int], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed background write (a memtable flush on a full disk) makes LevelDB refuse
    every later write, deletes included, until it is reopened. Once there is room, the
    backend reopens it, waiting for readers to let go of the old handle first."""
    monkeypatch.setattr(leveldb, "QUIESCE_S", 0.2)
    monkeypatch.setattr(leveldb, "REOPEN_RETRY_S", 0.0)
    mnt = tmpfs(24)
    root = mnt / "store"
    b = LevelDBBackend(str(root), write_buffer_bytes=MiB)
    acked: list[bytes] = []
    try:
        filler = fill(mnt, leave=256 << 10)
        with pytest.raises(DiskFull):
            for i in range(100_000):  # one message at a time: inline, in the memtable
                b.write([(b"m%06d" % i, value(i))])
                acked.append(b"m%06d" % i)
        assert b._wedged is not None or b.space.refused
        reader = b.scan(b"m", b"n")
        assert next(reader)[0] == b"m000000"  # holds the handle: no reopen under it
        filler.unlink()
        if b._wedged is not None:
            with pytest.raises(BackendError):
                b.write([(b"m000000", None)])  # the reader still holds LevelDB
            assert b._wedged is not None
        reader.close()
        del reader
        b.write([(b"m000000", None)])  # reopened (if it had to be); deletes work
        b.write([(b"later", b"x")])
        assert b._wedged is None
        assert b.get(b"m000000") is None and b.get(acked[-1]) == value(len(acked) - 1)
    finally:
        b.close()
    b = LevelDBBackend(str(root))
    try:
        keys = [k for k, _ in b.scan(b"m", b"n")]
        assert keys == acked[1:] and b.get(b"later") == b"x"
    finally:
        b.close()


def test_the_collector_never_reads_the_hole_after_a_crashed_segment(
    tmpfs: Callable[[int], Path],
) -> None:
    """A segment left by a crash keeps its sparse, unwritten rest. Reading a hole through
    a mapping allocates a page on tmpfs, and on a full tmpfs that is a SIGBUS: the
    collector's walk must stop where the data ends. Run in a child process, so a SIGBUS
    fails the test instead of killing the run."""
    mnt = tmpfs(24)
    root = mnt / "store"
    code = textwrap.dedent(
        f"""
        import os, sys
        from tmsgate.storage import leveldb
        from tmsgate.storage.leveldb import LevelDBBackend
        leveldb.SMALL_WRITE_MUTATIONS = 0
        root, step = {str(root)!r}, sys.argv[1]
        if step == "crash":
            b = LevelDBBackend(root)
            # 8 (magic) + 8 (entry head) + 8 (key) + 4072 (value) = 4096: the data ends
            # exactly at a page boundary, so the next entry's head is in the hole.
            b.write([(b"k0000000", b"v" * 4072)])
            os._exit(0)  # no close: the segment keeps its full, sparse size
        b = LevelDBBackend(root)
        b._db.delete(b"k0000000", sync=True)
        with open({str(mnt / "filler")!r}, "wb") as f:
            try:
                while True:
                    f.write(b"x" * 65536)
                    f.flush()
            except OSError:
                pass
        b.collect_garbage()
        print("collected")
        """
    )
    for step in ("crash", "collect"):
        done = subprocess.run(
            [sys.executable, "-c", code, step], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, f"{step}: rc={done.returncode} {done.stderr[-2000:]}"
    assert "collected" in done.stdout


# --- the gateway ------------------------------------------------------------------------


def test_failures_are_logged_once_with_their_cause_then_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    logger = logging.getLogger("tmsgate.test.failures")
    failures = FailureLog("produce", logger, interval_s=10.0, clock=clock)
    full = DiskFull(0, 192 * MiB)
    with caplog.at_level(logging.DEBUG, logger="tmsgate.test.failures"):
        for _ in range(266):  # 266 in 10 s, as in the issue
            clock.now += 9.9 / 266
            failures.failed(ErrorCode.KAFKA_STORAGE_ERROR, full, "produce to default:t")
        errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(errors) == 1
        assert errors[0].exc_info is None  # one line; the traceback only at DEBUG
        assert (
            errors[0]
            .getMessage()
            .startswith(
                "produce to default:t failed: KAFKA_STORAGE_ERROR: disk full: writes are refused "
                "until space is free (0.0 MiB free, need 192 MiB)"
            )
        )
        assert [r.exc_info is not None for r in caplog.records if r.levelno == logging.DEBUG] == [
            True
        ]
        caplog.clear()
        clock.now += 0.2
        failures.failed(ErrorCode.KAFKA_STORAGE_ERROR, full, "produce to default:t")
        assert [r.getMessage() for r in caplog.records] == [
            "produce failures since last report: 266 (KAFKA_STORAGE_ERROR: disk full: writes "
            "are refused until space is free (0.0 MiB free, need 192 MiB))"
        ]
        caplog.clear()
        failures.failed(ErrorCode.KAFKA_STORAGE_ERROR, full, "produce to default:t")
        failures.succeeded()  # within the interval: nothing yet
        clock.now += 10
        failures.succeeded()
        assert [r.getMessage() for r in caplog.records] == [
            "produce failures since last report: 1 (KAFKA_STORAGE_ERROR: disk full: writes "
            "are refused until space is free (0.0 MiB free, need 192 MiB)) "
            "(requests succeed again)"
        ]
        caplog.clear()
        clock.now += 60  # a quiet spell: the next failure is news again, with its cause
        failures.failed(ErrorCode.KAFKA_STORAGE_ERROR, full, "produce to default:t")
        assert len(caplog.records) == 2 and "failed: KAFKA_STORAGE_ERROR" in caplog.text
        caplog.clear()
        failures.failed(ErrorCode.UNKNOWN_SERVER_ERROR, ValueError("bug"), "produce to x")
        assert caplog.records[0].exc_info is not None  # a bug keeps its traceback


async def produce(broker: Broker, topic: str, records: int, cid: int) -> int:
    # 2 KB values: a batch's packed rows are large enough for the value log.
    raw = kr.batch([(None, value(i, 2000), []) for i in range(records)])
    req = Request(0, 9, cid, "c", kr.produce(topic, raw), 0)
    ctx = RequestContext(broker, req, "peer")
    part = (await produce_handler.handle(ctx, req.body)).topics[0].partitions[0]
    return int(part.error_code)


async def delete_topic(broker: Broker, topic: str) -> int:
    body = DeleteTopicsRequest[4](topic_names=[topic], timeout_ms=5000)
    req = Request(20, 4, 1, "c", body, 0)
    resp = await delete_handler.handle(RequestContext(broker, req, "peer"), body)
    return int(resp.responses[0].error_code)


def test_the_gateway_answers_kafka_storage_error_deletes_topics_and_logs_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(produce_handler, "FAILURES", FailureLog("produce", produce_handler.log))

    async def main() -> None:
        store = open_store(f"leveldb://{tmp_path}", disk_reserve_bytes=MiB)
        guard = store._backend.space
        disk, clock = Disk(100 * MiB), Clock()
        guard._measure_free, guard._clock = disk, clock
        metrics = Metrics()
        metrics.watch_store(store)
        broker = Broker(store, GatewayConfig(), metrics=metrics)
        broker.attach(asyncio.get_running_loop())
        try:
            await broker.topics.create("t", {})
            await broker.topics.create("u", {})
            assert await produce(broker, "t", 50, 1) == ErrorCode.NONE
            assert metrics.registry.get_sample_value("tmsgate_store_writes_refused") == 0
            disk.free = 0
            clock.now += 1
            monkeypatch.setattr(os, "pwritev", enospc)
            monkeypatch.setattr(os, "pwrite", enospc)
            with caplog.at_level(logging.INFO, logger="tmsgate"):
                codes = [await produce(broker, "t", 50, 2 + i) for i in range(200)]
            assert set(codes) == {ErrorCode.KAFKA_STORAGE_ERROR}
            produce_lines = [r for r in caplog.records if r.name == "tmsgate.kafka.produce"]
            assert len(produce_lines) == 1 and produce_lines[0].exc_info is None
            assert "disk full" in produce_lines[0].getMessage()
            assert metrics.registry.get_sample_value("tmsgate_store_writes_refused") == 1
            assert metrics.registry.get_sample_value("tmsgate_store_disk_free_bytes") == 0
            assert metrics.registry.get_sample_value("tmsgate_store_disk_reserve_bytes") == 0
            # The writer's counters: writes before the disk filled, and the one that failed
            # (the rest were refused before writing).
            assert metrics.registry.get_sample_value("tmsgate_store_writes_total") > 0
            assert metrics.registry.get_sample_value("tmsgate_store_write_seconds_total") > 0
            assert metrics.registry.get_sample_value("tmsgate_store_write_failures_total") >= 1
            assert await delete_topic(broker, "u") == ErrorCode.NONE
            assert await broker.topics.get("u") is None
            # A delete that shared its write with the one that found the disk full is
            # tried again: the reserve released since makes room for it.
            await broker.topics.create("v", {})
            real_delete, failed = store.delete_topic, []

            def delete_once_failing(topic: TopicId) -> None:
                if not failed:
                    failed.append(topic)
                    raise DiskFull(0, 16 * MiB, "LevelDB: No space left on device")
                real_delete(topic)

            store.delete_topic = delete_once_failing
            assert await delete_topic(broker, "v") == ErrorCode.NONE
            assert failed and await broker.topics.get("v") is None
            res = store.read(TopicId("default", "t"), offset=0, max_messages=100)
            assert len(res.messages) == 50  # what was acknowledged reads back
        finally:
            monkeypatch.undo()
            broker.close()
            store.close()

    asyncio.run(main())
