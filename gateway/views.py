"""What an operator looks at, read from the store: Kafka topics with their partitions, and
consumer groups with their committed offsets and lag.

One read model for every place that shows them: the CLI (``tmsgate topics``, ``tmsgate
groups``), the kafka-exporter metrics and the browser console. A Kafka topic of N
partitions is N TMS topics (``name``, ``name~1``, ...); here it is one topic again, with
N partitions, as Kafka's tools show it.

These calls read the store (blocking): from a running gateway, call them on its executor.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from tmsgate.storage import Store, TopicId, TopicMetadata, TopicNotFound
from tmsgate.storage.partitions import partition_count

from .kafka.groups.codec import (
    GROUPS_AREA,
    OFFSETS_AREA,
    CommittedOffset,
    CorruptState,
    GroupRecord,
    assignment_partitions,
    decode_group,
    decode_offset,
    group_key,
    offsets_prefix,
    parse_offset_key,
)

CONSUMER = "consumer"
SIZE_CACHE_S = 30.0  # a partition's size is a scan of its rows: read at most this often


# --- topics ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PartitionView:
    topic: str
    partition: int
    earliest_offset: int
    next_offset: int  # Kafka's high watermark
    last_stable_offset: int
    size_bytes: int | None  # None: not asked for
    leader: int | None = None  # with --cluster: the node id of the partition's leader

    @property
    def messages(self) -> int:
        return self.next_offset - self.earliest_offset


@dataclass(frozen=True, slots=True)
class TopicView:
    name: str
    namespace: str
    generation: int
    topic_id: str  # the Kafka topic id (hex)
    properties: dict[str, str]
    partitions: tuple[PartitionView, ...]
    compaction: dict[str, Any] | None  # the cleaner's status, on a compacted topic

    @property
    def size_bytes(self) -> int | None:
        sizes = [p.size_bytes for p in self.partitions]
        return None if any(s is None for s in sizes) else sum(s for s in sizes if s is not None)


class SizeCache:
    """Partition sizes read at most every SIZE_CACHE_S (Store.topic_bytes scans the rows)."""

    def __init__(self, store: Store, clock: Callable[[], float] = time.monotonic) -> None:
        self._store, self._clock = store, clock
        self._sizes: dict[tuple[TopicId, int], tuple[float, int]] = {}

    def __call__(self, topic: TopicId, generation: int) -> int:
        now = self._clock()
        hit = self._sizes.get((topic, generation))
        if hit is not None and hit[0] > now:
            return hit[1]
        size = self._store.topic_bytes(topic)
        if len(self._sizes) > 100_000:
            self._sizes.clear()
        self._sizes[(topic, generation)] = (now + SIZE_CACHE_S, size)
        return size


class TopicsView:
    """The Kafka topics of one namespace."""

    def __init__(
        self,
        store: Store,
        namespace: str,
        size_of: Callable[[TopicId, int], int] | None = None,
        leader_of: Callable[[TopicId], int | None] = lambda t: None,
    ) -> None:
        """``size_of(topic, generation)``: bytes of a partition (None: sizes not shown);
        ``leader_of``: a partition's leader with --cluster."""
        self.store, self.namespace = store, namespace
        self._size_of, self._leader_of = size_of, leader_of

    def names(self) -> list[tuple[str, int]]:
        """(name, partition count) of every topic, each Kafka topic once."""
        return [(md.topic.topic, partition_count(md.properties)) for md in self._firsts()]

    def topics(self) -> list[TopicView]:
        return [self._view(md) for md in self._firsts()]

    def topic(self, name: str) -> TopicView:
        """Raises TopicNotFound (or ValueError for a name that is not a Kafka topic)."""
        return self._view(self.store.get_topic(TopicId(self.namespace, name)))

    def partition(self, name: str, partition: int) -> PartitionView:
        md = self.store.get_topic(TopicId.of_partition(self.namespace, name, partition))
        return self._partition(name, partition, md)

    def _firsts(self) -> list[TopicMetadata]:
        """Partition 0 of every Kafka topic: its record carries the partition count."""
        tops = [md for md in self.store.live_topics(self.namespace) if md.topic.partition == 0]
        return sorted(tops, key=lambda md: md.topic.topic)

    def _view(self, md: TopicMetadata) -> TopicView:
        name = md.topic.topic
        parts = []
        for p in range(partition_count(md.properties)):
            try:
                pmd = (
                    md
                    if p == 0
                    else self.store.get_topic(TopicId.of_partition(self.namespace, name, p))
                )
            except TopicNotFound:
                continue  # a partition being created or deleted (storage/partitions.py)
            parts.append(self._partition(name, p, pmd))
        return TopicView(
            name=name,
            namespace=self.namespace,
            generation=md.generation,
            topic_id=bytes(md.topic_uuid).hex(),
            properties=dict(md.properties),
            partitions=tuple(parts),
            compaction=self.store.compaction_status(md.topic),
        )

    def _partition(self, name: str, partition: int, md: TopicMetadata) -> PartitionView:
        t = md.topic
        earliest, nxt = self.store.offsets(t)
        return PartitionView(
            topic=name,
            partition=partition,
            earliest_offset=earliest,
            next_offset=nxt,
            last_stable_offset=self.store.last_stable_offset(t),
            size_bytes=None if self._size_of is None else self._size_of(t, md.generation),
            leader=self._leader_of(t),
        )


