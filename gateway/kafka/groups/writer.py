"""Durable group state writes, in order, many per fsync.

Every change the coordinator makes durable (committed offsets, group records,
deletions) goes through one ``StateWriter``: writes queue up while one
``Store.put_states`` runs, then all of them share the next one. ``put_states``
returns after the fsync, so a future resolves only once its data is on disk.

Order matters (a later commit of the same partition must win, a group deleted after
a commit must stay deleted), so there is exactly one batch in flight, updates are
merged in arrival order, and each write's ``on_durable`` callback (which updates the
coordinator's in-memory view) runs in that order after the fsync. An update may be a
function of the updates queued before it in the same batch: a group deletion uses
that to also delete offsets whose commit is still in flight.

With several gateways (gateway/cluster.py), a ``fence`` names what may not be written:
rows of a group slot this gateway no longer holds. A write naming such rows fails with
NOT_COORDINATOR before its batch is formed, and the whole batch is checked once more on
the I/O thread right before it is written, so nothing lands after the slot's deadline
(the cluster module's notes say why that is enough). A single gateway has no fence.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tmsgate.protocol import ErrorCode

from .errors import GroupError

if TYPE_CHECKING:
    from tmsgate.storage import Store

    from ..store_futures import Blocking

log = logging.getLogger("tmsgate.kafka.groups")

StateUpdates = dict[tuple[str, str], bytes | None]
Updates = StateUpdates | Callable[[StateUpdates], StateUpdates]
# The reason the rows may not be written now (None: they may).
Fence = Callable[[StateUpdates], str | None]


@dataclass(slots=True)
class _Write:
    updates: Updates
    future: asyncio.Future[None]
    on_durable: Callable[[], None] | None


class StateWriter:
    def __init__(self, store: Store, run: Blocking, fence: Fence | None = None) -> None:
        """``run``: the broker's (the writes go through its executor)."""
        self._store, self._run = store, run
        self.fence = fence
        self._queue: list[_Write] = []
        self._task: asyncio.Task[None] | None = None
        self.batches = 0
        self.writes = 0

    def write(
        self, updates: Updates, on_durable: Callable[[], None] | None = None
    ) -> asyncio.Future[None]:
        """Queue ``updates``; the future resolves once they are fsynced (or fails)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._queue.append(_Write(updates, fut, on_durable))
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._drain(), name="tmsgate-group-writer")
        return fut

    async def flush(self) -> None:
        """Wait until everything queued so far is written."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    async def _drain(self) -> None:
        while self._queue:
            batch, self._queue = self._queue, []
            merged: StateUpdates = {}
            fence = self.fence
            for w in batch:
                updates = w.updates(merged) if callable(w.updates) else w.updates
                refused = None if fence is None else fence(updates)
                if refused is not None:
                    w.future.set_exception(GroupError(ErrorCode.NOT_COORDINATOR, refused))
                    w.future.exception()  # the waiter may have gone away
                    w.on_durable = None
                    continue
                merged.update(updates)
            try:
                if merged:
                    if fence is None:
                        await self._run(self._store.put_states, merged)
                    else:
                        await self._run(_put_fenced, self._store, fence, merged)
            except Exception as exc:
                level = logging.INFO if isinstance(exc, GroupError) else logging.ERROR
                log.log(level, "writing %d group state rows failed: %s", len(merged), exc)
                for w in batch:
                    if not w.future.done():
                        w.future.set_exception(exc)
                        w.future.exception()  # the waiter may have gone away
                continue
            self.batches += 1
            self.writes += len(batch)
            for w in batch:
                if w.on_durable is not None:
                    try:
                        w.on_durable()
                    except Exception:
                        log.exception("updating the group view after a write failed")
                if not w.future.done():
                    w.future.set_result(None)


def _put_fenced(store: Store, fence: Fence, updates: StateUpdates) -> None:
    """On the I/O thread: the last check, then the write."""
    refused = fence(updates)
    if refused is not None:
        raise GroupError(ErrorCode.NOT_COORDINATOR, refused)
    store.put_states(updates)
