"""`tmsgate groups list|describe` over a store the coordinator wrote (real LevelDB)."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

import pytest
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)
from tmsgate.gateway import groups_cli
from tmsgate.gateway.kafka.broker import Broker
from tmsgate.gateway.kafka.config import GatewayConfig
from tmsgate.gateway.kafka.groups import (
    GroupConfig,
    JoinRequest,
    OffsetCommit,
    SyncRequest,
)
from tmsgate.gateway.kafka.groups.errors import ErrorCode as E
from tmsgate.storage import TopicId, open_store


def cli(*argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="tmsgate")
    groups_cli.add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return groups_cli.run(args), "", ""


def assignment(topic: str) -> bytes:
    tp = ConsumerProtocolAssignment.TopicPartition(topic=topic, partitions=[0])
    return bytes(
        ConsumerProtocolAssignment(version=0, assigned_partitions=[tp], user_data=None).encode()
    )


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    """A store with topic "t" (10 messages), group "live" (one member, committed 4),
    group "done" (empty, committed 10 to "t" and 1 to topic "old", since recreated)."""
    url = f"leveldb://{tmp_path / 'store'}"
    store = open_store(url)
    store.create_topic(TopicId("default", "t"), {})
    store.create_topic(TopicId("default", "old"), {})
    store.publish(TopicId("default", "t"), [b"x"] * 10)
    broker = Broker(store, GatewayConfig(groups=GroupConfig(initial_rebalance_delay_ms=0)))
    coord = broker.groups
    meta = bytes(ConsumerProtocolSubscription(version=0, topics=["t"], user_data=None).encode())

    async def build() -> None:
        req = JoinRequest(
            "live",
            "",
            None,
            "consumer",
            (("range", meta),),
            10000,
            10000,
            "cli-client",
            "/10.0.0.7",
            require_known_member_id=False,
        )
        joined = await coord.join(req)
        assert joined.error is E.NONE
        synced = await coord.sync(
            SyncRequest("live", 1, joined.member_id, None, {joined.member_id: assignment("t")})
        )
        assert synced.error is E.NONE
        await coord.commit("live", 1, joined.member_id, None, [OffsetCommit("t", 0, 4, -1, "m")])
        await coord.commit(
            "done", -1, "", None, [OffsetCommit("t", 0, 10), OffsetCommit("old", 0, 1)]
        )
        await broker.topics.delete("old")
        await coord.writer.flush()

    asyncio.run(build())
    store.create_topic(TopicId("default", "old"), {})
    coord.shutdown()
    broker.close()
    store.close()
    return url


def test_list(store_url, capsys):
    assert cli("groups", "list", "--store", store_url)[0] == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == [
        "GROUP",
        "STATE",
        "GENERATION",
        "MEMBERS",
        "PROTOCOL",
        "OFFSETS",
        "LAG",
    ]
    assert out[1].split() == ["done", "Empty", "0", "0", "-", "2", "0"]
    assert out[2].split() == ["live", "Stable", "1", "1", "consumer/range", "1", "6"]
    assert cli("groups", "list", "--store", store_url, "--json")[0] == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["group"], r["lag"]) for r in rows] == [("done", 0), ("live", 6)]


def test_describe(store_url, capsys):
    assert cli("groups", "describe", "live", "--store", store_url)[0] == 0
    out = capsys.readouterr().out
    assert "group live: Stable, generation 1, protocol consumer/range" in out
    assert "client=cli-client  host=/10.0.0.7  session=10000ms  assignment=t-0" in out
    line = next(x for x in out.splitlines() if x.strip().startswith("t "))
    assert line.split() == ["t", "0", "4", "10", "6", "m"]

    assert cli("groups", "describe", "done", "--store", store_url, "--json")[0] == 0
    doc = json.loads(capsys.readouterr().out)
    offsets = {o["topic"]: o for o in doc["offsets"]}
    assert offsets["t"]["lag"] == 0 and not offsets["t"]["stale"]
    assert offsets["old"]["stale"] and offsets["old"]["lag"] is None
    assert doc["state"] == "Empty" and doc["members"] == []

    assert cli("groups", "describe", "nope", "--store", store_url)[0] == 1
    assert "does not exist" in capsys.readouterr().err


def test_reads_a_snapshot_while_a_gateway_holds_the_store(store_url, capsys):
    store = open_store(store_url)  # holds the LevelDB lock, as a running gateway does
    try:
        assert cli("groups", "describe", "live", "--store", store_url, "--json")[0] == 0
    finally:
        store.close()
    captured = capsys.readouterr()
    assert "point-in-time copy" in captured.err
    assert json.loads(captured.out)["offsets"][0]["committed"] == 4
