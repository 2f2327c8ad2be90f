"""Drives one client connection: socket bytes -> KafkaConnection -> handlers -> responses.

Requests are started in arrival order, each once the previous one has released its
turn (see RequestContext), and answered strictly in order, as Kafka clients require of
pipelined requests: when a request's handler finishes, its done-callback writes every
answer that is ready at the head of the line (no task of its own per connection: a task
wake-up per answer was a tenth of the loop's work for small requests). An answer that
must wait (a long encode off the loop, a full socket) holds the line until a task
finishes it. At most max_in_flight requests are outstanding; beyond that the socket is
not read, which pushes back on the client.

Decoding a request and encoding its response cost up to ~1-2 us per byte when the
message is a dense list (a 1 MB Metadata request of 500,000 empty topic names took
0.9 s to decode and its answer 1.1 s to encode), so large ones run on the broker's CPU
thread instead of holding the event loop every other client needs.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Iterable
from typing import Any

from kafka.protocol.consumer import HeartbeatRequest, LeaveGroupRequest, SyncGroupRequest
from tmsgate.protocol import (
    ApiKey,
    BadFrame,
    FrameTooLarge,
    KafkaConnection,
    MetadataResult,
    Request,
    api_name,
    encode_response,
)

from ..tls import transport_principal
from .broker import Broker
from .context import CloseConnection, RequestContext, Session
from .handlers import api_versions
from .routes import RouteTable
from .stream import FrameStream

log = logging.getLogger("tmsgate.kafka.connection")
# What a SASL listener serves before the login (Kafka: anything else during the handshake
# closes the connection).
_BEFORE_LOGIN = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
# Frames at least this large are decoded, and their responses encoded, off the loop: at
# worst ~15 ms of decoding, while an ordinary small request skips the thread hop
# (~50 us). A response with this many array entries is encoded off the loop too,
# whatever asked for it (Metadata for all topics of a large store).
OFF_LOOP_BYTES = 16 << 10
OFF_LOOP_ITEMS = 2000


def _field_names(message: Any) -> Iterable[str]:
    """The fields of a kafka-python message, or of a directly encoded Produce or Fetch
    answer (named tuples); none for anything else."""
    fields = getattr(type(message), "fields", None)
    if isinstance(fields, dict):
        return fields
    fields = getattr(type(message), "_fields", None)
    return fields if isinstance(fields, tuple) else ()


def _items(message: Any, enough: int) -> int:
    """Array entries in a message, counted until ``enough``."""
    count = 0
    for name in _field_names(message):
        value = getattr(message, name, None)
        if isinstance(value, list):
            count += len(value)
            for item in value:
                if count >= enough:
                    return count
                count += _items(item, enough - count)
    return count


# Answers no longer than their request's list (or of a fixed size): a small request's
# are not counted (walking one costs more than encoding it).
_BOUNDED_ANSWERS = frozenset(
    {
        ApiKey.API_VERSIONS,
        ApiKey.FIND_COORDINATOR,
        HeartbeatRequest.API_KEY,
        LeaveGroupRequest.API_KEY,
        SyncGroupRequest.API_KEY,
        ApiKey.OFFSET_COMMIT,
        ApiKey.INIT_PRODUCER_ID,
        ApiKey.ADD_OFFSETS_TO_TXN,
        ApiKey.TXN_OFFSET_COMMIT,
        ApiKey.SASL_HANDSHAKE,
        ApiKey.SASL_AUTHENTICATE,
    }
)


def _long_answer(req: Request, response: Any) -> bool:
    """Encode it off the loop? Encoding costs by the entry (strings and record batches are
    copied whole). Produce and Fetch answers (named tuples, one per message at low rates)
    grow only with what their request named, so a small request's are not counted, nor
    are the other answers bounded by their request. Metadata answers (named tuples too)
    say what they hold: a small request asks for all topics."""
    if type(response) is MetadataResult:
        return response.entries >= OFF_LOOP_ITEMS
    if req.size < OFF_LOOP_BYTES and (
        isinstance(response, tuple) or req.api_key in _BOUNDED_ANSWERS
    ):
        return False
    return _items(response, OFF_LOOP_ITEMS) >= OFF_LOOP_ITEMS


FREE_SLICE = 5000  # objects freed at a time: ~0.3 ms, then the GIL may change hands


def _free(holder: list[Any]) -> None:
    """On the CPU thread: drop the last references to a large request and its response,
    freeing the objects of their long lists a slice at a time."""
    lists: list[list[Any]] = []
    for obj in holder:
        _collect_lists(getattr(obj, "body", obj), lists)
    holder.clear()  # the messages go; the items of their long lists live on in ``lists``
    for items in lists:
        while items:
            del items[-FREE_SLICE:]


def _collect_lists(message: Any, out: list[list[Any]]) -> None:
    """Copies of the long lists in a message (short ones are walked into)."""
    for name in _field_names(message):
        value = getattr(message, name, None)
        if not isinstance(value, list):
            continue
        if len(value) >= FREE_SLICE:
            out.append(list(value))
        else:
            for item in value:
                _collect_lists(item, out)


_CLOSE = object()  # _response: the connection closes instead of answering


def _done(value: Any) -> asyncio.Future[Any]:
    fut = asyncio.get_running_loop().create_future()
    fut.set_result(value)
    return fut


class ConnectionDriver:
    def __init__(self, broker: Broker, stream: FrameStream, routes: RouteTable) -> None:
        self.broker = broker
        self.routes = routes
        self.stream = stream
        self.peer = stream.peer()
        self.conn = KafkaConnection(broker.config.max_request_bytes)
        self.session = Session(host=stream.peer_host())
        if broker.config.security_protocol == "SSL":  # on SASL_SSL the login decides, as Kafka
            self.session.principal = transport_principal(stream.transport)  # User:<CN>
        self._login_required = broker.config.security_protocol.startswith("SASL_")
        stream.frame_size = self.conn.frame_size  # refuses oversized frames before allocating
        self._max_in_flight = broker.config.max_in_flight_per_connection
        # [request, its future] in arrival order, until answered: a list, so that the
        # answer can take the references out
        self._pending: collections.deque[list[Any]] = collections.deque()
        self._room: asyncio.Future[None] | None = None  # the reader waits for a slot
        # An answer being finished by a task (long encode, full socket): the line waits.
        self._answering: asyncio.Task[None] | None = None
        self._stopped = False  # no more answers: the connection is closing
        self._answered_all: asyncio.Future[None] | None = None  # run() waits at the end
        self._last_turn = asyncio.Event()
        self._last_turn.set()
        self._in_flight = 0
        self._last_activity = time.monotonic()
        self._reader_task: asyncio.Task[None] | None = None
        self._freeing: set[asyncio.Future[None]] = set()
        self.finished = asyncio.Event()

    async def run(self) -> None:
        self._reader_task = asyncio.create_task(self._read_loop())
        watchdog = asyncio.create_task(self._watch_idle())
        try:
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader_task
            if (self._pending or self._answering) and not self._stopped:
                # Answer what was read, then close.
                self._answered_all = asyncio.get_running_loop().create_future()
                await self._answered_all
        finally:
            watchdog.cancel()
            if self._answering is not None:
                self._answering.cancel()
            self._close_transport()
            self.finished.set()

    def stop_reading(self) -> None:
        """Graceful shutdown: take no new requests, answer the ones in flight."""
        if self._reader_task is not None:
            self._reader_task.cancel()

    def abort(self) -> None:
        self._close_transport()
        self.stop_reading()

    # --- reading ------------------------------------------------------------------------
    async def _read_loop(self) -> None:
        # Whole frames arrive from the FrameStream, each received straight into its own
        # buffer, and are decoded in place.
        while True:
            try:
                frame = await self.stream.read_frame()
            except (ConnectionError, OSError) as exc:
                log.info("connection %s: read failed: %s", self.peer, exc)
                return
            except FrameTooLarge as exc:  # the frames before it were answered first
                self.broker.metrics.bad_frames.inc()
                if exc.size < 0:
                    log.warning("closing connection %s: negative request length", self.peer)
                else:
                    log.warning(
                        "closing connection %s: %s (socket.request.max.bytes)", self.peer, exc
                    )
                return
            if frame is None:
                return  # closed by the peer (mid-frame or between frames)
            self._last_activity = time.monotonic()
            if not await self._receive(frame):
                return

    async def _receive(self, frame: bytes) -> bool:
        """Decode one frame and dispatch its request; False to stop reading. A method of
        its own so that its locals, the decoded request, die when it returns."""
        if len(frame) >= OFF_LOOP_BYTES:
            self.conn.admit_frame()  # the connection's state is the loop's to change
            events = await self.broker.compute(self.conn.decode_frame, frame)
        else:
            events = self.conn.receive_frame(frame)
        for event in events:
            if isinstance(event, BadFrame):
                self.broker.metrics.bad_frames.inc()
                log.warning(
                    "closing connection %s: malformed request (correlation id %s): %s",
                    self.peer,
                    event.correlation_id,
                    event.reason,
                )
                return False
            if not await self._dispatch(event):
                return False
        return True

    async def _dispatch(self, req: Request) -> bool:
        routes = self.routes
        route = routes.get(req.api_key)
        if route is None or req.body is None or not routes.supports(req.api_key, req.api_version):
            if req.api_key == ApiKey.API_VERSIONS:
                # KIP-511: answer in v0 format with the list so the client retries lower.
                await self._slot()
                self._enqueue(req, _done(api_versions.unsupported_version(routes)))
                return True
            supported = f"v{route.min_version}-{route.max_version}" if route else "none"
            log.warning(
                "closing connection %s (client %s): %s v%d is not supported (supported: %s)",
                self.peer,
                req.client_id,
                api_name(req.api_key),
                req.api_version,
                supported,
            )
            return False
        await self._slot()
        ctx = RequestContext(self.broker, req, self.peer, self.session, routes)
        previous, self._last_turn = self._last_turn, ctx.turn
        loop = asyncio.get_running_loop()
        self._enqueue(req, loop.create_task(self._handle(route.handler, ctx, previous)))
        return True

    async def _slot(self) -> None:
        """Wait until fewer than max_in_flight requests are unanswered."""
        while self._in_flight >= self._max_in_flight:
            self._room = asyncio.get_running_loop().create_future()
            await self._room

    def _enqueue(self, req: Request, fut: asyncio.Future[Any]) -> None:
        self._in_flight += 1
        self._pending.append([req, fut])
        if fut.done():
            self._pump()
        else:
            fut.add_done_callback(self._pump)

    async def _handle(self, handler: Any, ctx: RequestContext, previous: asyncio.Event) -> Any:
        if not previous.is_set():
            await previous.wait()
        name = api_name(ctx.request.api_key)
        if self._login_required and ctx.request.api_key not in _BEFORE_LOGIN:
            session = self.session
            if session.principal is None:
                ctx.release()
                raise CloseConnection(f"{name} request before the SASL login")
            if session.expires_at is not None and time.monotonic() >= session.expires_at:
                ctx.release()  # Kafka closes a connection whose login has expired
                raise CloseConnection(f"{name} request after the SASL session expired")
        started = time.perf_counter()
        try:
            return await handler(ctx, ctx.request.body)
        finally:
            ctx.release()
            self.broker.metrics.request_done(name, time.perf_counter() - started)

    # --- writing ------------------------------------------------------------------------
    def _pump(self, _done: object = None) -> None:
        """Write the answers ready at the head of the line, in order (a handler's
        done-callback, or the line moving on)."""
        pending = self._pending
        while pending and self._answering is None and not self._stopped:
            slot = pending[0]
            req, fut = slot
            if not fut.done():
                return
            pending.popleft()
            slot.clear()
            response = self._response(req, fut)
            if response is _CLOSE:
                self._stop()
                return
            long_answer = _long_answer(req, response)
            if long_answer or self.stream.write_paused:
                later = self._answer_later(req, response, long_answer)
                self._answering = asyncio.ensure_future(later)
                return
            try:
                if response is not None:
                    self.stream.write(encode_response(req.correlation_id, response))
                    self.stream.check_open()
            except Exception as exc:
                self._write_failed(req, exc)
                return
            if not self._answered(req, response, False):
                self._stop()
                return
        if not pending and self._answered_all is not None and not self._answered_all.done():
            self._answered_all.set_result(None)

    def _response(self, req: Request, fut: asyncio.Future[Any]) -> Any:
        """The handler's answer, or _CLOSE when the connection must close instead."""
        if fut.cancelled():
            return _CLOSE
        exc = fut.exception()
        if exc is None:
            return fut.result()
        if isinstance(exc, CloseConnection):
            log.info("closing connection %s: %s", self.peer, exc)
        else:
            self._log_failure(req, "", exc)
        return _CLOSE

    def _log_failure(self, req: Request, what: str, exc: BaseException) -> None:
        self.broker.metrics.request_errors.labels(api_name(req.api_key)).inc()
        log.error(
            "closing connection %s: %s%s v%d (correlation id %d) failed: %s",
            self.peer,
            what,
            api_name(req.api_key),
            req.api_version,
            req.correlation_id,
            exc,
            exc_info=exc,
        )

    async def _answer_later(self, req: Request, response: Any, long_answer: bool) -> None:
        """Finish an answer that cannot be written at once: encoded off the loop
        (``long_answer``), or after the socket drains. The line goes on from here."""
        try:
            if response is not None:
                if long_answer:
                    parts = await self.broker.compute(encode_response, req.correlation_id, response)
                else:
                    parts = encode_response(req.correlation_id, response)
                await self.stream.drain()
                self.stream.write(parts)
                await self.stream.drain()
        except Exception as exc:
            self._answering = None
            self._write_failed(req, exc)
            return
        going_on = self._answered(req, response, long_answer)
        self._answering = None
        if going_on:
            self._pump()
        else:
            self._stop()

    def _write_failed(self, req: Request, exc: Exception) -> None:
        """An answer could not be encoded or written: the connection closes (the client
        cannot be told which answer is missing)."""
        if isinstance(exc, (ConnectionError, OSError)):
            log.info("connection %s: write failed: %s", self.peer, exc)
        else:
            self._log_failure(req, "the answer to ", exc)
        self._stop()

    def _answered(self, req: Request, response: Any, long_answer: bool) -> bool:
        """Book one answer as written; False when the connection must close."""
        self._in_flight -= 1
        self._last_activity = time.monotonic()
        room = self._room
        if room is not None and not room.done():
            room.set_result(None)
        if self.session.close_after_answer:
            log.info("closing connection %s after %s (SASL)", self.peer, api_name(req.api_key))
            return False
        heavy = long_answer or (
            req.size >= OFF_LOOP_BYTES and _items(req.body, OFF_LOOP_ITEMS) >= OFF_LOOP_ITEMS
        )
        if heavy:
            # Freeing 500,000 decoded objects took 16-30 ms in one piece, under the GIL:
            # the CPU thread frees them a slice at a time once the loop has let go (the
            # task starts after this callback, when the caller's locals are gone).
            task = asyncio.ensure_future(self.broker.compute(_free, [req, response]))
            self._freeing.add(task)
            task.add_done_callback(self._freeing.discard)
        return True

    def _stop(self) -> None:
        """No more answers: close the connection, fail what is still unanswered."""
        self._stopped = True
        self._in_flight = 0
        self._close_transport()
        self.stop_reading()
        while self._pending:
            self._pending.popleft()[1].cancel()
        if self._answered_all is not None and not self._answered_all.done():
            self._answered_all.set_result(None)

    def _close_transport(self) -> None:
        self.stream.close()

    async def _watch_idle(self) -> None:
        """Kafka's connections.max.idle.ms: close a connection with nothing to do."""
        idle = self.broker.config.idle_timeout_s
        step = max(0.05, min(idle / 4, 30.0))
        while True:
            await asyncio.sleep(step)
            quiet = time.monotonic() - self._last_activity
            if self._in_flight == 0 and quiet >= idle:
                log.info("closing connection %s: idle for %.0f s", self.peer, quiet)
                self.abort()
                return
