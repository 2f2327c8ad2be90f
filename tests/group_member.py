"""One consumer-group member as its own process, for tests that kill members.

    python tests/group_member.py CLIENT BOOTSTRAP TOPIC GROUP SESSION_MS

CLIENT is kafka-python, aiokafka or confluent. The member subscribes to TOPIC in
GROUP, commits synchronously after every message, and prints JSON lines on stdout:

    {"event": "assigned", "partitions": [0]}      after each rebalance
    {"event": "msg", "offset": 12, "value": "m-12"}
    {"event": "committed", "offset": 13}
"""

from __future__ import annotations

import asyncio
import json
import sys


def say(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def run_kafka_python(bootstrap: str, topic: str, group: str, session_ms: int) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: object) -> None:
            pass

        def on_partitions_assigned(self, assigned: object) -> None:
            say(event="assigned", partitions=sorted(tp.partition for tp in assigned))

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        client_id="member-kafka-python",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=session_ms,
        heartbeat_interval_ms=session_ms // 6,
    )
    consumer.subscribe([topic], listener=Listener())
    while True:
        for tp, records in consumer.poll(timeout_ms=200).items():
            for r in records:
                say(event="msg", offset=r.offset, value=r.value.decode())
                consumer.commit({tp: OffsetAndMetadata(r.offset + 1, "", -1)})
                say(event="committed", offset=r.offset + 1)


async def run_aiokafka(bootstrap: str, topic: str, group: str, session_ms: int) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener

    class Listener(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked: object) -> None:
            pass

        async def on_partitions_assigned(self, assigned: object) -> None:
            say(event="assigned", partitions=sorted(tp.partition for tp in assigned))

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        client_id="member-aiokafka",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=session_ms,
        heartbeat_interval_ms=session_ms // 6,
    )
    consumer.subscribe([topic], listener=Listener())
    await consumer.start()
    async for r in consumer:
        say(event="msg", offset=r.offset, value=r.value.decode())
        from aiokafka import TopicPartition

        await consumer.commit({TopicPartition(r.topic, r.partition): r.offset + 1})
        say(event="committed", offset=r.offset + 1)


def run_confluent(bootstrap: str, topic: str, group: str, session_ms: int) -> None:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": "member-confluent",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": session_ms,
            "heartbeat.interval.ms": session_ms // 6,
        }
    )

    def assigned(_consumer: object, partitions: list) -> None:
        say(event="assigned", partitions=sorted(p.partition for p in partitions))

    consumer.subscribe([topic], on_assign=assigned)
    while True:
        m = consumer.poll(0.2)
        if m is None or m.error():
            continue
        say(event="msg", offset=m.offset(), value=m.value().decode())
        consumer.commit(message=m, asynchronous=False)
        say(event="committed", offset=m.offset() + 1)


def main() -> None:
    client, bootstrap, topic, group, session = sys.argv[1:6]
    session_ms = int(session)
    if client == "kafka-python":
        run_kafka_python(bootstrap, topic, group, session_ms)
    elif client == "aiokafka":
        asyncio.run(run_aiokafka(bootstrap, topic, group, session_ms))
    elif client == "confluent":
        run_confluent(bootstrap, topic, group, session_ms)
    else:
        raise SystemExit(f"unknown client {client!r}")


if __name__ == "__main__":
    main()
