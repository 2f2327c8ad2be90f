"""kill -9 at every step of a Kafka transaction's commit: exactly once, or not at all.

A confluent-kafka transactional producer writes 5 records to topic A and 3 to topic B and
sends the offset 7 of an input topic for group G with the transaction, then commits. The
gateway runs with ``TMSGATE_FAULT_COMMIT_PAUSE=<step>`` (gateway/faults.py): the commit
stops before that step and the test kills the gateway with SIGKILL while it waits there.
After a restart (and a second one, to see the replay is idempotent):

  * before ``record`` (no decision on disk): nothing of the transaction is visible to any
    reader, the group has no offset, and the producer was fenced;
  * before any later step (the decision was recorded): both topics hold the transaction's
    records exactly once, as one dense run from offset 0, for read_committed and
    read_uncommitted readers alike, and the group's offset is 7.

A commit writes the decision, the references and the TMS commit as one write; paused
before ``parts``, ``partial`` or ``commit`` the gateway takes them one write each
(``Commits.stepwise``, gateway/commits.py), which leaves what that write landing in part
leaves: the decision alone, or with its references. tests/test_storage_sealed.py cuts the one write
short after every row on memory://.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.timeout(180)

STEPS = ["record", "parts", "partial", "commit", "offsets", "done"]
A_VALUES = [f"a-{i}".encode() for i in range(5)]
B_VALUES = [f"b-{i}".encode() for i in range(3)]


def create_topics(bootstrap: str, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        fut.result(10)


def read_all(bootstrap: str, topic: str, isolation: str) -> list[tuple[int, bytes]]:
    """Every record of the topic from offset 0, until a poll finds nothing new."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        _low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        out: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                if not out or out[-1][0] + 1 >= high:
                    break
                continue
            if msg.error():
                continue
            out.append((msg.offset(), msg.value()))
        return out
    finally:
        consumer.close()


