"""Settings of the HTTP listener (``tmsgate serve --http-listen ...``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class HttpConfig:
    host: str = "127.0.0.1"
    port: int = 8080  # 0: any free port (tests); HttpServer.address says which
    max_body_bytes: int = 64 << 20  # larger request bodies get 413 (--http-max-body-mb)
    max_poll: int = 10_000  # a poll's limit is capped here (--http-max-poll)
    # On stop: requests in flight get this long to finish before their tasks are cancelled.
    shutdown_grace_s: float = 10.0
    keep_alive_s: int = 30  # idle keep-alive connections are closed after this long
    # HTTPS: the listener's certificate chain and key (PEM files); None: plain HTTP.
    tls_cert: str | None = None
    tls_key: str | None = None
    # Every endpoint but /healthz asks for a user's credentials (HTTP Basic, over HTTPS
    # only, or a bearer token of `tmsgate users token`); 401 without (docs/security.md).
    auth_required: bool = False
    # What other gateways of a cluster call this one at, and what 421 answers name
    # (--http-advertised); None: the scheme, the Kafka advertised host and the port.
    advertised_url: str | None = None
    # Listening sockets handed down by `serve --workers` (gateway/workers.py): this
    # worker's own (the other workers call it there), then the shared public one.
    listen_fds: tuple[int, ...] = ()
    # A write for a topic another gateway leads is sent on to it instead of answered 421
    # (the workers of `serve --workers`, which share one public address: forward.py).
    relay_writes: bool = False
