"""Fault points for the kill -9 tests, switched on by the environment only.

``TMSGATE_FAULT_TXN_PAUSE=<step>`` makes every Kafka transaction commit stop before that
step (record, reference, commit, offsets, complete: gateway/kafka/txn/coordinator.py)
and wait for ever, after logging ``fault: commit paused before <step>``. The test then
kills the process with SIGKILL: a real kill -9 between two durable steps. Unset (always,
outside tests), nothing is installed and commits run straight through.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .services import Services

log = logging.getLogger("tmsgate.faults")
TXN_PAUSE = "TMSGATE_FAULT_TXN_PAUSE"


def install_from_env(services: Services) -> None:
    step = os.environ.get(TXN_PAUSE)
    if not step:
        return
    log.warning("fault point armed: Kafka transaction commits pause before step %r", step)

    async def before_step(name: str) -> None:
        if name == step:
            log.warning("fault: commit paused before %s", name)
            await asyncio.Event().wait()  # until the process is killed

    services.broker.txns.before_step = before_step
