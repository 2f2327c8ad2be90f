"""``tmsgate migrate``: copy topics and consumer-group offsets from any Kafka-protocol
cluster into tmsgate, every record at its source offset (docs/migration.md).

    tmsgate migrate --from kafka:9092 --to tmsgate:9092 [--topics RE] [--groups RE]
                    [--follow] [--finish] [--verify] [--force] [--dry-run]
                    [--max-bytes-per-second N]
    tmsgate migrate --from kafka:9092 --store leveldb:///var/lib/tmsgate ...

The target keeps the source's offsets, gaps included (pipelines/batches.py), so the
target's own offsets are the copy's checkpoint: a copy interrupted at any point (even
by SIGKILL) continues, when run again, exactly where the target ends, and never
writes a record twice. While a topic is being migrated (its config
``tmsgate.migration.source``) only the migration may produce to it; ``--finish`` ends
that, for the cutover.

Source reads and target writes are pipelined: a fetcher keeps fetching (read_committed)
while the writer's previous produce is being made durable. ``--max-bytes-per-second``
paces the fetcher, so that a copy from a cluster still in use leaves it room.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from .batches import AbortedTracker, forward, gap, split_fetched, start_marker
from .kafka_link import (
    EARLIEST,
    LATEST,
    OFFSET_OUT_OF_RANGE,
    RETRIABLE,
    FetchedPartition,
    Link,
)
from .progress import CopyProgress

log = logging.getLogger("tmsgate.migrate")
MIGRATE_CLIENT_ID = "tmsgate-migrate"  # the target lets only this client id produce
MIGRATION_SOURCE = "tmsgate.migration.source"
# Configs tmsgate honours and copies (retention becomes the TMS topic's TTL; a compacted
# topic stays compacted: docs/compaction.md).
COPIED_CONFIGS = (
    "retention.ms",
    "max.message.bytes",
    "cleanup.policy",
    "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms",
    "max.compaction.lag.ms",
    "delete.retention.ms",
)
FETCH_MAX_BYTES = 32 << 20
PARTITION_MAX_BYTES = 16 << 20
FETCH_WAIT_MS = 500
PRODUCE_MAX_BYTES = 16 << 20  # one produce request gathers fetched jobs up to this
WRITES_IN_FLIGHT = 3  # produces awaiting the target's fsync at once
QUEUED_JOBS = 4  # fetched, not yet written: bounds memory to ~QUEUED_JOBS x 32 MB
TP = tuple[str, int]


class Throttle:
    """Paces the fetcher to ``rate`` bytes a second on average (the bytes the source
    sends, as Kafka's replication throttles count them): after each fetch it sleeps
    until the bytes fetched so far are within the rate since the copy began. A fetch
    asks for at most a second's worth, so that no single answer runs far ahead (the
    source still sends a whole first batch however large, as Kafka always does)."""

    def __init__(
        self,
        rate: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if rate <= 0:
            raise ValueError("the rate must be a positive number of bytes a second")
        self.rate = rate
        self.clock, self.sleep = clock, sleep
        self.fetched = 0
        self.began = clock()

    def cap(self, max_bytes: int) -> int:
        """A fetch's byte limit: at most a second's worth."""
        return min(max_bytes, self.rate)

    async def fetched_bytes(self, n: int) -> None:
        self.fetched += n
        ahead = self.fetched / self.rate - (self.clock() - self.began)
        if ahead > 0:
            await self.sleep(ahead)


@dataclass
class Part:
    """One partition's copy."""

    topic: str
    partition: int
    start: int  # the source's log start when the copy began
    end: int  # the source's last stable offset then: without --follow, the copy's end
    position: int  # where the target ends: the copy continues from here
    latest: int = 0  # the source's last stable offset as last seen (for the lag)
    records: int = 0
    size: int = 0

    @property
    def tp(self) -> TP:
        return (self.topic, self.partition)


@dataclass
class Plan:
    parts: list[Part]
    create: dict[str, tuple[int, dict[str, str]]] = field(default_factory=dict)
    grow: dict[str, int] = field(default_factory=dict)
    mark: dict[str, dict[str, str]] = field(default_factory=dict)  # existing, empty topics
    configs: dict[str, dict[str, str]] = field(default_factory=dict)  # target configs


