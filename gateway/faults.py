"""Fault points for the kill -9 tests, switched on by the environment only.

``TMSGATE_FAULT_COMMIT_PAUSE=<step>`` makes every commit, a Kafka transaction's and a TMS
commit with a manifest alike, stop before that step (gateway/commits.py: record, parts,
partial, commit, offsets, done; ``partial`` comes after the first topic's part, with the
others not yet written) and wait for ever, after logging ``fault: commit paused before
<step>``. The test then kills the process with SIGKILL: a real kill -9 between two
durable steps. Unset (always, outside tests), nothing is installed and commits run
straight through.

``TMSGATE_FAULT_TXN_RECORDS_PAUSE=1`` stops the store's writer, for ever, before the first
write that holds PayloadTable rows (a Kafka transaction's records, whose Produce is
answered before that write lands), after logging ``fault: records write paused``.

``TMSGATE_FAULT_TOPIC_PAUSE=<step>`` does the same between the writes of a Kafka topic
change that spans partitions (storage/partitions.py: create.head, grow.count,
update.rest, delete.rest), blocking the executor thread making the change.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from typing import TYPE_CHECKING

from tmsgate.storage import keys

if TYPE_CHECKING:
    from tmsgate.storage.backend import Mutation

    from .services import Services

log = logging.getLogger("tmsgate.faults")
COMMIT_PAUSE = "TMSGATE_FAULT_COMMIT_PAUSE"
TOPIC_PAUSE = "TMSGATE_FAULT_TOPIC_PAUSE"
TXN_RECORDS_PAUSE = "TMSGATE_FAULT_TXN_RECORDS_PAUSE"


def install_from_env(services: Services) -> None:
    _topic_pause(services)
    _records_pause(services)
    step = os.environ.get(COMMIT_PAUSE)
    if not step:
        return
    log.warning("fault point armed: commits pause before step %r", step)

    async def before_step(name: str) -> None:
        if name == step:
            log.warning("fault: commit paused before %s", name)
            await asyncio.Event().wait()  # until the process is killed

    services.commits.before_step = before_step
    # A stop between a Kafka commit's decision, its parts and the TMS commit is what a
    # write of all three landing in part leaves: take them one write each to stop there.
    services.commits.stepwise = step in ("parts", "partial", "commit")


def _records_pause(services: Services) -> None:
    if not os.environ.get(TXN_RECORDS_PAUSE):
        return
    log.warning("fault point armed: the store's writer pauses before writing payload rows")
    payload = keys.PAYLOAD

    def before_write(mutations: list[Mutation]) -> None:
        if any(key[:1] == payload for key, _ in mutations):
            log.warning("fault: records write paused")
            threading.Event().wait()  # until the process is killed

    services.store.pause_writes_before(before_write)


def _topic_pause(services: Services) -> None:
    step = os.environ.get(TOPIC_PAUSE)
    if not step:
        return
    log.warning("fault point armed: topic changes pause before step %r", step)

    def between_steps(name: str) -> None:
        if name == step:
            log.warning("fault: topic change paused before %s", name)
            threading.Event().wait()  # until the process is killed

    services.broker.topics.between_steps = between_steps
