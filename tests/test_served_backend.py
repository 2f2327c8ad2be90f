"""The ``served://`` backend (storage/served.py): its wire codec, and a live BackendServer.

- The decoder is fuzzed (hypothesis): random bytes and valid frames cut, grown or with
  bytes flipped either decode or raise ``Malformed``; nothing else escapes it. A request
  encoded as ServedBackend encodes it decodes back to the same call.
- A BackendServer over LevelDB in tmp_path gets malformed frames on a raw AF_UNIX socket:
  each is answered with an error frame saying what was wrong (a length over MAX_FRAME:
  that, then the connection closed), and the server goes on serving.
- ``disconnect(pid)`` shuts that process's connections only.
- Group commit: concurrent writes from many connections all land; a later write of a key
  wins over an earlier one.
- ``seek_offset`` (the owner's search for the row holding an offset) agrees with the
  search run on the LevelDB backend itself, through a Store reading at every offset.

The contract every backend keeps is tests/test_backend_contract.py (engine ``served``).
"""

from __future__ import annotations

import os
import socket
import struct
import tempfile
import threading
from array import array
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tmsgate.storage import keys
from tmsgate.storage.backend import open_backend
from tmsgate.storage.errors import BackendError
from tmsgate.storage.ids import TopicId
from tmsgate.storage.reader import find_offset_row
from tmsgate.storage.served import BackendServer, ServedBackend
from tmsgate.storage.served_wire import (
    CAS,
    CASES,
    ERROR,
    GC,
    GET,
    HELLO,
    KEYS,
    MAX_FRAME,
    NONE,
    OK,
    PHASES,
    SCAN,
    SCAN_ROWS_FIRST,
    SEEK,
    WRITE,
    Malformed,
    Reader,
    decode_request,
    encode_bytes,
    encode_mutations,
)
from tmsgate.storage.store import open_store
from tmsgate.storage.vlog import POINTER, TAG_POINTER

U32 = struct.Struct(">I")
END = b"\xff" * 8

# --- the codec -------------------------------------------------------------------------------

small_bytes = st.binary(max_size=24)
optional_bytes = st.none() | small_bytes
mutation = st.tuples(small_bytes, optional_bytes)
mutations = st.lists(mutation, max_size=6)


class Recorder(ServedBackend):
    """A ServedBackend whose requests are kept instead of sent: the bytes ServedBackend
    puts on the wire, answered with the least each method accepts."""

    def __init__(self) -> None:  # no owner to greet
        self.sent: list[bytes] = []
        self._segments = None  # every value comes with its row

    def _call(self, parts: list[bytes]) -> memoryview:
        body = b"".join(parts)
        self.sent.append(body)
        op = body[0]
        if op == GET:
            return memoryview(encode_bytes(None))
        if op in (SCAN, KEYS):
            return memoryview(b"\x00" + U32.pack(0))  # no more, no rows
        if op == CAS:
            return memoryview(b"\x01")
        if op == CASES:
            return memoryview(b"\x01" * U32.unpack_from(body, 1)[0])
        if op == GC:
            return memoryview(b"{}")
        if op == SEEK:
            return memoryview(b"\x00")  # no row found
        return memoryview(b"")


# A call of ServedBackend, and the (op, arguments) decode_request must give for it.
calls = st.one_of(
    st.tuples(st.just("write"), st.lists(mutation, min_size=1, max_size=6), st.booleans()),
    st.tuples(st.just("write_phases"), st.lists(mutations, max_size=4), st.booleans()),
    st.tuples(st.just("check_and_put"), small_bytes, optional_bytes, optional_bytes),
    st.tuples(
        st.just("check_and_put_many"),
        st.lists(st.tuples(small_bytes, optional_bytes, optional_bytes), min_size=1, max_size=5),
    ),
    st.tuples(st.just("get"), small_bytes),
    st.tuples(st.just("scan"), small_bytes, small_bytes, st.booleans(), st.booleans()),
    st.tuples(st.just("scan_keys"), small_bytes, small_bytes),
    st.tuples(st.just("seek_offset"), small_bytes, st.integers(0, (1 << 64) - 1)),
    st.tuples(st.just("collect_garbage")),
)


