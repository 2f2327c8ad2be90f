"""Kafka topics with several partitions, as sets of unpartitioned TMS topics.

The seed's topics stay unpartitioned: partition p > 0 of topic ``name`` is the TMS topic
``name~p`` (TopicId.of_partition) and partition 0 is ``name`` itself, so a store
written before partitions existed reads as it did. Partition 0 holds the partition
count (property ``kafka.partitions``, absent for one); every partition carries the
topic's other properties, so TTLs and cleanup apply to each as to any topic.

A change spanning partitions is written in commit-point order, partition 0 (the
topic's one row clients look at) deciding, so no multi-row atomicity is needed:
creating writes partitions p > 0 first and partition 0 last; growing writes the new
partitions, then the count; deleting removes partition 0 first; a property change
updates partition 0 first. ``repair`` finishes or undoes whatever a crash cut short.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from .errors import TopicAlreadyExists, TopicNotFound
from .ids import TopicId, TopicMetadata
from .store import Store

log = logging.getLogger("tmsgate.storage.partitions")
PARTITIONS = "kafka.partitions"
Properties = dict[str, str]
Step = Callable[[str], None] | None  # called between the writes (the kill -9 tests' hook)


def _step(step: Step, name: str) -> None:
    if step is not None:
        step(name)


def partition_count(properties: Properties) -> int:
    raw = properties.get(PARTITIONS, "1")
    return int(raw) if raw.isascii() and raw.isdigit() and int(raw) > 0 else 1


def shared_properties(properties: Properties) -> Properties:
    """What every partition carries: the topic's properties but its partition count."""
    return {k: v for k, v in properties.items() if k != PARTITIONS}


def partition_ids(topic: TopicId, indexes: range | list[int]) -> list[TopicId]:
    return [TopicId.of_partition(topic.namespace, topic.topic, p) for p in indexes]


def create(
    store: Store, topic: TopicId, properties: Properties, partitions: int, step: Step = None
) -> TopicMetadata:
    """Create ``topic`` with ``partitions`` partitions. Partitions p > 0 left by a crash
    (a creation or deletion cut short) are replaced: no one ever saw them."""
    if _exists(store, topic):
        raise TopicAlreadyExists(topic)
    shared = shared_properties(properties)
    if partitions > 1:
        # unless_exists: checked in the same write, so a creation racing this one cannot
        # replace partitions of a topic that became visible meanwhile.
        store.create_topics(partition_ids(topic, range(1, partitions)), shared, unless_exists=topic)
        shared = {**shared, PARTITIONS: str(partitions)}
    _step(step, "create.head")
    return store.create_topic(topic, shared)  # last: from here on the topic exists


def _exists(store: Store, topic: TopicId) -> bool:
    try:
        store.get_topic(topic)
    except TopicNotFound:
        return False
    return True


def grow(store: Store, topic: TopicId, total: int, step: Step = None) -> tuple[TopicMetadata, int]:
    """Add partitions up to ``total``. -> partition 0's metadata, the count before."""
    head = store.get_topic(topic)
    before = partition_count(head.properties)
    if total > before:
        store.create_topics(
            partition_ids(topic, range(before, total)), shared_properties(head.properties)
        )
        _step(step, "grow.count")
        head = store.update_topic(topic, lambda current: {**current, PARTITIONS: str(total)})
        # A config change between the two writes reached only the partitions counted
        # then: give the new ones partition 0's configs as they are now.
        shared = shared_properties(head.properties)
        new = partition_ids(topic, range(before, total))
        if any(store.get_topic(t).properties != shared for t in new):
            store.update_topics(new, shared)
    return head, before


def update(
    store: Store,
    topic: TopicId,
    properties: Properties | Callable[[Properties], Properties],
    step: Step = None,
) -> TopicMetadata:
    """New properties for every partition (the partition count is kept)."""

    def keep_count(current: Properties) -> Properties:
        new = shared_properties(properties(current) if callable(properties) else properties)
        if PARTITIONS in current:
            new[PARTITIONS] = current[PARTITIONS]
        return new

    head = store.update_topic(topic, keep_count)
    count = partition_count(head.properties)
    _step(step, "update.rest")
    if count > 1:
        store.update_topics(
            partition_ids(topic, range(1, count)), shared_properties(head.properties)
        )
    return head


def delete(store: Store, topic: TopicId, step: Step = None) -> list[TopicMetadata]:
    """Delete every partition, partition 0 first. -> the partitions deleted."""
    head = store.get_topic(topic)
    store.delete_topic(topic)  # from here on the topic is gone for every client
    _step(step, "delete.rest")
    count = partition_count(head.properties)
    rest = store.delete_topics(partition_ids(topic, range(1, count))) if count > 1 else []
    return [head, *rest]


@dataclass(frozen=True, slots=True)
class Repair:
    deleted: list[TopicMetadata]
    reconfigured: int


def repair(store: Store, namespace: str) -> Repair:
    """Finish what a crash cut short: partitions p > 0 their topic no longer has (a
    deletion or creation cut short) are deleted, and partitions whose properties differ
    from partition 0's (a property change cut short) get partition 0's."""
    heads: dict[str, TopicMetadata] = {}
    parts: list[TopicMetadata] = []
    for tid in store.list_topics(namespace):
        try:
            md = store.get_topic(tid)
        except TopicNotFound:
            continue
        if tid.partition:
            parts.append(md)
        else:
            heads[tid.topic] = md
    orphans: list[TopicId] = []
    stale: dict[str, list[TopicId]] = {}
    for md in parts:
        head = heads.get(md.topic.kafka_name)
        if head is None or md.topic.partition >= partition_count(head.properties):
            orphans.append(md.topic)
        elif md.properties != shared_properties(head.properties):
            stale.setdefault(md.topic.kafka_name, []).append(md.topic)
    deleted = store.delete_topics(orphans) if orphans else []
    for name, tids in stale.items():
        store.update_topics(tids, shared_properties(heads[name].properties))
    fixed = sum(map(len, stale.values()))
    if deleted or fixed:
        log.warning(
            "repaired partitions left by an interrupted change: %d deleted, %d reconfigured",
            len(deleted),
            fixed,
        )
    return Repair(deleted, fixed)
