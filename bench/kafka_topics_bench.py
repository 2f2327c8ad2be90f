"""Kafka many-topics benchmark: one confluent-kafka producer spread over T topics.

    .venv/bin/python bench/kafka_topics_bench.py [--topics 1,100,1000,10000]
                                                 [--messages-scale 1.0] [--client java]
                                                 [--bootstrap host:port [--pid PID]] [--json]

Without --bootstrap it starts its own `tmsgate serve` on a temporary LevelDB directory
and a free port, and stops it at the end; with --bootstrap the same run measures any
Kafka broker (a real Apache Kafka, another gateway). The broker's CPU is measured only for
a process on this machine: the self-started gateway, or the one --pid names.

For every T in --topics (in that order) a fresh set of T one-partition topics (RF 1) is
created with confluent-kafka's AdminClient, in chunks, outside the timing; the topics of
earlier phases are kept (a phase runs next to all the topics created before it). One
confluent-kafka producer (acks=all, linger.ms=5, batch.size=1000000, no compression,
idempotence off, the settings of kafka_clients_bench.py; --linger-ms and --batch-messages
change linger.ms and batch.num.messages) is warmed first: one record to
every topic, flushed, so metadata for all T topics is known before the clock starts.
Timed: N records of 1 KiB, round-robin over the T topics (record i goes to topic i mod T,
partition 0), from the first produce() to the end of flush(); every delivery report is
checked.

Reported per T: msgs/s; the broker process's CPU seconds during the timed phase (utime +
stime from /proc/<pid>/stat, all its threads) as microseconds per message and as a share
of one core; the benchmark process's own CPU per message (librdkafka and this loop, which
share the 2 cores with the broker); topic creation time.

Default N (before --messages-scale): 800k at T<=100, 400k at T=1000, 40k at T=10000 (each
phase ~5-15 s on the 2-core dev machine). A table goes to stderr; --json also prints one
JSON summary to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic

# The gateway and logging helpers of the clients benchmark (this folder).
from kafka_clients_bench import (
    JAVA_CP,
    build_java,
    ck_common,
    log,
    proc_cpu_seconds,
    self_started_gateway,
    setup_logging,
)

VALUE_BYTES = 1024
CREATE_CHUNK = 500  # topics per CreateTopics request
STALL_S = 60.0  # no delivery progress for this long is a failure, not a slow result
# The warm-up at 10,000 topics waits on librdkafka's Metadata requests (~200 of them, each
# answered in 0.1-1.4 s by the gateway at that topic count) with no delivery for up to a
# minute: slow, not stuck, and outside the timing.
WARMUP_STALL_S = 240.0


def default_messages(topics: int) -> int:
    if topics <= 100:
        return 800_000
    if topics <= 1000:
        return 400_000
    return 40_000


# --------------------------------------------------------------------------- processes


def self_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def child_gateway_pid(bootstrap: str) -> int:
    """The pid of the `tmsgate serve` this process started listening on `bootstrap`."""
    me = os.getpid()
    port = bootstrap.rsplit(":", 1)[1]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        if ppid == me and any(arg.endswith(f":{port}".encode()) for arg in cmdline):
            return int(entry.name)
    raise RuntimeError(f"no child process of {me} listens on {bootstrap}")


# --------------------------------------------------------------------------- topics


def create_topics(bootstrap: str, names: list[str], partitions: int = 1) -> float:
    admin = AdminClient(ck_common(bootstrap))
    started = time.perf_counter()
    for i in range(0, len(names), CREATE_CHUNK):
        chunk = names[i : i + CREATE_CHUNK]
        futures = admin.create_topics(
            [NewTopic(n, num_partitions=partitions, replication_factor=1) for n in chunk],
            operation_timeout=60,
            request_timeout=120,
        )
        for future in futures.values():
            future.result(timeout=180)  # raises KafkaException on failure
    return time.perf_counter() - started


# --------------------------------------------------------------------------- produce


class Deliveries:
    def __init__(self) -> None:
        self.ok = 0
        self.failed = 0
        self.first_errors: list[str] = []

    def __call__(self, err: confluent_kafka.KafkaError | None, _msg: object) -> None:
        if err is None:
            self.ok += 1
            return
        self.failed += 1
        if len(self.first_errors) < 5:
            self.first_errors.append(str(err))

    def check(self, what: str, expected: int) -> None:
        if self.failed or self.ok != expected:
            raise RuntimeError(
                f"{what}: {self.ok}/{expected} delivered, {self.failed} delivery errors, "
                f"first: {self.first_errors}"
            )


def send(
    producer: confluent_kafka.Producer,
    names: list[str],
    n: int,
    value: bytes,
    what: str,
    partition: int = 0,
    stall_s: float = STALL_S,
) -> None:
    """Produce n records round-robin over `names`, flush, check every delivery report.
    ``partition`` -1: librdkafka's partitioner picks (keyless: sticky batches)."""
    done = Deliveries()
    t = len(names)
    last, since = -1, time.monotonic()

    def progress() -> None:
        nonlocal last, since
        now = time.monotonic()
        if done.ok + done.failed > last:
            last, since = done.ok + done.failed, now
        elif now - since > stall_s:
            raise RuntimeError(f"{what}: no delivery progress for {stall_s:.0f} s at {last}")

    for i in range(n):
        topic = names[i % t]
        while True:
            try:
                producer.produce(topic, value, partition=partition, on_delivery=done)
                break
            except BufferError:  # local queue full: serve delivery reports, retry
                producer.poll(0.005)
                progress()
        producer.poll(0)
    while producer.flush(1.0) > 0:
        progress()
    done.check(what, n)


