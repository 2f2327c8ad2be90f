"""Prometheus metrics of the HTTP API, on the registry the gateway's /metrics serves."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)

Observe = Callable[[int, float], None]


class HttpMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "tmsgate_http_requests",
            "HTTP requests answered, by route and status",
            ["route", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            "tmsgate_http_request_seconds",
            "Time from routing an HTTP request to its response being ready",
            ["route"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )

    def observer(self, route: str) -> Observe:
        """``observe(status, seconds)`` for one route. The labelled children are looked up
        once per route and status: prometheus_client's labels() costs microseconds a call,
        which the publish path pays for every request."""
        latency = self.latency.labels(route).observe
        counters: dict[int, Callable[[], None]] = {}
        requests = self.requests

        def observe(status: int, seconds: float) -> None:
            inc = counters.get(status)
            if inc is None:
                inc = counters[status] = requests.labels(route, str(status)).inc
            inc()
            latency(seconds)

        return observe
