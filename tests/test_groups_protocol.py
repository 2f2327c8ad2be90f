"""The group APIs on the wire: a real gateway (KafkaServer on a socket, LevelDB store) in
this process, raw requests encoded with kafka-python's classes at every version the
route table advertises, and the bad inputs the issue lists."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.admin import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    ListGroupsRequest,
)
from kafka.protocol.consumer import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription
from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest
from tmsgate.gateway.kafka.broker import Broker
from tmsgate.gateway.kafka.config import GatewayConfig
from tmsgate.gateway.kafka.groups import GroupConfig
from tmsgate.gateway.kafka.groups.errors import ErrorCode as E
from tmsgate.gateway.kafka.handlers import ROUTES
from tmsgate.gateway.kafka.handlers.group_routes import GROUP_ROUTES
from tmsgate.gateway.kafka.routes import RouteTable
from tmsgate.gateway.kafka.server import KafkaServer
from tmsgate.protocol import response_class
from tmsgate.storage import TopicId, open_store

CONFIG = GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=100)
META = bytes(ConsumerProtocolSubscription(version=0, topics=["t"], user_data=None).encode())
VERSIONS = {r.api_key: (r.min_version, r.max_version) for r in GROUP_ROUTES}


def route_table() -> RouteTable:
    served = {r.api_key for r in ROUTES}
    return RouteTable(list(ROUTES) + [r for r in GROUP_ROUTES if r.api_key not in served])


def versions(cls: Any) -> range:
    low, high = VERSIONS[cls.API_KEY]
    return range(low, high + 1)


class Wire:
    """A raw Kafka client connection: one request at a time, decoded responses."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.correlation = 0

    async def call(self, cls: Any, version: int, **fields: Any) -> Any:
        self.correlation += 1
        req = cls(version=version, **fields)
        req.with_header(correlation_id=self.correlation, client_id="wire-test")
        self.writer.write(bytes(req.encode(header=True, framed=True)))
        (size,) = struct.unpack(">i", await self.reader.readexactly(4))
        frame = await self.reader.readexactly(size)
        resp = response_class(cls.API_KEY, version).decode(frame, version=version, header=True)
        assert resp.header.correlation_id == self.correlation
        return resp

    def close(self) -> None:
        self.writer.close()


@contextlib.asynccontextmanager
async def gateway(tmp_path: Path) -> AsyncIterator[tuple[Broker, Any]]:
    store = open_store(f"leveldb://{tmp_path / 'store'}")
    store.create_topic(TopicId("default", "t"), {})
    broker = Broker(store, GatewayConfig(port=0, groups=CONFIG))
    server = KafkaServer(broker, route_table())
    broker.attach(asyncio.get_running_loop())
    host, port = await server.start()
    wires: list[Wire] = []

    async def connect() -> Wire:
        wire = Wire(*await asyncio.open_connection(host, port))
        wires.append(wire)
        return wire

    try:
        yield broker, connect
    finally:
        for w in wires:
            w.close()
        await server.stop(2)
        broker.close()
        store.close()


def run(tmp_path: Path, scenario: Any) -> None:
    async def main() -> None:
        async with gateway(tmp_path) as (broker, connect):
            await scenario(broker, connect)

    asyncio.run(asyncio.wait_for(main(), 60))


def join_fields(version: int, group: str, member_id: str = "") -> dict[str, Any]:
    proto = JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=META)
    return {
        "group_id": group,
        "session_timeout_ms": 10000,
        "rebalance_timeout_ms": 5000,
        "member_id": member_id,
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [proto],
        "reason": None,
    }


async def join(wire: Wire, version: int, group: str) -> Any:
    resp = await wire.call(JoinGroupRequest, version, **join_fields(version, group))
    if version >= 4:
        assert resp.error_code == E.MEMBER_ID_REQUIRED and resp.member_id
        resp = await wire.call(
            JoinGroupRequest, version, **join_fields(version, group, resp.member_id)
        )
    assert resp.error_code == E.NONE, resp
    return resp


async def member(wire: Wire, group: str) -> Any:
    """Join and sync one member; -> its JoinGroup response."""
    j = await join(wire, 5, group)
    a = SyncGroupRequest.SyncGroupRequestAssignment(member_id=j.member_id, assignment=b"plan")
    s = await wire.call(
        SyncGroupRequest,
        3,
        group_id=group,
        generation_id=j.generation_id,
        member_id=j.member_id,
        group_instance_id=None,
        assignments=[a],
    )
    assert s.error_code == E.NONE and s.assignment == b"plan"
    return j


