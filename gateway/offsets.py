"""Offset lookups over the store, as Kafka's ListOffsets defines them: earliest, latest,
max timestamp and offset-for-time. The Kafka listener (ListOffsets) and the HTTP API
(``GET .../offsets``) both answer from here.

Kafka answers a time lookup with the first record (in offset order) whose timestamp
is >= the target. The store indexes publish time only, so the lookup starts where
publishing reached the target (store.offset_for_time): a producer stamps a record
before it is published, so no record before that point can have a CreateTime at or
after the target. From there the records' own timestamps are scanned, which for
ordinary data ends at the first record and for back-dated data (imports, replays)
finds what Kafka would. LogAppendTime topics need no scan: the timestamp is the
publish time.
"""

from __future__ import annotations

import logging

from tmsgate.protocol import meta_timestamp
from tmsgate.storage import Message, Store, TopicId

log = logging.getLogger("tmsgate.offsets")
LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
SCAN_CHUNK = 2000
SCAN_LIMIT = 1_000_000  # records read for one lookup before settling for publish time


def record_timestamp(msg: Message, log_append_time: bool) -> int:
    """The timestamp a consumer sees for this message (see kafka/records.py, _records)."""
    ts = None if log_append_time else meta_timestamp(msg.meta)
    return int(msg.publish_ts) if ts is None else ts


def _timestamp_at(store: Store, topic: TopicId, log_append_time: bool, offset: int) -> int:
    res = store.read(topic, offset=offset, max_messages=1)
    for msg in res.messages:
        if msg.offset == offset:
            return record_timestamp(msg, log_append_time)
    return -1


def _first_at_or_after(
    store: Store, topic: TopicId, log_append_time: bool, target: int, end: int
) -> tuple[int, int]:
    start = store.offset_for_time(topic, target)
    if start >= end:
        return -1, -1
    if log_append_time:
        return start, _timestamp_at(store, topic, True, start)
    offset, scanned = start, 0
    while offset < end and scanned < SCAN_LIMIT:
        res = store.read(topic, offset=offset, max_messages=SCAN_CHUNK)
        for msg in res.messages:
            if msg.offset >= end:
                return -1, -1
            ts = record_timestamp(msg, False)
            if ts >= target:
                return msg.offset, ts
        scanned += len(res.messages)
        if res.next_offset <= offset:
            break
        offset = res.next_offset
    if scanned >= SCAN_LIMIT:
        log.warning(
            "ListOffsets of %s at %d: gave up scanning record timestamps after %d "
            "records; answering by publish time",
            topic,
            target,
            scanned,
        )
        return start, _timestamp_at(store, topic, False, start)
    return -1, -1


def lookup(
    store: Store, topic: TopicId, log_append_time: bool, spec: int, committed: bool
) -> tuple[int, int]:
    """Blocking (executor): -> (offset, timestamp) for a ListOffsets spec (a time, or
    LATEST, EARLIEST, ...); (-1, -1) when Kafka has no answer. ``committed``: the end is
    the last stable offset (read_committed)."""
    earliest, nxt = store.offsets(topic)
    end = min(store.last_stable_offset(topic), nxt) if committed else nxt
    if spec == LATEST:
        return end, -1
    if spec in (EARLIEST, EARLIEST_LOCAL):
        return earliest, -1
    if spec == MAX_TIMESTAMP:  # the newest record (by publish time; see the docs)
        if end <= earliest:
            return -1, -1
        return end - 1, _timestamp_at(store, topic, log_append_time, end - 1)
    if spec < 0:  # tiered-storage specs (-5, -6): no remote tier, no answer
        return -1, -1
    return _first_at_or_after(store, topic, log_append_time, spec, end)