@dataclass
class Phase:
    topics: int
    messages: int
    seconds: float
    msgs_s: float
    broker_cpu_s: float | None
    broker_us_per_msg: float | None
    broker_cores: float | None
    client_us_per_msg: float
    create_topics_s: float
    warmup_s: float


def run_phase(
    bootstrap: str,
    pid: int | None,
    t: int,
    n: int,
    value: bytes,
    run_id: str,
    producer_config: dict[str, object],
    partitions: int = 1,
) -> Phase:
    names = [f"tb-{run_id}-t{t}-{i:05d}" for i in range(t)]
    log(f"T={t:>6,}: creating {t:,} topics of {partitions} partition(s) ...")
    create_s = create_topics(bootstrap, names, partitions)
    target = 0 if partitions == 1 else -1  # several: the client's partitioner spreads them
    log(f"T={t:>6,}: created in {create_s:.1f} s; warming the producer (1 record per topic)")
    producer = confluent_kafka.Producer({**ck_common(bootstrap), **producer_config})
    warm_started = time.perf_counter()
    send(producer, names, t * partitions, value, f"warm-up T={t}", target, WARMUP_STALL_S)
    warmup_s = time.perf_counter() - warm_started
    log(f"T={t:>6,}: warmed up in {warmup_s:.1f} s; timing {n:,} records")

    broker_before = proc_cpu_seconds(pid) if pid else None
    client_before = self_cpu_seconds()
    started = time.perf_counter()
    send(producer, names, n, value, f"produce T={t}", target)
    seconds = time.perf_counter() - started
    client_cpu = self_cpu_seconds() - client_before
    broker_cpu = (
        proc_cpu_seconds(pid) - broker_before if pid and broker_before is not None else None
    )
    producer.flush(10)
    del producer
    return finished_phase(t, n, seconds, broker_cpu, client_cpu, create_s, warmup_s)


def finished_phase(
    t: int,
    n: int,
    seconds: float,
    broker_cpu: float | None,
    client_cpu: float,
    create_s: float,
    warmup_s: float,
    client: str = "",
) -> Phase:
    """A phase's figures from its measurements, logged."""
    phase = Phase(
        topics=t,
        messages=n,
        seconds=round(seconds, 3),
        msgs_s=round(n / seconds),
        broker_cpu_s=None if broker_cpu is None else round(broker_cpu, 2),
        broker_us_per_msg=None if broker_cpu is None else round(broker_cpu / n * 1e6, 1),
        broker_cores=None if broker_cpu is None else round(broker_cpu / seconds, 2),
        client_us_per_msg=round(client_cpu / n * 1e6, 1),
        create_topics_s=round(create_s, 1),
        warmup_s=round(warmup_s, 2),
    )
    cpu = "" if broker_cpu is None else f", broker {phase.broker_us_per_msg} us/msg"
    log(f"T={t:>6,}: {n:,} msgs in {seconds:.2f} s = {phase.msgs_s:,} msgs/s{cpu}{client}")
    return phase


