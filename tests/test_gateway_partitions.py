"""Partitioned Kafka topics on the wire (raw requests, exact error codes): a topic with N
partitions is N TMS topics, ``name`` for partition 0 and ``name~p`` for p > 0. CreateTopics
and the num.partitions default, Metadata, Produce, Fetch and ListOffsets per partition,
CreatePartitions, configs and deletion of every partition, the repair at start of changes
a crash cut short, the HTTP API's view of partitions, transactions across partitions and
group offsets of partitions > 0."""

from __future__ import annotations

import argparse
import itertools
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import kafka_requests as kr
import pytest
from gateway_harness import GatewayThread, RawClient, gateway_thread
from kafka.protocol.admin import (
    AlterConfigsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)
from kafka.protocol.consumer import OffsetDeleteRequest, OffsetFetchRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest
from test_kafka_transactions import Producer, describe
from tmsgate.gateway import groups_cli
from tmsgate.protocol import ErrorCode
from tmsgate.storage import Store, TopicId, open_store, partitions

E = ErrorCode
NS = "default"
CREATE_V, META_V, PRODUCE_V, FETCH_V, LIST_V = 7, 12, 9, 12, 7
EARLIEST, LATEST = -2, -1
DEFAULT_PARTITIONS = 3  # the module gateway's num.partitions
_ids = itertools.count()


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayThread]:
    store_dir = tmp_path_factory.mktemp("partitions")
    with gateway_thread(store_dir, http=True, default_partitions=DEFAULT_PARTITIONS) as g:
        yield g


@pytest.fixture
def client(gw: GatewayThread) -> Iterator[RawClient]:
    c = RawClient(gw.address)
    yield c
    c.close()


@pytest.fixture(scope="module")
def http(gw: GatewayThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gw.http_url, timeout=30) as c:
        yield c


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_ids)}"


# --- request helpers: kafka_requests' builders address partition 0 only ------------------------
def create(client: RawClient, name: str, count: int = 1, **kw: Any) -> Any:
    """CreateTopics v7 for one topic -> its result."""
    return client.request(kr.create_topic(name, count, **kw), CREATE_V).topics[0]


def created(client: RawClient, name: str, count: int) -> str:
    result = create(client, name, count)
    assert (result.error_code, result.num_partitions) == (E.NONE, count), result
    return name


def meta(client: RawClient, name: str, auto_create: bool = False) -> Any:
    [topic] = client.request(kr.metadata(name, auto_create=auto_create), META_V).topics
    return topic


def partition_count(client: RawClient, name: str) -> int:
    topic = meta(client, name)
    assert topic.error_code == E.NONE, topic
    return len(topic.partitions)


def produce(client: RawClient, topic: str, partition: int, records: bytes | int) -> Any:
    raw = kr.batch(records) if isinstance(records, int) else records
    return kr.partition(client.request(kr.produce(topic, raw, partition=partition), PRODUCE_V))


def fetch(client: RawClient, topic: str, partition: int, offset: int = 0, **kw: Any) -> Any:
    req = kr.fetch(topic, offset, **kw)
    req.topics[0].partitions[0].partition = partition
    return kr.partition(client.request(req, FETCH_V))


def fetched(client: RawClient, topic: str, partition: int, **kw: Any) -> list[tuple[int, bytes]]:
    """(offset, value) of every record of a partition, from offset 0."""
    p = fetch(client, topic, partition, **kw)
    assert p.error_code == E.NONE, p
    return [(r.offset, r.value) for _, recs in kr.records_of(p.records) for r in recs]


def list_offset(client: RawClient, topic: str, partition: int, timestamp: int) -> Any:
    req = kr.list_offsets(topic, timestamp)
    req.topics[0].partitions[0].partition_index = partition
    return kr.partition(client.request(req, LIST_V))


def values(prefix: bytes, n: int) -> bytes:
    return kr.batch([(None, b"%s-%d" % (prefix, i), []) for i in range(n)])


def create_partitions(
    client: RawClient,
    topics: list[tuple[str, int, list[list[int]] | None]],
    validate_only: bool = False,
) -> list[tuple[str, int, str | None]]:
    """CreatePartitions v3 -> [(name, error code, message)] in request order."""
    topic_cls = CreatePartitionsRequest.CreatePartitionsTopic
    assignment = topic_cls.CreatePartitionsAssignment
    req = CreatePartitionsRequest(
        topics=[
            topic_cls(
                name=name,
                count=count,
                assignments=None
                if assignments is None
                else [assignment(broker_ids=ids) for ids in assignments],
            )
            for name, count, assignments in topics
        ],
        timeout_ms=5000,
        validate_only=validate_only,
    )
    resp = client.request(req, 3)
    return [(r.name, r.error_code, r.error_message) for r in resp.results]


def grow(
    client: RawClient,
    name: str,
    count: int,
    assign: list[list[int]] | None = None,
    validate_only: bool = False,
) -> tuple[int, str | None]:
    """CreatePartitions of one topic -> (error code, message)."""
    [(_, code, message)] = create_partitions(client, [(name, count, assign)], validate_only)
    return code, message


