"""Transactions on every gateway of a cluster (gateway/cluster_calls.py,
storage/shared_transactions.py): three gateways in this process on one memory:// store,
each with its Kafka and HTTP listeners, and real clients.

- A confluent-kafka transactional producer whose partitions are led by all three
  gateways commits and aborts; consume-transform-produce commits a group's offsets with
  its transactions (the group's coordinator may be another gateway than the
  transactions'); read_committed consumers see every committed record once, no aborted
  one, on every gateway.
- The controller (which runs the transaction manager and coordinates transactional ids)
  stops without handing its leases over: another takes over within the lease time, the
  open transaction is aborted and its producer fenced (as a Kafka coordinator does on a
  timeout), a new producer goes on, and write pointers keep increasing.

The same with processes killed with SIGKILL on the HBase stand-in is the history checker's
cluster mode (compat-tests/test_txn_history.py).
"""

from __future__ import annotations

import itertools
import json
import random
import time
from collections.abc import Iterator

import httpx
import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from gateway_harness import GatewayThread
from tmsgate.gateway.cluster import ClusterConfig
from tmsgate.gateway.kafka import GatewayConfig
from tmsgate.protocol.columns import MEDIA_TYPE, RecordColumns, decode_columns, encode_columns
from tmsgate.storage import TopicId
from tmsgate.storage.memory import drop

LEASE_MS = 1500
_names = itertools.count()


@pytest.fixture
def gateways() -> Iterator[list[GatewayThread]]:
    table = f"cluster-txn-{next(_names)}"
    gws = [
        GatewayThread(
            f"memory://{table}",
            GatewayConfig(node_id=i),
            http=True,
            cluster=ClusterConfig(i, LEASE_MS),
        ).start()
        for i in range(3)
    ]
    try:
        yield gws
    finally:
        for gw in gws:
            if gw.services is not None:
                gw.stop()
        drop(table)


def _settle(gws: list[GatewayThread], topic: str, partitions: int) -> dict[int, int]:
    """Lease rounds until every partition has a leader every gateway knows."""
    boot = ",".join(gw.bootstrap for gw in gws)
    admin = AdminClient({"bootstrap.servers": boot})
    deadline = time.monotonic() + 30
    while True:
        for gw in gws:
            gw.run(gw.services.lease_round())
        md = admin.list_topics(topic, timeout=10)
        parts = md.topics[topic].partitions
        leaders = {p: parts[p].leader for p in parts}
        if len(leaders) == partitions and all(v >= 0 for v in leaders.values()):
            return leaders
        assert time.monotonic() < deadline, leaders


def _producer(boot: str, txid: str) -> Producer:
    p = Producer(
        {
            "bootstrap.servers": boot,
            "transactional.id": txid,
            "transaction.timeout.ms": 20000,
            "message.timeout.ms": 20000,
            "linger.ms": 2,
        }
    )
    p.init_transactions(30)
    return p


