"""A store one process owns, reached by the others over a Unix socket (``served://``).

``tmsgate serve --workers N`` (gateway/workers.py) runs N gateway processes over one
LevelDB store. LevelDB is one process's (it locks its directory), so the parent process
opens it and serves it here, and each worker opens ``served:///path/to/socket``: the
same small interface as every backend (backend.py), one request and one answer at a
time on a connection of its own per thread.

Why the row interface and not the Store's: the Store's rules (one writer per topic,
offsets, transactions, leases) then need nothing new. The workers are the gateways of a
cluster (gateway/cluster.py) on a shared store, exactly as on HBase, and the owner only
stores rows. What the owner adds is group commit: writes that arrive together from
several workers become one LevelDB batch and one fsync (``GroupCommit``), so N workers
do not pay N fsyncs where one process paid one.

The wire (frames, requests, answers, their codec) is served_wire.py's. The socket is made
in a directory only the owner's user may enter (0700); the owner answers anything
malformed with an error and keeps the connection's thread alive for the next request.
"""

from __future__ import annotations

import contextlib
import json
import logging
import mmap
import os
import socket
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from .backend import Backend, Mutation
from .errors import BackendError, DiskFull
from .reader import find_offset_row
from .served_wire import (
    CAS,
    CASES,
    DISK_FULL,
    ERROR,
    GC,
    GET,
    HELLO,
    KEYS,
    OK,
    PHASES,
    SCAN,
    SCAN_BYTES_MAX,
    SCAN_ROWS_FIRST,
    SCAN_ROWS_MAX,
    SEEK,
    U32,
    U64,
    WRITE,
    Malformed,
    Reader,
    big_buffers,
    decode_request,
    encode_bytes,
    encode_keys,
    encode_mutations,
    recv_frame,
    send_frame,
)
from .vlog import POINTER, TAG_POINTER

VLOG_DIR = "vlog"  # the value log's folder in a leveldb:// store (leveldb.VLOG_DIR)
TAG_POINTER_BYTE = bytes([TAG_POINTER])

log = logging.getLogger("tmsgate.served")


# --- the owner's side -------------------------------------------------------------------------


@dataclass
class _Waiting:
    mutations: Sequence[Mutation]
    sync: bool
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


