"""Sealed references (a Kafka transaction's commit: Store.publish_sealed_async) and the
transaction manager's commit decision (TransactionManager.decide, visibility_now)."""

from __future__ import annotations

import contextlib
import uuid

import pytest
from tmsgate.storage import (
    Store,
    TopicId,
    TopicNotFound,
    TransactionNotInProgress,
    Visibility,
    memory,
)
from tmsgate.storage.memory import Faults, MemoryBackend


@pytest.fixture
def store_url(any_engine_url: str) -> str:
    """Every test here runs on LevelDB and on memory:// (atomic per row only)."""
    return any_engine_url


def sealed(store: Store, topic: TopicId, tx: object) -> int:
    return store.publish_sealed_async(topic, tx).result(10)


def read(
    store: Store, topic: TopicId, **kw: object
) -> tuple[list[tuple[int, bytes, object]], int, bool]:
    res = store.read(topic, **kw)
    return [(m.offset, m.payload, m.write_pointer) for m in res.messages], res.next_offset, res.held


def test_a_sealed_run_is_held_from_every_reader_until_the_commit(
    store: Store, topic: TopicId
) -> None:
    txm = store.transactions
    assert store.publish(topic, [b"p0"]).base_offset == 0
    tx = txm.start()
    store.store(topic, [b"a", b"b", b"c"], tx)
    assert sealed(store, topic, tx) == 3
    assert sealed(store, topic, tx.write_pointer) == 0  # idempotent: already referenced
    # The run's offsets are taken: the next publish lands after it.
    assert store.publish(topic, [b"p4"]).base_offset == 4
    held = ([(0, b"p0", None)], 1, True)
    assert read(store, topic) == held
    assert read(store, topic, tx=txm.snapshot()) == held
    assert read(store, topic, offset=1) == ([], 1, True)
    assert read(store, topic, offset=2, tx=txm.snapshot()) == ([], 2, True)
    assert store.last_stable_offset(topic) == 1

    txm.commit(tx)
    everything = [(0, b"p0", None), (1, b"a", None), (2, b"b", None), (3, b"c", None)]
    everything.append((4, b"p4", None))
    assert read(store, topic) == (everything, 5, False)
    assert read(store, topic, tx=txm.snapshot()) == (everything, 5, False)
    assert read(store, topic, offset=2)[0] == everything[2:]
    assert store.last_stable_offset(topic) == 5
    assert store.offsets(topic) == (0, 5)
    assert sealed(store, topic, tx) == 0  # also once committed
    assert store.publish(topic, [b"p5"]).base_offset == 5


def test_an_invalidated_sealed_run_is_skipped(store: Store, topic: TopicId) -> None:
    txm = store.transactions
    tx = txm.start()
    store.store(topic, [b"a", b"b"], tx)
    assert sealed(store, topic, tx) == 2
    store.publish(topic, [b"after"])
    assert txm.invalidate(tx.write_pointer)
    assert read(store, topic) == ([(2, b"after", None)], 3, False)
    assert read(store, topic, tx=txm.snapshot()) == ([(2, b"after", None)], 3, False)
    assert read(store, topic, offset=1) == ([(2, b"after", None)], 3, False)


def test_sealing_nothing_takes_no_offsets(store: Store, topic: TopicId) -> None:
    store.publish(topic, [b"p0"])
    tx = store.transactions.start()
    other = TopicId("default", "other")
    store.create_topic(other)
    store.store(other, [b"elsewhere"], tx)  # payloads on another topic only
    assert sealed(store, topic, tx) == 0
    assert store.publish(topic, [b"p1"]).base_offset == 1
    store.transactions.commit(tx)
    assert read(store, topic) == ([(0, b"p0", None), (1, b"p1", None)], 2, False)


def test_sealing_on_a_missing_topic(store: Store, topic: TopicId) -> None:
    tx = store.transactions.start()
    store.store(topic, [b"a"], tx)
    store.delete_topic(topic)
    with pytest.raises(TopicNotFound):
        sealed(store, topic, tx)
    with pytest.raises(TopicNotFound):
        sealed(store, TopicId("default", "never"), tx)


