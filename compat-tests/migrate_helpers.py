"""Helpers for test_migrate.py: `tmsgate serve` and `tmsgate migrate` subprocesses, and
what the tests read and write through real clients (confluent-kafka, kafka-python) and the
HTTP transaction API. Nothing here imports tmsgate: everything goes over sockets.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import httpx
from compat_helpers import ADMIN_TIMEOUT_S, PRODUCE_TIMEOUT_S, free_port, port_open, wait_until

TMSGATE = Path(sys.executable).parent / "tmsgate"  # the venv's console script
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0
MIGRATE_TIMEOUT_S = 90.0
TX_HEADER = "tms.tx.write_pointer"


def _env() -> dict[str, str]:
    # TMSGATE_* settings of the caller must not configure the processes under test.
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMSGATE_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Server:
    """`tmsgate serve` on 127.0.0.1 over a LevelDB store directory, its output in a log file;
    with ``http`` the TMS HTTP API (transactions) listens too."""

    def __init__(self, workdir: Path, http: bool = False) -> None:
        self.workdir = workdir
        self.store_dir = workdir / "store"
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "gateway.log"
        self.port = free_port()
        self.http_port = free_port() if http else None
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def store_url(self) -> str:
        return f"leveldb://{self.store_dir}"

    @property
    def http_url(self) -> str:
        assert self.http_port is not None
        return f"http://127.0.0.1:{self.http_port}"

    def command(self) -> list[str]:
        cmd = [str(TMSGATE), "serve", "--store", self.store_url, "--kafka-listen", self.bootstrap]
        if self.http_port is None:
            return [*cmd, "--no-http"]
        return [*cmd, "--http-listen", f"127.0.0.1:{self.http_port}"]

    def start(self) -> Server:
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start: {shlex.join(self.command())}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_env(),
                cwd=str(self.workdir),
                start_new_session=True,
            )
        ports = [self.port] + ([self.http_port] if self.http_port else [])

        def listening() -> bool:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError("tmsgate serve exited")
            return all(port_open("127.0.0.1", p) for p in ports)

        try:
            wait_until(listening, START_TIMEOUT_S, "tmsgate serve to listen", interval=0.05)
        except AssertionError:
            self.stop()
            raise RuntimeError(f"tmsgate serve did not start:\n{self.log_tail()}") from None
        return self

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=STOP_TIMEOUT_S)
        self.proc = None

    def crash_restart(self) -> None:
        """SIGKILL (no clean shutdown), then start again on the same store and ports."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=STOP_TIMEOUT_S)
            self.proc = None
        with open(self.log_path, "ab") as log:
            log.write(b"\n===== SIGKILL\n")
        self.start()

    def log_tail(self, max_lines: int = 80) -> str:
        try:
            lines = self.log_path.read_text("utf-8", "replace").splitlines()
        except OSError:
            return "<no log>"
        return "\n".join(lines[-max_lines:])


# --------------------------------------------------------------------------- tmsgate migrate


@dataclass
class Run:
    args: list[str]
    rc: int
    out: str
    err: str

    def __str__(self) -> str:
        return (
            f"tmsgate migrate {shlex.join(self.args)} exited {self.rc}\n"
            f"--- stdout ---\n{self.out[-6000:]}\n--- stderr ---\n{self.err[-6000:]}"
        )

    @property
    def copied(self) -> int:
        """Records the run wrote, from its summary line."""
        m = re.search(r"^copied (\d+) records", self.out, re.M)
        assert m, f"no summary line\n{self}"
        return int(m.group(1))

    def verify_rows(self) -> dict[str, str]:
        """partition -> the last column of --verify's table (ok / DIFFERENT)."""
        rows = {}
        for line in self.out.splitlines():
            cells = [c.strip() for c in line.strip().strip("│|").split("│")]
            if len(cells) == 6 and cells[5] in ("ok", "DIFFERENT"):
                rows[cells[0]] = cells[5]
        return rows


