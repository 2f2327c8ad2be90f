"""kafka-exporter's metrics, read from the store, so that Grafana dashboards built for
github.com/danielqsj/kafka_exporter (Grafana.com 7589, "Kafka Exporter Overview", and
the many copies of it) work on a gateway unchanged.

Names, help texts, label names and label order are kafka_exporter's (kafka_exporter.go);
every family is a gauge there and here. What each means on a gateway, and which of
kafka_exporter's are not exported, is in docs/metrics.md.

The figures come from the read models in views.py (TopicsView: partitions' offsets and
leaders; GroupsView: committed offsets and lag), for the Kafka namespace of the gateway.
A scrape must stay cheap however many partitions there are, so:

- no message row is scanned: offsets come from each partition's state (in memory once
  the partition was used; a follower's read of the last row with --cluster), and sizes
  are not asked for;
- the families are read once and kept CACHE_S seconds: scrapes in between (several
  Prometheus servers, a dashboard refresh) get the same answer;
- the read runs on the gateway's I/O executor, like every other store read, and one at a
  time: a scrape arriving while a read is under way waits for that read. A read that
  takes longer than READ_TIMEOUT_S leaves the kafka_* families out of that scrape (the
  rest of /metrics is served), and the next scrape waits for the same read again rather
  than start another.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily, Metric
from tmsgate.storage import Store, TopicId
from tmsgate.storage.partitions import partition_count

from .kafka.groups.codec import CorruptState
from .views import GroupsView, OffsetRow, TopicsView, TopicView

if TYPE_CHECKING:
    from .services import Services

log = logging.getLogger("tmsgate.metrics")

CACHE_S = 2.0  # how long one read of the store answers scrapes
READ_TIMEOUT_S = 8.0  # below Prometheus's default scrape_timeout (10 s)

_TP = ("topic", "partition")
_GTP = ("consumergroup", "topic", "partition")
_GT = ("consumergroup", "topic")

# name -> (help, labels): kafka_exporter's, word for word (kafka_exporter.go, setup()).
FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "kafka_brokers": ("Number of Brokers in the Kafka Cluster.", ()),
    "kafka_broker_info": ("Information about the Kafka Broker.", ("id", "address")),
    "kafka_topic_partitions": ("Number of partitions for this Topic", ("topic",)),
    "kafka_topic_partition_current_offset": ("Current Offset of a Broker at Topic/Partition", _TP),
    "kafka_topic_partition_oldest_offset": ("Oldest Offset of a Broker at Topic/Partition", _TP),
    "kafka_topic_partition_leader": ("Leader Broker ID of this Topic/Partition", _TP),
    "kafka_topic_partition_replicas": ("Number of Replicas for this Topic/Partition", _TP),
    "kafka_topic_partition_in_sync_replica": (
        "Number of In-Sync Replicas for this Topic/Partition",
        _TP,
    ),
    "kafka_topic_partition_leader_is_preferred": (
        "1 if Topic/Partition is using the Preferred Broker",
        _TP,
    ),
    "kafka_topic_partition_under_replicated_partition": (
        "1 if Topic/Partition is under Replicated",
        _TP,
    ),
    "kafka_consumergroup_current_offset": (
        "Current Offset of a ConsumerGroup at Topic/Partition",
        _GTP,
    ),
    "kafka_consumergroup_current_offset_sum": (
        "Current Offset of a ConsumerGroup at Topic for all partitions",
        _GT,
    ),
    "kafka_consumergroup_lag": (
        "Current Approximate Lag of a ConsumerGroup at Topic/Partition",
        _GTP,
    ),
    "kafka_consumergroup_lag_sum": (
        "Current Approximate Lag of a ConsumerGroup at Topic for all partitions",
        _GT,
    ),
    "kafka_consumergroup_members": ("Amount of members in a consumer group", ("consumergroup",)),
}
READ_SECONDS = "tmsgate_kafka_exporter_read_seconds"
_READ_SECONDS_HELP = "Time the last read of the kafka_* families from the store took"


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    address: str  # host:port, as Metadata tells clients


class KafkaExporterCollector:
    """A prometheus_client custom collector: kafka-exporter's families for one namespace."""

    def __init__(
        self,
        store: Store,
        namespace: str,
        executor: Executor,
        brokers: Callable[[], list[BrokerInfo]],
        leader_of: Callable[[TopicId], int | None],
        clock: Callable[[], float] = time.monotonic,
        cache_s: float = CACHE_S,
    ) -> None:
        """``brokers()``: the brokers Metadata lists now; ``leader_of(partition)``: the
        node id Metadata names as the partition's leader (None while it moves)."""
        self._store, self._namespace, self._executor = store, namespace, executor
        self._brokers, self._leader_of = brokers, leader_of
        self._clock, self._cache_s = clock, cache_s
        self._lock = threading.Lock()  # scrapes run on the metrics server's threads
        self._cached: list[Metric] = []
        self._fresh_until = float("-inf")
        self._reading: Future[list[Metric]] | None = None

    def describe(self) -> list[Metric]:
        """The families' names, for the registry's duplicate check: without this it
        would collect (read the store) when the collector is registered."""
        return [*_empty_families().values(), GaugeMetricFamily(READ_SECONDS, _READ_SECONDS_HELP)]

    def collect(self) -> Iterator[Metric]:
        yield from self.families()

    def families(self) -> list[Metric]:
        with self._lock:
            if self._clock() < self._fresh_until:
                return self._cached
            try:
                if self._reading is None:
                    self._reading = self._executor.submit(self.read)
                families = self._reading.result(READ_TIMEOUT_S)
            except FutureTimeout:
                log.warning("kafka_* metrics left out: reading them took over %ss", READ_TIMEOUT_S)
                return []
            except Exception as exc:  # the store closing, the executor shut down
                self._reading = None
                log.warning("kafka_* metrics left out: %s", exc)
                return []
            self._reading = None
            self._cached, self._fresh_until = families, self._clock() + self._cache_s
            return families

    def read(self) -> list[Metric]:
        """Read every family from the store now (blocking: on the I/O executor)."""
        started = time.perf_counter()
        families = _empty_families()
        self._add_brokers(families, self._brokers())
        topics = TopicsView(self._store, self._namespace, leader_of=self._leader_of)
        for topic in topics.topics():
            _add_topic(families, topic)
        # A new GroupsView each read: it keeps the high watermarks it has looked up.
        groups = GroupsView(self._store, self._namespace)
        for group_id in groups.group_ids():
            try:
                record, offsets = groups.record(group_id), groups.offsets(group_id)
            except CorruptState as exc:
                log.warning("consumer group %r left out of the metrics: %s", group_id, exc)
                continue
            g = families["kafka_consumergroup_members"]
            g.add_metric([group_id], len(record.members) if record is not None else 0)
            _add_offsets(families, group_id, offsets)
        took = GaugeMetricFamily(READ_SECONDS, _READ_SECONDS_HELP, time.perf_counter() - started)
        return [*families.values(), took]

    @staticmethod
    def _add_brokers(families: dict[str, GaugeMetricFamily], brokers: list[BrokerInfo]) -> None:
        families["kafka_brokers"].add_metric([], len(brokers))
        for b in brokers:
            families["kafka_broker_info"].add_metric([str(b.node_id), b.address], 1)


