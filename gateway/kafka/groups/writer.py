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
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..broker import Broker

log = logging.getLogger("tmsgate.kafka.groups")

StateUpdates = dict[tuple[str, str], bytes | None]
Updates = StateUpdates | Callable[[StateUpdates], StateUpdates]


@dataclass(slots=True)
class _Write:
    updates: Updates
    future: asyncio.Future[None]
    on_durable: Callable[[], None] | None


class StateWriter:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker
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
            for w in batch:
                merged.update(w.updates(merged) if callable(w.updates) else w.updates)
            try:
                if merged:
                    await self._broker.run(self._broker.store.put_states, merged)
            except Exception as exc:
                log.error("writing %d group state rows failed: %s", len(merged), exc)
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
