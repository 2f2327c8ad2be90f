"""Kafka client benchmark: real clients (confluent-kafka, kafka-python, aiokafka) against a broker.

    .venv/bin/python bench/kafka_clients_bench.py [--bootstrap host:port] [--runs 3] [--quick]

Without --bootstrap it starts its own `tmsgate serve` on a temporary LevelDB directory
and a free port, and stops it at the end; with --bootstrap the same run measures any
Kafka broker (a real Apache Kafka, another gateway), so figures can be set side by side.

Measured, each the median of --runs runs, 1 KiB values, one partition, a fresh topic
per measurement (created with confluent-kafka's AdminClient, 1 partition, RF 1):

  produce   msgs/s with acks=all: confluent-kafka (linger.ms=5, batch.size=1000000),
            kafka-python (batch_size=1 MiB, linger_ms=5), aiokafka (max_batch_size=1 MiB,
            linger_ms=5, bounded number of sends in flight). Timed from the first send
            to the last acknowledgement; every delivery report is checked.
  consume   msgs/s from the earliest offset, assign() + seek to the beginning, no group
            commits; each client reads back the topic it produced in the same run.
            confluent-kafka runs with fetch.queue.backoff.ms=10 (default 1000), so a full
            client queue is not counted as a second of broker time.
  latency   end-to-end p50/p99: a confluent-kafka producer (linger.ms=0, acks=all) sends
            perf_counter_ns() stamps at a steady rate; a confluent-kafka consumer
            (fetch.min.bytes=1, fetch.wait.max.ms=100) assigned at the log end offset
            records receive - send. A fetch that is not woken by a publish sleeps the full
            fetch.wait.max.ms, so `slow_share` (samples >= 90% of it) shows missing wakeups
            (or, on a loaded machine, plain stalls: read it with `histogram_ms`). librdkafka
            statistics give Fetch requests/s and fetch RTT while the partition is idle
            (`idle_fetch`: a long-polling broker shows ~10/s at ~100 ms) and under load
            (`timed_fetch`), so the wakeup path is seen to be exercised, not assumed.

Progress goes to stderr, one JSON summary to stdout. Each figure carries the client's
own ceiling on this machine (docs: /work/shared/design/peers-and-ceilings.md).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import logging
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import aiokafka
import confluent_kafka
import kafka
from confluent_kafka.admin import AdminClient, NewTopic

VENV_BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parent.parent
# The Java programs of bench/java/ and the kafka-clients jars of the Java compat tests.
JAVA_CP = f"{REPO}/bench/java/build:{REPO}/compat-tests/java/lib/*"
VALUE_BYTES = 1024
MIB = 1 << 20
STALL_S = 30.0  # no progress for this long is a failure, not a slow result

# Client ceilings measured on this machine (peers-and-ceilings.md). None: not measured.
CEILINGS: dict[tuple[str, str], str | None] = {
    ("produce", "confluent_kafka"): "552k msgs/s (vs a broker that acks without storing)",
    ("produce", "kafka_python"): "16.6k msgs/s defaults / 55k msgs/s 1 MiB batches",
    ("produce", "aiokafka"): "58k msgs/s defaults / 168k msgs/s 1 MiB batches",
    ("consume", "confluent_kafka"): None,
    ("consume", "kafka_python"): None,
    ("consume", "aiokafka"): None,
    ("latency", "confluent_kafka"): None,
}


@dataclass(frozen=True, slots=True)
class Counts:
    confluent_kafka: int
    kafka_python: int
    aiokafka: int
    latency_rate: int
    latency_seconds: float
    aiokafka_in_flight: int


FULL = Counts(200_000, 50_000, 100_000, 2_000, 10.0, 20_000)
QUICK = Counts(20_000, 5_000, 10_000, 2_000, 3.0, 5_000)


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def ceiling_text(kind: str, client: str) -> str:
    c = CEILINGS.get((kind, client))
    return f"ceiling {c}" if c else "no ceiling measured"


# --------------------------------------------------------------------------- warnings


class WarningCounter(logging.Handler):
    """Counts WARNING+ log records (client libraries, py.warnings) per logger."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts: collections.Counter[str] = collections.Counter()
        self.samples: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[record.name] += 1
        if len(self.samples) < 20:
            self.samples.append(f"{record.levelname} {record.name}: {record.getMessage()}"[:300])


