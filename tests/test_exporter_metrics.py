"""kafka-exporter's metrics on the gateway's /metrics (gateway/exporter_metrics.py), the
process metrics, and the Grafana dashboard and Prometheus set-up in docker/.

A real `tmsgate serve --metrics-listen` takes a 3-partition topic from kafka-python,
consumer groups commit offsets, and /metrics is scraped over HTTP and parsed with
prometheus_client's parser: offsets and lags must be exact per partition, with
kafka_exporter's names, help texts, types and label order. Every metric the dashboard
queries must be one that gateway exports; its PromQL is parsed with promql-parser.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml
from gateway_harness import GatewayProcess, free_port, gateway_thread
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.structs import OffsetAndMetadata
from prometheus_client.parser import text_string_to_metric_families
from tmsgate.gateway.exporter_metrics import CACHE_S, FAMILIES, KafkaExporterCollector

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "docker"
DASHBOARD = DOCKER / "grafana" / "dashboards" / "tmsgate.json"
DATASOURCES = DOCKER / "grafana" / "provisioning" / "datasources" / "prometheus.yml"
PROVIDERS = DOCKER / "grafana" / "provisioning" / "dashboards" / "tmsgate.yml"
COMPOSE = {"leveldb": DOCKER / "compose.leveldb.yml", "hbase": DOCKER / "compose.hbase.yml"}
# Series Prometheus makes itself for every target; a dashboard may use them.
PROMETHEUS_SERIES = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("_sum", "_count", "_created"),
    "gauge": ("",),
    "info": ("_info",),
}

Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


def scrape(url: str) -> tuple[dict[str, Any], Samples]:
    with urllib.request.urlopen(url, timeout=30) as answer:
        text = answer.read().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples: Samples = {}
    for family in families.values():
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(s.labels.items())] = s.value
    return families, samples


def by(samples: Samples, name: str, *labels: str) -> dict[tuple[str, ...], float]:
    """{label values in ``labels`` order: value} of one series name."""
    return {tuple(dict(k)[n] for n in labels): v for k, v in samples.get(name, {}).items()}


def exported_names(families: dict[str, Any]) -> set[str]:
    """Every series name the exposition declares (a family with no sample yet too)."""
    return {f.name + suffix for f in families.values() for suffix in SUFFIXES[f.type]}


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[tuple[GatewayProcess, str]]:
    metrics_port = free_port()
    gw = GatewayProcess(tmp_path / "store", None, "--metrics-listen", f"127.0.0.1:{metrics_port}")
    gw.start()
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    try:
        deadline = time.monotonic() + 20  # /metrics is served last
        while True:
            try:
                urllib.request.urlopen(url, timeout=5).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "/metrics never answered"
                time.sleep(0.05)
        yield gw, url
    finally:
        gw.kill()


def test_kafka_exporter_metrics_are_exact_per_partition(
    gateway: tuple[GatewayProcess, str],
) -> None:
    gw, url = gateway
    admin = KafkaAdminClient(bootstrap_servers=gw.bootstrap)
    admin.create_topics([NewTopic("orders", 3, 1), NewTopic("gone", 1, 1)])
    producer = KafkaProducer(bootstrap_servers=gw.bootstrap)
    for partition, count in ((0, 5), (1, 3)):  # partition 2 stays empty
        for i in range(count):
            producer.send("orders", b"v%d" % i, partition=partition)
    producer.send("gone", b"x", partition=0)
    producer.send("gone", b"y", partition=0)
    producer.flush()
    producer.close()
    admin.delete_records({TopicPartition("orders", 0): 1})  # the oldest offset moves to 1

    # A member of "readers" (subscribed: its group record names it) commits 2 and 3.
    readers = KafkaConsumer(
        bootstrap_servers=gw.bootstrap, group_id="readers", enable_auto_commit=False
    )
    readers.subscribe(["orders"])
    deadline = time.monotonic() + 30
    while len(readers.assignment()) < 3:
        assert time.monotonic() < deadline, "the consumer was never assigned the partitions"
        readers.poll(timeout_ms=100)
    # Acknowledged once fsynced, after the group record the rebalance queued before it.
    readers.commit({TopicPartition("orders", 0): OffsetAndMetadata(2, "", -1)})
    readers.commit({TopicPartition("orders", 1): OffsetAndMetadata(3, "", -1)})
    # "auditors" has no member: offsets committed outside group management, one of them
    # to a topic deleted afterwards (stale: an offset, no lag).
    auditors = KafkaConsumer(
        bootstrap_servers=gw.bootstrap, group_id="auditors", enable_auto_commit=False
    )
    auditors.commit(
        {
            TopicPartition("orders", 0): OffsetAndMetadata(5, "", -1),
            TopicPartition("gone", 0): OffsetAndMetadata(1, "", -1),
        }
    )
    auditors.close()
    admin.delete_topics(["gone"])
    admin.close()

    try:
        families, samples = scrape(url)
    finally:
        readers.close()

    # kafka_exporter's help texts, types and labels (the text format sorts label names,
    # in prometheus_client as in Go's client, so the order is not seen here)
    for name, (doc, labels) in FAMILIES.items():
        assert (families[name].type, families[name].documentation) == ("gauge", doc), name
        for key in samples.get(name, {}):
            assert {k for k, _ in key} == set(labels), name

    tp = ("topic", "partition")
    assert by(samples, "kafka_topic_partitions", "topic") == {("orders",): 3}
    assert by(samples, "kafka_topic_partition_current_offset", *tp) == {
        ("orders", "0"): 5,
        ("orders", "1"): 3,
        ("orders", "2"): 0,
    }
    assert by(samples, "kafka_topic_partition_oldest_offset", *tp) == {
        ("orders", "0"): 1,
        ("orders", "1"): 0,
        ("orders", "2"): 0,
    }
    every = {("orders", str(p)) for p in range(3)}
    assert by(samples, "kafka_topic_partition_leader", *tp) == dict.fromkeys(every, 0)
    assert by(samples, "kafka_topic_partition_replicas", *tp) == dict.fromkeys(every, 1)
    assert by(samples, "kafka_topic_partition_in_sync_replica", *tp) == dict.fromkeys(every, 1)
    assert by(samples, "kafka_topic_partition_leader_is_preferred", *tp) == dict.fromkeys(every, 1)
    assert by(samples, "kafka_topic_partition_under_replicated_partition", *tp) == dict.fromkeys(
        every, 0
    )
    assert by(samples, "kafka_brokers") == {(): 1}
    assert by(samples, "kafka_broker_info", "id", "address") == {("0", gw.bootstrap): 1}

    gtp = ("consumergroup", "topic", "partition")
    assert by(samples, "kafka_consumergroup_current_offset", *gtp) == {
        ("readers", "orders", "0"): 2,
        ("readers", "orders", "1"): 3,
        ("auditors", "orders", "0"): 5,
        ("auditors", "gone", "0"): 1,
    }
    assert by(samples, "kafka_consumergroup_lag", *gtp) == {
        ("readers", "orders", "0"): 3,
        ("readers", "orders", "1"): 0,
        ("auditors", "orders", "0"): 0,
    }
    assert by(samples, "kafka_consumergroup_current_offset_sum", "consumergroup", "topic") == {
        ("readers", "orders"): 5,
        ("auditors", "orders"): 5,
        ("auditors", "gone"): 1,
    }
    assert by(samples, "kafka_consumergroup_lag_sum", "consumergroup", "topic") == {
        ("readers", "orders"): 3,
        ("auditors", "orders"): 0,
        ("auditors", "gone"): 0,
    }
    assert by(samples, "kafka_consumergroup_members", "consumergroup") == {
        ("readers",): 1,
        ("auditors",): 0,
    }

    # prometheus_client's process metrics, on the gateway's own registry
    assert samples["process_cpu_seconds_total"][()] > 0
    assert samples["process_resident_memory_bytes"][()] > 0
    assert samples["process_open_fds"][()] > 0
    assert len(samples["python_info"]) == 1
    assert samples["python_gc_objects_collected_total"]
    # Kafka latency per API (and the HTTP listener's per route: declared, none served yet)
    apis = {dict(k)["api"] for k in samples["tmsgate_kafka_request_seconds_count"]}
    assert {"Produce", "OffsetCommit", "Metadata"} <= apis, apis
    assert families["tmsgate_http_request_seconds"].type == "histogram"

    # every series the dashboard queries is one this gateway exports
    missing = dashboard_metric_names() - exported_names(families) - PROMETHEUS_SERIES
    assert not missing, f"the dashboard queries series the gateway does not export: {missing}"


def test_scrapes_share_one_read_for_a_while(tmp_path: Path) -> None:
    """Within CACHE_S of a read, a scrape answers what that read found; after it, the
    store is read again. Once the gateway has stopped, a scrape leaves the families out
    instead of failing the whole /metrics answer."""
    now = [0.0]
    with gateway_thread(tmp_path) as gw:
        services = gw.services
        collector = KafkaExporterCollector(
            services.store,
            services.namespace,
            services.executor,
            brokers=lambda: [],
            leader_of=lambda partition: 0,
            clock=lambda: now[0],
        )

        def current_offsets() -> dict[str, float]:
            family = {f.name: f for f in collector.collect()}
            return {
                s.labels["partition"]: s.value
                for s in family["kafka_topic_partition_current_offset"].samples
            }

        producer = KafkaProducer(bootstrap_servers=gw.bootstrap)
        for _ in range(2):
            producer.send("cached", b"x")
        producer.flush()
        assert current_offsets() == {"0": 2}
        for _ in range(3):
            producer.send("cached", b"x")
        producer.flush()
        producer.close()
        now[0] += CACHE_S * 0.9
        assert current_offsets() == {"0": 2}  # the same read
        now[0] += CACHE_S * 0.2
        assert current_offsets() == {"0": 5}  # read again
    now[0] += CACHE_S * 2
    assert list(collector.collect()) == []  # the store is closed


# ---------------------------------------------------------------- docker/


def dashboard() -> dict[str, Any]:
    doc = json.loads(DASHBOARD.read_text())
    assert isinstance(doc, dict)
    return doc


def panels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for panel in doc["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))  # a collapsed row holds its panels
    return out


GRAFANA_VARIABLE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")
GRAFANA_INTERVALS = {"__rate_interval", "__interval", "__range"}


def promql(expr: str, variables: set[str]) -> Any:
    """Parse a Grafana query as PromQL: its variables replaced by what they could be."""

    def value(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        assert name in variables | GRAFANA_INTERVALS, f"{expr!r}: ${name} is not defined"
        return "5m" if name in GRAFANA_INTERVALS else ".*"

    return promql_parser.parse(GRAFANA_VARIABLE.sub(value, expr))


def selectors(expr: Any) -> set[str]:
    names: set[str] = set()

    def visit(node: Any) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            assert node.name, f"{node}: a selector without a metric name"
            names.add(node.name)
        return True

    promql_parser.walk(expr, visit)
    return names


def queries(doc: dict[str, Any]) -> list[str]:
    """The PromQL of every panel target, and of every label_values() variable."""
    out = [t["expr"] for p in panels(doc) for t in p.get("targets", [])]
    for var in doc["templating"]["list"]:
        m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", var["query"]["query"])
        assert m, var["query"]
        out.append(m.group(1))
    return out


def dashboard_metric_names() -> set[str]:
    doc = dashboard()
    variables = {v["name"] for v in doc["templating"]["list"]}
    return {name for q in queries(doc) for name in selectors(promql(q, variables))}


def test_dashboard_is_provisionable_and_its_queries_parse() -> None:
    doc = dashboard()
    (source,) = yaml.safe_load(DATASOURCES.read_text())["datasources"]
    reference = {"type": source["type"], "uid": source["uid"]}
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,40}", doc["uid"]) and doc["title"]
    assert isinstance(doc["schemaVersion"], int) and "id" not in doc  # Grafana assigns it
    all_panels = panels(doc)
    ids = [p["id"] for p in all_panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for p in all_panels:
        grid = p["gridPos"]
        assert {"h", "w", "x", "y"} <= set(grid) and grid["x"] + grid["w"] <= 24, p["title"]
        if p["type"] == "row":
            continue
        assert p["datasource"] == reference, p["title"]
        assert p["targets"], p["title"]
        ref_ids = [t["refId"] for t in p["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), p["title"]
        for t in p["targets"]:
            assert t["datasource"] == reference, p["title"]
    for var in doc["templating"]["list"]:
        assert var["datasource"] == reference, var["name"]
    names = dashboard_metric_names()
    # kafka-exporter's dashboards' series, and the gateway's own
    assert {
        "kafka_topic_partition_current_offset",
        "kafka_consumergroup_current_offset",
        "kafka_consumergroup_lag",
        "kafka_consumergroup_lag_sum",
        "tmsgate_kafka_request_seconds_bucket",
        "tmsgate_http_request_seconds_bucket",
        "tmsgate_cleaner_dirty_ratio",
        "tmsgate_kafka_transactions_open",
        "process_cpu_seconds_total",
    } <= names
    # and the parse does catch a mistake
    with pytest.raises(ValueError):
        promql("sum(rate(kafka_topic_partition_current_offset[5m])", set())
    with pytest.raises(AssertionError):
        promql('kafka_brokers{job="$nope"}', {"job"})


@pytest.mark.parametrize("name", sorted(COMPOSE))
def test_compose_monitoring_profile_scrapes_every_gateway(name: str) -> None:
    compose = yaml.safe_load(COMPOSE[name].read_text())
    services = compose["services"]
    prometheus, grafana = services["prometheus"], services["grafana"]
    # only with --profile monitoring: the default `up` starts what it did
    assert prometheus["profiles"] == grafana["profiles"] == ["monitoring"]
    # Prometheus scrapes each gateway's metrics listener
    mounts = dict(reversed(v.rsplit(":", 2)[:2]) for v in prometheus["volumes"] if v[0] == ".")
    config = yaml.safe_load((DOCKER / mounts["/etc/prometheus/prometheus.yml"]).read_text())
    (job,) = config["scrape_configs"]
    (targets,) = [c["targets"] for c in job["static_configs"]]
    gateways = {n: s for n, s in services.items() if n.startswith("gateway")}
    expected = set()
    for gateway_name, service in gateways.items():
        listen = service["environment"]["TMSGATE_METRICS_LISTEN"]
        assert listen.startswith("0.0.0.0:"), gateway_name  # reachable from prometheus
        expected.add(f"{gateway_name}:{listen.rsplit(':', 1)[1]}")
    assert set(targets) == expected
    # Grafana: anonymous viewers, the provisioning and dashboards folders mounted
    env = grafana["environment"]
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "true"
    assert env["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"
    mounts = dict(reversed(v.rsplit(":", 2)[:2]) for v in grafana["volumes"])
    assert (DOCKER / mounts["/etc/grafana/provisioning"]).samefile(DATASOURCES.parent.parent)
    (provider,) = yaml.safe_load(PROVIDERS.read_text())["providers"]
    dashboards_dir = DOCKER / mounts[provider["options"]["path"]]
    assert (dashboards_dir / DASHBOARD.name).samefile(DASHBOARD)
    home = Path(env["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"])
    assert mounts[str(home.parent)] and home.name == DASHBOARD.name
    # the data source's host and port are the prometheus service's
    (source,) = yaml.safe_load(DATASOURCES.read_text())["datasources"]
    assert any(p.endswith(":9090") for p in prometheus["ports"]) and "prometheus" in services
    assert source["url"].endswith("//prometheus:9090")
