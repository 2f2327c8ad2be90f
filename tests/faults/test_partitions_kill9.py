"""kill -9 between the writes of a Kafka topic change that spans partitions.

A Kafka topic with N partitions is N TMS topics (``name``, ``name~1`` ...); a change to all
of them is written in commit-point order, partition 0 deciding (storage/partitions.py), and
the gateway's ``repair`` at start finishes or undoes what a crash cut short. The gateway
runs with ``TMSGATE_FAULT_TOPIC_PAUSE=<step>`` (gateway/faults.py): a real client's admin
request stops between two writes, the test waits for the fault line in the log and kills
the gateway with SIGKILL, then restarts it without the fault point (and kills and restarts
it once more, to see the repair is idempotent). Topics have 3 partitions, 4 records each.

  * ``create.head`` (CreateTopics: partitions 1 and 2 written, partition 0 not): the topic
    does not exist for Kafka clients, no ``name~p`` remains in the store, and creating it
    again gives 3 empty partitions that take records from offset 0.
  * ``grow.count`` (CreatePartitions 3 -> 5: partitions 3 and 4 written, the count not):
    the topic still has 3 partitions holding their records, ``name~3`` and ``name~4`` are
    gone, and growing again gives 2 empty partitions.
  * ``update.rest`` (Incremental/AlterConfigs retention.ms: partition 0 changed, 1 and 2
    not): DescribeConfigs reports the new retention.ms and every partition in the store
    carries partition 0's ttl (and other properties); the records are intact.
  * ``delete.rest`` (DeleteTopics: partition 0 deleted, 1 and 2 not): the topic is gone
    for Kafka clients, ``name~1`` and ``name~2`` are gone, and creating it again gives
    empty partitions.

The store is read through the HTTP API while the gateway runs and directly (the storage API)
once it is stopped.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)
from tmsgate.storage import TopicId, open_store

pytestmark = pytest.mark.timeout(180)

PAUSE = "TMSGATE_FAULT_TOPIC_PAUSE"
PARTITIONS = 3
GROWN = 5
RECORDS = 4  # per partition
OLD_RETENTION_MS, NEW_RETENTION_MS = "86400000", "604800000"  # ttl 86400 -> 604800 s
REQUEST_TIMEOUT_S = 5.0  # the paused admin request: it fails at the kill, or by this
WAIT_S = 20.0
PARTITION_COUNT = "kafka.partitions"


# --------------------------------------------------------------------------- clients


def admin(gw) -> AdminClient:
    return AdminClient({"bootstrap.servers": gw.bootstrap})


def done(gw, request: Callable[[AdminClient], dict[object, Future]]) -> None:
    """Run an admin request to completion (the client must outlive its futures)."""
    client = admin(gw)
    for fut in request(client).values():
        fut.result(10)


def kafka_partitions(gw, name: str) -> int | None:
    """The topic's partition count in a Metadata answer for all topics, None if it has none
    (asking for the topic by name could auto-create it)."""
    topics = admin(gw).list_topics(timeout=10).topics
    return len(topics[name].partitions) if name in topics else None


def values(name: str, partition: int, tag: str = "r") -> list[bytes]:
    return [f"{name}/{partition}/{tag}{i}".encode() for i in range(RECORDS)]


def produce(gw, name: str, partitions: range, tag: str = "r") -> None:
    producer = Producer({"bootstrap.servers": gw.bootstrap, "linger.ms": 0})
    failed: list[object] = []
    for p in partitions:
        for value in values(name, p, tag):
            producer.produce(
                name, value, partition=p, on_delivery=lambda err, _m: err and failed.append(err)
            )
    assert producer.flush(15) == 0
    assert failed == []


def read(gw, name: str, partition: int) -> list[tuple[int, bytes]]:
    """Every record of one partition: low and high watermarks (ListOffsets), then a fetch
    from the low one until the high one is reached."""
    consumer = Consumer(
        {
            "bootstrap.servers": gw.bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
        }
    )
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(name, partition), timeout=10)
        out: list[tuple[int, bytes]] = []
        if high <= low:
            return out
        consumer.assign([TopicPartition(name, partition, low)])
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and (not out or out[-1][0] + 1 < high):
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                out.append((msg.offset(), msg.value()))
        return out
    finally:
        consumer.close()


def watermarks(gw, name: str, partitions: range) -> list[tuple[int, int]]:
    consumer = Consumer({"bootstrap.servers": gw.bootstrap, "group.id": "watermarks"})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(name, p), timeout=10) for p in partitions
        ]
    finally:
        consumer.close()


def retention_ms(gw, name: str) -> str:
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    client = admin(gw)
    [fut] = client.describe_configs([resource], request_timeout=10).values()
    return fut.result(10)["retention.ms"].value


def create(gw, name: str, count: int = PARTITIONS) -> None:
    topic = NewTopic(name, count, 1, config={"retention.ms": OLD_RETENTION_MS})
    done(gw, lambda a: a.create_topics([topic], request_timeout=10))


# --------------------------------------------------------------------------- the store


def store_topics(gw, name: str) -> list[str]:
    """The store's TMS topics of Kafka topic ``name`` (HTTP API, gateway running)."""
    resp = httpx.get(f"{gw.http_url}/v1/namespaces/default/topics", timeout=10)
    resp.raise_for_status()
    return sorted(t for t in resp.json() if t == name or t.startswith(f"{name}~"))


