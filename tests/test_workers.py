"""``tmsgate serve --workers 2`` (gateway/workers.py), run as operators run it: the real
CLI as a subprocess over LevelDB in tmp, with confluent-kafka and HTTP clients.

One gateway serves the module (its start costs seconds); the tests run in file order and
the last ones kill it: first one worker (the parent starts another), then the parent (the
workers die with it; a new ``serve`` on the same store finds every acknowledged record).
Topics are named so that their 4 partitions are led by both workers (rendezvous hashing
over the node ids 0 and 1, gateway/cluster.py), so produce, fetch and transactions cross
the two processes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from gateway_harness import free_port
from prometheus_client.parser import text_string_to_metric_families
from tmsgate.gateway.cluster import rendezvous
from tmsgate.storage.ids import TopicId

PARTITIONS = 4
WORKERS = 2
START_TIMEOUT_S = 60.0
NAMESPACE = "default"
PUBLISHES = 32  # on new connections: either worker may take each (the kernel picks)


def serve_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "tmsgate.gateway.cli", "serve", *args]


def clean_env() -> dict[str, str]:
    """The command line is the whole configuration: no TMSGATE_* from the caller."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMSGATE_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def children_of(pid: int) -> set[int]:
    out: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            out.update(int(c) for c in (task / "children").read_text().split())
    return out


def alive(pid: int) -> bool:
    """Running (a zombie no one reaped yet counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def last_option(pid: int, name: str) -> str:
    """The value of the last ``name`` on a worker's command line (the parent appends its
    own after the operator's)."""
    args = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    return args[len(args) - 1 - args[::-1].index(name) + 1]


def node_id_of(pid: int) -> int:
    return int(last_option(pid, "--node-id"))


def split_topic(prefix: str) -> str:
    """A Kafka topic name whose partitions are led by both workers."""
    for i in range(1000):
        name = f"{prefix}-{i}"
        owners = {
            rendezvous(str(TopicId(NAMESPACE, name if p == 0 else f"{name}~{p}")), [0, 1])
            for p in range(PARTITIONS)
        }
        if owners == {0, 1}:
            return name
    raise AssertionError("no name splits")


def free_ports_in_a_row(n: int) -> int:
    """A port p with p .. p + n - 1 all free now."""
    for _ in range(200):
        first = free_port()
        with contextlib.ExitStack() as held:
            try:
                for port in range(first, first + n):
                    sock = held.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return first
    raise AssertionError(f"no {n} free ports in a row")


def scrape(url: str) -> dict[str, Any]:
    """The parent's /metrics, parsed: family name -> family."""
    text = httpx.get(url, timeout=10).text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in families:  # one HELP/TYPE per family: the workers' were merged, not pasted
        assert text.count(f"# TYPE {name} ") + text.count(f"# TYPE {name}_total ") <= 1, name
    return families


