"""The Kafka transaction record's codec (gateway/kafka/txn/model.py): every record comes
back as written, rows written as JSON by earlier versions are still read, and any other
bytes are a CorruptTxnRecord (which the coordinator logs and skips at start), never
another exception."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tmsgate.gateway.kafka.txn.model import (
    CorruptTxnRecord,
    PendingOffset,
    TxnRecord,
    TxnState,
    decode_record,
    encode_record,
)

i16 = st.integers(-(2**15), 2**15 - 1)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
names = st.text(max_size=40)
offsets = st.dictionaries(
    names,
    st.dictionaries(
        st.tuples(names, i32),
        st.builds(PendingOffset, i64, i32, st.text(max_size=300)),
        max_size=4,
    ),
    max_size=3,
)
records = st.builds(
    TxnRecord,
    names,
    i64,
    i16,
    i32,
    st.sampled_from(list(TxnState)),
    i64,
    i64,
    i64,
    i64,
    st.sets(names, max_size=4),
    st.sets(names, max_size=3),
    offsets,
    st.tuples(i64, i16),
)


@settings(max_examples=300, deadline=None)
@given(rec=records)
def test_every_record_round_trips(rec: TxnRecord) -> None:
    assert decode_record(rec.transactional_id, encode_record(rec)) == rec


def test_a_version_1_json_row_is_still_read() -> None:
    """Bytes written by the JSON codec (version 1), before the binary one."""
    raw = (
        b'{"v":1,"pid":7,"epoch":2,"timeout_ms":60000,"state":"PrepareCommit","wp":99,'
        b'"started_ms":10,"updated_ms":11,"decided_ms":12,"topics":["t~1"],"groups":["g"],'
        b'"previous":[7,1],"offsets":{"g":[["t",1,42,3,"m"]]}}'
    )
    assert decode_record("tid", raw) == TxnRecord(
        "tid",
        7,
        2,
        60000,
        TxnState.PREPARE_COMMIT,
        99,
        10,
        11,
        12,
        {"t~1"},
        {"g"},
        {"g": {("t", 1): PendingOffset(42, 3, "m")}},
        (7, 1),
    )


@settings(max_examples=500, deadline=None)
@given(raw=st.binary(max_size=200))
def test_any_bytes_are_a_record_or_corrupt(raw: bytes) -> None:
    with contextlib.suppress(CorruptTxnRecord):
        decode_record("tid", raw)


@settings(max_examples=200, deadline=None)
@given(rec=records, data=st.data())
def test_a_damaged_record_is_corrupt_or_a_record(rec: TxnRecord, data: st.DataObject) -> None:
    raw = bytearray(encode_record(rec))
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(CorruptTxnRecord):
        decode_record("tid", bytes(raw[:cut]))  # truncated
    raw[cut] ^= data.draw(st.integers(1, 255))
    with contextlib.suppress(CorruptTxnRecord):
        decode_record("tid", bytes(raw))  # a flipped byte may still decode


def test_an_unknown_version_is_corrupt() -> None:
    raw = bytearray(encode_record(TxnRecord("tid", 1, 0, 1000)))
    raw[0] = 3
    with pytest.raises(CorruptTxnRecord, match="version 3"):
        decode_record("tid", bytes(raw))
