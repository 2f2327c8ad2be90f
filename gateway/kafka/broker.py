"""Shared state of one gateway: the store, the executors and the registries every handler
uses. One Broker serves all connections of a listener.

Every client shares one event loop, so no request may hold it for long (a Metadata
request naming 500,000 topics once held it 4.6 s, and every producer waited). Blocking
store calls go to the I/O executor (``run``); CPU-heavy pure work, such as decoding a
large request or encoding a large response, to a CPU thread (``compute``); and a
handler looping over a client-supplied list iterates it with ``paced``, which gives the
loop back every few milliseconds.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable
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
from .producers import ProducerStates
from .readahead import ReadAhead
from .routes import RouteTable, default_routes
from .store_futures import on_loop
from .topics import TopicRegistry
from .txn import TxnConfig, TxnCoordinator

T = TypeVar("T")
# The event loop time a paced loop may take before letting other work run, shared by all
# paced loops running at once: other clients wait at most about this long per turn.
LOOP_SLICE_S = 0.001
# While heavy work (compute, paced loops) keeps one thread busy, the others (event loop,
# store writer) must win the GIL back soon after each system call they make: at Python's
# default switch interval (5 ms) each of the dozen hand-overs that answering a produce
# takes could cost 5 ms (beside 1 MB Metadata requests produce p50 was 35-40 ms; at
# 0.5 ms, 15-19 ms, and 4 ms with GC_SPLIT below; alone 1-2 ms). Only meanwhile: a
# shorter interval costs throughput.
HEAVY_SWITCH_INTERVAL_S = 0.0005
# A large request makes hundreds of thousands of objects, and a collection of the middle
# generation walks them all at once while every thread waits (30-100 ms with `tmsgate
# serve`'s thresholds). During heavy work that generation is collected GC_SPLIT times as
# often, so each pause is that much shorter (5-6 ms measured); the oldest generation's
# threshold grows as much, so full collections do not come sooner.
GC_SPLIT = 10


class _HeavyWork:
    """Heavy work under way in this process, by any broker: the GIL and the collector are
    the process's, so are the settings changed meanwhile (restored when none is left)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # gateways on several threads (tests) share it
        self._depth = 0
        self._normal: tuple[float, tuple[int, int, int]] = (0.0, (0, 0, 0))

    def begins(self) -> None:
        with self._lock:
            if not self._depth:
                self._normal = (sys.getswitchinterval(), gc.get_threshold())
                sys.setswitchinterval(HEAVY_SWITCH_INTERVAL_S)
                t0, t1, t2 = self._normal[1]
                gc.set_threshold(t0, max(1, t1 // GC_SPLIT), t2 * GC_SPLIT)
            self._depth += 1

    def ends(self) -> None:
        with self._lock:
            self._depth -= 1
            if not self._depth:
                sys.setswitchinterval(self._normal[0])
                gc.set_threshold(*self._normal[1])


_heavy_work = _HeavyWork()


# Broker.paced: ``async for item in paced(items)`` gives the loop back now and then.
Paced = Callable[[Iterable[T]], AsyncIterator[T]]


class Broker:
    def __init__(
        self,
        store: Store,
        config: GatewayConfig,
        *,
        metrics: Metrics | None = None,
        routes: RouteTable | None = None,
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
        # One thread: CPU work holds the GIL, so more threads would not finish it sooner,
        # they would only take more turns from the event loop (and from store writers).
        self.cpu_executor = ThreadPoolExecutor(1, thread_name_prefix="tmsgate-cpu")
        self._paced_loops = 0
        self.metrics = metrics or Metrics()
        self.routes = routes or default_routes()
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

    async def compute(self, fn: Callable[..., T], *args: Any) -> T:
        """Run pure CPU work (decoding, encoding) off the event loop; it must not touch
        state the loop owns."""
        loop = asyncio.get_running_loop()
        _heavy_work.begins()
        try:
            return await loop.run_in_executor(self.cpu_executor, functools.partial(fn, *args))
        finally:
            _heavy_work.ends()

    async def paced(self, items: Iterable[T]) -> AsyncIterator[T]:
        """``items``, giving the event loop back whenever this loop has held it for its
        share of LOOP_SLICE_S. For handlers looping over what a client sent (topics,
        partitions, resources, groups): ``async for t in ctx.broker.paced(req.topics)``.
        Loops that await the store already give the loop back at each call; pacing also
        covers the ones that do not (cache hits, invalid names, building responses)."""
        self._paced_loops += 1
        heavy = False  # a few items (the usual case) change no interpreter setting
        try:
            deadline = time.perf_counter() + LOOP_SLICE_S / self._paced_loops
            for item in items:
                yield item
                if time.perf_counter() >= deadline:
                    if not heavy:
                        heavy = True
                        _heavy_work.begins()
                    await asyncio.sleep(0)
                    deadline = time.perf_counter() + LOOP_SLICE_S / self._paced_loops
        finally:
            self._paced_loops -= 1
            if heavy:
                _heavy_work.ends()

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
        self.cpu_executor.shutdown(wait=True)
        self.readahead.close()