def setup_logging() -> WarningCounter:
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.captureWarnings(True)
    counter = WarningCounter()
    logging.getLogger().addHandler(counter)
    return counter


CK_LOG = logging.getLogger("confluent_kafka")


def ck_error_cb(err: confluent_kafka.KafkaError) -> None:
    CK_LOG.warning("error_cb: %s", err)


def ck_common(bootstrap: str) -> dict[str, object]:
    return {"bootstrap.servers": bootstrap, "logger": CK_LOG, "error_cb": ck_error_cb}


# --------------------------------------------------------------------------- gateway


def build_java(program: str) -> None:
    """Fetch the Java client's jars (compat-tests/java/build.sh) and compile
    bench/java/<program>.java into bench/java/build (on JAVA_CP)."""
    subprocess.run(["bash", str(REPO / "compat-tests/java/build.sh")], check=True, stdout=2)
    build = REPO / "bench/java/build"
    build.mkdir(exist_ok=True)
    source = REPO / "bench/java" / f"{program}.java"
    subprocess.run(["javac", "-d", str(build), "-cp", JAVA_CP, str(source)], check=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def self_started_gateway(
    report: dict[str, object],
    prefix: str = "tmsgate-clients-bench-",
    extra_args: Sequence[str] = (),
) -> Iterator[str]:
    """`tmsgate serve` on a temp LevelDB dir and a free port (and ``extra_args``);
    yields its bootstrap."""
    with tempfile.TemporaryDirectory(prefix=prefix) as workdir:
        port = free_port()
        log_path = Path(workdir) / "gateway.log"
        cmd = [
            str(VENV_BIN / "tmsgate"),
            "serve",
            "--store",
            f"leveldb://{workdir}/store",
            "--kafka-listen",
            f"127.0.0.1:{port}",
            "--no-http",
            "--log-level",
            "WARNING",
            *extra_args,
        ]
        with open(log_path, "wb") as log_file:
            proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT)
        try:
            wait_for_port(proc, ("127.0.0.1", port))
            log(f"gateway: started pid {proc.pid} on 127.0.0.1:{port}, store {workdir}/store")
            report["pid"] = proc.pid
            report["store_dir"] = f"{workdir}/store"
            yield f"127.0.0.1:{port}"
        finally:
            report["store_bytes"] = dir_bytes(Path(workdir) / "store")
            stop(proc)
            report["exit_code"] = proc.returncode
            lines = log_path.read_text(errors="replace").splitlines()
            report["log_lines"] = len(lines)
            report["log_tail"] = lines[-15:]
            if lines:
                log(f"gateway: {len(lines)} log lines (WARNING+), last ones:")
                for line in lines[-15:]:
                    log(f"  | {line}")


def wait_for_port(proc: subprocess.Popen[bytes], address: tuple[str, int]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"gateway exited with code {proc.returncode} before listening")
        try:
            socket.create_connection(address, 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"gateway did not listen on {address} within 30 s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        log("gateway: did not stop within 30 s of SIGTERM, killing it")
        proc.kill()
        proc.wait(10)


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()  # after "pid (comm) "
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # stat(5) 14, 15


def dir_bytes(path: Path) -> int:
    # Allocated blocks, not st_size: value-log segments are created sparse at full size.
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


# --------------------------------------------------------------------------- topics


def create_topic(bootstrap: str, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    admin = AdminClient(ck_common(bootstrap))
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=1, replication_factor=1)], operation_timeout=30
    )
    futures[name].result(timeout=60)  # raises KafkaException on failure
    return name


