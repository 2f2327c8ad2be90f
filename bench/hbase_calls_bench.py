"""HBase calls per produced batch, per commit, per fetch and per idle second (issue 36).

    .venv/bin/python bench/hbase_calls_bench.py [--records 2000] [--commits 100] [--idle-s 10]

Starts the Thrift 1 stand-in (tests/hbase_standin.py: NOT HBase, tables in memory) in
this process, and `tmsgate serve --store hbase://127.0.0.1:PORT/<prefix>` as a
subprocess on it. The stand-in counts every Thrift call it serves by method name; each
phase reads the counts before and after, so a figure is "Thrift calls the gateway made
for this much Kafka work". They are call counts, not HBase timings: what one call costs
is HBase's business (docs/deploy.md turns them into a paper model).

Phases, 1 KiB values, one partition, a fresh topic each (created before counting):

  produce   --records records in batches of 1, 10 and 100 (confluent-kafka, acks=all:
            `batch` records queued, then flush(), so each Produce carries exactly one
            batch of that size); one batch first, uncounted, so the topic is warm.
  txn       --commits transactions of 10 records (confluent-kafka transactional
            producer); InitProducerId and one warm-up transaction are not counted, so
            this is the steady state: AddPartitionsToTxn, Produce, EndTxn, markers.
  fetch     each produce topic read from offset 0 to its end with raw Fetch v11
            requests (partition_max_bytes 1 MiB, so ~1000 records per request): by the
            gateway that produced it (batches of 16 KiB and more come from its batch
            cache), then after a restart (every fetch reads the store), twice.
  load      after that restart, one ListOffsets per topic first: the calls of loading a
            partition (next offset, producer state) the first time a gateway uses it.
  idle      calls per second of an idle gateway (lease ticks, janitor), alone and as
            2 and 3 gateways with `--cluster --node-id N` on one stand-in.
  cluster   gateways with their HTTP listeners (bench/cluster_gateways.py), each setup
            on a fresh prefix of the same stand-in: one without `--cluster`, one with
            `--cluster` alone, three with `--cluster`. Idle first (Thrift calls/s, and
            the cluster calls/s of the non-controllers' 100 ms views of the transaction
            manager), then per transaction:
            kafka  --commits 10-record transactions of one confluent-kafka
                   transactional producer, round-robin over 6 partitions of a
                   12-partition topic, 2 led by each gateway;
            tms    --commits TMS transactions over HTTP, started and committed through a
                   gateway that is not the controller (where there is one), 10 messages
                   published on the topic's leader: that same gateway, or the third one.
            Each figure is given as counted and net of the idle rate (x the phase's
            seconds); Thrift calls also per gateway (by the client port of each Thrift
            connection), cluster calls from each gateway's /metrics.

Calls in a phase include whatever the gateway does in the background meanwhile (the
idle rate times the phase's duration, both printed). Progress and a table go to stderr,
one JSON summary to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import confluent_kafka
import httpx
from cluster_gateways import (
    AttributedStandin,
    ClusterGateway,
    bootstrap_of,
    cluster_calls_answered,
    cluster_gateways,
    controller_of,
    leaders_of,
    spread_partitions,
)

# The gateway and logging helpers of the clients benchmark (this folder).
from kafka_clients_bench import (
    ck_common,
    create_topic,
    log,
    self_started_gateway,
    setup_logging,
)

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the stand-in and the raw Kafka client live there
import kafka_requests as kr  # noqa: E402
from gateway_harness import RawClient  # noqa: E402

VALUE_BYTES = 1024
BATCH_SIZES = (1, 10, 100)
TXN_RECORDS = 10
FETCH_MAX_BYTES = 1 << 20
FETCH_VERSION = 11
LIST_OFFSETS_VERSION = 1
SETTLE_S = 3.0  # after a gateway starts: its first lease and metadata calls are not idle


class CallCounter:
    """Snapshots of the stand-in's per-method call counts."""

    def __init__(self, server: AttributedStandin) -> None:
        self.server = server

    def snapshot(self) -> Counter[str]:
        # The stand-in's connection threads add to the counter meanwhile; a method counted
        # for the first time during the copy changes the dict's size: copy again.
        for _ in range(100):
            try:
                return Counter(dict(self.server.hbase.calls))
            except RuntimeError:
                continue
        raise RuntimeError("could not copy the stand-in's call counts")

    @contextlib.contextmanager
    def phase(self, result: dict[str, object]) -> Iterator[None]:
        """Fills ``result`` with the calls made (by method, and in all) and the seconds."""
        before, t0 = self.snapshot(), time.monotonic()
        yield
        seconds = time.monotonic() - t0
        delta = self.snapshot() - before
        result["seconds"] = round(seconds, 2)
        result["calls"] = dict(sorted(delta.items()))
        result["total_calls"] = sum(delta.values())


