"""Produce to a topic being migrated in (docs/migration.md): batches keep their source
offsets, and a batch that reaches back before the end of the ones before it in the same
request (a tmsgate source answers a fetch with the whole produced batch holding the fetch
offset; a migration gathers several fetches into one request) adds only its new offsets."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from gateway_harness import GatewayThread, RawClient, gateway_thread
from kafka.protocol.producer import ProduceRequest

TS = 1_700_000_000_000


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with gateway_thread(tmp_path_factory.mktemp("migrated")) as g:
        yield g


def source_batch(first: int, last: int, tag: bytes) -> bytes:
    """A source's batch of offsets first..last, as fetched (base offset set)."""
    b = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for offset in range(first, last + 1):
        b.append(offset - first, TS + offset, b"k%d" % offset, tag + b"%d" % offset, [])
    raw = bytearray(b.build())
    struct.pack_into(">q", raw, 0, first)
    return bytes(raw)


def produce(gw: GatewayThread, topic: str, batches: list[bytes]) -> int:
    client = RawClient(gw.address, client_id="tmsgate-migrate")
    try:
        pd = ProduceRequest.TopicProduceData.PartitionProduceData(
            index=0, records=b"".join(batches)
        )
        td = ProduceRequest.TopicProduceData(name=topic, partition_data=[pd])
        req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[td])
        resp = client.request(req, 7)
        return resp.responses[0].partition_responses[0].error_code
    finally:
        client.close()


def read_all(gw: GatewayThread, topic: str, upto: int) -> list[tuple[int, bytes]]:
    c = Consumer({"bootstrap.servers": gw.bootstrap, "group.id": topic})
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple[int, bytes]] = []
    try:
        for _ in range(50):
            if out and out[-1][0] >= upto - 1:
                break
            out += [(m.offset(), m.value()) for m in c.consume(100, 1) if m.error() is None]
    finally:
        c.close()
    return out


def test_a_batch_reaching_back_in_the_same_request_adds_only_new_offsets(
    gw: GatewayThread,
) -> None:
    topic = "migrated-overlap"
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    resource = ConfigResource("topic", topic, {"tmsgate.migration.source": "src:9092"})
    admin.alter_configs([resource])[resource].result(10)
    # the first fetch ended at 9 (a store read); the second began with a whole produced
    # batch holding offset 10, which starts at 6
    assert produce(gw, topic, [source_batch(0, 9, b"a"), source_batch(6, 14, b"b")]) == 0
    # and a later request reaching back before what the partition holds: the part it
    # holds is skipped, as for a resumed copy
    assert produce(gw, topic, [source_batch(12, 19, b"c")]) == 0
    got = read_all(gw, topic, 20)
    assert [o for o, _ in got] == list(range(20))
    assert [v for _, v in got] == (
        [b"a%d" % i for i in range(10)]
        + [b"b%d" % i for i in range(10, 15)]
        + [b"c%d" % i for i in range(15, 20)]
    )