def commit_fields(group: str, generation: int, member_id: str, offset: int, meta: str | None):
    P = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition
    part = P(
        partition_index=0,
        committed_offset=offset,
        committed_leader_epoch=-1,
        commit_timestamp=-1,
        committed_metadata=meta,
    )
    topic = OffsetCommitRequest.OffsetCommitRequestTopic(name="t", partitions=[part])
    return {
        "group_id": group,
        "generation_id_or_member_epoch": generation,
        "member_id": member_id,
        "group_instance_id": None,
        "retention_time_ms": -1,
        "topics": [topic],
    }


# --- every version ----------------------------------------------------------------------
def test_api_versions_advertises_the_group_apis(tmp_path):
    async def scenario(broker, connect):
        wire = await connect()
        resp = await wire.call(
            ApiVersionsRequest, 3, client_software_name="t", client_software_version="1"
        )
        got = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        for key, span in VERSIONS.items():
            assert got[key] == span

    run(tmp_path, scenario)


def test_find_coordinator_every_version(tmp_path):
    async def scenario(broker, connect):
        wire = await connect()
        for v in versions(FindCoordinatorRequest):
            resp = await wire.call(
                FindCoordinatorRequest, v, key="g", key_type=0, coordinator_keys=["g", "h"]
            )
            answers = resp.coordinators if v >= 4 else [resp]
            assert len(answers) == (2 if v >= 4 else 1)
            for a in answers:
                assert (a.error_code, a.node_id) == (0, 0)
                assert (a.host, a.port) == (broker.advertised_host, broker.advertised_port)
        resp = await wire.call(FindCoordinatorRequest, 2, key="g", key_type=2)
        assert resp.error_code == E.INVALID_REQUEST

    run(tmp_path, scenario)


def test_join_sync_heartbeat_leave_every_version(tmp_path):
    async def scenario(broker, connect):
        wire = await connect()
        for v in versions(JoinGroupRequest):
            j = await join(wire, v, f"join-v{v}")
            assert j.generation_id == 1 and j.leader == j.member_id
            assert [m.member_id for m in j.members] == [j.member_id]
            assert bytes(j.members[0].metadata) == META
            assert j.protocol_name == "range"
        for v in versions(SyncGroupRequest):
            j = await join(wire, 5, f"sync-v{v}")
            a = SyncGroupRequest.SyncGroupRequestAssignment(member_id=j.member_id, assignment=b"x")
            s = await wire.call(
                SyncGroupRequest,
                v,
                group_id=f"sync-v{v}",
                generation_id=1,
                member_id=j.member_id,
                group_instance_id=None,
                protocol_type="consumer",
                protocol_name="range",
                assignments=[a],
            )
            assert (s.error_code, bytes(s.assignment)) == (0, b"x")
        for v in versions(HeartbeatRequest):
            j = await member(wire, f"hb-v{v}")
            fields = {"group_id": f"hb-v{v}", "member_id": j.member_id, "group_instance_id": None}
            ok = await wire.call(HeartbeatRequest, v, generation_id=1, **fields)
            stale = await wire.call(HeartbeatRequest, v, generation_id=0, **fields)
            assert (ok.error_code, stale.error_code) == (E.NONE, E.ILLEGAL_GENERATION)
        for v in versions(LeaveGroupRequest):
            j = await member(wire, f"leave-v{v}")
            M = LeaveGroupRequest.MemberIdentity
            resp = await wire.call(
                LeaveGroupRequest,
                v,
                group_id=f"leave-v{v}",
                member_id=j.member_id,
                members=[
                    M(member_id=j.member_id, group_instance_id=None, reason=None),
                    M(member_id="ghost", group_instance_id=None, reason=None),
                ],
            )
            if v >= 3:
                assert resp.error_code == 0
                assert [m.error_code for m in resp.members] == [E.NONE, E.UNKNOWN_MEMBER_ID]
            else:
                assert resp.error_code == 0
            gone = await wire.call(
                LeaveGroupRequest,
                v,
                group_id=f"leave-v{v}",
                member_id="ghost",
                members=[M(member_id="ghost", group_instance_id=None, reason=None)],
            )
            codes = [m.error_code for m in gone.members] if v >= 3 else [gone.error_code]
            assert codes == [E.UNKNOWN_MEMBER_ID]

    run(tmp_path, scenario)