def test_sealing_needs_a_transaction_in_progress(store: Store, topic: TopicId) -> None:
    tx = store.transactions.start()
    store.store(topic, [b"a"], tx)
    store.transactions.abort(tx)
    with pytest.raises(TransactionNotInProgress) as err:
        sealed(store, topic, tx)
    assert err.value.state == "aborted"
    assert store.publish(topic, [b"p0"]).base_offset == 0


# --- TransactionManager.decide / visibility_now ------------------------------------------------
def test_a_decided_transaction_only_commits(store: Store, clock) -> None:
    txm = store.transactions
    tx = txm.start(1)
    txm.decide(tx.write_pointer)
    txm.decide(tx.write_pointer)  # again: still decided
    clock.advance(5_000)
    assert txm.expire() == []
    assert txm.is_in_progress(tx.write_pointer)
    with pytest.raises(TransactionNotInProgress):
        txm.abort(tx)
    assert txm.invalidate(tx.write_pointer) is False
    assert txm.state(tx.write_pointer) == "in_progress"
    txm.commit(tx)  # past its timeout: the decision holds
    assert txm.state(tx.write_pointer) == "committed"
    with pytest.raises(TransactionNotInProgress) as err:
        txm.decide(tx.write_pointer)
    assert err.value.state == "committed"


def test_deciding_too_late(store: Store, clock) -> None:
    txm = store.transactions
    late, recovered, expired = txm.start(1), txm.start(1), txm.start(1)
    clock.advance(1_001)
    with pytest.raises(TransactionNotInProgress) as err:
        txm.decide(late.write_pointer)  # past its timeout, before expire() ran
    assert err.value.state == "invalid"
    # A recorded decision (recovery after a restart) holds even past the timeout.
    txm.decide(recovered.write_pointer, recovering=True)
    assert txm.expire() == [late.write_pointer, expired.write_pointer]
    for wp in (expired.write_pointer, late.write_pointer):
        for recovering in (False, True):
            with pytest.raises(TransactionNotInProgress) as err:
                txm.decide(wp, recovering=recovering)
            assert err.value.state == "invalid"
    txm.commit(recovered)
    assert txm.state(recovered.write_pointer) == "committed"


def test_visibility_now(store: Store) -> None:
    txm = store.transactions
    open_, done, dropped, aborted = (txm.start() for _ in range(4))
    txm.commit(done)
    assert txm.invalidate(dropped.write_pointer)
    txm.abort(aborted)
    assert txm.visibility_now(open_.write_pointer) is Visibility.HOLD
    assert txm.visibility_now(done.write_pointer) is Visibility.ACCEPT
    assert txm.visibility_now(dropped.write_pointer) is Visibility.SKIP
    assert txm.visibility_now(aborted.write_pointer) is Visibility.SKIP
    assert txm.visibility_now(-open_.write_pointer) is Visibility.SKIP
    assert txm.visibility_now(-done.write_pointer) is Visibility.SKIP


def test_an_aborted_transactions_payloads_are_discarded(store: Store, topic: TopicId) -> None:
    """discard_payloads_async: an aborted Kafka transaction's records free their rows at
    once; only for invalid transactions, and never for referenced ones."""
    txm = store.transactions
    tx = txm.start()
    store.store(topic, [b"a", b"b", b"c"], tx)
    with pytest.raises(TransactionNotInProgress):  # in progress: it may still commit
        store.discard_payloads_async(topic, tx).result(10)
    txm.abort(tx)
    assert store.discard_payloads_async(topic, tx).result(10) == 3
    assert store.discard_payloads_async(topic, tx).result(10) == 0  # idempotent
    # A later transaction on the same topic is not touched, and reads see only it.
    later = txm.start()
    store.store(topic, [b"d"], later)
    assert sealed(store, topic, later) == 1
    txm.commit(later)
    assert read(store, topic) == ([(0, b"d", None)], 1, False)
    with pytest.raises(TransactionNotInProgress):  # committed: its rows are the data
        store.discard_payloads_async(topic, later).result(10)
    # An invalid transaction whose reference was written keeps its rows (the reference
    # reads them as skipped; the janitor drops both together).
    ref = txm.start()
    store.store(topic, [b"e"], ref)
    assert sealed(store, topic, ref) == 1
    txm.invalidate(ref.write_pointer)
    assert store.discard_payloads_async(topic, ref).result(10) == 0


