"""Kafka topic names <-> store topics, with a short-lived cache and auto-creation.

A Kafka topic with N partitions is N unpartitioned TMS topics (storage/partitions.py):
partition 0 is the TMS topic of the same name, partition p > 0 the TMS topic ``name~p``.

Every produce and fetch needs the topic's generation and configs; asking the store
each time would put a blocking call on every request. A change made through any of the
store's APIs (HTTP too) drops the entry once it is durable (``attach``); entries also
live only a few seconds, and any TopicNotFound from the store drops one at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from tmsgate.protocol import ErrorCode
from tmsgate.storage import TopicAlreadyExists, TopicId, TopicMetadata, TopicNotFound
from tmsgate.storage import partitions as partitions_
from tmsgate.storage.ids import PARTITION_MARK
from tmsgate.storage.partitions import partition_count

from .config import InvalidTopicName, TopicConfig, topic_config
from .errors import error_of

if TYPE_CHECKING:
    from tmsgate.storage import Store

    from .batch_cache import BatchCache
    from .config import GatewayConfig
    from .store_futures import Blocking

log = logging.getLogger("tmsgate.kafka.topics")
CACHE_SECONDS = 5.0
UNKNOWN_ID_RESCAN_S = 1.0  # at most one full scan a second for unknown topic ids
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """One partition of a Kafka topic: ``id`` and ``metadata`` are that partition's TMS
    topic; ``name``, ``uuid``, ``config`` and ``partitions`` are the Kafka topic's."""

    name: str
    id: TopicId
    metadata: TopicMetadata
    config: TopicConfig
    partition: int = 0
    partitions: int = 1
    topic_uuid: bytes = b""  # partition 0's: the Kafka topic id
    _uuid: uuid.UUID | None = field(default=None, init=False, compare=False, repr=False)
    _memo: dict[Hashable, Any] | None = field(default=None, init=False, compare=False, repr=False)

    def memo(self, key: Hashable, build: Callable[[], T]) -> T:
        """A value derived from this entry alone, built once (a topic's Metadata answer):
        an entry never changes; a changed topic gets a new one."""
        memo = self._memo
        if memo is None:
            memo = {}
            object.__setattr__(self, "_memo", memo)  # frozen: a cache, not a change
        try:
            return memo[key]  # type: ignore[no-any-return]
        except KeyError:
            value = memo[key] = build()
            return value

    @property
    def uuid(self) -> uuid.UUID:
        # Built once: a Metadata answer for all of 10,000 topics asks every entry.
        value = self._uuid
        if value is None:
            raw = self.topic_uuid or self.metadata.topic_uuid
            value = uuid.UUID(bytes=raw) if len(raw) == 16 else uuid.UUID(int=0)
            object.__setattr__(self, "_uuid", value)  # frozen: a cache, not a change
        return value