class WorkersGateway:
    """``tmsgate serve --workers 2`` over ``<workdir>/store``, restartable on the same store
    and ports; its output in ``<workdir>/serve.log``."""

    def __init__(self, workdir: Path, *extra: str, env: dict[str, str] | None = None) -> None:
        self.extra = extra  # more `serve` options (e.g. --no-http)
        self.env = env or {}  # more environment (a fault point: gateway/faults.py)
        self.workdir = workdir
        self.store_dir = workdir / "store"
        self.log_path = workdir / "serve.log"
        self.kafka_port = free_port()
        self.http_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.seen_children: set[int] = set()
        self.metrics_url = ""  # with --metrics-listen: the parent's scrape

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def start(self) -> WorkersGateway:
        command = serve_command(
            "--workers",
            str(WORKERS),
            "--store",
            f"leveldb://{self.store_dir}",
            "--kafka-listen",
            self.bootstrap,
            "--http-listen",
            f"127.0.0.1:{self.http_port}",
            *self.extra,
        )
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== test: start {' '.join(command)}\n".encode())
            self.proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**clean_env(), **self.env},
                start_new_session=True,
            )
        self.wait_ready()
        return self

    def children(self) -> set[int]:
        assert self.proc is not None
        pids = {pid for pid in children_of(self.proc.pid) if alive(pid)}
        self.seen_children |= pids
        return pids

    def wait_ready(self, not_these: set[int] = frozenset()) -> set[int]:  # type: ignore[assignment]
        """Wait for 2 live workers (none of ``not_these``), Metadata naming 2 brokers and
        the HTTP API answering on the shared port. -> the workers' pids."""
        assert self.proc is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert self.proc.poll() is None, f"serve exited\n{self.log_tail()}"
            pids = self.children()
            if len(pids) == WORKERS and not pids & not_these and self._serving():
                return pids
            assert time.monotonic() < deadline, f"not ready: workers {pids}\n{self.log_tail()}"
            time.sleep(0.2)

    def _serving(self) -> bool:
        """Every worker Metadata names answers at its address, naming both (a worker's
        view of the others lags by up to a lease tick), and HTTP answers."""
        try:
            found = brokers(self.bootstrap)
            if sorted(found) != list(range(WORKERS)):
                return False
            for broker in found.values():
                if sorted(brokers(f"{broker.host}:{broker.port}")) != list(range(WORKERS)):
                    return False
            if "--no-http" in self.extra:
                return True
            return httpx.get(f"{self.http_url}/readyz", timeout=5).status_code == 200
        except (httpx.HTTPError, RuntimeError):
            return False

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(15)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.kill9()
        for pid in self.seen_children:  # ours: none may outlive the test
            if alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "<no log>"
        return "\n".join(text[-lines:])


# --- Kafka helpers -------------------------------------------------------------------------


def brokers(bootstrap: str) -> dict[int, Any]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        return dict(admin.list_topics(timeout=5).brokers)
    except Exception as exc:  # KafkaException while no worker answers yet
        raise RuntimeError(str(exc)) from exc


def create_topic(bootstrap: str, name: str) -> dict[int, int]:
    """Create a PARTITIONS-partition topic; -> its leaders once every partition has one."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, PARTITIONS, 1)]).values():
        future.result(30)
    return leaders(bootstrap, name)


def leaders(bootstrap: str, name: str, partitions: int = PARTITIONS) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 40
    while True:
        md = admin.list_topics(name, timeout=10)
        parts = md.topics[name].partitions
        found = {p: parts[p].leader for p in parts}
        if len(found) == partitions and all(v >= 0 for v in found.values()):
            return found
        assert time.monotonic() < deadline, f"partitions without a leader: {found}"
        time.sleep(0.2)


def read_all(bootstrap: str, topic: str) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of every partition, (offset, value) in the order fetched, up to each
    partition's high watermark as it is now."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 8 << 20,
        }
    )
    try:
        highs = {p: high_watermark(consumer, topic, p) for p in range(PARTITIONS)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
        position = dict.fromkeys(range(PARTITIONS), 0)
        deadline = time.monotonic() + 90
        while any(position[p] < highs[p] for p in highs):
            assert time.monotonic() < deadline, f"read {position} of {highs}"
            for m in consumer.consume(1000, 0.5):
                if m.error() is not None:
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                    continue
                out[m.partition()].append((m.offset(), m.value()))
                position[m.partition()] = m.offset() + 1
        return out
    finally:
        consumer.close()


def high_watermark(consumer: Consumer, topic: str, partition: int) -> int:
    """Asked again while leadership moves (a worker just started takes its partitions
    over from the other: NOT_LEADER_OR_FOLLOWER for a moment)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
        except KafkaException as exc:
            error = exc.args[0]
            if not error.retriable() and error.code() not in RETRY:
                raise
            assert time.monotonic() < deadline, f"{topic}[{partition}]: {error}"
            time.sleep(0.2)


RETRY = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError._UNKNOWN_PARTITION}


class Acks:
    """Delivery reports of a producer: what was acknowledged, what failed."""

    def __init__(self) -> None:
        self.acked: dict[bytes, tuple[int, int]] = {}  # value -> (partition, offset)
        self.failed: list[tuple[bytes, KafkaError]] = []
        self.fatal: list[KafkaError] = []
        self._lock = threading.Lock()

    def __call__(self, err: KafkaError | None, msg: Any) -> None:
        with self._lock:
            if err is None:
                self.acked[msg.value()] = (msg.partition(), msg.offset())
            else:
                self.failed.append((msg.value(), err))

    def on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self.fatal.append(err)


