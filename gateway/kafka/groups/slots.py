"""The groups of a gateway in a cluster: which rows belong to which coordinator slot,
reading a slot's rows when its lease is taken, and the fence on writing them.

A group's slot is ``group_slot(group_id)`` (gateway/cluster.py: Kafka's hash of the
group id modulo 50). The state areas are keyed by group id, not by slot, so taking
slots scans both areas once and keeps the rows of the slots taken: one scan for all the
slots a round takes (a gateway starting takes its whole share at once). That reads every
group's rows to load a share of them; a store with very many groups would want the slot
in the row key, which would change the areas' layout (kept as it is: a single gateway
reads them all anyway).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Collection
from typing import TYPE_CHECKING

from tmsgate.protocol import ErrorCode
from tmsgate.storage import Store

from ...cluster import group_slot, slot_ranges
from ..loading import loaded
from .codec import GROUPS_AREA, OFFSETS_AREA, group_of_key
from .errors import GroupError
from .writer import StateUpdates

if TYPE_CHECKING:
    from ...cluster import Cluster
    from .coordinator import GroupCoordinator

log = logging.getLogger("tmsgate.kafka.groups")
_ranges = slot_ranges

Rows = list[tuple[str, bytes]]


def slot_of_key(key: str) -> int:
    return group_slot(group_of_key(key))


def read_slots(store: Store, slots: Collection[int]) -> tuple[Rows, Rows]:
    """(group records, committed offsets) of the groups of ``slots`` (blocking)."""
    records = [r for r in store.scan_state(GROUPS_AREA) if slot_of_key(r[0]) in slots]
    offsets = [r for r in store.scan_state(OFFSETS_AREA) if slot_of_key(r[0]) in slots]
    return records, offsets


class SlotFence:
    """``StateWriter``'s fence in a cluster: rows of a slot this gateway may not write
    now (``Cluster.may_write_group_slot``) are refused, with the reason."""

    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster

    def __call__(self, updates: StateUpdates) -> str | None:
        may_write = self._cluster.may_write_group_slot
        seen: set[str] = set()
        for _area, key in updates:
            group = key.partition("/")[0]
            if group in seen:
                continue  # a commit names one group's many partitions
            seen.add(group)
            slot = slot_of_key(group)
            if not may_write(slot):
                return (
                    f"this gateway no longer coordinates group slot {slot} "
                    "(its lease was handed over, lost or is about to end)"
                )
        return None


class SlotGroups:
    """The life of a clustered coordinator's slots: loading a slot's groups when its
    lease is taken (or at the first request for one of its groups), handing a slot over
    (flush, stop writing, flush, drop) and dropping one whose lease was lost."""

    def __init__(self, coordinator: GroupCoordinator, cluster: Cluster) -> None:
        self._coordinator = coordinator
        self._cluster = cluster
        # slot -> the task loading it (one task loads every slot a round took)
        self._loads: dict[int, asyncio.Task[None]] = {}

    def check(self, group_id: str) -> int:
        """The group's slot, if this gateway coordinates it now; else NOT_COORDINATOR."""
        slot = group_slot(group_id)
        if not self._cluster.serves_group_slot(slot):
            raise GroupError(
                ErrorCode.NOT_COORDINATOR,
                f"group {group_id!r} (slot {slot}) is coordinated by another gateway",
            )
        return slot

    def serves(self, group_id: str) -> bool:
        return self._cluster.serves_group_slot(group_slot(group_id))

    async def ready(self, group_id: str | None) -> None:
        """The group's slot (``None``: every slot this gateway serves) is loaded."""
        if group_id is None:
            slots = sorted(self._cluster.held_group_slots())
        else:
            slots = [self.check(group_id)]
        for slot in slots:
            task = self._loads.get(slot)
            if loaded(task):
                continue
            if task is None or task.done():  # a failed load is tried again
                task = self._start({slot})
            try:
                await asyncio.shield(task)
            except Exception as exc:
                if self._loads.get(slot) is task:
                    del self._loads[slot]
                log.error("loading the groups of slot %d failed: %s", slot, exc)
                raise GroupError(
                    ErrorCode.COORDINATOR_NOT_AVAILABLE, f"loading groups failed: {exc}"
                ) from exc
        if group_id is not None:
            self.check(group_id)  # handed over while loading

    async def follow(self) -> None:
        """After a lease round: drop the groups of slots no longer held (lost), load the
        slots held and not loaded yet (taken)."""
        held = self._cluster.held_group_slots()
        gone = set(self._loads) - held
        if gone:
            self._drop(gone)
        new = {s for s in held if s not in self._loads or _failed(self._loads[s])}
        if new:
            task = self._start(new)
            try:
                await asyncio.shield(task)
            except Exception as exc:  # the first request for one of its groups retries
                log.error("loading the groups of slots %s failed: %s", sorted(new), exc)

    async def hand_over(self, slots: Collection[int]) -> None:
        """Before the slots' leases are released (the cluster module's notes): what was
        queued is written, nothing is written after, and the groups leave memory."""
        writer = self._coordinator.writer
        with contextlib.suppress(Exception):
            await writer.flush()
        self._cluster.close_group_slots(slots)
        with contextlib.suppress(Exception):
            await writer.flush()  # a batch that passed its check before the close
        self._drop(set(slots))

    def _start(self, slots: set[int]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(self._load(frozenset(slots)))
        for slot in slots:
            self._loads[slot] = task
        self._coordinator.watch()
        return task

    async def _load(self, slots: frozenset[int]) -> None:
        started = time.perf_counter()
        records, rows = await self._coordinator.run(read_slots, self._coordinator.store, slots)
        me = asyncio.current_task()
        keep = {s for s in slots if self._loads.get(s) is me}  # not dropped meanwhile
        if keep != slots:
            records = [r for r in records if slot_of_key(r[0]) in keep]
            rows = [r for r in rows if slot_of_key(r[0]) in keep]
        self._forget(keep)  # anything left from an earlier time this gateway held them
        groups = self._coordinator.restore(records, rows)
        log.info(
            "group slots %s: loaded %d consumer groups and %d committed offsets in %.0f ms",
            _ranges(keep),
            groups,
            len(rows),
            (time.perf_counter() - started) * 1000,
        )

    def _drop(self, slots: set[int]) -> None:
        """The slots' groups leave memory: their waiting members are told NOT_COORDINATOR
        (they find the new coordinator and rejoin there), their timers stop."""
        for slot in slots:
            self._loads.pop(slot, None)
        gone = self._forget(slots)
        log.info("group slots %s: dropped %d consumer groups", _ranges(slots), gone)

    def _forget(self, slots: Collection[int]) -> int:
        coordinator = self._coordinator
        gone = [g for gid, g in coordinator.groups.items() if group_slot(gid) in slots]
        for group in gone:
            coordinator.forget(group)
        for group_id in coordinator.offsets.group_ids():
            if group_slot(group_id) in slots:
                coordinator.offsets.forget_group(group_id)
        return len(gone)


def _failed(task: asyncio.Task[None]) -> bool:
    return task.done() and not loaded(task)
