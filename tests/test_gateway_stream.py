"""FrameStream, byte for byte: frames cut at any boundary come out whole and in order,
large ones through their own buffer; an oversized frame is refused from its prefix; a
full queue stops reading the socket until the frames are taken; and the receive budget
that all connections share pauses and resumes them."""

from __future__ import annotations

import asyncio
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tmsgate.gateway.kafka.stream import (
    BODY_CHUNK_BYTES,
    MAX_QUEUED_BYTES,
    MAX_QUEUED_FRAMES,
    STAGING_BYTES,
    FrameStream,
    ReceiveBudget,
)
from tmsgate.protocol import FrameTooLarge, KafkaConnection


class FakeTransport:
    def __init__(self) -> None:
        self.paused = False
        self.closed = False
        self.written: list[bytes] = []

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def writelines(self, parts: list[bytes]) -> None:
        self.written.extend(parts)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> object:
        return ("127.0.0.1", 1234) if name == "peername" else None


def opened(limit: int = 1 << 24) -> tuple[FrameStream, FakeTransport]:
    stream = FrameStream(lambda s: None)
    stream.frame_size = KafkaConnection(limit).frame_size
    transport = FakeTransport()
    stream.connection_made(transport)  # type: ignore[arg-type]
    return stream, transport


def feed(stream: FrameStream, data: bytes, cuts: list[int]) -> None:
    """Deliver ``data`` as the event loop would, in reads no longer than the cuts say."""
    pos, i = 0, 0
    while pos < len(data):
        want = cuts[i % len(cuts)] if cuts else len(data)
        i += 1
        buf = stream.get_buffer(-1)
        n = min(len(buf), want, len(data) - pos)
        assert n > 0, "get_buffer returned no room"
        buf[:n] = data[pos : pos + n]
        stream.buffer_updated(n)
        pos += n


def framed(bodies: list[bytes]) -> bytes:
    return b"".join(struct.pack(">i", len(b)) + b for b in bodies)


async def drain_frames(stream: FrameStream, n: int) -> list[bytes | None]:
    return [await stream.read_frame() for _ in range(n)]


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(
        st.one_of(
            st.integers(0, 300),
            st.integers(STAGING_BYTES - 8, STAGING_BYTES + 8),
            st.integers(100_000, 200_000),
        ),
        min_size=1,
        max_size=8,
    ),
    cuts=st.lists(st.integers(1, 70_000), max_size=6),
)
def test_frames_come_out_whole_whatever_the_read_boundaries(sizes: list[int], cuts: list[int]):
    bodies = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
    stream, _ = opened()
    feed(stream, framed(bodies), cuts)
    stream.eof_received()
    got = asyncio.run(drain_frames(stream, len(bodies) + 2))
    assert got[: len(bodies)] == bodies
    assert got[len(bodies) :] == [None, None]  # end of stream, and it stays ended
    assert all(type(f) is bytes for f in got[: len(bodies)])


def test_an_oversized_frame_is_refused_from_its_prefix() -> None:
    stream, transport = opened(limit=1000)
    feed(stream, framed([b"ok"]) + struct.pack(">i", 1001), [])
    assert transport.paused  # nothing more is read from this socket

    async def run() -> None:
        assert await stream.read_frame() == b"ok"
        for _ in range(2):  # and it stays refused
            with pytest.raises(FrameTooLarge):
                await stream.read_frame()

    asyncio.run(run())