def test_a_whole_commit_in_one_write(store: Store, topic: TopicId) -> None:
    """commit_sealed_async: a Kafka commit's decision, references and TMS commit in one
    durable write, decided on the writer; a topic with nothing stored counts 0, and a
    topic deleted meanwhile too."""
    txm = store.transactions
    other, gone = TopicId("default", "other"), TopicId("default", "gone")
    store.create_topic(other)
    store.create_topic(gone)
    tx = txm.start()
    store.store(topic, [b"a", b"b"], tx)
    store.store(gone, [b"x"], tx)
    store.delete_topics([gone])
    decision = {("test.decision", "t1"): b"commit"}
    counts = store.commit_sealed_async(tx, [topic, other, gone], decision).result(10)
    assert counts == [2, 0, 0]
    assert txm.state(tx.write_pointer) == "committed"
    assert store.get_state("test.decision", "t1") == b"commit"
    # Sealed: committed, they read as plain messages.
    assert read(store, topic, offset=0)[0] == [(0, b"a", None), (1, b"b", None)]
    with pytest.raises(TransactionNotInProgress):  # once
        store.commit_sealed_async(tx, [topic], decision).result(10)


def test_a_failed_store_leaves_the_transaction_nothing_but_an_abort(
    store: Store, topic: TopicId
) -> None:
    """A Kafka transaction's Produce is answered before its records' write lands, so a
    write that then fails must keep the transaction from committing without them
    (TransactionManager.spoil): the commit, decided on the writer after that write,
    is refused and writes nothing, whether whole (commit_sealed_async) or step by step
    (decide_async); the transaction can still be aborted. A store refused after the
    decision (the commit is choosing its rows) does not undo the decision."""
    txm = store.transactions
    gone = TopicId("default", "gone-before-its-write")
    store.create_topic(gone)
    tx = txm.start()
    wp = tx.write_pointer
    store.store(topic, [b"a"], tx)
    store.delete_topics([gone])
    unmarked = store.store_async(gone, [b"x"], tx)  # fails, and its caller was told
    assert isinstance(unmarked.exception(10), TopicNotFound)
    assert not txm.is_decided(wp)  # (HTTP and Spark may still commit what did land)
    failed = store.store_async(gone, [b"x"], tx, spoil=True)  # fails on the writer
    decision = {("test.decision", "spoiled"): b"commit"}
    refused = store.commit_sealed_async(tx, [topic], decision)  # queued behind it
    assert isinstance(failed.exception(10), TopicNotFound)
    with pytest.raises(TransactionNotInProgress) as caught:
        refused.result(10)
    assert caught.value.state == "incomplete"
    with pytest.raises(TransactionNotInProgress):
        store.decide_async(tx).result(10)
    assert store.get_state("test.decision", "spoiled") is None  # nothing of it written
    assert txm.state(wp) == "in_progress" and not txm.is_decided(wp)
    assert read(store, topic, offset=0)[0] == []
    txm.abort(tx)
    assert txm.state(wp) == "aborted"

    told = txm.start()  # a failure without ``spoil`` leaves the commit to the caller
    store.store(topic, [b"t"], told)
    assert isinstance(store.store_async(gone, [b"x"], told).exception(10), TopicNotFound)
    assert store.commit_sealed_async(told, [topic], {}).result(10) == [1]
    assert [p for _o, p, _w in read(store, topic, offset=0)[0]] == [b"t"]

    ok = txm.start()
    store.store(topic, [b"b"], ok)
    store.decide_async(ok).result(10)  # step by step: decided after the store landed
    late = store.store_async(topic, [b"late"], ok)
    assert isinstance(late.exception(10), TransactionNotInProgress)
    assert txm.is_decided(ok.write_pointer)  # not spoiled by a store after the decision
    assert sealed(store, topic, ok) == 1
    txm.commit(ok)
    assert [p for _o, p, _w in read(store, topic, offset=0)[0]] == [b"t", b"b"]


