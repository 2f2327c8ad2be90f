"""One Kafka-protocol cluster as `tmsgate migrate` uses it: topics, offsets, raw fetches,
exact-offset produces and group offsets, over aiokafka's client and request classes.

Raw on purpose: a migration forwards the record batches it fetches without decoding
them (pipelines/batches.py), so it needs the Fetch and Produce requests themselves
rather than a consumer and a producer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.client import AIOKafkaClient, CoordinationType
from aiokafka.errors import for_code
from aiokafka.protocol.commit import OffsetCommitRequest, OffsetFetchRequest
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.offset import OffsetRequest
from aiokafka.protocol.produce import ProduceRequest
from aiokafka.structs import TopicPartition
from tmsgate.protocol import ErrorCode

log = logging.getLogger("tmsgate.migrate")
EARLIEST, LATEST = -2, -1
READ_COMMITTED = 1
# Kafka's error codes the copy handles itself; any other is raised.
OFFSET_OUT_OF_RANGE = 1
RETRIABLE = {3, 5, 6, 7, 13, 14, 15, 16}  # unknown partition, leader moves, timeouts...


class LinkError(Exception):
    """A cluster refused something the migration needs; the message says what."""


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    topic: str
    partition: int
    error: int
    high_watermark: int
    last_stable: int
    aborted: list[tuple[int, int]]  # (producer id, first offset)
    records: bytes | None


def _check(code: int, what: str) -> None:
    if code:
        try:
            name = ErrorCode(code).name  # tmsgate's table knows codes aiokafka does not
        except ValueError:
            name = for_code(code).__name__
        raise LinkError(f"{what}: {name} (error {code})")


class Link:
    """A connection to one cluster (source or target)."""

    def __init__(self, bootstrap: str, client_id: str, request_timeout_ms: int = 60_000) -> None:
        self.bootstrap = bootstrap
        self._cluster: Any = None
        self.client = AIOKafkaClient(
            bootstrap_servers=bootstrap,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
        )
        self.admin = AIOKafkaAdminClient(
            bootstrap_servers=bootstrap,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
        )

    async def start(self) -> None:
        await self.client.bootstrap()
        await self.admin.start()

    async def close(self) -> None:
        await self.admin.close()
        await self.client.close()

    # --- topics ---------------------------------------------------------------------------
    async def topics(self) -> dict[str, int]:
        """Every topic (but Kafka's internal ``__`` ones) with its partition count."""
        cluster = self._cluster = await self.client.fetch_all_metadata()
        return {
            t: len(cluster.partitions_for_topic(t) or ())
            for t in cluster.topics()
            if not t.startswith("__")
        }

    async def refresh(self) -> None:
        self._cluster = await self.client.fetch_all_metadata()

    def leader(self, topic: str, partition: int) -> int:
        node = self._cluster.leader_for_partition(TopicPartition(topic, partition))
        if node is None or node < 0:
            raise LinkError(f"{self.bootstrap}: partition {topic}-{partition} has no leader")
        return node

    async def configs(self, topics: Iterable[str]) -> dict[str, dict[str, str]]:
        names = list(topics)
        if not names:
            return {}
        resources = [ConfigResource(ConfigResourceType.TOPIC, t) for t in names]
        out: dict[str, dict[str, str]] = {}
        for response in await self.admin.describe_configs(resources):
            for result in response.resources:
                code, message, _type, name, entries = result[:5]
                if code:
                    raise LinkError(f"describe configs of {name}: {message or code}")
                out[name] = {e[0]: e[1] for e in entries if e[1] is not None}
        return out

    async def create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> None:
        response = await self.admin.create_topics([NewTopic(name, partitions, 1, None, configs)])
        for result in response.topic_errors:
            code, message = result[1], (result[2] if len(result) > 2 else None)
            _check(code, f"create topic {name} on {self.bootstrap} ({message})")

    async def grow(self, name: str, partitions: int) -> None:
        response = await self.admin.create_partitions({name: NewPartitions(partitions)})
        for result in response.topic_errors:
            _check(result[1], f"add partitions to {name} on {self.bootstrap} ({result[2]})")

    async def set_configs(self, name: str, configs: dict[str, str]) -> None:
        """AlterConfigs: ``configs`` become the topic's whole set."""
        resource = ConfigResource(ConfigResourceType.TOPIC, name, configs)
        for response in await self.admin.alter_configs([resource]):
            for result in response.resources:
                _check(result[0], f"alter configs of {name} on {self.bootstrap} ({result[1]})")

    # --- offsets and records --------------------------------------------------------------
    async def list_offsets(
        self, partitions: Iterable[tuple[str, int]], which: int
    ) -> dict[tuple[str, int], int]:
        """Earliest (-2) or latest (-1, the last stable offset: read_committed)."""
        by_node: dict[int, dict[str, list[tuple[int, int]]]] = {}
        for topic, p in partitions:
            by_node.setdefault(self.leader(topic, p), {}).setdefault(topic, []).append((p, which))
        out: dict[tuple[str, int], int] = {}

        async def ask(node: int, topics: dict[str, list[tuple[int, int]]]) -> None:
            request = OffsetRequest(-1, READ_COMMITTED, list(topics.items()))
            response = await self.client.send(node, request)
            for topic, parts in response.topics:
                for part in parts:
                    p, code, offset = part[0], part[1], part[-1]
                    _check(code, f"list offsets of {topic}-{p} on {self.bootstrap}")
                    out[(topic, p)] = offset

        await asyncio.gather(*(ask(n, t) for n, t in by_node.items()))
        return out

    async def fetch(
        self,
        node: int,
        positions: dict[tuple[str, int], int],
        max_bytes: int,
        partition_max_bytes: int,
        max_wait_ms: int,
    ) -> list[FetchedPartition]:
        topics: dict[str, list[tuple[int, int, int]]] = {}
        for (topic, p), offset in positions.items():
            topics.setdefault(topic, []).append((p, offset, partition_max_bytes))
        request = FetchRequest(max_wait_ms, 1, max_bytes, READ_COMMITTED, list(topics.items()))
        response = await self.client.send(node, request)
        out = []
        for topic, parts in response.topics:
            for part in parts:
                # v4: (partition, error, hw, lso, aborted, records); v5+ add the log
                # start offset after lso, v11 a preferred replica: read by position.
                p, code, hw, lso = part[0], part[1], part[2], part[3]
                aborted = [(a[0], a[1]) for a in (part[5] if len(part) > 6 else part[4]) or ()]
                out.append(FetchedPartition(topic, p, code, hw, lso, aborted, part[-1]))
        return out

    async def produce(self, node: int, data: dict[tuple[str, int], list[Any]]) -> None:
        """One Produce request (acks=all) of each partition's batches, concatenated.
        Raises LinkError naming the first partition refused."""
        topics: dict[str, list[tuple[int, bytes]]] = {}
        for (topic, p), batches in data.items():
            topics.setdefault(topic, []).append((p, b"".join(batches)))
        response = await self.client.send(
            node, ProduceRequest(None, -1, 60_000, list(topics.items()))
        )
        for topic, parts in response.topics:
            for part in parts:
                _check(part[1], f"write {topic}-{part[0]} on {self.bootstrap}")

    # --- groups ---------------------------------------------------------------------------
    async def groups(self) -> list[str]:
        return sorted(g[0] for g in await self.admin.list_consumer_groups())

    async def group_members(self, group: str) -> int:
        """How many members the group has now (0: no consumer is running in it)."""
        for response in await self.admin.describe_consumer_groups([group]):
            for g in response.groups:
                _check(g[0], f"describe group {group} on {self.bootstrap}")
                return len(g[5])
        return 0

    async def committed(self, group: str) -> dict[tuple[str, int], tuple[int, str]]:
        """Each partition's committed (offset, metadata)."""
        node = await self.client.coordinator_lookup(CoordinationType.GROUP, group)
        response = await self.client.send(node, OffsetFetchRequest(group, None))
        _check(getattr(response, "error_code", 0), f"fetch offsets of {group}")
        return {
            (topic, part[0]): (part[1], part[2] or "")
            for topic, parts in response.topics
            for part in parts
            if part[1] >= 0
        }

    async def commit(self, group: str, offsets: dict[tuple[str, int], tuple[int, str]]) -> None:
        """Commit (offset, metadata) as an admin tool does: no member, no generation."""
        topics: dict[str, list[tuple[int, int, str]]] = {}
        for (topic, p), (offset, metadata) in offsets.items():
            topics.setdefault(topic, []).append((p, offset, metadata))
        node = await self.client.coordinator_lookup(CoordinationType.GROUP, group)
        response = await self.client.send(
            node, OffsetCommitRequest(group, -1, "", -1, list(topics.items()))
        )
        for topic, parts in response.topics:
            for part in parts:
                _check(part[1], f"commit offset of {group} for {topic}-{part[0]}")