def make_call(client: Recorder, call: tuple) -> tuple[int, tuple[object, ...]]:
    name, *args = call
    if name == "write":
        client.write(args[0], sync=args[1])
        return WRITE, ([tuple(m) for m in args[0]], args[1])
    if name == "write_phases":
        client.write_phases(args[0], sync=args[1])
        return PHASES, ([[tuple(m) for m in phase] for phase in args[0]], args[1])
    if name == "check_and_put":
        client.check_and_put(*args)
        return CAS, tuple(args)
    if name == "check_and_put_many":
        assert client.check_and_put_many(args[0]) == [True] * len(args[0])
        return CASES, ([tuple(c) for c in args[0]],)
    if name == "get":
        client.get(args[0])
        return GET, (args[0],)
    if name == "scan":
        start, stop, reverse, include_start = args
        list(client.scan(start, stop, reverse=reverse, include_start=include_start))
        return SCAN, (start, stop, reverse, include_start, SCAN_ROWS_FIRST, False)
    if name == "scan_keys":
        list(client.scan_keys(*args))
        return KEYS, (args[0], args[1], SCAN_ROWS_FIRST * 4)
    if name == "seek_offset":
        assert client.seek_offset(*args) is None
        return SEEK, tuple(args)
    client.collect_garbage()
    return GC, ()


def valid_frame(call: tuple) -> bytes:
    client = Recorder()
    make_call(client, call)
    (body,) = client.sent
    return body


def decodes_or_refuses(body: bytes) -> None:
    try:
        op, args = decode_request(body)
    except Malformed:
        return
    assert op in (HELLO, WRITE, PHASES, CAS, GET, SCAN, KEYS, GC, SEEK, CASES)
    assert isinstance(args, tuple)


@settings(max_examples=400, deadline=None)
@given(call=calls)
def test_requests_decode_to_the_call_encoded(call: tuple) -> None:
    client = Recorder()
    expected = make_call(client, call)
    (body,) = client.sent
    assert decode_request(body) == expected
    assert decode_request(memoryview(body)) == expected


def test_hello_round_trips() -> None:
    assert decode_request(bytes([HELLO]) + U32.pack(4242)) == (HELLO, (4242,))


@settings(max_examples=1000, deadline=None)
@given(body=st.binary(max_size=64))
def test_random_bytes_decode_or_raise_malformed(body: bytes) -> None:
    decodes_or_refuses(body)


@settings(max_examples=600, deadline=None)
@given(op=st.integers(0, 255), fields=st.binary(max_size=48))
def test_every_op_byte_with_random_fields(op: int, fields: bytes) -> None:
    decodes_or_refuses(bytes([op]) + fields)


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(call=calls, data=st.data())
def test_mutated_valid_frames_decode_or_raise_malformed(call: tuple, data: st.DataObject) -> None:
    body = bytearray(valid_frame(call))
    kind = data.draw(st.sampled_from(["cut", "flip", "insert", "append", "length"]))
    if kind == "cut":
        del body[data.draw(st.integers(0, len(body))) :]
    elif kind == "flip" and body:
        at = data.draw(st.integers(0, len(body) - 1))
        body[at] ^= data.draw(st.integers(1, 255))
    elif kind == "insert":
        at = data.draw(st.integers(0, len(body)))
        body[at:at] = data.draw(st.binary(min_size=1, max_size=8))
    elif kind == "append":
        body += data.draw(st.binary(min_size=1, max_size=8))
    elif len(body) >= 5:  # a length or count field set to an extreme
        at = data.draw(st.integers(1, len(body) - 4))
        body[at : at + 4] = U32.pack(data.draw(st.sampled_from([0, 1, NONE - 1, NONE, 1 << 31])))
    decodes_or_refuses(bytes(body))


def scan_request(start: bytes, stop: bytes, flags: int, limit: int) -> bytes:
    bounds = encode_bytes(start) + encode_bytes(stop)
    return bytes([SCAN]) + bounds + bytes([flags]) + U32.pack(limit)


def lengths(*ns: int) -> bytes:
    """Lengths in a list of mutations or keys: 32 bits in this machine's order."""
    return array("I", ns).tobytes()