def _empty_families() -> dict[str, GaugeMetricFamily]:
    return {
        name: GaugeMetricFamily(name, doc, labels=list(labels))
        for name, (doc, labels) in FAMILIES.items()
    }


def _add_topic(families: dict[str, GaugeMetricFamily], topic: TopicView) -> None:
    """One topic as kafka_exporter reports it from Metadata and ListOffsets. Metadata
    names the leading gateway as a partition's only replica (the store keeps the
    copies), so a partition with a leader has one replica, in sync, the preferred one;
    one moving between gateways (--cluster) has no leader and no replica, as Kafka's
    Metadata tells it then (and kafka_exporter leaves its leader out)."""
    families["kafka_topic_partitions"].add_metric([topic.name], partition_count(topic.properties))
    for p in topic.partitions:
        labels = [topic.name, str(p.partition)]
        families["kafka_topic_partition_current_offset"].add_metric(labels, p.next_offset)
        families["kafka_topic_partition_oldest_offset"].add_metric(labels, p.earliest_offset)
        led = p.leader is not None
        if led:
            families["kafka_topic_partition_leader"].add_metric(labels, p.leader)
        families["kafka_topic_partition_replicas"].add_metric(labels, int(led))
        families["kafka_topic_partition_in_sync_replica"].add_metric(labels, int(led))
        families["kafka_topic_partition_leader_is_preferred"].add_metric(labels, int(led))
        families["kafka_topic_partition_under_replicated_partition"].add_metric(labels, 0)


def _add_offsets(
    families: dict[str, GaugeMetricFamily], group_id: str, rows: Iterable[OffsetRow]
) -> None:
    """A group's committed offsets and lag per partition, and their sums per topic. As
    kafka_exporter: a committed offset of -1 has lag -1 (left out of the sum), and a
    partition whose high watermark is unknown (here: an offset committed to a topic since
    deleted or recreated) has no lag."""
    sums: dict[str, list[int]] = {}  # topic -> [offset sum, lag sum]
    for row in rows:
        labels = [group_id, row.topic, str(row.partition)]
        offset = row.committed.offset
        total = sums.setdefault(row.topic, [0, 0])
        total[0] += offset
        families["kafka_consumergroup_current_offset"].add_metric(labels, offset)
        if row.lag is None:
            continue
        lag = -1 if offset < 0 else row.lag
        if lag >= 0:
            total[1] += lag
        families["kafka_consumergroup_lag"].add_metric(labels, lag)
    for topic, (offset_sum, lag_sum) in sums.items():
        families["kafka_consumergroup_current_offset_sum"].add_metric([group_id, topic], offset_sum)
        families["kafka_consumergroup_lag_sum"].add_metric([group_id, topic], lag_sum)


def register(services: Services) -> KafkaExporterCollector:
    """kafka-exporter's families on the gateway's registry, for its Kafka namespace."""
    broker, cluster = services.broker, services.cluster

    def brokers() -> list[BrokerInfo]:
        if cluster is None:
            address = f"{broker.advertised_host}:{broker.advertised_port}"
            return [BrokerInfo(broker.config.node_id, address)]
        return [BrokerInfo(n.node_id, f"{n.host}:{n.port}") for n in cluster.nodes()]

    def leader_of(partition: TopicId) -> int | None:
        if cluster is None:
            return broker.config.node_id
        node = cluster.leader(partition)
        return None if node is None else node.node_id

    collector = KafkaExporterCollector(
        services.store, services.namespace, services.executor, brokers, leader_of
    )
    services.registry.register(collector)
    return collector