class Progress:
    """Raises if `check` does not see a growing count for STALL_S seconds."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.last = -1
        self.since = time.monotonic()

    def check(self, count: int) -> None:
        now = time.monotonic()
        if count > self.last:
            self.last, self.since = count, now
        elif now - self.since > STALL_S:
            raise RuntimeError(f"{self.what}: no progress for {STALL_S:.0f} s at {count}")


# --------------------------------------------------------------------------- produce


def produce_confluent(bootstrap: str, topic: str, n: int, value: bytes) -> float:
    p = confluent_kafka.Producer(
        {
            **ck_common(bootstrap),
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "compression.type": "none",
        }
    )
    delivered = 0
    errors: list[str] = []

    def on_delivery(err: confluent_kafka.KafkaError | None, _msg: object) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1
        elif len(errors) < 10:
            errors.append(str(err))
        else:
            errors.append("")

    p.list_topics(topic, timeout=30)  # metadata outside the timing
    progress = Progress("confluent-kafka produce")
    started = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value, partition=0, on_delivery=on_delivery)
                break
            except BufferError:  # local queue full: serve delivery reports, retry
                p.poll(0.005)
                progress.check(delivered)
        p.poll(0)
    while (left := p.flush(1.0)) > 0:
        progress.check(n - left)
    elapsed = time.perf_counter() - started
    if errors or delivered != n:
        raise RuntimeError(
            f"confluent-kafka produce: {delivered}/{n} delivered, "
            f"{len(errors)} delivery errors, first: {[e for e in errors if e][:3]}"
        )
    return elapsed


def produce_kafka_python(bootstrap: str, topic: str, n: int, value: bytes) -> float:
    p = kafka.KafkaProducer(bootstrap_servers=bootstrap, acks="all", batch_size=MIB, linger_ms=5)
    try:
        p.partitions_for(topic)  # metadata outside the timing
        started = time.perf_counter()
        futures = [p.send(topic, value, partition=0) for _ in range(n)]
        p.flush(timeout=120)
        elapsed = time.perf_counter() - started
        failed = [f for f in futures if not f.is_done or f.failed()]
        if failed:
            first = failed[0].exception if failed[0].is_done else "not done after flush"
            raise RuntimeError(f"kafka-python produce: {len(failed)}/{n} failed, first: {first}")
        return elapsed
    finally:
        p.close(timeout=10)


async def _produce_aiokafka(bootstrap: str, topic: str, n: int, value: bytes, window: int) -> float:
    p = aiokafka.AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", max_batch_size=MIB, linger_ms=5
    )
    await p.start()
    try:
        await p.partitions_for(topic)  # metadata outside the timing
        pending: collections.deque[asyncio.Future[object]] = collections.deque()
        started = time.perf_counter()
        for _ in range(n):
            pending.append(await p.send(topic, value, partition=0))
            while len(pending) > window:
                await pending.popleft()  # raises on a delivery error
        for fut in pending:
            await fut
        return time.perf_counter() - started
    finally:
        await p.stop()


def produce_aiokafka(bootstrap: str, topic: str, n: int, value: bytes, window: int) -> float:
    return asyncio.run(asyncio.wait_for(_produce_aiokafka(bootstrap, topic, n, value, window), 300))


# --------------------------------------------------------------------------- consume


def check_read(client: str, n: int, got: int, nbytes: int) -> None:
    if got != n or nbytes != n * VALUE_BYTES:
        raise RuntimeError(f"{client} consume: read {got}/{n} messages, {nbytes} value bytes")


def consume_confluent(bootstrap: str, topic: str, n: int) -> float:
    c = confluent_kafka.Consumer(
        {
            **ck_common(bootstrap),
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            # librdkafka stops fetching for fetch.queue.backoff.ms (default 1 s) whenever
            # its local queue fills (64 MB): a broker that outruns the application then
            # measured a whole second idle, in some runs and not others.
            "fetch.queue.backoff.ms": 10,
        }
    )
    try:
        c.list_topics(topic, timeout=30)
        c.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
        got = nbytes = 0
        progress = Progress("confluent-kafka consume")
        started = time.perf_counter()
        while got < n:
            for msg in c.consume(num_messages=10_000, timeout=0.5):
                if msg.error():
                    raise RuntimeError(f"confluent-kafka consume: {msg.error()}")
                got += 1
                nbytes += len(msg.value())
            progress.check(got)
        elapsed = time.perf_counter() - started
        check_read("confluent-kafka", n, got, nbytes)
        return elapsed
    finally:
        c.close()


def consume_kafka_python(bootstrap: str, topic: str, n: int) -> float:
    c = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    try:
        tp = kafka.TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        got = nbytes = 0
        progress = Progress("kafka-python consume")
        started = time.perf_counter()
        while got < n:
            for records in c.poll(timeout_ms=500).values():
                got += len(records)
                nbytes += sum(len(r.value) for r in records)
            progress.check(got)
        elapsed = time.perf_counter() - started
        check_read("kafka-python", n, got, nbytes)
        return elapsed
    finally:
        c.close()


async def _consume_aiokafka(bootstrap: str, topic: str, n: int) -> float:
    c = aiokafka.AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await c.start()
    try:
        tp = aiokafka.TopicPartition(topic, 0)
        c.assign([tp])
        await c.seek_to_beginning(tp)
        got = nbytes = 0
        progress = Progress("aiokafka consume")
        started = time.perf_counter()
        while got < n:
            for records in (await c.getmany(timeout_ms=500)).values():
                got += len(records)
                nbytes += sum(len(r.value) for r in records)
            progress.check(got)
        elapsed = time.perf_counter() - started
        check_read("aiokafka", n, got, nbytes)
        return elapsed
    finally:
        await c.stop()


def consume_aiokafka(bootstrap: str, topic: str, n: int) -> float:
    return asyncio.run(asyncio.wait_for(_consume_aiokafka(bootstrap, topic, n), 300))


# --------------------------------------------------------------------------- latency

FETCH_WAIT_MAX_MS = 100
WARMUP = b"W"
TIMED = b"T"


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[k]


HIST_EDGES_MS = (1, 2, 5, 10, 20, 50, 100)


def histogram(sorted_ms: list[float]) -> dict[str, int]:
    """Counts per latency bucket: "<1", "<2", ... ">=100"."""
    out = {f"<{e}": 0 for e in HIST_EDGES_MS}
    out[f">={HIST_EDGES_MS[-1]}"] = 0
    for x in sorted_ms:
        key = next((f"<{e}" for e in HIST_EDGES_MS if x < e), f">={HIST_EDGES_MS[-1]}")
        out[key] += 1
    return out


IDLE_S = 2.3  # idle window before the timed phase: spans >= 2 statistics snapshots
STATS_INTERVAL_MS = 1000


class FetchStats:
    """librdkafka statistics (stats_cb) reduced to Fetch request counts and fetch RTTs.

    Portable across brokers: a broker that long-polls answers an idle consumer about
    1000 / fetch.wait.max.ms times a second with an RTT near fetch.wait.max.ms; one that
    answers empty fetches at once shows hundreds of fetches a second and a tiny RTT.
    """

    def __init__(self) -> None:
        self.snaps: list[tuple[float, int, float]] = []  # (monotonic, fetches, rtt p50 ms)

    def on_stats(self, raw: str) -> None:
        brokers = json.loads(raw).get("brokers", {}).values()
        fetches = sum(b.get("req", {}).get("Fetch", 0) for b in brokers)
        rtts = [b["rtt"]["p50"] / 1000 for b in brokers if b.get("rtt", {}).get("cnt")]
        self.snaps.append((time.monotonic(), fetches, max(rtts, default=0.0)))

    def window(self, start: float, end: float) -> dict[str, float | None]:
        inside = [s for s in self.snaps if start <= s[0] <= end]
        if len(inside) < 2:
            return {"fetches_per_s": None, "fetch_rtt_p50_ms": None}
        (t0, f0, _), (t1, f1, _) = inside[0], inside[-1]
        # each snapshot's RTT window is the interval before it; skip the first one
        rtt = statistics.median(s[2] for s in inside[1:])
        return {"fetches_per_s": round((f1 - f0) / (t1 - t0), 1), "fetch_rtt_p50_ms": round(rtt, 2)}


def latency_run(bootstrap: str, topic: str, rate: int, seconds: float) -> dict[str, object]:
    """Steady-rate producer in this thread, consumer in another; latencies in ms."""
    fetch_stats = FetchStats()
    consumer = confluent_kafka.Consumer(
        {
            **ck_common(bootstrap),
            "group.id": f"bench-lat-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "fetch.wait.max.ms": FETCH_WAIT_MAX_MS,
            "fetch.min.bytes": 1,
            "statistics.interval.ms": STATS_INTERVAL_MS,
            "stats_cb": fetch_stats.on_stats,
        }
    )
    producer = confluent_kafka.Producer(
        {**ck_common(bootstrap), "acks": "all", "linger.ms": 0, "compression.type": "none"}
    )
    _, high = consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0), timeout=30)
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, high)])
    producer.list_topics(topic, timeout=30)

    latencies_ns: list[int] = []
    warm_seen = threading.Event()
    all_received = threading.Event()
    stop_consumer = threading.Event()
    consumer_errors: list[str] = []
    expected = round(rate * seconds)

    def consume_loop() -> None:
        try:
            while not stop_consumer.is_set():
                msg = consumer.poll(0.05)
                if msg is None:
                    continue
                now = time.perf_counter_ns()
                if msg.error():
                    consumer_errors.append(str(msg.error()))
                    continue
                v = msg.value()
                if v[:1] == TIMED:
                    latencies_ns.append(now - int(v[1:20]))
                    if len(latencies_ns) >= expected:
                        all_received.set()  # keep polling: stats_cb runs inside poll()
                else:
                    warm_seen.set()
        except Exception as exc:  # surfaced by the main thread
            consumer_errors.append(repr(exc))

    delivery_errors: list[str] = []

    def on_delivery(err: confluent_kafka.KafkaError | None, _msg: object) -> None:
        if err is not None:
            delivery_errors.append(str(err))

    def stamped(kind: bytes) -> bytes:
        head = kind + b"%019d" % time.perf_counter_ns()
        return head + b"x" * (VALUE_BYTES - len(head))

    thread = threading.Thread(target=consume_loop, name="latency-consumer", daemon=True)
    thread.start()
    try:
        # Warm up until the consumer sees our messages: connections, first fetch.
        deadline = time.monotonic() + STALL_S
        while not warm_seen.is_set():
            if time.monotonic() > deadline:
                raise RuntimeError("latency: consumer saw no warm-up message within 30 s")
            producer.produce(topic, stamped(WARMUP), partition=0, on_delivery=on_delivery)
            producer.poll(0)
            warm_seen.wait(0.05)
        idle_start = time.monotonic()
        time.sleep(IDLE_S)  # warm-up drains, then the consumer long-polls an idle partition
        idle_end = timed_start = time.monotonic()

        interval_ns = 1_000_000_000 // rate
        behind = 0
        start = time.perf_counter_ns()
        for i in range(expected):
            due = start + i * interval_ns
            lag = due - time.perf_counter_ns()
            if lag > 0:
                time.sleep(lag / 1e9)
            elif lag < -interval_ns:
                behind += 1
            producer.produce(topic, stamped(TIMED), partition=0, on_delivery=on_delivery)
            producer.poll(0)
        send_s = (time.perf_counter_ns() - start) / 1e9
        if producer.flush(30) > 0:
            raise RuntimeError("latency: producer could not flush within 30 s")
        all_received.wait(STALL_S)
        timed_end = time.monotonic()
    finally:
        stop_consumer.set()
        thread.join(5)
        consumer.close()
    if delivery_errors or consumer_errors:
        raise RuntimeError(
            f"latency: {len(delivery_errors)} delivery errors {delivery_errors[:3]}, "
            f"consumer errors {consumer_errors[:3]}"
        )
    if len(latencies_ns) != expected:
        raise RuntimeError(f"latency: received {len(latencies_ns)}/{expected} timed messages")
    ms = sorted(x / 1e6 for x in latencies_ns)
    return {
        "samples": len(ms),
        "sent_rate": round(expected / send_s),
        "sends_behind_schedule": behind,
        "p50_ms": round(percentile(ms, 0.50), 3),
        "p99_ms": round(percentile(ms, 0.99), 3),
        "max_ms": round(ms[-1], 3),
        "histogram_ms": histogram(ms),
        "slow_share": round(sum(x >= 0.9 * FETCH_WAIT_MAX_MS for x in ms) / len(ms), 5),
        "idle_fetch": fetch_stats.window(idle_start, idle_end),
        "timed_fetch": fetch_stats.window(timed_start, timed_end),
    }


# --------------------------------------------------------------------------- driver

MEASURES: dict[str, tuple[Callable[..., float], Callable[..., float]]] = {
    "confluent_kafka": (produce_confluent, consume_confluent),
    "kafka_python": (produce_kafka_python, consume_kafka_python),
    "aiokafka": (produce_aiokafka, consume_aiokafka),
}


def timed(
    results: dict[str, dict[str, list[float]]],
    kind: str,
    client: str,
    n: int,
    run_label: str,
    fn: Callable[[], float],
) -> None:
    elapsed = fn()
    rate = n / elapsed
    results[kind].setdefault(client, []).append(rate)
    log(
        f"{run_label} {kind:7s} {client:15s} {n:>7,} msgs in {elapsed:6.2f} s = "
        f"{rate:>9,.0f} msgs/s   ({ceiling_text(kind, client)})"
    )


def run_all(bootstrap: str, args: argparse.Namespace, counts: Counts) -> dict[str, object]:
    value = os.urandom(VALUE_BYTES)
    results: dict[str, dict[str, list[float]]] = {"produce": {}, "consume": {}}
    latency_runs: list[dict[str, object]] = []
    plan = [
        ("confluent_kafka", counts.confluent_kafka),
        ("kafka_python", counts.kafka_python),
        ("aiokafka", counts.aiokafka),
    ]
    for run in range(1, args.runs + 1):
        label = f"[run {run}/{args.runs}]"
        for client, n in plan:
            topic = create_topic(bootstrap, f"bench-{client.replace('_', '-')}")
            produce, consume = MEASURES[client]
            extra = (counts.aiokafka_in_flight,) if client == "aiokafka" else ()
            send = partial(produce, bootstrap, topic, n, value, *extra)
            timed(results, "produce", client, n, label, send)
            timed(results, "consume", client, n, label, partial(consume, bootstrap, topic, n))
        topic = create_topic(bootstrap, "bench-latency")
        lat = latency_run(bootstrap, topic, counts.latency_rate, counts.latency_seconds)
        latency_runs.append(lat)
        log(
            f"{label} latency {'confluent_kafka':15s} {counts.latency_rate:,}/s for "
            f"{counts.latency_seconds:g} s: p50 {lat['p50_ms']:.2f} ms, "
            f"p99 {lat['p99_ms']:.2f} ms, "
            f"max {lat['max_ms']:.2f} ms, >=90% of fetch.wait.max.ms: {lat['slow_share']:.2%}, "
            f"sent {lat['sent_rate']:,}/s   ({ceiling_text('latency', 'confluent_kafka')})"
        )
        log(
            f"{label} latency fetches: idle {lat['idle_fetch']}, under load {lat['timed_fetch']} "
            f"(long-poll: idle ~{1000 // FETCH_WAIT_MAX_MS}/s at ~{FETCH_WAIT_MAX_MS} ms RTT)"
        )

    summary: dict[str, object] = {}
    for kind, per_client in results.items():
        summary[kind] = {
            client: {
                "messages": dict(plan)[client],
                "msgs_s": round(statistics.median(rates)),
                "runs_msgs_s": [round(r) for r in rates],
                "ceiling": CEILINGS[(kind, client)],
            }
            for client, rates in per_client.items()
        }
    summary["latency"] = {
        "client": "confluent_kafka",
        "rate_msgs_s": counts.latency_rate,
        "seconds": counts.latency_seconds,
        "fetch_wait_max_ms": FETCH_WAIT_MAX_MS,
        "fetch_min_bytes": 1,
        "p50_ms": round(statistics.median(float(r["p50_ms"]) for r in latency_runs), 3),
        "p99_ms": round(statistics.median(float(r["p99_ms"]) for r in latency_runs), 3),
        "runs": latency_runs,
        "ceiling": CEILINGS[("latency", "confluent_kafka")],
    }
    return summary


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--bootstrap",
        help="host:port of the broker to measure (default: start a tmsgate gateway)",
    )
    ap.add_argument("--runs", type=int, default=None, help="runs per figure (default 3)")
    ap.add_argument("--quick", action="store_true", help="smoke run: smaller counts, 1 run")
    args = ap.parse_args()
    if args.runs is None:
        args.runs = 1 if args.quick else 3
    if args.runs < 1:
        ap.error("--runs must be >= 1")
    return args


def main() -> None:
    args = parse_args()
    counter = setup_logging()
    counts = QUICK if args.quick else FULL
    started = time.monotonic()
    summary: dict[str, object] = {
        "cpus": os.cpu_count(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "value_bytes": VALUE_BYTES,
        "runs": args.runs,
        "quick": args.quick,
        "clients": {
            "confluent_kafka": confluent_kafka.__version__,
            "librdkafka": confluent_kafka.libversion()[0],
            "kafka_python": kafka.__version__,
            "aiokafka": aiokafka.__version__,
        },
    }
    gateway: dict[str, object] = {}
    with contextlib.ExitStack() as stack:
        bootstrap = args.bootstrap or stack.enter_context(self_started_gateway(gateway))
        summary["bootstrap"] = bootstrap
        summary["self_started_gateway"] = not args.bootstrap
        summary.update(run_all(bootstrap, args, counts))
    if gateway:
        summary["gateway"] = gateway
    summary["client_warnings"] = {"by_logger": dict(counter.counts), "first": counter.samples}
    summary["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    summary["wall_seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