class MigrationError(Exception):
    """The migration cannot go on; the message says why and what to do."""


# --- planning -------------------------------------------------------------------------------
async def make_plan(source: Link, target: Link, topics_re: str) -> Plan:
    pattern = re.compile(topics_re)
    wanted = {t: n for t, n in (await source.topics()).items() if pattern.fullmatch(t)}
    existing = await target.topics()
    src_configs = await source.configs(wanted)
    tgt_configs = await target.configs([t for t in wanted if t in existing])
    tps = [(t, p) for t, n in sorted(wanted.items()) for p in range(n)]
    starts = await source.list_offsets(tps, EARLIEST)
    ends = await source.list_offsets(tps, LATEST)
    there = [tp for tp in tps if tp[0] in existing and tp[1] < existing[tp[0]]]
    positions = await target.list_offsets(there, LATEST) if there else {}
    plan = Plan([])
    for topic, count in sorted(wanted.items()):
        configs = _copied(src_configs.get(topic, {}), source.bootstrap)
        if topic not in existing:
            plan.create[topic] = (count, configs)
        else:
            current = tgt_configs.get(topic, {})
            plan.configs[topic] = current
            have = existing[topic]
            other = current.get(MIGRATION_SOURCE)
            if other is not None and other != source.bootstrap:
                raise MigrationError(
                    f"topic {topic} is being migrated from {other} on the target, not from "
                    f"{source.bootstrap} (if that is the same cluster, name it as before: "
                    f"--from {other})"
                )
            if other is None:
                written = [p for p in range(have) if positions.get((topic, p), 0) > 0]
                if written:
                    raise MigrationError(
                        f"topic {topic} already exists on the target with records and is not "
                        "being migrated: delete it there, or leave it out (--topics)"
                    )
                plan.mark[topic] = {**_known(current), **configs}
            if have > count:
                raise MigrationError(
                    f"topic {topic} has {have} partitions on the target but {count} on the "
                    "source: partitions cannot be removed"
                )
            if have < count:
                plan.grow[topic] = count
        for p in range(count):
            tp = (topic, p)
            position = positions.get(tp, 0)
            if position > ends[tp]:
                raise MigrationError(
                    f"{topic}-{p} ends at offset {position} on the target, beyond the "
                    f"source's {ends[tp]}: they do not hold the same records"
                )
            plan.parts.append(Part(topic, p, starts[tp], ends[tp], position, ends[tp]))
    return plan


def _copied(configs: dict[str, str], source: str) -> dict[str, str]:
    out = {k: configs[k] for k in COPIED_CONFIGS if k in configs}
    if out.get("retention.ms") in ("-1", None):
        out.pop("retention.ms", None)
    out[MIGRATION_SOURCE] = source
    return out


def _known(configs: dict[str, str]) -> dict[str, str]:
    return {
        k: v
        for k, v in configs.items()
        if k in (*COPIED_CONFIGS, "message.timestamp.type", MIGRATION_SOURCE)
    }


async def prepare_target(target: Link, plan: Plan) -> None:
    for topic, (count, configs) in plan.create.items():
        await target.create_topic(topic, count, configs)
        log.info("created %s with %d partitions on the target", topic, count)
    for topic, configs in plan.mark.items():
        await target.set_configs(topic, configs)
    for topic, count in plan.grow.items():
        await target.grow(topic, count)
        log.info("grew %s to %d partitions on the target", topic, count)
    await target.refresh()


async def finish(target: Link, topics: list[str]) -> None:
    """The cutover: the topics take ordinary producers from now on."""
    configs = await target.configs(topics)
    for topic in topics:
        kept = {k: v for k, v in _known(configs.get(topic, {})).items() if k != MIGRATION_SOURCE}
        await target.set_configs(topic, kept)
    log.info("migration finished for %d topics: producers may write to them now", len(topics))


# --- copying --------------------------------------------------------------------------------
@dataclass
class Job:
    batches: dict[TP, list[Any]] = field(default_factory=dict)
    positions: dict[TP, int] = field(default_factory=dict)  # each partition's end after it
    records: dict[TP, tuple[int, int]] = field(default_factory=dict)  # (records, bytes)
    size: int = 0

    def add(self, other: Job) -> None:
        for tp, batches in other.batches.items():
            self.batches.setdefault(tp, []).extend(batches)
        self.positions.update(other.positions)
        for tp, (n, b) in other.records.items():
            m, c = self.records.get(tp, (0, 0))
            self.records[tp] = (m + n, c + b)
        self.size += other.size


