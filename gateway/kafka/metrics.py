"""Prometheus metrics of the Kafka listener.

Each Metrics object owns its registry, so several gateways (tests start many in one
process) do not collide in prometheus_client's global default registry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "tmsgate_kafka_requests", "Kafka requests handled", ["api"], registry=r
        )
        self.request_errors = Counter(
            "tmsgate_kafka_request_failures",
            "Kafka requests that closed their connection instead of being answered",
            ["api"],
            registry=r,
        )
        self.latency = Histogram(
            "tmsgate_kafka_request_seconds",
            "Time from decoding a request to its response being ready",
            ["api"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.logins = Counter(
            "tmsgate_kafka_logins",
            "SASL logins on the Kafka listener, by mechanism and result",
            ["mechanism", "result"],
            registry=r,
        )
        self.denials = Counter(
            "tmsgate_authorization_denials",
            "Operations the ACL authorizer denied (Kafka and HTTP), by resource and operation",
            ["resource_type", "operation"],
            registry=r,
        )
        self.produced_messages = Counter(
            "tmsgate_kafka_produced_messages", "Messages written by Produce", registry=r
        )
        self.produced_bytes = Counter(
            "tmsgate_kafka_produced_bytes", "Record batch bytes accepted by Produce", registry=r
        )
        self.fetched_messages = Counter(
            "tmsgate_kafka_fetched_messages", "Messages returned by Fetch", registry=r
        )
        self.readahead_messages = Counter(
            "tmsgate_kafka_fetch_readahead_messages",
            "Messages read from the store and encoded ahead of a consumer's next fetch",
            registry=r,
        )
        self.partition_errors = Counter(
            "tmsgate_kafka_partition_errors",
            "Per-partition error codes returned",
            ["api", "error"],
            registry=r,
        )
        self._per_api: dict[str, tuple[Callable[[], None], Callable[[float], None]]] = {}
        self.connections = Gauge("tmsgate_kafka_connections", "Open client connections", registry=r)
        self.transactions_ended = Counter(
            "tmsgate_kafka_transactions",
            "Kafka transactions ended: committed, aborted, timed_out, failed, recovered",
            ["outcome"],
            registry=r,
        )
        self.transactions_open = Gauge(
            "tmsgate_kafka_transactions_open",
            "Kafka transactional ids with a transaction open (Ongoing or ending)",
            registry=r,
        )
        self.bad_frames = Counter(
            "tmsgate_kafka_bad_frames",
            "Connections closed for malformed or oversized frames",
            registry=r,
        )
        # The store's disk (see watch_store): read when scraped, not kept up to date.
        self.store_writes_refused = Gauge(
            "tmsgate_store_writes_refused",
            "1 while the store refuses writes because its disk is full (reads and deletes go on)",
            registry=r,
        )
        self.store_disk_free = Gauge(
            "tmsgate_store_disk_free_bytes",
            "Free bytes on the store's file system, the reserve not counted",
            registry=r,
        )
        self.cleaner_produced_keys = Gauge(
            "tmsgate_cleaner_produced_keys",
            "Records of compacted topics whose keys the cleaner holds from Produce "
            "(--cleaner-produced-keys-mb, about 64 bytes each)",
            registry=r,
        )
        self.store_disk_reserve = Gauge(
            "tmsgate_store_disk_reserve_bytes",
            "Bytes held in the store's reserve file (0 while released for a full disk)",
            registry=r,
        )

    def request_done(self, api: str, seconds: float) -> None:
        """Count a handled request and its latency. The labelled children are kept:
        prometheus_client's labels() costs a few microseconds per call, twice per request."""
        children = self._per_api.get(api)
        if children is None:
            children = self._per_api[api] = (
                self.requests.labels(api).inc,
                self.latency.labels(api).observe,
            )
        children[0]()
        children[1](seconds)

    def count_denial(self, resource_type: Any, operation: Any) -> None:
        self.denials.labels(resource_type.name, operation.name).inc()

    def watch_store(self, store: Any) -> None:
        """Report the store's disk space and writes-refused mode when scraped."""
        self.store_writes_refused.set_function(lambda: float(store.writes_refused))
        self.store_disk_free.set_function(lambda: float(store.disk_space()["free_bytes"]))
        self.store_disk_reserve.set_function(lambda: float(store.disk_space()["reserve_bytes"]))
        self.registry.register(_WriterCollector(store.writer_stats))
        self.registry.register(_CleanerCollector(lambda: dict(store.cleaner.stats)))
        self.cleaner_produced_keys.set_function(lambda: float(store.cleaner.produced.held()))

    def serve(self, host: str, port: int) -> None:
        """Expose /metrics over HTTP on a daemon thread."""
        start_http_server(port, addr=host, registry=self.registry)


class _WriterCollector:
    """The store writer's counters, read when scraped: how many durable writes (each one
    fsync) the gateway makes, how many operations share one, and the time they take
    (rate(write_seconds) / rate(writes) is a write's mean latency; near 1 s/s, the
    writer is busy all the time and every acknowledgement queues behind it)."""

    _FAMILIES = (
        ("batches", "tmsgate_store_writes", "Durable writes of the store's writer"),
        ("operations", "tmsgate_store_write_operations", "Store operations in those writes"),
        ("write_seconds", "tmsgate_store_write_seconds", "Time spent in them, fsync included"),
        ("failed_batches", "tmsgate_store_write_failures", "Durable writes that failed"),
    )

    def __init__(self, stats: Callable[[], dict[str, float]]) -> None:
        self._stats = stats

    def collect(self) -> Any:
        stats = self._stats()
        for key, name, doc in self._FAMILIES:
            yield CounterMetricFamily(name, doc, value=stats[key])


class _CleanerCollector:
    """The compaction cleaner's figures per compacted topic this gateway cleans
    (storage/compaction.py), read when scraped; ``topic`` is the TMS topic (a Kafka
    partition p > 0 is ``name~p``)."""

    _GAUGES = (
        ("dirty_ratio", "tmsgate_cleaner_dirty_ratio", "Dirty bytes over all bytes"),
        ("lag_ms", "tmsgate_cleaner_lag_ms", "Age of the oldest message not yet cleaned"),
        ("first_dirty_offset", "tmsgate_cleaner_first_dirty_offset", "Where cleaning resumes"),
    )
    _COUNTERS = (
        ("bytes_reclaimed", "tmsgate_cleaner_reclaimed_bytes", "Bytes the cleaner removed"),
        ("messages_removed", "tmsgate_cleaner_removed_messages", "Messages it removed"),
        ("passes", "tmsgate_cleaner_passes", "Cleaning passes"),
    )

    def __init__(self, stats: Callable[[], dict[Any, Any]]) -> None:
        self._stats = stats

    def collect(self) -> Any:
        stats = self._stats()
        for attr, name, doc in self._GAUGES:
            family = GaugeMetricFamily(name, doc, labels=["topic"])
            for topic, st in stats.items():
                family.add_metric([topic.topic], float(getattr(st, attr)))
            yield family
        for attr, name, doc in self._COUNTERS:
            family = CounterMetricFamily(name, doc, labels=["topic"])
            for topic, st in stats.items():
                family.add_metric([topic.topic], float(getattr(st, attr)))
            yield family