def _read_committed(boot: str, topic: str, partitions: int) -> list[bytes]:
    c = Consumer(
        {
            "bootstrap.servers": boot,
            "group.id": f"reader-{next(_names)}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        tps = [TopicPartition(topic, p, 0) for p in range(partitions)]
        ends = {
            p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        }
        c.assign(tps)
        got: list[bytes] = []
        positions = dict.fromkeys(range(partitions), 0)
        deadline = time.monotonic() + 60
        while any(positions[p] < ends[p] for p in positions):
            assert time.monotonic() < deadline, (positions, ends)
            m = c.poll(0.5)
            if m is None or m.error() is not None:
                continue
            got.append(m.value())
            positions[m.partition()] = m.offset() + 1
        return got
    finally:
        c.close()


def test_kafka_transactions_span_the_gateways(gateways: list[GatewayThread]) -> None:
    gws = gateways
    boot = ",".join(gw.bootstrap for gw in gws)
    admin = AdminClient({"bootstrap.servers": boot})
    for name in ("in", "out"):
        for f in admin.create_topics([NewTopic(name, 6, 1)]).values():
            f.result(30)
    leaders = _settle(gws, "out", 6)
    _settle(gws, "in", 6)
    assert len(set(leaders.values())) > 1, "the partitions are led by several gateways"
    ctl = next(gw for gw in gws if gw.services.cluster.is_controller)

    # Plain input, then consume-transform-produce from it in transactions.
    plain = Producer({"bootstrap.servers": boot, "enable.idempotence": True})
    for i in range(60):
        plain.produce("in", key=str(i).encode(), value=f"in-{i}".encode(), partition=i % 6)
    assert plain.flush(30) == 0

    producer = _producer(boot, "ctp")
    consumer = Consumer(
        {
            "bootstrap.servers": boot,
            "group.id": "ctp-group",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe(["in"])
    seen = 0
    aborted: list[bytes] = []
    batch = 0
    deadline = time.monotonic() + 90
    while seen < 60:
        assert time.monotonic() < deadline, seen
        msgs = consumer.consume(10, 1.0)
        msgs = [m for m in msgs if m.error() is None]
        if not msgs:
            continue
        batch += 1
        producer.begin_transaction()
        for m in msgs:
            out = b"out-" + m.value()
            producer.produce("out", key=m.key(), value=out, partition=int(m.key()) % 6)
        if batch == 2:  # one transaction aborted: its records never appear
            aborted += [b"out-" + m.value() for m in msgs]
            producer.abort_transaction(30)
            # The consumer goes back to what the group committed, so the input is
            # transformed again by the next transactions.
            committed = consumer.committed(consumer.assignment(), timeout=10)
            for tp in committed:
                consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))
            continue
        producer.send_offsets_to_transaction(
            consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
        )
        producer.commit_transaction(30)
        seen += len(msgs)
    consumer.close()

    # read_committed over every gateway's partitions: each committed record once.
    got = _read_committed(boot, "out", 6)
    assert sorted(got) == sorted(b"out-in-%d" % i for i in range(60)), len(got)
    # The commits' parts ran on the partitions' leaders: calls between the gateways.
    assert sum(gw.services.calls.calls_made for gw in gws) > 0
    # The group's offsets committed with the transactions: the whole input.
    check = Consumer({"bootstrap.servers": boot, "group.id": "ctp-group"})
    offsets = check.committed([TopicPartition("in", p) for p in range(6)], timeout=10)
    check.close()
    assert sum(tp.offset for tp in offsets) == 60

    # The controller stops without handing its leases over: another takes the manager.
    wps_before = max(gw.services.store.transactions.issued_high for gw in gws)
    producer.begin_transaction()
    producer.produce("out", key=b"0", value=b"open-at-failover", partition=0)
    producer.flush(30)
    ctl.call(ctl.services.cluster.stop, False)
    ctl.stop()
    live = [gw for gw in gws if gw is not ctl]
    boot2 = ",".join(gw.bootstrap for gw in live)
    deadline = time.monotonic() + 60
    while not any(gw.services.cluster.is_controller and gw.services._tx_recovered for gw in live):
        assert time.monotonic() < deadline, "no gateway took the controller over"
        for gw in live:
            gw.run(gw.services.lease_round())
        time.sleep(0.2)
    _settle(live, "out", 6)
    with pytest.raises(KafkaException):
        producer.commit_transaction(30)  # aborted and fenced by the new controller
    again = _producer(boot2, "ctp")
    again.begin_transaction()
    for i in range(6):
        again.produce("out", key=str(i).encode(), value=b"after-%d" % i, partition=i)
    again.commit_transaction(30)
    got = _read_committed(boot2, "out", 6)
    assert b"open-at-failover" not in got
    assert sorted(v for v in got if v.startswith(b"after-")) == [b"after-%d" % i for i in range(6)]
    assert not set(aborted) & {v for v in got if v.startswith(b"out-")} - {
        b"out-in-%d" % i for i in range(60)
    }
    new_ctl = next(gw for gw in live if gw.services.cluster.is_controller)
    assert new_ctl.services.store.transactions.issued_high > wps_before

    # TMS transactions through the gateway that is not the controller.
    away = next(gw for gw in live if gw is not new_ctl)
    tx = httpx.post(away.http_url + "/v1/transactions", content=b"{}", timeout=30)
    assert tx.status_code == 200, tx.text
    assert tx.json()["writePointer"] > wps_before


def _junk(rng: random.Random, depth: int = 0) -> object:
    kind = rng.randrange(8 if depth < 2 else 5)
    if kind == 0:
        return rng.choice([0, -1, 1, 2**63, 2**64, 1795919072448000000])
    if kind == 1:
        return rng.choice(["", "x", "default", "in~1", "\u00e9", "AAAA", "tx"])
    if kind == 2:
        return rng.choice([None, True, False, 1.5])
    if kind == 3:
        return ["default", "in"]
    if kind == 4:
        return [[1, 2, 3, 4, 5]]
    if kind == 5:
        return [_junk(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {k: _junk(rng, depth + 1) for k in rng.sample(_FIELDS, rng.randrange(len(_FIELDS)))}


_FIELDS = [
    "wp", "topic", "keep", "committed", "group", "offsets", "decidedMs", "replay", "tid",
    "pid", "epoch", "timeoutS", "key", "publish", "tx", "expiries",
]  # fmt: skip


def test_cluster_calls_refuse_bad_input_and_strangers(gateways: list[GatewayThread]) -> None:
    """Every cluster call, fed junk with the right secret, answers 200 or a 4xx/503 saying
    what was wrong, never a 500; without the secret, 403; the gateways go on serving."""
    gws = gateways
    for gw in gws:
        gw.run(gw.services.lease_round())
    rng = random.Random(36)
    slow: dict[str, float] = {}
    for gw in gws:
        calls = gw.services.calls
        url = gw.http_url + "/internal/v1/cluster/"
        stranger = httpx.post(url + "tx.snapshot", json={}, timeout=30)
        assert stranger.status_code == 403, stranger.text
        wrong = httpx.post(
            url + "tx.snapshot", json={}, headers={"x-tmsgate-cluster": "guess"}, timeout=30
        )
        assert wrong.status_code == 403, wrong.text
        secret = {"x-tmsgate-cluster": calls._secret}
        with httpx.Client(headers=secret, timeout=30) as client:
            unknown = client.post(url + "nope", json={})
            assert unknown.status_code == 404, unknown.text
            for name in sorted(calls._handlers):
                for _ in range(20):
                    body = _junk(rng)
                    raw = json.dumps(body) if rng.random() < 0.9 else "{not json"
                    started = time.perf_counter()
                    resp = client.post(url + name, content=raw)
                    slow[name] = max(slow.get(name, 0.0), time.perf_counter() - started)
                    assert resp.status_code < 500 or resp.status_code == 503, (
                        name,
                        body,
                        resp.text,
                    )
                    assert resp.status_code == 200 or resp.json()["message"], (name, resp.text)
    for gw in gws:
        assert httpx.get(gw.http_url + "/readyz", timeout=30).status_code == 200
    print("slowest answer per call (s):", sorted(slow.items(), key=lambda kv: -kv[1])[:5])


def _columns(values: list[bytes]) -> bytes:
    n = len(values)
    return encode_columns(
        RecordColumns(
            offsets=[0] * n,
            timestamps=[-1] * n,
            write_pointers=[0] * n,
            keys=[None] * n,
            values=list(values),
            headers=[[] for _ in values],
        )
    )


def test_a_keyed_commit_with_a_manifest_through_any_gateway(
    gateways: list[GatewayThread],
) -> None:
    """What the Spark sink does (docs/spark.md), with its driver and executors reaching
    different gateways: a keyed start through a gateway that is not the controller,
    stores on each topic's leader (one of them a failed task attempt's), the commit with
    a manifest through another, the key answering ``committed`` after. Only the kept
    stores are read, on every gateway."""
    gws = gateways
    for gw in gws:
        gw.run(gw.services.lease_round())
    ctl = next(gw for gw in gws if gw.services.cluster.is_controller)
    others = [gw for gw in gws if gw is not ctl]
    first = httpx.Client(base_url=others[0].http_url, timeout=30)
    topics = [f"sink-{i}" for i in range(4)]
    for t in topics:
        assert first.put(f"/v1/namespaces/default/topics/{t}").status_code == 200
    for gw in gws:
        gw.run(gw.services.lease_round())
    leaders = {
        t: next(gw for gw in gws if gw.services.store.leads(TopicId("default", t))) for t in topics
    }
    a, b = topics[0], next(t for t in topics[1:] if leaders[t] is not leaders[topics[0]])
    key = "spark/query-1/sink/7"
    started = first.post("/v1/transactions", json={"key": key, "timeoutSeconds": 120})
    assert started.status_code == 200, started.text
    wp = started.json()["writePointer"]

    def store(topic: str, values: list[bytes]) -> dict[str, int]:
        resp = httpx.post(
            f"{leaders[topic].http_url}/v1/namespaces/default/topics/{topic}/store",
            content=_columns(values),
            headers={"content-type": MEDIA_TYPE, "x-transaction-write-pointer": str(wp)},
            timeout=30,
        )
        assert resp.status_code == 200, resp.text
        return resp.json()

    kept_a = [store(a, [b"a1", b"a2"])]
    store(a, [b"failed-attempt"])
    kept_a.append(store(a, [b"a3"]))
    manifest = {
        "publish": [
            {"topic": a, "stored": kept_a},
            {"topic": b, "stored": [store(b, [b"b1"])]},
        ]
    }
    again = httpx.post(others[1].http_url + "/v1/transactions", json={"key": key}, timeout=30)
    assert again.json()["writePointer"] == wp  # the key's transaction, from any gateway
    done = httpx.post(
        f"{others[1].http_url}/v1/transactions/{wp}/commit", json=manifest, timeout=30
    )
    assert done.status_code == 200, done.text
    after = first.post("/v1/transactions", json={"key": key})
    assert after.json()["writePointer"] == wp and after.json()["state"] == "committed", after.text
    for gw in gws:  # each gateway's view asked of the controller, not waited for
        gw.run(gw.services.transactions.refresh_view())
        for topic, want in ((a, [b"a1", b"a2", b"a3"]), (b, [b"b1"])):
            resp = httpx.post(
                f"{gw.http_url}/v1/namespaces/default/topics/{topic}/read",
                json={"offset": 0, "isolation": "read_committed"},
                timeout=30,
            )
            assert resp.status_code == 200, resp.text
            got = decode_columns(resp.content).values
            assert got == want, (gw.bootstrap, topic, got)
