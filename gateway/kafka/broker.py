"""Shared state of one gateway: the store, the executors and the registries every handler
uses. One Broker serves all connections of a listener.

Every client shares one event loop, so no request may hold it for long. Blocking store
calls go to the I/O executor (``run``); CPU-heavy pure work to a CPU thread
(``compute``); and a handler looping over a client-supplied list iterates it with
``paced``, which gives the loop back every few milliseconds (both: pacing.py).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from tmsgate.storage import Store

from ..acls import Authorizer
from ..cluster import Cluster
from ..users import Users
from .batch_cache import BatchCache
from .config import GatewayConfig
from .groups import GroupCoordinator, from_env
from .metrics import Metrics
from .notify import PublishNotifier
from .pacing import Pacing
from .producers import ProducerStates
from .readahead import ReadAhead
from .store_futures import on_loop
from .topics import TopicRegistry
from .txn import TxnConfig, TxnCoordinator

T = TypeVar("T")


class Broker:
    def __init__(
        self,
        store: Store,
        config: GatewayConfig,
        *,
        metrics: Metrics | None = None,
        executor: ThreadPoolExecutor | None = None,
        authorizer: Authorizer | None = None,
        cluster: Cluster | None = None,
    ) -> None:
        """``executor``: the process's shared I/O executor (gateway/services.py owns it and
        shuts it down); a broker built alone (tests) makes and closes its own.
        ``authorizer``: the process's, shared with HTTP; by default one from ``config``."""
        self.store: Store = store
        self.config = config
        # Several gateways on one store: who leads what (None: this one leads everything).
        self.cluster = cluster
        # Bounded: reads from disk queue here instead of piling threads onto LevelDB.
        self._own_executor = executor is None
        self.executor = executor or ThreadPoolExecutor(
            config.io_threads, thread_name_prefix="tmsgate-io"
        )
        self.pacing = Pacing()
        # The handlers' and coordinators' way to loop over what a client sent, and to
        # compute off the loop (pacing.py).
        self.paced = self.pacing.paced
        self.compute = self.pacing.compute
        self.metrics = metrics or Metrics()
        self.batch_cache = BatchCache(config.fetch_cache_bytes)
        self.topics = TopicRegistry(store, config, self.batch_cache, self.run)
        self.producers = ProducerStates(store, self.run, cluster)
        self.readahead = ReadAhead(store, self.batch_cache, self.metrics)
        self.users = Users(store)  # SASL credentials (blocking: call through run())
        self.authorizer = authorizer or Authorizer(
            store,
            enabled=config.authorizer,
            super_users=config.super_users,
            allow_if_no_acl=config.allow_everyone_if_no_acl_found,
            on_denied=self.metrics.count_denial,
        )
        self.notifier = PublishNotifier()
        self.advertised_host = config.advertised_host or config.host
        self.advertised_port = config.advertised_port or config.port
        # The HTTP API's base URL, told to clients as the broker config tmsgate.http.url
        # (the Spark data source finds the HTTP API from a Kafka bootstrap with it).
        self.http_url: str | None = None
        self.closing = False
        # Built last: they work with the parts above.
        self.groups = GroupCoordinator(
            store,
            config.groups or from_env(),
            run=self.run,
            paced=self.paced,
            topics=self.topics,
            cluster=cluster,
        )
        self.txns = TxnCoordinator(
            store,
            TxnConfig(config.transaction_max_timeout_ms, config.transactional_id_expiration_ms),
            run=self.run,
            paced=self.paced,
            topics=self.topics,
            producers=self.producers,
            groups=self.groups,
            metrics=self.metrics,
            namespace=config.namespace,
        )

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking store call on the executor."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, functools.partial(fn, *args, **kwargs))

    @staticmethod
    async def wait_future(fut: Future[T]) -> T:
        """Await a store future (publish_async) from the event loop."""
        return await on_loop(fut)

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start listening for publishes (fetch long polls wake on them)."""
        self.notifier.attach(loop, self.store)
        self.topics.attach(loop)

    def set_listen_address(self, host: str, port: int) -> None:
        # With port 0 the OS picks the port; clients must be told the real one.
        if self.config.advertised_host is None:
            self.advertised_host = host
        if self.config.advertised_port is None:
            self.advertised_port = port

    def begin_shutdown(self) -> None:
        self.closing = True
        self.notifier.wake_all()
        self.groups.shutdown()  # answer long-polling JoinGroup/SyncGroup with NOT_COORDINATOR

    def close(self) -> None:
        self.notifier.detach()
        self.topics.detach()
        if self._own_executor:
            self.executor.shutdown(wait=True)
        self.pacing.close()
        self.readahead.close()