def test_malformed_names_what_is_wrong() -> None:
    cases = {
        b"": "ends early",
        bytes([99]): "unknown operation 99",
        bytes([GET]) + U32.pack(10) + b"abc": "runs past the frame's end",
        bytes([GET]) + U32.pack(NONE): "cannot be absent",
        bytes([GC]) + b"xy": "2 bytes after the last field",
        scan_request(b"a", b"b", 8, 1): "scan flags 8",
        bytes([WRITE, 1]) + U32.pack(1000): "2000 lengths cannot fit",
        bytes([WRITE, 1]) + U32.pack(1) + lengths(1, 5) + b"k": "run past the frame's end",
        bytes([KEYS]) + encode_bytes(b"a") + encode_bytes(b"b"): "frame ends early",
        bytes([SEEK]) + encode_bytes(b"M") + b"\x00" * 7: "frame ends early",
    }
    for body, message in cases.items():
        with pytest.raises(Malformed, match=message):
            decode_request(body)


def test_mutations_encode_and_read_back() -> None:
    rows = [(b"a", b"1"), (b"b", None), (b"", b""), (b"c" * 300, b"v" * 70000)]
    parts: list[bytes] = []
    encode_mutations(parts, rows)
    reader = Reader(b"".join(parts))
    assert reader.mutations() == rows
    reader.end()


# --- a live owner ----------------------------------------------------------------------------


class Owner:
    """A BackendServer over ``leveldb://<dir>``, with its socket in a short directory."""

    def __init__(self, db_dir: Path) -> None:
        self.backend = open_backend(f"leveldb://{db_dir}")
        self._dir = tempfile.TemporaryDirectory(prefix="served-")
        self.socket_path = os.path.join(self._dir.name, "store.sock")
        self.server = BackendServer(self.backend, self.socket_path, str(db_dir))
        self.clients: list[ServedBackend] = []

    def client(self) -> ServedBackend:
        client = ServedBackend(self.socket_path)
        self.clients.append(client)
        return client

    def raw(self, pid: int | None = None) -> RawConnection:
        conn = RawConnection(self.socket_path)
        if pid is not None:
            status, body = conn.request(bytes([HELLO]) + U32.pack(pid))
            assert status == OK, body
        return conn

    def close(self) -> None:
        for client in self.clients:
            client.close()
        self.server.close()
        self.backend.close()
        self._dir.cleanup()