def store_properties(gw, tms_topic: str) -> dict[str, str]:
    resp = httpx.get(f"{gw.http_url}/v1/namespaces/default/topics/{tms_topic}", timeout=10)
    resp.raise_for_status()
    return resp.json()["properties"]


def described(gw, *tms_topics: str) -> dict[str, dict]:
    """The stopped gateway's store, read directly: each TMS topic's properties and offsets
    (the CLI shows Kafka topics whole; these checks are about the partitions' rows)."""
    assert not gw.alive()
    with open_store(f"leveldb://{gw.store_dir}") as store:
        out = {}
        for name in tms_topics:
            t = TopicId("default", name)
            earliest, nxt = store.offsets(t)
            out[name] = {
                "properties": dict(store.get_topic(t).properties),
                "earliest_offset": earliest,
                "next_offset": nxt,
            }
        return out


def cli_topics(gw, name: str) -> list[str]:
    """The stopped gateway's store's TMS topics of Kafka topic ``name``."""
    assert not gw.alive()
    with open_store(f"leveldb://{gw.store_dir}") as store:
        names = [t.topic for t in store.list_topics("default")]
    return sorted(t for t in names if t == name or t.startswith(f"{name}~"))


def assert_empty_store(gw, name: str) -> None:
    assert cli_topics(gw, name) == []


def shared(properties: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in properties.items() if k != PARTITION_COUNT}


# --------------------------------------------------------------------------- the crash


def crash_between_writes(
    gw, step: str, change: Callable[[AdminClient], dict[object, Future]]
) -> str:
    """Issue ``change`` through an admin client, wait until the gateway pauses before
    ``step``, kill -9 it, and start it again without the fault point. -> how the paused
    request ended for the client (it never succeeds)."""
    client = admin(gw)
    futures = change(client)
    marker = f"fault: topic change paused before {step}"
    deadline = time.monotonic() + WAIT_S
    while marker not in gw.log_path.read_text(errors="replace") and time.monotonic() < deadline:
        assert gw.alive(), gw.log_tail()
        time.sleep(0.05)
    assert marker in gw.log_path.read_text(errors="replace"), gw.log_tail()
    gw.kill9()
    # The request fails (connection lost, or its timeout): wait for it and drop the client
    # before the restart, so no retry of the change can reach the new process.
    outcomes = []
    for fut in futures.values():
        exc = fut.exception(REQUEST_TIMEOUT_S + 10)
        assert exc is not None, "the paused change cannot have succeeded"
        outcomes.append(exc.args[0].name() if exc.args and hasattr(exc.args[0], "name") else exc)
    del client, futures
    gw.extra_env = {}
    gw.start()
    return str(outcomes[0])


def restarts(gw, check: Callable[[int], None]) -> None:
    """``check`` after the restart that repaired, then after one more kill -9 and start."""
    check(0)
    gw.crash_restart()
    check(1)


def stopped(gw, check: Callable[[], None]) -> None:
    """``check`` (the CLI on the store) with the gateway stopped, then start it again."""
    gw.stop()
    check()
    gw.start()


# --------------------------------------------------------------------------- the tests


def test_kill9_before_partition_0_of_a_creation(fault_gateway, fault_topic_name, faults_report):
    gw = fault_gateway(env={PAUSE: "create.head"})
    name = fault_topic_name
    topic = NewTopic(name, PARTITIONS, 1, config={"retention.ms": OLD_RETENTION_MS})
    outcome = crash_between_writes(
        gw, "create.head", lambda a: a.create_topics([topic], request_timeout=REQUEST_TIMEOUT_S)
    )
    faults_report(step="create.head", paused_request=outcome)

    def check(restart: int) -> None:
        assert kafka_partitions(gw, name) is None, restart
        assert store_topics(gw, name) == [], restart

    restarts(gw, check)
    stopped(gw, lambda: assert_empty_store(gw, name))
    create(gw, name)
    assert kafka_partitions(gw, name) == PARTITIONS
    assert store_topics(gw, name) == [name, f"{name}~1", f"{name}~2"]
    assert watermarks(gw, name, range(PARTITIONS)) == [(0, 0)] * PARTITIONS
    produce(gw, name, range(PARTITIONS))
    for p in range(PARTITIONS):
        assert read(gw, name, p) == list(enumerate(values(name, p))), p


