"""The keys Produce decoded, kept for the compaction cleaner (docs/compaction.md).

Produce decodes every Kafka batch (a compacted topic's records must have keys), so the
keys of the newest batches written to compacted topics are at hand when the cleaner
maps a topic's dirty part moments later. Taking them from here spares the cleaner
reading each batch back, mostly from the disk (the value log keeps only the newest
writes in the page cache, vlog.CACHE_WINDOW), and decoding it again: a million records
just written are mapped in a tenth of a second instead of seconds (docs/benchmarks.md,
compaction).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from .ids import TopicId

# What the produced keys of one record cost in memory (its key, a list slot): 58 bytes
# measured for 10-byte keys.
PRODUCED_KEY_BYTES = 64


class ProducedKeys:
    """The record keys of the newest Kafka batches written as sent to compacted topics,
    as Produce decoded them: the cleaner's map takes a row's keys from here instead of
    reading the row back (most of a compacted topic's history has left the page cache,
    vlog.CACHE_WINDOW) and decoding it again. A hint only: bounded (``budget`` keys, the
    oldest batches forgotten first), lost at a restart, and a row not found here is
    read. Rows are named by topic, generation and first offset; a row keeps its keys for
    as long as it is a batch kept as sent (the cleaner rewrites it into another kind)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._rows: OrderedDict[tuple[TopicId, int, int], tuple[list[bytes | None], list[int]]]
        self._rows = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    def remember(
        self,
        topic: TopicId,
        generation: int,
        base: int,
        found: list[bytes | None],
        nulls: list[int],
    ) -> None:
        """A batch is durable at ``base``: its records' keys, and which values are null."""
        if self.budget <= 0 or len(found) > self.budget:
            return
        with self._lock:
            old = self._rows.pop((topic, generation, base), None)
            if old is not None:
                self._held -= len(old[0])
            self._rows[(topic, generation, base)] = (found, nulls)
            self._held += len(found)
            while self._held > self.budget:
                _, (gone, _) = self._rows.popitem(last=False)
                self._held -= len(gone)

    def keys_of(
        self, topic: TopicId, generation: int, base: int, count: int
    ) -> tuple[list[bytes | None], list[int]] | None:
        with self._lock:
            found = self._rows.get((topic, generation, base))
        if found is None or len(found[0]) != count:
            return None
        return found

    def forget(self, topic: TopicId, generation: int, base: int) -> None:
        """The row is rewritten (no longer a batch kept as sent)."""
        with self._lock:
            old = self._rows.pop((topic, generation, base), None)
            if old is not None:
                self._held -= len(old[0])

    def topic_has(self, topic: TopicId, generation: int) -> bool:
        """Whether any row of that topic generation is remembered (a quick look: the
        cleaner then reads the topic's rows head first, their values only when needed)."""
        with self._lock:
            return any(t == topic and g == generation for t, g, _ in self._rows)

    def held(self) -> int:
        return self._held
