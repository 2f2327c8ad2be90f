"""The running services of one tmsgate process, built, started and stopped in one place.

``tmsgate serve`` opens the store once and serves Kafka and HTTP over it on one event
loop. ``Services`` owns what the listeners share (the store, the I/O executor, the
metrics registry, the transaction service) and builds the Kafka broker (which owns the
Kafka-only parts: topic registry, producer states, batch cache, group coordinator) and
the HTTP server, passing each what it needs. Nothing is found through module globals.

Start order: store -> executor, metrics, transactions -> Kafka broker (publish
notifier, topic listener, groups loaded) -> Kafka listener -> HTTP listener -> metrics
endpoint. Stop in reverse: the listeners stop taking requests and finish what they have,
the group coordinator writes its queued state, then the executor and the store close.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import os
import signal
import socket
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from prometheus_client import (
    CollectorRegistry,
    Gauge,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
)
from tmsgate.storage import SharedTransactions, Store, open_store

from . import exporter_metrics, faults
from .cluster import Cluster, ClusterConfig
from .cluster_calls import Body, ClusterCalls
from .commits import Commits
from .errors import PeerUnavailable
from .kafka.broker import Broker
from .kafka.config import GatewayConfig
from .kafka.groups import GroupError
from .kafka.metrics import Metrics
from .kafka.server import KafkaServer
from .partition_work import PartitionWork
from .transactions import VIEW_WAIT_S, TransactionService

if TYPE_CHECKING:
    from .http.config import HttpConfig
    from .http.server import HttpServer

log = logging.getLogger("tmsgate")
T = TypeVar("T")
EXPIRY_INTERVAL_S = 1.0  # how soon a timed-out transaction moves to the invalid list
# Several gateways: how often one that is not the controller refreshes its view of the
# transaction manager (a call to the controller): how late, at most, it sees a TMS commit.
VIEW_REFRESH_S = 0.1


@dataclass(frozen=True, slots=True)
class ServeConfig:
    store_url: str
    kafka: GatewayConfig
    http: HttpConfig | None = None  # None: no HTTP listener
    metrics_listen: tuple[str, int] | None = None
    # The store's clock (epoch ms; None: the wall clock). Tests move it instead of waiting
    # for timeouts; it drives TTLs, write pointers and transaction timeouts alike.
    clock: Callable[[], int] | None = None
    # Several gateways on one store (--cluster): this one's node id and lease time.
    cluster: ClusterConfig | None = None


class Services:
    def __init__(
        self, store: Store, kafka: GatewayConfig, cluster: ClusterConfig | None = None
    ) -> None:
        self.store = store
        self.cluster = None if cluster is None else Cluster(store, cluster, kafka.namespace)
        self.namespace = kafka.namespace  # where Kafka's topics live
        self.registry = CollectorRegistry()
        # process_*, python_info, python_gc_*: prometheus_client puts these in its global
        # registry only, and /metrics serves this one.
        for collector in (ProcessCollector, PlatformCollector, GCCollector):
            collector(registry=self.registry)
        # Bounded: reads from disk queue here instead of piling threads onto LevelDB.
        self.executor = ThreadPoolExecutor(kafka.io_threads, thread_name_prefix="tmsgate-io")
        self.metrics = Metrics(self.registry)
        self.metrics.watch_store(store)
        self.broker = Broker(
            store, kafka, metrics=self.metrics, executor=self.executor, cluster=self.cluster
        )
        # One authorizer, one set of ACLs, for the Kafka and HTTP listeners.
        self.authorizer = self.broker.authorizer
        # kafka-exporter's kafka_* families, read from the store when scraped.
        self.kafka_exporter = exporter_metrics.register(self)
        # Several gateways: the calls between them (gateway/cluster_calls.py), and each
        # transaction's part on a partition run where the partition is led.
        self.calls = None if self.cluster is None else ClusterCalls(self.cluster, self.registry)
        # The steps every commit takes once decided, Kafka's and the TMS service's alike
        # (gateway/commits.py): one runner, one replay, one fault hook.
        self.commits = Commits(store, PartitionWork(store, self.calls))
        self.broker.txns.use_commits(self.commits)
        if self.calls is not None:
            self.broker.txns.attach_cluster(self.calls)
            self.calls.register("group.commit_txn", self._commit_txn_offsets)
        self.transactions = TransactionService(
            store,
            self.registry,
            self.broker.txns.owner_of,
            calls=self.calls,
            commits=self.commits,
        )
        # Several gateways: set once this gateway, as the new controller, finished the
        # commits the last one recorded; nothing expires before (services docstring).
        self._tx_recovered = False
        self.kafka_server = KafkaServer(self.broker)
        self.http_server: HttpServer | None = None
        self._expiry: asyncio.Task[None] | None = None
        self._leases: asyncio.Task[None] | None = None
        self._view: asyncio.Task[None] | None = None
        self._hurried: asyncio.Task[None] | None = None  # a lease round a topic change asked for
        self._round_lock = asyncio.Lock()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking store call on the shared I/O executor."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, functools.partial(fn, *args))

    async def compute(self, fn: Callable[..., T], *args: Any) -> T:
        """Pure CPU work (decoding a large body) on the process's one CPU thread."""
        return await self.broker.compute(fn, *args)

    @staticmethod
    async def wait(fut: Future[T]) -> T:
        """Await a store future (publish_async) from the event loop."""
        return await asyncio.wrap_future(fut)

    @property
    def closing(self) -> bool:
        return self.broker.closing

    # --- life cycle ------------------------------------------------------------------------
    async def start(self, config: ServeConfig) -> None:
        loop = asyncio.get_running_loop()
        kafka = config.kafka
        self.broker.attach(loop)
        if self.cluster is None:
            await self.broker.groups.ready()  # restored members must expire on time
            # Partition changes (create, grow, delete, configs) a crash cut short are
            # finished before any client sees the topics.
            await self.broker.topics.repair()
            # Before listening: commits decided before a crash are finished (and open Kafka
            # transactions aborted) before any client can read.
            await self._recover_transactions()
        with _binding("Kafka", (kafka.host, kafka.port), "--kafka-listen"):
            # In a cluster, Kafka clients are answered once the first lease round has
            # seen the others (below): a Metadata answer naming this gateway alone makes
            # librdkafka drop the others' brokers, and a transactional producer whose
            # group coordinator one of them is can then hang (librdkafka #5511).
            await self.kafka_server.start(serving=self.cluster is None)
        if config.http is not None:
            from .http.server import HttpServer  # Starlette and uvicorn only when serving HTTP

            self.http_server = HttpServer(self, config.http)
            with _binding("HTTP", (config.http.host, config.http.port), "--http-listen"):
                await self.http_server.start()
            host, port = self.http_server.address
            if host in ("0.0.0.0", "::"):  # every interface: the one Kafka clients use
                host = self.broker.advertised_host
            self.broker.http_url = (
                config.http.advertised_url or f"{self.http_server.scheme}://{host}:{port}"
            )
        if config.metrics_listen is not None:
            with _binding("metrics", config.metrics_listen, "--metrics-listen"):
                self.metrics.serve(*config.metrics_listen)
            log.info("metrics on http://%s:%d/metrics", *config.metrics_listen)
        self._expiry = loop.create_task(self._expire_transactions())
        if self.cluster is not None:
            assert self.calls is not None
            await self.calls.start(self.run)  # the secret, before any call comes or goes
            # Where clients reach us is known now; the first round of leases is taken
            # before start() returns, so a lone gateway serves at once.
            self.cluster.announce(
                self.broker.advertised_host, self.broker.advertised_port, self.broker.http_url
            )
            self._watch_cluster()
            self._hurry_on_topic_changes()
            await self.lease_round()
            await self.kafka_server.serve()
            self._leases = loop.create_task(self._keep_leases())
            self._view = loop.create_task(self._follow_transaction_manager())

    async def stop_listeners(self) -> None:
        """After a failed start: stop the listeners that did start, so that none is left
        running (or cancelled mid-task, with a traceback) as the process exits."""
        if self.http_server is not None:
            await self.http_server.stop()
        await self.kafka_server.stop(0)

    async def stop(self, grace_s: float) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
        if self._leases is not None:
            self._leases.cancel()
        if self._hurried is not None:
            self._hurried.cancel()
        if self._view is not None:
            self._view.cancel()
        if self.http_server is not None:
            await self.http_server.stop()
        await self.kafka_server.stop(grace_s)
        written = self.broker.txns.flush_complete()  # else replayed, harmlessly, at the start
        if written is not None:
            with contextlib.suppress(Exception):  # logged; the replay at the start covers it
                await asyncio.wrap_future(written)
        await self.broker.groups.close()  # flush queued group state before the store closes
        if self.cluster is not None:
            # After the last write: the others take over at once, not after the lease.
            await self.run(self.cluster.stop)
        if self.calls is not None:
            await self.calls.close()

    # --- several gateways -------------------------------------------------------------------
    def _watch_cluster(self) -> None:
        cluster = self.cluster
        assert cluster is not None
        gauges = {
            "partitions_led": "Partitions this gateway leads (holds the lease of)",
            "group_slots_led": "Consumer-group coordinator slots (of 50) this gateway holds",
            "controller": "1 while this gateway is the controller (Metadata's controller id)",
            "gateways": "Live gateways on this store, as the last lease round saw them",
            "takeovers": "Partitions this gateway took the lease of since it started",
            "failed_rounds": "Lease rounds that failed (the store did not answer)",
        }
        for key, doc in gauges.items():
            gauge = Gauge(f"tmsgate_cluster_{key}", doc, registry=self.registry)
            gauge.set_function(lambda key=key: float(cluster.stats()[key]))

    async def lease_round(self) -> None:
        """Renew, look and take once (every fifth of the lease; a topic change hurries it:
        _hurry; tests call it to hurry)."""
        async with self._round_lock:  # one round at a time: the acts below follow its answer
            await self._lease_round()

    def _hurry_on_topic_changes(self) -> None:
        """A topic created, changed or deleted here: this gateway takes its share of the
        partitions at once and tells the others to, rather than every gateway waiting for
        its next round (up to a fifth of --lease-ms with no leader)."""
        loop = asyncio.get_running_loop()
        assert self.calls is not None

        def changed(md: object) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: stopping anyway
                loop.call_soon_threadsafe(self._hurry, True)

        self.store.add_topic_listener(changed)
        self.calls.register("cluster.round", self._on_round)

    def _hurry(self, tell: bool) -> None:
        if self._hurried is not None and not self._hurried.done():
            return  # a round is about to run: it sees this change too
        self._hurried = asyncio.get_running_loop().create_task(self._hurried_round(tell))

    async def _hurried_round(self, tell: bool) -> None:
        try:
            await self.lease_round()
        except Exception as exc:  # the regular round tries again
            log.debug("a hurried lease round failed: %s", exc)
            return
        if tell:
            self._tell_others_to_look()

    def _tell_others_to_look(self) -> None:
        """The other gateways run a lease round now (a notice, not awaited): a topic made
        or changed here, or partitions taken or handed over in our round."""
        cluster, calls = self.cluster, self.calls
        assert cluster is not None and calls is not None
        others = [n for n in cluster.nodes() if n.node_id != cluster.me.node_id]
        if others:
            calls.tell(others, "cluster.round", {})

    async def _on_round(self, body: Body) -> Body:
        self._hurry(False)
        return {}

    async def _lease_round(self) -> None:
        cluster = self.cluster
        assert cluster is not None
        changed = await self.run(cluster.tick)
        if changed.moved:
            self._tell_others_to_look()
        groups = self.broker.groups
        assert groups.slots is not None
        if changed.slots_leaving:
            # Group slots whose owner is now another gateway: their queued writes land,
            # nothing of theirs is written after, their groups leave memory (members are
            # told NOT_COORDINATOR and rejoin on the new owner); then the leases go.
            await groups.slots.hand_over(changed.slots_leaving)
            await self.run(cluster.release_group_slots, changed.slots_leaving)
        await groups.slots.follow()  # load the slots taken, drop the ones lost
        if changed.is_controller != changed.was_controller:
            log.info("%s the controller", "now" if changed.is_controller else "no longer")
            self._tx_recovered = False
            self.broker.txns.reset()  # the records are the controller's alone
            if changed.is_controller:
                # Partition changes a crash cut short (create, grow, delete, configs) are
                # finished by one gateway: the controller.
                await self.broker.topics.repair()
                await self._take_over_transactions()
        elif changed.is_controller and not self._tx_recovered:
            await self._take_over_transactions()  # the last attempt failed: again

    async def _take_over_transactions(self) -> None:
        """As the new controller, before anything expires: the Kafka transactions' records
        are loaded (recorded commits finished, open transactions aborted and their
        producers fenced) and the TMS commits with a manifest are finished, as at a
        restart. The TMS transactions still open stay open, with their timeouts."""
        try:
            await self._recover_transactions()
        except Exception as exc:  # the next round tries again; nothing expires meanwhile
            log.warning("taking over the transactions failed: %s", exc)
            return
        self._tx_recovered = True
        txm = self.store.transactions
        if isinstance(txm, SharedTransactions):
            txm.recovered()
        log.info("running the cluster's transaction manager")

    async def _recover_transactions(self) -> None:
        """Every commit recorded and not finished, of both kinds, with the one replay
        (gateway/commits.py): the Kafka transactions' records (whose open transactions
        are aborted, their producers fenced) and the TMS commits with a manifest."""
        await self.broker.txns.ready()
        await self.transactions.recover()

    async def _commit_txn_offsets(self, body: Body) -> Body:
        """The ``group.commit_txn`` cluster call: a Kafka transaction's offsets, committed
        by this gateway as the group's coordinator (the controller's commit, step 5)."""
        offsets = {
            (str(t), int(p)): (int(o), int(le), str(md)) for t, p, o, le, md in body["offsets"]
        }
        group = str(body["group"])
        try:
            await self.broker.groups.commit_transactional(
                group, offsets, int(body["decidedMs"]), bool(body["replay"])
            )
        except GroupError as exc:  # the slot moved: the controller asks the new owner
            raise PeerUnavailable(f"group {group!r}: {exc}") from exc
        self.broker.txns.offsets_ended(group, str(body["tid"]))
        return {}

    async def _follow_transaction_manager(self) -> None:
        """Not the controller: this gateway's view of the transaction manager, refreshed
        every VIEW_REFRESH_S (a commit's partitions hear of it at once; this is for the
        rest: TMS commits, aborts, timeouts). Each refresh is a long poll (answered once
        the snapshot changed, or after a second), so this asks at most every
        VIEW_REFRESH_S while transactions change, and about once a second when idle."""
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            try:
                await self.transactions.refresh_view(VIEW_WAIT_S)
            except Exception as exc:  # the controller moving: readers wait a little longer
                log.debug("refreshing the view of the transaction manager failed: %s", exc)
            await asyncio.sleep(max(0.0, VIEW_REFRESH_S - (loop.time() - started)))

    async def _keep_leases(self) -> None:
        assert self.cluster is not None
        while True:
            await asyncio.sleep(self.cluster.config.tick_s)
            try:
                await self.lease_round()
            except Exception as exc:  # the store failing: leases run out, others take over
                self.cluster.failed_ticks += 1
                log.warning("renewing leases failed: %s", exc)

    def close(self) -> None:
        """After stop() (or a failed start): release threads, then close the store."""
        self.broker.close()
        self.executor.shutdown(wait=True)
        self.store.close()  # flushes and syncs the store

    async def _expire_transactions(self) -> None:
        # Timed-out transactions join the invalid list within a second, so their state
        # reads "invalid" and read_committed consumers stop waiting for them.
        while True:
            await asyncio.sleep(EXPIRY_INTERVAL_S)
            if self.cluster is not None and not (
                self.broker.txns.coordinates and self._tx_recovered
            ):
                continue  # only the controller expires, once it recovered what was recorded
            try:
                # Kafka's first: it fences the producer as it aborts (Kafka's behaviour).
                kafka = await self.broker.txns.expire()
                expired = await self.run(self.store.transactions.expire)
                await self.run(self.transactions.forget_old_keys)
            except Exception as exc:  # a full disk, a closing store: try again later
                log.warning("expiring transactions failed: %s", exc)
                continue
            if kafka:
                log.info("%d Kafka transactions timed out: %s", len(kafka), kafka[:10])
            if expired:
                log.info("%d transactions timed out: %s", len(expired), expired[:10])