def test_a_full_queue_stops_reading_until_frames_are_taken() -> None:
    stream, transport = opened()
    feed(stream, framed([b"x"] * MAX_QUEUED_FRAMES), [7])
    assert transport.paused
    asyncio.run(drain_frames(stream, MAX_QUEUED_FRAMES // 2 + 1))
    assert not transport.paused


def test_a_reader_waiting_is_woken_by_the_next_frame() -> None:
    async def run() -> bytes | None:
        stream, _ = opened()
        reading = asyncio.ensure_future(stream.read_frame())
        await asyncio.sleep(0)
        assert not reading.done()
        feed(stream, framed([b"late"]), [3])
        return await asyncio.wait_for(reading, 1)

    assert asyncio.run(run()) == b"late"


def test_writes_wait_while_the_transport_is_paused() -> None:
    async def run() -> None:
        stream, transport = opened()
        stream.write([b"a", b"b"])
        assert transport.written == [b"a", b"b"]
        stream.pause_writing()
        waiting = asyncio.ensure_future(stream.drain())
        await asyncio.sleep(0)
        assert not waiting.done()
        stream.resume_writing()
        await asyncio.wait_for(waiting, 1)
        stream.connection_lost(None)
        with pytest.raises(ConnectionResetError):
            await stream.drain()

    asyncio.run(run())


def test_a_large_frame_is_received_in_chunks_as_its_bytes_arrive() -> None:
    size = 5 * BODY_CHUNK_BYTES + 12345
    body = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    for cuts in ([], [1000], [BODY_CHUNK_BYTES], [7, 65536, 3_000_001]):
        stream, _ = opened(limit=1 << 30)
        feed(stream, framed([body, b"after"]), cuts)
        assert asyncio.run(drain_frames(stream, 2)) == [body, b"after"]


def test_a_length_prefix_alone_reserves_no_memory() -> None:
    stream, _ = opened(limit=1 << 30)
    feed(stream, struct.pack(">i", 500 << 20) + b"abc", [])
    held = sum(len(c) for c in stream._chunks)
    assert held <= BODY_CHUNK_BYTES + STAGING_BYTES  # not the 500 MiB announced


def test_queued_bytes_stop_reading_too() -> None:
    stream, transport = opened(limit=1 << 30)
    frames = [bytes(2 << 20)] * (MAX_QUEUED_BYTES // (2 << 20))
    feed(stream, framed(frames), [])
    assert transport.paused and len(frames) < MAX_QUEUED_FRAMES
    asyncio.run(drain_frames(stream, len(frames) // 2 + 1))
    assert not transport.paused


def test_a_half_closed_connection_stays_open_for_the_answers() -> None:
    stream, transport = opened()
    feed(stream, framed([b"last request"]), [])
    assert stream.eof_received() is True  # asyncio keeps the transport open for writing
    assert not transport.closed
    assert asyncio.run(drain_frames(stream, 2)) == [b"last request", None]


def test_the_request_before_a_bad_prefix_in_the_same_read_is_decoded() -> None:
    """Issue defect 4, as the driver reads: a valid request and ``ff ff ff ff`` in one
    read. The request decodes (it raised ConnectionClosed), then the refusal follows."""
    metadata_v1 = bytes.fromhex("00000012 0003 0001 00000001 000163 00000001 000174")
    stream = FrameStream(lambda s: None)
    conn = KafkaConnection()
    stream.frame_size = conn.frame_size
    stream.connection_made(FakeTransport())  # type: ignore[arg-type]
    feed(stream, metadata_v1 + b"\xff\xff\xff\xff", [])

    async def run() -> None:
        [req] = conn.receive_frame(await stream.read_frame())  # type: ignore[arg-type]
        assert (req.api_key, req.correlation_id, req.body.topics[0].name) == (3, 1, "t")
        with pytest.raises(FrameTooLarge):
            await stream.read_frame()

    asyncio.run(run())


# --- the receive budget shared by all connections (queued.max.request.bytes) -------------
def budgeted(budget: ReceiveBudget) -> tuple[FrameStream, FakeTransport]:
    stream = FrameStream(lambda s: None, budget)
    stream.frame_size = KafkaConnection(1 << 30).frame_size
    transport = FakeTransport()
    stream.connection_made(transport)  # type: ignore[arg-type]
    return stream, transport


def feed_while_reading(stream: FrameStream, transport: FakeTransport, data: bytes) -> int:
    """Like feed, but stop as the event loop would once reading is paused -> bytes taken."""
    pos = 0
    while pos < len(data) and not transport.paused:
        buf = stream.get_buffer(-1)
        n = min(len(buf), len(data) - pos)
        buf[:n] = data[pos : pos + n]
        stream.buffer_updated(n)
        pos += n
    return pos


def test_the_budget_counts_chunks_and_queued_frames_until_taken() -> None:
    budget = ReceiveBudget(64 << 20)
    stream, _ = budgeted(budget)
    body = bytes(3 * BODY_CHUNK_BYTES + 5)
    data = framed([body, b"small"])
    feed(stream, data[: BODY_CHUNK_BYTES + 100], [])
    # the head that came in the staging buffer, and one chunk for what follows
    assert budget.used == stream.held_bytes == STAGING_BYTES - 4 + BODY_CHUNK_BYTES
    feed(stream, data[BODY_CHUNK_BYTES + 100 :], [])
    assert budget.used == len(body) + 5  # both frames queued, nothing else
    assert asyncio.run(drain_frames(stream, 1)) == [body]
    assert budget.used == 5
    asyncio.run(drain_frames(stream, 1))
    assert budget.used == 0 and stream.held_bytes == 0


def test_an_exhausted_budget_pauses_reading_until_memory_comes_back() -> None:
    budget = ReceiveBudget(2 * BODY_CHUNK_BYTES)
    holder, holder_transport = budgeted(budget)
    feed(holder, framed([bytes(2 * BODY_CHUNK_BYTES)]), [])  # complete, queued, not taken
    assert budget.exhausted and holder_transport.paused  # its next frame would need more
    small, small_transport = budgeted(budget)
    feed(small, framed([b"a", b"b"]), [])
    assert small_transport.paused and budget.waiting == 2
    assert asyncio.run(drain_frames(small, 2)) == [b"a", b"b"]  # what came is delivered
    assert small_transport.paused  # its own two bytes did not make room
    asyncio.run(drain_frames(holder, 1))
    assert not small_transport.paused and not holder_transport.paused
    assert budget.waiting == 0 and budget.used == 0


def test_a_closed_connection_returns_its_partial_frame_at_once() -> None:
    budget = ReceiveBudget(4 * BODY_CHUNK_BYTES)
    stream, transport = budgeted(budget)
    taken = feed_while_reading(stream, transport, framed([bytes(10 * BODY_CHUNK_BYTES)])[: 5 << 20])
    assert taken == 5 << 20 and budget.exhausted  # it finishes its frame beyond the limit
    other, other_transport = budgeted(budget)
    feed(other, framed([bytes(3 * BODY_CHUNK_BYTES)])[:1000], [])
    assert other_transport.paused and budget.waiting == 1  # waits for its first chunk
    stream.connection_lost(ConnectionResetError("reset"))
    assert stream.held_bytes == 0 and not stream._chunks
    assert not other_transport.paused and budget.waiting == 0  # woken by what came back
    assert budget.used == other.held_bytes == 996 + BODY_CHUNK_BYTES


def test_one_partial_frame_always_finishes_even_beyond_the_budget() -> None:
    """No deadlock when every connection holds part of a frame: one at a time may go on,
    so frames larger than the whole budget still arrive."""
    budget = ReceiveBudget(BODY_CHUNK_BYTES)
    size = 3 * BODY_CHUNK_BYTES
    data = framed([bytes(size)])
    first, first_t = budgeted(budget)
    second, second_t = budgeted(budget)
    feed(first, data[:1000], [])  # gets a chunk while the budget lasts
    feed(second, data[:1000], [])  # the budget is spent: it becomes the one to finish
    first_taken = 1000 + feed_while_reading(first, first_t, data[1000:])
    assert first_t.paused and first_taken < len(data)  # waits for its next chunk
    assert feed_while_reading(second, second_t, data[1000:]) == len(data) - 1000
    assert not first_t.paused  # the next to finish
    assert feed_while_reading(first, first_t, data[first_taken:]) == len(data) - first_taken
    assert asyncio.run(drain_frames(first, 1)) == [bytes(size)]
    assert asyncio.run(drain_frames(second, 1)) == [bytes(size)]
    assert budget.used == 0 and budget.waiting == 0
    assert not first_t.paused and not second_t.paused
