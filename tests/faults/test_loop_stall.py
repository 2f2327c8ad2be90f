"""Loop stall: huge requests beside a producer that waits for every acknowledgement.

The defect (issue, part 3): a 1 MB Metadata v1 request naming 500,000 topics took 4.6 s to
answer, and another client's produce acknowledgements stalled 4.7 s meanwhile, because the
request was decoded, handled and its answer encoded on the event loop every client shares.

A confluent-kafka producer (acks=all, linger.ms=0) produces at a steady rate while raw
connections send one huge request after another (Metadata naming 500,000 topics, then
ListOffsets, OffsetFetch, Fetch, OffsetCommit, CreateTopics, DeleteTopics, Produce,
IncrementalAlterConfigs, DescribeGroups, DeleteGroups, OffsetDelete and DescribeConfigs
requests naming tens of thousands of items; all but the last are answered without a
store call per item, so each within a second or two). The
producer's p50/p99/max acknowledgement latency and the counts are reported (see
bench/loop_stall_bench.py for the comparison without huge requests; no assertion is on
time). Asserted: the producer never failed, and every acknowledged message is stored, at
its acknowledged offset, with its value.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Any

import pytest

from .conftest import scale

pytestmark = pytest.mark.timeout(600)

RATE = 200  # messages a second
SECONDS = scale(8.0, 120.0)
ATTACKERS = 2


def huge_requests(topic: str) -> list[bytes]:
    """~1 MB requests, each naming tens or hundreds of thousands of items."""
    from kafka.protocol.admin import DescribeConfigsRequest
    from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest, OffsetFetchRequest
    from kafka.protocol.metadata import MetadataRequest

    names = [f"t{i:06d}" for i in range(100_000)]
    res = DescribeConfigsRequest.DescribeConfigsResource
    lo_part = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition
    f_part = FetchRequest.FetchTopic.FetchPartition
    requests: list[tuple[Any, int]] = [
        (MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="")] * 500_000), 1),
        (
            ListOffsetsRequest(
                replica_id=-1,
                topics=[
                    ListOffsetsRequest.ListOffsetsTopic(
                        name=topic,
                        partitions=[
                            lo_part(partition_index=i, timestamp=-1) for i in range(80_000)
                        ],
                    )
                ],
            ),
            1,
        ),
        (
            OffsetFetchRequest(
                group_id="loop-stall",
                topics=[
                    OffsetFetchRequest.OffsetFetchRequestTopic(name=n, partition_indexes=[0])
                    for n in names[:80_000]
                ],
            ),
            1,
        ),
        (
            FetchRequest(
                replica_id=-1,
                max_wait_ms=0,
                min_bytes=0,
                max_bytes=1 << 20,
                isolation_level=0,
                topics=[
                    FetchRequest.FetchTopic(
                        topic=topic,
                        partitions=[
                            f_part(partition=i, fetch_offset=0, partition_max_bytes=1024)
                            for i in range(40_000)
                        ],
                    )
                ],
                forgotten_topics_data=[],
            ),
            4,
        ),
        *more_huge_requests(topic),
        # Last: its 100,000 unknown topics are each looked up in the store (the slowest).
        (
            DescribeConfigsRequest(
                resources=[res(resource_type=2, resource_name=n) for n in names],
                include_synonyms=False,
            ),
            1,
        ),
    ]
    frames = []
    for i, (req, version) in enumerate(requests):
        req.with_header(correlation_id=i, client_id="loop-stall")
        frames.append(bytes(req.encode(version=version, header=True, framed=True)))
    return frames


def more_huge_requests(topic: str) -> list[tuple[Any, int]]:
    """The other APIs whose handlers walk a client's list. Invalid topic names, unknown
    groups and partitions other than 0 are refused without a store read or write, so the
    test's topic and the store are left as they were."""
    from kafka.protocol.admin import (
        CreateTopicsRequest,
        DeleteGroupsRequest,
        DeleteTopicsRequest,
        DescribeGroupsRequest,
        IncrementalAlterConfigsRequest,
    )
    from kafka.protocol.consumer import OffsetCommitRequest, OffsetDeleteRequest
    from kafka.protocol.producer import ProduceRequest

    bad = [f"bad name {i:06d}" for i in range(50_000)]
    groups = [f"g{i:06d}" for i in range(100_000)]
    commit = OffsetCommitRequest.OffsetCommitRequestTopic
    create = CreateTopicsRequest.CreatableTopic
    produce = ProduceRequest.TopicProduceData
    alter = IncrementalAlterConfigsRequest.AlterConfigsResource
    delete = OffsetDeleteRequest.OffsetDeleteRequestTopic
    return [
        (
            OffsetCommitRequest(
                group_id="loop-stall",
                generation_id_or_member_epoch=-1,
                member_id="",
                topics=[
                    commit(
                        name=n,
                        partitions=[
                            commit.OffsetCommitRequestPartition(
                                partition_index=0, committed_offset=0, committed_metadata=""
                            )
                        ],
                    )
                    for n in bad
                ],
            ),
            2,
        ),
        (
            CreateTopicsRequest(
                topics=[
                    create(
                        name=n, num_partitions=1, replication_factor=1, assignments=[], configs=[]
                    )
                    for n in bad
                ],
                timeout_ms=5000,
                validate_only=True,
            ),
            2,
        ),
        (DeleteTopicsRequest(topic_names=bad, timeout_ms=5000), 1),
        (
            ProduceRequest(
                transactional_id=None,
                acks=1,
                timeout_ms=5000,
                topic_data=[
                    produce(
                        name=topic,
                        partition_data=[
                            produce.PartitionProduceData(index=i, records=None)
                            for i in range(1, 100_000)
                        ],
                    )
                ],
            ),
            7,
        ),
        (
            IncrementalAlterConfigsRequest(
                resources=[
                    alter(
                        resource_type=2,
                        resource_name=n,
                        configs=[
                            alter.AlterableConfig(
                                name="retention.ms", config_operation=0, value="60000"
                            )
                        ],
                    )
                    for n in bad[:25_000]
                ],
                validate_only=True,
            ),
            0,
        ),
        (DescribeGroupsRequest(groups=groups), 0),
        (DeleteGroupsRequest(groups_names=groups), 0),
        (
            OffsetDeleteRequest(
                group_id="loop-stall",
                topics=[
                    delete(
                        name=topic,
                        partitions=[
                            delete.OffsetDeleteRequestPartition(partition_index=i)
                            for i in range(200_000)
                        ],
                    )
                ],
            ),
            0,
        ),
    ]


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("closed by the gateway")
        buf += chunk
    return bytes(buf)


