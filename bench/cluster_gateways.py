"""Several `tmsgate serve --cluster` processes on one store, for the benchmarks.

Used by bench/hbase_calls_bench.py (calls per cluster transaction) and
bench/cluster_txn_bench.py (throughput). Each gateway is a subprocess with its Kafka,
HTTP (the cluster calls go over it) and metrics listeners on free local ports. What the
benchmarks read from them:

- ``cluster_calls_answered``: the cluster calls every gateway answered, from each one's
  /metrics (``tmsgate_http_requests_total{route="cluster_call"}``, every status). A call
  made is a call some gateway answered, so the sum over the gateways is the calls made
  (``ClusterCalls.calls_made`` lives inside each process), less any that never reached a
  listener (none in a healthy run).
- ``AttributedStandin``: the HBase stand-in with its call counts kept per gateway as well,
  by the client port of the Thrift connection and the process holding that socket
  (/proc: Linux only).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_clients_bench import VENV_BIN, free_port, log, stop, wait_for_port
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the stand-in lives there
from hbase_standin import StandinServer  # noqa: E402

UNATTRIBUTED = "other"  # calls on a connection whose process could not be found
LEASE_TICK_S = 2.5  # a fifth of the default --lease-ms, and a margin


@dataclass
class ClusterGateway:
    node_id: int
    proc: subprocess.Popen[bytes]
    bootstrap: str
    http_url: str
    metrics_url: str
    log_path: Path

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of ``name`` whose labels include ``labels``."""
        text = httpx.get(self.metrics_url, timeout=10).text
        total = 0.0
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and labels.items() <= sample.labels.items():
                    total += sample.value
        return total


@contextlib.contextmanager
def cluster_gateways(
    store: str, nodes: int, extra: Sequence[str] = (), cluster: bool = True
) -> Iterator[list[ClusterGateway]]:
    """``nodes`` gateways with ``--cluster --node-id 0..`` on ``store`` (``cluster=False``:
    one gateway without ``--cluster``, the same listeners)."""
    if not cluster and nodes != 1:
        raise ValueError("without --cluster a store has one gateway")
    with tempfile.TemporaryDirectory(prefix="tmsgate-cluster-bench-") as workdir:
        gws: list[ClusterGateway] = []
        try:
            for node in range(nodes):
                kafka, http, metrics = free_port(), free_port(), free_port()
                log_path = Path(workdir) / f"gateway-{node}.log"
                cmd = [
                    str(VENV_BIN / "tmsgate"),
                    "serve",
                    "--store",
                    store,
                    *(("--cluster", "--node-id", str(node)) if cluster else ()),
                    "--kafka-listen",
                    f"127.0.0.1:{kafka}",
                    "--http-listen",
                    f"127.0.0.1:{http}",
                    "--metrics-listen",
                    f"127.0.0.1:{metrics}",
                    "--log-level",
                    "WARNING",
                    *extra,
                ]
                with open(log_path, "wb") as log_file:
                    proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT)
                gw = ClusterGateway(
                    node,
                    proc,
                    f"127.0.0.1:{kafka}",
                    f"http://127.0.0.1:{http}",
                    f"http://127.0.0.1:{metrics}/metrics",
                    log_path,
                )
                gws.append(gw)
                wait_for_port(proc, ("127.0.0.1", kafka))
                wait_for_port(proc, ("127.0.0.1", http))
                log(f"gateway {node}: pid {proc.pid}, Kafka {gw.bootstrap}, HTTP {gw.http_url}")
            yield gws
        finally:
            for gw in gws:
                stop(gw.proc)
            for gw in gws:
                lines = gw.log_path.read_text(errors="replace").splitlines()
                if lines:
                    log(f"gateway {gw.node_id}: {len(lines)} log lines (WARNING+), last ones:")
                    for line in lines[-8:]:
                        log(f"  | {line}")


def bootstrap_of(gws: Sequence[ClusterGateway]) -> str:
    return ",".join(gw.bootstrap for gw in gws)


def cluster_calls_answered(gws: Sequence[ClusterGateway]) -> int:
    return round(sum(gw.metric("tmsgate_http_requests_total", route="cluster_call") for gw in gws))


def controller_of(gws: Sequence[ClusterGateway]) -> ClusterGateway:
    """The gateway Metadata names as controller (the holder of the `controller` lease)."""
    if len(gws) == 1:
        return gws[0]
    admin = AdminClient({"bootstrap.servers": bootstrap_of(gws)})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        node = admin.list_topics(timeout=10).controller_id
        for gw in gws:
            if gw.node_id == node:
                return gw
        time.sleep(0.5)
    raise RuntimeError("no controller named within 60 s")


def leaders_of(gws: Sequence[ClusterGateway], topic: str) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap_of(gws)})
    parts = admin.list_topics(topic, timeout=10).topics[topic].partitions
    return {p: parts[p].leader for p in parts}


