"""Row keys, message ids and row values (storage/ids.py, storage/keys.py): byte order is
consumption order, codecs round-trip, topic prefixes never overlap."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tmsgate.storage import InvalidTopicProperties, MessageId, TopicId, keys
from tmsgate.storage.topics import validate_properties

U64 = st.integers(0, 2**64 - 1)
U16 = st.integers(0, 2**16 - 1)
GENERATION = st.integers(1, 2**31 - 1)
NAME = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-",
    min_size=1,
    max_size=20,
).filter(lambda name: name not in (".", ".."))  # reserved, as in Kafka
TOPIC = st.builds(TopicId, NAME, NAME)
ID_PARTS = st.tuples(U64, U16, U64, U16)


# --- MessageId ----------------------------------------------------------------------------
def test_message_id_is_20_bytes_and_round_trips() -> None:
    mid = MessageId.of(1_700_000_000_123, 7, 1_700_000_000_100, 3)
    assert isinstance(mid, bytes)
    assert len(mid) == MessageId.SIZE == 20
    assert mid.parts == (1_700_000_000_123, 7, 1_700_000_000_100, 3)
    assert (mid.publish_ts, mid.seq, mid.write_ts, mid.pseq) == mid.parts
    assert MessageId(bytes(mid)) == mid
    again = MessageId.fromhex(mid.hex())
    assert isinstance(again, MessageId)
    assert again == mid and again.parts == mid.parts


def test_message_id_defaults_write_ts_and_pseq_to_zero() -> None:
    mid = MessageId.of(5, 1)
    assert mid.parts == (5, 1, 0, 0)
    assert mid[10:] == bytes(10)


@pytest.mark.parametrize("size", [0, 10, 19, 21])
def test_message_id_rejects_other_lengths(size: int) -> None:
    with pytest.raises(ValueError):
        MessageId(bytes(size))
    with pytest.raises(ValueError):
        MessageId.fromhex("00" * size)


@given(ID_PARTS)
def test_message_id_parts_round_trip(parts: tuple[int, int, int, int]) -> None:
    mid = MessageId.of(*parts)
    assert mid.parts == parts
    assert MessageId.fromhex(mid.hex()).parts == parts


@given(ID_PARTS, ID_PARTS)
def test_message_id_byte_order_is_tuple_order(
    a: tuple[int, int, int, int], b: tuple[int, int, int, int]
) -> None:
    ia, ib = MessageId.of(*a), MessageId.of(*b)
    assert (ia < ib) == (a < b)
    assert (ia == ib) == (a == b)
    assert (bytes(ia) < bytes(ib)) == (a < b)


# --- row keys -----------------------------------------------------------------------------
@given(TOPIC, GENERATION, st.tuples(U64, U16), st.tuples(U64, U16))
def test_message_row_key_order_is_time_order(
    topic: TopicId, gen: int, a: tuple[int, int], b: tuple[int, int]
) -> None:
    prefix = keys.data_prefix(keys.MESSAGE, topic, gen)
    ka = prefix + keys.MESSAGE_SUFFIX.pack(*a)
    kb = prefix + keys.MESSAGE_SUFFIX.pack(*b)
    assert (ka < kb) == (a < b)
    assert keys.MESSAGE_SUFFIX.unpack_from(ka, len(prefix)) == a
    # the first 10 bytes of a message id are exactly the row-key suffix
    assert MessageId.of(a[0], a[1])[:10] == ka[len(prefix) :]


@given(TOPIC, GENERATION, st.tuples(U64, U64, U16), st.tuples(U64, U64, U16))
def test_payload_row_key_order_is_write_pointer_then_time_order(
    topic: TopicId, gen: int, a: tuple[int, int, int], b: tuple[int, int, int]
) -> None:
    prefix = keys.data_prefix(keys.PAYLOAD, topic, gen)
    ka = prefix + keys.PAYLOAD_SUFFIX.pack(*a)
    kb = prefix + keys.PAYLOAD_SUFFIX.pack(*b)
    assert (ka < kb) == (a < b)
    # a PayloadTable row of one write pointer: the write-pointer prefix, then PAYLOAD_ROW
    wp_prefix = prefix + keys.U64.pack(a[0])
    assert ka.startswith(wp_prefix)
    assert keys.PAYLOAD_ROW.unpack_from(ka, len(wp_prefix)) == a[1:]


@given(TOPIC, st.tuples(GENERATION, U64, U16), st.tuples(GENERATION, U64, U16))
def test_generation_orders_before_time(
    topic: TopicId, a: tuple[int, int, int], b: tuple[int, int, int]
) -> None:
    ka = keys.data_prefix(keys.MESSAGE, topic, a[0]) + keys.MESSAGE_SUFFIX.pack(*a[1:])
    kb = keys.data_prefix(keys.MESSAGE, topic, b[0]) + keys.MESSAGE_SUFFIX.pack(*b[1:])
    assert (ka < kb) == (a < b)
    name_len = len(keys.all_generations_prefix(keys.MESSAGE, topic))
    assert keys.generation_of(ka, name_len) == a[0]


@pytest.mark.parametrize("table", [keys.MESSAGE, keys.PAYLOAD])
def test_prefixes_of_topic_a_and_ab_do_not_overlap(table: bytes) -> None:
    a, ab = TopicId("ns", "a"), TopicId("ns", "ab")
    for pa, pab in [
        (keys.all_generations_prefix(table, a), keys.all_generations_prefix(table, ab)),
        (keys.data_prefix(table, a, 1), keys.data_prefix(table, ab, 1)),
    ]:
        assert not pab.startswith(pa) and not pa.startswith(pab)
        # a scan of topic a's range never yields a key of topic ab, whatever follows
        end = keys.prefix_end(pa)
        for tail in (b"", b"\x00" * 14, b"\xff" * 14):
            assert not pa <= pab + tail < end
    assert not keys.topic_meta_key(ab).startswith(keys.topic_meta_key(a))
    assert not keys.checkpoint_key(ab).startswith(keys.checkpoint_key(a))


@given(TOPIC, TOPIC, GENERATION, U64, U16)
def test_distinct_topics_never_share_a_key_range(
    a: TopicId, b: TopicId, gen: int, ts: int, seq: int
) -> None:
    if a == b:
        return
    pa = keys.all_generations_prefix(keys.MESSAGE, a)
    kb = keys.data_prefix(keys.MESSAGE, b, gen) + keys.MESSAGE_SUFFIX.pack(ts, seq)
    assert not pa <= kb < keys.prefix_end(pa)


def test_namespace_prefix_does_not_match_longer_namespace() -> None:
    prefix = keys.namespace_meta_prefix("ns")
    assert keys.topic_meta_key(TopicId("ns", "t")).startswith(prefix)
    assert not keys.topic_meta_key(TopicId("ns2", "t")).startswith(prefix)
    assert keys.topic_from_meta_key(keys.topic_meta_key(TopicId("ns", "a.b-c"))) == TopicId(
        "ns", "a.b-c"
    )


@given(st.binary(min_size=1, max_size=8))
def test_prefix_end_is_the_least_upper_bound(prefix: bytes) -> None:
    if prefix.rstrip(b"\xff") == b"":
        with pytest.raises(ValueError):
            keys.prefix_end(prefix)
        return
    end = keys.prefix_end(prefix)
    assert end > prefix + b"\xff" * 30
    assert not end.startswith(prefix)


def test_state_keys_of_an_area_do_not_match_a_longer_area() -> None:
    assert keys.state_key("group", "k").startswith(keys.state_prefix("group"))
    assert not keys.state_key("groups", "k").startswith(keys.state_prefix("group"))


# --- row values ---------------------------------------------------------------------------
WP = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1))
OPT_BYTES = st.one_of(st.none(), st.binary(max_size=64))


@given(
    st.integers(0, 2**64 - 1),
    st.integers(0, 2**32 - 1),
    OPT_BYTES,
    WP,
    OPT_BYTES,
    st.one_of(st.none(), U64),
    st.booleans(),
)
def test_row_codec_round_trips_every_flag_combination(
    base: int,
    count: int,
    payload: bytes | None,
    wp: int | None,
    meta: bytes | None,
    ttl: int | None,
    reference: bool,
) -> None:
    value = keys.encode_row(base, count, payload, wp, meta, ttl, reference)
    flags, b, c, w, t, m, p = keys.decode_row(value)
    assert (b, c, w, t, m) == (base, count, wp, ttl, meta)
    assert p == (None if reference else payload)
    assert bool(flags & keys.F_TX) == (wp is not None)
    assert bool(flags & keys.F_TTL) == (ttl is not None)
    assert bool(flags & keys.F_META) == (meta is not None)
    assert bool(flags & keys.F_PAYLOAD) == (not reference and payload is not None)
    assert bool(flags & keys.F_NULL) == (not reference and payload is None)
    # the fast path the writer uses for plain non-transactional payloads is the same layout
    if payload is not None and wp is None and meta is None and ttl is None and not reference:
        assert value == keys.ROW_HEAD.pack(keys.F_PAYLOAD, base, count) + payload


@pytest.mark.parametrize("wp", [None, 1, 2**62, -5])
@pytest.mark.parametrize("meta", [None, b"", b"m"])
@pytest.mark.parametrize("ttl", [None, 0, 1000])
@pytest.mark.parametrize(
    "payload,reference", [(None, False), (b"", False), (b"p", False), (None, True)]
)
def test_row_codec_flag_matrix(
    wp: int | None, meta: bytes | None, ttl: int | None, payload: bytes | None, reference: bool
) -> None:
    value = keys.encode_row(3, 4, payload, wp, meta, ttl, reference)
    assert keys.decode_row(value)[1:] == (3, 4, wp, ttl, meta, None if reference else payload)


@given(WP, OPT_BYTES, st.one_of(st.none(), U64), OPT_BYTES, st.booleans())
def test_negate_write_pointer_is_idempotent(
    wp: int | None, meta: bytes | None, ttl: int | None, payload: bytes | None, reference: bool
) -> None:
    value = keys.encode_row(9, 1, payload, wp, meta, ttl, reference)
    once = keys.negate_write_pointer(value)
    assert keys.negate_write_pointer(once) == once
    before, after = keys.decode_row(value), keys.decode_row(once)
    # only the t column changes: it becomes -|wp|
    assert after[3] == (None if wp is None else -abs(wp))
    assert before[:3] == after[:3] and before[4:] == after[4:]
    if wp is None or wp <= 0:
        assert once == value


# --- topic properties ---------------------------------------------------------------------
@pytest.mark.parametrize("ttl", ["-1", "abc", "1.5", "", " ", "1e3"])
def test_invalid_ttl_is_rejected(ttl: str) -> None:
    with pytest.raises(InvalidTopicProperties):
        validate_properties({"ttl": ttl})


@pytest.mark.parametrize("ttl", ["\u00b2", "\u2460"])
def test_unicode_digit_ttl_is_rejected_as_invalid_property(ttl: str) -> None:
    """Regression (storage/topics.py:25): ``str.isdigit()`` accepts '²' and '①', and ``int()``
    then raised a bare ValueError instead of InvalidTopicProperties (a 500, not a 400)."""
    with pytest.raises(InvalidTopicProperties):
        validate_properties({"ttl": ttl})


@pytest.mark.parametrize("ttl,normal", [("0", "0"), ("007", "7"), (" 60 ", "60"), ("3600", "3600")])
def test_valid_ttl_is_normalised(ttl: str, normal: str) -> None:
    assert validate_properties({"ttl": ttl, "retention.ms": "x"}) == {
        "ttl": normal,
        "retention.ms": "x",
    }


# --- packed PayloadTable rows ------------------------------------------------------------------
PACKABLE = st.tuples(OPT_BYTES, OPT_BYTES, st.one_of(st.none(), st.integers(0, 2**62)))


@given(st.lists(PACKABLE, min_size=1, max_size=40))
def test_packed_rows_round_trip_every_message(items: list) -> None:
    rows = keys.pack_messages(items)
    assert len(rows) == 1  # far below the byte and count limits: one row per store
    n, value = rows[0]
    assert n == len(items) == keys.messages_in_row(value)
    assert keys.unpack_messages(value) == items
    # A backend with columns keeps the packed messages in the payload column.
    assert keys.row_from_columns(keys.row_columns(value)) == value
    assert bool(value[0] & keys.F_PACKED) == (len(items) > 1)


def test_a_lone_message_is_a_plain_row() -> None:
    ((n, value),) = keys.pack_messages([(b"p", b"m", 5)])
    assert n == 1 and value == keys.encode_row(0, 0, b"p", None, b"m", 5)
    assert keys.unpack_messages(value) == [(b"p", b"m", 5)]


def test_packed_rows_are_cut_by_bytes_and_by_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keys, "MAX_PACKED_BYTES", 100)
    items = [(bytes(40), None, None)] * 7  # 56 bytes each with the per-message head
    rows = keys.pack_messages(items)
    # A row is closed once it holds MAX_PACKED_BYTES or more: 2 + 2 + 2 + a lone one.
    assert [n for n, _ in rows] == [2, 2, 2, 1]
    assert not rows[-1][1][0] & keys.F_PACKED
    assert [m for _, v in rows for m in keys.unpack_messages(v)] == items
    monkeypatch.setattr(keys, "MAX_PACKED_BYTES", 1 << 20)
    monkeypatch.setattr(keys, "MAX_PACKED_COUNT", 3)
    assert [n for n, _ in keys.pack_messages([(b"x", b"", None)] * 8)] == [3, 3, 2]
