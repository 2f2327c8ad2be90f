"""Serve the HTTP API with uvicorn (httptools) inside the gateway's own event loop.

The gateway owns the process: its signals, its logging, its loop. uvicorn only parses
HTTP and calls the app, so its signal handlers are off, its lifespan is off, and its
loggers say only warnings. The socket is bound here first, so that a busy port is an
OSError to the caller (uvicorn would exit the process) and port 0 gets a real port.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator
from typing import TYPE_CHECKING

import uvicorn

from .app import build_app
from .config import HttpConfig

if TYPE_CHECKING:
    from tmsgate.gateway.services import Services

log = logging.getLogger("tmsgate.http")


class _EmbeddedServer(uvicorn.Server):
    """uvicorn.Server without its signal handling, and telling when it listens."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = asyncio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # SIGTERM and SIGINT are the gateway's: it stops every listener in order.
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.listening.set()


def bind(host: str, port: int) -> socket.socket:
    family, kind, proto, _, address = socket.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


class HttpServer:
    def __init__(self, services: Services, config: HttpConfig) -> None:
        self.config = config
        self.app = build_app(services, config)
        self.address: tuple[str, int] = (config.host, config.port)
        self._server: _EmbeddedServer | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> tuple[str, int]:
        cfg = self.config
        sock = bind(cfg.host, cfg.port)
        self.address = sock.getsockname()[:2]
        server = _EmbeddedServer(
            uvicorn.Config(
                self.app,
                http="httptools",
                ws="none",
                lifespan="off",
                log_config=None,
                log_level="warning",
                access_log=False,
                proxy_headers=False,
                server_header=False,
                backlog=2048,
                timeout_keep_alive=cfg.keep_alive_s,
                timeout_graceful_shutdown=cfg.shutdown_grace_s,
            )
        )
        self._server = server
        self._task = asyncio.ensure_future(server.serve(sockets=[sock]))
        listening = asyncio.ensure_future(server.listening.wait())
        await asyncio.wait({self._task, listening}, return_when=asyncio.FIRST_COMPLETED)
        if not server.listening.is_set():
            listening.cancel()
            sock.close()
            await self._task  # raises what stopped it
            raise RuntimeError("the HTTP server stopped before it listened")
        log.debug("HTTP API on http://%s:%d", *self.address)
        return self.address

    async def stop(self) -> None:
        """Stop accepting; requests in flight finish (for shutdown_grace_s at most)."""
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        try:
            await self._task
        finally:
            self._server = self._task = None