def store_topics(gw: GatewayThread, prefix: str) -> list[str]:
    """The TMS topics of the gateway's namespace named ``prefix`` or ``prefix~p``."""
    tids = gw.call(gw.broker.store.list_topics, NS)
    return sorted(t.topic for t in tids if t.kafka_name == prefix)


def store_payloads(gw: GatewayThread, topic: str) -> list[bytes | None]:
    res = gw.call(lambda: gw.broker.store.read(TopicId(NS, topic), offset=0))
    return [m.payload for m in res.messages]


def properties(gw: GatewayThread, topic: str) -> dict[str, str]:
    return gw.call(gw.broker.store.get_topic, TopicId(NS, topic)).properties


def shared(props: dict[str, str]) -> dict[str, str]:
    """What every partition carries: the topic's properties but the partition count."""
    return {k: v for k, v in props.items() if k != partitions.PARTITIONS}


# --- 1. CreateTopics, Metadata, num.partitions --------------------------------------------------
def test_create_topic_with_four_partitions_led_by_the_gateway(
    gw: GatewayThread, client: RawClient
) -> None:
    name = unique("four")
    result = create(client, name, 4)
    assert (result.error_code, result.error_message, result.num_partitions) == (E.NONE, None, 4)
    assert result.replication_factor == 1
    topic = meta(client, name)
    node = gw.broker.config.node_id
    assert topic.error_code == E.NONE and topic.topic_id == result.topic_id
    got = [
        (p.error_code, p.partition_index, p.leader_id, list(p.replica_nodes), list(p.isr_nodes))
        for p in topic.partitions
    ]
    assert got == [(E.NONE, i, node, [node], [node]) for i in range(4)]
    # Listing every topic shows the Kafka topic once, never its partitions' TMS topics.
    every = MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    listed = [t.name for t in client.request(every, META_V).topics]
    assert listed.count(name) == 1
    assert not any(t.startswith(name + "~") for t in listed)
    assert create(client, name, 2).error_code == E.TOPIC_ALREADY_EXISTS
    assert partition_count(client, name) == 4
    # validate_only answers the count it would create, and creates nothing.
    checked = unique("four-checked")
    req = kr.create_topic(checked, 6)
    req.validate_only = True
    [result] = client.request(req, CREATE_V).topics
    assert (result.error_code, result.num_partitions) == (E.NONE, 6)
    assert meta(client, checked).error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    assert store_topics(gw, checked) == []


def test_num_partitions_default_for_minus_one_and_auto_creation(client: RawClient) -> None:
    by_default = unique("default")
    result = create(client, by_default, -1)
    assert (result.error_code, result.num_partitions) == (E.NONE, DEFAULT_PARTITIONS)
    assert partition_count(client, by_default) == DEFAULT_PARTITIONS
    # Metadata naming an unknown topic creates it with num.partitions partitions...
    by_metadata = unique("auto-meta")
    topic = meta(client, by_metadata, auto_create=True)
    assert topic.error_code == E.NONE
    assert [p.partition_index for p in topic.partitions] == list(range(DEFAULT_PARTITIONS))
    # ... and so does a Produce, whichever of those partitions it names.
    by_produce = unique("auto-produce")
    p = produce(client, by_produce, DEFAULT_PARTITIONS - 1, 2)
    assert (p.error_code, p.base_offset) == (E.NONE, 0)
    assert partition_count(client, by_produce) == DEFAULT_PARTITIONS
    assert fetched(client, by_produce, DEFAULT_PARTITIONS - 1) == [(0, b"v0"), (1, b"v1")]
    assert fetched(client, by_produce, 0) == []


def test_the_broker_default_is_what_describe_configs_reports(client: RawClient) -> None:
    resource = DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=4, resource_name="0", configuration_keys=["num.partitions"]
    )
    resp = client.request(DescribeConfigsRequest(resources=[resource], include_synonyms=False), 4)
    [result] = resp.results
    assert result.error_code == E.NONE
    assert [(c.name, c.value) for c in result.configs] == [
        ("num.partitions", str(DEFAULT_PARTITIONS))
    ]


def test_invalid_partition_counts_and_assignments(gw: GatewayThread, client: RawClient) -> None:
    name = unique("refused")
    for count in (0, -2, 100_000):
        bad = create(client, name, count)
        assert bad.error_code == E.INVALID_PARTITIONS, count
        assert bad.error_message == (
            f"Number of partitions must be between 1 and 99999, got {count}."
        )
    node = gw.broker.config.node_id

    def with_assignments(brokers: list[list[int]], count: int = -1, replication: int = -1) -> Any:
        assignment = CreateTopicsRequest.CreatableTopic.CreatableReplicaAssignment
        topic = CreateTopicsRequest.CreatableTopic(
            name=name,
            num_partitions=count,
            replication_factor=replication,
            assignments=[
                assignment(partition_index=i, broker_ids=ids) for i, ids in enumerate(brokers)
            ],
            configs=[],
        )
        req = CreateTopicsRequest(topics=[topic], timeout_ms=5000, validate_only=False)
        return client.request(req, CREATE_V).topics[0]

    other = with_assignments([[node], [node + 1]])
    assert other.error_code == E.INVALID_REPLICA_ASSIGNMENT
    assert other.error_message == f"partition 1 can only be assigned to broker {node}, alone"
    assert with_assignments([[node, node + 1]]).error_code == E.INVALID_REPLICA_ASSIGNMENT
    both = with_assignments([[node]], count=1)
    assert both.error_code == E.INVALID_REQUEST
    assert both.error_message.startswith("Both numPartitions or replicationFactor")
    assert with_assignments([[node]], replication=1).error_code == E.INVALID_REQUEST
    # Nothing refused was created.
    assert meta(client, name).error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    assert store_topics(gw, name) == []
    # Assignments naming only this broker, one per partition, make that many partitions.
    ok = with_assignments([[node]] * 3)
    assert (ok.error_code, ok.num_partitions) == (E.NONE, 3)
    assert store_topics(gw, name) == [name, f"{name}~1", f"{name}~2"]


