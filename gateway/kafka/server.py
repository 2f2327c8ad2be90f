"""The Kafka TCP listener. It only accepts sockets and hands each to a ConnectionDriver;
all protocol work happens in tmsgate.protocol and the handlers."""

from __future__ import annotations

import asyncio
import logging
import socket

from .broker import Broker
from .connection import READ_SIZE, ConnectionDriver

log = logging.getLogger("tmsgate.kafka.server")


class KafkaServer:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._server: asyncio.Server | None = None
        self._drivers: set[ConnectionDriver] = set()
        self.address: tuple[str, int] = (broker.config.host, broker.config.port)

    async def start(self) -> tuple[str, int]:
        cfg = self.broker.config
        self._server = await asyncio.start_server(
            self._accept, cfg.host, cfg.port, backlog=1024, limit=READ_SIZE, reuse_address=True
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

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        driver = ConnectionDriver(self.broker, reader, writer)
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
