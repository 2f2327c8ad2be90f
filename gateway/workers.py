"""``tmsgate serve --workers N``: N gateway processes on one machine, one LevelDB store.

One CPython process uses about one core (its interpreter lock), so more cores need more
processes. LevelDB is one process's, so the processes are arranged as a cluster on one
machine (docs/architecture.md has the picture):

- **The parent owns the store.** It opens the leveldb:// store and serves its rows on a
  Unix socket (storage/served.py, with group commit: one fsync for the writes that
  arrive together), binds the listening sockets, starts the workers and starts a worker
  again when it dies. It runs no gateway itself, so its own work is only rows and fsyncs.
- **Each worker is a gateway of a cluster** (``--cluster`` over ``served://``, node id
  ``--node-id`` + its index): it leads a share of the partitions and of the group slots
  by lease, one of them is the controller running the transaction manager, and what
  spans workers (a commit across partitions led by several) goes through the same calls
  and the same commit plan as across machines (gateway/cluster.py, gateway/commits.py).
  So the store's rules do not change, and neither does a client: Metadata names each
  worker as a broker, and Kafka clients send each partition's records to its leader.
- **Sockets.** The parent binds the Kafka and HTTP addresses given (where clients
  bootstrap) and, for each worker, a Kafka and an HTTP socket of its own on a free port
  (the address Metadata and the other workers give for it); a worker accepts on its own
  and on the shared ones (``listen_fds``). Metrics: the parent serves
  ``--metrics-listen`` with every worker's metrics in one scrape, labelled by worker
  (gateway/workers_metrics.py); worker i serves its own at that port + 1 + i.

A dead worker (killed, crashed): the parent ends its connections to the store, waiting
until nothing it sent is still being written, then releases every lease it held, so the
others (or its next run) take its partitions and group slots at once rather than after
``--lease-ms``. A dead parent takes the workers with it (PR_SET_PDEATHSIG), since they
cannot store anything without it; whatever was acknowledged is on disk, as after any
kill, and the next start recovers it.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import hashlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass

from tmsgate.storage.backend import Backend, open_backend
from tmsgate.storage.errors import StorageError
from tmsgate.storage.leases import LeaseTable, wall_clock_ms
from tmsgate.storage.served import BackendServer

from . import workers_metrics
from .cluster import node_of
from .http.server import bind as http_bind

log = logging.getLogger("tmsgate.workers")

INHERITED = "TMSGATE_INHERITED_LISTENERS"  # "kafka=5,6 http=7,8": set for each worker
PARENT = "TMSGATE_WORKER_PARENT"  # the owner's pid: a worker dies with it
QUICK_EXIT_S = 10.0  # a worker that exits this soon after starting, again and again...
QUICK_EXITS = 3  # ...this many times in a row: the configuration is wrong; stop all
STOP_AFTER_S = 45.0  # a worker not stopped this long after SIGTERM is killed (grace: 30 s)
# A worker killed (or being started again) stays in the others' Metadata this long: it
# comes back at the same address, and clients that drop a broker can hang (cluster.py's
# ClusterConfig.listed_after_end_ms). Apache Kafka's broker.session.timeout.ms.
LISTED_AFTER_END_MS = 9_000


def inherited_listeners() -> dict[str, tuple[int, ...]]:
    """In a worker: the listening sockets its parent handed down, by listener."""
    out: dict[str, tuple[int, ...]] = {}
    for part in os.environ.get(INHERITED, "").split():
        name, _, fds = part.partition("=")
        out[name] = tuple(int(fd) for fd in fds.split(",") if fd)
    return out


def die_with_parent() -> None:
    """In a worker: be killed when the store's owner dies (Linux; elsewhere the worker
    finds out at its next store call, which fails)."""
    parent = os.environ.get(PARENT)
    if not parent:
        return
    with contextlib.suppress(OSError, AttributeError):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != int(parent):  # it died before prctl took effect
        os._exit(1)


@dataclass
class Worker:
    index: int
    node_id: int
    kafka: socket.socket  # its own listening sockets, bound by the parent
    http: socket.socket | None
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    quick_exits: int = 0


def _run_dir(store_path: str) -> str:
    """A directory for the store's socket that only our user may enter, named after the
    store, so that a run after a kill -9 replaces the one the killed run left (we hold
    the store's lock: nobody else uses it)."""
    digest = hashlib.sha1(os.path.abspath(store_path).encode()).hexdigest()[:12]
    path = os.path.join(tempfile.gettempdir(), f"tmsgate-{os.getuid()}-{digest}")
    shutil.rmtree(path, ignore_errors=True)
    os.mkdir(path, 0o700)
    return path


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket the workers inherit (the HTTP listener's bind: SO_REUSEADDR)."""
    sock = http_bind(host, port)
    try:
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


# Each worker's own ports, kept beside the store: a client knows the brokers' addresses
# from Metadata and, with metadata.recovery.strategy=none (the Java client's default
# before Kafka 4.0), never bootstraps again, so a restarted server must come back at
# the same addresses, as a restarted Kafka broker does.
PORTS_FILE = "workers.json"


def _remembered_ports(store_path: str) -> dict[str, int]:
    try:
        with open(os.path.join(store_path, PORTS_FILE)) as f:
            ports = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(ports, dict):
        return {}
    return {str(k): v for k, v in ports.items() if isinstance(v, int) and 0 < v < 65536}


def _remember_ports(store_path: str, workers: list[Worker]) -> None:
    ports = {f"kafka/{w.index}": w.kafka.getsockname()[1] for w in workers}
    ports |= {f"http/{w.index}": w.http.getsockname()[1] for w in workers if w.http}
    path = os.path.join(store_path, PORTS_FILE)
    try:
        with open(path + ".tmp", "w") as f:
            json.dump(ports, f)
        os.replace(path + ".tmp", path)
    except OSError as exc:  # the next start picks new ports: clients bootstrap again
        log.warning("cannot remember the workers' ports in %s: %s", path, exc)


def _bind_again(host: str, port: int | None) -> socket.socket:
    """The port a worker had at the last start, or a free one if it is taken now."""
    if port:
        try:
            return _bind(host, port)
        except OSError as exc:
            log.warning("port %d of the last start is taken (%s); a new one is used", port, exc)
    return _bind(host, 0)


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


class Supervisor:
    def __init__(self, args: argparse.Namespace, argv: Sequence[str], count: int) -> None:
        self.args = args
        self.argv = list(argv)
        self.count = count
        # Set by the signal handler: a plain flag, since the handler runs on the main thread
        # and an Event's lock may be held there (Event.wait) when the signal arrives.
        self._stopping = False
        self._workers: list[Worker] = []
        self._shared: dict[str, socket.socket] = {}
        self._server: BackendServer | None = None
        self._run_dir = ""
        self._metrics = workers_metrics.WorkersCollector(self._metrics_targets)

    def run(self) -> int:
        args = self.args
        if not args.store.startswith("leveldb:"):
            log.error(
                "--workers %d needs a leveldb:// store (%s): a store other processes share "
                "already runs one gateway per core with --cluster instead",
                self.count,
                args.store,
            )
            return 2
        if args.cluster:
            log.error("--workers runs its own cluster on one machine; leave out --cluster")
            return 2
        try:
            backend = open_backend(
                args.store, disk_reserve_bytes=max(0, args.disk_reserve_mb) << 20
            )
        except StorageError as exc:
            log.error("cannot open store %s: %s", args.store, exc)
            return 1
        try:
            return self._serve(backend)
        finally:
            if self._server is not None:
                self._server.close()
            backend.close()
            for sock in self._shared.values():
                sock.close()
            for worker in self._workers:
                worker.kafka.close()
                if worker.http is not None:
                    worker.http.close()
            if self._run_dir:
                shutil.rmtree(self._run_dir, ignore_errors=True)

    def _serve(self, backend: Backend) -> int:
        args = self.args
        store_path = backend.path or ""
        self._run_dir = _run_dir(store_path)
        socket_path = os.path.join(self._run_dir, "store.sock")
        self._server = BackendServer(backend, socket_path, store_path)
        # We hold the store's lock, so whoever holds a lease in it is dead (the workers of
        # a parent killed before us): their partitions are free now, not after the lease.
        released = self._release_leases(None, None)
        if released:
            log.info("released %d leases of an earlier run's workers", released)
        self._store_url = f"served://{socket_path}"
        kafka_host, kafka_port = _address(args.kafka_listen)
        http_host, http_port = _address(args.http_listen)
        try:
            self._shared["kafka"] = _bind(kafka_host, kafka_port)
            if not args.no_http:  # else the workers' own listeners only, for their calls
                self._shared["http"] = _bind(http_host, http_port)
            ports = _remembered_ports(store_path)
            for index in range(self.count):
                self._workers.append(
                    Worker(
                        index,
                        args.node_id + index,
                        _bind_again(kafka_host, ports.get(f"kafka/{index}")),
                        _bind_again(http_host, ports.get(f"http/{index}")),
                    )
                )
            _remember_ports(store_path, self._workers)
        except OSError as exc:
            log.error("cannot listen: %s (--kafka-listen / --http-listen)", exc)
            return 1
        if args.metrics_listen:
            metrics_host, metrics_port = _address(args.metrics_listen)
            try:
                workers_metrics.serve(metrics_host, metrics_port, self._metrics)
            except OSError as exc:
                log.error("cannot listen: %s (--metrics-listen)", exc)
                return 1
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        for worker in self._workers:
            self._start(worker)
        shared_http = self._shared.get("http")
        http_at = "" if shared_http is None else f"{http_host}:{shared_http.getsockname()[1]}"
        log.info(
            "tmsgate: %d workers (pids %s) over store %s; Kafka clients bootstrap at %s:%d%s",
            self.count,
            ", ".join(str(w.process.pid) for w in self._workers if w.process),
            args.store,
            kafka_host,
            self._shared["kafka"].getsockname()[1],
            f", HTTP API at {http_at}" if http_at else "",
        )
        while not self._stopping:
            time.sleep(0.2)
            for worker in self._workers:
                assert worker.process is not None
                rc = worker.process.poll()
                if rc is None:
                    continue
                failed = self._ended(worker, rc)
                if failed is not None:
                    self._stop_all()
                    return failed
        self._stop_all()
        return 0

    def _on_signal(self, signum: int, frame: object) -> None:
        self._stopping = True

    def _command(self, worker: Worker) -> list[str]:
        args = self.args
        adv_host = args.kafka_advertised.rpartition(":")[0] if args.kafka_advertised else ""
        host = adv_host or _address(args.kafka_listen)[0]
        if host in ("", "0.0.0.0", "::"):
            host = socket.getfqdn()
        scheme = "https" if args.http_tls_cert else "http"
        http_host = _address(args.http_listen)[0]
        if http_host in ("", "0.0.0.0", "::"):
            http_host = host
        assert worker.http is not None
        command = [
            sys.executable,
            "-m",
            "tmsgate.gateway.cli",
            *self.argv,
            "--workers",
            "1",
            "--cluster",
            "--node-id",
            str(worker.node_id),
            "--store",
            self._store_url,
            "--kafka-advertised",
            f"{host}:{worker.kafka.getsockname()[1]}",
            "--http-advertised",
            f"{scheme}://{http_host}:{worker.http.getsockname()[1]}",
        ]
        if args.metrics_listen:
            metrics_host, metrics_port = _address(args.metrics_listen)
            port = workers_metrics.worker_metrics_port(metrics_port, worker.index)
            command += ["--metrics-listen", f"{metrics_host}:{port}"]
        return command

    def _metrics_targets(self) -> list[tuple[int, str]]:
        """Each worker's own metrics URL, for the parent's scrape."""
        host, port = _address(self.args.metrics_listen)
        if host in ("", "0.0.0.0"):
            host = "127.0.0.1"
        elif host == "::":
            host = "::1"
        if ":" in host:
            host = f"[{host}]"
        return [
            (w.index, f"http://{host}:{workers_metrics.worker_metrics_port(port, w.index)}/metrics")
            for w in self._workers
        ]

    def _start(self, worker: Worker) -> None:
        assert worker.http is not None
        kafka = (worker.kafka, self._shared["kafka"])
        http = (worker.http, *([self._shared["http"]] if "http" in self._shared else []))
        env = dict(os.environ)
        env[INHERITED] = "kafka={} http={}".format(
            ",".join(str(s.fileno()) for s in kafka), ",".join(str(s.fileno()) for s in http)
        )
        env[PARENT] = str(os.getpid())
        env.pop("TMSGATE_WORKERS", None)
        worker.process = subprocess.Popen(
            self._command(worker), env=env, pass_fds=[s.fileno() for s in (*kafka, *http)]
        )
        worker.started = time.monotonic()
        log.info(
            "worker %d (node %d) started: pid %d", worker.index, worker.node_id, worker.process.pid
        )

    def _ended(self, worker: Worker, rc: int) -> int | None:
        """A worker exited on its own: settle what it held and start it again; the exit
        code to stop with if it keeps failing at start."""
        assert worker.process is not None and self._server is not None
        pid = worker.process.pid
        log.warning(
            "worker %d (node %d, pid %d) exited with %s; releasing what it held and "
            "starting it again",
            worker.index,
            worker.node_id,
            pid,
            f"signal {-rc}" if rc < 0 else f"code {rc}",
        )
        # Nothing it sent is still being written once its connections are gone: then its
        # leases can go (cluster.py's fencing needs no lease time for a process known dead).
        self._server.disconnect(pid)
        released = self._release_leases(worker.node_id, pid)
        log.info("worker %d: %d leases released", worker.index, released)
        if time.monotonic() - worker.started < QUICK_EXIT_S:
            worker.quick_exits += 1
            if worker.quick_exits >= QUICK_EXITS or rc == 2:
                log.error("worker %d keeps exiting at start (code %s); stopping", worker.index, rc)
                return rc if rc > 0 else 1
        else:
            worker.quick_exits = 0
        self._metrics.restarted(worker.index)
        self._start(worker)
        return None

    def _release_leases(self, node_id: int | None, pid: int | None) -> int:
        """Release the held leases of ``node_id`` run as ``pid`` (None: of everyone)."""
        assert self._server is not None
        table = LeaseTable(self._server.backend)
        now = wall_clock_ms()
        released = 0
        for lease in table.all():
            node = node_of(lease.holder)
            if node is None or not lease.held_at(now):
                continue  # a counter or a shared value, or not held
            if node_id is not None and node.node_id != node_id:
                continue
            if pid is not None and not lease.holder.rsplit(" ", 1)[-1].startswith(f"{pid}."):
                continue  # its next run's already
            if table.release(lease):
                released += 1
        return released

    def _stop_all(self) -> None:
        running = [w.process for w in self._workers if w.process and w.process.poll() is None]
        for process in running:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_AFTER_S
        for process in running:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("worker pid %d did not stop; killing it", process.pid)
                process.kill()
                process.wait()
        log.info("workers stopped; closing the store")


def supervise(args: argparse.Namespace, argv: Sequence[str]) -> int:
    return Supervisor(args, argv, args.workers).run()