class GroupCommit:
    """Writes that arrive while one is being written go together in the next batch: one
    backend write (one fsync) for all of them, each caller answered when it is durable.
    Merging keeps arrival order, so a later write of a key lands after an earlier one;
    one batch fails as a whole (each caller then sees the error: "any subset landed")."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self._cv = threading.Condition()
        self._queue: list[_Waiting] = []
        self._closed = False
        self.batches = 0
        self.writes = 0
        self._thread = threading.Thread(target=self._run, name="tmsgate-group-commit", daemon=True)
        self._thread.start()

    def write(self, mutations: Sequence[Mutation], sync: bool) -> None:
        waiting = _Waiting(mutations, sync)
        with self._cv:
            if self._closed:
                raise BackendError("the store is closing")
            self._queue.append(waiting)
            self._cv.notify()
        waiting.done.wait()
        if waiting.error is not None:
            raise waiting.error

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._queue and not self._closed:
                    self._cv.wait()
                if not self._queue:
                    return
                batch, self._queue = self._queue, []
            if len(batch) == 1:
                mutations = batch[0].mutations
            else:
                mutations = [m for waiting in batch for m in waiting.mutations]
            error: BaseException | None = None
            try:
                self._backend.write(mutations, sync=any(w.sync for w in batch))
            except BaseException as exc:  # handed to every caller of the batch
                error = exc
            self.batches += 1
            self.writes += len(batch)
            for waiting in batch:
                waiting.error = error
                waiting.done.set()

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()
        self._thread.join()


class BackendServer:
    """Serves ``backend`` on a Unix socket at ``path`` until ``close``: a thread per
    connection, each request answered before the next is read. ``disconnect(pid)`` ends
    one process's connections and waits until nothing of theirs is still being written
    (gateway/workers.py does that before it releases a dead worker's leases)."""

    def __init__(self, backend: Backend, path: str, store_path: str) -> None:
        self.backend = backend
        self.path = path
        self._store_path = store_path.encode()
        self._commit = GroupCommit(backend)
        self._lock = threading.Lock()
        self._conns: dict[socket.socket, tuple[int, threading.Thread]] = {}
        self._closed = False
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o077)
        try:
            self._listener.bind(path)
        finally:
            os.umask(old)
        self._listener.listen(256)
        self._acceptor = threading.Thread(target=self._accept, name="tmsgate-served", daemon=True)
        self._acceptor.start()

    @property
    def stats(self) -> dict[str, int]:
        return {"batches": self._commit.batches, "writes": self._commit.writes}

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            big_buffers(conn)
            thread = threading.Thread(
                target=self._serve, args=(conn,), name="tmsgate-served-conn", daemon=True
            )
            with self._lock:
                if self._closed:
                    conn.close()
                    return
                self._conns[conn] = (0, thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            while True:
                try:
                    body = recv_frame(conn)
                except Malformed as exc:  # a length we will not read: the stream is lost
                    send_frame(conn, [bytes([ERROR]), str(exc).encode()])
                    return
                if body is None:
                    return
                try:
                    op, args = decode_request(body)
                    if op == HELLO:
                        with self._lock:
                            thread = self._conns[conn][1]
                            self._conns[conn] = (int(args[0]), thread)  # type: ignore[call-overload]
                        answer = [bytes([OK]), self._store_path]
                    else:
                        answer = [bytes([OK]), *self._do(op, args)]
                except Malformed as exc:
                    answer = [bytes([ERROR]), f"malformed request: {exc}".encode()]
                except DiskFull as exc:  # kept as such: the worker answers 507, not 500
                    answer = [
                        bytes([DISK_FULL]),
                        U64.pack(max(0, exc.free_bytes)),
                        U64.pack(max(0, exc.need_bytes)),
                    ]
                except Exception as exc:  # the backend's error, told to the caller
                    answer = [bytes([ERROR]), f"{type(exc).__name__}: {exc}".encode()]
                send_frame(conn, answer)
        except OSError:
            pass  # the peer went away (or disconnect shut the socket)
        finally:
            with self._lock:
                self._conns.pop(conn, None)
            conn.close()

    def _do(self, op: int, args: tuple[object, ...]) -> list[bytes]:
        backend = self.backend
        if op == WRITE:
            mutations, sync = args
            self._commit.write(mutations, sync)  # type: ignore[arg-type]
            return []
        if op == PHASES:
            phases, sync = args
            flat = [m for phase in phases for m in phase]  # type: ignore[attr-defined]
            self._commit.write(flat, sync)  # type: ignore[arg-type]
            return []
        if op == CAS:
            key, expected, value = args
            won = backend.check_and_put(key, expected, value)  # type: ignore[arg-type]
            return [b"\x01" if won else b"\x00"]
        if op == CASES:
            won_each = backend.check_and_put_many(args[0])  # type: ignore[arg-type]
            return [bytes(won_each)]
        if op == GET:
            return [encode_bytes(backend.get(args[0]))]  # type: ignore[arg-type]
        if op == SCAN:
            start, stop, reverse, include_start, limit, stored = args
            rows: list[tuple[bytes, bytes]] = []
            cap, size, more = max(1, min(limit, SCAN_ROWS_MAX)), 0, False  # type: ignore[call-overload]
            # Values as LevelDB holds them, when asked and this backend has them: the
            # worker reads a value-log value from the segment file itself (SegmentReader).
            scan_stored = backend.scan_stored
            found = (scan_stored if stored and scan_stored is not None else backend.scan)(
                start,  # type: ignore[arg-type]
                stop,  # type: ignore[arg-type]
                reverse=reverse,  # type: ignore[arg-type]
                include_start=include_start,  # type: ignore[arg-type]
            )
            with contextlib.closing(found):  # type: ignore[type-var]
                for row in found:
                    if len(rows) >= cap or size >= SCAN_BYTES_MAX:
                        more = True
                        break
                    rows.append(row)
                    size += len(row[1])
            out = [bytes([more | (2 if stored else 0)])]
            encode_mutations(out, rows)
            return out
        if op == KEYS:
            start, stop, limit = args
            keys: list[bytes] = []
            cap, more = max(1, min(limit, SCAN_ROWS_MAX * 4)), False  # type: ignore[call-overload]
            found_keys = backend.scan_keys(start, stop)  # type: ignore[arg-type]
            with contextlib.closing(found_keys):  # type: ignore[type-var]
                for key in found_keys:
                    if len(keys) >= cap:
                        more = True
                        break
                    keys.append(key)
            out = [bytes([more])]
            encode_keys(out, keys)
            return out
        if op == GC:
            return [json.dumps(backend.collect_garbage()).encode()]
        if op == SEEK:
            prefix, offset = args
            key = find_offset_row(backend, prefix, offset)  # type: ignore[arg-type]
            if key is None:
                return [b"\x00"]
            return [b"\x01", encode_bytes(key), encode_bytes(backend.get(key))]
        raise Malformed(f"unknown operation {op}")

    def disconnect(self, pid: int, timeout_s: float = 30.0) -> int:
        """Shut every connection of process ``pid`` and wait for their threads: once this
        returns, nothing that process sent is still being written. The count shut."""
        with self._lock:
            ours = [(c, t) for c, (p, t) in self._conns.items() if p == pid]
        for conn, _ in ours:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for _, thread in ours:
            thread.join(timeout_s)
        return len(ours)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns = list(self._conns.items())
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._acceptor.join(5)
        for conn, _ in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for _, (_, thread) in conns:
            thread.join(5)
        self._commit.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


# --- the workers' side -----------------------------------------------------------------------


class SegmentReader:
    """Value-log values read from the owner's segment files, mapped read-only here (at most
    MAX_MAPPED at once, the oldest unmapped first). Safe without the owner: a segment is
    only appended to, every pointer the owner gave names bytes already synced, and ids are
    never reused; a segment collected since is gone (None: ask the owner for the row), and
    one still mapped here keeps its bytes until unmapped."""

    MAX_MAPPED = 64

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._maps: OrderedDict[int, mmap.mmap] = OrderedDict()
        self._lock = threading.Lock()

    def read(self, pointer: bytes, limit: int | None = None) -> bytes | None:
        """The value ``pointer`` names (with ``limit``, its first ``limit`` bytes); None if
        its segment is gone."""
        _, seg_id, at, length = POINTER.unpack_from(pointer)
        if limit is not None:
            length = min(length, limit)
        for _ in range(3):
            view = self._map(seg_id)
            if view is None:
                return None
            try:
                value = view[at : at + length]
            except ValueError:  # unmapped by another thread meanwhile: map it again
                continue
            if len(value) == length:
                return value
            return None  # shorter than the pointer says: not the file the pointer meant
        return None

    def _map(self, seg_id: int) -> mmap.mmap | None:
        with self._lock:
            view = self._maps.get(seg_id)
            if view is not None and not view.closed:
                self._maps.move_to_end(seg_id)
                return view
            path = os.path.join(self.directory, f"{seg_id:016d}.vlog")
            try:
                with open(path, "rb") as f:
                    view = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError):  # collected (or empty): the owner answers instead
                return None
            self._maps[seg_id] = view
            while len(self._maps) > self.MAX_MAPPED:
                _, old = self._maps.popitem(last=False)
                old.close()
            return view

    def close(self) -> None:
        with self._lock:
            for view in self._maps.values():
                view.close()
            self._maps.clear()