# --- 2. Produce, Fetch and ListOffsets per partition --------------------------------------------
def test_each_partition_has_its_own_dense_offsets(gw: GatewayThread, client: RawClient) -> None:
    name = created(client, unique("dense"), 4)
    # Interleaved: partition p gets p + 1 records per produce, twice.
    bases: dict[int, list[int]] = {p: [] for p in range(4)}
    for round_ in range(2):
        for p in range(4):
            resp = produce(client, name, p, values(b"p%d-r%d" % (p, round_), p + 1))
            assert resp.error_code == E.NONE, resp
            bases[p].append(resp.base_offset)
    assert bases == {p: [0, p + 1] for p in range(4)}
    for p in range(4):
        want = [b"p%d-r%d-%d" % (p, r, i) for r in range(2) for i in range(p + 1)]
        assert fetched(client, name, p) == list(enumerate(want))
        f = fetch(client, name, p)
        assert (f.high_watermark, f.last_stable_offset, f.log_start_offset) == (
            2 * (p + 1),
            2 * (p + 1),
            0,
        )
        assert list_offset(client, name, p, EARLIEST).offset == 0
        assert list_offset(client, name, p, LATEST).offset == 2 * (p + 1)
        # A fetch from the middle of one partition reads that partition only.
        middle = fetch(client, name, p, offset=p + 1)
        got = [r.value for _, recs in kr.records_of(middle.records) for r in recs]
        assert got == want[p + 1 :]
    # The store holds one TMS topic per partition; partition 2's records are in name~2.
    assert store_topics(gw, name) == [name, f"{name}~1", f"{name}~2", f"{name}~3"]
    assert store_payloads(gw, f"{name}~2") == [
        b"p2-r%d-%d" % (r, i) for r in range(2) for i in range(3)
    ]
    assert store_payloads(gw, name) == [b"p0-r0-0", b"p0-r1-0"]


def test_a_partition_the_topic_does_not_have_is_unknown(client: RawClient) -> None:
    name = created(client, unique("beyond"), 4)
    for p in (4, 5, -1, 99_999):
        assert produce(client, name, p, 1).error_code == E.UNKNOWN_TOPIC_OR_PARTITION, p
        assert fetch(client, name, p).error_code == E.UNKNOWN_TOPIC_OR_PARTITION, p
        lo = list_offset(client, name, p, LATEST)
        assert (lo.error_code, lo.offset) == (E.UNKNOWN_TOPIC_OR_PARTITION, -1), p
    refused = produce(client, name, 4, 1)
    assert refused.error_message == f"topic {name} partition 4 does not exist (it has 4)"
    # Nothing was written anywhere.
    assert [list_offset(client, name, p, LATEST).offset for p in range(4)] == [0, 0, 0, 0]


def test_one_request_naming_several_partitions(client: RawClient) -> None:
    name = created(client, unique("multi"), 3)
    pd = ProduceRequest.TopicProduceData.PartitionProduceData
    data = [pd(index=p, records=values(b"m%d" % p, p + 1)) for p in (2, 0, 1, 3)]
    req = kr.produce(name, None)
    req.topic_data[0].partition_data = data
    resp = client.request(req, PRODUCE_V)
    got = [(p.index, p.error_code, p.base_offset) for p in resp.responses[0].partition_responses]
    assert got == [
        (2, E.NONE, 0),
        (0, E.NONE, 0),
        (1, E.NONE, 0),
        (3, E.UNKNOWN_TOPIC_OR_PARTITION, -1),
    ]
    assert fetched(client, name, 2) == [(i, b"m2-%d" % i) for i in range(3)]
    assert fetched(client, name, 1) == [(i, b"m1-%d" % i) for i in range(2)]


