"""A decided commit's steps, for both kinds of commit: one plan, one runner, one replay.

tmsgate commits two kinds of transaction: a TMS commit with a manifest (HTTP, the SDK,
the Spark sink: gateway/transactions.py) and a Kafka transaction's EndTxn
(gateway/kafka/txn/coordinator.py). They differ in how the decision is made and recorded
(a manifest's row; the transactional id's record in PrepareCommit) and in what the record
says once the commit is finished. From the recorded decision on they are the same steps,
described by a ``CommitPlan`` and run here:

  parts     each topic's part, where the topic is led (gateway/partition_work.py): every
            record the transaction stored there as one sealed reference (Kafka), or only
            the stores a manifest lists, the others deleted first
  commit    the TMS commit: every part visible at once
  offsets   what commits with it: a Kafka transaction's group offsets, each on its
            group's coordinator, with the decision's time
  done      (the owner's) the record says the commit is finished

Every step is idempotent (a part finds its reference written, the commit finds the
transaction committed, an offset is not moved back by a replay), so ``replay`` runs a
recorded plan again after a restart, on a new controller, or for a retried EndTxn, and a
kill -9 anywhere ends with all of it visible exactly once. One fault hook
(``before_step``, gateway/faults.py) names the points a test stops a commit at: ``record``
(before the owner records the decision), ``parts``, ``partial`` (one part written, the
others not), ``commit``, ``offsets``, ``done``.

A Kafka commit whose partitions are all led here takes a shortcut: its decision, its
parts and the TMS commit as one durable write (Store.commit_sealed_async), then
``run(..., parts_done=True)`` for the rest; a write landing in part leaves what a stop
between those steps leaves, which ``replay`` finishes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from tmsgate.storage import Store, StoredRange, TopicId, TopicNotFound, TransactionNotInProgress
from tmsgate.storage.transactions import COMMITTED

from .partition_work import PartitionWork

log = logging.getLogger("tmsgate.commits")

TopicPartition = tuple[str, int]
GroupOffsets = Mapping[TopicPartition, tuple[int, int, str]]  # offset, leader epoch, metadata
STEPS = ("record", "parts", "partial", "commit", "offsets", "done")


@dataclass(frozen=True, slots=True)
class Part:
    """One topic's part of a commit. ``keep`` None: every record the transaction stored
    on the topic, sealed (Kafka); else only these stores (a manifest)."""

    topic: TopicId
    keep: Sequence[StoredRange] | None = None


@dataclass(frozen=True, slots=True)
class CommitPlan:
    write_pointer: int
    parts: tuple[Part, ...]
    # group -> its offsets, committed with the decision's time (a Kafka transaction's)
    offsets: Mapping[str, GroupOffsets] = field(default_factory=dict)
    decided_ms: int = -1
    transactional_id: str | None = None  # a Kafka transaction's (None: a TMS commit)

    def __str__(self) -> str:
        tid = self.transactional_id
        who = f"transactional id {tid!r}" if tid else "commit"
        return f"{who} (write pointer {self.write_pointer})"


# (plan, group, offsets, replay): commits a group's offsets where the group is coordinated
OffsetsCommit = Callable[[CommitPlan, str, GroupOffsets, bool], Awaitable[None]]


class Commits:
    def __init__(self, store: Store, partitions: PartitionWork) -> None:
        self.store = store
        self.partitions = partitions
        self.commit_offsets: OffsetsCommit | None = None  # the Kafka side's (services.py)
        # Tests stop a commit between two steps (kill -9 at every step): called with the
        # step's name once the step before it is durable.
        self.before_step: Callable[[str], Awaitable[None]] | None = None
        # Set with a stop at parts, partial or commit: a Kafka commit takes steps 2-4 one
        # durable write each, as a replay runs them, instead of one write for all three,
        # so that the test stops where a write landing in part leaves it.
        self.stepwise = False

    async def step(self, name: str) -> None:
        if self.before_step is not None:
            await self.before_step(name)

    def redecide(self, wp: int) -> str | None:
        """Before a replay: the recorded decision holds again in the transaction manager
        (in memory only, so a restart or a new controller forgets it). -> None, or the
        state that makes it impossible (a decided transaction is never aborted or
        invalidated, so this means a lost or damaged store)."""
        manager = self.store.transactions
        if manager.state(wp) == COMMITTED:
            return None
        try:
            manager.decide(wp, recovering=True)
        except TransactionNotInProgress as exc:
            return exc.state
        return None

    async def run(self, plan: CommitPlan, replay: bool, parts_done: bool = False) -> int:
        """The steps after the recorded decision (module docstring) -> records made
        visible now (0 for parts already done). ``parts_done``: the parts and the TMS
        commit were written with the decision (the shortcut)."""
        wp = plan.write_pointer
        records = 0
        if not parts_done:
            await self.step("parts")
            if plan.parts and self.before_step is None:
                # All at once, one call per other leader: each part is idempotent, and a
                # replay finishes any subset.
                parts = [(p.topic, p.keep) for p in plan.parts]
                records = await self.partitions.run_parts(parts, wp)
            elif plan.parts:  # a test stops the commit with some parts done and some not
                first, *rest = plan.parts
                records = await self._part(first, wp)
                await self.step("partial")
                found = await asyncio.gather(*(self._part(p, wp) for p in rest))
                records += sum(found)
            await self.step("commit")
            try:
                await asyncio.wrap_future(self.store.transactions.commit_async(wp))
            except TransactionNotInProgress as exc:
                if exc.state != COMMITTED:  # committed: a replay after this step
                    raise
        self.partitions.tell_ended([p.topic for p in plan.parts], wp, True)
        await self.step("offsets")
        if plan.offsets:
            assert self.commit_offsets is not None, "a plan with offsets needs the groups"
            for group_id, offsets in sorted(plan.offsets.items()):
                await self.commit_offsets(plan, group_id, offsets, replay)
        await self.step("done")
        return records

    async def replay(self, plan: CommitPlan) -> bool:
        """Finish a recorded commit (a restart, a new controller): -> False if its
        transaction can no longer commit (logged; its owner drops the record)."""
        impossible = self.redecide(plan.write_pointer)
        if impossible is not None:
            log.error(
                "%s: the commit was decided but the transaction is %s; dropping it",
                plan,
                impossible,
            )
            return False
        log.warning("%s: finishing a commit decided before a restart or takeover", plan)
        await self.run(plan, replay=True)
        return True

    async def _part(self, part: Part, wp: int) -> int:
        try:
            if part.keep is None:
                return await self.partitions.seal(part.topic, wp)
            return await self.partitions.publish_kept(part.topic, wp, part.keep)
        except TopicNotFound:
            log.warning("write pointer %d: topic %s was deleted before the commit", wp, part.topic)
            return 0
