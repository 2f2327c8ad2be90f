"""The group state table, the group/member model and the state codecs (no I/O)."""

from __future__ import annotations

import kafka.errors
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tmsgate.gateway.kafka.groups import codec
from tmsgate.gateway.kafka.groups.model import Group, Member, client_host
from tmsgate.gateway.kafka.groups.state import (
    COMPLETING,
    DEAD,
    EMPTY,
    OUTCOMES,
    PREPARING,
    PROCEED,
    STABLE,
    TRANSITIONS,
    GroupState,
    IllegalTransition,
    Op,
    check_transition,
)
from tmsgate.protocol import ErrorCode

# Kafka's GroupMetadata.validPreviousStates, verbatim: target -> allowed sources.
KAFKA_VALID_PREVIOUS = {
    DEAD: {STABLE, PREPARING, COMPLETING, EMPTY, DEAD},
    COMPLETING: {PREPARING},
    STABLE: {COMPLETING},
    PREPARING: {STABLE, COMPLETING, EMPTY},
    EMPTY: {PREPARING},
}


def test_transition_table_is_kafkas():
    for target, sources in KAFKA_VALID_PREVIOUS.items():
        for source in GroupState:
            allowed = target in TRANSITIONS[source]
            assert allowed == (source in sources), (source, target)


@pytest.mark.parametrize("source", list(GroupState))
@pytest.mark.parametrize("target", list(GroupState))
def test_illegal_transition_is_a_typed_error_with_a_kafka_code(source, target):
    if target in TRANSITIONS[source]:
        check_transition("g", source, target)
        return
    with pytest.raises(IllegalTransition) as info:
        check_transition("g", source, target)
    assert info.value.code is ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert source.value in str(info.value) and target.value in str(info.value)


def test_group_transition_moves_and_refuses():
    g = Group("g", state_ms=1_000)
    g.transition(PREPARING, 2_000)
    assert (g.state, g.state_ms) == (PREPARING, 2_000)
    with pytest.raises(IllegalTransition):
        g.transition(STABLE, 3_000)  # must complete the join first
    assert (g.state, g.state_ms) == (PREPARING, 2_000)


def test_outcome_table_covers_every_request_in_every_state():
    assert set(OUTCOMES) == {(op, s) for op in Op for s in GroupState}
    assert OUTCOMES[(Op.HEARTBEAT, PREPARING)] is ErrorCode.REBALANCE_IN_PROGRESS
    assert OUTCOMES[(Op.SYNC, PREPARING)] is ErrorCode.REBALANCE_IN_PROGRESS
    assert OUTCOMES[(Op.COMMIT, COMPLETING)] is ErrorCode.REBALANCE_IN_PROGRESS
    assert OUTCOMES[(Op.COMMIT, PREPARING)] is PROCEED
    for op in Op:
        assert OUTCOMES[(op, DEAD)] is ErrorCode.COORDINATOR_NOT_AVAILABLE


def test_error_codes_are_kafkas():
    """The gateway's one table of Kafka error codes (the coordinator's among them): each
    number is Kafka's, under Kafka's name or one kafka-python spells differently."""

    def norm(name: str) -> str:
        return name.replace("_", "").lower().replace("error", "").replace("exception", "")

    for code in ErrorCode:
        if code is ErrorCode.NONE:
            continue
        err = kafka.errors.for_code(code.value)
        assert err.errno == code.value
        ours, theirs = norm(code.name), norm(err.__name__)
        assert ours in theirs or theirs in ours or err.__name__ in _RENAMED, (code, err)


_RENAMED = {
    "NotCoordinatorError",
    "CoordinatorLoadInProgressError",
    "CorruptRecordError",  # CORRUPT_MESSAGE
    "InvalidFetchRequestError",  # INVALID_FETCH_SIZE
    "NotLeaderForPartitionError",  # NOT_LEADER_OR_FOLLOWER (its name before KIP-392)
    "MessageSizeTooLargeError",  # MESSAGE_TOO_LARGE
    "InvalidReplicationAssignmentError",  # INVALID_REPLICA_ASSIGNMENT
}


def test_state_names_parse_case_insensitively():
    assert GroupState.parse("stable") is STABLE
    assert GroupState.parse("PreparingRebalance") is PREPARING
    assert GroupState.parse("AwaitingSync") is COMPLETING
    assert GroupState.parse("bogus") is None


def _member(mid: str, protocols=(("range", b"r"), ("roundrobin", b"rr")), instance=None) -> Member:
    return Member(mid, instance, "client", "/127.0.0.1", 10000, 30000, "consumer", protocols)


