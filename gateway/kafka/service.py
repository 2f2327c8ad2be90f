"""Running a gateway: open the store, listen, serve until told to stop, shut down cleanly."""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
from collections.abc import Callable
from typing import Any

from tmsgate.storage import open_store

from .broker import Broker
from .config import GatewayConfig
from .groups import close_coordinator, start_coordinator
from .metrics import Metrics
from .server import KafkaServer

log = logging.getLogger("tmsgate.kafka")


async def serve(
    config: GatewayConfig,
    store_url: str,
    *,
    metrics_listen: tuple[str, int] | None = None,
    stop: asyncio.Event | None = None,
    on_ready: Callable[[KafkaServer], Any] | None = None,
    handle_signals: bool = True,
) -> None:
    """Serve Kafka clients until SIGTERM/SIGINT (or ``stop`` is set)."""
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    janitor = config.janitor_interval_s if config.janitor_interval_s > 0 else None
    store = await loop.run_in_executor(
        None,
        functools.partial(
            open_store,
            store_url,
            janitor_interval_s=janitor,
            disk_reserve_bytes=config.disk_reserve_bytes,
        ),
    )
    metrics = Metrics()
    metrics.watch_store(store)
    broker = Broker(store, config, metrics=metrics)
    server = KafkaServer(broker)
    try:
        broker.attach(loop)
        await start_coordinator(broker)  # restored members must expire on time
        host, port = await server.start()
        if metrics_listen is not None:
            metrics.serve(*metrics_listen)
            log.info("metrics on http://%s:%d/metrics", *metrics_listen)
        if handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
        log.info(
            "tmsgate Kafka gateway listening on %s:%d (advertised %s:%d), store %s, "
            "namespace %r, auto-create topics %s%s",
            host,
            port,
            broker.advertised_host,
            broker.advertised_port,
            store_url,
            config.namespace,
            "on" if config.auto_create_topics else "off",
            # Started on a full disk (the store logged why when it opened): served anyway,
            # so that consumers go on and topics can be deleted to free space.
            "; DISK FULL: writes are refused until space is free, reads and deletes are served"
            if store.writes_refused
            else "",
        )
        if on_ready is not None:
            on_ready(server)
        await stop.wait()
        log.info(
            "shutting down: no new connections; finishing %d open connections",
            server.connection_count,
        )
        await server.stop(config.shutdown_grace_s)
        await close_coordinator(broker)  # flush queued group state before the store closes
    finally:
        if handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
        broker.close()
        await loop.run_in_executor(None, store.close)  # flushes and syncs the store
        log.info("store closed; gateway stopped")
