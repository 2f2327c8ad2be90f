"""The Kafka TCP listener. It only accepts sockets and hands each to a ConnectionDriver;
all protocol work happens in tmsgate.protocol and the handlers."""

from __future__ import annotations

import asyncio
import logging
import socket

from .broker import Broker
from .connection import ConnectionDriver
from .stream import FrameStream, ReceiveBudget

log = logging.getLogger("tmsgate.kafka.server")


class KafkaServer:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._server: asyncio.Server | None = None
        self._drivers: set[ConnectionDriver] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        # One budget for the bytes of requests being received on every connection.
        self.receive_budget = ReceiveBudget(broker.config.queued_max_request_bytes)
        self.address: tuple[str, int] = (broker.config.host, broker.config.port)

    async def start(self) -> tuple[str, int]:
        cfg = self.broker.config
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: FrameStream(self._opened, self.receive_budget),
            cfg.host,
            cfg.port,
            backlog=1024,
            reuse_address=True,
        )
        host, port = self._server.sockets[0].getsockname()[:2]
        self.address = (host, port)
        advertised = cfg.host
        if cfg.host in ("", "0.0.0.0", "::"):
            # Clients cannot connect to a wildcard address: tell them our host name
            # unless --kafka-advertised says otherwise.
            advertised = socket.getfqdn()
            if cfg.advertised_host is None:
                log.warning(
                    "listening on all interfaces; advertising host %s to clients "
                    "(set --kafka-advertised to change it)",
                    advertised,
                )
        self.broker.set_listen_address(advertised, port)
        return self.address

    @property
    def connection_count(self) -> int:
        return len(self._drivers)

    def _opened(self, stream: FrameStream) -> None:
        # The driver exists before the first bytes are received: it sets the frame limit.
        driver = ConnectionDriver(self.broker, stream)
        task = asyncio.ensure_future(self._accept(driver))
        self._tasks.add(task)  # a task nobody references may be garbage-collected mid-run
        task.add_done_callback(self._tasks.discard)

    async def _accept(self, driver: ConnectionDriver) -> None:
        if self.broker.closing:
            driver.abort()
            return
        self._drivers.add(driver)
        self.broker.metrics.connections.inc()
        log.debug("connection from %s", driver.peer)
        try:
            await driver.run()
        except Exception:
            log.exception("connection %s failed", driver.peer)
        finally:
            self._drivers.discard(driver)
            self.broker.metrics.connections.dec()
            log.debug("connection %s closed", driver.peer)

    async def stop(self, grace_s: float) -> None:
        """Stop accepting, let in-flight requests finish (long polls answer at once),
        then close every connection."""
        if self._server is not None:
            self._server.close()
        self.broker.begin_shutdown()
        drivers = list(self._drivers)
        for d in drivers:
            d.stop_reading()
        if drivers:
            waits = [asyncio.ensure_future(d.finished.wait()) for d in drivers]
            _done, pending = await asyncio.wait(waits, timeout=grace_s)
            if pending:
                log.warning(
                    "%d connections still busy after %.0f s; closing them", len(pending), grace_s
                )
            for w in pending:
                w.cancel()
        for d in list(self._drivers):
            d.abort()
        if self._server is not None:
            await self._server.wait_closed()