@pytest.mark.parametrize("crash_after", range(12))
def test_a_whole_commit_cut_short_ends_whole_or_not_at_all(crash_after: int) -> None:
    """A crash after every number of rows of the one write (rows of a phase land in any
    order, as on HBase), then a restart that does what the coordinator does: replay the
    references and the commit if the decision is on disk, abort otherwise. Each topic
    then holds the transaction's records exactly once, or none does; and the commit
    never landed without the decision."""
    name = f"sealed-crash-{uuid.uuid4().hex}"
    table = memory.table(name)
    a, b = TopicId("default", "a"), TopicId("default", "b")
    try:
        backend = MemoryBackend(table)
        store = Store(backend)
        store.create_topic(a)
        store.create_topic(b)
        store.publish(a, [b"before"])
        tx = store.transactions.start()
        wp = tx.write_pointer
        store.store(a, [b"a0", b"a1", b"a2"], tx)
        store.store(b, [b"b0", b"b1"], tx)
        store.transactions.decide(wp)
        backend.faults = Faults(seed=crash_after, crash_after_rows=crash_after)
        fut = store.commit_sealed_async(wp, [a, b], {("test.decision", "tx"): b"commit"})
        crashed = fut.exception(10) is not None
        with contextlib.suppress(Exception):
            store.close()

        store = Store(MemoryBackend(table))  # the restart: settles what was left in part
        try:
            decided = store.get_state("test.decision", "tx") == b"commit"
            state = store.transactions.state(wp)
            if not decided:
                assert state == "in_progress", "the commit landed without its decision"
                store.transactions.abort(wp)
            elif state == "in_progress":
                store.transactions.decide(wp, recovering=True)
                for t in (a, b):
                    store.publish_sealed_async(t, wp).result(10)
                store.transactions.commit(wp)
            assert crashed or decided
            want_a = [b"before", b"a0", b"a1", b"a2"] if decided else [b"before"]
            want_b = [b"b0", b"b1"] if decided else []
            for t, want in ((a, want_a), (b, want_b)):
                msgs, _next, held = read(store, t, offset=0)
                assert [p for _o, p, _w in msgs] == want, (crash_after, t)
                assert [o for o, _p, _w in msgs] == list(range(len(want)))
                assert not held
        finally:
            store.close()
    finally:
        memory.drop(name)


def test_stored_rows_are_counted_across_a_reopen_and_new_ones_without_a_scan(
    store: Store, topic: TopicId, open_test_store
) -> None:
    """A commit counts a write pointer's PayloadTable rows. Rows stored before a reopen
    are found on disk; a write pointer handed out since the topic's state was loaded is
    counted in memory, without scanning its (empty) range, which after a large delete
    skips every tombstone behind it (2026-11-27: 62% of the writer's time)."""
    txm = store.transactions
    old = txm.start(3600)
    store.store(topic, [b"a", b"b"], old)
    store.close()
    store = open_test_store()
    txm = store.transactions
    store.store(topic, [b"c"], old.write_pointer)  # counts the two from before the reopen

    scans: list[bytes] = []
    backend = store._backend

    def watched(real):  # type: ignore[no-untyped-def]
        def scan(start: bytes, *args: object, **kw: object):  # type: ignore[no-untyped-def]
            scans.append(start)
            return real(start, *args, **kw)

        return scan

    # The real backend, watched: which ranges a store reads.
    backend.scan, backend.scan_keys = watched(backend.scan), watched(backend.scan_keys)
    try:
        new = txm.start(3600)
        store.store(topic, [b"x"], new)
        store.store(topic, [b"y"], new)
    finally:
        del backend.scan, backend.scan_keys
    wp_key = new.write_pointer.to_bytes(8, "big")
    assert not [s for s in scans if wp_key in s]
    assert sealed(store, topic, old) == 3
    assert sealed(store, topic, new) == 2
    txm.commit(old)
    txm.commit(new)
    got, _, _ = read(store, topic)
    assert [p for _, p, _ in got] == [b"a", b"b", b"c", b"x", b"y"]
