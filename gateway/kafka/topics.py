"""Kafka topic names <-> store topics, with a short-lived cache and auto-creation.

Every produce and fetch needs the topic's generation and configs; asking the store
each time would put a blocking call on every request. A change made through any of the
store's APIs (HTTP too) drops the entry once it is durable (``attach``); entries also
live only a few seconds, and any TopicNotFound from the store drops one at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tmsgate.protocol import ErrorCode
from tmsgate.storage import TopicAlreadyExists, TopicId, TopicMetadata, TopicNotFound

from .config import InvalidTopicName, TopicConfig, topic_config
from .errors import error_of

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger("tmsgate.kafka.topics")
CACHE_SECONDS = 5.0
UNKNOWN_ID_RESCAN_S = 1.0  # at most one full scan a second for unknown topic ids


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    id: TopicId
    metadata: TopicMetadata
    config: TopicConfig

    @property
    def uuid(self) -> uuid.UUID:
        raw = self.metadata.topic_uuid
        return uuid.UUID(bytes=raw) if len(raw) == 16 else uuid.UUID(int=0)


class TopicRegistry:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._cache: dict[str, tuple[TopicInfo, float]] = {}
        self._by_uuid: dict[uuid.UUID, str] = {}
        self._last_uuid_scan = float("-inf")
        self._loop: asyncio.AbstractEventLoop | None = None

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Follow topic changes made through any API (HTTP, tools) as they become durable,
        so Kafka clients see a deleted or reconfigured topic at once."""
        self._loop = loop
        self._broker.store.add_topic_listener(self._changed)

    def detach(self) -> None:
        self._broker.store.remove_topic_listener(self._changed)

    def _changed(self, md: TopicMetadata) -> None:
        # On the store's writer thread: the cache belongs to the event loop.
        if md.topic.namespace == self._broker.config.namespace and self._loop is not None:
            self._loop.call_soon_threadsafe(self._apply_change, md)

    def _apply_change(self, md: TopicMetadata) -> None:
        self.invalidate(md.topic.topic)
        if md.generation < 0:  # deleted: its cached batches can never be served again
            self._broker.batch_cache.drop_topic(md.topic_uuid)

    def topic_id(self, name: str) -> TopicId:
        try:
            return TopicId(self._broker.config.namespace, name)
        except ValueError as exc:
            raise InvalidTopicName(str(exc)) from None

    def _info(self, md: TopicMetadata) -> TopicInfo:
        cfg = topic_config(md.properties, self._broker.config.default_max_message_bytes)
        info = TopicInfo(md.topic.topic, md.topic, md, cfg)
        self._cache[info.name] = (info, time.monotonic() + CACHE_SECONDS)
        self._by_uuid[info.uuid] = info.name
        return info

    def invalidate(self, name: str) -> None:
        self._cache.pop(name, None)

    def cached(self, name: str) -> TopicInfo | None:
        hit = self._cache.get(name)
        if hit is not None and hit[1] > time.monotonic():
            return hit[0]
        return None

    async def get(self, name: str) -> TopicInfo | None:
        """The topic, or None if it does not exist. Raises InvalidTopicName."""
        info = self.cached(name)
        if info is not None:
            return info
        tid = self.topic_id(name)
        try:
            md = await self._broker.run(self._broker.store.get_topic, tid)
        except TopicNotFound:
            self.invalidate(name)
            return None
        return self._info(md)

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
        if info is not None or not auto_create or not self._broker.config.auto_create_topics:
            return info
        try:
            return await self.create(name, {})
        except TopicAlreadyExists:  # another connection created it first
            return await self.get(name)

    async def create(self, name: str, properties: dict[str, str]) -> TopicInfo:
        tid = self.topic_id(name)
        md = await self._broker.run(self._broker.store.create_topic, tid, properties)
        log.info("created topic %s (generation %d)", tid, md.generation)
        return self._info(md)

    async def update(
        self, name: str, properties: dict[str, str] | Callable[[dict[str, str]], dict[str, str]]
    ) -> TopicInfo:
        md = await self._broker.run(
            self._broker.store.update_topic, self.topic_id(name), properties
        )
        return self._info(md)

    async def delete(self, name: str) -> None:
        tid = self.topic_id(name)
        self.invalidate(name)
        old = await self.get(name)
        try:
            await self._broker.run(self._broker.store.delete_topic, tid)
        finally:
            self.invalidate(name)
        if old is not None:  # its cached batches can never be served again: free them now
            self._broker.batch_cache.drop_topic(old.metadata.topic_uuid)
        log.info("deleted topic %s", tid)

    async def list(self) -> list[TopicInfo]:
        """Every topic of the namespace, in one executor job."""
        store = self._broker.store
        ns = self._broker.config.namespace

        def load() -> list[Any]:
            out = []
            for tid in store.list_topics(ns):
                try:
                    out.append(store.get_topic(tid))
                except TopicNotFound:  # deleted between the two calls
                    continue
            return out

        return [self._info(md) for md in await self._broker.run(load)]

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