def number(result: dict[str, object], key: str) -> float:
    value = result[key]
    assert isinstance(value, int | float)
    return value


def per(result: dict[str, object], unit: str, n: int) -> None:
    """Adds calls per ``unit`` (in all and by method) to a phase's result."""
    calls = result["calls"]
    assert isinstance(calls, dict)
    result[unit] = n
    result[f"calls_per_{unit}"] = round(number(result, "total_calls") / n, 3)
    result[f"by_method_per_{unit}"] = {m: round(c / n, 3) for m, c in calls.items()}


@contextlib.contextmanager
def gateway(report: dict[str, object], store: str, extra: Sequence[str] = ()) -> Iterator[str]:
    """`tmsgate serve` on ``store`` (its --store overrides the helper's LevelDB one)."""
    args = ["--store", store, *extra]
    with self_started_gateway(report, prefix="tmsgate-hbase-calls-", extra_args=args) as boot:
        yield boot


def value() -> bytes:
    return b"x" * VALUE_BYTES


# --------------------------------------------------------------------------- phases


def produce_phase(
    counter: CallCounter, bootstrap: str, batch: int, records: int
) -> tuple[str, int, dict[str, object]]:
    """Produces ``records`` in Produce requests of one ``batch``-record batch each."""
    topic = create_topic(bootstrap, f"calls-b{batch}")
    producer = confluent_kafka.Producer(
        {**ck_common(bootstrap), "acks": "all", "linger.ms": 1000, "batch.num.messages": 10_000}
    )
    failures: list[str] = []

    def delivered(err: confluent_kafka.KafkaError | None, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    def one_batch() -> None:
        for _ in range(batch):
            producer.produce(topic, value(), on_delivery=delivered)
        if producer.flush(30) != 0:
            raise RuntimeError("produce: flush timed out")

    one_batch()  # warm: the topic's first write is not steady state
    batches = max(1, records // batch)
    result: dict[str, object] = {"batch_records": batch}
    with counter.phase(result):
        for _ in range(batches):
            one_batch()
    if failures:
        raise RuntimeError(f"produce: {len(failures)} failed deliveries: {failures[:3]}")
    per(result, "batch", batches)
    result["calls_per_record"] = round(number(result, "total_calls") / (batches * batch), 3)
    return topic, batch + batches * batch, result


def txn_phase(counter: CallCounter, bootstrap: str, commits: int) -> dict[str, object]:
    topic = create_topic(bootstrap, "calls-txn")
    producer = confluent_kafka.Producer(
        {
            **ck_common(bootstrap),
            "transactional.id": f"calls-bench-{uuid.uuid4().hex[:8]}",
            "linger.ms": 1000,
        }
    )
    producer.init_transactions(30)

    def one_txn() -> None:
        producer.begin_transaction()
        for _ in range(TXN_RECORDS):
            producer.produce(topic, value())
        producer.commit_transaction(30)

    one_txn()  # warm: the first AddPartitionsToTxn of a producer and topic
    result: dict[str, object] = {"records_per_txn": TXN_RECORDS}
    with counter.phase(result):
        for _ in range(commits):
            one_txn()
    per(result, "commit", commits)
    return result


def raw_client(bootstrap: str) -> RawClient:
    host, _, port = bootstrap.partition(":")
    return RawClient((host, int(port)), client_id="calls-bench-fetch")


def open_phase(counter: CallCounter, bootstrap: str, topic: str) -> dict[str, object]:
    """One ListOffsets(latest) on a restarted gateway: the calls of loading a partition
    (its next offset, producer state, open transactions) the first time it is used."""
    client = raw_client(bootstrap)
    result: dict[str, object] = {"topic": topic}
    try:
        with counter.phase(result):
            got = kr.partition(client.request(kr.list_offsets(topic, -1), LIST_OFFSETS_VERSION))
    finally:
        client.close()
    if got.error_code != 0:
        raise RuntimeError(f"list offsets {topic}: error {got.error_code}")
    per(result, "partition", 1)
    return result


def fetch_phase(counter: CallCounter, bootstrap: str, topic: str, end: int) -> dict[str, object]:
    """Reads ``topic`` from 0 to ``end`` with raw Fetch requests; counts them."""
    client = raw_client(bootstrap)
    requests = 0
    offset = 0
    result: dict[str, object] = {"topic": topic, "records": end}
    try:
        with counter.phase(result):
            while offset < end:
                request = kr.fetch(topic, offset, max_bytes=FETCH_MAX_BYTES)
                got = kr.partition(client.request(request, FETCH_VERSION))
                requests += 1
                if got.error_code != 0:
                    raise RuntimeError(f"fetch {topic}@{offset}: error {got.error_code}")
                batches = kr.records_of(got.records)
                if not batches:
                    raise RuntimeError(f"fetch {topic}@{offset}: no records before {end}")
                offset = batches[-1][0]
    finally:
        client.close()
    per(result, "fetch", requests)
    result["calls_per_record"] = round(number(result, "total_calls") / end, 4)
    return result


def idle_phase(counter: CallCounter, seconds: float) -> dict[str, object]:
    time.sleep(SETTLE_S)
    result: dict[str, object] = {}
    with counter.phase(result):
        time.sleep(seconds)
    secs = number(result, "seconds")
    calls = result["calls"]
    assert isinstance(calls, dict)
    result["calls_per_second"] = round(number(result, "total_calls") / secs, 2)
    result["by_method_per_second"] = {m: round(c / secs, 2) for m, c in calls.items()}
    return result


def cluster_idle(counter: CallCounter, store: str, nodes: int, seconds: float) -> dict[str, object]:
    with contextlib.ExitStack() as stack:
        for node in range(nodes):
            extra = ("--cluster", "--node-id", str(node))
            stack.enter_context(gateway({}, store, extra))
        result = idle_phase(counter, seconds)
    result["gateways"] = nodes
    result["calls_per_second_per_gateway"] = round(number(result, "calls_per_second") / nodes, 2)
    return result


# --------------------------------------------------------------------------- cluster

CLUSTER_NODES = 3
CLUSTER_PARTITIONS = 6


class ClusterCounter:
    """Thrift calls (in all, by method, by gateway) and cluster calls over a phase of a
    cluster, and the same net of its idle rates."""

    def __init__(self, counter: CallCounter, gws: list[ClusterGateway]) -> None:
        self.counter = counter
        self.gws = gws
        self.idle: dict[str, object] | None = None

    def name_roles(self, controller: ClusterGateway, client_side: ClusterGateway) -> None:
        def role(gw: ClusterGateway) -> str:
            if gw is controller:
                return f"gateway {gw.node_id} (controller)"
            if gw is client_side:
                return f"gateway {gw.node_id} (HTTP client's)"
            return f"gateway {gw.node_id}"

        server = self.counter.server
        server.name_processes({gw.proc.pid: role(gw) for gw in self.gws})

    @contextlib.contextmanager
    def phase(self, result: dict[str, object]) -> Iterator[None]:
        """Reading /metrics takes a while (and the first time much longer): the cluster
        calls are read outside the Thrift calls' window, and get their own seconds."""
        server = self.counter.server
        cluster_calls = cluster_calls_answered(self.gws)
        t0 = time.monotonic()
        per_port = server.per_port()
        with self.counter.phase(result):
            yield
        result["calls_by_gateway"] = server.by_gateway(per_port, server.per_port())
        result["cluster_calls_seconds"] = round(time.monotonic() - t0, 2)
        result["cluster_calls"] = cluster_calls_answered(self.gws) - cluster_calls

    def per(self, result: dict[str, object], unit: str, n: int) -> None:
        per(result, unit, n)
        result[f"cluster_calls_per_{unit}"] = round(number(result, "cluster_calls") / n, 2)
        by_gateway = result["calls_by_gateway"]
        assert isinstance(by_gateway, dict)
        result[f"by_gateway_per_{unit}"] = {g: round(c / n, 2) for g, c in by_gateway.items()}
        if self.idle is None:
            return
        # Net of what the cluster does meanwhile anyway (lease ticks, the views' refresh).
        thrift_idle = number(self.idle, "calls_per_second") * number(result, "seconds")
        cluster_secs = number(result, "cluster_calls_seconds")
        cluster_idle = number(self.idle, "cluster_calls_per_second") * cluster_secs
        result[f"net_calls_per_{unit}"] = round(
            (number(result, "total_calls") - thrift_idle) / n, 2
        )
        result[f"net_cluster_calls_per_{unit}"] = round(
            (number(result, "cluster_calls") - cluster_idle) / n, 2
        )


def cluster_idle_phase(cc: ClusterCounter, seconds: float) -> dict[str, object]:
    time.sleep(SETTLE_S)
    result: dict[str, object] = {"gateways": len(cc.gws)}
    with cc.phase(result):
        time.sleep(seconds)
    secs = number(result, "seconds")
    calls = result["calls"]
    assert isinstance(calls, dict)
    result["calls_per_second"] = round(number(result, "total_calls") / secs, 2)
    result["by_method_per_second"] = {m: round(c / secs, 2) for m, c in calls.items()}
    cluster_secs = number(result, "cluster_calls_seconds")
    result["cluster_calls_per_second"] = round(number(result, "cluster_calls") / cluster_secs, 2)
    cc.idle = result
    return result


def cluster_kafka_txn_phase(
    cc: ClusterCounter, topic: str, partitions: list[int], commits: int
) -> dict[str, object]:
    producer = confluent_kafka.Producer(
        {
            **ck_common(bootstrap_of(cc.gws)),
            "transactional.id": f"calls-bench-cluster-{uuid.uuid4().hex[:8]}",
            "linger.ms": 1000,
        }
    )
    producer.init_transactions(30)

    def one_txn() -> None:
        producer.begin_transaction()
        for i in range(TXN_RECORDS):
            producer.produce(topic, value(), partition=partitions[i % len(partitions)])
        producer.commit_transaction(30)

    one_txn()  # warm: AddPartitionsToTxn's first time for this producer and topic
    result: dict[str, object] = {
        "records_per_txn": TXN_RECORDS,
        "partitions_per_txn": len(partitions),
    }
    with cc.phase(result):
        for _ in range(commits):
            one_txn()
    cc.per(result, "commit", commits)
    return result


def tms_topics(gw: ClusterGateway, count: int) -> list[str]:
    names = [f"calls-tms-{i}-{uuid.uuid4().hex[:6]}" for i in range(count)]
    for name in names:
        got = httpx.put(f"{gw.http_url}/v1/namespaces/default/topics/{name}", timeout=30)
        got.raise_for_status()
    return names


def tms_leader(gws: list[ClusterGateway], topic: str) -> ClusterGateway:
    """The gateway that accepts a publish to ``topic`` now (a 421 elsewhere names it)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for gw in gws:
            url = f"{gw.http_url}/v1/namespaces/default/topics/{topic}/publish"
            got = httpx.post(url, json={"messages": ["warm"]}, timeout=30)
            if got.status_code == 200:
                return gw
        time.sleep(0.5)
    raise RuntimeError(f"no gateway accepts a publish to {topic}")


def cluster_tms_phase(
    cc: ClusterCounter, client_side: ClusterGateway, leader: ClusterGateway, topic: str, n: int
) -> dict[str, object]:
    """Start and commit through ``client_side``, publish 10 messages on ``leader``."""
    http = httpx.Client(timeout=30)
    publish = f"{leader.http_url}/v1/namespaces/default/topics/{topic}/publish"
    messages = ["x" * VALUE_BYTES] * TXN_RECORDS

    def one_txn() -> None:
        started = http.post(f"{client_side.http_url}/v1/transactions", json={})
        started.raise_for_status()
        wp = started.json()["writePointer"]  # above 2^53: Python's json keeps it exact
        http.post(
            publish, json={"transactionWritePointer": wp, "messages": messages}
        ).raise_for_status()
        ended = http.post(f"{client_side.http_url}/v1/transactions/{wp}/commit")
        ended.raise_for_status()

    try:
        one_txn()
        result: dict[str, object] = {
            "messages_per_txn": TXN_RECORDS,
            "through": f"gateway {client_side.node_id}",
            "publish_on": f"gateway {leader.node_id}",
        }
        with cc.phase(result):
            for _ in range(n):
                one_txn()
    finally:
        http.close()
    cc.per(result, "transaction", n)
    return result


def cluster_phases(
    counter: CallCounter, store: str, nodes: int, commits: int, idle_s: float, cluster: bool
) -> dict[str, object]:
    """The cluster phases with ``nodes`` gateways (1: one gateway alone, with or without
    `--cluster`: the same work without calls between gateways)."""
    out: dict[str, object] = {
        "gateways": nodes,
        "cluster_mode": cluster,
        "partitions": CLUSTER_PARTITIONS,
    }
    with cluster_gateways(store, nodes, cluster=cluster) as gws:
        cc = ClusterCounter(counter, gws)
        topic, partitions = spread_partitions(gws, "calls-ctxn", CLUSTER_PARTITIONS)
        leaders = leaders_of(gws, topic)
        out["leaders"] = {p: leaders[p] for p in partitions}
        controller = controller_of(gws)
        others = [gw for gw in gws if gw is not controller]
        client_side = others[0] if others else controller
        cc.name_roles(controller, client_side)
        cluster_calls_answered(gws)  # the first /metrics takes seconds: not in a phase
        out["controller"] = controller.node_id
        tms = tms_topics(client_side, 10)  # one at least led by each gateway, most likely
        led = {name: tms_leader(gws, name) for name in tms}
        out["idle"] = result = cluster_idle_phase(cc, idle_s)
        log(
            f"{nodes} gateway(s) idle: {result['calls_per_second']} Thrift calls/s, "
            f"{result['cluster_calls_per_second']} cluster calls/s"
        )
        out["kafka_txn"] = result = cluster_kafka_txn_phase(cc, topic, partitions, commits)
        log(
            f"{nodes} gateway(s) kafka txn: {result['net_calls_per_commit']} Thrift "
            f"calls/commit, {result['net_cluster_calls_per_commit']} cluster calls/commit "
            "(net of idle)"
        )
        rows = []
        for leader in [client_side, *others[1:]]:
            name = next((t for t, gw in led.items() if gw is leader), None)
            if name is None:
                log(f"no TMS topic led by gateway {leader.node_id}; skipped")
                continue
            result = cluster_tms_phase(cc, client_side, leader, name, commits)
            log(
                f"{nodes} gateway(s) TMS txn via {client_side.node_id}, publish on "
                f"{leader.node_id}: {result['net_calls_per_transaction']} Thrift calls, "
                f"{result['net_cluster_calls_per_transaction']} cluster calls (net of idle)"
            )
            rows.append(result)
        out["tms_txn"] = rows
    return out


# --------------------------------------------------------------------------- report


def table(report: dict[str, object]) -> list[str]:
    def methods(by: object) -> str:
        assert isinstance(by, dict)
        return ", ".join(f"{m} {v:g}" for m, v in sorted(by.items(), key=lambda kv: -kv[1]))

    lines = [f"{'phase':<44} {'calls/unit':>10}  unit       by method"]
    units = (("produce", "batch"), ("txn", "commit"), ("partition_load", "partition"))
    for key, unit in (*units, ("fetch", "fetch")):
        rows = report.get(key, [])
        assert isinstance(rows, list)
        for row in rows:
            label = {
                "produce": f"produce b={row.get('batch_records')}",
                "txn": f"txn {TXN_RECORDS} recs/commit",
                "partition_load": f"load b={row.get('batch_records')}",
                "fetch": f"fetch b={row.get('batch_records')} {row.get('source')}",
            }[key]
            lines.append(
                f"{label:<44} {row[f'calls_per_{unit}']:>10g}  {unit:<9}  "
                f"{methods(row[f'by_method_per_{unit}'])}"
            )
    idle = report.get("idle", [])
    assert isinstance(idle, list)
    for row in idle:
        label = f"idle {row.get('gateways', 1)} gateway(s)"
        lines.append(
            f"{label:<44} {row['calls_per_second']:>10g}  second     "
            f"{methods(row['by_method_per_second'])}"
        )
    clusters = report["cluster"]
    assert isinstance(clusters, list)
    for cluster in clusters:
        lines += cluster_table(cluster, methods)
    return lines


def cluster_table(cluster: dict[str, Any], methods: Callable[[object], str]) -> list[str]:
    n = cluster["gateways"]
    mode = "--cluster" if cluster["cluster_mode"] else "no --cluster"
    row = cluster["idle"]
    lines = [
        f"{f'idle, {n} gateway(s) {mode} with HTTP':<44} {row['calls_per_second']:>10g}  "
        f"second     {row['cluster_calls_per_second']:g} cluster calls/s; "
        f"{methods(row['by_method_per_second'])}"
    ]
    rows = [(f"{n} gw {mode}: kafka txn, 10 recs/6 partitions", cluster["kafka_txn"], "commit")]
    rows += [
        (
            f"{n} gw {mode}: TMS txn via {r['through'][8:]}, publish on {r['publish_on'][8:]}",
            r,
            "transaction",
        )
        for r in cluster["tms_txn"]
    ]
    for label, r, unit in rows:
        lines.append(
            f"{label:<44} {r[f'net_calls_per_{unit}']:>10g}  {unit:<9}  "
            f"net of idle ({r[f'calls_per_{unit}']:g} counted); "
            f"{r[f'net_cluster_calls_per_{unit}']:g} cluster calls "
            f"({r[f'cluster_calls_per_{unit}']:g} counted); "
            f"by gateway {r[f'by_gateway_per_{unit}']}; {methods(r[f'by_method_per_{unit}'])}"
        )
    return lines


def one_gateway_phases(
    counter: CallCounter, store: str, args: argparse.Namespace
) -> dict[str, object]:
    produced: list[dict[str, object]] = []
    txns: list[dict[str, object]] = []
    fetches: list[dict[str, object]] = []
    idles: list[dict[str, object]] = []
    opens: list[dict[str, object]] = []
    first_gateway: dict[str, object] = {}
    written: list[tuple[str, int, int]] = []  # (topic, records, batch size)
    with gateway(first_gateway, store) as bootstrap:
        for batch in BATCH_SIZES:
            topic, end, result = produce_phase(counter, bootstrap, batch, args.records)
            log(f"produce b={batch}: {result['calls_per_batch']} calls/batch")
            produced.append(result)
            written.append((topic, end, batch))
            # Read back by the gateway that produced it: from its batch cache where the
            # batches were big enough to be kept (gateway/kafka/batch_cache.py).
            result = fetch_phase(counter, bootstrap, topic, end)
            result.update(source="producing gateway", batch_records=batch)
            log(f"fetch producing gateway b={batch}: {result['calls_per_fetch']} calls/fetch")
            fetches.append(result)
        result = txn_phase(counter, bootstrap, args.commits)
        log(f"txn: {result['calls_per_commit']} calls/commit")
        txns.append(result)
        result = idle_phase(counter, args.idle_s)
        result["gateways"] = 1
        log(f"idle: {result['calls_per_second']} calls/s")
        idles.append(result)
    # A restarted gateway: nothing in its batch cache, every fetch reads the store.
    with gateway({}, store) as bootstrap:
        time.sleep(SETTLE_S)
        for topic, _end, batch in written:
            result = open_phase(counter, bootstrap, topic)
            result["batch_records"] = batch
            log(f"partition load b={batch}: {result['calls_per_partition']} calls")
            opens.append(result)
        for source in ("restarted gateway", "restarted gateway, again"):
            for topic, end, batch in written:
                result = fetch_phase(counter, bootstrap, topic, end)
                result.update(source=source, batch_records=batch)
                log(f"fetch {source} b={batch}: {result['calls_per_fetch']} calls/fetch")
                fetches.append(result)
    for nodes in (2, 3):
        result = cluster_idle(counter, store, nodes, args.idle_s)
        log(f"idle cluster of {nodes}: {result['calls_per_second']} calls/s")
        idles.append(result)
    return {
        "produce": produced,
        "txn": txns,
        "fetch": fetches,
        "partition_load": opens,
        "idle": idles,
        "gateway_log_tail": first_gateway.get("log_tail"),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--records", type=int, default=2000, help="records per produce phase")
    parser.add_argument("--commits", type=int, default=100, help="transactions to commit")
    parser.add_argument("--idle-s", type=float, default=10.0, help="seconds of each idle phase")
    parser.add_argument(
        "--cluster-only", action="store_true", help="only the 3-gateway transaction phases"
    )
    args = parser.parse_args(argv)
    warnings = setup_logging()
    report: dict[str, object] = {
        "standin": "tests/hbase_standin.py (not HBase)",
        "records": args.records,
        "commits": args.commits,
        "idle_s": args.idle_s,
    }
    # Up to 3 gateways (the cluster phases) of pool_size 8 each on one Thrift server:
    # given the worker threads an operator gives HBase for them (docs/hbase.md), as the
    # stand-in, like HBase, serves 16 connections at once by default.
    with AttributedStandin(min_worker_threads=64) as server:
        counter = CallCounter(server)
        store = f"hbase://{server.address}/calls{uuid.uuid4().hex[:6]}"
        log(f"stand-in (not HBase) on {server.address}; store {store}")
        if not args.cluster_only:
            report.update(one_gateway_phases(counter, store, args))
        # Fresh prefixes: the gateways before left leases that would run out meanwhile.
        report["cluster"] = [
            cluster_phases(
                counter,
                f"hbase://{server.address}/cluster{nodes}x{uuid.uuid4().hex[:6]}",
                nodes,
                args.commits,
                args.idle_s,
                cluster,
            )
            for nodes, cluster in ((1, False), (1, True), (CLUSTER_NODES, True))
        ]
    report["warnings"] = dict(warnings.counts)
    for line in table(report):
        log(line)
    print(json.dumps(report, separators=(",", ":")))


if __name__ == "__main__":
    main()