def test_idempotent_sequences_are_per_partition(client: RawClient) -> None:
    name = created(client, unique("idem"), 3)
    pid = client.request(kr.init_producer_id(), 4).producer_id

    def send(partition: int, seq: int, n: int = 2) -> Any:
        raw = kr.batch(n, producer_id=pid, epoch=0, base_sequence=seq)
        return produce(client, name, partition, raw)

    # Each partition's sequence starts at 0; a retry is answered with the first's offset.
    for p in (0, 2):
        assert (send(p, 0).error_code, send(p, 0).base_offset) == (E.NONE, 0), p
    assert send(2, 2).base_offset == 2
    assert send(1, 5).error_code == E.UNKNOWN_PRODUCER_ID  # partition 1 has no state yet
    assert send(0, 4).error_code == E.OUT_OF_ORDER_SEQUENCE_NUMBER  # 0 is at 2, not 4
    assert [list_offset(client, name, p, LATEST).offset for p in range(3)] == [2, 0, 4]


# --- 3. '~' is not part of any Kafka topic name -------------------------------------------------
def test_a_topic_name_with_a_tilde_is_invalid(gw: GatewayThread, client: RawClient) -> None:
    base = created(client, unique("tilde"), 2)
    for name in ("a~1", f"{base}~1", "x~"):
        assert create(client, name).error_code == E.INVALID_TOPIC_EXCEPTION, name
        assert meta(client, name, auto_create=True).error_code == E.INVALID_TOPIC_EXCEPTION
        assert produce(client, name, 0, 1).error_code == E.INVALID_TOPIC_EXCEPTION, name
        assert fetch(client, name, 0).error_code == E.INVALID_TOPIC_EXCEPTION, name
        assert grow(client, name, 3)[0] == E.INVALID_TOPIC_EXCEPTION, name
        resp = client.request(DeleteTopicsRequest(topic_names=[name], timeout_ms=1000), 4)
        assert resp.responses[0].error_code == E.INVALID_TOPIC_EXCEPTION, name
    assert store_topics(gw, "a") == []
    assert store_topics(gw, base) == [base, f"{base}~1"]  # the partition is untouched
    assert fetched(client, base, 1) == []


# --- 4. CreatePartitions ------------------------------------------------------------------------
def test_create_partitions_grows_a_topic(gw: GatewayThread, client: RawClient) -> None:
    name = created(client, unique("grow"), 2)
    assert produce(client, name, 1, 2).base_offset == 0
    topic_id = meta(client, name).topic_id
    assert grow(client, name, 5) == (E.NONE, None)
    topic = meta(client, name)
    assert [p.partition_index for p in topic.partitions] == [0, 1, 2, 3, 4]
    assert topic.topic_id == topic_id  # the same topic, grown
    p = produce(client, name, 4, values(b"new", 2))
    assert (p.error_code, p.base_offset) == (E.NONE, 0)
    assert fetched(client, name, 4) == [(0, b"new-0"), (1, b"new-1")]
    assert fetched(client, name, 1) == [(0, b"v0"), (1, b"v1")]  # the old ones keep theirs
    assert fetched(client, name, 3) == []
    assert store_topics(gw, name) == [name] + [f"{name}~{p}" for p in range(1, 5)]
    assert properties(gw, name)[partitions.PARTITIONS] == "5"


def test_create_partitions_refusals(gw: GatewayThread, client: RawClient) -> None:
    name = created(client, unique("nogrow"), 3)
    for count in (3, 2):  # Apache Kafka 4.1's message
        assert grow(client, name, count) == (
            E.INVALID_PARTITIONS,
            f"The topic {name} currently has 3 partition(s); {count} would not be an increase.",
        )
    code, message = grow(client, name, 100_000)
    assert code == E.INVALID_PARTITIONS and "between 1 and 99999" in (message or "")
    missing = unique("nogrow-missing")
    assert grow(client, missing, 2) == (
        E.UNKNOWN_TOPIC_OR_PARTITION,
        f"The topic '{missing}' does not exist.",
    )
    assert meta(client, missing).error_code == E.UNKNOWN_TOPIC_OR_PARTITION  # not created
    # validate_only: answered as if done, nothing changes.
    assert grow(client, name, 6, validate_only=True) == (E.NONE, None)
    assert partition_count(client, name) == 3
    assert store_topics(gw, name) == [name, f"{name}~1", f"{name}~2"]
    # Every occurrence of a topic named twice is refused; the others are done.
    other = created(client, unique("nogrow-other"), 1)
    results = create_partitions(client, [(name, 4, None), (other, 2, None), (name, 5, None)])
    assert results == [
        (name, E.INVALID_REQUEST, "Duplicate topic in request."),
        (other, E.NONE, None),
        (name, E.INVALID_REQUEST, "Duplicate topic in request."),
    ]
    assert (partition_count(client, name), partition_count(client, other)) == (3, 2)
    # Assignments: one per new partition, naming only this broker.
    node = gw.broker.config.node_id
    assert grow(client, name, 5, assign=[[node]]) == (
        E.INVALID_REPLICA_ASSIGNMENT,
        "Attempted to add 2 additional partitions, but only 1 assignments were supplied.",
    )
    code, _ = grow(client, name, 5, assign=[[node], [node + 1]])
    assert code == E.INVALID_REPLICA_ASSIGNMENT
    assert partition_count(client, name) == 3
    assert store_topics(gw, name) == [name, f"{name}~1", f"{name}~2"]
    assert grow(client, name, 5, assign=[[node], [node]]) == (E.NONE, None)
    assert partition_count(client, name) == 5