def idempotent_producer(bootstrap: str, acks: Acks) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 120_000,
            "error_cb": acks.on_error,
        }
    )


def produce(producer: Producer, topic: str, value: bytes, partition: int, acks: Acks) -> None:
    while True:
        try:
            producer.produce(topic, value, partition=partition, on_delivery=acks)
            return
        except BufferError:
            producer.poll(0.05)


def assert_acked_read_once(gw: WorkersGateway, topic: str, acks: Acks) -> None:
    """Every acknowledged record is in the topic exactly once, at its acknowledged place,
    and no record is there twice."""
    leaders(gw.bootstrap, topic)
    rows = read_all(gw.bootstrap, topic)
    where: dict[bytes, list[tuple[int, int]]] = {}
    for p, records in rows.items():
        for offset, value in records:
            where.setdefault(value, []).append((p, offset))
    twice = {v: at for v, at in where.items() if len(at) > 1}
    assert not twice, f"{len(twice)} records more than once, e.g. {next(iter(twice.items()))}"
    missing = [v for v in acks.acked if v not in where]
    assert not missing, f"{len(missing)} acknowledged records missing, e.g. {missing[:3]}"
    moved = {v: (at, where[v][0]) for v, at in acks.acked.items() if where[v][0] != at}
    assert not moved, f"records not where they were acknowledged: {list(moved.items())[:3]}"


# --- the gateway --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkersGateway]:
    metrics_port = free_ports_in_a_row(1 + WORKERS)  # the parent's, then each worker's
    gateway = WorkersGateway(
        tmp_path_factory.mktemp("workers"), "--metrics-listen", f"127.0.0.1:{metrics_port}"
    )
    gateway.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    try:
        yield gateway.start()
    finally:
        gateway.stop()


# What later tests check again after the parent died: topic -> acknowledged records.
ACKED: dict[str, Acks] = {}


def test_metadata_names_each_worker_and_leaders_are_spread(gw: WorkersGateway) -> None:
    found = brokers(gw.bootstrap)
    assert sorted(found) == [0, 1]
    assert len({(b.host, b.port) for b in found.values()}) == 2  # each its own address
    topic = split_topic("spread")
    assert set(create_topic(gw.bootstrap, topic).values()) == {0, 1}
    # Each worker is reachable at the address Metadata gives for it.
    for node, broker in found.items():
        alone = brokers(f"{broker.host}:{broker.port}")
        assert sorted(alone) == [0, 1], node


def test_idempotent_produce_is_read_back_once_in_order(gw: WorkersGateway) -> None:
    topic = split_topic("bulk")
    create_topic(gw.bootstrap, topic)
    acks = Acks()
    producer = idempotent_producer(gw.bootstrap, acks)
    sent: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for i in range(20_000):
        p = i % PARTITIONS
        value = b"bulk-%d-%06d" % (p, i)
        sent[p].append(value)
        produce(producer, topic, value, p, acks)
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    assert not acks.failed and not acks.fatal, (acks.failed[:3], acks.fatal)
    assert len(acks.acked) == 20_000
    rows = read_all(gw.bootstrap, topic)
    for p in range(PARTITIONS):
        assert [v for _, v in rows[p]] == sent[p], p  # each once, in the order sent
        assert [o for o, _ in rows[p]] == list(range(len(sent[p])))
    ACKED[topic] = acks