def test_offset_commit_and_fetch_every_version(tmp_path):
    async def scenario(broker, connect):
        wire = await connect()
        for v in versions(OffsetCommitRequest):
            group = f"commit-v{v}"
            j = await member(wire, group)
            resp = await wire.call(
                OffsetCommitRequest,
                v,
                **commit_fields(group, j.generation_id, j.member_id, 10 + v, f"m{v}"),
            )
            assert [p.error_code for t in resp.topics for p in t.partitions] == [0]
        for v in versions(OffsetFetchRequest):
            group = f"commit-v{max(2, min(v, 9))}"
            expected = 10 + max(2, min(v, 9))
            T = OffsetFetchRequest.OffsetFetchRequestTopic
            if v >= 8:
                G = OffsetFetchRequest.OffsetFetchRequestGroup
                GT = G.OffsetFetchRequestTopics
                resp = await wire.call(
                    OffsetFetchRequest,
                    v,
                    require_stable=False,
                    groups=[
                        G(
                            group_id=group,
                            member_id=None,
                            member_epoch=-1,
                            topics=[GT(name="t", partition_indexes=[0])],
                        ),
                        G(group_id="commit-v3", member_id=None, member_epoch=-1, topics=None),
                    ],
                )
                first, second = resp.groups
                assert first.error_code == 0
                p = first.topics[0].partitions[0]
                assert (p.committed_offset, p.metadata) == (expected, f"m{expected - 10}")
                assert second.topics[0].partitions[0].committed_offset == 13
            else:
                resp = await wire.call(
                    OffsetFetchRequest,
                    v,
                    group_id=group,
                    require_stable=False,
                    topics=[T(name="t", partition_indexes=[0, 3])],
                )
                parts = resp.topics[0].partitions
                assert [(p.partition_index, p.committed_offset) for p in parts] == [
                    (0, expected),
                    (3, -1),
                ]
                assert parts[0].metadata == f"m{expected - 10}"
                if v >= 2:
                    everything = await wire.call(
                        OffsetFetchRequest, v, group_id=group, require_stable=False, topics=None
                    )
                    assert [t.name for t in everything.topics] == ["t"]

    run(tmp_path, scenario)


def test_describe_list_delete_every_version(tmp_path):
    async def scenario(broker, connect):
        wire = await connect()
        j = await member(wire, "live")
        for v in versions(DescribeGroupsRequest):
            resp = await wire.call(
                DescribeGroupsRequest,
                v,
                groups=["live", "nope"],
                include_authorized_operations=True,
            )
            live, nope = resp.groups
            assert (live.error_code, live.group_state, live.protocol_data) == (0, "Stable", "range")
            assert [m.member_id for m in live.members] == [j.member_id]
            assert bytes(live.members[0].member_assignment) == b"plan"
            assert live.members[0].client_host == "/127.0.0.1"
            assert live.members[0].client_id == "wire-test"
            assert nope.group_state == "Dead"
            assert nope.error_code == (E.GROUP_ID_NOT_FOUND if v >= 6 else 0)
        for v in versions(ListGroupsRequest):
            resp = await wire.call(ListGroupsRequest, v, states_filter=["stable"], types_filter=[])
            assert [(g.group_id, g.protocol_type) for g in resp.groups] == [("live", "consumer")]
            if v >= 4:
                none = await wire.call(
                    ListGroupsRequest, v, states_filter=["Empty"], types_filter=[]
                )
                assert none.groups == []
        for v in versions(DeleteGroupsRequest):
            await wire.call(OffsetCommitRequest, 2, **commit_fields(f"del-v{v}", -1, "", 1, None))
            resp = await wire.call(
                DeleteGroupsRequest, v, groups_names=[f"del-v{v}", "live", "nope"]
            )
            assert [r.error_code for r in resp.results] == [
                E.NONE,
                E.NON_EMPTY_GROUP,
                E.GROUP_ID_NOT_FOUND,
            ]
        T = OffsetDeleteRequest.OffsetDeleteRequestTopic
        P = T.OffsetDeleteRequestPartition
        await wire.call(OffsetCommitRequest, 2, **commit_fields("od", -1, "", 1, None))
        resp = await wire.call(
            OffsetDeleteRequest,
            0,
            group_id="od",
            topics=[
                T(name="t", partitions=[P(partition_index=0)]),
                T(name="zz", partitions=[P(partition_index=0)]),
            ],
        )
        assert resp.error_code == 0
        assert [p.error_code for t in resp.topics for p in t.partitions] == [
            E.NONE,
            E.UNKNOWN_TOPIC_OR_PARTITION,
        ]
        resp = await wire.call(OffsetDeleteRequest, 0, group_id="nope", topics=[])
        assert resp.error_code == E.GROUP_ID_NOT_FOUND

    run(tmp_path, scenario)