class Copier:
    """A fetcher and a writer with a bounded queue between them."""

    def __init__(
        self,
        source: Link,
        target: Link,
        parts: list[Part],
        follow: bool,
        stop: asyncio.Event,
        progress: CopyProgress,
        throttle: Throttle | None = None,
    ) -> None:
        self.source, self.target = source, target
        self.throttle = throttle
        self.parts = {p.tp: p for p in parts}
        self.follow = follow
        self.stop = stop
        self.progress = progress
        self.queue: asyncio.Queue[Job | None] = asyncio.Queue(QUEUED_JOBS)
        self.fetch_at = {p.tp: p.position for p in parts}
        self.aborted = {p.tp: AbortedTracker() for p in parts}
        self.fresh = {p.tp for p in parts if p.position == 0}  # not written to yet
        # A partition copied for the first time starts where the source's log starts.
        self.first = Job()
        for p in parts:
            if p.position == 0 and p.start > 0:
                self.first.add(Job({p.tp: [start_marker(p.start)]}, {p.tp: p.start}))
                self.fetch_at[p.tp] = p.start

    async def run(self) -> None:
        writer = asyncio.ensure_future(self._write())
        fetcher = asyncio.ensure_future(self._fetch_all())
        await asyncio.wait({writer, fetcher}, return_when=asyncio.FIRST_EXCEPTION)
        if writer.done() and not writer.cancelled() and writer.exception() is not None:
            # The target refused a write: stop fetching (the queue would stay full).
            fetcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await fetcher
            writer.result()
        try:
            await fetcher
        finally:
            await writer

    async def _fetch_all(self) -> None:
        try:
            if self.first.batches:
                await self.queue.put(self.first)
            await self._fetch()
        finally:
            await self.queue.put(None)  # the writer writes what was fetched, then ends

    def _open(self) -> list[TP]:
        if self.follow:
            return list(self.parts)
        return [tp for tp, part in self.parts.items() if self.fetch_at[tp] < part.end]

    async def _fetch(self) -> None:
        while not self.stop.is_set():
            tps = self._open()
            if not tps:
                return
            by_node: dict[int, dict[TP, int]] = {}
            for tp in tps:
                by_node.setdefault(self.source.leader(*tp), {})[tp] = self.fetch_at[tp]
            fetch_max, partition_max = FETCH_MAX_BYTES, PARTITION_MAX_BYTES
            if self.throttle is not None:
                fetch_max = self.throttle.cap(fetch_max)
                partition_max = self.throttle.cap(partition_max)
            rounds = await asyncio.gather(
                *(
                    self.source.fetch(node, positions, fetch_max, partition_max, FETCH_WAIT_MS)
                    for node, positions in by_node.items()
                )
            )
            job = Job()
            retry = False
            for fetched in rounds:
                for fp in fetched:
                    retry |= await self._take(fp, job)
            if job.batches:
                await self.queue.put(job)
            if self.throttle is not None:
                await self.throttle.fetched_bytes(job.size)
            if retry:
                await asyncio.sleep(0.5)
                await self.source.refresh()

    async def _take(self, fp: FetchedPartition, job: Job) -> bool:
        """Add one fetched partition to ``job``; -> True if it should be fetched again
        after a pause (a retriable error)."""
        tp = (fp.topic, fp.partition)
        part, position = self.parts[tp], self.fetch_at[tp]
        if fp.error == OFFSET_OUT_OF_RANGE:
            start = (await self.source.list_offsets([tp], EARLIEST))[tp]
            if position >= start:
                end = (await self.source.list_offsets([tp], LATEST))[tp]
                raise MigrationError(
                    f"{fp.topic}-{fp.partition}: the source has offsets [{start}, {end}) "
                    f"but the copy is at {position}"
                )
            log.warning(
                "%s-%d: the source deleted offsets %d..%d before they were copied "
                "(retention); they stay a gap",
                fp.topic,
                fp.partition,
                position,
                start - 1,
            )
            job.add(Job({tp: [gap(position, start)]}, {tp: start}))
            self.fetch_at[tp] = start
            return False
        if fp.error in RETRIABLE:
            return True
        if fp.error:
            raise MigrationError(f"fetch {fp.topic}-{fp.partition}: error {fp.error}")
        part.latest = max(part.latest, fp.last_stable if fp.last_stable >= 0 else fp.high_watermark)
        self.aborted[tp].add(fp.aborted)
        fwd = forward(split_fetched(fp.records), position, self.aborted[tp])
        if fwd.batches:
            job.add(Job({tp: fwd.batches}, {tp: fwd.position}, {tp: (fwd.records, fwd.size)}))
            job.size += sum(map(len, fwd.batches))
            self.fetch_at[tp] = fwd.position
        return False

    async def _write(self) -> None:
        """Produce each job, up to WRITES_IN_FLIGHT at once on the target's connection
        (sent in order; the target refuses a write that does not continue where the
        last one ended, so a reordering could only fail, never leave a gap)."""
        in_flight: collections.deque[tuple[asyncio.Future[None], Job]] = collections.deque()
        done = False
        try:
            while not done:
                job = await self.queue.get()
                if job is None:
                    break
                # Gather what else is waiting, in order: one produce carries it all.
                while job.size < PRODUCE_MAX_BYTES and not self.queue.empty():
                    more = self.queue.get_nowait()
                    if more is None:
                        done = True
                        break
                    job.add(more)
                # A partition's first write may start it anywhere (the target takes an
                # empty partition's first offset from it), so it goes alone: were it
                # lost while a later write got through, that one would start it.
                first = self.fresh.intersection(job.batches)
                if first:
                    while in_flight:
                        await self._written(*in_flight.popleft())
                    self.fresh -= first
                in_flight.append((asyncio.ensure_future(self._send(job)), job))
                while len(in_flight) >= (1 if first else WRITES_IN_FLIGHT):
                    await self._written(*in_flight.popleft())
            while in_flight:
                await self._written(*in_flight.popleft())
        finally:
            for task, _ in in_flight:
                task.cancel()

    async def _send(self, job: Job) -> None:
        by_node: dict[int, dict[TP, list[Any]]] = {}
        for tp, batches in job.batches.items():
            by_node.setdefault(self.target.leader(*tp), {})[tp] = batches
        for node, data in by_node.items():
            await self.target.produce(node, data)

    async def _written(self, task: asyncio.Future[None], job: Job) -> None:
        await task
        for tp, position in job.positions.items():
            part = self.parts[tp]
            part.position = position
            n, b = job.records.get(tp, (0, 0))
            part.records += n
            part.size += b
        self.progress.written()