class ServedBackend:
    """The backend a worker opens: every call a request to the owner, on this thread's
    own connection. The owner writes a batch (phases too) as one LevelDB batch, so
    batches are atomic here as they are on leveldb://."""

    atomic_batches = True
    space = None  # the owner guards the disk; its DiskFull comes back through each call
    scan_stored = None  # its scan asks the owner for stored values and reads the value log itself

    def __init__(self, socket_path: str) -> None:
        self._socket_path = socket_path
        self._local = threading.local()
        self._all: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        # The owner's data directory, on this machine (DescribeLogDirs reports its disk):
        # the answer to the HELLO that opens every connection.
        self.path = ""
        self._conn()
        # The value log's segments, read here rather than sent over the socket (a store on
        # this machine: the owner said where); None: every value comes with its row.
        vlog_dir = os.path.join(self.path, VLOG_DIR) if self.path else ""
        self._segments = SegmentReader(vlog_dir) if os.path.isdir(vlog_dir) else None

    def _conn(self) -> socket.socket:
        conn: socket.socket | None = getattr(self._local, "conn", None)
        if conn is None:
            if self._closed:
                raise BackendError("the served store is closed")
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            big_buffers(conn)
            try:
                conn.connect(self._socket_path)
                # Every connection says whose it is, so that the owner's disconnect(pid)
                # finds each one (a reconnect after an error too).
                send_frame(conn, [bytes([HELLO]), U32.pack(os.getpid())])
                answer = recv_frame(conn)
                if answer is None or not answer or answer[0] != OK:
                    raise ConnectionError("the owner refused the connection")
                self.path = bytes(answer[1:]).decode()
            except (OSError, Malformed) as exc:
                conn.close()
                raise BackendError(
                    f"the store's owner does not answer at {self._socket_path}: {exc}"
                ) from exc
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def _call(self, parts: list[bytes]) -> memoryview:
        conn = self._conn()
        try:
            send_frame(conn, parts)
            body = recv_frame(conn)
            if body is None:
                raise ConnectionError("the owner closed the connection")
        except (OSError, Malformed) as exc:
            self._local.conn = None
            with self._lock, contextlib.suppress(ValueError):
                self._all.remove(conn)
            conn.close()
            raise BackendError(f"the store's owner stopped answering: {exc}") from exc
        if not body:
            raise BackendError("an empty answer from the store's owner")
        view = memoryview(body)
        if body[0] == DISK_FULL:
            r = Reader(view[1:])
            raise DiskFull(r.u64(), r.u64(), "said by the store's owner")
        if body[0] != OK:
            raise BackendError(bytes(view[1:]).decode(errors="replace"))
        return view[1:]

    def write(self, mutations: Sequence[Mutation], sync: bool = True) -> None:
        if not mutations:
            return
        parts = [bytes([WRITE, 1 if sync else 0])]
        encode_mutations(parts, mutations)
        self._call(parts)

    def write_phases(self, phases: Sequence[Sequence[Mutation]], sync: bool = True) -> None:
        parts = [bytes([PHASES, 1 if sync else 0]), U32.pack(len(phases))]
        for phase in phases:
            encode_mutations(parts, phase)
        self._call(parts)

    def check_and_put(self, key: bytes, expected: bytes | None, value: bytes | None) -> bool:
        answer = self._call(
            [bytes([CAS]), encode_bytes(key), encode_bytes(expected), encode_bytes(value)]
        )
        return bool(answer[0])

    def check_and_put_many(
        self, changes: Sequence[tuple[bytes, bytes | None, bytes | None]]
    ) -> list[bool]:
        """One request: the owner compares and writes them all in one batch."""
        if not changes:
            return []
        parts = [bytes([CASES]), U32.pack(len(changes))]
        for key, expected, value in changes:
            parts += (encode_bytes(key), encode_bytes(expected), encode_bytes(value))
        answer = self._call(parts)
        if len(answer) != len(changes):
            raise BackendError(
                f"the store's owner answered {len(answer)} of {len(changes)} changes"
            )
        return [bool(b) for b in answer]

    def get(self, key: bytes) -> bytes | None:
        return Reader(self._call([bytes([GET]), encode_bytes(key)])).optional()

    def scan(
        self,
        start: bytes,
        stop: bytes,
        *,
        reverse: bool = False,
        include_start: bool = True,
    ) -> Iterator[tuple[bytes, bytes]]:
        for stored, rows in self._scan(start, stop, reverse, include_start):
            if stored:  # tagged, value-log values by pointer
                yield from self._resolved(rows)
            else:
                yield from rows

    def scan_heads(
        self, start: bytes, stop: bytes, head: int
    ) -> Iterator[tuple[bytes, bytes, int]]:
        segments = self._segments
        at, kept = POINTER.size, POINTER.size + head  # where a stored pointer's head is
        for stored, rows in self._scan(start, stop, False, True):
            for key, value in rows:
                if not stored:
                    yield key, value[:head], len(value)
                elif value[:1] != TAG_POINTER_BYTE:
                    yield key, value[1 : 1 + head], len(value) - 1
                elif len(value) >= kept:  # the value's head, kept with its pointer
                    yield key, value[at:kept], POINTER.unpack_from(value)[3]
                else:
                    assert segments is not None
                    first = segments.read(value, head)
                    if first is None:  # its segment was collected since: ask the owner
                        whole = self.get(key)
                        if whole is None:
                            continue  # the row went meanwhile (a scan promises no snapshot)
                        yield key, whole[:head], len(whole)
                    else:
                        yield key, first, POINTER.unpack_from(value)[3]

    def _scan(
        self, start: bytes, stop: bytes, reverse: bool, include_start: bool
    ) -> Iterator[tuple[bool, list[tuple[bytes, bytes]]]]:
        """The owner's answers to a scan, chunk by chunk: (whether the values are as
        stored, the rows)."""
        limit = SCAN_ROWS_FIRST
        stored = 4 if self._segments is not None else 0
        while True:
            flags = (1 if reverse else 0) | (2 if include_start else 0) | stored
            answer = Reader(
                self._call(
                    [
                        bytes([SCAN]),
                        encode_bytes(start),
                        encode_bytes(stop),
                        bytes([flags]),
                        U32.pack(limit),
                    ]
                )
            )
            more = answer.u8()
            rows = answer.mutations()
            yield bool(more & 2), rows  # type: ignore[misc]  (a scanned row has its value)
            if not more & 1 or not rows:
                return
            last = rows[-1][0]
            if reverse:
                stop = last  # exclusive: the rows below the last one given
            else:
                start, include_start = last, False
            limit = min(limit * 4, SCAN_ROWS_MAX)

    def _resolved(self, rows: list[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
        segments = self._segments
        assert segments is not None
        for key, stored in rows:
            if stored[:1] != TAG_POINTER_BYTE:
                yield key, stored[1:]
                continue
            value = segments.read(stored)
            if value is None:  # its segment was collected since: ask the owner
                value = self.get(key)
                if value is None:
                    continue  # the row went meanwhile (a scan promises no snapshot)
            yield key, value

    def scan_keys(self, start: bytes, stop: bytes) -> Iterator[bytes]:
        limit = SCAN_ROWS_FIRST * 4
        while True:
            answer = Reader(
                self._call(
                    [bytes([KEYS]), encode_bytes(start), encode_bytes(stop), U32.pack(limit)]
                )
            )
            more = answer.u8()
            keys = answer.keys()
            yield from keys
            if not more or not keys:
                return
            start = keys[-1] + b"\x00"  # the next key after ``last``
            limit = min(limit * 4, SCAN_ROWS_MAX * 4)

    def seek_offset(self, prefix: bytes, offset: int) -> tuple[bytes, bytes | None] | None:
        """reader.start_for_offset's search, run by the owner: one call, not one per
        probe. The row found (its key and value, None if it went meanwhile), or None
        when no row starts at or below ``offset``."""
        answer = Reader(self._call([bytes([SEEK]), encode_bytes(prefix), U64.pack(offset)]))
        if not answer.u8():
            return None
        return answer.bytes_(), answer.optional()

    def sync_clock(self) -> None:
        pass  # one process writes the rows, in the order it is asked

    def collect_garbage(self) -> dict[str, int]:
        stats = json.loads(bytes(self._call([bytes([GC])])))
        return {str(k): int(v) for k, v in stats.items()}

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
        if self._segments is not None:
            self._segments.close()


def open_url(
    rest: str, snapshot: bool = False, disk_reserve_bytes: int | None = None
) -> ServedBackend:
    """``served://`` + the owner's socket path (``served:///run/tmsgate/store.sock``)."""
    if snapshot:
        raise BackendError(
            "a served:// store is a running gateway's; open its leveldb:// directory for a "
            "copy instead"
        )
    if not rest:
        raise BackendError("a served:// store URL needs the owner's socket path")
    return ServedBackend(rest)