def test_kill9_before_the_count_of_a_grow(fault_gateway, fault_topic_name, faults_report):
    gw = fault_gateway(env={PAUSE: "grow.count"})
    name = fault_topic_name
    create(gw, name)
    produce(gw, name, range(PARTITIONS))
    outcome = crash_between_writes(
        gw,
        "grow.count",
        lambda a: a.create_partitions(
            [NewPartitions(name, GROWN)], request_timeout=REQUEST_TIMEOUT_S
        ),
    )
    faults_report(step="grow.count", paused_request=outcome)
    old = [name, f"{name}~1", f"{name}~2"]

    def check(restart: int) -> None:
        assert kafka_partitions(gw, name) == PARTITIONS, restart
        assert store_topics(gw, name) == old, restart
        for p in range(PARTITIONS):
            assert read(gw, name, p) == list(enumerate(values(name, p))), (restart, p)

    restarts(gw, check)

    def check_store() -> None:
        assert cli_topics(gw, name) == old
        head = described(gw, name)[name]
        assert head["properties"][PARTITION_COUNT] == str(PARTITIONS)
        assert (head["earliest_offset"], head["next_offset"]) == (0, RECORDS)

    stopped(gw, check_store)
    done(gw, lambda a: a.create_partitions([NewPartitions(name, GROWN)], request_timeout=10))
    assert kafka_partitions(gw, name) == GROWN
    assert store_topics(gw, name) == sorted([*old, f"{name}~3", f"{name}~4"])
    assert watermarks(gw, name, range(PARTITIONS, GROWN)) == [(0, 0)] * (GROWN - PARTITIONS)
    head = store_properties(gw, name)
    for p in range(1, GROWN):
        assert store_properties(gw, f"{name}~{p}") == shared(head), p
    produce(gw, name, range(PARTITIONS, GROWN), tag="new")
    for p in range(GROWN):
        want = values(name, p, "new" if p >= PARTITIONS else "r")
        assert read(gw, name, p) == list(enumerate(want)), p


def _incremental(name: str) -> Callable[[AdminClient], dict[object, Future]]:
    entry = ConfigEntry(
        "retention.ms", NEW_RETENTION_MS, incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[entry])
    return lambda a: a.incremental_alter_configs([resource], request_timeout=REQUEST_TIMEOUT_S)


def _legacy(name: str) -> Callable[[AdminClient], dict[object, Future]]:
    resource = ConfigResource(
        ConfigResource.Type.TOPIC, name, set_config={"retention.ms": NEW_RETENTION_MS}
    )
    return lambda a: a.alter_configs([resource], request_timeout=REQUEST_TIMEOUT_S)


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
@pytest.mark.parametrize("api", ["incremental", "legacy"])
def test_kill9_between_partitions_of_a_config_change(
    fault_gateway, fault_topic_name, faults_report, api
):
    gw = fault_gateway(env={PAUSE: "update.rest"})
    name = fault_topic_name
    create(gw, name)
    produce(gw, name, range(PARTITIONS))
    parts = [name, f"{name}~1", f"{name}~2"]
    assert [store_properties(gw, p).get("ttl") for p in parts] == ["86400"] * PARTITIONS
    change = (_incremental if api == "incremental" else _legacy)(name)
    outcome = crash_between_writes(gw, "update.rest", change)
    faults_report(step="update.rest", api=api, paused_request=outcome)
    new_ttl = str(int(NEW_RETENTION_MS) // 1000)

    def check(restart: int) -> None:
        assert kafka_partitions(gw, name) == PARTITIONS, restart
        assert retention_ms(gw, name) == NEW_RETENTION_MS, restart
        head = store_properties(gw, name)
        assert head["ttl"] == new_ttl, restart
        for p in range(1, PARTITIONS):
            assert store_properties(gw, f"{name}~{p}") == shared(head), (restart, p)
        for p in range(PARTITIONS):
            assert read(gw, name, p) == list(enumerate(values(name, p))), (restart, p)

    restarts(gw, check)

    def check_store() -> None:
        stored = described(gw, *parts)
        head = stored[name]["properties"]
        assert head["ttl"] == new_ttl
        for part in parts:
            assert shared(stored[part]["properties"]) == shared(head), part
            assert (stored[part]["earliest_offset"], stored[part]["next_offset"]) == (
                0,
                RECORDS,
            ), part

    stopped(gw, check_store)
    assert retention_ms(gw, name) == NEW_RETENTION_MS


def test_kill9_between_partitions_of_a_deletion(fault_gateway, fault_topic_name, faults_report):
    gw = fault_gateway(env={PAUSE: "delete.rest"})
    name = fault_topic_name
    create(gw, name)
    produce(gw, name, range(PARTITIONS))
    outcome = crash_between_writes(
        gw, "delete.rest", lambda a: a.delete_topics([name], request_timeout=REQUEST_TIMEOUT_S)
    )
    faults_report(step="delete.rest", paused_request=outcome)

    def check(restart: int) -> None:
        assert kafka_partitions(gw, name) is None, restart
        assert store_topics(gw, name) == [], restart

    restarts(gw, check)
    stopped(gw, lambda: assert_empty_store(gw, name))
    create(gw, name)
    assert kafka_partitions(gw, name) == PARTITIONS
    assert store_topics(gw, name) == [name, f"{name}~1", f"{name}~2"]
    assert watermarks(gw, name, range(PARTITIONS)) == [(0, 0)] * PARTITIONS
    produce(gw, name, range(PARTITIONS), tag="again")
    for p in range(PARTITIONS):
        assert read(gw, name, p) == list(enumerate(values(name, p, "again"))), p
