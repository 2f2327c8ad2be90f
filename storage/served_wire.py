"""The wire of ``served://`` (served.py): frames, and the codec of requests and answers.

Pure but for the three frame functions at the end, which read and write one frame on a
socket. The owner and the workers (served.py) share it; tests/test_served_backend.py
fuzzes the decoder.

The wire (a request or an answer is ``u32 length`` + body; integers big-endian, except
the arrays of lengths in a list, in this machine's own order: the socket is local):

    request  = op(u8) fields...          answer = status(u8: 0 ok, 1 error, 2 full) ...
    list     = n(u32) n key lengths, n value lengths (u32 each, 0xFFFFFFFF: no value),
               the keys, the values
    bytes    = len(u32) data             optional bytes: len 0xFFFFFFFF is None
    HELLO    pid(u32)                 -> the owner's store path (bytes)
    WRITE    sync(u8) list                                        -> nothing
    PHASES   sync(u8) phases(u32) phases x list                   -> nothing
    CAS      key, optional expected, optional value               -> won(u8)
    CASES    n(u32) n x (key, optional expected, optional value)  -> n x won(u8)
    GET      key                                                  -> optional value
    SCAN     start, stop, flags(u8: 1 reverse, 2 include start, 4 values as stored),
             limit(u32)                     -> more(u8: 1 more, 2 values as stored) list
    KEYS     start, stop, limit(u32)        -> more(u8) n(u32) n key lengths, the keys
    GC       (nothing)                      -> JSON object of counts (bytes)
    SEEK     prefix, offset(u64)            -> found(u8) [key, optional value]
    error                                   -> message (bytes, UTF-8)
    a full disk (status 2)                  -> free(u64) need(u64): DiskFull again

A scan comes in chunks (the first small, each next larger, up to ``SCAN_ROWS_MAX``), each
continuing after the last key of the one before, so a caller that stops early reads
little; rows are as they were at some moment during the scan, which is what the contract
promises anyway. Batches of phases become one LevelDB batch: atomic is stronger than
ordered (backend.py).
"""

from __future__ import annotations

import contextlib
import socket
import struct
from array import array
from collections.abc import Sequence
from itertools import accumulate

from .backend import Mutation

HELLO, WRITE, PHASES, CAS, GET, SCAN, KEYS, GC, SEEK, CASES = range(1, 11)
OK, ERROR, DISK_FULL = 0, 1, 2
NONE = 0xFFFFFFFF
MAX_FRAME = 1 << 30  # a frame longer than this is refused: no row batch is that large
SCAN_ROWS_FIRST = 32
SCAN_ROWS_MAX = 4096
SCAN_BYTES_MAX = 4 << 20
# Socket buffers large enough for a scan's chunk or a busy topic's write in a few system
# calls (Linux caps them at net.core.[rw]mem_max; the default left ~200 KiB per call).
SOCKET_BUFFER = 4 << 20

U32 = struct.Struct(">I")
U64 = struct.Struct(">Q")
# The lengths in a list of keys or rows: this machine's own 32-bit order (the socket is
# local), so an array converts them in one step each way.
LENGTH = array("I")
assert LENGTH.itemsize == 4, "array('I') must be 32 bits"


class Malformed(ValueError):
    """A request or answer that does not follow the wire format."""


def encode_bytes(data: bytes | None) -> bytes:
    return U32.pack(NONE) if data is None else U32.pack(len(data)) + data


def encode_mutations(out: list[bytes], mutations: Sequence[Mutation]) -> None:
    """A list of (key, optional value): its count, every key's length, every value's
    length (NONE for a delete), then the keys, then the values, each run joined in one
    step: no Python call per mutation but the length comprehension (a write of a busy
    topic carries thousands of rows)."""
    out.append(U32.pack(len(mutations)))
    if not mutations:
        return
    keys, values = zip(*mutations, strict=True)
    lengths = array("I", map(len, keys))
    lengths.extend([NONE if v is None else len(v) for v in values])
    out.append(lengths.tobytes())
    out.append(b"".join(keys))
    out.append(b"".join([v for v in values if v is not None]))


def encode_keys(out: list[bytes], keys: Sequence[bytes]) -> None:
    out.append(U32.pack(len(keys)))
    out.append(array("I", map(len, keys)).tobytes())
    out.append(b"".join(keys))