def run_java_phase(bootstrap: str, pid: int | None, t: int, n: int, run_id: str) -> Phase:
    """run_phase with the Java producer (bench/java/ManyTopicsProduce.java): it packs the
    partitions of one broker into one ProduceRequest, where librdkafka sends one each."""
    prefix = f"tb-{run_id}-t{t}-"
    names = [f"{prefix}{i:05d}" for i in range(t)]
    log(f"T={t:>6,}: creating {t:,} topics (Java producer) ...")
    create_s = create_topics(bootstrap, names)
    warm_started = time.perf_counter()
    with subprocess.Popen(
        ["java", "-cp", JAVA_CP, "ManyTopicsProduce", bootstrap, prefix, str(t), str(n)],
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if line != "timing":
            raise RuntimeError(f"ManyTopicsProduce: expected 'timing', got {line!r}")
        warmup_s = time.perf_counter() - warm_started
        log(f"T={t:>6,}: Java producer warmed up in {warmup_s:.1f} s; timing {n:,} records")
        broker_before = proc_cpu_seconds(pid) if pid else None
        result = json.loads(proc.stdout.readline())
        broker_cpu = (
            proc_cpu_seconds(pid) - broker_before if pid and broker_before is not None else None
        )
    if proc.returncode != 0:
        raise RuntimeError(f"ManyTopicsProduce exited with {proc.returncode}")
    seconds, client_cpu = float(result["seconds"]), float(result["cpu_seconds"])
    return finished_phase(t, n, seconds, broker_cpu, client_cpu, create_s, warmup_s, " (Java)")


def table(phases: list[Phase]) -> str:
    def opt(v: float | None, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    head = (
        f"{'topics':>7} {'messages':>9} {'seconds':>8} {'msgs/s':>9} {'broker us/msg':>14} "
        f"{'broker cores':>13} {'client us/msg':>14} {'create s':>9}"
    )
    rows = [
        f"{p.topics:>7,} {p.messages:>9,} {p.seconds:>8.2f} {p.msgs_s:>9,.0f} "
        f"{opt(p.broker_us_per_msg, '>14.1f')} {opt(p.broker_cores, '>13.2f')} "
        f"{p.client_us_per_msg:>14.1f} {p.create_topics_s:>9.1f}"
        for p in phases
    ]
    return "\n".join([head, *rows])


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--topics",
        default="1,100,1000,10000",
        help="comma-separated topic counts, one phase each (default 1,100,1000,10000)",
    )
    ap.add_argument(
        "--messages-scale",
        type=float,
        default=1.0,
        help="multiply every phase's default message count (default 1.0)",
    )
    ap.add_argument(
        "--bootstrap",
        help="host:port of the broker to measure (default: start a tmsgate gateway)",
    )
    ap.add_argument("--pid", type=int, help="with --bootstrap: the broker's pid, for its CPU")
    ap.add_argument("--linger-ms", type=float, default=5.0, help="linger.ms (default 5)")
    ap.add_argument(
        "--batch-messages",
        type=int,
        help="batch.num.messages, the most records per partition batch (default: librdkafka's)",
    )
    ap.add_argument(
        "--partitions", type=int, default=1, help="partitions of every topic (default 1)"
    )
    ap.add_argument(
        "--client",
        choices=["confluent", "java"],
        default="confluent",
        help="the producer: confluent-kafka (one partition per ProduceRequest) or the Java "
        "client (every partition of the broker in one request; bench/java/ManyTopicsProduce"
        ".java, compiled on first use; one partition per topic)",
    )
    ap.add_argument("--json", action="store_true", help="print a JSON summary to stdout")
    args = ap.parse_args()
    try:
        args.topic_counts = [int(x) for x in args.topics.split(",") if x.strip()]
    except ValueError:
        ap.error("--topics must be comma-separated integers")
    if not args.topic_counts or min(args.topic_counts) < 1:
        ap.error("--topics needs at least one count, each >= 1")
    if args.messages_scale <= 0:
        ap.error("--messages-scale must be > 0")
    if args.client == "java" and (args.partitions != 1 or args.batch_messages):
        ap.error("--client java takes neither --partitions nor --batch-messages")
    if args.pid and not args.bootstrap:
        ap.error("--pid goes with --bootstrap (the self-started gateway is found by itself)")
    return args


def main() -> None:
    args = parse_args()
    counter = setup_logging()
    started = time.monotonic()
    value = os.urandom(VALUE_BYTES)
    run_id = uuid.uuid4().hex[:6]
    summary: dict[str, object] = {
        "cpus": os.cpu_count(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "value_bytes": VALUE_BYTES,
        "clients": {
            "confluent_kafka": confluent_kafka.__version__,
            "librdkafka": confluent_kafka.libversion()[0],
        },
    }
    producer_config: dict[str, object] = {
        "acks": "all",
        "linger.ms": args.linger_ms,
        "batch.size": 1_000_000,
        "compression.type": "none",
    }
    if args.batch_messages:
        producer_config["batch.num.messages"] = args.batch_messages
    summary["producer_config"] = producer_config
    summary["client"] = args.client
    if args.client == "java":
        build_java("ManyTopicsProduce")
    gateway: dict[str, object] = {}
    phases: list[Phase] = []
    with contextlib.ExitStack() as stack:
        if args.bootstrap:
            bootstrap, pid = args.bootstrap, args.pid
        else:
            bootstrap = stack.enter_context(
                self_started_gateway(gateway, prefix="tmsgate-topics-bench-")
            )
            pid = child_gateway_pid(bootstrap)
        summary["bootstrap"] = bootstrap
        summary["self_started_gateway"] = not args.bootstrap
        summary["broker_pid"] = pid
        for t in args.topic_counts:
            n = max(t, round(default_messages(t) * args.messages_scale))
            if args.client == "java":
                phases.append(run_java_phase(bootstrap, pid, t, n, run_id))
            else:
                phases.append(
                    run_phase(bootstrap, pid, t, n, value, run_id, producer_config, args.partitions)
                )
    log("")
    log(table(phases))
    summary["phases"] = [asdict(p) for p in phases]
    if gateway:
        summary["gateway"] = gateway
    summary["client_warnings"] = {"by_logger": dict(counter.counts), "first": counter.samples}
    summary["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    summary["wall_seconds"] = round(time.monotonic() - started, 1)
    if args.json:
        print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
