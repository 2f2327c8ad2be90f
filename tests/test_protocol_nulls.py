"""A null where the request schema allows none is a malformed request, as in Kafka.

kafka-python's decoders read a null into any string, bytes or array field; Kafka's
refuse one in a field that is not nullable at that version ("non-nullable field X was
serialized as null") and the broker closes the connection. decode_request does the
same (protocol/_nulls.py): MalformedRequest, which KafkaConnection turns into a
BadFrame. A null where the schema allows it decodes, and reaches the handler.
"""

from __future__ import annotations

import pytest
import schema_requests as sr
from tmsgate.gateway.kafka.routes import default_routes
from tmsgate.protocol import ApiKey, BadFrame, KafkaConnection, MalformedRequest, decode_request

JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
ROUTE_VERSIONS = [
    (r.api_key, v) for r in default_routes() for v in range(r.min_version, r.max_version + 1)
]


def _ids(case: tuple[int, int]) -> str:
    return f"{sr.request_class(case[0]).name}-v{case[1]}"


def check_null(api_key: int, version: int, field: sr.NullField) -> None:
    frame = sr.encode(sr.with_null(sr.sample(api_key, version), field.path), version)
    if field.nullable:
        decoded = decode_request(frame)
        assert sr.get(decoded.body, field.path) is None
        return
    with pytest.raises(MalformedRequest) as err:
        decode_request(frame)
    name = sr.request_class(api_key).name
    assert str(err.value) == f"{name} v{version}: {field.name} is null but not nullable"


@pytest.mark.parametrize("case", ROUTE_VERSIONS, ids=_ids)
def test_every_field_of_every_routed_request(case: tuple[int, int]) -> None:
    api_key, version = case
    assert decode_request(sr.encode(sr.sample(api_key, version), version)).body is not None
    for field in sr.null_fields(api_key, version):  # none in an empty ListGroups v0
        check_null(api_key, version, field)


def test_every_field_of_every_decodable_request() -> None:
    """decode_request decodes every API kafka-python knows (an unrouted one is then
    refused by the gateway): the check covers them all."""
    checked = 0
    for api_key, version in sr.all_versions():
        for field in sr.null_fields(api_key, version):
            check_null(api_key, version, field)
            checked += 1
    assert checked > 800


def test_the_connection_closes_on_an_illegal_null() -> None:
    conn = KafkaConnection()
    good = sr.encode(sr.sample(ApiKey.METADATA, 12), 12, correlation_id=1, framed=True)
    bad_request = sr.with_null(sr.sample(ApiKey.PRODUCE, 10), ("topic_data",))
    bad = sr.encode(bad_request, 10, correlation_id=2, framed=True)
    events = conn.receive_data(good + bad + good)
    assert [type(e).__name__ for e in events] == ["Request", "BadFrame"]
    assert isinstance(events[1], BadFrame)
    assert (events[1].correlation_id, events[1].api_key) == (2, ApiKey.PRODUCE)
    assert events[1].reason == "ProduceRequest v10: topic_data is null but not nullable"
    assert conn.broken


