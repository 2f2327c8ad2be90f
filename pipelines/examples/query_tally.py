"""A streaming query's rows read and written, summed over its micro-batches for the summary
line a job prints when it stops (needs pyspark: import it where the job runs)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from pyspark.sql.streaming import StreamingQuery, StreamingQueryListener


@dataclass(frozen=True)
class Batch:
    read: int
    written: int


class QueryTally(StreamingQueryListener):
    """Every micro-batch's counts by batch id, from the session's progress events: the
    query's own ``recentProgress`` keeps only the last 100 batches, too few for a query
    that runs for hours. Listener events arrive late, so ``totals`` also reads
    ``recentProgress``, which is complete for the last batches once the query stopped."""

    def __init__(self) -> None:
        self.batches: dict[tuple[str, int], Batch] = {}
        self._lock = threading.Lock()  # events come on Py4J's callback threads

    def _add(self, progress: Any) -> None:
        written = progress.sink.numOutputRows if progress.sink is not None else 0
        key = (str(progress.id), int(progress.batchId))
        with self._lock:
            # An idle query reports the id of its next batch with no rows, and a late event
            # may arrive after that batch's own: the larger counts are the batch's.
            seen = self.batches.get(key, Batch(0, 0))
            self.batches[key] = Batch(
                max(seen.read, int(progress.numInputRows)), max(seen.written, int(written))
            )

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        self._add(event.progress)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass

    def totals(self, query: StreamingQuery) -> tuple[int, int, int]:
        """-> (rows read, rows written, micro-batches that read rows) of ``query``."""
        for progress in query.recentProgress:
            self._add(progress)
        with self._lock:
            mine = [b for (qid, _), b in self.batches.items() if qid == str(query.id)]
        return (
            sum(b.read for b in mine),
            sum(b.written for b in mine),
            sum(1 for b in mine if b.read),
        )
