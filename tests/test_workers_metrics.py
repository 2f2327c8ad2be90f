"""gateway/workers_metrics.py: the parent's one scrape over the workers' own /metrics,
against real HTTP servers on loopback (a worker's answer, a broken one, a closed port).
The whole `serve --workers 2` is scraped in tests/test_workers.py."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from gateway_harness import free_port
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from tmsgate.gateway.workers_metrics import WorkersCollector, worker_metrics_port


def exposition(requests: float, queued: float) -> bytes:
    """What a worker's registry writes (prometheus_client itself)."""
    registry = CollectorRegistry()
    Counter("tmsgate_kafka_requests", "Kafka requests handled", ["api"], registry=registry).labels(
        "Produce"
    ).inc(requests)
    Gauge("tmsgate_queued_bytes", "Bytes queued", registry=registry).set(queued)
    return generate_latest(registry)


@pytest.fixture
def serve_bytes() -> Iterator[object]:
    servers: list[ThreadingHTTPServer] = []

    def start(body: bytes) -> str:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/metrics"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_one_exposition_labelled_by_worker(serve_bytes) -> None:  # type: ignore[no-untyped-def]
    targets = [
        (0, serve_bytes(exposition(5, 100))),
        (1, serve_bytes(exposition(7, 200))),
        (2, serve_bytes(b"this is not # an exposition {{{\n")),  # broken: down, left out
        (3, f"http://127.0.0.1:{free_port()}/metrics"),  # nobody listens: down
    ]
    collector = WorkersCollector(lambda: targets)
    collector.restarted(1)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    assert text.count("# TYPE tmsgate_kafka_requests_total counter") == 1  # merged once
    families = {f.name: f for f in text_string_to_metric_families(text)}

    def by_worker(name: str, sample: str) -> dict[str, float]:
        return {s.labels["worker"]: s.value for s in families[name].samples if s.name == sample}

    assert by_worker("tmsgate_worker_up", "tmsgate_worker_up") == {
        "0": 1.0,
        "1": 1.0,
        "2": 0.0,
        "3": 0.0,
    }
    assert by_worker("tmsgate_worker_restarts", "tmsgate_worker_restarts_total") == {
        "0": 0.0,
        "1": 1.0,
        "2": 0.0,
        "3": 0.0,
    }
    requests = by_worker("tmsgate_kafka_requests", "tmsgate_kafka_requests_total")
    assert requests == {"0": 5.0, "1": 7.0}
    assert by_worker("tmsgate_queued_bytes", "tmsgate_queued_bytes") == {"0": 100.0, "1": 200.0}
    api = {s.labels["api"] for s in families["tmsgate_kafka_requests"].samples}
    assert api == {"Produce"}  # the workers' own labels kept beside "worker"


def test_worker_ports_follow_the_parents() -> None:
    assert [worker_metrics_port(9100, i) for i in range(3)] == [9101, 9102, 9103]