class Attacker(threading.Thread):
    """Sends its huge requests round-robin on one connection, each after the last answer."""

    def __init__(self, port: int, frames: list[bytes], first: int, stop: threading.Event):
        super().__init__(daemon=True)
        self.port, self.frames, self.next, self.stop = port, frames, first, stop
        self.answered = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=300) as sock:
                while not self.stop.is_set():
                    frame = self.frames[self.next % len(self.frames)]
                    self.next += 1
                    sock.sendall(frame)
                    _recv_exact(sock, struct.unpack(">i", _recv_exact(sock, 4))[0])
                    self.answered += 1
        except BaseException as exc:
            self.error = exc


def test_huge_requests_beside_an_acks_all_producer(
    fault_gateway, fault_topic_name, faults_report
) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    gw = fault_gateway()
    topic = fault_topic_name
    acked: dict[int, bytes] = {}
    latencies: list[float] = []
    failures: list[str] = []
    producer = Producer(
        {"bootstrap.servers": gw.bootstrap, "acks": "all", "linger.ms": 0, "retries": 0}
    )

    def delivered(err: Any, msg: Any, sent: float) -> None:
        if err is not None:
            failures.append(str(err))
            return
        latencies.append((time.perf_counter() - sent) * 1000)
        acked[msg.offset()] = msg.value()

    def produce(n: int) -> None:
        sent = time.perf_counter()
        producer.produce(topic, b"m%06d" % n, on_delivery=lambda e, m, s=sent: delivered(e, m, s))

    produce(0)  # creates the topic
    assert producer.flush(30) == 0 and not failures, failures
    latencies.clear()

    frames = huge_requests(topic)
    stop = threading.Event()
    # Each attacker its share, so that between them every kind is sent within SECONDS.
    attackers = [Attacker(gw.port, frames[i::ATTACKERS], 0, stop) for i in range(ATTACKERS)]
    for a in attackers:
        a.start()
    time.sleep(0.2)  # the first huge requests are in before measuring
    start, n = time.perf_counter(), 1
    while (now := time.perf_counter()) - start < SECONDS:
        due = start + (n - 1) / RATE
        if now >= due:
            produce(n)
            n += 1
        producer.poll(0.001)
    left = producer.flush(120)
    stop.set()
    for a in attackers:
        a.join(300)

    ordered = sorted(latencies)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] if ordered else -1.0

    figures = {
        "sent": n,
        "acked": len(acked),
        "failed": len(failures) + left,
        "p50_ms": round(pct(50), 2),
        "p99_ms": round(pct(99), 2),
        "max_ms": round(ordered[-1], 2) if ordered else -1,
        "huge_answered": sum(a.answered for a in attackers),
    }
    faults_report(**figures)
    print(f"\nproduce beside huge requests: {figures}")
    assert not failures and left == 0, failures[:5]
    assert all(a.error is None for a in attackers), [a.error for a in attackers]
    assert figures["huge_answered"] >= ATTACKERS  # the huge requests were served too

    # Every acknowledged message is stored at its offset with its value.
    consumer = Consumer(
        {
            "bootstrap.servers": gw.bootstrap,
            "group.id": f"{topic}-check",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    stored: dict[int, bytes] = {}
    deadline = time.monotonic() + 60
    while len(stored) < len(acked) and time.monotonic() < deadline:
        for msg in consumer.consume(500, 1.0):
            if msg.error() is None:
                stored[msg.offset()] = msg.value()
    consumer.close()
    missing = [o for o, v in acked.items() if stored.get(o) != v]
    assert not missing, f"{len(missing)} acknowledged messages not stored, e.g. {missing[:5]}"