# --- 5. configs ----------------------------------------------------------------------------------
def _incremental(name: str, configs: dict[str, str | None]) -> Any:
    res = IncrementalAlterConfigsRequest.AlterConfigsResource
    cfgs = [
        res.AlterableConfig(name=k, config_operation=0 if v is not None else 1, value=v)
        for k, v in configs.items()
    ]
    resource = res(resource_type=2, resource_name=name, configs=cfgs)
    return IncrementalAlterConfigsRequest(resources=[resource], validate_only=False)


def _legacy(name: str, configs: dict[str, str]) -> Any:
    res = AlterConfigsRequest.AlterConfigsResource
    cfgs = [res.AlterableConfig(name=k, value=v) for k, v in configs.items()]
    resource = res(resource_type=2, resource_name=name, configs=cfgs)
    return AlterConfigsRequest(resources=[resource], validate_only=False)


def _described(client: RawClient, name: str) -> dict[str, str]:
    resource = DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=2, resource_name=name, configuration_keys=None
    )
    resp = client.request(DescribeConfigsRequest(resources=[resource], include_synonyms=False), 4)
    [result] = resp.results
    assert result.error_code == E.NONE, result
    return {c.name: c.value for c in result.configs}


def test_configs_apply_to_every_partition(gw: GatewayThread, client: RawClient) -> None:
    name = created(client, unique("cfg"), 3)
    parts = [name, f"{name}~1", f"{name}~2"]
    resp = client.request(_incremental(name, {"retention.ms": "60000"}), 1)
    assert resp.responses[0].error_code == E.NONE
    for part in parts:
        assert properties(gw, part)["ttl"] == "60", part
    assert properties(gw, name)[partitions.PARTITIONS] == "3"
    assert partitions.PARTITIONS not in properties(gw, f"{name}~2")
    described = _described(client, name)
    assert described["retention.ms"] == "60000"
    assert partitions.PARTITIONS not in described
    # The legacy AlterConfigs replaces every config: the partition count stays.
    resp = client.request(_legacy(name, {"max.message.bytes": "5000"}), 1)
    assert resp.responses[0].error_code == E.NONE
    for part in parts:
        assert "ttl" not in properties(gw, part), part
    assert partition_count(client, name) == 3
    assert properties(gw, name)[partitions.PARTITIONS] == "3"
    assert properties(gw, f"{name}~2") == shared(properties(gw, name))
    big = produce(client, name, 2, kr.batch([(None, b"x" * 6000, [])]))
    assert big.error_code == E.MESSAGE_TOO_LARGE  # the topic's limit holds on partition 2
    # The count is no config a client can set.
    resp = client.request(_incremental(name, {partitions.PARTITIONS: "7"}), 1)
    assert resp.responses[0].error_code == E.INVALID_CONFIG
    assert partition_count(client, name) == 3
    # A partition is no resource of its own.
    resp = client.request(_incremental(f"{name}~1", {"retention.ms": "1000"}), 1)
    assert resp.responses[0].error_code == E.INVALID_TOPIC_EXCEPTION


def test_create_topic_configs_go_to_every_partition(gw: GatewayThread, client: RawClient) -> None:
    name = unique("cfg-create")
    result = create(client, name, 3, configs={"retention.ms": "120000"})
    assert (result.error_code, result.num_partitions) == (E.NONE, 3)
    assert {c.name: c.value for c in result.configs}["retention.ms"] == "120000"
    head = properties(gw, name)
    assert (head["ttl"], head[partitions.PARTITIONS]) == ("120", "3")
    assert [properties(gw, f"{name}~{p}") for p in (1, 2)] == [shared(head)] * 2


# --- 6. DeleteTopics ----------------------------------------------------------------------------
def test_delete_removes_every_partition_and_recreating_starts_empty(
    gw: GatewayThread, client: RawClient
) -> None:
    name = created(client, unique("del"), 3)
    for p in range(3):
        assert produce(client, name, p, 2).error_code == E.NONE
    resp = client.request(DeleteTopicsRequest(topic_names=[name], timeout_ms=1000), 4)
    assert resp.responses[0].error_code == E.NONE
    assert store_topics(gw, name) == []
    assert meta(client, name).error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    assert fetch(client, name, 1).error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    # Again, with fewer partitions: each starts empty; the third is gone.
    created(client, name, 2)
    assert store_topics(gw, name) == [name, f"{name}~1"]
    for p in range(2):
        f = fetch(client, name, p)
        assert (f.error_code, f.high_watermark, f.log_start_offset) == (E.NONE, 0, 0), p
        assert kr.records_of(f.records) == []
    assert fetch(client, name, 2).error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    assert produce(client, name, 1, 1).base_offset == 0
    # And with more partitions than before: the one deleted before is empty too.
    client.request(DeleteTopicsRequest(topic_names=[name], timeout_ms=1000), 4)
    created(client, name, 4)
    assert [fetch(client, name, p).high_watermark for p in range(4)] == [0, 0, 0, 0]