class ListenerError(OSError):
    """A listener cannot bind its address; the message names the listener, the address
    and the option that sets it."""


_BIND_ERRNOS = (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES)


@contextlib.contextmanager
def _binding(listener: str, address: tuple[str, int], option: str) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        # asyncio's and socket's messages differ and name neither listener nor option
        if not (isinstance(exc, socket.gaierror) or exc.errno in _BIND_ERRNOS):
            raise
        reason = exc.strerror if isinstance(exc, socket.gaierror) else os.strerror(exc.errno)
        env = "TMSGATE_" + option.removeprefix("--").replace("-", "_").upper()
        host, port = address
        raise ListenerError(
            f"the {listener} listener cannot bind {host}:{port}: {str(reason).lower()} "
            f"({option} / {env})"
        ) from None


async def serve(
    config: ServeConfig,
    *,
    stop: asyncio.Event | None = None,
    on_ready: Callable[[Services], Any] | None = None,
    handle_signals: bool = True,
) -> None:
    """Serve Kafka (and HTTP) clients until SIGTERM/SIGINT (or ``stop`` is set)."""
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    kafka = config.kafka
    janitor = kafka.janitor_interval_s if kafka.janitor_interval_s > 0 else None
    store = await loop.run_in_executor(
        None,
        functools.partial(
            open_store,
            config.store_url,
            janitor_interval_s=janitor,
            disk_reserve_bytes=kafka.disk_reserve_bytes,
            clock=config.clock,
            shared=config.cluster is not None,
            compaction=kafka.compaction,
        ),
    )
    try:
        services = Services(store, kafka, config.cluster)
        faults.install_from_env(services)
    except BaseException:
        store.close()
        raise
    try:
        try:
            await services.start(config)
        except BaseException:
            await services.stop_listeners()  # e.g. the metrics port was in use
            raise
        if handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
        _log_ready(services, config)
        if on_ready is not None:
            on_ready(services)
        await stop.wait()
        log.info(
            "shutting down: no new connections; finishing %d open connections",
            services.kafka_server.connection_count,
        )
        await services.stop(kafka.shutdown_grace_s)
    finally:
        if handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
        await loop.run_in_executor(None, services.close)
        log.info("store closed; gateway stopped")


def _log_ready(services: Services, config: ServeConfig) -> None:
    broker = services.broker
    host, port = services.kafka_server.address
    http = services.http_server
    log.info(
        "tmsgate Kafka gateway listening on %s:%d (advertised %s:%d)%s, store %s, "
        "namespace %r, auto-create topics %s%s",
        host,
        port,
        broker.advertised_host,
        broker.advertised_port,
        "; HTTP API on {0}://{1}:{2} (console {0}://{1}:{2}/ui, API page /docs)".format(
            http.scheme, *http.address
        )
        if http is not None
        else "",
        config.store_url,
        config.kafka.namespace,
        "on" if config.kafka.auto_create_topics else "off",
        # Started on a full disk (the store logged why when it opened): served anyway,
        # so that consumers go on and topics can be deleted to free space.
        "; DISK FULL: writes are refused until space is free, reads and deletes are served"
        if services.store.writes_refused
        else "",
    )