def test_transactions_across_both_workers(gw: WorkersGateway) -> None:
    """Transactions writing to partitions led by both workers: the committed ones read
    exactly once by a read_committed consumer, the aborted ones never."""
    topic = split_topic("txn")
    assert set(create_topic(gw.bootstrap, topic).values()) == {0, 1}
    producer = Producer(
        {
            "bootstrap.servers": gw.bootstrap,
            "transactional.id": f"workers-{uuid.uuid4().hex[:8]}",
            "acks": "all",
        }
    )
    producer.init_transactions(30)
    committed: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    aborted: set[bytes] = set()
    rounds = 7  # the last one commits: its records end every partition
    for k in range(rounds):
        commit = k % 2 == 0
        producer.begin_transaction()
        for p in range(PARTITIONS):
            for i in range(5):
                value = b"t%d-p%d-%d" % (k, p, i)
                producer.produce(topic, value, partition=p)
                if commit:
                    committed[p].append(value)
                else:
                    aborted.add(value)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(30)  # the records are in the log, then aborted
            producer.abort_transaction(30)
    consumer = Consumer(
        {
            "bootstrap.servers": gw.bootstrap,
            "group.id": f"txn-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    last = {p: committed[p][-1] for p in range(PARTITIONS)}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 60
        while any(not got[p] or got[p][-1] != last[p] for p in got):
            assert time.monotonic() < deadline, {p: len(v) for p, v in got.items()}
            for m in consumer.consume(500, 0.5):
                if m.error() is None:
                    got[m.partition()].append(m.value())
    finally:
        consumer.close()
    for p in range(PARTITIONS):
        assert not aborted & set(got[p]), p
        assert got[p] == committed[p], p


def test_http_api_on_the_shared_port(gw: WorkersGateway) -> None:
    """Publish and poll on the shared HTTP port, each request on a new connection (so
    either worker may take it): every publish is accepted, the poll sees them all."""
    topics = f"{gw.http_url}/v1/namespaces/{NAMESPACE}/topics"
    assert httpx.put(f"{topics}/web", timeout=30).status_code == 200
    leaders(gw.bootstrap, "web", partitions=1)  # a new topic has no leader for a moment
    refused: list[str] = []
    for i in range(PUBLISHES):
        r = publish_following_the_leader(topics, f"m{i}", refused)
        assert r.status_code == 200, r.text
    for _ in range(4):  # either worker answers a poll
        r = httpx.post(f"{topics}/web/poll?payload=utf-8", json={}, timeout=30)
        assert r.status_code == 200, r.text
        assert [m["payload"] for m in r.json()] == [f"m{i}" for i in range(PUBLISHES)]
    assert not refused, (
        f"{len(refused)} answers 421 to {PUBLISHES} publishes on the shared port, e.g. {refused[0]}"
    )


def publish_following_the_leader(topics: str, message: str, refused: list[str]) -> httpx.Response:
    """Publish on the shared port; a 421 (the other worker leads the topic) is noted in
    ``refused`` and the publish sent again to the leader it names (the worker that took
    the request may not know the leader yet for a lease tick: then again, later)."""
    deadline = time.monotonic() + 20
    url = f"{topics}/web/publish?payload=utf-8"
    while True:
        r = httpx.post(url, json={"messages": [message]}, timeout=30)
        if r.status_code != 421:
            return r
        refused.append(r.text)
        leader = r.json().get("leaderUrl")
        if leader:
            url = f"{leader}/v1/namespaces/{NAMESPACE}/topics/web/publish?payload=utf-8"
        assert time.monotonic() < deadline, r.text
        time.sleep(0 if leader else 0.2)


def test_one_scrape_has_every_workers_metrics(gw: WorkersGateway) -> None:
    """The parent's --metrics-listen gives every worker's metrics, labelled by worker,
    in one exposition, with whether each answered."""
    topic = split_topic("metrics")
    create_topic(gw.bootstrap, topic)
    acks = Acks()
    producer = idempotent_producer(gw.bootstrap, acks)
    for i in range(40):
        produce(producer, topic, b"metrics-%02d" % i, i % PARTITIONS, acks)
    assert producer.flush(60) == 0 and not acks.failed
    families = scrape(gw.metrics_url)
    up = {s.labels["worker"]: s.value for s in families["tmsgate_worker_up"].samples}
    assert up == {"0": 1.0, "1": 1.0}
    produced_on = {
        s.labels["worker"]
        for s in families["tmsgate_kafka_requests"].samples
        if s.labels["api"].lower() == "produce" and s.value > 0
    }
    assert produced_on == {"0", "1"}  # both lead partitions of the topic
    restarts = {s.labels["worker"]: s.value for s in families["tmsgate_worker_restarts"].samples}
    assert restarts == {"0": 0.0, "1": 0.0}


def test_a_killed_worker_loses_no_acknowledged_record(gw: WorkersGateway) -> None:
    topic = split_topic("kill")
    create_topic(gw.bootstrap, topic)
    before = gw.children()
    victim = next(pid for pid in before if node_id_of(pid) == 0)  # the controller, too
    acks = Acks()
    producer = idempotent_producer(gw.bootstrap, acks)
    # Rounds of 100 records, each sent once the one before it was acknowledged, until
    # 1500 are; then the kill, and 40 rounds more without waiting: sent across the death
    # of the worker and its restart.
    sent = 0
    while len(acks.acked) < 1500:
        for _ in range(100):
            produce(producer, topic, b"kill-%06d" % sent, sent % PARTITIONS, acks)
            sent += 1
        assert producer.flush(60) == 0
    os.kill(victim, signal.SIGKILL)
    for _ in range(40):
        for _ in range(100):
            produce(producer, topic, b"kill-%06d" % sent, sent % PARTITIONS, acks)
            sent += 1
        producer.poll(0.05)
    assert producer.flush(150) == 0
    assert not acks.fatal, acks.fatal
    assert not acks.failed, f"{len(acks.failed)} not delivered, e.g. {acks.failed[:3]}"
    after = gw.wait_ready(not_these={victim})
    assert victim not in after and len(after) == WORKERS
    assert victim in before - after
    assert sorted(brokers(gw.bootstrap)) == [0, 1]
    assert len(acks.acked) > 1500
    assert_acked_read_once(gw, topic, acks)
    ACKED[topic] = acks
    restarts = scrape(gw.metrics_url)["tmsgate_worker_restarts"].samples
    assert {s.labels["worker"]: s.value for s in restarts} == {"0": 1.0, "1": 0.0}


def test_a_killed_parent_takes_the_workers_and_a_restart_has_every_record(
    gw: WorkersGateway,
) -> None:
    workers = gw.children()
    assert len(workers) == WORKERS
    socket_path = last_option(next(iter(workers)), "--store").removeprefix("served://")
    gw.kill9()
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in workers):
        assert time.monotonic() < deadline, f"workers outlived their parent: {workers}"
        time.sleep(0.1)
    # A killed parent leaves its socket's directory behind; it is ours to remove.
    shutil.rmtree(os.path.dirname(socket_path), ignore_errors=True)
    gw.start()
    assert ACKED, "no earlier test left records to look for"
    for topic, acks in ACKED.items():
        assert_acked_read_once(gw, topic, acks)


# --- options it refuses ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workers", "0"], "--workers"),
        (["--workers", "2", "--store", "memory://x"], "leveldb"),
        (["--workers", "2", "--cluster"], "--cluster"),
    ],
    ids=["zero", "memory-store", "cluster"],
)
def test_bad_options_exit_2_saying_why(tmp_path: Path, args: list[str], message: str) -> None:
    command = serve_command(
        "--store",
        f"leveldb://{tmp_path / 'store'}",
        "--kafka-listen",
        f"127.0.0.1:{free_port()}",
        "--http-listen",
        f"127.0.0.1:{free_port()}",
        *args,
    )
    done = subprocess.run(command, capture_output=True, text=True, env=clean_env(), timeout=60)
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert message in done.stderr, done.stderr[-2000:]


def test_without_the_http_api_the_workers_still_serve_kafka(tmp_path: Path) -> None:
    """--no-http: no public HTTP API, yet each worker listens on its own port for the
    others' calls, so a transaction across both still commits."""
    gw = WorkersGateway(tmp_path, "--no-http")
    try:
        gw.start()
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"{gw.http_url}/readyz", timeout=2)
        topic = split_topic("nohttp")
        create_topic(gw.bootstrap, topic)
        producer = Producer(
            {"bootstrap.servers": gw.bootstrap, "transactional.id": f"nohttp-{uuid.uuid4()}"}
        )
        producer.init_transactions(30)
        producer.begin_transaction()
        for i in range(40):
            producer.produce(topic, b"nohttp-%02d" % i, partition=i % PARTITIONS)
        producer.commit_transaction(30)
        rows = read_all(gw.bootstrap, topic)
        assert sorted(v for part in rows.values() for _, v in part) == [
            b"nohttp-%02d" % i for i in range(40)
        ]
    finally:
        gw.stop()
