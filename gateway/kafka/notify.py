"""Wake fetch long polls when a topic gets new messages, instead of polling the disk.

The store calls its listeners on the writer thread after data is durable and
visible; we hop onto the event loop with call_soon_threadsafe, and only when
someone is waiting on that topic, so an idle gateway pays nothing per publish.
A fetch subscribes *before* it reads, so a publish landing between its read and
its wait still wakes it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Hashable, Iterable
from typing import Any


class Subscription:
    __slots__ = ("_event", "_notifier", "_topics")

    def __init__(self, notifier: PublishNotifier, topics: Iterable[Hashable]) -> None:
        self._notifier = notifier
        self._topics = tuple(set(topics))
        self._event = asyncio.Event()

    async def wait(self, timeout: float) -> bool:
        """True if woken by a publish (or shutdown), False on timeout."""
        if timeout <= 0:
            return self._event.is_set()
        try:
            await asyncio.wait_for(self._event.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def rearm(self) -> None:
        self._event.clear()

    def __enter__(self) -> Subscription:
        self._notifier._add(self._topics, self._event)
        return self

    def __exit__(self, *exc: object) -> None:
        self._notifier._remove(self._topics, self._event)


class PublishNotifier:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._store: Any = None
        self._waiters: dict[Hashable, set[asyncio.Event]] = {}
        self._shutting_down = False

    def attach(self, loop: asyncio.AbstractEventLoop, store: Any) -> None:
        self._loop = loop
        self._store = store
        store.add_listener(self._on_publish)

    def detach(self) -> None:
        if self._store is not None:
            with contextlib.suppress(Exception):
                self._store.remove_listener(self._on_publish)
            self._store = None

    def subscribe(self, topics: Iterable[Hashable]) -> Subscription:
        return Subscription(self, topics)

    def wake_all(self) -> None:
        """Shutdown: every long poll answers now with what it has."""
        self._shutting_down = True
        for events in self._waiters.values():
            for event in events:
                event.set()

    def notify(self, topic: Hashable) -> None:
        """On the loop: wake everyone waiting on this topic."""
        for event in self._waiters.get(topic, ()):
            event.set()

    def _on_publish(self, topic: Hashable, next_offset: int) -> None:
        # Writer thread. Reading the dict without a lock is fine under the GIL; a
        # waiter that registers just after this check reads the data itself.
        loop = self._loop
        if loop is not None and self._waiters.get(topic):
            with contextlib.suppress(RuntimeError):  # loop already closed at shutdown
                loop.call_soon_threadsafe(self.notify, topic)

    def _add(self, topics: tuple[Hashable, ...], event: asyncio.Event) -> None:
        for topic in topics:
            self._waiters.setdefault(topic, set()).add(event)
        if self._shutting_down:
            event.set()

    def _remove(self, topics: tuple[Hashable, ...], event: asyncio.Event) -> None:
        for topic in topics:
            events = self._waiters.get(topic)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._waiters[topic]
