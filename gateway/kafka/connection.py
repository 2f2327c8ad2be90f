"""Drives one client connection: socket bytes -> KafkaConnection -> handlers -> responses.

Requests are started in arrival order, each once the previous one has released its
turn (see RequestContext), and answered strictly in order by one writer task, as
Kafka clients require of pipelined requests. At most max_in_flight requests are
outstanding; beyond that the socket is not read, which pushes back on the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from tmsgate.protocol import (
    ApiKey,
    BadFrame,
    FrameTooLarge,
    KafkaConnection,
    Request,
    api_name,
    encode_response,
)

from .broker import Broker
from .context import CloseConnection, RequestContext
from .handlers import api_versions
from .stream import FrameStream

log = logging.getLogger("tmsgate.kafka.connection")


def _done(value: Any) -> asyncio.Future[Any]:
    fut = asyncio.get_running_loop().create_future()
    fut.set_result(value)
    return fut


class ConnectionDriver:
    def __init__(self, broker: Broker, stream: FrameStream) -> None:
        self.broker = broker
        self.stream = stream
        self.peer = stream.peer()
        self.conn = KafkaConnection(broker.config.max_request_bytes)
        stream.frame_size = self.conn.frame_size  # refuses oversized frames before allocating
        self._slots = asyncio.Semaphore(broker.config.max_in_flight_per_connection)
        self._queue: asyncio.Queue[tuple[Request, asyncio.Future[Any]] | None] = asyncio.Queue()
        self._last_turn = asyncio.Event()
        self._last_turn.set()
        self._in_flight = 0
        self._last_activity = time.monotonic()
        self._reader_task: asyncio.Task[None] | None = None
        self.finished = asyncio.Event()

    async def run(self) -> None:
        writer_task = asyncio.create_task(self._write_loop())
        self._reader_task = asyncio.create_task(self._read_loop())
        watchdog = asyncio.create_task(self._watch_idle())
        try:
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader_task
            self._queue.put_nowait(None)  # the writer stops after answering what it has
            await writer_task
        finally:
            watchdog.cancel()
            writer_task.cancel()
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
            except FrameTooLarge as exc:
                self.broker.metrics.bad_frames.inc()
                log.warning("closing connection %s: %s (socket.request.max.bytes)", self.peer, exc)
                return
            if frame is None:
                return  # closed by the peer (mid-frame or between frames)
            self._last_activity = time.monotonic()
            for event in self.conn.receive_frame(frame):
                if isinstance(event, BadFrame):
                    self.broker.metrics.bad_frames.inc()
                    log.warning(
                        "closing connection %s: malformed request (correlation id %s): %s",
                        self.peer,
                        event.correlation_id,
                        event.reason,
                    )
                    return
                if not await self._dispatch(event):
                    return

    async def _dispatch(self, req: Request) -> bool:
        routes = self.broker.routes
        route = routes.get(req.api_key)
        if route is None or req.body is None or not routes.supports(req.api_key, req.api_version):
            if req.api_key == ApiKey.API_VERSIONS:
                # KIP-511: answer in v0 format with the list so the client retries lower.
                await self._slots.acquire()
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
        await self._slots.acquire()
        ctx = RequestContext(self.broker, req, self.peer)
        previous, self._last_turn = self._last_turn, ctx.turn
        self._enqueue(req, asyncio.ensure_future(self._handle(route.handler, ctx, previous)))
        return True

    def _enqueue(self, req: Request, fut: asyncio.Future[Any]) -> None:
        self._in_flight += 1
        self._queue.put_nowait((req, fut))

    async def _handle(self, handler: Any, ctx: RequestContext, previous: asyncio.Event) -> Any:
        await previous.wait()
        name = api_name(ctx.request.api_key)
        started = time.perf_counter()
        try:
            return await handler(ctx, ctx.request.body)
        finally:
            ctx.release()
            self.broker.metrics.request_done(name, time.perf_counter() - started)

    # --- writing ------------------------------------------------------------------------
    async def _write_loop(self) -> None:
        while (item := await self._queue.get()) is not None:
            req, fut = item
            try:
                response = await fut
            except CloseConnection as exc:
                log.info("closing connection %s: %s", self.peer, exc)
                return self._fail_remaining()
            except Exception as exc:
                self.broker.metrics.request_errors.labels(api_name(req.api_key)).inc()
                log.error(
                    "closing connection %s: %s v%d (correlation id %d) failed: %s",
                    self.peer,
                    api_name(req.api_key),
                    req.api_version,
                    req.correlation_id,
                    exc,
                    exc_info=exc,
                )
                return self._fail_remaining()
            try:
                if response is not None:
                    self.stream.write(encode_response(req.correlation_id, response))
                    await self.stream.drain()
            except (ConnectionError, OSError) as exc:
                log.info("connection %s: write failed: %s", self.peer, exc)
                return self._fail_remaining()
            finally:
                self._in_flight -= 1
                self._slots.release()
                self._last_activity = time.monotonic()
        return None

    def _fail_remaining(self) -> None:
        self._close_transport()
        self.stop_reading()
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if item is not None:
                item[1].cancel()

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