class TopicRegistry:
    def __init__(
        self, store: Store, config: GatewayConfig, batch_cache: BatchCache, run: Blocking
    ) -> None:
        """``batch_cache``: dropped for a topic deleted or rewritten; ``run``: the broker's
        (store calls on its executor)."""
        self._store, self._config, self._batch_cache, self._run = store, config, batch_cache, run
        self._cache: dict[str, tuple[TopicInfo, float]] = {}  # partition 0 of each topic
        self._parts: dict[str, dict[int, TopicInfo]] = {}  # partitions > 0, same lifetime
        # One structural change (create, grow, delete) per topic at a time: two creations
        # racing must not replace each other's partitions.
        self._changing: dict[str, asyncio.Lock] = {}
        # Called (on an executor thread) between the writes of a change spanning
        # partitions: the kill -9 tests' fault point (gateway/faults.py).
        self.between_steps: partitions_.Step = None
        self._by_uuid: dict[uuid.UUID, str] = {}
        self._last_uuid_scan = float("-inf")
        self._loop: asyncio.AbstractEventLoop | None = None

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Follow topic changes made through any API (HTTP, tools) as they become durable,
        so Kafka clients see a deleted or reconfigured topic at once."""
        self._loop = loop
        self._store.add_topic_listener(self._changed)
        self._store.add_rewrite_listener(self._rewritten)

    def detach(self) -> None:
        self._store.remove_topic_listener(self._changed)
        self._store.remove_rewrite_listener(self._rewritten)

    def _rewritten(self, md: TopicMetadata) -> None:
        # The cleaner removed messages (storage/compaction.py): batches cached before
        # still hold them. On the janitor's thread: the cache belongs to the loop.
        if self._loop is not None:
            uuid_ = md.topic_uuid
            self._loop.call_soon_threadsafe(self._batch_cache.drop_topic, uuid_)

    def _changed(self, md: TopicMetadata) -> None:
        # On the store's writer thread: the cache belongs to the event loop.
        if md.topic.namespace == self._config.namespace and self._loop is not None:
            self._loop.call_soon_threadsafe(self._apply_change, md)

    def _apply_change(self, md: TopicMetadata) -> None:
        self.invalidate(md.topic.kafka_name)
        if md.generation < 0:  # deleted: its cached batches can never be served again
            self._batch_cache.drop_topic(md.topic_uuid)

    def topic_id(self, name: str, partition: int = 0) -> TopicId:
        """The TMS topic of a Kafka topic's partition. Raises InvalidTopicName."""
        if PARTITION_MARK in name:
            raise InvalidTopicName(
                f"invalid topic name {name!r}: use 1-249 characters of [A-Za-z0-9._-]"
            )
        try:
            return TopicId.of_partition(self._config.namespace, name, partition)
        except ValueError as exc:
            raise InvalidTopicName(str(exc)) from None

    def _info(self, md: TopicMetadata) -> TopicInfo:
        c = self._config
        cfg = topic_config(md.properties, c.default_max_message_bytes, c.topic_defaults)
        info = TopicInfo(
            md.topic.topic, md.topic, md, cfg, 0, partition_count(md.properties), md.topic_uuid
        )
        self._cache[info.name] = (info, time.monotonic() + CACHE_SECONDS)
        self._parts.pop(info.name, None)  # they hold the previous partition 0's view
        self._by_uuid[info.uuid] = info.name
        return info

    def invalidate(self, name: str) -> None:
        self._cache.pop(name, None)
        self._parts.pop(name, None)

    def cached(self, name: str) -> TopicInfo | None:
        hit = self._cache.get(name)
        if hit is not None and hit[1] > time.monotonic():
            return hit[0]
        return None

    async def get(self, name: str) -> TopicInfo | None:
        """The topic, or None if it does not exist. Raises InvalidTopicName."""
        hit = self._cache.get(name)
        now = time.monotonic()
        if hit is not None and hit[1] > now:
            return hit[0]
        # An expired entry knows its TMS topic: building the id again (name checks, a
        # TopicId) was a third of a refresh, and at 10,000 topics most lookups refresh.
        tid = hit[0].id if hit is not None else self.topic_id(name)
        # An expired entry is refreshed from what the store holds in memory, on the loop:
        # through the executor the refresh cost ~35 us of CPU and held up the
        # connection's later requests (at 10,000 topics, half of all produces).
        md = self._store.peek_topic(tid)
        if md is None:
            try:
                md = await self._run(self._store.get_topic, tid)
            except TopicNotFound:
                self.invalidate(name)
                return None
        elif md.generation <= 0:
            self.invalidate(name)
            return None
        if hit is not None and hit[0].metadata is md:  # unchanged: keep the entry
            self._cache[name] = (hit[0], now + CACHE_SECONDS)
            return hit[0]
        return self._info(md)

    async def partition(self, topic: TopicInfo, index: int) -> TopicInfo | None:
        """Partition ``index`` of ``topic`` (its partition 0), or None if it has none."""
        if index == 0:
            return topic
        if not 0 < index < topic.partitions:
            return None
        parts = self._parts.get(topic.name)
        if parts is not None:
            info = parts.get(index)
            if info is not None and info.topic_uuid == topic.topic_uuid:
                return info
        tid = self.topic_id(topic.name, index)
        md = self._store.peek_topic(tid)
        if md is None:
            try:
                md = await self._run(self._store.get_topic, tid)
            except TopicNotFound:  # a crash cut its creation short: repair() finishes it
                return None
        if md.generation <= 0:
            return None
        info = TopicInfo(
            topic.name, tid, md, topic.config, index, topic.partitions, topic.topic_uuid
        )
        if self.cached(topic.name) is topic:  # cached only while its topic is
            self._parts.setdefault(topic.name, {})[index] = info
        return info

    async def resolve(
        self, name: str, auto_create: bool = False
    ) -> tuple[TopicInfo | None, ErrorCode]:
        """For handlers: the topic, or None and the error code to answer with."""
        try:
            info = await self.ensure(name, auto_create)
        except Exception as exc:
            return None, error_of(exc, f"look up topic {name!r}")[0]
        return info, ErrorCode.NONE if info else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    async def ensure(self, name: str, auto_create: bool) -> TopicInfo | None:
        """The topic, created with default configs if missing and ``auto_create``."""
        info = await self.get(name)
        if info is not None or not auto_create or not self._config.auto_create_topics:
            return info
        try:
            return await self.create(name, {}, self._config.default_partitions)
        except TopicAlreadyExists:  # another connection created it first
            return await self.get(name)

    @contextlib.asynccontextmanager
    async def _change(self, name: str) -> AsyncIterator[None]:
        lock = self._changing.setdefault(name, asyncio.Lock())
        try:
            async with lock:
                yield
        finally:
            if not lock.locked() and self._changing.get(name) is lock:
                del self._changing[name]

    async def create(self, name: str, properties: dict[str, str], partitions: int = 1) -> TopicInfo:
        async with self._change(name):
            return await self._create(name, properties, partitions)

    async def _create(self, name: str, properties: dict[str, str], partitions: int) -> TopicInfo:
        tid = self.topic_id(name)
        store = self._store
        md = await self._run(
            partitions_.create, store, tid, properties, partitions, self.between_steps
        )
        log.info("created topic %s (generation %d, %d partitions)", tid, md.generation, partitions)
        return self._info(md)

    async def add_partitions(self, name: str, total: int) -> TopicInfo:
        """Grow ``name`` to ``total`` partitions (CreatePartitions)."""
        async with self._change(name):
            tid = self.topic_id(name)
            md, before = await self._run(
                partitions_.grow, self._store, tid, total, self.between_steps
            )
            log.info("topic %s grew from %d to %d partitions", tid, before, total)
            return self._info(md)

    async def update(
        self, name: str, properties: dict[str, str] | Callable[[dict[str, str]], dict[str, str]]
    ) -> TopicInfo:
        """New configs for every partition of the topic."""
        tid = self.topic_id(name)
        return self._info(
            await self._run(partitions_.update, self._store, tid, properties, self.between_steps)
        )

    async def delete(self, name: str) -> None:
        async with self._change(name):
            tid = self.topic_id(name)
            self.invalidate(name)
            try:
                gone = await self._run(partitions_.delete, self._store, tid, self.between_steps)
            finally:
                self.invalidate(name)
            for md in gone:  # their cached batches can never be served again: free them now
                self._batch_cache.drop_topic(md.topic_uuid)
            log.info("deleted topic %s (%d partitions)", tid, len(gone))

    async def repair(self) -> partitions_.Repair:
        """At start, before clients connect: finish partition changes a crash cut short."""
        ns = self._config.namespace
        done = await self._run(partitions_.repair, self._store, ns)
        for md in done.deleted:
            self._batch_cache.drop_topic(md.topic_uuid)
        return done

    async def list(self) -> list[TopicInfo]:
        """Every Kafka topic of the namespace (their partitions 0), in one executor job.
        A cached entry whose metadata is still the store's is reused: building each
        TopicInfo again was a third of a Metadata request for all of 10,000 topics."""
        store = self._store
        ns = self._config.namespace

        def load() -> list[TopicMetadata]:
            return [md for md in store.live_topics(ns) if not md.topic.partition]

        out = []
        for md in await self._run(load):
            hit = self._cache.get(md.topic.topic)
            out.append(hit[0] if hit is not None and hit[0].metadata is md else self._info(md))
        return out

    async def by_uuid(self, topic_uuid: uuid.UUID) -> TopicInfo | None:
        name = self._by_uuid.get(topic_uuid)
        if name is not None:
            info = await self.get(name)
            if info is not None and info.uuid == topic_uuid:
                return info
        # Unknown id: maybe created since we last looked. One scan answers every unknown
        # id for a moment, so requests naming many unknown ids cost one scan, not many.
        now = time.monotonic()
        if now - self._last_uuid_scan < UNKNOWN_ID_RESCAN_S:
            return None
        self._last_uuid_scan = now
        for info in await self.list():
            if info.uuid == topic_uuid:
                return info
        return None
