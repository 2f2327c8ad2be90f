"""``serve --workers N --metrics-listen HOST:PORT``: one scrape for the whole server.

Each worker is a gateway with its own metrics (served on a private port, PORT + 1 + its
index). The parent serves PORT itself: when scraped it reads every worker's metrics
and gives them back as one exposition, each sample labelled ``worker="i"``, so that an
operator has one target, as with one process, and sums or splits by worker in PromQL.
It adds what only the parent knows: whether each worker answered
(``tmsgate_worker_up``) and how often it was started again after dying
(``tmsgate_worker_restarts_total``). A worker that does not answer within
SCRAPE_TIMEOUT_S is reported down and left out of that scrape; the others are not held
up by it beyond that.
"""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

SCRAPE_TIMEOUT_S = 2.0


def worker_metrics_port(port: int, index: int) -> int:
    """Where worker ``index`` serves its own metrics: the ports after the parent's."""
    return port + 1 + index


class WorkersCollector:
    """A prometheus_client collector over the workers' own /metrics endpoints."""

    def __init__(self, targets: Callable[[], list[tuple[int, str]]]) -> None:
        self._targets = targets  # (worker index, its metrics URL), read at each scrape
        self._restarts: dict[int, int] = {}
        self._lock = threading.Lock()

    def restarted(self, index: int) -> None:
        with self._lock:
            self._restarts[index] = self._restarts.get(index, 0) + 1

    def collect(self) -> Iterator[Metric]:
        targets = self._targets()
        up = GaugeMetricFamily(
            "tmsgate_worker_up", "1 if the worker answered this scrape", labels=["worker"]
        )
        restarts = CounterMetricFamily(
            "tmsgate_worker_restarts",
            "Times the parent started the worker again after it died",
            labels=["worker"],
        )
        with self._lock:
            for index, _ in targets:
                restarts.add_metric([str(index)], self._restarts.get(index, 0))
        merged: dict[str, Metric] = {}
        with ThreadPoolExecutor(max_workers=max(1, len(targets))) as pool:
            scraped = list(pool.map(_scrape, [url for _, url in targets]))
        for (index, _), families in zip(targets, scraped, strict=True):
            up.add_metric([str(index)], 0.0 if families is None else 1.0)
            for family in families or ():
                out = merged.get(family.name)
                if out is None:
                    out = Metric(family.name, family.documentation, family.type, family.unit)
                    merged[family.name] = out
                for s in family.samples:
                    labels = {**s.labels, "worker": str(index)}
                    out.add_sample(s.name, labels, s.value, s.timestamp)
        yield up
        yield restarts
        yield from merged.values()


def _scrape(url: str) -> list[Metric] | None:
    """A worker's metric families; None if it did not answer with a valid exposition
    (refused, timed out, not HTTP while it starts)."""
    try:
        with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as answer:
            return list(text_string_to_metric_families(answer.read().decode("utf-8")))
    except (OSError, ValueError):  # UnicodeDecodeError and the parser's errors included
        return None


def serve(host: str, port: int, collector: WorkersCollector) -> None:
    """The parent's /metrics on a daemon thread."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)  # type: ignore[arg-type]
    start_http_server(port, addr=host, registry=registry)