# The requests of the issue, and a few legal nulls next to them.
GOLDEN = [
    (ApiKey.PRODUCE, 10, ("topic_data",), "ProduceRequest v10: topic_data is null"),
    (ApiKey.PRODUCE, 10, ("topic_data", 0, "partition_data", 0, "records"), None),
    (ApiKey.PRODUCE, 10, ("transactional_id",), None),
    (ApiKey.FETCH, 16, ("topics",), "FetchRequest v16: topics is null"),
    (ApiKey.FETCH, 16, ("topics", 0, "partitions"), "FetchRequest v16: topics[0].partitions is"),
    (ApiKey.FETCH, 16, ("forgotten_topics_data",), "FetchRequest v16: forgotten_topics_data "),
    (ApiKey.FETCH, 16, ("rack_id",), "FetchRequest v16: rack_id is null"),
    (ApiKey.LIST_OFFSETS, 7, ("topics",), "ListOffsetsRequest v7: topics is null"),
    (ApiKey.LIST_OFFSETS, 7, ("topics", 0, "name"), "ListOffsetsRequest v7: topics[0].name is"),
    (ApiKey.OFFSET_COMMIT, 9, ("topics",), "OffsetCommitRequest v9: topics is null"),
    (ApiKey.OFFSET_COMMIT, 9, ("group_id",), "OffsetCommitRequest v9: group_id is null"),
    (ApiKey.OFFSET_COMMIT, 9, ("member_id",), "OffsetCommitRequest v9: member_id is null"),
    (ApiKey.OFFSET_COMMIT, 9, ("group_instance_id",), None),
    (ApiKey.OFFSET_COMMIT, 9, ("topics", 0, "partitions", 0, "committed_metadata"), None),
    (JOIN_GROUP, 5, ("protocols",), "JoinGroupRequest v5: protocols is null"),
    (JOIN_GROUP, 5, ("protocol_type",), "JoinGroupRequest v5: protocol_type is null"),
    (JOIN_GROUP, 5, ("group_instance_id",), None),
    (JOIN_GROUP, 7, ("protocol_type",), "JoinGroupRequest v7: protocol_type is null"),
    (JOIN_GROUP, 7, ("protocols", 0, "metadata"), "JoinGroupRequest v7: protocols[0].metadata"),
    (JOIN_GROUP, 7, ("member_id",), "JoinGroupRequest v7: member_id is null"),
    (SYNC_GROUP, 3, ("assignments",), "SyncGroupRequest v3: assignments is null"),
    (SYNC_GROUP, 3, ("group_instance_id",), None),
    (SYNC_GROUP, 5, ("protocol_name",), None),
    (LEAVE_GROUP, 5, ("members",), "LeaveGroupRequest v5: members is null"),
    (LEAVE_GROUP, 5, ("members", 0, "member_id"), "LeaveGroupRequest v5: members[0].member_id"),
    (LEAVE_GROUP, 5, ("members", 0, "reason"), None),
    (HEARTBEAT, 4, ("group_instance_id",), None),
    (ApiKey.METADATA, 0, ("topics",), "MetadataRequest v0: topics is null"),
    (ApiKey.METADATA, 1, ("topics",), None),
    (ApiKey.METADATA, 9, ("topics", 0, "name"), "MetadataRequest v9: topics[0].name is null"),
    (ApiKey.METADATA, 10, ("topics", 0, "name"), None),
]


@pytest.mark.parametrize(("api_key", "version", "path", "error"), GOLDEN)
def test_golden(api_key: int, version: int, path: sr.Path, error: str | None) -> None:
    frame = sr.encode(sr.with_null(sr.sample(api_key, version), path), version)
    if error is None:
        assert sr.get(decode_request(frame).body, path) is None
        return
    with pytest.raises(MalformedRequest, match="^" + error.replace("[", r"\[")):
        decode_request(frame)


def test_an_array_of_strings_holds_no_null() -> None:
    # DescribeGroups' groups is a []string: the array may not be null, nor an element.
    request = sr.sample(15, 5)
    request.groups = ["a", None, "b"]
    with pytest.raises(MalformedRequest, match=r"groups\[1\] is null"):
        decode_request(sr.encode(request, 5))


def test_tagged_fields_are_checked_only_when_sent() -> None:
    """Fetch v15+ replica_state is a tagged struct: absent, it reads as None (its default)."""
    request = sr.sample(ApiKey.FETCH, 16)
    assert decode_request(sr.encode(request, 16)).body.replica_state is None
    request.replica_state = request.ReplicaState(replica_id=-1, replica_epoch=-1)
    request.cluster_id = "c"
    body = decode_request(sr.encode(request, 16)).body
    assert body.tags == {"replica_state", "cluster_id"} and body.replica_state.replica_id == -1
