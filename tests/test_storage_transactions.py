"""The transaction manager's states, its codec, rollback of what publish returned, and
topic listeners: the store-side parts the transaction service and HTTP API build on."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tmsgate.storage import (
    InvalidTransaction,
    Store,
    TopicId,
    TopicMetadata,
    Transaction,
    TransactionNotInProgress,
    decode_transaction,
    encode_transaction,
)


@pytest.fixture
def store_url(any_engine_url: str) -> str:
    """Every test here runs on LevelDB and on memory:// (atomic per row only)."""
    return any_engine_url


def test_states_through_a_transaction_life(store: Store, clock) -> None:
    txm = store.transactions
    committed, aborted, invalidated, timed_out = (txm.start(10) for _ in range(4))
    assert {txm.state(t.write_pointer) for t in (committed, aborted)} == {"in_progress"}
    txm.commit(committed)
    txm.abort(aborted)
    assert txm.invalidate(invalidated.write_pointer)
    clock.advance(10_001)
    assert txm.expire() == [timed_out.write_pointer]
    assert txm.state(committed.write_pointer) == "committed"
    assert txm.state(aborted.write_pointer) == "aborted"
    assert txm.state(invalidated.write_pointer) == "invalid"
    assert txm.state(timed_out.write_pointer) == "invalid"
    assert txm.state(timed_out.write_pointer + 10**9) == "unknown"
    assert txm.state(0) == "unknown"


def test_a_second_commit_or_a_commit_after_abort_says_the_state(store: Store) -> None:
    txm = store.transactions
    a, b = txm.start(), txm.start()
    txm.commit(a)
    txm.abort(b)
    with pytest.raises(TransactionNotInProgress) as first:
        txm.commit(a)
    with pytest.raises(TransactionNotInProgress) as second:
        txm.commit(b)
    with pytest.raises(TransactionNotInProgress) as third:
        txm.abort(a)
    assert (first.value.state, second.value.state, third.value.state) == (
        "committed",
        "aborted",
        "committed",
    )
    assert "it is committed" in str(first.value)


def test_commit_after_the_timeout_fails_even_before_expiry_ran(store: Store, clock) -> None:
    txm = store.transactions
    tx = txm.start(1)
    clock.advance(1_001)
    with pytest.raises(TransactionNotInProgress) as err:
        txm.commit(tx)
    assert err.value.state == "invalid"
    assert tx.write_pointer in txm.invalid() and not txm.is_in_progress(tx.write_pointer)


def test_states_survive_a_restart_by_visibility(open_test_store) -> None:
    store = open_test_store()
    txm = store.transactions
    done, dropped, open_ = txm.start(), txm.start(), txm.start(3600)
    txm.commit(done)
    txm.abort(dropped)
    store.close()
    txm = open_test_store().transactions
    # How it ended is not remembered across restarts, only what visibility implies.
    assert txm.state(done.write_pointer) == "committed"
    assert txm.state(dropped.write_pointer) == "invalid"
    assert txm.state(open_.write_pointer) == "in_progress"


def test_rollback_accepts_what_publish_returned(store: Store, topic: TopicId) -> None:
    tx = store.transactions.start()
    result = store.publish(topic, [b"a", b"b"], tx=tx)
    store.publish(topic, [b"plain"])
    assert store.rollback(topic, result) == 2
    store.transactions.abort(tx)
    snapshot = store.transactions.snapshot()
    assert [m.payload for m in store.poll(topic, tx=snapshot)] == [b"plain"]
    with pytest.raises(InvalidTransaction, match="not a transactional publish"):
        store.rollback(topic, store.publish(topic, [b"x"]))


def test_publishing_under_a_finished_transaction_says_its_state(
    store: Store, topic: TopicId
) -> None:
    tx = store.transactions.start()
    store.transactions.commit(tx)
    with pytest.raises(TransactionNotInProgress) as err:
        store.publish(topic, [b"late"], tx=tx)
    assert err.value.state == "committed"


def test_topic_listeners_hear_every_change_once_durable(store: Store) -> None:
    heard: list[TopicMetadata] = []
    store.add_topic_listener(heard.append)
    t = TopicId("ns", "changes")
    store.create_topic(t, {"ttl": "5"})
    store.update_topic(t, {"ttl": "9"})
    store.delete_topic(t)
    store.remove_topic_listener(heard.append)
    store.create_topic(t)
    assert [(m.topic, m.generation, m.properties.get("ttl")) for m in heard] == [
        (t, 1, "5"),
        (t, 1, "9"),
        (t, -1, "9"),
    ]


def test_codec_round_trip_and_layout() -> None:
    tx = Transaction(7_000_000, 6_000_000, frozenset({5, 6}), frozenset({3}))
    raw = encode_transaction(tx)
    assert raw == struct.pack(">bqqIqqIq", 1, 7_000_000, 6_000_000, 2, 5, 6, 1, 3)
    assert decode_transaction(raw) == tx


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"", "at least 21 bytes"),
        (struct.pack(">bqqI", 2, 1, 1, 0) + b"\0\0\0\0", "version 2"),
        (struct.pack(">bqqI", 1, 1, 1, 3) + b"\0" * 8, "cut short"),
        (struct.pack(">bqqIIq", 1, 1, 1, 0, 0, 9), "lists say"),
        (struct.pack(">bqqII", 1, -1, 1, 0, 0), "negative"),
    ],
)
def test_codec_refuses_bad_bytes_saying_why(raw: bytes, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        decode_transaction(raw)


@given(st.binary(max_size=64))
def test_codec_decodes_or_raises_value_error(raw: bytes) -> None:
    try:
        tx = decode_transaction(raw)
    except ValueError:
        return
    # Lists with repeats decode to the same sets, so compare the decoded values.
    assert decode_transaction(encode_transaction(tx)) == tx