def committed_offset(bootstrap: str, group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
    finally:
        consumer.close()


@dataclass
class OpenTransaction:
    suffix: str
    topic_a: str
    topic_b: str
    source: str
    group: str
    producer: Producer


def open_transaction(gw) -> OpenTransaction:
    """A transactional producer that wrote A_VALUES to topic A and B_VALUES to topic B
    (each answered: flush() returned) and sent offset 7 of the source for the group."""
    suffix = uuid.uuid4().hex[:8]
    topic_a, topic_b, source, group = f"a-{suffix}", f"b-{suffix}", f"in-{suffix}", f"g-{suffix}"
    create_topics(gw.bootstrap, topic_a, topic_b, source)
    producer = Producer(
        {"bootstrap.servers": gw.bootstrap, "transactional.id": f"tx-{suffix}", "linger.ms": 0}
    )
    producer.init_transactions(10)
    producer.begin_transaction()
    for value in A_VALUES:
        producer.produce(topic_a, value, key=b"k")
    for value in B_VALUES:
        producer.produce(topic_b, value)
    assert producer.flush(10) == 0
    member = Consumer({"bootstrap.servers": gw.bootstrap, "group.id": group})
    producer.send_offsets_to_transaction(
        [TopicPartition(source, 0, 7)], member.consumer_group_metadata(), 10
    )
    member.close()
    return OpenTransaction(suffix, topic_a, topic_b, source, group, producer)


def commit_aside(producer: Producer) -> tuple[threading.Thread, list[object]]:
    """commit_transaction() on a thread of its own (the gateway may never answer it)."""
    outcome: list[object] = []
    committer = threading.Thread(
        target=lambda: outcome.append(_commit(producer)), name="commit", daemon=True
    )
    committer.start()
    return committer, outcome


def wait_for_log(gw, marker: str) -> None:
    deadline = time.monotonic() + 20
    while marker not in gw.log_tail(400) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker in gw.log_tail(400), gw.log_tail()


@pytest.mark.parametrize("step", STEPS)
def test_kill9_between_commit_steps(fault_gateway, step, faults_report):
    gw = fault_gateway(env={"TMSGATE_FAULT_COMMIT_PAUSE": step})
    txn = open_transaction(gw)
    topic_a, topic_b, source, group = txn.topic_a, txn.topic_b, txn.source, txn.group
    # The commit blocks (the gateway waits at the fault point): run it aside.
    committer, outcome = commit_aside(txn.producer)
    wait_for_log(gw, f"fault: commit paused before {step}")
    gw.kill9()
    gw.extra_env = {}  # restart without the fault point: the replay must run through
    gw.start()
    decided = step != "record"
    for restart in range(2):
        want_a = list(enumerate(A_VALUES)) if decided else []
        want_b = list(enumerate(B_VALUES)) if decided else []
        for isolation in ("read_committed", "read_uncommitted"):
            assert read_all(gw.bootstrap, topic_a, isolation) == want_a, (step, restart, isolation)
            assert read_all(gw.bootstrap, topic_b, isolation) == want_b, (step, restart, isolation)
        assert committed_offset(gw.bootstrap, group, source) == (7 if decided else -1001)
        if restart == 0:
            gw.crash_restart()
    # The transactional id works on: a new instance commits after the recovery.
    commit_one(gw.bootstrap, txn.suffix, topic_a, b"after")
    values = [v for _, v in read_all(gw.bootstrap, topic_a, "read_committed")]
    assert values == ([*A_VALUES, b"after"] if decided else [b"after"])
    committer.join(15)
    faults_report(step=step, decided=decided, old_producer=str(outcome[:1])[:80])


def commit_one(bootstrap: str, suffix: str, topic: str, value: bytes) -> None:
    """A new instance of the transactional id commits one record."""
    fresh = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{suffix}"})
    fresh.init_transactions(10)
    fresh.begin_transaction()
    fresh.produce(topic, value)
    fresh.commit_transaction(10)


def _commit(producer: Producer) -> object:
    try:
        producer.commit_transaction(20)
        return "committed"
    except KafkaException as exc:
        return exc.args[0].name()


def test_kill9_after_records_were_answered_before_their_write(fault_gateway, faults_report):
    """A transactional Produce is answered before its records' write lands. The gateway's
    writer is stopped before that write (``TMSGATE_FAULT_TXN_RECORDS_PAUSE``), the
    producer has its answers (flush() returned) and is committing, and the gateway is
    killed with SIGKILL. After a restart and a second one: nothing of the transaction is
    visible to any reader, the group has no offset, the old instance did not commit, and
    a new instance of the transactional id commits normally."""
    gw = fault_gateway(env={"TMSGATE_FAULT_TXN_RECORDS_PAUSE": "1"})
    txn = open_transaction(gw)  # every record answered, none written
    topic_a, topic_b, source, group = txn.topic_a, txn.topic_b, txn.source, txn.group
    wait_for_log(gw, "fault: records write paused")
    # Its EndTxn waits behind the stopped writer, or is not sent yet.
    committer, outcome = commit_aside(txn.producer)
    gw.kill9()
    gw.extra_env = {}
    gw.start()
    for restart in range(2):
        for isolation in ("read_committed", "read_uncommitted"):
            assert read_all(gw.bootstrap, topic_a, isolation) == [], (restart, isolation)
            assert read_all(gw.bootstrap, topic_b, isolation) == [], (restart, isolation)
        assert committed_offset(gw.bootstrap, group, source) == -1001
        if restart == 0:
            gw.crash_restart()
    commit_one(gw.bootstrap, txn.suffix, topic_a, b"after")
    assert read_all(gw.bootstrap, topic_a, "read_committed") == [(0, b"after")]
    committer.join(25)
    assert outcome != ["committed"], outcome
    faults_report(step="records-answered", old_producer=str(outcome[:1])[:80])