class Reader:
    """Fields read in order from one frame's body; ``Malformed`` past its end."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes | memoryview) -> None:
        self.data = memoryview(data)
        self.pos = 0

    def u8(self) -> int:
        if self.pos >= len(self.data):
            raise Malformed("frame ends early")
        self.pos += 1
        return self.data[self.pos - 1]

    def u64(self) -> int:
        if self.pos + 8 > len(self.data):
            raise Malformed("frame ends early")
        (n,) = U64.unpack_from(self.data, self.pos)
        self.pos += 8
        return n

    def u32(self) -> int:
        if self.pos + 4 > len(self.data):
            raise Malformed("frame ends early")
        (n,) = U32.unpack_from(self.data, self.pos)
        self.pos += 4
        return n

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise Malformed(f"a field of {n} bytes runs past the frame's end")
        out = bytes(self.data[self.pos : end])
        self.pos = end
        return out

    def bytes_(self) -> bytes:
        n = self.u32()
        if n == NONE:
            raise Malformed("a key or bound cannot be absent")
        return self.take(n)

    def optional(self) -> bytes | None:
        n = self.u32()
        return None if n == NONE else self.take(n)

    def _lengths(self, count: int) -> array[int]:
        size = count * LENGTH.itemsize
        if size > len(self.data) - self.pos:
            raise Malformed(f"{count} lengths cannot fit in the frame")
        lengths = array("I")
        lengths.frombytes(self.data[self.pos : self.pos + size])
        self.pos += size
        return lengths

    def mutations(self) -> list[Mutation]:
        count = self.u32()
        lengths = self._lengths(2 * count)
        key_lengths, value_lengths = lengths[:count], lengths[count:]
        value_sizes = [0 if n == NONE else n for n in value_lengths]
        keys = self._slices(key_lengths)
        values = self._slices(value_sizes)
        return [
            (key, None if n == NONE else value)
            for key, value, n in zip(keys, values, value_lengths, strict=True)
        ]

    def keys(self) -> list[bytes]:
        return self._slices(self._lengths(self.u32()))

    def _slices(self, lengths: Sequence[int]) -> list[bytes]:
        """The next ``sum(lengths)`` bytes, cut into pieces of those lengths."""
        total = sum(lengths)
        if total > len(self.data) - self.pos:
            raise Malformed("the keys or values run past the frame's end")
        run = self.take(total)
        ends = list(accumulate(lengths))
        return [run[end - n : end] for end, n in zip(ends, lengths, strict=True)]

    def end(self) -> None:
        if self.pos != len(self.data):
            raise Malformed(f"{len(self.data) - self.pos} bytes after the last field")


def decode_request(body: bytes | memoryview) -> tuple[int, tuple[object, ...]]:
    """(op, arguments) of one request; ``Malformed`` names what is wrong."""
    r = Reader(body)
    op = r.u8()
    args: tuple[object, ...]
    if op == HELLO:
        args = (r.u32(),)
    elif op == WRITE:
        sync = r.u8()
        args = (r.mutations(), bool(sync))
    elif op == PHASES:
        sync = r.u8()
        phases = [r.mutations() for _ in range(r.u32())]
        args = (phases, bool(sync))
    elif op == CAS:
        args = (r.bytes_(), r.optional(), r.optional())
    elif op == CASES:
        n = r.u32()
        if n > len(body):  # each change takes at least a byte: a count this large lies
            raise Malformed(f"{n} changes cannot fit in {len(body)} bytes")
        args = ([(r.bytes_(), r.optional(), r.optional()) for _ in range(n)],)
    elif op == GET:
        args = (r.bytes_(),)
    elif op == SCAN:
        start, stop, flags, limit = r.bytes_(), r.bytes_(), r.u8(), r.u32()
        if flags > 7:
            raise Malformed(f"unknown scan flags {flags}")
        args = (start, stop, bool(flags & 1), bool(flags & 2), limit, bool(flags & 4))
    elif op == KEYS:
        args = (r.bytes_(), r.bytes_(), r.u32())
    elif op == GC:
        args = ()
    elif op == SEEK:
        args = (r.bytes_(), r.u64())
    else:
        raise Malformed(f"unknown operation {op}")
    r.end()
    return op, args


def recv_frame(sock: socket.socket) -> bytearray | None:
    """One frame's body, or None at a clean end of stream before it."""
    head = _recv_exact(sock, 4, eof_ok=True)
    if head is None:
        return None
    (n,) = U32.unpack(head)
    if n > MAX_FRAME:
        raise Malformed(f"a frame of {n} bytes is over the limit of {MAX_FRAME}")
    body = _recv_exact(sock, n, eof_ok=False)
    assert body is not None
    return body


def _recv_exact(sock: socket.socket, n: int, eof_ok: bool) -> bytearray | None:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            if got == 0 and eof_ok:
                return None
            raise ConnectionError("the peer closed the connection mid-frame")
        got += k
    return buf


def big_buffers(sock: socket.socket) -> None:
    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER)


def send_frame(sock: socket.socket, parts: list[bytes]) -> None:
    size = sum(len(p) for p in parts)
    sock.sendall(b"".join([U32.pack(size), *parts]))
