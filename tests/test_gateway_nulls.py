"""Nulls on a live gateway (issue, defect 5): where the schema forbids one the connection
is closed without an answer (as Kafka closes it), and where it allows one the handler
answers what Kafka answers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kafka_requests as kr
import pytest
import schema_requests as sr
from gateway_harness import GatewayThread, RawClient, gateway_thread
from kafka.protocol.admin import (
    AlterConfigsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)
from kafka.protocol.consumer import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription
from tmsgate.gateway.kafka.groups import GroupConfig
from tmsgate.protocol import ApiKey, ErrorCode

JOIN_GROUP, LEAVE_GROUP, SYNC_GROUP = 11, 13, 14
TOPIC = "nulls"
SET, DELETE = 0, 1


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayThread]:
    config = GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=100)
    with gateway_thread(Path(tmp_path_factory.mktemp("nulls")), groups=config) as g:
        client = RawClient(g.address)
        assert client.request(kr.create_topic(TOPIC), 5).topics[0].error_code == 0
        client.close()
        yield g


@pytest.fixture
def client(gw: GatewayThread) -> Iterator[RawClient]:
    c = RawClient(gw.address)
    yield c
    c.close()


ISSUE = [  # the requests of the issue, each with a null where the schema allows none
    (ApiKey.PRODUCE, 10, ("topic_data",)),
    (ApiKey.FETCH, 16, ("topics",)),
    (ApiKey.LIST_OFFSETS, 7, ("topics",)),
    (ApiKey.OFFSET_COMMIT, 9, ("topics",)),
    (JOIN_GROUP, 5, ("protocols",)),
    (JOIN_GROUP, 7, ("protocol_type",)),
    (SYNC_GROUP, 3, ("assignments",)),
    (LEAVE_GROUP, 5, ("members",)),
]


@pytest.mark.parametrize(("api_key", "version", "path"), ISSUE)
def test_an_illegal_null_closes_the_connection(
    gw: GatewayThread, client: RawClient, api_key: int, version: int, path: sr.Path
) -> None:
    request = sr.with_null(sr.sample(api_key, version, strings=TOPIC), path)
    client.send_raw(sr.encode(request, version, framed=True))
    assert client.closed_by_peer()
    other = RawClient(gw.address)  # the gateway itself is fine
    assert other.request(kr.metadata(TOPIC), 12).topics[0].error_code == 0
    other.close()


def _incremental(name: str, op: int, value: str | None, resource_type: int = 2) -> Any:
    res = IncrementalAlterConfigsRequest.AlterConfigsResource
    config = res.AlterableConfig(name=name, config_operation=op, value=value)
    resource = res(resource_type=resource_type, resource_name=TOPIC, configs=[config])
    return IncrementalAlterConfigsRequest(resources=[resource], validate_only=False)


def _legacy(name: str, value: str | None, resource_type: int = 2) -> Any:
    res = AlterConfigsRequest.AlterConfigsResource
    config = res.AlterableConfig(name=name, value=value)
    resource = res(resource_type=resource_type, resource_name=TOPIC, configs=[config])
    return AlterConfigsRequest(resources=[resource], validate_only=False)


def _retention(client: RawClient) -> str:
    resource = DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=2, resource_name=TOPIC, configuration_keys=["retention.ms"]
    )
    request = DescribeConfigsRequest(resources=[resource], include_synonyms=False)
    return str(client.request(request, 4).results[0].configs[0].value)


def test_a_null_config_value_is_an_invalid_request(client: RawClient) -> None:
    """Kafka's ConfigAdminManager refuses a null value, except for an incremental DELETE;
    let through, it reset the config to its default."""
    assert (
        client.request(_incremental("retention.ms", SET, "60000"), 1).responses[0].error_code == 0
    )
    for request, version in [
        (_incremental("retention.ms", SET, None), 1),
        (_incremental("retention.ms", SET, None, resource_type=4), 0),  # before the type
        (_legacy("retention.ms", None), 2),
    ]:
        answer = client.request(request, version).responses[0]
        assert answer.error_code == ErrorCode.INVALID_REQUEST
        assert answer.error_message == "Null value not supported for : retention.ms"
    assert _retention(client) == "60000"
    # Legacy AlterConfigs looks at the resource type first.
    answer = client.request(_legacy("retention.ms", None, resource_type=4), 0).responses[0]
    assert answer.error_message == "only topic configs can be altered"
    # DELETE needs no value.
    assert (
        client.request(_incremental("retention.ms", DELETE, None), 1).responses[0].error_code == 0
    )
    assert _retention(client) == "-1"


def test_init_producer_id_tells_null_from_empty(client: RawClient) -> None:
    request = kr.init_producer_id()
    answer = client.request(request, 4)
    assert answer.error_code == 0 and answer.producer_id >= 0
    request.transactional_id = ""
    assert client.request(request, 4).error_code == ErrorCode.INVALID_REQUEST


def test_a_group_with_every_legal_null(client: RawClient) -> None:
    """Static membership, protocol checks, offset metadata and topic lists all null."""
    group = "nulls-group"
    meta = bytes(ConsumerProtocolSubscription(version=0, topics=[TOPIC], user_data=None).encode())
    proto = JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=meta)
    join = JoinGroupRequest(
        group_id=group,
        session_timeout_ms=10_000,
        rebalance_timeout_ms=5_000,
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=[proto],
        reason=None,
    )
    first = client.request(join, 9)
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    join.member_id = first.member_id
    joined = client.request(join, 9)
    assert joined.error_code == 0 and joined.leader == joined.member_id
    member, generation = joined.member_id, joined.generation_id

    assignment = SyncGroupRequest.SyncGroupRequestAssignment(member_id=member, assignment=b"a")
    sync = SyncGroupRequest(
        group_id=group,
        generation_id=generation,
        member_id=member,
        group_instance_id=None,
        protocol_type=None,
        protocol_name=None,
        assignments=[assignment],
    )
    synced = client.request(sync, 5)
    assert synced.error_code == 0 and bytes(synced.assignment) == b"a"
    heartbeat = HeartbeatRequest(
        group_id=group, generation_id=generation, member_id=member, group_instance_id=None
    )
    assert client.request(heartbeat, 4).error_code == 0

    partition = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
        partition_index=0, committed_offset=0, committed_leader_epoch=-1, committed_metadata=None
    )
    commit = OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member,
        group_instance_id=None,
        topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=TOPIC, partitions=[partition])],
    )
    assert client.request(commit, 9).topics[0].partitions[0].error_code == 0
    # Kafka keeps a null commit metadata as "" (OffsetAndMetadata.NO_METADATA).
    fetch_group = OffsetFetchRequest.OffsetFetchRequestGroup(
        group_id=group, member_id=None, member_epoch=-1, topics=None
    )
    fetched = client.request(OffsetFetchRequest(groups=[fetch_group], require_stable=False), 9)
    (got,) = [p for t in fetched.groups[0].topics if t.name == TOPIC for p in t.partitions]
    assert (got.committed_offset, got.metadata, got.error_code) == (0, "", 0)
    fetched = client.request(OffsetFetchRequest(group_id=group, topics=None), 7)
    (got,) = [p for t in fetched.topics if t.name == TOPIC for p in t.partitions]
    assert (got.committed_offset, got.metadata) == (0, "")

    leaving = LeaveGroupRequest.MemberIdentity(
        member_id=member, group_instance_id=None, reason=None
    )
    left = client.request(LeaveGroupRequest(group_id=group, members=[leaving]), 5)
    assert left.error_code == 0 and left.members[0].error_code == 0
