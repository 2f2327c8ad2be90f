"""A transaction's part on one partition, run where the partition is led.

The records of a transaction wait in the PayloadTable under its write pointer; at the
commit each partition's leader makes them one reference row with dense offsets (sealed
for a Kafka transaction, published for a TMS commit with a manifest), because only the
leader assigns a partition's offsets. On one gateway that is a store call. In a cluster
the partition may be led by another gateway: the part becomes a cluster call to it
(gateway/cluster_calls.py), answered there by the same store call. Every part is
idempotent (a replayed commit finds the reference written and does nothing), so a caller
that lost an answer asks again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tmsgate.storage import (
    NotLeader,
    SharedTransactions,
    Store,
    StoredRange,
    TopicId,
    TopicNotFound,
)

from .cluster_calls import Body, topic_doc, topic_of

if TYPE_CHECKING:
    from .cluster_calls import ClusterCalls


log = logging.getLogger("tmsgate.commits")
Keep = Sequence[StoredRange] | None  # a part's stores to publish (a manifest); None: seal all


def range_row(r: StoredRange) -> list[int]:
    return [r.start_ts, r.start_seq, r.end_ts, r.end_seq, r.count]


def range_of(wp: int, row: Sequence[int]) -> StoredRange:
    start_ts, start_seq, end_ts, end_seq, count = (int(v) for v in row)
    return StoredRange(wp, start_ts, start_seq, end_ts, end_seq, count)


class PartitionWork:
    def __init__(self, store: Store, calls: ClusterCalls | None = None) -> None:
        self.store = store
        self.calls = calls
        if calls is not None:
            calls.register("partition.seal", self._on_seal)
            calls.register("partition.publish_kept", self._on_publish_kept)
            calls.register("partition.discard", self._on_discard)
            calls.register("partition.parts", self._on_parts)
            calls.register("tx.ended", self._on_ended)

    def _here(self, topic: TopicId) -> bool:
        return self.calls is None or self.store.leads(topic)

    async def seal(self, topic: TopicId, wp: int) -> int:
        """The sealed reference of ``wp``'s records on ``topic`` (Store.publish_sealed_async)
        -> records referenced now (0 if already)."""
        if self._here(topic):
            return await asyncio.wrap_future(self.store.publish_sealed_async(topic, wp))
        assert self.calls is not None
        doc = await self.calls.to_leader(
            topic, "partition.seal", {"topic": topic_doc(topic), "wp": wp}
        )
        return int(doc["records"])

    async def publish_kept(self, topic: TopicId, wp: int, keep: Sequence[StoredRange]) -> int:
        """Store.publish_kept_async where ``topic`` is led -> records referenced now."""
        if self._here(topic):
            return await asyncio.wrap_future(self.store.publish_kept_async(topic, wp, keep))
        assert self.calls is not None
        body = {"topic": topic_doc(topic), "wp": wp, "keep": [range_row(r) for r in keep]}
        doc = await self.calls.to_leader(topic, "partition.publish_kept", body)
        return int(doc["records"])

    async def run_parts(self, parts: Sequence[tuple[TopicId, Keep]], wp: int) -> int:
        """Every part of a commit at once (``keep`` None: seal, else publish_kept) -> the
        records referenced now. The parts led elsewhere go to their leader in one call
        per leader, not one per partition: a Kafka transaction over a topic's partitions
        is one call to each other gateway (a deleted topic's part counts 0)."""
        here: list[tuple[TopicId, Keep]] = []
        elsewhere: dict[int, list[tuple[TopicId, Keep]]] = {}
        for topic, keep in parts:
            leader = None if self._here(topic) else self._leader_id(topic)
            if leader is None:
                here.append((topic, keep))  # here, or no leader known: the store says which
            else:
                elsewhere.setdefault(leader, []).append((topic, keep))
        jobs = [self._part_here(topic, keep, wp) for topic, keep in here]
        jobs += [self._parts_on(node_id, group, wp) for node_id, group in elsewhere.items()]
        return sum(await asyncio.gather(*jobs))

    def _leader_id(self, topic: TopicId) -> int | None:
        assert self.calls is not None
        node = self.calls.cluster.leader(topic)
        return None if node is None else node.node_id

    async def _part_here(self, topic: TopicId, keep: Keep, wp: int) -> int:
        try:
            if keep is None:
                return await self.seal(topic, wp)
            return await self.publish_kept(topic, wp, keep)
        except TopicNotFound:
            log.warning("write pointer %d: topic %s was deleted before the commit", wp, topic)
            return 0

    async def _parts_on(self, node_id: int, group: list[tuple[TopicId, Keep]], wp: int) -> int:
        assert self.calls is not None
        node = self.calls.cluster.view.nodes.get(node_id)
        body = {
            "wp": wp,
            "parts": [
                [topic_doc(t), None if k is None else [range_row(r) for r in k]] for t, k in group
            ],
        }
        doc = await self.calls.call(node, "partition.parts", body, f"leader of {group[0][0]}")
        return sum(int(n) for n in doc["records"])

    async def discard(self, topic: TopicId, wp: int) -> int:
        """Free an aborted transaction's records on ``topic`` (Store.discard_payloads_async)."""
        if self._here(topic):
            return await asyncio.wrap_future(self.store.discard_payloads_async(topic, wp))
        assert self.calls is not None
        doc = await self.calls.to_leader(
            topic, "partition.discard", {"topic": topic_doc(topic), "wp": wp}
        )
        return int(doc["records"])

    def tell_ended(self, topics: Sequence[TopicId], wp: int, committed: bool) -> None:
        """After the commit: the leaders of ``topics`` elsewhere hear it at once, so their
        read_committed readers need not wait for their next snapshot of the manager."""
        if self.calls is None:
            return
        cluster = self.calls.cluster
        nodes = {}
        for topic in topics:
            node = cluster.leader(topic)
            if node is not None and node.node_id != cluster.me.node_id:
                nodes[node.node_id] = node
        if nodes:
            body = {"wp": wp, "committed": committed}
            self.calls.tell(list(nodes.values()), "tx.ended", body)

    def tell_everyone(self, wp: int, committed: bool) -> None:
        """A TMS transaction ended (a commit without a manifest names no topics): every
        other live gateway hears it at once, for the same reason as tell_ended."""
        if self.calls is None:
            return
        cluster = self.calls.cluster
        others = [n for n in cluster.nodes() if n.node_id != cluster.me.node_id]
        if others:
            self.calls.tell(others, "tx.ended", {"wp": wp, "committed": committed})

    # --- answering the others --------------------------------------------------------------------
    async def _on_seal(self, body: Body) -> Body:
        topic, wp = topic_of(body["topic"]), int(body["wp"])
        return {"records": await asyncio.wrap_future(self.store.publish_sealed_async(topic, wp))}

    async def _on_parts(self, body: Body) -> Body:
        wp = int(body["wp"])
        parts = [
            (topic_of(t), None if k is None else [range_of(wp, r) for r in k])
            for t, k in body["parts"]
        ]
        for topic, _ in parts:
            if not self.store.leads(topic):
                raise NotLeader(topic, "led by another gateway now; the commit asks again")
        found = await asyncio.gather(*(self._part_here(t, k, wp) for t, k in parts))
        return {"records": list(found)}

    async def _on_publish_kept(self, body: Body) -> Body:
        topic, wp = topic_of(body["topic"]), int(body["wp"])
        keep = [range_of(wp, r) for r in body["keep"]]
        records = await asyncio.wrap_future(self.store.publish_kept_async(topic, wp, keep))
        return {"records": records}

    async def _on_discard(self, body: Body) -> Body:
        topic, wp = topic_of(body["topic"]), int(body["wp"])
        txm = self.store.transactions
        if isinstance(txm, SharedTransactions):  # the manager aborted it: our view learns so
            txm.ended(wp, committed=False)
        records = await asyncio.wrap_future(self.store.discard_payloads_async(topic, wp))
        return {"records": records}

    async def _on_ended(self, body: Body) -> Body:
        txm = self.store.transactions
        if isinstance(txm, SharedTransactions):
            txm.ended(int(body["wp"]), bool(body["committed"]))
        return {}
