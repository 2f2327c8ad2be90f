"""A migration's progress: records, bytes, rate and lag per topic. A live table (rich) on
a terminal; otherwise a plain line per topic every few seconds, for logs."""

from __future__ import annotations

import sys
import time
from typing import Any, Protocol

from rich.console import Console
from rich.live import Live
from rich.table import Table

LOG_EVERY_S = 5.0


class _Part(Protocol):
    topic: str
    partition: int
    position: int
    latest: int
    records: int
    size: int


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


class CopyProgress:
    def __init__(self, parts: list[Any], out: Any = sys.stdout, live: bool | None = None) -> None:
        self.parts: list[_Part] = parts
        self.out = out
        self.live = out.isatty() if live is None and hasattr(out, "isatty") else bool(live)
        self.started = time.monotonic()
        self._last_log = self.started
        self._view: Live | None = None

    def __enter__(self) -> CopyProgress:
        if self.live:
            self._view = Live(self._table(), console=Console(file=self.out), refresh_per_second=4)
            self._view.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._view is not None:
            self._view.update(self._table())
            self._view.__exit__(None, None, None)
        else:
            self._log_lines()

    def written(self) -> None:
        if self._view is not None:
            self._view.update(self._table())
        elif time.monotonic() - self._last_log >= LOG_EVERY_S:
            self._log_lines()

    def rows(self) -> list[tuple[str, int, int, float, int]]:
        """(topic, records, bytes, records/s, lag) per topic, in name order."""
        seconds = max(time.monotonic() - self.started, 1e-3)
        by_topic: dict[str, list[int]] = {}
        for p in self.parts:
            row = by_topic.setdefault(p.topic, [0, 0, 0])
            row[0] += p.records
            row[1] += p.size
            row[2] += max(0, p.latest - p.position)
        return [(t, r, b, r / seconds, lag) for t, (r, b, lag) in sorted(by_topic.items())]

    def _table(self) -> Table:
        table = Table(title="tmsgate migrate")
        for name in ("topic", "records", "bytes", "records/s", "lag"):
            table.add_column(name, justify="left" if name == "topic" else "right")
        for topic, records, size, rate, lag in self.rows():
            table.add_row(topic, f"{records:,}", _mb(size), f"{rate:,.0f}", f"{lag:,}")
        return table

    def _log_lines(self) -> None:
        self._last_log = time.monotonic()
        for topic, records, size, rate, lag in self.rows():
            print(
                f"migrate {topic}: {records} records, {_mb(size)}, {rate:.0f} records/s, lag {lag}",
                file=sys.stderr,
                flush=True,
            )