# --- 7. repair at start ------------------------------------------------------------------------
def _prepare(tmp_path: Path, build: Callable[[Store], None]) -> None:
    """Leave a store in the state ``build`` makes, as a crash would: closed, then a gateway
    starts on it."""
    store = open_store(f"leveldb://{tmp_path / 'store'}")
    try:
        build(store)
    finally:
        store.close()


def _tid(topic: str) -> TopicId:
    return TopicId(NS, topic)


def test_repair_deletes_orphans_finishes_grows_and_copies_properties(tmp_path: Path) -> None:
    def build(store: Store) -> None:
        # (a) a creation cut short (or a deletion after partition 0): x~1 and x~2 only.
        store.create_topics([_tid("x~1"), _tid("x~2")], {})
        store.publish(_tid("x~1"), [b"orphan"])
        # (b) a grow cut short before the count was written: y has 2, y~2 and y~3 exist.
        partitions.create(store, _tid("y"), {}, 2)
        store.publish(_tid("y~1"), [b"kept"])
        store.create_topics([_tid("y~2"), _tid("y~3")], {})
        # (c) a property change cut short after partition 0: z~1 and z~2 are stale.
        partitions.create(store, _tid("z"), {"ttl": "3600"}, 3)
        store.update_topic(_tid("z"), {"ttl": "60", partitions.PARTITIONS: "3"})
        store.update_topic(_tid("z~2"), {"ttl": "3600", "extra": "left over"})
        # A topic of another Kafka name that merely starts the same is no orphan.
        partitions.create(store, _tid("xx"), {}, 2)

    _prepare(tmp_path, build)
    with gateway_thread(tmp_path) as gw:
        client = RawClient(gw.address)
        try:
            assert store_topics(gw, "x") == []
            assert meta(client, "x").error_code == E.UNKNOWN_TOPIC_OR_PARTITION
            assert store_topics(gw, "y") == ["y", "y~1"]
            assert partition_count(client, "y") == 2
            assert fetched(client, "y", 1) == [(0, b"kept")]
            assert produce(client, "y", 2, 1).error_code == E.UNKNOWN_TOPIC_OR_PARTITION
            assert store_topics(gw, "z") == ["z", "z~1", "z~2"]
            assert [properties(gw, t) for t in ("z~1", "z~2")] == [{"ttl": "60"}] * 2
            assert properties(gw, "z") == {"ttl": "60", partitions.PARTITIONS: "3"}
            assert store_topics(gw, "xx") == ["xx", "xx~1"]
            # y grows again from where it really was: its new partitions start empty.
            assert grow(client, "y", 4) == (E.NONE, None)
            assert [fetch(client, "y", p).high_watermark for p in (2, 3)] == [0, 0]
        finally:
            client.close()


def test_creating_over_leftover_partitions_starts_them_empty(tmp_path: Path) -> None:
    def build(store: Store) -> None:
        store.create_topics([_tid("w~1"), _tid("w~2")], {})
        store.publish(_tid("w~1"), [b"old-1", b"old-2"])
        store.publish(_tid("w~2"), [b"old-3"])

    _prepare(tmp_path, build)
    with gateway_thread(tmp_path) as gw:
        client = RawClient(gw.address)
        try:
            # Deleted at start, then created again: a new generation of each, empty.
            created(client, "w", 3)
            for p in (1, 2):
                f = fetch(client, "w", p)
                assert (f.error_code, f.high_watermark, f.log_start_offset) == (E.NONE, 0, 0)
                assert kr.records_of(f.records) == []
            assert store_payloads(gw, "w~1") == []
            # Leftovers the repair has not seen (written to the store while the gateway
            # runs) are replaced by a creation too: new generations, the topic's configs.
            store = gw.broker.store
            gw.call(store.create_topics, [_tid("v~1")], {"ttl": "5"})
            gw.call(store.publish, _tid("v~1"), [b"stale"])
            created(client, "v", 2)
            assert fetched(client, "v", 1) == []
            assert properties(gw, "v~1") == {}
            assert produce(client, "v", 1, 1).base_offset == 0
        finally:
            client.close()


# --- 8. the HTTP API ----------------------------------------------------------------------------
def _url(topic: str, action: str = "") -> str:
    base = f"/v1/namespaces/{NS}/topics/{topic}"
    return f"{base}/{action}" if action else base


def _error(resp: httpx.Response, status: int, *words: str) -> str:
    assert resp.status_code == status, resp.text
    message = resp.json()["message"]
    assert all(w in message for w in words), message
    return message


