"""Shared state of one gateway: the store, the blocking-call executor and the registries
every handler uses. One Broker serves all connections of a listener."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from .batch_cache import BatchCache
from .config import GatewayConfig
from .groups import stop_coordinator
from .metrics import Metrics
from .notify import PublishNotifier
from .producers import ProducerStates
from .routes import RouteTable, default_routes
from .topics import TopicRegistry

T = TypeVar("T")


class Broker:
    def __init__(
        self,
        store: Any,
        config: GatewayConfig,
        *,
        metrics: Metrics | None = None,
        routes: RouteTable | None = None,
    ) -> None:
        self.store = store
        self.config = config
        # Bounded: reads from disk queue here instead of piling threads onto LevelDB.
        self.executor = ThreadPoolExecutor(config.io_threads, thread_name_prefix="tmsgate-io")
        self.metrics = metrics or Metrics()
        self.routes = routes or default_routes()
        self.topics = TopicRegistry(self)
        self.producers = ProducerStates(self)
        self.batch_cache = BatchCache(config.fetch_cache_bytes)
        self.notifier = PublishNotifier()
        self.advertised_host = config.advertised_host or config.host
        self.advertised_port = config.advertised_port or config.port
        self.closing = False

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking store call on the executor."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, functools.partial(fn, *args, **kwargs))

    @staticmethod
    async def wait_future(fut: Future[T]) -> T:
        """Await a store future (publish_async) from the event loop."""
        return await asyncio.wrap_future(fut)

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start listening for publishes (fetch long polls wake on them)."""
        self.notifier.attach(loop, self.store)

    def set_listen_address(self, host: str, port: int) -> None:
        # With port 0 the OS picks the port; clients must be told the real one.
        if self.config.advertised_host is None:
            self.advertised_host = host
        if self.config.advertised_port is None:
            self.advertised_port = port

    def begin_shutdown(self) -> None:
        self.closing = True
        self.notifier.wake_all()
        stop_coordinator(self)  # answer long-polling JoinGroup/SyncGroup with NOT_COORDINATOR

    def close(self) -> None:
        self.notifier.detach()
        self.executor.shutdown(wait=True)
