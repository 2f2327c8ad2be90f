"""Record columns (protocol/columns.py): golden bytes, round trips and a fuzzed decoder."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tmsgate.protocol.columns import MalformedColumns, RecordColumns, decode_columns, encode_columns

ONE = RecordColumns(
    offsets=[7],
    timestamps=[1_000],
    write_pointers=[0],
    ids=[bytes(range(20))],
    keys=[None],
    values=[b"hi"],
    headers=[[("h", None)]],
    next_offset=8,
    log_append_time=True,
)
GOLDEN = bytes.fromhex(
    "544d5352"
    "01"
    "01"
    "0000"
    "01000000"
    "0800000000000000"  # head: 1 record, next 8
    "0700000000000000"  # offsets
    "e803000000000000"  # timestamps
    "0000000000000000"  # write pointers
    + bytes(range(20)).hex()  # ids
    + "ffffffff"  # key lengths: null
    "02000000"
    "6869"  # values: "hi"
    "01000000"  # header counts
    "01000000"
    "68"  # header names: "h"
    "ffffffff"  # header values: null
)


def test_golden_bytes() -> None:
    assert encode_columns(ONE) == GOLDEN
    assert decode_columns(GOLDEN) == ONE


records = st.lists(
    st.tuples(
        st.integers(0, 2**63 - 1),
        st.integers(-1, 2**62),
        st.one_of(st.none(), st.binary(max_size=20)),
        st.one_of(st.none(), st.binary(max_size=50)),
        st.lists(
            st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))), max_size=3
        ),
    ),
    max_size=20,
)


@settings(max_examples=200, deadline=None)
@given(records, st.integers(0, 2**63 - 1))
def test_round_trip(rows: list, next_offset: int) -> None:
    cols = RecordColumns(
        offsets=[r[0] for r in rows],
        timestamps=[r[1] for r in rows],
        write_pointers=[0] * len(rows),
        ids=[bytes(20)] * len(rows),
        keys=[r[2] for r in rows],
        values=[r[3] for r in rows],
        headers=[r[4] for r in rows],
        next_offset=next_offset,
    )
    assert decode_columns(encode_columns(cols)) == cols


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300))
def test_fuzzed_bodies_decode_or_say_why(body: bytes) -> None:
    try:
        decode_columns(body)
    except MalformedColumns as exc:
        assert str(exc)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(GOLDEN) - 1), st.integers(0, 255))
def test_damaged_golden_body(position: int, byte: int) -> None:
    body = bytearray(GOLDEN)
    body[position] = byte
    with contextlib.suppress(MalformedColumns):
        decode_columns(bytes(body))


def test_truncated_and_padded_bodies_are_refused() -> None:
    with pytest.raises(MalformedColumns, match="follow the last column"):
        decode_columns(GOLDEN + b"\x00")
    with pytest.raises(MalformedColumns):
        decode_columns(GOLDEN[:-1])
    with pytest.raises(MalformedColumns, match="does not fit"):
        decode_columns(GOLDEN[:8] + b"\xff\xff\xff\x7f" + GOLDEN[12:])