def test_http_creates_a_partitioned_kafka_topic(
    gw: GatewayThread, client: RawClient, http: httpx.Client
) -> None:
    name = unique("http")
    resp = http.put(_url(name), json={partitions.PARTITIONS: "3", "ttl": 3600})
    assert resp.status_code == 200, resp.text
    assert resp.json() == {
        "name": name,
        "properties": {partitions.PARTITIONS: "3", "ttl": "3600"},
    }
    assert partition_count(client, name) == 3
    # Each partition is readable as a topic of its own, with the topic's properties.
    assert http.get(_url(f"{name}~2")).json() == {
        "name": f"{name}~2",
        "properties": {"ttl": "3600"},
    }
    assert http.get(_url(f"{name}~3")).status_code == 404
    # Published over HTTP to name~2, fetched over Kafka from partition 2.
    resp = http.post(_url(f"{name}~2", "publish"), json={"messages": ["from-http"]})
    assert resp.status_code == 200, resp.text
    assert fetched(client, name, 2) == [(0, b"from-http")]
    assert fetched(client, name, 0) == fetched(client, name, 1) == []
    # Produced over Kafka to partition 1, polled over HTTP from name~1.
    assert produce(client, name, 1, values(b"k", 2)).error_code == E.NONE
    resp = http.post(_url(f"{name}~1", "poll"), json={})
    assert resp.status_code == 200, resp.text
    assert [m["payload"] for m in resp.json()] == ["k-0", "k-1"]
    # A property change goes to every partition and keeps the count.
    resp = http.put(_url(name, "properties"), json={"ttl": "60"})
    assert resp.status_code == 200, resp.text
    assert resp.json()["properties"] == {"ttl": "60", partitions.PARTITIONS: "3"}
    assert properties(gw, f"{name}~1") == properties(gw, f"{name}~2") == {"ttl": "60"}
    assert partition_count(client, name) == 3
    # Deleting the topic deletes its partitions.
    assert http.delete(_url(name)).status_code == 200
    assert http.get(_url(f"{name}~1")).status_code == 404
    assert store_topics(gw, name) == []
    assert meta(client, name).error_code == E.UNKNOWN_TOPIC_OR_PARTITION


def test_http_refuses_changes_to_one_partition(
    gw: GatewayThread, client: RawClient, http: httpx.Client
) -> None:
    name = created(client, unique("http-part"), 3)
    words = (f"{name}~1", "partition 1 of topic", name)
    _error(http.put(_url(f"{name}~1")), 400, *words)
    _error(http.put(_url(f"{name}~1", "properties"), json={"ttl": "5"}), 400, *words)
    _error(http.delete(_url(f"{name}~1")), 400, *words)
    _error(http.put(_url(f"{name}~7")), 400, "partition 7")  # beyond the count: the same
    _error(
        http.put(_url(name, "properties"), json={partitions.PARTITIONS: "5"}),
        400,
        partitions.PARTITIONS,
        "CreatePartitions",
    )
    assert store_topics(gw, name) == [name, f"{name}~1", f"{name}~2"]
    assert properties(gw, f"{name}~1") == {}
    assert partition_count(client, name) == 3
    for bad in ("0", "x", "-1", "1.5", "100000", ""):
        fresh = unique("http-bad")
        _error(http.put(_url(fresh), json={partitions.PARTITIONS: bad}), 400, repr(bad))
        assert http.get(_url(fresh)).status_code == 404
        assert store_topics(gw, fresh) == []
    # A number is taken as its string, as for any property.
    numeric = unique("http-num")
    assert http.put(_url(numeric), json={partitions.PARTITIONS: 2}).status_code == 200
    assert partition_count(client, numeric) == 2


