"""Fetch read-ahead (gateway/kafka/readahead.py) with real clients: a consumer reading old
data from the store gets every record once, in order, with key, headers and timestamp,
whether its fetch read the store itself or found the chunk read ahead; transactional
records in between are served as before (never kept by read-ahead)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from gateway_harness import GatewayThread, gateway_thread
from tmsgate.storage import Entry, TopicId, open_store

TS = 1_700_000_000_000


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with gateway_thread(tmp_path_factory.mktemp("ahead")) as g:
        yield g


def readahead_messages(gw: GatewayThread) -> float:
    value = gw.broker.metrics.registry.get_sample_value(
        "tmsgate_kafka_fetch_readahead_messages_total"
    )
    return value or 0.0


def produce(bootstrap: str, topic: str, first: int, n: int, **conf: Any) -> None:
    # Batches of 40 records of ~250 bytes stay under the batch cache's MIN_BYTES, so no
    # produced batch is kept: every fetch below is served from the store (or read ahead).
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, "batch.num.messages": 40, **conf})
    for i in range(first, first + n):
        p.produce(
            topic,
            key=None if i % 5 == 0 else b"k%d" % i,
            value=b"v%d." % i + b"x" * 240,
            headers=[("n", b"%d" % i)] if i % 3 else None,
            timestamp=TS + i,
        )
    assert p.flush(15) == 0


def consume(bootstrap: str, topic: str, upto: int, **conf: Any) -> list[tuple]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{topic}",
            "enable.auto.commit": False,
            # small fetches: many of them, each a chance for the next to be read ahead
            "max.partition.fetch.bytes": 16_384,
            "fetch.queue.backoff.ms": 10,
            **conf,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple] = []
    try:
        for _ in range(200):  # a bound, so that a lost record fails the test, not hangs it
            if out and out[-1][0] >= upto - 1:
                break
            for m in c.consume(500, 1):
                assert m.error() is None, m.error()
                out.append((m.offset(), m.key(), m.value(), m.headers(), m.timestamp()[1]))
    finally:
        c.close()
    return out


def expected(i: int) -> tuple:
    headers = [("n", b"%d" % i)] if i % 3 else None
    return (i, None if i % 5 == 0 else b"k%d" % i, b"v%d." % i + b"x" * 240, headers, TS + i)


def test_a_consumer_far_behind_gets_every_record_once_with_read_ahead(gw: GatewayThread) -> None:
    produce(gw.bootstrap, "ahead-plain", 0, 4000)
    before = readahead_messages(gw)
    got = consume(gw.bootstrap, "ahead-plain", 4000)
    assert got == [expected(i) for i in range(4000)]
    # most of the log was read ahead of the fetches that took it
    assert readahead_messages(gw) - before >= 2000
    # a second reader of the same range agrees
    assert consume(gw.bootstrap, "ahead-plain", 4000, **{"group.id": "second"}) == got


def test_transactional_records_between_plain_ones(gw: GatewayThread) -> None:
    # plain, a committed Kafka transaction, an aborted one, plain again: read-ahead keeps
    # only settled chunks, and every reader still sees the committed records once.
    topic = "ahead-txn"
    produce(gw.bootstrap, topic, 0, 1500)
    p = Producer({"bootstrap.servers": gw.bootstrap, "transactional.id": "ahead-tx"})
    p.init_transactions()
    for commit in (True, False):
        p.begin_transaction()
        for i in range(1500, 1800):
            p.produce(topic, key=b"k%d" % i, value=b"t%d" % i, timestamp=TS + i)
        p.commit_transaction() if commit else p.abort_transaction()
    produce(gw.bootstrap, topic, 1800, 1500)
    for isolation in ("read_committed", "read_uncommitted"):
        got = consume(
            gw.bootstrap, topic, 3300, **{"isolation.level": isolation, "group.id": isolation}
        )
        offsets = [g[0] for g in got]
        assert offsets == sorted(set(offsets))
        values = [g[2] for g in got]
        assert values[:1500] == [expected(i)[2] for i in range(1500)]
        assert values[1500:1800] == [b"t%d" % i for i in range(1500, 1800)]
        assert values[1800:] == [expected(i)[2] for i in range(1800, 3300)]


def test_only_plain_reads_are_settled(tmp_path: Any) -> None:
    # ReadResult.settled is what read-ahead trusts: plain messages only.
    with open_store(f"leveldb://{tmp_path / 's'}") as store:
        t = TopicId("default", "s")
        store.create_topic(t)
        store.publish(t, [Entry(b"a"), Entry(b"b")])
        assert store.read(t, offset=0).settled
        tx = store.transactions.start()
        store.publish(t, [Entry(b"c")], tx=tx)
        res = store.read(t, offset=0)
        assert [m.payload for m in res.messages] == [b"a", b"b", b"c"] and not res.settled
        assert store.read(t, offset=0, max_messages=2).settled
