"""Committed offsets: the in-memory view, topic checks, and durable writes.

The view holds only what is on disk: a commit enters it after its fsync, from the
writer's ``on_durable`` callback, so OffsetFetch never returns an offset that a crash
could lose. Every offset remembers the topic uuid (one per topic generation) it was
committed against; an offset whose topic is gone or was recreated is not returned and
is deleted the next time it is seen.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tmsgate.protocol import ErrorCode

from ..topics import InvalidTopicName, TopicInfo
from .codec import (
    OFFSETS_AREA,
    CommittedOffset,
    encode_offset,
    offset_key,
    offsets_prefix,
)
from .writer import StateUpdates, StateWriter

if TYPE_CHECKING:
    from ..pacing import Paced
    from ..topics import TopicRegistry

log = logging.getLogger("tmsgate.kafka.groups")
TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    """One partition of an OffsetCommit request."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = None


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    offset: int = -1
    leader_epoch: int = -1
    metadata: str = ""
    error: ErrorCode = ErrorCode.NONE


NO_OFFSET = FetchedOffset()


@dataclass(frozen=True, slots=True)
class PreparedCommit:
    """A commit's rows, ready to be written (Offsets.prepare, then Offsets.store)."""

    group_id: str
    rows: dict[TopicPartition, CommittedOffset]
    updates: StateUpdates