# --- 9. transactions across partitions --------------------------------------------------------
def test_a_transaction_across_partitions(client: RawClient) -> None:
    name = created(client, unique("txn"), 3)
    p = Producer(client, unique("txn-id"))

    def add(parts: list[int]) -> dict[int, int]:
        req = kr.add_partitions_to_txn(p.tid, p.pid, p.epoch, {name: parts})
        [t] = client.request(req, 3).results_by_topic_v3_and_below
        assert t.name == name
        return {r.partition_index: r.partition_error_code for r in t.results_by_partition}

    assert add([0, 2, 5]) == {
        0: E.OPERATION_NOT_ATTEMPTED,
        2: E.OPERATION_NOT_ATTEMPTED,
        5: E.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert describe(client, p.tid)[0].transaction_state == "Empty"
    assert add([0, 2]) == {0: E.NONE, 2: E.NONE}

    def send(partition: int, prefix: bytes, n: int) -> Any:
        records = [(None, b"%s-%d" % (prefix, i), []) for i in range(n)]
        raw = p.batch(records, seq=0)  # sequences are per partition
        req = kr.produce(name, raw, partition=partition, transactional_id=p.tid)
        return kr.partition(client.request(req, PRODUCE_V))

    assert (send(0, b"zero", 2).error_code, send(2, b"two", 3).error_code) == (E.NONE, E.NONE)
    # Partition 1 is not in the transaction.
    assert send(1, b"one", 1).error_code == E.INVALID_TXN_STATE
    [state] = describe(client, p.tid)
    assert state.transaction_state == "Ongoing"
    assert [(t.topic, list(t.partitions)) for t in state.topics] == [(name, [0, 2])]
    # Held from read_committed readers, and the last stable offset waits, per partition.
    assert fetched(client, name, 2, isolation_level=1) == []
    assert fetch(client, name, 2, isolation_level=1).last_stable_offset == 0
    assert p.end(True) == E.NONE
    for isolation in (0, 1):
        assert fetched(client, name, 0, isolation_level=isolation) == [
            (0, b"zero-0"),
            (1, b"zero-1"),
        ]
        assert fetched(client, name, 2, isolation_level=isolation) == [
            (0, b"two-0"),
            (1, b"two-1"),
            (2, b"two-2"),
        ]
        assert fetched(client, name, 1, isolation_level=isolation) == []
    assert [list_offset(client, name, q, LATEST).offset for q in range(3)] == [2, 0, 3]
    [done] = describe(client, p.tid)
    assert (done.transaction_state, done.topics) == ("CompleteCommit", [])


def test_an_aborted_transaction_leaves_every_partition_empty(client: RawClient) -> None:
    name = created(client, unique("txn-abort"), 2)
    p = Producer(client, unique("txn-abort-id"))
    req = kr.add_partitions_to_txn(p.tid, p.pid, p.epoch, {name: [0, 1]})
    [t] = client.request(req, 3).results_by_topic_v3_and_below
    assert [(r.partition_index, r.partition_error_code) for r in t.results_by_partition] == [
        (0, E.NONE),
        (1, E.NONE),
    ]
    for part in (0, 1):
        raw = p.batch(2, seq=0)
        req = kr.produce(name, raw, partition=part, transactional_id=p.tid)
        assert kr.partition(client.request(req, PRODUCE_V)).error_code == E.NONE
    assert p.end(False) == E.NONE
    for part in (0, 1):
        assert fetched(client, name, part, isolation_level=1) == []
    # An aborted transaction takes no offsets, in any partition.
    assert [produce(client, name, part, 1).base_offset for part in (0, 1)] == [0, 0]


# --- 10. group offsets ------------------------------------------------------------------------
def _commit(client: RawClient, group: str, topic: str, partition: int, offset: int) -> int:
    req = kr.offset_commit(group, topic, offset)
    req.topics[0].partitions[0].partition_index = partition
    [t] = client.request(req, 2).topics
    return t.partitions[0].error_code


def _committed(client: RawClient, group: str, topic: str, parts: list[int]) -> dict[int, Any]:
    wanted = OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=parts)
    req = OffsetFetchRequest(group_id=group, topics=[wanted], require_stable=False)
    resp = client.request(req, 7)
    assert resp.error_code == E.NONE
    [t] = resp.topics
    return {p.partition_index: (p.error_code, p.committed_offset) for p in t.partitions}


def test_group_offsets_of_every_partition(client: RawClient) -> None:
    name = created(client, unique("offsets"), 4)
    group = unique("offsets-group")
    assert _commit(client, group, name, 3, 7) == E.NONE
    assert _commit(client, group, name, 1, 2) == E.NONE
    assert _commit(client, group, name, 4, 9) == E.UNKNOWN_TOPIC_OR_PARTITION
    assert _committed(client, group, name, [0, 1, 3]) == {
        0: (E.NONE, -1),
        1: (E.NONE, 2),
        3: (E.NONE, 7),
    }
    # Growing the topic makes the new partition committable.
    assert grow(client, name, 5) == (E.NONE, None)
    assert _commit(client, group, name, 4, 9) == E.NONE
    assert _committed(client, group, name, [3, 4]) == {3: (E.NONE, 7), 4: (E.NONE, 9)}


# --- partitions above 0 in groups, and counts int() cannot read ---------------------------
def test_offset_delete_of_a_partition_above_zero(client: RawClient) -> None:
    name = created(client, unique("offset-delete"), 4)
    group = unique("offset-delete-group")
    assert _commit(client, group, name, 3, 7) == E.NONE
    topic = OffsetDeleteRequest.OffsetDeleteRequestTopic
    part = topic.OffsetDeleteRequestPartition
    req = OffsetDeleteRequest(
        group_id=group, topics=[topic(name=name, partitions=[part(partition_index=3)])]
    )
    resp = client.request(req, 0)
    assert resp.error_code == E.NONE
    assert [p.error_code for t in resp.topics for p in t.partitions] == [E.NONE]
    assert _committed(client, group, name, [3]) == {3: (E.NONE, -1)}


def test_http_refuses_a_count_int_cannot_read(http: httpx.Client) -> None:
    fresh = unique("http-sup")
    _error(http.put(_url(fresh), json={partitions.PARTITIONS: "\u00b3"}), 400)


def test_groups_cli_lag_of_a_partition_above_zero(
    gw: GatewayThread, client: RawClient, capsys: pytest.CaptureFixture[str]
) -> None:
    name = created(client, unique("cli-lag"), 3)
    group = unique("cli-lag-group")
    assert produce(client, name, 0, 1).error_code == E.NONE
    assert produce(client, name, 2, 10).error_code == E.NONE
    assert _commit(client, group, name, 2, 4) == E.NONE
    parser = argparse.ArgumentParser(prog="tmsgate")
    groups_cli.add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["groups", "describe", group, "--store", gw.store_url, "--json"])
    assert groups_cli.run(args) == 0  # a point-in-time copy: the gateway holds the store
    [row] = json.loads(capsys.readouterr().out)["offsets"]
    assert (row["partition"], row["committed"], row["high_watermark"], row["lag"]) == (
        2,
        4,
        10,
        6,
    )