# --- groups ---------------------------------------------------------------------------------
@dataclass
class GroupResult:
    group: str
    copied: int = 0
    note: str = ""


async def copy_groups(
    source: Link,
    target: Link,
    groups_re: str,
    parts: dict[TP, Part],
    force: bool,
    write: bool = True,
) -> list[GroupResult]:
    """Committed offsets of the selected groups, for the migrated partitions. A group is
    copied while no consumer runs in it on the source (or with ``force``) and none runs
    in it on the target yet; an offset only ever moves forward on the target, and only
    up to where the copy has reached. ``write=False`` (--dry-run): what would be copied,
    committing nothing."""
    pattern = re.compile(groups_re)
    out = []
    for group in await source.groups():
        if not pattern.fullmatch(group):
            continue
        result = GroupResult(group)
        out.append(result)
        members = await source.group_members(group)
        if members and not force:
            result.note = f"skipped: {members} consumers run in it on the source (--force)"
            continue
        offsets = {tp: o for tp, o in (await source.committed(group)).items() if tp in parts}
        if not offsets:
            result.note = "no offsets for the migrated topics"
            continue
        if await target.group_members(group):
            result.note = "skipped: consumers already run in it on the target"
            continue
        current = await target.committed(group)
        todo, waiting = {}, 0
        for tp, (offset, metadata) in offsets.items():
            if offset > parts[tp].position:
                waiting += 1
            elif offset > current.get(tp, (-1, ""))[0]:
                todo[tp] = (offset, metadata)
        if todo and write:
            await target.commit(group, todo)
        result.copied = len(todo)
        if waiting:
            result.note = f"{waiting} offsets wait for the copy to reach them"
    return out
