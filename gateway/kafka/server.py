"""The Kafka TCP listener. It only accepts sockets and hands each to a ConnectionDriver;
all protocol work happens in tmsgate.protocol and the handlers.

On a TLS listener (SSL, SASL_SSL) each accepted socket first goes through the TLS
handshake (``loop.connect_accepted_socket``: on the event loop, which it does not block,
bounded by TLS_HANDSHAKE_TIMEOUT_S), and only a connection whose handshake succeeded gets
a FrameStream and a driver. A failed handshake (a plaintext client, an untrusted or
missing client certificate, a client that stalls) closes the socket and is logged with
the reason; asyncio's own ``create_server(ssl=...)`` would drop it silently.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
from collections.abc import Callable
from typing import Any

from .. import tls
from .broker import Broker
from .connection import ConnectionDriver
from .routes import RouteTable, default_routes
from .stream import FrameStream, ReceiveBudget

log = logging.getLogger("tmsgate.kafka.server")
# A TLS handshake not done within this (or connections.max.idle.ms, if shorter) fails.
TLS_HANDSHAKE_TIMEOUT_S = 60.0


class KafkaServer:
    def __init__(self, broker: Broker, routes: RouteTable | None = None) -> None:
        """``routes``: the APIs served, and so what ApiVersions lists (routes.py); by
        default every handler's."""
        self.broker = broker
        self.routes = routes or default_routes()
        self._server: asyncio.Server | None = None
        self._shared: list[asyncio.Server] = []  # `serve --workers`: the bootstrap port
        self._drivers: set[ConnectionDriver] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._handshakes: set[asyncio.Task[None]] = set()
        self._tls: ssl.SSLContext | None = None
        # One budget for the bytes of requests being received on every connection.
        self.receive_budget = ReceiveBudget(broker.config.queued_max_request_bytes)
        self.address: tuple[str, int] = (broker.config.host, broker.config.port)

    async def start(self, serving: bool = True) -> tuple[str, int]:
        """Listen; with ``serving`` False, connections wait in the backlog until
        ``serve()`` (a gateway of a cluster answers once it has seen the others)."""
        cfg = self.broker.config
        loop = asyncio.get_running_loop()
        self._tls = tls.listener_context(cfg)  # raises TlsConfigError before listening
        if cfg.listen_fds:  # a worker of `serve --workers`: its own socket, then the shared
            own, *shared = (socket.socket(fileno=fd) for fd in cfg.listen_fds)
            self._server = await loop.create_server(
                self._protocol, sock=own, backlog=1024, start_serving=serving
            )
            for sock in shared:
                self._shared.append(
                    await loop.create_server(
                        self._protocol, sock=sock, backlog=1024, start_serving=serving
                    )
                )
        else:
            self._server = await loop.create_server(
                self._protocol,
                cfg.host,
                cfg.port,
                backlog=1024,
                reuse_address=True,
                start_serving=serving,
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

    async def serve(self) -> None:
        """Accept the connections waiting since ``start(serving=False)``, and the next."""
        for server in (self._server, *self._shared):
            if server is not None:
                await server.start_serving()

    @property
    def connection_count(self) -> int:
        return len(self._drivers)

    def _protocol(self) -> asyncio.BaseProtocol:
        if self._tls is not None:
            return _TlsAccept(self._handshake)
        return FrameStream(self._opened, self.receive_budget)

    def _handshake(self, sock: socket.socket, peer: str) -> None:
        task = asyncio.ensure_future(self._secure(sock, peer))
        self._handshakes.add(task)
        task.add_done_callback(self._handshakes.discard)

    async def _secure(self, sock: socket.socket, peer: str) -> None:
        """The TLS handshake; its FrameStream opens (and gets a driver) once it succeeded."""
        handshake = tls.Handshake()
        attempt = asyncio.ensure_future(self._connect(sock, handshake))
        handshake.on_failure = attempt.cancel  # the alert is written: close the socket
        try:
            transport, _ = await attempt
        except (Exception, asyncio.CancelledError) as exc:  # the loop closed the socket
            # After a failure the alert went out: cancelled by on_failure, or closed after it.
            if handshake.error is None and isinstance(exc, asyncio.CancelledError):
                raise  # the server is stopping
            if handshake.error is None and isinstance(exc, ConnectionResetError):
                log.debug("connection %s closed by the client during the TLS handshake", peer)
                return  # gone without a word: a port probe, say
            reason = tls.handshake_failure(handshake.error or exc)
            log.info("closing connection %s: TLS handshake failed: %s", peer, reason)
            return
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "connection %s: %s %s, client certificate %s",
                peer,
                transport.get_extra_info("ssl_object").version(),
                transport.get_extra_info("cipher")[0],
                tls.transport_principal(transport) or "none",
            )

    async def _connect(self, sock: socket.socket, handshake: tls.Handshake) -> Any:
        assert self._tls is not None
        tls.current_handshake.set(handshake)  # this task's context: the transport's too
        idle = self.broker.config.idle_timeout_s
        timeout = min(idle, TLS_HANDSHAKE_TIMEOUT_S) if idle > 0 else TLS_HANDSHAKE_TIMEOUT_S
        return await asyncio.get_running_loop().connect_accepted_socket(
            lambda: FrameStream(self._opened, self.receive_budget),
            sock,
            ssl=self._tls,
            ssl_handshake_timeout=timeout,
        )

    def _opened(self, stream: FrameStream) -> None:
        # The driver exists before the first bytes are received: it sets the frame limit.
        driver = ConnectionDriver(self.broker, stream, self.routes)
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
        for server in self._shared:
            server.close()
        for task in list(self._handshakes):
            task.cancel()  # start_tls closes the socket
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
        for server in self._shared:
            await server.wait_closed()


class _TlsAccept(asyncio.Protocol):
    """Takes a TLS listener's accepted socket from the plain transport the server made for
    it, before anything is read from it, for ``connect_accepted_socket`` to do the
    handshake. (``loop.start_tls`` on that transport would lose the ClientHello under
    uvloop, which starts reading as soon as ``connection_made`` returns; and asyncio's
    ``create_server(ssl=...)`` drops a failed handshake without telling anyone.)"""

    def __init__(self, on_socket: Callable[[socket.socket, str], None]) -> None:
        self._on_socket = on_socket

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        raw = transport.get_extra_info("socket")
        try:
            sock = socket.socket(fileno=os.dup(raw.fileno()))
        except OSError as exc:  # out of file descriptors
            log.warning("closing connection %s: %s", _peer(transport), exc)
            transport.abort()
            return
        # The duplicate keeps the connection open; nothing was read or registered for
        # reading on the original, which the transport now closes.
        transport.abort()
        self._on_socket(sock, _peer(transport))


def _peer(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