class RawConnection:
    """Frames by hand on an AF_UNIX socket."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(path)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request(self, body: bytes) -> tuple[int, bytes]:
        self.send(U32.pack(len(body)) + body)
        return self.answer()

    def answer(self) -> tuple[int, bytes]:
        (n,) = U32.unpack(self._exact(4))
        body = self._exact(n)
        return body[0], body[1:]

    def at_eof(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def _exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("the owner closed the connection")
            buf += chunk
        return buf

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def owner(tmp_path: Path) -> Iterator[Owner]:
    o = Owner(tmp_path / "db")
    yield o
    o.close()


def test_hello_answers_the_store_path(owner: Owner, tmp_path: Path) -> None:
    assert owner.client().path == str(tmp_path / "db")


MALFORMED = [
    (b"", "frame ends early"),
    (bytes([77]), "unknown operation 77"),
    (bytes([GET]) + U32.pack(100) + b"short", "runs past the frame's end"),
    (bytes([GET]), "frame ends early"),
    (bytes([GET]) + U32.pack(NONE), "cannot be absent"),
    (bytes([GC, 0]), "1 bytes after the last field"),
    (bytes([WRITE, 1]) + U32.pack(NONE), "lengths cannot fit"),
    (bytes([WRITE, 0]) + U32.pack(1) + lengths(NONE, 1) + b"kv", "run past the frame's end"),
    (bytes([SEEK]) + encode_bytes(b"M"), "frame ends early"),
    (bytes([PHASES, 1]) + U32.pack(3) + U32.pack(0), "frame ends early"),
    (bytes([CAS]) + encode_bytes(b"k") + U32.pack(7), "runs past"),
    (bytes([CASES]) + U32.pack(1 << 30), "cannot fit"),
    (bytes([CASES]) + U32.pack(2) + encode_bytes(b"k") + U32.pack(NONE) * 2, "ends early"),
    (scan_request(b"a", b"z", 9, 5), "scan flags 9"),
]


def test_malformed_frames_get_an_error_answer_and_the_connection_goes_on(owner: Owner) -> None:
    good = owner.client()
    good.write([(b"Kk", b"v")])
    raw = owner.raw()
    for body, message in MALFORMED:
        status, answer = raw.request(body)
        assert status == ERROR, body
        assert answer.decode().startswith("malformed request: "), answer
        assert message in answer.decode(), (body, answer)
        # The same connection serves the next request...
        status, answer = raw.request(bytes([GET]) + encode_bytes(b"Kk"))
        assert status == OK and Reader(answer).optional() == b"v"
    # ...and so do the others; nothing was written by the malformed writes.
    assert good.get(b"Kk") == b"v"
    assert list(good.scan(b"", END)) == [(b"Kk", b"v")]
    raw.close()


def test_a_frame_over_the_limit_is_refused_and_the_connection_closed(owner: Owner) -> None:
    raw = owner.raw()
    raw.send(U32.pack(MAX_FRAME + 1))
    status, answer = raw.answer()
    assert status == ERROR
    assert f"{MAX_FRAME + 1} bytes is over the limit" in answer.decode()
    assert raw.at_eof()
    raw.close()
    client = owner.client()
    client.write([(b"Ka", b"1")])
    assert client.get(b"Ka") == b"1"


def test_a_connection_dropped_mid_frame_leaves_the_owner_serving(owner: Owner) -> None:
    for partial in (b"\x00\x00", U32.pack(50) + bytes([WRITE, 1]) + U32.pack(1)):
        raw = owner.raw()
        raw.send(partial)
        raw.close()
    client = owner.client()
    client.write([(b"Kb", b"2")])
    assert client.get(b"Kb") == b"2"
    assert list(client.scan_keys(b"", END)) == [b"Kb"]


def test_backend_errors_come_back_as_backend_error(owner: Owner) -> None:
    client = owner.client()
    owner.backend.close()  # the owner's LevelDB is gone: every call fails there
    with pytest.raises(BackendError):
        client.get(b"Kx")
    # The connection is still fine: the answer was an error frame, not a dropped stream.
    with pytest.raises(BackendError):
        client.write([(b"Kx", b"1")])


def test_calls_after_the_owner_closed_fail_with_backend_error(owner: Owner) -> None:
    client = owner.client()
    client.write([(b"Kc", b"3")])
    owner.server.close()
    with pytest.raises(BackendError):
        client.get(b"Kc")
    with pytest.raises(BackendError, match="does not answer"):
        ServedBackend(owner.socket_path)


# --- disconnect ------------------------------------------------------------------------------


def test_disconnect_ends_one_process_connections_only(owner: Owner) -> None:
    me = os.getpid()
    other_pid = me + 100_000  # a raw client greeting as another process
    victim = owner.client()  # greets as this process, on this thread's connection
    victim.write([(b"Kv", b"1")])
    # A second connection of the same client, from another thread.
    done = threading.Event()
    err: list[BaseException] = []

    def on_thread() -> None:
        try:
            victim.get(b"Kv")
        except BaseException as exc:
            err.append(exc)
        done.set()

    threading.Thread(target=on_thread).start()
    assert done.wait(10) and not err, err
    other = owner.raw(pid=other_pid)
    assert owner.server.disconnect(me) == 2
    with pytest.raises(BackendError):
        victim.get(b"Kv")
    # The other process is untouched.
    status, answer = other.request(bytes([GET]) + encode_bytes(b"Kv"))
    assert status == OK and Reader(answer).optional() == b"1"
    assert owner.server.disconnect(other_pid) == 1
    assert other.at_eof()
    other.close()
    assert owner.server.disconnect(424242) == 0


def test_a_reconnected_client_is_still_known_by_its_pid(owner: Owner) -> None:
    """After its connection was cut, a client's next call connects again; that connection
    must say whose it is too, or disconnect(pid) cannot end it (and the parent would
    release a dead worker's leases while a write of it is still being applied)."""
    client = owner.client()
    client.write([(b"Kr", b"1")])
    assert owner.server.disconnect(os.getpid()) == 1
    with pytest.raises(BackendError):
        client.get(b"Kr")
    assert client.get(b"Kr") == b"1"  # a new connection
    assert owner.server.disconnect(os.getpid()) == 1
    with pytest.raises(BackendError):
        client.get(b"Kr")


# --- group commit ----------------------------------------------------------------------------


def test_concurrent_writes_all_land(owner: Owner) -> None:
    client = owner.client()
    threads_n, writes_each = 12, 40
    barrier = threading.Barrier(threads_n)
    errors: list[BaseException] = []

    def writer(t: int) -> None:
        try:
            barrier.wait()
            for i in range(writes_each):
                if i % 2:
                    client.write([(b"Kt%02d-%03d" % (t, i), b"%d" % i)], sync=True)
                else:  # phases go through the same group commit
                    client.write_phases(
                        [[(b"Kt%02d-%03d" % (t, i), b"%d" % i)], [(b"Kp%02d" % t, b"%d" % i)]]
                    )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(threads_n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not any(th.is_alive() for th in threads)
    assert not errors, errors
    rows = dict(client.scan(b"Kt", b"Ku"))
    assert rows == {
        b"Kt%02d-%03d" % (t, i): b"%d" % i for t in range(threads_n) for i in range(writes_each)
    }
    # Each thread's last phase write left its own last value.
    assert dict(client.scan(b"Kp", b"Kq")) == {
        b"Kp%02d" % t: b"%d" % (writes_each - 2) for t in range(threads_n)
    }
    stats = owner.server.stats
    assert stats["writes"] == threads_n * writes_each  # every write was counted once
    assert 1 <= stats["batches"] <= stats["writes"]


def test_a_later_write_of_a_key_wins(owner: Owner) -> None:
    a, b = owner.client(), owner.client()
    for i in range(50):
        (a if i % 2 else b).write([(b"Kw", b"%d" % i)])
    assert a.get(b"Kw") == b"49"
    a.write([(b"Kw", None)])
    assert b.get(b"Kw") is None
    # Within one write, the last mutation of a key wins.
    b.write([(b"Kw", b"x"), (b"Kw", b"y")])
    assert a.get(b"Kw") == b"y"
    # And the rows survive the owner: they are on disk.
    assert owner.backend.get(b"Kw") == b"y"


# --- seek_offset -----------------------------------------------------------------------------


def test_seek_offset_finds_the_row_the_backend_itself_finds(owner: Owner) -> None:
    """A Store over served:// reads from every offset as one over leveldb:// would; the
    owner's search answers what find_offset_row answers on the LevelDB backend."""
    store = open_store(f"served://{owner.socket_path}")
    try:
        t = TopicId("default", "seek")
        store.create_topic(t)
        payloads = []
        for batch in range(40):
            size = 1 + batch % 7
            chunk = [b"m%d-%d" % (batch, i) for i in range(size)]
            store.publish(t, chunk)
            payloads += chunk
        for offset in (0, 1, 5, 6, 7, 50, len(payloads) - 1, len(payloads)):
            got = store.read(t, offset=offset, max_messages=3).messages
            assert [m.payload for m in got] == payloads[offset : offset + 3], offset
        suffix = keys.MESSAGE_SUFFIX.size
        prefixes = {key[: len(key) - suffix] for key in owner.backend.scan_keys(b"M", b"N")}
        assert prefixes, "no MessageTable rows written"
        client = owner.client()
        for prefix in prefixes:
            for offset in range(0, len(payloads) + 2, 3):
                key = find_offset_row(owner.backend, prefix, offset)
                found = client.seek_offset(prefix, offset)
                if key is None:
                    assert found is None, offset
                else:
                    assert found == (key, owner.backend.get(key)), offset
    finally:
        store.close()


def test_value_log_values_are_read_from_the_segments_here(owner: Owner) -> None:
    """Values the owner keeps in its value log come back by pointer and are read from the
    segment files by the client (the rows carry 13 bytes, not the value); a pointer into a
    segment collected since makes the client ask the owner for the row instead."""
    client = owner.client()
    assert client._segments is not None, "the owner's value log is on this machine"
    big = {b"M-big-%03d" % i: bytes([i]) * 100_000 for i in range(8)}  # value log sized
    client.write(list(big.items()))
    assert dict(client.scan(b"M-big-", b"M-big-\xff")) == big
    assert dict(client.scan(b"M-big-", b"M-big-\xff", reverse=True)) == big
    # A row as the owner would send it, pointing into a segment that is gone.
    gone = POINTER.pack(TAG_POINTER, 999_999, 8, 100_000)
    key = b"M-big-003"
    assert list(client._resolved([(key, gone)])) == [(key, big[key])]
    assert list(client._resolved([(b"M-missing", gone)])) == []  # gone with its row
