"""Consumer lag over the last minutes, for the console's charts (gateway/http/console.py).

The store keeps each group's committed offsets, not their history, so the HTTP listener
samples every group's lag per partition every ``SAMPLE_INTERVAL_S`` and keeps the last
``KEEP_MINUTES`` in memory: a bounded ring per (group, topic, partition). Nothing is
written anywhere; a restarted gateway starts with an empty chart. The sampler is a task
started and stopped with the HTTP listener (server.py), one store read per round (every
group's committed offsets and the high watermarks they need) on the I/O executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from tmsgate.gateway.views import GroupsView

if TYPE_CHECKING:
    from tmsgate.gateway.services import Services

log = logging.getLogger("tmsgate.http")

SAMPLE_INTERVAL_S = 5.0
KEEP_MINUTES = 15
SAMPLES_KEPT = int(KEEP_MINUTES * 60 / SAMPLE_INTERVAL_S)  # 180 points per partition
# Series (group, topic, partition) kept at most: 180 samples of 16 bytes each is ~3 KiB a
# series, so ~30 MiB at the cap. Past it, new series are not tracked (logged once).
MAX_SERIES = 10_000

SeriesKey = tuple[str, str, int]  # group, topic, partition
Sample = tuple[int, int]  # epoch ms, lag


class LagHistory:
    """The last SAMPLES_KEPT lag samples of each (group, topic, partition)."""

    def __init__(self, samples_kept: int = SAMPLES_KEPT, max_series: int = MAX_SERIES) -> None:
        self._kept = samples_kept
        self._max_series = max_series
        self._series: dict[SeriesKey, deque[Sample]] = {}
        self._full_logged = False

    def record(self, now_ms: int, lags: Iterable[tuple[SeriesKey, int]]) -> None:
        """One round of samples. A series absent from the round (its group or offset was
        deleted) is dropped once its last sample is older than the window."""
        seen = set()
        for key, lag in lags:
            seen.add(key)
            ring = self._series.get(key)
            if ring is None:
                if len(self._series) >= self._max_series:
                    if not self._full_logged:
                        log.warning("console lag history: %d series kept, no more", len(self))
                        self._full_logged = True
                    continue
                ring = self._series[key] = deque(maxlen=self._kept)
            ring.append((now_ms, lag))
        oldest = now_ms - int(self._kept * SAMPLE_INTERVAL_S * 1000)
        for key in [k for k, ring in self._series.items() if k not in seen]:
            if self._series[key][-1][0] < oldest:
                del self._series[key]

    def of_group(self, group: str) -> dict[tuple[str, int], list[Sample]]:
        """(topic, partition) -> samples, oldest first, of one group."""
        return {(t, p): list(ring) for (g, t, p), ring in self._series.items() if g == group}

    def __len__(self) -> int:
        return len(self._series)


def read_lags(groups: GroupsView) -> list[tuple[SeriesKey, int]]:
    """Every group's lag per partition now (blocking: run it on the I/O executor). A stale
    offset (its topic deleted or recreated) has no lag and is left out."""
    out = []
    for group in groups.group_ids():
        for row in groups.offsets(group):
            if row.lag is not None:
                out.append(((group, row.topic, row.partition), row.lag))
    return out


class LagSampler:
    """The task that fills a LagHistory while the HTTP listener runs."""

    def __init__(
        self,
        services: Services,
        history: LagHistory,
        interval_s: float = SAMPLE_INTERVAL_S,
    ) -> None:
        self._services = services
        self._history = history
        self._interval_s = interval_s
        self._clock: Callable[[], int] = services.store.now_ms
        self._task: asyncio.Task[None] | None = None

    async def sample(self) -> None:
        """One round now (the task's; tests call it instead of waiting for the next)."""
        # A fresh view per round: GroupsView caches the high watermarks it reads.
        view = GroupsView(self._services.store, self._services.namespace)
        lags = await self._services.run(read_lags, view)
        self._history.record(self._clock(), lags)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        failing = False
        while True:
            try:
                await self.sample()
                failing = False
            except Exception as exc:  # the store closing or failing: the chart has a gap
                if not failing:
                    log.warning("console lag history: sampling failed: %s", exc)
                failing = True
            await asyncio.sleep(self._interval_s)
