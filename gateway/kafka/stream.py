"""A Kafka connection's socket: whole frames in, responses out; and the memory budget that
every connection's partly received and queued requests share.

asyncio's StreamReader copies every received byte several times under the GIL: the
transport hands it a bytes object, ``feed_data`` appends that to a buffer, ``readexactly``
slices a frame out and the buffer's front is deleted. For a 1 MiB produce request that was
about a sixth of the event loop's time. With a BufferedProtocol the socket is read
straight into memory we own: small frames into a staging buffer, a large frame's body
into chunks allocated as its bytes arrive, so the kernel's copy is the only big one before
the frame is joined and decoded.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Iterable

from ..acls import canonical_host

STAGING_BYTES = 64 << 10
BODY_CHUNK_BYTES = 1 << 20  # a large frame's memory grows as its bytes arrive, by this
# Frames received but not yet taken; beyond either limit the socket is not read, which
# pushes back on the client (reading resumes below half of both).
MAX_QUEUED_FRAMES = 64
MAX_QUEUED_BYTES = 16 << 20
# Kafka's queued.max.request.bytes is unbounded by default (-1); here 40 clients each
# sending 4 MiB held 160 MB. 256 MiB lets two requests of the largest size accepted
# (socket.request.max.bytes, 100 MiB) arrive at once beside many ordinary ones, and is
# a fixed figure an operator can size a container by (--queued-max-request-bytes).
DEFAULT_QUEUED_MAX_REQUEST_BYTES = 256 << 20


class ReceiveBudget:
    """The bytes of requests being received or waiting to be taken, summed over every
    connection of a listener (Kafka's queued.max.request.bytes). One per server.

    A stream charges a large frame's memory chunk by chunk before allocating it, and
    charges a small frame when it copies it out of its staging buffer. While the budget
    lasts any stream may grow (so the limit may be overshot by one chunk, as Kafka's
    non-strict memory pool overshoots by one request); once it is spent, streams that
    want more stop reading their sockets and wait here until memory comes back: when
    the driver takes a frame, or a connection closes.

    Waiting could deadlock if every waiter held part of a frame and only more memory
    could complete one. So one stream at a time, the finisher, may always grow to
    complete the frame it is in: a frame larger than the whole budget still gets
    through. Frames already received are always delivered (they need nothing more), so
    the limit is overshot by at most the finisher's request plus what one read brings
    into each connection's staging buffer."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit if limit is not None and limit > 0 else None  # None: unbounded
        self.used = 0
        self._waiting: dict[FrameStream, None] = {}  # in the order they started waiting
        self._finisher: FrameStream | None = None

    @property
    def exhausted(self) -> bool:
        return self.limit is not None and self.used >= self.limit

    @property
    def waiting(self) -> int:
        """Streams not reading their sockets for want of memory."""
        return len(self._waiting)

    def may_grow(self, stream: FrameStream) -> bool:
        if not self.exhausted or self._finisher is stream:
            return True
        if self._finisher is None and stream.mid_frame:
            self._finisher = stream
            return True
        return False

    def charge(self, nbytes: int) -> None:
        self.used += nbytes

    def release(self, nbytes: int) -> None:
        self.used -= nbytes
        self._wake()

    def wait(self, stream: FrameStream) -> None:
        self._waiting[stream] = None

    def frame_done(self, stream: FrameStream) -> None:
        """``stream`` completed (or dropped) its frame: it no longer needs to finish."""
        if self._finisher is stream:
            self._finisher = None
            self._wake()

    def forget(self, stream: FrameStream) -> None:
        self._waiting.pop(stream, None)
        self.frame_done(stream)

    def _wake(self) -> None:
        if not self._waiting:
            return
        if not self.exhausted:
            ready = list(self._waiting)  # in order; any that find no room wait again
        elif self._finisher is None:
            ready = [s for s in self._waiting if s.mid_frame][:1]
        else:
            return
        for stream in ready:
            del self._waiting[stream]
        for stream in ready:
            stream.budget_available()


class FrameStream(asyncio.BufferedProtocol):
    """``frame_size(prefix)`` validates a length prefix (it raises to refuse a frame).
    Without a ``budget`` the stream's memory is bounded only by its own queue limits."""

    def __init__(
        self, on_open: Callable[[FrameStream], None], budget: ReceiveBudget | None = None
    ) -> None:
        self._on_open = on_open
        self._budget = budget if budget is not None else ReceiveBudget(None)
        self.frame_size: Callable[[bytes], int] = _unset
        self.transport: asyncio.Transport | None = None
        self._stage = bytearray(STAGING_BYTES)
        self._stage_view = memoryview(self._stage)
        self._start = self._end = 0  # unparsed bytes are _stage[_start:_end]
        self._size = -1  # the accepted size of the frame at _start, once its prefix is read
        # A frame too large for the staging buffer is received into chunks of its own,
        # allocated as its bytes arrive (a length prefix alone reserves nothing).
        self._body_size = 0  # 0: no large frame in progress
        self._body_got = 0
        self._chunks: list[bytes | bytearray] = []
        self._chunk_view: memoryview | None = None  # None mid-frame: waiting for memory
        self._chunk_got = 0
        self._frames: collections.deque[bytes | BaseException | None] = collections.deque()
        self._queued_bytes = 0
        self._held = 0  # charged to the budget: the chunks and queued frames
        self._waiter: asyncio.Future[None] | None = None
        # Reading is paused while any of these holds (see _update_reading).
        self._queue_full = False
        self._blocked = False  # waiting in the budget
        self._refused = False  # a refused frame: nothing more is read
        self._at_eof = False  # the transport reads no more either way
        self._paused_reading = False
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._closed = False

    @property
    def mid_frame(self) -> bool:
        """Part of a large frame is held: its memory comes back only once it completes."""
        return self._body_size > 0

    @property
    def held_bytes(self) -> int:
        return self._held

    # --- asyncio callbacks ----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass
        self._on_open(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._body_size:
            if self._chunk_view is None:  # a read that raced our pause: it needs room now
                self._allocate_chunk()
            assert self._chunk_view is not None
            return self._chunk_view[self._chunk_got :]
        if self._end == STAGING_BYTES:  # full of a partial frame's head: make room
            self._compact()
        return self._stage_view[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._body_size:
            assert self._chunk_view is not None
            self._body_got += nbytes
            self._chunk_got += nbytes
            if self._body_got == self._body_size:
                frame = b"".join(self._chunks)
                self._chunks, self._chunk_view, self._body_size = [], None, 0
                self._budget.frame_done(self)
                self._push(frame)  # charged chunk by chunk already
            elif self._chunk_got == len(self._chunk_view):
                self._next_chunk()
                return
            else:
                return
        else:
            self._end += nbytes
            self._parse()
        # Back to small frames: the next read's frames need memory the budget lacks.
        if not self._body_size and not self._blocked and self._budget.exhausted:
            self._block()

    def eof_received(self) -> bool:
        self._at_eof = True
        self._drop_partial()  # that frame can never complete
        self._blocked = False  # nothing more is read: no memory is wanted
        self._budget.forget(self)
        self._push(None)
        # Keep the transport open for writing: a client that half-closes still gets the
        # answers to what it sent; the connection closes once they are written. (TLS
        # closes at the peer's close_notify whatever this says, and warns if it is True.)
        return self.transport is None or self.transport.get_extra_info("sslcontext") is None

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        # Nobody can be answered any more: return every byte held at once, whether or
        # not the driver ever reads again.
        self._drop_partial()
        self._budget.forget(self)
        self._frames = collections.deque(f for f in self._frames if not isinstance(f, bytes))
        self._queued_bytes = 0
        self._uncharge(self._held)
        self._push(exc)
        self.resume_writing()  # drain() then raises: the connection is gone

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._drain_waiters.clear()

    # --- frames ---------------------------------------------------------------------------
    def _parse(self) -> None:
        stage, start, end = self._stage, self._start, self._end
        while end - start >= 4:
            size = self._size
            if size < 0:
                try:
                    size = self._size = self.frame_size(bytes(stage[start : start + 4]))
                except Exception as exc:  # refused (too large): nothing more is read
                    self._start = self._end = 0
                    self._refused = True
                    self._push(exc)
                    return
            have = end - start - 4
            if have >= size:
                self._charge(size)
                self._push(bytes(stage[start + 4 : start + 4 + size]))
                start += 4 + size
                self._size = -1
                continue
            if size + 4 > STAGING_BYTES:
                # Too large for the staging buffer: its body goes to chunks of its own.
                # The head already received is charged as it is (it is in memory).
                self._charge(have)
                self._chunks = [bytes(stage[start + 4 : end])]
                self._body_size, self._body_got, self._size = size, have, -1
                self._next_chunk()
                start = end
            break
        if start == end:
            start = end = 0
        self._start, self._end = start, end
        if start and STAGING_BYTES - end < 4096:
            self._compact()

    def _compact(self) -> None:
        n = self._end - self._start
        self._stage[:n] = self._stage[self._start : self._end]
        self._start, self._end = 0, n

    def _next_chunk(self) -> None:
        if self._budget.may_grow(self):
            self._allocate_chunk()
        else:
            self._chunk_view = None
            self._block()

    def _allocate_chunk(self) -> None:
        size = min(BODY_CHUNK_BYTES, self._body_size - self._body_got)
        self._charge(size)
        chunk = bytearray(size)
        self._chunks.append(chunk)
        self._chunk_view, self._chunk_got = memoryview(chunk), 0

    def _drop_partial(self) -> None:
        if self._body_size:
            self._uncharge(sum(len(c) for c in self._chunks))
            self._chunks, self._chunk_view, self._body_size = [], None, 0
            self._budget.frame_done(self)

    def _push(self, item: bytes | BaseException | None) -> None:
        self._frames.append(item)
        if isinstance(item, bytes):
            self._queued_bytes += len(item)
        if len(self._frames) >= MAX_QUEUED_FRAMES or self._queued_bytes >= MAX_QUEUED_BYTES:
            self._queue_full = True
        self._update_reading()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def read_frame(self) -> bytes | None:
        """The next frame's bytes (without the length prefix); None at end of stream.
        Raises what ``frame_size`` raised, or the connection's error."""
        while not self._frames:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        item = self._frames.popleft()
        if isinstance(item, bytes):
            self._queued_bytes -= len(item)
            self._uncharge(len(item))  # taken: the driver decodes it now
        if (
            self._queue_full
            and len(self._frames) < MAX_QUEUED_FRAMES // 2
            and self._queued_bytes < MAX_QUEUED_BYTES // 2
        ):
            self._queue_full = False
            self._update_reading()
        if isinstance(item, BaseException):
            self._frames.appendleft(item)  # sticky: every later read fails the same way
            raise item
        if item is None:
            self._frames.appendleft(None)
        return item

    # --- the budget -----------------------------------------------------------------------
    def _charge(self, nbytes: int) -> None:
        self._held += nbytes
        self._budget.charge(nbytes)

    def _uncharge(self, nbytes: int) -> None:
        if nbytes:
            self._held -= nbytes
            self._budget.release(nbytes)

    def _block(self) -> None:
        self._blocked = True
        self._budget.wait(self)
        self._update_reading()

    def budget_available(self) -> None:
        """Called by the budget: memory came back, or this stream may finish its frame."""
        self._blocked = False
        if self._closed:
            return
        if self._body_size and self._chunk_view is None:
            self._next_chunk()  # waits again if someone else took the room first
        elif not self._body_size and self._budget.exhausted:
            self._block()
        self._update_reading()

    def _update_reading(self) -> None:
        if self._closed or self._at_eof or self.transport is None:
            return
        pause = self._refused or self._blocked or self._queue_full
        if pause and not self._paused_reading:
            self._paused_reading = True
            self.transport.pause_reading()
        elif not pause and self._paused_reading:
            self._paused_reading = False
            self.transport.resume_reading()

    # --- writing --------------------------------------------------------------------------
    def write(self, parts: Iterable[bytes]) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.writelines(parts)

    @property
    def write_paused(self) -> bool:
        """The transport's buffer is above its high-water mark: drain() before writing."""
        return self._write_paused

    def check_open(self) -> None:
        """Raise as drain() would if the connection is gone."""
        if self._closed:
            raise ConnectionResetError("connection lost")

    async def drain(self) -> None:
        self.check_open()
        if self._write_paused:
            waiter = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(waiter)
            await waiter
            if self._closed:
                raise ConnectionResetError("connection lost")

    def peer(self) -> str:
        peer = self.transport.get_extra_info("peername") if self.transport else None
        return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)

    def peer_host(self) -> str:
        """The client's IP address ("*" when unknown), as host ACLs name it."""
        peer = self.transport.get_extra_info("peername") if self.transport else None
        return canonical_host(str(peer[0])) if isinstance(peer, tuple) else "*"

    def is_closing(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()


def _unset(prefix: bytes) -> int:
    raise RuntimeError("FrameStream.frame_size was not set")