# --- bad input --------------------------------------------------------------------------
def test_bad_input_gets_kafka_error_codes_and_other_groups_keep_working(tmp_path, caplog):
    async def scenario(broker, connect):
        wire = await connect()
        good = await member(wire, "good")
        hb = {"group_instance_id": None}
        r = await wire.call(
            HeartbeatRequest, 3, group_id="nope", generation_id=1, member_id="x", **hb
        )
        assert r.error_code == E.UNKNOWN_MEMBER_ID
        r = await wire.call(
            HeartbeatRequest, 3, group_id="good", generation_id=7, member_id=good.member_id, **hb
        )
        assert r.error_code == E.ILLEGAL_GENERATION
        r = await wire.call(
            OffsetCommitRequest, 8, **commit_fields("good", 1, good.member_id, 5, "x" * 5000)
        )
        assert r.topics[0].partitions[0].error_code == E.OFFSET_METADATA_TOO_LARGE
        fields = commit_fields("good", 1, good.member_id, 5, None)
        fields["topics"][0].name = "no-such-topic"
        r = await wire.call(OffsetCommitRequest, 8, **fields)
        assert r.topics[0].partitions[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION
        r = await wire.call(
            OffsetCommitRequest, 8, **commit_fields("good", 0, good.member_id, 5, None)
        )
        assert r.topics[0].partitions[0].error_code == E.ILLEGAL_GENERATION
        bad = join_fields(5, "")
        r = await wire.call(JoinGroupRequest, 5, **bad)
        assert r.error_code == E.INVALID_GROUP_ID
        bad = join_fields(5, "good")
        bad["session_timeout_ms"] = 1
        r = await wire.call(JoinGroupRequest, 5, **bad)
        assert r.error_code == E.INVALID_SESSION_TIMEOUT

        # A malformed JoinGroup closes only its own connection.
        evil = await connect()
        frame = struct.pack(">hhih", 11, 5, 99, 4) + b"evil" + b"\x00\x01g\xff"
        evil.writer.write(struct.pack(">i", len(frame)) + frame)
        assert await evil.reader.read(100) == b""

        r = await wire.call(
            HeartbeatRequest, 3, group_id="good", generation_id=1, member_id=good.member_id, **hb
        )
        assert r.error_code == E.NONE
        ok = await wire.call(
            OffsetCommitRequest, 8, **commit_fields("good", 1, good.member_id, 6, None)
        )
        assert ok.topics[0].partitions[0].error_code == E.NONE

    with caplog.at_level("INFO", logger="tmsgate"):
        run(tmp_path, scenario)
    text = caplog.text
    assert "ILLEGAL_GENERATION" in text and "OFFSET_METADATA_TOO_LARGE" in text
    assert "UNKNOWN_TOPIC_OR_PARTITION" in text and "INVALID_SESSION_TIMEOUT" in text
    assert "malformed request" in text


def test_repeated_refusals_log_one_line(tmp_path, caplog):
    """A client heartbeating a group the gateway does not know is answered every time,
    and logged once (then counted), not a line per heartbeat."""

    async def scenario(broker, connect):
        wire = await connect()
        hb = {"group_instance_id": None}
        for _ in range(50):
            r = await wire.call(
                HeartbeatRequest, 3, group_id="gone", generation_id=1, member_id="m", **hb
            )
            assert r.error_code == E.UNKNOWN_MEMBER_ID

    with caplog.at_level("INFO", logger="tmsgate"):
        run(tmp_path, scenario)
    lines = [r for r in caplog.records if "UNKNOWN_MEMBER_ID" in r.getMessage()]
    assert len([r for r in lines if r.levelname == "INFO"]) == 1


def test_shutdown_answers_a_long_polling_join(tmp_path):
    async def scenario(broker, connect):
        a, b = await connect(), await connect()
        first = await member(a, "g")
        waiting = asyncio.ensure_future(join(b, 5, "g"))  # waits for "a" to rejoin
        await asyncio.sleep(0.2)
        assert not waiting.done()
        broker.begin_shutdown()  # the coordinator notices and answers NOT_COORDINATOR
        with pytest.raises(AssertionError, match="error_code=16"):
            await asyncio.wait_for(waiting, 3)
        del first

    run(tmp_path, scenario)