def settled_leaders(gws: Sequence[ClusterGateway], topic: str, partitions: int) -> dict[int, int]:
    """``topic``'s leaders once every partition has one and they stayed the same over a
    lease tick (the rendezvous hand-overs after a topic is created take a few)."""
    deadline = time.monotonic() + 90
    last: dict[int, int] = {}
    while time.monotonic() < deadline:
        leaders = leaders_of(gws, topic)
        if len(leaders) == partitions and all(v >= 0 for v in leaders.values()):
            if leaders == last:
                return leaders
            last = leaders
        time.sleep(LEASE_TICK_S)
    raise RuntimeError(f"{topic}: leaders did not settle within 90 s: {last}")


def spread_partitions(
    gws: Sequence[ClusterGateway], prefix: str, used: int = 6, partitions: int = 12
) -> tuple[str, list[int]]:
    """A new Kafka topic of ``partitions`` and ``used`` of them, led by the gateways in
    equal shares (2 each of 3). Rendezvous hashing spreads 12 partitions over 3 gateways
    unevenly, so the benchmarks choose which to write rather than write them all; a topic
    that leaves a gateway fewer than its share is replaced by another."""
    admin = AdminClient({"bootstrap.servers": bootstrap_of(gws)})
    share = used // len(gws)
    for _ in range(10):
        topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
        admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(60)
        leaders = settled_leaders(gws, topic, partitions)
        chosen = [
            p
            for gw in gws
            for p in sorted(p for p, n in leaders.items() if n == gw.node_id)[:share]
        ]
        if len(chosen) == share * len(gws):
            log(f"{topic}: writing partitions {chosen} ({ {p: leaders[p] for p in chosen} })")
            return topic, chosen
        log(f"{topic}: leaders {leaders}, not {share} for every gateway: another topic")
    raise RuntimeError(f"no topic of {partitions} partitions spread over the gateways")


# --------------------------------------------------------------------------- per gateway


class _ByConnection(Counter[str]):
    """The stand-in's call counter (``self.calls[name] += 1`` on the connection's thread),
    also counting per connection: by the client's port, which ``AttributedStandin`` notes
    in a thread-local when it starts serving the connection."""

    def __init__(self, local: threading.local) -> None:
        super().__init__()
        self.local = local
        self.per_port: dict[int, Counter[str]] = {}

    def __setitem__(self, key: str, value: int) -> None:
        super().__setitem__(key, value)
        port = getattr(self.local, "port", 0)
        mine = self.per_port.get(port)
        if mine is None:
            mine = self.per_port[port] = Counter()
        mine[key] += 1


class AttributedStandin(StandinServer):
    """The stand-in, its calls also counted per client process: ``by_gateway()``.

    Bench-only: it overrides the server's per-connection entry point to note the client's
    port, and finds the process holding that port's socket when the connection starts
    (or when the processes are named), before a closed connection could hide it."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._local = threading.local()
        self.hbase.calls = _ByConnection(self._local)
        self._pids: dict[int, str] = {}  # pid -> name to report
        self._port_owner: dict[int, str] = {}

    def _serve(self, client: socket.socket) -> None:
        with contextlib.suppress(OSError):
            port = client.getpeername()[1]
            self._local.port = port
            if self._pids:
                self._port_owner.update(_client_ports(self._pids))
        super()._serve(client)

    def name_processes(self, names: dict[int, str]) -> None:
        self._pids = dict(names)
        self._port_owner = _client_ports(self._pids)  # none of an earlier setup's

    def per_port(self) -> dict[int, Counter[str]]:
        """Calls so far per client port (a connection): the before and after of a phase."""
        calls = self.hbase.calls
        assert isinstance(calls, _ByConnection)
        for _ in range(100):
            try:
                return {port: Counter(dict(c)) for port, c in calls.per_port.items()}
            except RuntimeError:  # a new connection meanwhile
                continue
        raise RuntimeError("could not copy the per-connection call counts")

    def by_gateway(
        self, before: dict[int, Counter[str]], after: dict[int, Counter[str]]
    ) -> dict[str, int]:
        """Calls per gateway between two ``per_port()`` copies. Each connection's calls are
        counted apart and only then given to the process that held it (seen when it
        started, or now), so a connection found late moves nothing counted before."""
        unknown = [port for port in after if port not in self._port_owner]
        if unknown and self._pids:
            self._port_owner.update(_client_ports(self._pids))
        out: dict[str, int] = {}
        for port, counts in after.items():
            owner = self._port_owner.get(port, UNATTRIBUTED)
            calls = sum((counts - before.get(port, Counter())).values())
            if calls:
                out[owner] = out.get(owner, 0) + calls
        return dict(sorted(out.items()))


def _client_ports(pids: dict[int, str]) -> dict[int, str]:
    """Local TCP ports of the sockets each process holds (/proc/net/tcp and the fds)."""
    inode_port: dict[str, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                cols = line.split()
                inode_port[cols[9]] = int(cols[1].rsplit(":", 1)[1], 16)
    owners: dict[int, str] = {}
    for pid, name in pids.items():
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.startswith("socket:["):
                        port = inode_port.get(target[8:-1])
                        if port is not None:
                            owners[port] = name
    return owners