class Migration:
    """`tmsgate migrate ...` as a background process (stdout and stderr to files)."""

    def __init__(self, workdir: Path, args: list[str], cwd: Path | None = None) -> None:
        self.args = args
        workdir.mkdir(parents=True, exist_ok=True)
        n = len(list(workdir.glob("migrate-*.out")))
        self.out_path = workdir / f"migrate-{n}.out"
        self.err_path = workdir / f"migrate-{n}.err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                [str(TMSGATE), "migrate", *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=_env(),
                start_new_session=True,
                cwd=cwd,
            )

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def running(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout: float = MIGRATE_TIMEOUT_S) -> Run:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"not finished within {timeout} s\n{self.result()}") from None
        return self.result()

    def result(self) -> Run:
        rc = self.proc.returncode if self.proc.returncode is not None else -999
        return Run(
            self.args,
            rc,
            self.out_path.read_text("utf-8", "replace"),
            self.err_path.read_text("utf-8", "replace"),
        )

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def listening_ports(pid: int) -> list[int]:
    """The TCP ports a process listens on (Linux /proc): how a test finds the gateway
    `migrate --store` runs inside itself on a loopback port."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                link = os.readlink(fd)
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
    ports = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in list(f)[1:]:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:  # LISTEN
                    ports.append(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


def migrate(
    workdir: Path, *args: str, timeout: float = MIGRATE_TIMEOUT_S, cwd: Path | None = None
) -> Run:
    """Run `tmsgate migrate ARGS` to its end (in directory ``cwd``: default this one)."""
    return Migration(workdir, list(args), cwd).wait(timeout)


# --------------------------------------------------------------------------- Kafka clients


@dataclass(frozen=True)
class Record:
    """A record as a consumer sees it (headers as a tuple, timestamp CreateTime ms)."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int


def create_topic(bootstrap: str, name: str, partitions: int, configs: dict | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(name, num_partitions=partitions, replication_factor=1, config=configs or {})
    admin.create_topics([topic])[name].result(ADMIN_TIMEOUT_S)


def topics(bootstrap: str) -> dict[str, int]:
    """Topic -> partition count (Metadata)."""
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=ADMIN_TIMEOUT_S)
    return {t: len(m.partitions) for t, m in md.topics.items() if not t.startswith("__")}


def describe_configs(bootstrap: str, topic: str) -> dict[str, str | None]:
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource("topic", topic)
    entries = admin.describe_configs([res])[res].result(ADMIN_TIMEOUT_S)
    return {name: e.value for name, e in entries.items()}


def alter_configs(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    """AlterConfigs (the topic's whole set)."""
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource("topic", topic, set_config=configs)
    admin.alter_configs([res])[res].result(ADMIN_TIMEOUT_S)


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[int, bytes | None, bytes | None, list, int | None]],
    client_id: str = "compat-migrate-producer",
    **config,
) -> list[tuple[int, int]]:
    """(partition, key, value, headers, timestamp or None) -> [(partition, offset)] in
    order; any refused record fails."""
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1 << 20,
            "message.timeout.ms": int(PRODUCE_TIMEOUT_S * 1000),
            **config,
        }
    )
    done: list = []
    errors: list = []

    def report(err, msg):
        if err is not None:
            errors.append(err)
        else:
            done.append((msg.partition(), msg.offset()))

    for partition, key, value, headers, ts in records:
        kwargs = {"partition": partition, "key": key, "value": value, "headers": headers}
        if ts is not None:
            kwargs["timestamp"] = ts
        while True:
            try:
                p.produce(topic, on_delivery=report, **kwargs)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    left = p.flush(PRODUCE_TIMEOUT_S)
    assert left == 0 and not errors, f"produce to {topic}: {left} undelivered, errors {errors[:3]}"
    return done


def produce_error(bootstrap: str, topic: str, partition: int = 0):
    """Produce one record with an ordinary producer: -> (KafkaError or None, offset)."""
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": "compat-migrate-ordinary",
            "message.timeout.ms": int(PRODUCE_TIMEOUT_S * 1000),
            "enable.idempotence": False,
            "retries": 0,
        }
    )
    got: list = []
    p.produce(
        topic,
        key=b"ordinary",
        value=b"ordinary",
        partition=partition,
        on_delivery=lambda err, msg: got.append((err, msg.offset())),
    )
    assert p.flush(PRODUCE_TIMEOUT_S) == 0 and got, "no delivery report"
    return got[0]


