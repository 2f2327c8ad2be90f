"""A Kafka connection's socket: whole frames in, responses out.

asyncio's StreamReader copies every received byte several times under the GIL: the
transport hands it a bytes object, ``feed_data`` appends that to a buffer, ``readexactly``
slices a frame out and the buffer's front is deleted. For a 1 MiB produce request that was
about a sixth of the event loop's time. With a BufferedProtocol the socket is read
straight into memory we own: small frames into a staging buffer, a large frame's body
into a buffer of exactly its size, so the kernel's copy is the only big one before the
frame is decoded.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Iterable

STAGING_BYTES = 64 << 10
BODY_CHUNK_BYTES = 1 << 20  # a large frame's memory grows as its bytes arrive, by this
# Frames received but not yet taken; beyond either limit the socket is not read, which
# pushes back on the client (reading resumes below half of both).
MAX_QUEUED_FRAMES = 64
MAX_QUEUED_BYTES = 16 << 20


class FrameStream(asyncio.BufferedProtocol):
    """``frame_size(prefix)`` validates a length prefix (it raises to refuse a frame)."""

    def __init__(self, on_open: Callable[[FrameStream], None]) -> None:
        self._on_open = on_open
        self.frame_size: Callable[[bytes], int] = _unset
        self.transport: asyncio.Transport | None = None
        self._stage = bytearray(STAGING_BYTES)
        self._stage_view = memoryview(self._stage)
        self._start = self._end = 0  # unparsed bytes are _stage[_start:_end]
        # A frame too large for the staging buffer is received into chunks of its own,
        # allocated as its bytes arrive (a length prefix alone reserves nothing).
        self._body_size = 0  # 0: no large frame in progress
        self._body_got = 0
        self._chunks: list[bytes | bytearray] = []
        self._chunk_view: memoryview | None = None
        self._chunk_got = 0
        self._frames: collections.deque[bytes | BaseException | None] = collections.deque()
        self._queued_bytes = 0
        self._waiter: asyncio.Future[None] | None = None
        self._paused_reading = False
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._closed = False

    # --- asyncio callbacks ----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass
        self._on_open(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._chunk_view is not None:
            return self._chunk_view[self._chunk_got :]
        if self._end == STAGING_BYTES:  # full of a partial frame's head: make room
            self._compact()
        return self._stage_view[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._chunk_view is not None:
            self._body_got += nbytes
            self._chunk_got += nbytes
            if self._body_got == self._body_size:
                frame = b"".join(self._chunks)
                self._chunks, self._chunk_view, self._body_size = [], None, 0
                self._push(frame)
            elif self._chunk_got == len(self._chunk_view):
                self._next_chunk()
            return
        self._end += nbytes
        self._parse()

    def _next_chunk(self) -> None:
        chunk = bytearray(min(BODY_CHUNK_BYTES, self._body_size - self._body_got))
        self._chunks.append(chunk)
        self._chunk_view, self._chunk_got = memoryview(chunk), 0

    def eof_received(self) -> bool:
        self._push(None)
        # Keep the transport open for writing: a client that half-closes still gets the
        # answers to what it sent; the connection closes once they are written.
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
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
            try:
                size = self.frame_size(bytes(stage[start : start + 4]))
            except Exception as exc:  # refused (too large): nothing more is read
                self._start = self._end = 0
                self._push(exc)
                self._pause_reading()
                return
            have = end - start - 4
            if have >= size:
                self._push(bytes(stage[start + 4 : start + 4 + size]))
                start += 4 + size
                continue
            if size + 4 > STAGING_BYTES:
                # Too large for the staging buffer: its body goes to chunks of its own.
                self._chunks = [bytes(stage[start + 4 : end])]
                self._body_size, self._body_got = size, have
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

    def _push(self, item: bytes | BaseException | None) -> None:
        self._frames.append(item)
        if isinstance(item, bytes):
            self._queued_bytes += len(item)
        if len(self._frames) >= MAX_QUEUED_FRAMES or self._queued_bytes >= MAX_QUEUED_BYTES:
            self._pause_reading()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _pause_reading(self) -> None:
        if not self._paused_reading and self.transport is not None and not self._closed:
            self._paused_reading = True
            self.transport.pause_reading()

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
        if (
            self._paused_reading
            and len(self._frames) < MAX_QUEUED_FRAMES // 2
            and self._queued_bytes < MAX_QUEUED_BYTES // 2
        ):
            self._paused_reading = False
            if self.transport is not None and not self._closed:
                self.transport.resume_reading()
        if isinstance(item, BaseException):
            self._frames.appendleft(item)  # sticky: every later read fails the same way
            raise item
        if item is None:
            self._frames.appendleft(None)
        return item

    # --- writing --------------------------------------------------------------------------
    def write(self, parts: Iterable[bytes]) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.writelines(parts)

    async def drain(self) -> None:
        if self._closed:
            raise ConnectionResetError("connection lost")
        if self._write_paused:
            waiter = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(waiter)
            await waiter
            if self._closed:
                raise ConnectionResetError("connection lost")

    def peer(self) -> str:
        peer = self.transport.get_extra_info("peername") if self.transport else None
        return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)

    def is_closing(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()


def _unset(prefix: bytes) -> int:
    raise RuntimeError("FrameStream.frame_size was not set")
