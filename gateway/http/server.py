"""Serve the HTTP API with uvicorn (httptools) inside the gateway's own event loop.

The gateway owns the process: its signals, its logging, its loop. uvicorn only parses
HTTP and calls the app, so its signal handlers are off and its loggers say only warnings;
its lifespan starts and stops the app's background work (the console's lag sampler). The
socket is bound here first, so that a busy port is an OSError to the caller (uvicorn
would exit the process) and port 0 gets a real port.
With ``tls_cert`` and ``tls_key`` it serves HTTPS only (uvicorn's TLS: TLS 1.2 or later).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
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


def check_tls(cfg: HttpConfig) -> None:
    """Load the certificate and key once before serving, so that a missing or wrong file
    is an OSError that names them (uvicorn's says only "No such file or directory")."""
    if not (cfg.tls_cert and cfg.tls_key):
        raise OSError(
            "HTTPS needs both a certificate and its key (--http-tls-cert, --http-tls-key)"
        )
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
            cfg.tls_cert, cfg.tls_key
        )
    except (OSError, ValueError) as exc:
        raise OSError(
            f"HTTPS certificate {cfg.tls_cert} and key {cfg.tls_key} do not load: {exc}"
        ) from None


class HttpServer:
    def __init__(self, services: Services, config: HttpConfig) -> None:
        self.config = config
        self.app = build_app(services, config)
        self.address: tuple[str, int] = (config.host, config.port)
        self._server: _EmbeddedServer | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> tuple[str, int]:
        cfg = self.config
        if cfg.tls_cert or cfg.tls_key:
            check_tls(cfg)
        if cfg.listen_fds:  # a worker of `serve --workers`: its own socket, then the shared
            socks = [socket.socket(fileno=fd) for fd in cfg.listen_fds]
        else:
            socks = [bind(cfg.host, cfg.port)]
        sock = socks[0]
        self.address = sock.getsockname()[:2]
        server = _EmbeddedServer(
            uvicorn.Config(
                self.app,
                http="httptools",
                ws="none",
                lifespan="on",
                log_config=None,
                log_level="warning",
                access_log=False,
                proxy_headers=False,
                server_header=False,
                backlog=2048,
                timeout_keep_alive=cfg.keep_alive_s,
                timeout_graceful_shutdown=cfg.shutdown_grace_s,
                ssl_certfile=cfg.tls_cert,
                ssl_keyfile=cfg.tls_key,
            )
        )
        self._server = server
        self._task = asyncio.ensure_future(server.serve(sockets=socks))
        listening = asyncio.ensure_future(server.listening.wait())
        await asyncio.wait({self._task, listening}, return_when=asyncio.FIRST_COMPLETED)
        if not server.listening.is_set():
            listening.cancel()
            for each in socks:
                each.close()
            await self._task  # raises what stopped it
            raise RuntimeError("the HTTP server stopped before it listened")
        log.debug("HTTP API on %s://%s:%d", self.scheme, *self.address)
        if cfg.auth_required and not cfg.tls_cert:
            log.warning(
                "HTTP API: authentication is required over plain HTTP: HTTP Basic is refused "
                "and bearer tokens travel in the clear (--http-tls-cert, --http-tls-key)"
            )
        return self.address

    @property
    def scheme(self) -> str:
        return "https" if self.config.tls_cert else "http"

    async def stop(self) -> None:
        """Stop accepting; requests in flight finish (for shutdown_grace_s at most)."""
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        try:
            await self._task
        finally:
            self._server = self._task = None