def test_protocol_selection_votes_among_common_protocols():
    g = Group("g")
    g.add(_member("a", (("range", b""), ("roundrobin", b""))))
    g.add(_member("b", (("roundrobin", b""), ("range", b""))))
    g.add(_member("c", (("roundrobin", b""), ("sticky", b""), ("range", b""))))
    assert g.candidate_protocols() == {"range", "roundrobin"}
    assert g.select_protocol() == "roundrobin"
    assert g.supports("consumer", ["range"])
    assert not g.supports("consumer", ["sticky"])  # b does not support it
    assert not g.supports("connect", ["range"])
    assert not g.supports("consumer", [])


def test_empty_group_takes_any_protocol_but_not_an_empty_one():
    g = Group("g")
    assert g.supports("connect", ["x"])
    assert not g.supports("", ["x"])


def test_leader_moves_when_the_leader_leaves_and_static_ids_are_tracked():
    g = Group("g")
    g.add(_member("a"))
    g.add(_member("b", instance="i-b"))
    assert g.leader_id == "a"
    assert g.static_members == {"i-b": "b"}
    assert g.check_member("zzz", "i-b").code is ErrorCode.FENCED_INSTANCE_ID
    assert g.check_member("a", "i-a").code is ErrorCode.UNKNOWN_MEMBER_ID  # not static
    assert g.check_member("x", None).code is ErrorCode.UNKNOWN_MEMBER_ID
    assert g.check_member("b", "i-b") is None and g.check_member("a", None) is None
    g.remove("a")
    assert g.leader_id == "b"
    moved = g.replace_static("i-b", "b", "b2")
    assert moved.member_id == "b2" and g.leader_id == "b2" and g.static_members == {"i-b": "b2"}
    g.remove("b2")
    assert g.leader_id is None and not g.static_members


def test_subscribed_topics_come_from_consumer_protocol_metadata():
    from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

    sub = ConsumerProtocolSubscription(version=0, topics=["t1", "t2"], user_data=None).encode()
    g = Group("g")
    g.add(_member("a", (("range", bytes(sub)),)))
    g.protocol_name = "range"
    assert g.subscribed_topics() == {"t1", "t2"}
    g.members["a"].protocols = (("range", b"\x00"),)  # does not decode
    assert g.subscribed_topics() is None


def test_client_host_is_kafkas_format():
    assert client_host("127.0.0.1:5555") == "/127.0.0.1"
    assert client_host("::1:5555") == "/::1"


# --- codecs ---------------------------------------------------------------------------
names = st.text(min_size=0, max_size=30)


@given(group=names, topic=names, partition=st.integers(0, 2**31 - 1))
def test_offset_keys_round_trip_and_group_prefix_is_exact(group, topic, partition):
    key = codec.offset_key(group, topic, partition)
    assert codec.parse_offset_key(key) == (group, topic, partition)
    assert key.startswith(codec.offsets_prefix(group))


@given(a=names, b=names)
def test_one_groups_prefix_never_matches_another_groups_keys(a, b):
    if a != b:
        assert not codec.offset_key(b, "t", 0).startswith(codec.offsets_prefix(a))


@given(
    offset=st.integers(-1, 2**63 - 1),
    epoch=st.integers(-1, 2**31 - 1),
    metadata=st.text(max_size=100),
    uuid=st.binary(min_size=16, max_size=16),
)
def test_committed_offset_round_trip(offset, epoch, metadata, uuid):
    c = codec.CommittedOffset(offset, epoch, metadata, 1_700_000_000_000, uuid)
    assert codec.decode_offset(codec.encode_offset(c)) == c


def test_corrupt_rows_are_typed_errors():
    with pytest.raises(codec.CorruptState):
        codec.decode_offset(b"\x07short")
    with pytest.raises(codec.CorruptState):
        codec.decode_group("g", b"{not json")
    with pytest.raises(codec.CorruptState):
        codec.decode_group("g", b'{"v": 99}')
    with pytest.raises(codec.CorruptState):
        codec.parse_offset_key("no-slashes")


def test_group_record_round_trip():
    rec = codec.GroupRecord(
        "g/1 %",
        7,
        "consumer",
        "range",
        "m1",
        1_700_000_000_000,
        (
            codec.MemberRecord("m1", None, "c", "/1.2.3.4", 10000, 30000, b"\x00\x01", b""),
            codec.MemberRecord("m2", "i2", "c", "/1.2.3.4", 6000, 6000, b"", b"\xff" * 40),
        ),
    )
    assert codec.decode_group("g/1 %", codec.encode_group(rec)) == rec


def test_consumer_protocol_helpers_tolerate_garbage():
    from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

    tp = ConsumerProtocolAssignment.TopicPartition(topic="t", partitions=[0])
    raw = ConsumerProtocolAssignment(version=0, assigned_partitions=[tp], user_data=None).encode()
    assert codec.assignment_partitions(bytes(raw)) == [("t", [0])]
    assert codec.assignment_partitions(b"") == []
    assert codec.assignment_partitions(b"\x00\x00\xff") is None
    assert codec.subscription_topics(b"\x01") is None
