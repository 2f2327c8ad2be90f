"""The coordinators' one-time load (groups, Kafka transactions): every request awaits
``ready()``, which after the start only has to see that the load succeeded."""

from __future__ import annotations

import asyncio
from typing import Any


def loaded(task: asyncio.Task[Any] | None) -> bool:
    """The load task finished without error: ready() returns at once, building no shield
    (a future and a callback per request) around a task that is long done."""
    return task is not None and task.done() and not task.cancelled() and task.exception() is None