class Offsets:
    def __init__(
        self,
        paced: Paced,
        topics: TopicRegistry,
        writer: StateWriter,
        metadata_max_bytes: int,
        clock: Callable[[], int],
    ) -> None:
        """``paced``: the broker's (loops over what a client sent give the loop back).
        ``clock``: the store's (``Store.now_ms``): a commit's time, which a transaction's
        replayed offsets are compared with (its decision's time, by the same clock)."""
        self._paced, self._topics = paced, topics
        self._clock = clock
        self._writer = writer
        self.metadata_max_bytes = metadata_max_bytes
        self._view: dict[str, dict[TopicPartition, CommittedOffset]] = {}

    # --- the view -----------------------------------------------------------------------
    def load(self, group_id: str, topic: str, partition: int, c: CommittedOffset) -> None:
        self._view.setdefault(group_id, {})[(topic, partition)] = c

    def has_offsets(self, group_id: str) -> bool:
        return bool(self._view.get(group_id))

    def group_ids(self) -> list[str]:
        return list(self._view)

    def forget_group(self, group_id: str) -> None:
        """Drop the group's offsets from the view (not from the store): another gateway
        coordinates it now."""
        self._view.pop(group_id, None)

    def committed(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        return dict(self._view.get(group_id, {}))

    def _forget(self, group_id: str, tp: TopicPartition, only: CommittedOffset | None) -> None:
        offsets = self._view.get(group_id)
        if offsets is None or (only is not None and offsets.get(tp) is not only):
            return
        offsets.pop(tp, None)
        if not offsets:
            del self._view[group_id]

    # --- topics -------------------------------------------------------------------------
    # The loops below walk what a client sent (a 1 MB request names ~80,000 topics), so
    # they are paced: cached topics and invalid names are answered without an await.
    async def topics(self, names: Iterable[str]) -> dict[str, TopicInfo | None]:
        """The current generation of each topic; None for unknown or invalid names."""
        out: dict[str, TopicInfo | None] = {}
        async for name in self._paced(names):
            if name in out:
                continue
            try:
                out[name] = await self._topics.get(name)
            except InvalidTopicName:
                out[name] = None
        return out

    async def check(
        self, items: list[OffsetCommit], topics: dict[str, TopicInfo | None]
    ) -> dict[TopicPartition, ErrorCode]:
        """Per-partition errors Kafka finds before asking the group: unknown topics or
        partitions and oversized metadata."""
        errors: dict[TopicPartition, ErrorCode] = {}
        async for item in self._paced(items):
            tp = (item.topic, item.partition)
            info = topics.get(item.topic)
            if info is None or not 0 <= item.partition < info.partitions:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif item.metadata is not None and (
                len(item.metadata.encode("utf-8")) > self.metadata_max_bytes
            ):
                errors[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
        return errors

    # --- writes -------------------------------------------------------------------------
    async def prepare(
        self, group_id: str, items: list[OffsetCommit], topics: dict[str, TopicInfo | None]
    ) -> PreparedCommit:
        """The rows of a commit, built (paced) before the group is asked, so that asking
        and queueing the write (``store``) happen with no await between them."""
        commit_ms = self._clock()
        # By partition, the last one named winning (as it did when each was put in turn):
        # what becomes durable is then at most one row per existing topic.
        rows: dict[TopicPartition, CommittedOffset] = {}
        updates: StateUpdates = {}
        async for item in self._paced(items):
            info = topics[item.topic]
            assert info is not None
            c = CommittedOffset(
                item.offset,
                item.leader_epoch,
                item.metadata or "",
                commit_ms,
                bytes(info.metadata.topic_uuid),
            )
            rows[(item.topic, item.partition)] = c
            updates[(OFFSETS_AREA, offset_key(group_id, item.topic, item.partition))] = (
                encode_offset(c)
            )
        return PreparedCommit(group_id, rows, updates)

    def store(self, commit: PreparedCommit) -> asyncio.Future[None]:
        """Queue the commit's write (one fsync, shared with concurrent commits); the
        future resolves once it is durable and in the view."""
        group_id, rows = commit.group_id, commit.rows

        def durable() -> None:
            # One dict update: a commit of every topic of a large store puts them all.
            self._view.setdefault(group_id, {}).update(rows)

        return self._writer.write(commit.updates, durable)

    def delete(self, group_id: str, tps: Iterable[TopicPartition]) -> asyncio.Future[None]:
        tps = list(tps)
        updates: StateUpdates = {(OFFSETS_AREA, offset_key(group_id, t, p)): None for t, p in tps}

        def durable() -> None:
            for tp in tps:
                self._forget(group_id, tp, None)

        return self._writer.write(updates, durable)

    def drop_group(self, group_id: str, extra: StateUpdates) -> asyncio.Future[None]:
        """Delete every offset of the group (also ones whose commit is still queued) and
        the ``extra`` rows, in one write."""
        prefix = offsets_prefix(group_id)

        def updates(before: StateUpdates) -> StateUpdates:
            out: StateUpdates = dict(extra)
            for t, p in self._view.get(group_id, {}):
                out[(OFFSETS_AREA, offset_key(group_id, t, p))] = None
            for area, key in before:
                if area == OFFSETS_AREA and key.startswith(prefix):
                    out[(area, key)] = None
            return out

        def durable() -> None:
            self._view.pop(group_id, None)

        return self._writer.write(updates, durable)

    # --- reads --------------------------------------------------------------------------
    async def live(
        self, group_id: str, only_topics: Iterable[str] | None = None
    ) -> dict[TopicPartition, CommittedOffset]:
        """The group's offsets whose topic generation still exists; stale ones are
        deleted in the background."""
        paced = self._paced
        committed = self.committed(group_id)  # a copy: it may change while this is paced
        if only_topics is not None:
            wanted = only_topics if isinstance(only_topics, set) else set(only_topics)
            committed = {tp: c async for tp, c in paced(committed.items()) if tp[0] in wanted}
        topics = await self.topics(t for t, _ in committed)
        live: dict[TopicPartition, CommittedOffset] = {}
        stale: list[tuple[TopicPartition, CommittedOffset]] = []
        async for tp, c in paced(committed.items()):
            info = topics.get(tp[0])
            if info is not None and bytes(info.metadata.topic_uuid) == c.topic_uuid:
                live[tp] = c
            else:
                stale.append((tp, c))
        if stale:
            self._purge(group_id, stale)
        return live

    def _purge(self, group_id: str, stale: list[tuple[TopicPartition, CommittedOffset]]) -> None:
        log.info(
            "group %r: dropping %d committed offsets of deleted or recreated topics: %s",
            group_id,
            len(stale),
            ", ".join(f"{t}-{p}" for (t, p), _ in stale),
        )

        def updates(before: StateUpdates) -> StateUpdates:
            # Only rows still holding the stale offset: a commit queued since wins.
            out: StateUpdates = {}
            view = self._view.get(group_id, {})
            for (t, p), c in stale:
                key = (OFFSETS_AREA, offset_key(group_id, t, p))
                if view.get((t, p)) is c and key not in before:
                    out[key] = None
            return out

        def durable() -> None:
            for tp, c in stale:
                self._forget(group_id, tp, c)

        fut = self._writer.write(updates, durable)
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())
