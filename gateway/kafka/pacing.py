"""Keeping heavy work from holding the event loop every client of a gateway shares.

A Metadata request naming 500,000 topics once held the loop 4.6 s, and every producer
waited. CPU-heavy pure work, such as decoding a large request or encoding a large
response, goes to a CPU thread (``Pacing.compute``); a loop over a client-supplied list
iterates it with ``Pacing.paced``, which gives the loop back every few milliseconds.
Meanwhile the interpreter hands the GIL over sooner and collects in shorter pauses
(``_HeavyWork``).
"""

from __future__ import annotations

import asyncio
import functools
import gc
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
# The event loop time a paced loop may take before letting other work run, shared by all
# paced loops running at once: other clients wait at most about this long per turn.
LOOP_SLICE_S = 0.001
# While heavy work (compute, paced loops) keeps one thread busy, the others (event loop,
# store writer) must win the GIL back soon after each system call they make: at Python's
# default switch interval (5 ms) each of the dozen hand-overs that answering a produce
# takes could cost 5 ms (beside 1 MB Metadata requests produce p50 was 35-40 ms; at
# 0.5 ms, 15-19 ms, and 4 ms with GC_SPLIT below; alone 1-2 ms). Only meanwhile: a
# shorter interval costs throughput.
HEAVY_SWITCH_INTERVAL_S = 0.0005
# A large request makes hundreds of thousands of objects, and a collection of the middle
# generation walks them all at once while every thread waits (30-100 ms with `tmsgate
# serve`'s thresholds). During heavy work that generation is collected GC_SPLIT times as
# often, so each pause is that much shorter (5-6 ms measured); the oldest generation's
# threshold grows as much, so full collections do not come sooner.
GC_SPLIT = 10


class _HeavyWork:
    """Heavy work under way in this process, by any broker: the GIL and the collector are
    the process's, so are the settings changed meanwhile (restored when none is left)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # gateways on several threads (tests) share it
        self._depth = 0
        self._normal: tuple[float, tuple[int, int, int]] = (0.0, (0, 0, 0))

    def begins(self) -> None:
        with self._lock:
            if not self._depth:
                self._normal = (sys.getswitchinterval(), gc.get_threshold())
                sys.setswitchinterval(HEAVY_SWITCH_INTERVAL_S)
                t0, t1, t2 = self._normal[1]
                gc.set_threshold(t0, max(1, t1 // GC_SPLIT), t2 * GC_SPLIT)
            self._depth += 1

    def ends(self) -> None:
        with self._lock:
            self._depth -= 1
            if not self._depth:
                sys.setswitchinterval(self._normal[0])
                gc.set_threshold(*self._normal[1])


_heavy_work = _HeavyWork()


# Pacing.paced (and Broker.paced): ``async for item in paced(items)`` gives the loop back
# now and then.
Paced = Callable[[Iterable[T]], AsyncIterator[T]]


class Pacing:
    """One broker's heavy work, kept from holding the event loop every client shares:
    pure CPU work on a CPU thread (``compute``), and loops over what a client sent given
    the loop back every few milliseconds (``paced``)."""

    def __init__(self) -> None:
        # One thread: CPU work holds the GIL, so more threads would not finish it sooner,
        # they would only take more turns from the event loop (and from store writers).
        self.cpu_executor = ThreadPoolExecutor(1, thread_name_prefix="tmsgate-cpu")
        self._loops = 0  # paced loops running now, which share LOOP_SLICE_S

    async def compute(self, fn: Callable[..., T], *args: Any) -> T:
        """Run pure CPU work (decoding, encoding) off the event loop; it must not touch
        state the loop owns."""
        loop = asyncio.get_running_loop()
        _heavy_work.begins()
        try:
            return await loop.run_in_executor(self.cpu_executor, functools.partial(fn, *args))
        finally:
            _heavy_work.ends()

    async def paced(self, items: Iterable[T]) -> AsyncIterator[T]:
        """``items``, giving the event loop back whenever this loop has held it for its
        share of LOOP_SLICE_S. For handlers looping over what a client sent (topics,
        partitions, resources, groups): ``async for t in ctx.broker.paced(req.topics)``.
        Loops that await the store already give the loop back at each call; pacing also
        covers the ones that do not (cache hits, invalid names, building responses)."""
        self._loops += 1
        heavy = False  # a few items (the usual case) change no interpreter setting
        try:
            deadline = time.perf_counter() + LOOP_SLICE_S / self._loops
            for item in items:
                yield item
                if time.perf_counter() >= deadline:
                    if not heavy:
                        heavy = True
                        _heavy_work.begins()
                    await asyncio.sleep(0)
                    deadline = time.perf_counter() + LOOP_SLICE_S / self._loops
        finally:
            self._loops -= 1
            if heavy:
                _heavy_work.ends()

    def close(self) -> None:
        self.cpu_executor.shutdown(wait=True)
