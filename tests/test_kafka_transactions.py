"""Kafka transactions on the wire (raw requests, exact error codes): InitProducerId with a
transactional id, AddPartitionsToTxn, transactional Produce, EndTxn, AddOffsetsToTxn,
TxnOffsetCommit, OffsetFetch(require_stable), the timeout, DescribeTransactions,
ListTransactions, FindCoordinator and the HTTP view of a Kafka transaction."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import kafka_requests as kr
import pytest
from gateway_harness import FailingWrite, GatewayThread, RawClient, gateway_thread
from kafka.protocol.admin.transactions import (
    DescribeTransactionsRequest,
    ListTransactionsRequest,
)
from kafka.protocol.consumer import JoinGroupRequest, OffsetFetchRequest
from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest
from tmsgate.gateway.kafka.txn.model import TXN_AREA, TxnState, decode_record
from tmsgate.protocol import TX_HEADER, ApiKey, ErrorCode

E = ErrorCode
PRODUCE_V, FETCH_V, CREATE_V = 9, 12, 5
UNKNOWN_MEMBER_ID = 25
_ids = itertools.count()


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with gateway_thread(tmp_path_factory.mktemp("txn"), http=True) as g:
        yield g


@pytest.fixture
def client(gw: GatewayThread) -> Any:
    c = RawClient(gw.address)
    yield c
    c.close()


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_ids)}"


def create(client: RawClient, *topics: str) -> None:
    for t in topics:
        assert client.request(kr.create_topic(t), CREATE_V).topics[0].error_code == 0


def fetched(client: RawClient, topic: str, offset: int = 0, isolation: int = 0) -> Any:
    """(partition response, [records]) of a Fetch from ``offset``."""
    p = kr.partition(client.request(kr.fetch(topic, offset, isolation_level=isolation), FETCH_V))
    assert p.error_code == 0
    return p, [r for _, recs in kr.records_of(p.records) for r in recs]


def values(client: RawClient, topic: str, isolation: int = 0) -> list[tuple[int, bytes]]:
    return [(r.offset, r.value) for r in fetched(client, topic, 0, isolation)[1]]


def plain_produce(client: RawClient, topic: str, n: int = 1) -> Any:
    return kr.partition(client.request(kr.produce(topic, kr.batch(n)), PRODUCE_V))


class Producer:
    """One transactional producer instance, speaking through a raw client."""

    def __init__(self, client: RawClient, tid: str, timeout_ms: int = 60_000) -> None:
        self.client, self.tid = client, tid
        resp = client.request(kr.init_producer_id(tid, timeout_ms), 4)
        assert resp.error_code == 0, resp
        self.pid, self.epoch = resp.producer_id, resp.producer_epoch
        self.seq = 0

    def add(self, *topics: str, version: int = 3, epoch: int | None = None) -> dict[str, int]:
        req = kr.add_partitions_to_txn(
            self.tid, self.pid, self.epoch if epoch is None else epoch, {t: [0] for t in topics}
        )
        resp = self.client.request(req, version)
        return {
            f"{t.name}/{p.partition_index}": p.partition_error_code
            for t in resp.results_by_topic_v3_and_below
            for p in t.results_by_partition
        }

    def batch(self, records: list[kr.Record] | int, seq: int | None = None, **kw: Any) -> bytes:
        n = records if isinstance(records, int) else len(records)
        if seq is None:
            seq, self.seq = self.seq, self.seq + n
        kw.setdefault("epoch", self.epoch)
        return kr.batch(records, producer_id=self.pid, base_sequence=seq, transactional=True, **kw)

    def produce(self, topic: str, raw: bytes) -> Any:
        req = kr.produce(topic, raw, transactional_id=self.tid)
        return kr.partition(self.client.request(req, PRODUCE_V))

    def send(self, topic: str, records: list[kr.Record] | int, **kw: Any) -> Any:
        return self.produce(topic, self.batch(records, **kw))

    def end(self, commit: bool, version: int = 3, epoch: int | None = None) -> int:
        req = kr.end_txn(self.tid, self.pid, self.epoch if epoch is None else epoch, commit)
        return self.client.request(req, version).error_code

    def add_offsets(self, group: str) -> int:
        req = kr.add_offsets_to_txn(self.tid, self.pid, self.epoch, group)
        return self.client.request(req, 3).error_code

    def commit_offsets(
        self, group: str, topic: str, offset: int, version: int = 3, **kw: Any
    ) -> int:
        req = kr.txn_offset_commit(
            self.tid, self.pid, self.epoch, group, {(topic, 0): offset}, **kw
        )
        [t] = self.client.request(req, version).topics
        return t.partitions[0].error_code


def describe(client: RawClient, *tids: str) -> list[Any]:
    resp = client.request(DescribeTransactionsRequest(transactional_ids=list(tids)), 0)
    return resp.transaction_states


# --- InitProducerId ----------------------------------------------------------------------------
def test_init_producer_id_validates_and_bumps_the_epoch(client: RawClient) -> None:
    assert client.request(kr.init_producer_id(""), 4).error_code == E.INVALID_REQUEST
    tid = unique("init")
    for bad in (0, 900_001):
        resp = client.request(kr.init_producer_id(tid, bad), 4)
        assert (resp.error_code, resp.producer_id) == (E.INVALID_TRANSACTION_TIMEOUT, -1)
    first = client.request(kr.init_producer_id(tid, 900_000), 4)
    assert (first.error_code, first.producer_epoch) == (0, 0) and first.producer_id >= 0
    second = client.request(kr.init_producer_id(tid), 4)
    assert (second.error_code, second.producer_id, second.producer_epoch) == (
        0,
        first.producer_id,
        1,
    )
    # v3+ (KIP-360): an instance naming itself must be the current one.
    pid = first.producer_id
    for version, code in (
        (4, E.PRODUCER_FENCED),
        (5, E.PRODUCER_FENCED),
        (3, E.INVALID_PRODUCER_EPOCH),
    ):
        for wrong in ((pid, 0), (pid + 1000, 1)):
            resp = client.request(kr.init_producer_id(tid, 60_000, *wrong), version)
            assert (resp.error_code, resp.producer_id, resp.producer_epoch) == (code, -1, -1)
    bumped = client.request(kr.init_producer_id(tid, 60_000, pid, 1), 4)
    assert (bumped.error_code, bumped.producer_id, bumped.producer_epoch) == (0, pid, 2)


def test_a_retried_epoch_bump_is_answered_not_fenced(client: RawClient) -> None:
    tid = unique("init-retry")
    first = client.request(kr.init_producer_id(tid), 4)
    pid = first.producer_id
    bump = kr.init_producer_id(tid, 60_000, pid, 0)
    assert client.request(bump, 4).producer_epoch == 1
    retry = client.request(bump, 4)  # the first answer was lost: the client sends it again
    assert (retry.error_code, retry.producer_id, retry.producer_epoch) == (0, pid, 1)


# --- AddPartitionsToTxn ------------------------------------------------------------------------
@pytest.mark.parametrize("version", [3, 1])
def test_add_partitions_errors(client: RawClient, version: int) -> None:
    topic = unique("apt")
    create(client, topic)
    p = Producer(client, unique("apt-id"))
    missing = unique("apt-missing")
    assert p.add(topic, missing, version=version) == {
        f"{topic}/0": E.OPERATION_NOT_ATTEMPTED,
        f"{missing}/0": E.UNKNOWN_TOPIC_OR_PARTITION,
    }
    req = kr.add_partitions_to_txn(p.tid, p.pid, p.epoch, {topic: [1]})
    [t] = client.request(req, version).results_by_topic_v3_and_below
    assert [r.partition_error_code for r in t.results_by_partition] == [
        E.UNKNOWN_TOPIC_OR_PARTITION
    ]
    req = kr.add_partitions_to_txn(p.tid, p.pid + 1000, p.epoch, {topic: [0]})
    [t] = client.request(req, version).results_by_topic_v3_and_below
    assert t.results_by_partition[0].partition_error_code == E.INVALID_PRODUCER_ID_MAPPING
    old = p.epoch
    p.epoch = Producer(client, p.tid).epoch
    fenced = E.PRODUCER_FENCED if version >= 2 else E.INVALID_PRODUCER_EPOCH
    assert p.add(topic, version=version, epoch=old) == {f"{topic}/0": fenced}
    # Nothing was opened by the refused requests.
    [state] = describe(client, p.tid)
    assert (state.transaction_state, state.topics) == ("Empty", [])
    assert p.add(topic, version=version) == {f"{topic}/0": E.NONE}
    assert describe(client, p.tid)[0].transaction_state == "Ongoing"
    assert p.end(False) == E.NONE


# --- transactional Produce ---------------------------------------------------------------------
def test_produce_outside_the_transaction_is_refused(client: RawClient) -> None:
    topic, other = unique("tp-out"), unique("tp-other")
    create(client, topic, other)
    p = Producer(client, unique("tp-out-id"))
    resp = p.send(topic, 1, seq=0)
    assert (resp.error_code, resp.base_offset) == (E.INVALID_TXN_STATE, -1)
    assert p.add(other) == {f"{other}/0": E.NONE}
    assert p.send(topic, 1, seq=0).error_code == E.INVALID_TXN_STATE
    assert p.end(True) == E.NONE
    assert values(client, topic) == [] and values(client, other) == []


def test_committed_records_appear_at_dense_offsets_as_sent(client: RawClient) -> None:
    topic = unique("tp-commit")
    create(client, topic)
    assert plain_produce(client, topic, 2).base_offset == 0
    p = Producer(client, unique("tp-commit-id"))
    assert p.add(topic) == {f"{topic}/0": E.NONE}
    records = [
        (b"k1", b"v1", [("h", b"x"), ("n", None)]),
        (None, b"v2", []),
        (b"k3", None, [("h", b"y")]),
    ]
    sent = p.batch(records, timestamp=1234)
    first = p.produce(topic, sent)
    assert (first.error_code, first.base_offset) == (E.NONE, -1)
    retry = p.produce(topic, sent)  # the same sequence: a retry, not stored twice
    assert (retry.error_code, retry.base_offset) == (E.NONE, -1)
    # A plain produce while the transaction is open takes the next offset at once.
    assert plain_produce(client, topic).base_offset == 2
    for isolation in (0, 1):
        part, recs = fetched(client, topic, 0, isolation)
        assert [r.offset for r in recs] == [0, 1, 2]
        assert (part.high_watermark, part.last_stable_offset) == (3, 3)
    assert p.end(True) == E.NONE
    for isolation in (0, 1):
        part, recs = fetched(client, topic, 0, isolation)
        assert (part.high_watermark, part.last_stable_offset) == (6, 6)
        got = [(r.offset, r.key, r.value, list(r.headers), r.timestamp) for r in recs[3:]]
        assert got == [
            (3, b"k1", b"v1", [("h", b"x"), ("n", None)], 1234),
            (4, None, b"v2", [], 1235),
            (5, b"k3", None, [("h", b"y")], 1236),
        ]
        assert all(TX_HEADER not in dict(r.headers) for r in recs)
        assert [r.offset for r in recs] == list(range(6))
    # Fetching from inside the committed run starts there.
    assert [r.offset for r in fetched(client, topic, 4)[1]] == [4, 5]
    assert plain_produce(client, topic).base_offset == 6


def test_a_transactional_batch_may_not_name_a_write_pointer(client: RawClient) -> None:
    topic = unique("tp-header")
    create(client, topic)
    p = Producer(client, unique("tp-header-id"))
    assert p.add(topic) == {f"{topic}/0": E.NONE}
    resp = p.send(topic, [(None, b"x", [(TX_HEADER, (12345).to_bytes(8, "big"))])], seq=0)
    assert resp.error_code == E.INVALID_RECORD
    assert p.send(topic, 1, seq=0).error_code == E.NONE
    assert p.end(True) == E.NONE
    assert values(client, topic) == [(0, b"v0")]


def test_two_topics_commit_together(client: RawClient) -> None:
    a, b = unique("tp-a"), unique("tp-b")
    create(client, a, b)
    p = Producer(client, unique("tp-two-id"))
    assert p.add(a, b) == {f"{a}/0": E.NONE, f"{b}/0": E.NONE}
    assert p.send(a, 2).error_code == E.NONE
    assert p.send(b, 3).error_code == E.NONE
    assert values(client, a) == [] and values(client, b) == []
    assert p.end(True) == E.NONE
    assert values(client, a) == [(0, b"v0"), (1, b"v1")]
    assert values(client, b, isolation=1) == [(0, b"v0"), (1, b"v1"), (2, b"v2")]


# --- EndTxn ------------------------------------------------------------------------------------
def payload_rows(gw: GatewayThread, topic: str) -> int:
    """The messages in the topic's PayloadTable rows, read from the store's backend (the
    records of Kafka transactions before their commit, and after it as the referenced
    data); a produced batch is one packed row."""
    from tmsgate.storage import TopicId, keys

    store = gw.services.store
    store.flush()  # a transactional Produce is answered before its records' write lands
    md = store.get_topic(TopicId("default", topic))
    prefix = keys.data_prefix(keys.PAYLOAD, md.topic, md.generation)
    return sum(
        keys.messages_in_row(v) for _, v in store._backend.scan(prefix, keys.prefix_end(prefix))
    )


def test_abort_leaves_nothing_and_takes_no_offsets(gw: GatewayThread, client: RawClient) -> None:
    topic = unique("end-abort")
    create(client, topic)
    p = Producer(client, unique("end-abort-id"))
    assert p.add(topic) == {f"{topic}/0": E.NONE}
    assert p.send(topic, 3).error_code == E.NONE
    assert payload_rows(gw, topic) == 3
    assert p.end(False) == E.NONE
    # The aborted records' rows are freed at once: their delete is queued before the
    # abort's record, and the store's writer is first in, first out.
    assert payload_rows(gw, topic) == 0
    assert p.end(False) == E.NONE  # a retried abort
    assert p.end(True) == E.INVALID_TXN_STATE  # commit after the abort
    for isolation in (0, 1):
        part, recs = fetched(client, topic, 0, isolation)
        assert (recs, part.high_watermark) == ([], 0)
    assert plain_produce(client, topic).base_offset == 0
    assert values(client, topic) == [(0, b"v0")]


def test_end_txn_states_and_fencing(client: RawClient) -> None:
    topic = unique("end-states")
    create(client, topic)
    p = Producer(client, unique("end-states-id"))
    assert p.end(True) == E.INVALID_TXN_STATE  # nothing open (Empty)
    assert p.end(False) == E.INVALID_TXN_STATE
    assert p.add(topic) == {f"{topic}/0": E.NONE}
    assert p.send(topic, 1).error_code == E.NONE
    assert p.end(True) == E.NONE
    assert p.end(True) == E.NONE  # a retried commit
    assert p.end(False) == E.INVALID_TXN_STATE
    assert values(client, topic) == [(0, b"v0")]
    old = p.epoch
    p.epoch = Producer(client, p.tid).epoch
    for version, code in (
        (2, E.PRODUCER_FENCED),
        (4, E.PRODUCER_FENCED),
        (1, E.INVALID_PRODUCER_EPOCH),
    ):
        assert p.end(True, version, epoch=old) == code
    req = kr.end_txn(p.tid, p.pid + 1000, p.epoch, True)
    assert client.request(req, 3).error_code == E.INVALID_PRODUCER_ID_MAPPING


def test_init_producer_id_aborts_the_open_transaction(client: RawClient) -> None:
    topic = unique("init-abort")
    create(client, topic)
    p = Producer(client, unique("init-abort-id"))
    assert p.add(topic) == {f"{topic}/0": E.NONE}
    assert p.send(topic, 2).error_code == E.NONE
    fresh = Producer(client, p.tid)
    assert (fresh.pid, fresh.epoch) == (p.pid, p.epoch + 1)
    assert p.send(topic, 1).error_code == E.INVALID_PRODUCER_EPOCH
    assert p.end(True) == E.PRODUCER_FENCED
    assert describe(client, p.tid)[0].transaction_state == "Empty"
    assert fresh.add(topic) == {f"{topic}/0": E.NONE}
    assert fresh.send(topic, 1).error_code == E.NONE
    assert fresh.end(True) == E.NONE
    assert values(client, topic) == [(0, b"v0")]


# --- offsets in a transaction ------------------------------------------------------------------
def stable_offset(client: RawClient, group: str, topic: str, require_stable: bool) -> Any:
    """The committed offset (or the partition's error) by OffsetFetch v7 and v8, which
    must agree."""
    [t] = client.request(kr.offset_fetch(group, topic, require_stable), 7).topics
    v7 = t.partitions[0].error_code or t.partitions[0].committed_offset
    wanted = OffsetFetchRequest.OffsetFetchRequestGroup.OffsetFetchRequestTopics(
        name=topic, partition_indexes=[0]
    )
    one = OffsetFetchRequest.OffsetFetchRequestGroup(
        group_id=group, member_id=None, member_epoch=-1, topics=[wanted]
    )
    resp = client.request(OffsetFetchRequest(groups=[one], require_stable=require_stable), 8)
    [g] = resp.groups
    assert g.error_code == 0
    [part] = g.topics[0].partitions
    assert (part.error_code or part.committed_offset) == v7
    return v7


def test_txn_offset_commit(client: RawClient) -> None:
    topic, group = unique("off"), unique("off-group")
    create(client, topic)
    resp = client.request(kr.offset_commit(group, topic, 5), 2)
    assert resp.topics[0].partitions[0].error_code == 0
    p = Producer(client, unique("off-id"))
    assert p.commit_offsets(group, topic, 10) == E.INVALID_TXN_STATE
    assert p.add_offsets(group) == E.NONE
    assert p.commit_offsets(group, topic, 10) == E.NONE
    assert stable_offset(client, group, topic, True) == E.UNSTABLE_OFFSET_COMMIT
    assert stable_offset(client, group, topic, False) == 5
    assert p.end(True) == E.NONE
    assert stable_offset(client, group, topic, True) == 10
    # aborted: the offset stays where it was
    assert p.add_offsets(group) == E.NONE
    assert p.commit_offsets(group, topic, 20, version=0) == E.NONE
    assert stable_offset(client, group, topic, True) == E.UNSTABLE_OFFSET_COMMIT
    assert p.end(False) == E.NONE
    assert stable_offset(client, group, topic, True) == 10
    assert stable_offset(client, group, topic, False) == 10


def test_txn_offset_commit_checks_the_member(client: RawClient) -> None:
    topic, group = unique("off-member"), unique("off-member-group")
    create(client, topic)
    proto = JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")
    join = JoinGroupRequest(
        group_id=group,
        session_timeout_ms=30_000,
        rebalance_timeout_ms=5_000,
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=[proto],
        reason=None,
    )
    first = client.request(join, 9)
    join.member_id = first.member_id
    joined = client.request(join, 9)
    assert joined.error_code == 0
    p = Producer(client, unique("off-member-id"))
    assert p.add_offsets(group) == E.NONE
    kw = {"generation": joined.generation_id}
    assert p.commit_offsets(group, topic, 3, member_id="nobody", **kw) == UNKNOWN_MEMBER_ID
    assert p.commit_offsets(group, topic, 3, member_id=joined.member_id, **kw) == E.NONE
    assert p.end(True) == E.NONE
    assert stable_offset(client, group, topic, True) == 3


# --- the timeout -------------------------------------------------------------------------------
def test_a_timed_out_transaction_is_aborted_and_fenced(tmp_path: Any) -> None:
    # The store's clock is moved past the timeout, and the expiry (run every second by the
    # gateway) is run at once: no waiting for time to pass.
    moved = [0]

    def clock() -> int:
        return time.time_ns() // 1_000_000 + moved[0]

    with gateway_thread(tmp_path, clock=clock) as timed:
        client = RawClient(timed.address)
        topic = unique("timeout")
        create(client, topic)
        p = Producer(client, unique("timeout-id"), timeout_ms=1000)
        assert p.add(topic) == {f"{topic}/0": E.NONE}
        assert p.send(topic, 2).error_code == E.NONE
        txns = timed.broker.txns
        assert timed.run(txns.expire()) == []  # within its timeout
        assert describe(client, p.tid)[0].transaction_state == "Ongoing"
        moved[0] += 1001
        timed.run(txns.expire())  # (or the gateway's own expiry got there first)
        state = describe(client, p.tid)[0]
        assert state.transaction_state == "CompleteAbort"
        assert (state.producer_id, state.producer_epoch) == (p.pid, p.epoch + 1)
        assert p.send(topic, 1).error_code == E.INVALID_PRODUCER_EPOCH
        assert p.end(True) == E.PRODUCER_FENCED
        assert values(client, topic) == [] and plain_produce(client, topic).base_offset == 0
        client.close()


@contextmanager
def failing_payload_writes(tmp_path: Any, prefix: str) -> Iterator[tuple[Any, ...]]:
    """A gateway whose next PayloadTable write fails once armed (a disk error at the
    fsync), a client, a topic and a transactional producer with its first 2 records
    written. -> (gateway, disk, client, topic, producer)."""
    with gateway_thread(tmp_path, engine="failing-leveldb") as failing:
        disk = FailingWrite.at(tmp_path / "store", b"P")
        client = RawClient(failing.address)
        topic = unique(prefix)
        create(client, topic)
        p = Producer(client, unique(f"{prefix}-id"))
        assert p.add(topic) == {f"{topic}/0": E.NONE}
        assert p.send(topic, 2).error_code == E.NONE
        assert payload_rows(failing, topic) == 2
        try:
            yield failing, disk, client, topic, p
        finally:
            client.close()


def test_a_failed_write_of_answered_records_aborts_the_transaction(tmp_path: Any) -> None:
    """A transactional Produce is answered before its records are on disk (nobody reads
    them before the commit, and a restart aborts open transactions anyway). If their
    write then fails, the commit must not go on without them: EndTxn aborts the
    transaction and fences the producer (as a timeout does); nothing becomes visible, and
    the next instance of the transactional id works."""
    with failing_payload_writes(tmp_path, "lost-write") as (failing, disk, client, topic, p):
        disk.armed = True
        assert p.send(topic, 3).error_code == E.NONE  # answered; its write fails after
        assert p.end(True) == E.PRODUCER_FENCED
        state = describe(client, p.tid)[0]
        assert state.transaction_state == "CompleteAbort"
        assert (state.producer_id, state.producer_epoch) == (p.pid, p.epoch + 1)
        assert values(client, topic) == [] and plain_produce(client, topic).base_offset == 0

        again = Producer(client, p.tid)  # the next instance commits as usual
        assert again.add(topic) == {f"{topic}/0": E.NONE}
        assert again.send(topic, 2).error_code == E.NONE
        assert again.end(True) == E.NONE
        assert [o for o, _ in values(client, topic)] == [0, 1, 2]  # the plain one, then 2
        assert failing.broker.producers.unwritten_txn_bytes == 0  # every write ended


def test_past_the_bound_a_transactional_produce_waits_for_its_write(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Answered-but-unwritten transactional records are bounded (MAX_UNWRITTEN_TXN_BYTES):
    past it, a Produce waits for its write, so a failed write is its own error (as for
    any Produce) and the client may abort and go on, unfenced."""
    from tmsgate.gateway.kafka.handlers import produce

    monkeypatch.setattr(produce, "MAX_UNWRITTEN_TXN_BYTES", 0)
    with failing_payload_writes(tmp_path, "bounded") as (failing, disk, client, topic, p):
        disk.armed = True
        assert p.send(topic, 3).error_code == E.KAFKA_STORAGE_ERROR
        assert p.end(False) == E.NONE
        assert describe(client, p.tid)[0].producer_epoch == p.epoch  # not fenced
        assert values(client, topic) == []
        assert failing.broker.producers.unwritten_txn_bytes == 0


def test_a_transaction_is_durable_before_add_partitions_is_answered(tmp_path: Any) -> None:
    """AddPartitionsToTxn that begins a transaction is answered once the transaction and
    its record (Ongoing) are on disk, as Kafka writes its log first: answered before, a
    restart could lose both, and the producer's EndTxn would then read as a retry of its
    previous commit (answered as committed, its records gone). A failed write is
    COORDINATOR_NOT_AVAILABLE, which clients retry."""
    with gateway_thread(tmp_path, engine="failing-leveldb") as gw:
        client = RawClient(gw.address)
        topic = unique("durable-begin")
        create(client, topic)
        p = Producer(client, unique("durable-begin-id"))
        disk = FailingWrite.at(tmp_path / "store", b"S")  # the next write of a state row
        disk.armed = True
        assert p.add(topic) == {f"{topic}/0": E.COORDINATOR_NOT_AVAILABLE}
        assert describe(client, p.tid)[0].transaction_state == "CompleteAbort"
        assert p.add(topic) == {f"{topic}/0": E.NONE}  # the retry begins it
        rows = dict(gw.services.store.scan_state(TXN_AREA))  # no flush: on disk already
        assert decode_record(p.tid, rows[p.tid]).state is TxnState.ONGOING
        assert p.send(topic, 2).error_code == E.NONE
        assert p.end(True) == E.NONE
        assert [o for o, _ in values(client, topic)] == [0, 1]
        client.close()


def test_the_complete_row_is_written_late(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a commit, the record's CompleteCommit row is written a little later
    (COMPLETE_WRITE_DELAY_S), or not at all if the producer's next transaction replaces
    it first: one write fewer per transaction. Until then the row says PrepareCommit,
    whose replay at a restart changes nothing (test_kafka_txn_kill9 stops there). A
    graceful stop writes it."""
    from tmsgate.gateway.kafka.txn import coordinator

    monkeypatch.setattr(coordinator, "COMPLETE_WRITE_DELAY_S", 3600.0)
    topic, tid = unique("late-complete"), unique("late-complete-id")

    def state(gw: GatewayThread) -> TxnState:
        gw.services.store.flush()
        return decode_record(tid, dict(gw.services.store.scan_state(TXN_AREA))[tid]).state

    with gateway_thread(tmp_path) as gw:
        client = RawClient(gw.address)
        create(client, topic)
        p = Producer(client, tid)
        for _ in range(2):
            assert p.add(topic) == {f"{topic}/0": E.NONE}
            assert state(gw) is TxnState.ONGOING  # replaced the row of the one before
            assert p.send(topic, 1).error_code == E.NONE
            assert p.end(True) == E.NONE
            assert describe(client, tid)[0].transaction_state == "CompleteCommit"
            assert state(gw) is TxnState.PREPARE_COMMIT  # not written yet
        client.close()
    with gateway_thread(tmp_path) as gw:
        assert state(gw) is TxnState.COMPLETE_COMMIT  # written by the graceful stop
        client = RawClient(gw.address)
        assert [o for o, _ in values(client, topic)] == [0, 1]
        client.close()


def test_an_idle_transactional_id_is_forgotten(tmp_path: Any) -> None:
    """Kafka's transactional.id.expiration.ms: an id with no transaction open and no use for
    that long is forgotten (memory and row); one with a transaction open is kept. The
    store's clock is moved, not waited for."""
    moved = [0]

    def clock() -> int:
        return time.time_ns() // 1_000_000 + moved[0]

    with gateway_thread(tmp_path, clock=clock, transactional_id_expiration_ms=60_000) as timed:
        client = RawClient(timed.address)
        topic = unique("idle")
        create(client, topic)
        idle = Producer(client, unique("idle-id"))
        assert idle.add(topic) == {f"{topic}/0": E.NONE}
        assert idle.send(topic, 2).error_code == E.NONE
        assert idle.end(True) == E.NONE
        busy = Producer(client, unique("busy-id"), timeout_ms=600_000)
        assert busy.add(topic) == {f"{topic}/0": E.NONE}
        txns = timed.broker.txns
        assert timed.run(txns.forget_idle()) == []  # not idle long enough yet
        moved[0] += 60_001
        assert timed.run(txns.forget_idle()) in ([idle.tid], [])  # [] if the gateway's own
        missing, kept = describe(client, idle.tid, busy.tid)  # check got there first
        assert missing.error_code == E.TRANSACTIONAL_ID_NOT_FOUND
        assert (kept.error_code, kept.transaction_state) == (0, "Ongoing")
        assert [k for k, _ in timed.broker.store.scan_state("kafka.txn")] == [busy.tid]
        # The forgotten instance is no longer the id's producer; a new one starts afresh.
        assert idle.add(topic) == {f"{topic}/0": E.INVALID_PRODUCER_ID_MAPPING}
        again = Producer(client, idle.tid)
        assert again.pid != idle.pid and again.epoch == 0
        assert again.add(topic) == {f"{topic}/0": E.NONE}
        assert again.send(topic, 1).error_code == E.NONE
        assert again.end(True) == E.NONE
        assert busy.send(topic, 1).error_code == E.NONE
        assert busy.end(True) == E.NONE
        assert [offset for offset, _ in values(client, topic)] == [0, 1, 2, 3]
        client.close()


# --- DescribeTransactions / ListTransactions / FindCoordinator / ApiVersions -------------------
def test_describe_transactions(client: RawClient) -> None:
    topic = unique("desc")
    create(client, topic)
    unknown = unique("desc-unknown")
    p = Producer(client, unique("desc-id"), timeout_ms=45_000)
    before = int(time.time() * 1000)
    assert p.add(topic) == {f"{topic}/0": E.NONE}
    missing, state = describe(client, unknown, p.tid)
    assert (missing.error_code, missing.transactional_id) == (E.TRANSACTIONAL_ID_NOT_FOUND, unknown)
    assert state.error_code == 0 and state.transactional_id == p.tid
    assert (state.transaction_state, state.producer_id, state.producer_epoch) == (
        "Ongoing",
        p.pid,
        p.epoch,
    )
    assert state.transaction_timeout_ms == 45_000
    assert state.transaction_start_time_ms >= before - 1000
    assert [(t.topic, list(t.partitions)) for t in state.topics] == [(topic, [0])]
    assert p.end(True) == E.NONE
    done = describe(client, p.tid)[0]
    assert (done.transaction_state, done.topics) == ("CompleteCommit", [])


@pytest.mark.parametrize("version", [0, 1])
def test_list_transactions(client: RawClient, version: int) -> None:
    topic = unique("list")
    create(client, topic)
    ongoing, committed = (
        Producer(client, unique("list-open")),
        Producer(client, unique("list-done")),
    )
    assert ongoing.add(topic) == {f"{topic}/0": E.NONE}
    assert committed.add(topic) == {f"{topic}/0": E.NONE}
    assert committed.end(True) == E.NONE
    mine = {ongoing.tid, committed.tid}

    def listed(states: list[str] = (), pids: list[int] = (), duration: int = -1) -> Any:
        req = ListTransactionsRequest(
            state_filters=list(states), producer_id_filters=list(pids), duration_filter=duration
        )
        resp = client.request(req, version)
        assert resp.error_code == 0
        got = {
            (s.transactional_id, s.producer_id, s.transaction_state)
            for s in resp.transaction_states
            if s.transactional_id in mine
        }
        return got, list(resp.unknown_state_filters)

    open_row = (ongoing.tid, ongoing.pid, "Ongoing")
    done_row = (committed.tid, committed.pid, "CompleteCommit")
    assert listed() == ({open_row, done_row}, [])
    assert listed(["Ongoing"]) == ({open_row}, [])
    assert listed(["CompleteCommit"]) == ({done_row}, [])
    assert listed(["Ongoing", "CompleteCommit"]) == ({open_row, done_row}, [])
    assert listed(pids=[committed.pid]) == ({done_row}, [])
    assert listed(["Ongoing"], [committed.pid]) == (set(), [])
    assert listed(["Bogus", "Ongoing"]) == ({open_row}, ["Bogus"])
    if version >= 1:
        assert listed(duration=3_600_000) == (set(), [])
    assert ongoing.end(False) == E.NONE


def test_find_coordinator_for_transactions(gw: GatewayThread, client: RawClient) -> None:
    req = FindCoordinatorRequest(key=unique("fc-id"), key_type=1)
    resp = client.request(req, 1)
    assert resp.error_code == 0
    assert (resp.node_id, resp.host, resp.port) == (gw.broker.config.node_id, *gw.address)


def test_api_versions_advertise_the_transaction_apis(client: RawClient) -> None:
    resp = client.request(ApiVersionsRequest(), 2)
    got = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert got[ApiKey.INIT_PRODUCER_ID] == (0, 5)
    assert got[ApiKey.ADD_PARTITIONS_TO_TXN] == (0, 3)
    assert got[ApiKey.ADD_OFFSETS_TO_TXN] == (0, 3)
    assert got[ApiKey.END_TXN] == (0, 4)
    assert got[ApiKey.TXN_OFFSET_COMMIT] == (0, 4)
    assert got[ApiKey.DESCRIBE_TRANSACTIONS] == (0, 0)
    assert got[ApiKey.LIST_TRANSACTIONS] == (0, 1)


# --- HTTP --------------------------------------------------------------------------------------
def test_http_lists_the_kafka_transaction(gw: GatewayThread, client: RawClient) -> None:
    topic = unique("http")
    create(client, topic)
    p = Producer(client, unique("http-id"))
    assert p.add(topic) == {f"{topic}/0": E.NONE}
    wp = gw.call(lambda: gw.broker.txns.describe(p.tid).write_pointer)
    assert wp > 0

    def open_pointers() -> set[int]:
        resp = httpx.get(f"{gw.http_url}/v1/transactions", timeout=10)
        assert resp.status_code == 200
        return {t["writePointer"] for t in resp.json()["inProgress"]}

    assert wp in open_pointers()
    # The HTTP API may not end a Kafka transaction.
    resp = httpx.post(f"{gw.http_url}/v1/transactions/{wp}/commit", timeout=10)
    assert resp.status_code >= 400 and p.tid in resp.text
    assert p.send(topic, 1).error_code == E.NONE
    assert p.end(True) == E.NONE
    assert wp not in open_pointers()
    assert httpx.get(f"{gw.http_url}/v1/transactions/{wp}", timeout=10).json()["state"] == (
        "committed"
    )
    assert values(client, topic) == [(0, b"v0")]


def test_a_commit_stopped_after_the_tms_commit_is_finished_by_the_retry(tmp_path: Any) -> None:
    """The group offsets of a commit fail after its TMS commit (a group's coordinator
    moving, in a cluster): EndTxn answers COORDINATOR_NOT_AVAILABLE and librdkafka
    retries it. The retry finds the transaction committed and carries on with the
    offsets; it must not abort and fence (the records are visible: the input would be
    processed twice)."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from tmsgate.storage import StorageError

    with gateway_thread(tmp_path) as gw:
        failed: list[str] = []

        async def fail_offsets_once(step: str) -> None:
            if step == "offsets" and not failed:
                failed.append(step)
                raise StorageError("injected: the group's coordinator is moving")

        gw.services.commits.before_step = fail_offsets_once
        boot = gw.bootstrap
        source = Producer({"bootstrap.servers": boot})
        for i in range(5):
            source.produce("retry-in", value=b"in-%d" % i)
        assert source.flush(30) == 0
        group = Consumer(
            {
                "bootstrap.servers": boot,
                "group.id": "retry-group",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        group.subscribe(["retry-in"])
        got: list[Any] = []
        deadline = time.monotonic() + 30
        while len(got) < 5:
            assert time.monotonic() < deadline, got
            got += [m for m in group.consume(10, 1.0) if m.error() is None]
        p = Producer({"bootstrap.servers": boot, "transactional.id": "retry-t", "linger.ms": 1})
        p.init_transactions(30)
        p.begin_transaction()
        for m in got:
            p.produce("retry-out", value=b"out-" + m.value())
        p.send_offsets_to_transaction(
            [TopicPartition("retry-in", 0, 5)], group.consumer_group_metadata(), 30
        )
        p.commit_transaction(30)  # retried by the client; succeeds
        assert failed == ["offsets"]
        check = Consumer({"bootstrap.servers": boot, "group.id": "retry-group"})
        (committed,) = check.committed([TopicPartition("retry-in", 0)], timeout=10)
        check.close()
        group.close()
        assert committed.offset == 5
        p.begin_transaction()  # not fenced
        p.produce("retry-out", value=b"next")
        p.commit_transaction(30)
