"""The meta blob keeping a Kafka record's key, headers and timestamp in the store."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tmsgate.protocol import MalformedMeta, decode_meta, encode_meta

keys = st.none() | st.binary(max_size=64)
headers = st.lists(st.tuples(st.text(max_size=20), st.none() | st.binary(max_size=32)), max_size=5)
timestamps = st.none() | st.integers(0, 2**63 - 1)


@given(keys, headers, timestamps)
def test_round_trip(key: bytes | None, hdrs: list, ts: int | None) -> None:
    assert decode_meta(encode_meta(key, hdrs, ts)) == (key, hdrs, ts)


def test_nothing_to_keep_is_none() -> None:
    assert encode_meta(None, [], None) is None
    assert encode_meta(None, [], -1) is None  # no timestamp: fetch uses publish time
    assert decode_meta(None) == (None, [], None)


def test_common_case_is_ten_bytes() -> None:
    assert len(encode_meta(None, [], 1_700_000_000_000) or b"") == 10


@pytest.mark.parametrize(
    "raw", [b"\x02\x00", b"\x01\x02\x00\x00\x00\x05ab", b"\x01\x01\x00", b"\x01\x00junk"]
)
def test_malformed(raw: bytes) -> None:
    with pytest.raises(MalformedMeta):
        decode_meta(raw)


@given(st.binary(max_size=64))
def test_arbitrary_bytes_never_crash(raw: bytes) -> None:
    with contextlib.suppress(MalformedMeta):
        decode_meta(raw)


@given(keys, headers, timestamps)
def test_meta_timestamp_matches_decode(key: bytes | None, hdrs: list, ts: int | None) -> None:
    from tmsgate.protocol import meta_timestamp

    assert meta_timestamp(encode_meta(key, hdrs, ts)) == ts
