"""Awaiting the store's writes (concurrent futures its writer thread resolves) from the
event loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

# A blocking store call run on the I/O executor and awaited from the loop (Broker.run):
# ``await run(store.get_topic, topic)``.
Blocking = Callable[..., Awaitable[Any]]


def on_loop(fut: Future[T]) -> asyncio.Future[T]:
    """An asyncio future settled on the loop once ``fut`` is: what asyncio.wrap_future
    does at about half its cost (no closures per call, no cancellation callback), on
    paths taken several times per transaction. Unlike wrap_future, cancelling the
    asyncio future leaves the write alone: a queued write happens whoever waits for it."""
    loop = asyncio.get_running_loop()
    out: asyncio.Future[T] = loop.create_future()
    fut.add_done_callback(_Settle(loop, out))
    return out


class _Settle:
    """``fut``'s done-callback (on the writer thread): settle ``out`` on its loop."""

    __slots__ = ("loop", "out")

    def __init__(self, loop: asyncio.AbstractEventLoop, out: asyncio.Future[Any]) -> None:
        self.loop, self.out = loop, out

    def __call__(self, done: Future[Any]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed (shutdown)
            self.loop.call_soon_threadsafe(_settle, self.out, done)


def _settle(out: asyncio.Future[Any], done: Future[Any]) -> None:
    if out.done():  # its waiter was cancelled
        return
    if done.cancelled():
        out.cancel()
        return
    exc = done.exception()
    if exc is None:
        out.set_result(done.result())
    else:
        out.set_exception(exc)