# --- consumer groups ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class OffsetRow:
    topic: str
    partition: int
    committed: CommittedOffset
    high_watermark: int | None  # None: the topic generation is gone (stale offset)

    @property
    def lag(self) -> int | None:
        if self.high_watermark is None:
            return None
        return max(0, self.high_watermark - self.committed.offset)


class GroupsView:
    """The durable state of the groups of one store: each group as of its last completed
    rebalance (what the coordinator keeps durable); committed offsets exact. Lag is the
    partition's high watermark less the committed offset; an offset committed to a topic
    deleted or recreated since is stale and has no lag."""

    def __init__(self, store: Store, namespace: str) -> None:
        self.store = store
        self.namespace = namespace
        self._topics: dict[tuple[str, int], tuple[bytes, int] | None] = {}

    def group_ids(self) -> list[str]:
        ids = {unquote(key) for key, _ in self.store.scan_state(GROUPS_AREA)}
        for key, _ in self.store.scan_state(OFFSETS_AREA):
            try:
                ids.add(parse_offset_key(key)[0])
            except CorruptState:
                continue
        return sorted(ids)

    def record(self, group_id: str) -> GroupRecord | None:
        raw = self.store.get_state(GROUPS_AREA, group_key(group_id))
        return None if raw is None else decode_group(group_id, raw)

    def offsets(self, group_id: str) -> list[OffsetRow]:
        rows = []
        for key, raw in self.store.scan_state(OFFSETS_AREA, offsets_prefix(group_id)):
            _group, topic, partition = parse_offset_key(key)
            committed = decode_offset(raw)
            current = self._topic(topic, partition)
            live = current is not None and current[0] == committed.topic_uuid
            rows.append(OffsetRow(topic, partition, committed, current[1] if live else None))
        return sorted(rows, key=lambda r: (r.topic, r.partition))

    def _topic(self, name: str, partition: int) -> tuple[bytes, int] | None:
        """(topic uuid, the partition's high watermark) of the topic's current generation
        (the uuid is partition 0's: the Kafka topic's, which committed offsets keep)."""
        key = (name, partition)
        if key not in self._topics:
            try:
                md = self.store.get_topic(TopicId(self.namespace, name))
                tid = TopicId.of_partition(self.namespace, name, partition)
                self._topics[key] = (bytes(md.topic_uuid), self.store.offsets(tid)[1])
            except (TopicNotFound, ValueError):
                self._topics[key] = None
        return self._topics[key]

    def summary(self, group_id: str) -> dict[str, Any]:
        rec = self.record(group_id)
        offsets = self.offsets(group_id)
        lags = [r.lag for r in offsets if r.lag is not None]
        return {
            "group": group_id,
            "state": group_state(rec),
            "generation": rec.generation if rec else 0,
            "protocol_type": (rec.protocol_type or "") if rec else "",
            "protocol": (rec.protocol_name or "") if rec else "",
            "members": len(rec.members) if rec else 0,
            "offsets": len(offsets),
            "lag": sum(lags) if lags else None,
        }

    def describe(self, group_id: str) -> dict[str, Any] | None:
        rec = self.record(group_id)
        offsets = self.offsets(group_id)
        if rec is None and not offsets:
            return None
        doc = self.summary(group_id)
        doc["leader"] = rec.leader_id if rec else None
        doc["since"] = iso_time(rec.state_ms) if rec else None
        doc["members"] = [
            {
                "member_id": m.member_id,
                "instance_id": m.instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "session_timeout_ms": m.session_timeout_ms,
                "assignment": _assignment(rec, m.assignment),
            }
            for m in (rec.members if rec else ())
        ]
        doc["offsets"] = [
            {
                "topic": r.topic,
                "partition": r.partition,
                "committed": r.committed.offset,
                "high_watermark": r.high_watermark,
                "lag": r.lag,
                "metadata": r.committed.metadata,
                "committed_at": iso_time(r.committed.commit_ms),
                "stale": r.high_watermark is None,
            }
            for r in offsets
        ]
        return doc


def group_state(rec: GroupRecord | None) -> str:
    """Kafka's name of the group's state as of its last completed rebalance (the store
    keeps no rebalance in progress): Stable with members, else Empty."""
    return "Stable" if rec is not None and rec.members else "Empty"


def iso_time(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")


def _assignment(rec: GroupRecord | None, raw: bytes) -> Any:
    """A consumer member's assignment as ["topic-p", ...]; another protocol's as its size."""
    if rec is not None and rec.protocol_type == CONSUMER:
        parts = assignment_partitions(raw)
        if parts is not None:
            return [f"{topic}-{p}" for topic, partitions in parts for p in partitions]
    return {"bytes": len(raw)}
