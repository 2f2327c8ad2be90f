"""``tmsgate serve --transactional-offsets produce``: a Kafka transaction's records get their
offsets when produced, as Apache Kafka gives them (confluent-kafka).

With the default (``commit``) a transactional Produce answers offset -1 and the records
get dense offsets at the commit (docs/transactions.md). quixstreams' exactly-once keeps the
offsets its transactional producer is told, MirrorMaker 2's exactly-once syncs offsets from
them and Kafka Streams logs every -1, so this mode gives them what Kafka gives:

- every delivery report carries the record's offset, and the committed records are read
  back at exactly those offsets;
- an open transaction holds read_committed readers back at its first offset (the last
  stable offset), so a plain record produced after it is not read before the commit
  (read_uncommitted readers see the open records on Kafka, and wait too on tmsgate);
- committed records read as sent, with no header of tmsgate's own (a TMS transaction's
  records carry ``tms.tx.write_pointer``; these do not, or Kafka Streams, which copies
  headers on, could not write them into its next transaction);
- an aborted transaction's records are never read by read_committed readers;
- consume-transform-produce with send_offsets_to_transaction commits the group's offsets.

Run against Apache Kafka with ``TMSGATE_COMPAT_BOOTSTRAP`` (the same assertions hold
there: they are Kafka's behaviour), the gateway otherwise.
"""

from __future__ import annotations

import os
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def bootstrap(request: pytest.FixtureRequest) -> str:
    external = os.environ.get("TMSGATE_COMPAT_BOOTSTRAP")
    if external:
        return external
    make = request.getfixturevalue("private_gateway")
    return make(extra_args=["--transactional-offsets", "produce"]).bootstrap


def _topic(bootstrap: str) -> str:
    name = f"txoff-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(name, 1, 1)]).values():
        f.result(30)
    return name


def _producer(bootstrap: str) -> Producer:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"txoff-{uuid.uuid4().hex[:8]}",
            "linger.ms": 1,
        }
    )
    p.init_transactions(30)
    return p


def _read(bootstrap: str, topic: str, isolation: str, until: int) -> list[tuple[int, bytes]]:
    """(offset, value) of every record read from 0 until offset ``until`` is passed or
    nothing more comes for 3 s (a reader held back by an open transaction)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"r-{uuid.uuid4().hex[:8]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got: list[tuple[int, bytes]] = []
        quiet = time.monotonic() + 3
        while time.monotonic() < quiet:
            m = c.poll(0.2)
            if m is None or m.error() is not None:
                continue
            got.append((m.offset(), m.value()))
            if m.offset() >= until:
                break
            quiet = time.monotonic() + 3
        return got
    finally:
        c.close()


def _headers(bootstrap: str, topic: str, until: int) -> list[object]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"h-{uuid.uuid4().hex[:8]}"})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        found: list[object] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error() is not None:
                continue
            found += m.headers() or []
            if m.offset() >= until:
                break
        return found
    finally:
        c.close()


def test_offsets_come_with_the_produce_and_hold_readers_until_the_commit(bootstrap: str) -> None:
    topic = _topic(bootstrap)
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    reports: dict[bytes, int] = {}

    def delivered(err, msg) -> None:  # type: ignore[no-untyped-def]
        assert err is None, err
        reports[msg.value()] = msg.offset()

    plain.produce(topic, b"before", on_delivery=delivered)
    plain.flush(30)
    p = _producer(bootstrap)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, b"tx-%d" % i, on_delivery=delivered)
    p.flush(30)
    assert all(reports[b"tx-%d" % i] >= 0 for i in range(5)), reports
    offsets = [reports[b"tx-%d" % i] for i in range(5)]
    assert offsets == sorted(offsets) and offsets[0] > reports[b"before"]
    plain.produce(topic, b"after", on_delivery=delivered)
    plain.flush(30)
    # Open: read_committed stops at the transaction's first offset (Kafka's LSO); the
    # plain record after it waits too. Kafka's read_uncommitted reads the open records;
    # tmsgate's waits as read_committed does (docs/compatibility.md).
    held = _read(bootstrap, topic, "read_committed", reports[b"after"])
    assert [v for _, v in held] == [b"before"], held
    loose = [v for _, v in _read(bootstrap, topic, "read_uncommitted", reports[b"after"])]
    if os.environ.get("TMSGATE_COMPAT_BOOTSTRAP"):
        assert set(loose) >= {b"tx-%d" % i for i in range(5)} | {b"after"}, loose
    else:
        assert loose == [b"before"], loose
    p.commit_transaction(30)
    done = dict((v, o) for o, v in _read(bootstrap, topic, "read_committed", reports[b"after"]))
    assert {v: done.get(v) for v in reports} == reports, (done, reports)
    # Committed, they read as the producer sent them: no header of tmsgate's own.
    assert not _headers(bootstrap, topic, reports[b"after"]), "a record carries headers"

    # An aborted transaction: offsets answered, never read by read_committed.
    p.begin_transaction()
    p.produce(topic, b"aborted", on_delivery=delivered)
    p.flush(30)
    assert reports[b"aborted"] > reports[b"after"]
    p.abort_transaction(30)
    plain.produce(topic, b"last", on_delivery=delivered)
    plain.flush(30)
    final = _read(bootstrap, topic, "read_committed", reports[b"last"])
    values = [v for _, v in final]
    assert b"aborted" not in values and values[-1] == b"last", values


def test_consume_transform_produce_commits_offsets_with_the_records(bootstrap: str) -> None:
    source, sink = _topic(bootstrap), _topic(bootstrap)
    group = f"ctp-{uuid.uuid4().hex[:8]}"
    # The input is itself written in a transaction, as a Kafka Streams repartition topic
    # is, and its records' headers are copied on (Streams copies them).
    upstream = _producer(bootstrap)
    upstream.begin_transaction()
    for i in range(20):
        upstream.produce(source, b"in-%d" % i, headers=[("hop", b"1")])
    upstream.commit_transaction(30)
    p = _producer(bootstrap)
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([source])
    out: dict[bytes, int] = {}
    deadline = time.monotonic() + 60
    while len(out) < 20:
        assert time.monotonic() < deadline, out
        msgs = [m for m in c.consume(10, 1.0) if m.error() is None]
        if not msgs:
            continue
        p.begin_transaction()
        for m in msgs:
            value = b"out-" + m.value()
            p.produce(
                sink,
                value,
                headers=m.headers(),
                on_delivery=lambda e, r: out.__setitem__(r.value(), r.offset()),
            )
        p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 30)
        p.commit_transaction(30)
    c.close()
    assert all(o >= 0 for o in out.values())
    check = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    (committed,) = check.committed([TopicPartition(source, 0)], timeout=10)
    check.close()
    assert committed.offset == 20
    read = dict((v, o) for o, v in _read(bootstrap, sink, "read_committed", max(out.values())))
    assert read == out