class Offsets:
    """ListOffsets through one kafka-python consumer kept open (read_committed: latest is
    the last stable offset), for polling."""

    def __init__(self, bootstrap: str) -> None:
        from kafka import KafkaConsumer

        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            isolation_level="read_committed",
            enable_auto_commit=False,
            request_timeout_ms=int(ADMIN_TIMEOUT_S * 1000) + 1000,
        )

    def __call__(self, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
        """partition -> (earliest, latest)."""
        from kafka import TopicPartition

        tps = [TopicPartition(topic, p) for p in range(partitions)]
        lo, hi = self.consumer.beginning_offsets(tps), self.consumer.end_offsets(tps)
        return {tp.partition: (lo[tp], hi[tp]) for tp in tps}

    def latest(self, topic: str, partitions: int) -> dict[int, int]:
        return {p: hi for p, (_, hi) in self(topic, partitions).items()}

    def close(self) -> None:
        self.consumer.close()


def offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    """partition -> (earliest, latest) by ListOffsets (read_committed)."""
    o = Offsets(bootstrap)
    try:
        return o(topic, partitions)
    finally:
        o.close()


def read_all(
    bootstrap: str,
    topic: str,
    partitions: int,
    isolation: str = "read_committed",
    timeout: float = 60.0,
) -> list[Record]:
    """Every record of the topic from each partition's start to its end (the end as listed
    when reading starts), in partition then offset order (confluent-kafka, assign)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    ends = {p: hi for p, (_, hi) in offsets(bootstrap, topic, partitions).items()}
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "compat-migrate-reader",  # required by librdkafka; never joined
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "fetch.max.bytes": 64 << 20,
            "max.partition.fetch.bytes": 16 << 20,
        }
    )
    out: dict[int, list[Record]] = {p: [] for p in range(partitions)}
    try:
        todo = {p for p in range(partitions) if ends[p] > 0}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in todo])
        deadline = time.monotonic() + timeout
        while todo:
            assert time.monotonic() < deadline, (
                f"reading {topic} from {bootstrap}: partitions {sorted(todo)} not at their ends "
                f"{ends} after {timeout} s (got {[len(v) for v in out.values()]})"
            )
            for m in c.consume(10_000, timeout=0.2):
                assert m.error() is None, f"consume {topic}: {m.error()}"
                if m.offset() < ends[m.partition()]:
                    out[m.partition()].append(
                        Record(
                            m.partition(),
                            m.offset(),
                            m.key(),
                            m.value(),
                            tuple(m.headers() or ()),
                            m.timestamp()[1],
                        )
                    )
            for p in list(todo):
                pos = c.position([TopicPartition(topic, p)])[0].offset
                if pos >= ends[p]:
                    todo.discard(p)
    finally:
        c.close()
    return [r for p in range(partitions) for r in out[p]]


def committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """OffsetFetch of every partition the group has an offset for."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    got = fut.result(ADMIN_TIMEOUT_S).topic_partitions or []
    return {(tp.topic, tp.partition): tp.offset for tp in got if tp.offset >= 0}


def commit_offsets(bootstrap: str, group: str, offsets_: dict[tuple[str, int], int]) -> None:
    """Commit offsets for a group without members (a standalone consumer's commit)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(
            offsets=[TopicPartition(t, p, o) for (t, p), o in offsets_.items()], asynchronous=False
        )
    finally:
        c.close()


def group_consumer(bootstrap: str, group: str, topic: str, **config):
    """A confluent-kafka consumer subscribed to ``topic`` in ``group`` (read_committed, no
    auto commit, from the earliest offset when the group has none)."""
    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": f"compat-migrate-{group}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            **config,
        }
    )
    c.subscribe([topic])
    return c


def consume_n(consumer, n: int, timeout: float = 30.0) -> list[Record]:
    """Exactly the next ``n`` records of a group consumer (it may deliver more in the last
    poll: those are not taken, and not committed, by the caller)."""
    from confluent_kafka import KafkaError

    got: list[Record] = []
    deadline = time.monotonic() + timeout
    while len(got) < n:
        assert time.monotonic() < deadline, f"only {len(got)} of {n} records in {timeout} s"
        m = consumer.poll(0.2)
        if m is None:
            continue
        if m.error() is not None:
            assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
            continue
        got.append(
            Record(
                m.partition(),
                m.offset(),
                m.key(),
                m.value(),
                tuple(m.headers() or ()),
                m.timestamp()[1],
            )
        )
    return got


def commit_consumed(consumer, records: list[Record], topic: str) -> dict[tuple[str, int], int]:
    """Commit (synchronously) the offset after the last of ``records`` in each partition."""
    from confluent_kafka import TopicPartition

    nxt: dict[int, int] = {}
    for r in records:
        nxt[r.partition] = max(nxt.get(r.partition, 0), r.offset + 1)
    consumer.commit(
        offsets=[TopicPartition(topic, p, o) for p, o in nxt.items()], asynchronous=False
    )
    return {(topic, p): o for p, o in nxt.items()}


def group_members(bootstrap: str, group: str) -> int:
    """How many members the group has (DescribeGroups)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    desc = admin.describe_consumer_groups([group])[group].result(ADMIN_TIMEOUT_S)
    return len(desc.members)


def wait_for_offsets(bootstrap: str, topic: str, want: dict[int, int], timeout: float = 60.0):
    """Poll ListOffsets until every partition's latest offset is ``want``'s."""
    o = Offsets(bootstrap)
    try:
        wait_until(
            lambda: o.latest(topic, len(want)) == want,
            timeout,
            f"{topic} on {bootstrap} to reach offsets {want}",
            0.05,
        )
    finally:
        o.close()


# --------------------------------------------------------------------------- HTTP transactions


class Http:
    """The TMS HTTP API of a gateway: transactions, transactional publish, rollback."""

    def __init__(self, url: str) -> None:
        self.client = httpx.Client(base_url=url, timeout=ADMIN_TIMEOUT_S)

    def close(self) -> None:
        self.client.close()

    def start_tx(self, timeout_s: int = 60) -> int:
        r = self.client.post("/v1/transactions", json={"timeoutSeconds": timeout_s})
        assert r.status_code == 200, r.text
        # Write pointers exceed 2^53: cut the number out of the text (docs/http-api.md).
        return int(re.search(r'"writePointer":\s*(\d+)', r.text).group(1))

    def publish(self, topic: str, wp: int, messages: list[str]) -> bytes:
        """A transactional publish to partition 0 of ``topic``: -> its PublishResponse."""
        r = self.client.post(
            f"/v1/namespaces/default/topics/{topic}/publish",
            json={"transactionWritePointer": wp, "messages": messages},
        )
        assert r.status_code == 200, r.text
        return r.content

    def rollback(self, topic: str, publish_response: bytes) -> int:
        r = self.client.post(
            f"/v1/namespaces/default/topics/{topic}/rollback",
            content=publish_response,
            headers={"Content-Type": "application/json"},
        )
        assert r.status_code == 200, r.text
        return int(r.json()["rolledBack"])

    def end(self, wp: int, how: str) -> None:
        r = self.client.post(f"/v1/transactions/{wp}/{how}")
        assert r.status_code == 200, r.text


def wp_header(wp: int) -> tuple[str, bytes]:
    return (TX_HEADER, struct.pack(">q", wp))


@contextlib.contextmanager
def http_client(url: str):
    h = Http(url)
    try:
        yield h
    finally:
        h.close()


def kafka_python_produce(bootstrap: str, topic: str, partition: int = 0):
    """Produce one record with kafka-python: -> the exception it raised, or the offset."""
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, retries=0, enable_idempotence=False)
    try:
        return p.send(topic, b"kafka-python", partition=partition).get(PRODUCE_TIMEOUT_S).offset
    except Exception as exc:
        return exc
    finally:
        p.close()


def offsets_for_times(bootstrap: str, topic: str, partition: int, times: list[int]) -> list:
    """ListOffsets by timestamp: -> (offset, timestamp) or None for each time."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(
        bootstrap_servers=bootstrap, request_timeout_ms=int(ADMIN_TIMEOUT_S * 1000) + 1000
    )
    try:
        tp = TopicPartition(topic, partition)
        out = []
        for ts in times:
            got = c.offsets_for_times({tp: ts})[tp]
            out.append(None if got is None else (got.offset, got.timestamp))
        return out
    finally:
        c.close()
