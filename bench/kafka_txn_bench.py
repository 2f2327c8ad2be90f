"""Kafka transactions benchmark: confluent-kafka transactional producers against a broker.

    .venv/bin/python bench/kafka_txn_bench.py [--bootstrap host:port] [--runs 3] [--quick]
                                              [--producers 4] [--phases small,large,open,sweep]
                                              [--sweep-producers 1,2,4,8] [--broker-pid PID]

Without --bootstrap it starts its own `tmsgate serve` on a temporary LevelDB directory
and a free port, and stops it at the end; with --bootstrap the same run measures any
Kafka broker (a real Apache Kafka, another gateway), so figures can be set side by side.

Measured, each the median of --runs runs, 1 KiB values, a fresh one-partition topic per
measurement (created with confluent-kafka's AdminClient, RF 1, deleted afterwards
unless --keep-topics).
Every producer has its own transactional.id; init_transactions() is outside the timing.
Producers run linger.ms=5, batch.size=1000000 (acks=all and idempotence are implied by
transactional.id); each runs in its own thread (librdkafka releases the GIL).

  small_txn   transactions/s: K producers (--producers, default 4) each loop
              begin_transaction / 10 records / commit_transaction for a fixed duration;
              reports committed tx/s and records/s (both summed over the producers).
  commit      commit latency p50/p99: the time of each commit_transaction() call in
              small_txn (it includes flushing that transaction's 10 records).
  large_txn   records/s with 1000-record transactions: one producer, then K producers,
              looping begin / 1000 records / commit for a fixed duration.
              Throughput counts committed records only; a transaction still open when the
              duration ends is finished and counted (the clock stops after its commit).
  open_txn    read_committed end-to-end latency next to an open transaction. A consumer
              (isolation.level=read_committed, fetch.wait.max.ms=100, fetch.min.bytes=1,
              assigned at the log end) records receive - send from perf_counter_ns() stamps
              in plain records (non-transactional producer, acks=all, linger.ms=0) sent at
              a steady rate. After a warm-up, ANOTHER producer (transactional,
              transaction.timeout.ms=120000) begins a transaction on the same topic, sends
              one record, and holds the transaction open for the hold time, then aborts it;
              the plain records are sent during the hold. Reported: latency p50/p99/max
              over all plain records, and `received_while_open` - how many of them the
              consumer had received before abort_transaction() was called. Apache Kafka
              bounds read_committed reads at the last stable offset, so its consumer
              stalls behind the open transaction (received_while_open ~ 0, latencies up to
              the hold time); a store that does not block readers on an open transaction
              shows received_while_open == sent and ordinary latencies.
              `baseline` is the same consumer/producer for a few seconds before the
              transaction opens. `histogram_ms`, `worst` (seconds after the opening,
              latency) and `slow_share` (share of samples at 50-110% of fetch.wait.max.ms,
              the signature of fetches that no publish woke) tell stalls from missed
              wakeups.

  sweep       (only when named in --phases) small_txn once per producer count of
              --sweep-producers, in each run: where the rate stops growing with more
              producers is the broker's capacity for small transactions, as against the
              latency one producer sees. With the broker's pid (the self-started gateway's,
              or --broker-pid) it also reports the broker's CPU per transaction, all its
              threads, from /proc/PID/stat.

Durations: small_txn and each large_txn 10 s, open_txn 3 s baseline then 20 s of plain
records at 200/s inside a 30 s hold (about 3.5-5 min for 3 runs on 2 cores); --quick:
3 s phases, 3 s of plain records inside a 5 s hold, 1 run (~25 s).

After every throughput phase a read_committed consumer reads the topic from the start and
checks it holds exactly the committed records (`verified`), outside the timing.

Progress goes to stderr, one JSON summary to stdout. Machine notes and ceilings:
/work/shared/design/peers-and-ceilings.md (confluent-kafka non-transactional produce
ceiling: 552k msgs/s against a broker that acks without storing).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import logging
import os
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

# The gateway, logging and percentile helpers of the clients benchmark (this folder).
from kafka_clients_bench import (
    ck_common,
    log,
    percentile,
    proc_cpu_seconds,
    self_started_gateway,
    setup_logging,
)

VENV_BIN = Path(sys.executable).parent
VALUE_BYTES = 1024
STALL_S = 30.0  # no progress for this long is a failure, not a slow result
FETCH_WAIT_MAX_MS = 100
TXN_TIMEOUT_MS = 120_000
OP_TIMEOUT_S = 60.0  # init/commit/abort call timeout


@dataclass(frozen=True, slots=True)
class Plan:
    small_txn_seconds: float
    large_txn_seconds: float
    plain_rate: int
    baseline_seconds: float
    plain_seconds: float
    hold_seconds: float


FULL = Plan(10.0, 10.0, 200, 3.0, 20.0, 30.0)
QUICK = Plan(3.0, 3.0, 200, 1.0, 3.0, 5.0)
SMALL_RECORDS = 10
LARGE_RECORDS = 1000


# --------------------------------------------------------------------------- warnings


CK_LOG = logging.getLogger("confluent_kafka")


# --------------------------------------------------------------------------- gateway


# --------------------------------------------------------------------------- topics


def create_topic(bootstrap: str, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    admin = AdminClient(ck_common(bootstrap))
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=1, replication_factor=1)], operation_timeout=30
    )
    futures[name].result(timeout=60)  # raises KafkaException on failure
    # A broker may answer CreateTopics before its metadata shows the partition's leader
    # (Apache Kafka: a ListOffsets right after then fails with UNKNOWN_PARTITION).
    deadline = time.monotonic() + 30
    while True:
        md = admin.list_topics(name, timeout=10).topics.get(name)
        p0 = md.partitions.get(0) if md is not None and md.error is None else None
        if p0 is not None and p0.leader >= 0:
            return name
        if time.monotonic() > deadline:
            raise RuntimeError(f"topic {name}: no leader for partition 0 within 30 s")
        time.sleep(0.05)


KEEP_TOPICS = False  # --keep-topics


def delete_topic(bootstrap: str, topic: str) -> None:
    """Best effort: keeps the broker's disk bounded across runs."""
    if KEEP_TOPICS:
        return
    try:
        admin = AdminClient(ck_common(bootstrap))
        admin.delete_topics([topic], operation_timeout=30)[topic].result(timeout=60)
    except Exception as exc:  # not part of what is measured
        log(f"  (delete_topics {topic} failed: {exc})")


HIST_EDGES_MS = (1, 2, 5, 10, 20, 50, 100, 1000, 10000)


def histogram(sorted_ms: list[float]) -> dict[str, int]:
    """Counts per latency bucket: "<1", "<2", ... ">=10000"."""
    out = {f"<{e}": 0 for e in HIST_EDGES_MS}
    out[f">={HIST_EDGES_MS[-1]}"] = 0
    for x in sorted_ms:
        key = next((f"<{e}" for e in HIST_EDGES_MS if x < e), f">={HIST_EDGES_MS[-1]}")
        out[key] += 1
    return out


def slow_share(ms: list[float]) -> float:
    """Share of samples in [0.5, 1.1) x fetch.wait.max.ms: a fetch that a publish did not
    wake answers after the full wait, so missed wakeups spread latencies up to it."""
    lo, hi = 0.5 * FETCH_WAIT_MAX_MS, 1.1 * FETCH_WAIT_MAX_MS
    return round(sum(lo <= x < hi for x in ms) / len(ms), 4) if ms else 0.0


def err_text(exc: BaseException) -> str:
    """KafkaException with its error name/code and flags, for the report."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        e: KafkaError = exc.args[0]
        flags = [
            f
            for f, on in (
                ("fatal", e.fatal()),
                ("retriable", e.retriable()),
                ("txn_requires_abort", e.txn_requires_abort()),
            )
            if on
        ]
        return f"{e.name()}({e.code()}) {e.str()} {flags}"
    return repr(exc)


# --------------------------------------------------------------------------- producers


class TxnWorker:
    """One transactional producer looping begin / n records / commit until `deadline`."""

    def __init__(self, bootstrap: str, topic: str, records: int, value: bytes, tag: str):
        self.topic = topic
        self.records = records
        self.value = value
        self.txn_id = f"bench-txn-{tag}-{uuid.uuid4().hex[:10]}"
        self.producer = confluent_kafka.Producer(
            {
                **ck_common(bootstrap),
                "transactional.id": self.txn_id,
                "linger.ms": 5,
                "batch.size": 1_000_000,
                "compression.type": "none",
                "transaction.timeout.ms": TXN_TIMEOUT_MS,
            }
        )
        self.commits = 0
        self.commit_ns: list[int] = []
        self.delivered = 0
        self.delivery_errors: list[str] = []
        self.error: str | None = None
        self.started_ns = 0
        self.ended_ns = 0

    def on_delivery(self, err: KafkaError | None, _msg: object) -> None:
        if err is None:
            self.delivered += 1
        elif len(self.delivery_errors) < 10:
            self.delivery_errors.append(str(err))

    def init(self) -> None:
        self.producer.list_topics(self.topic, timeout=30)
        self.producer.init_transactions(OP_TIMEOUT_S)

    def run(self, start: threading.Event, deadline_ns: list[int]) -> None:
        p = self.producer
        try:
            start.wait()
            self.started_ns = time.perf_counter_ns()
            while time.perf_counter_ns() < deadline_ns[0]:
                p.begin_transaction()
                for _ in range(self.records):
                    while True:
                        try:
                            p.produce(
                                self.topic, self.value, partition=0, on_delivery=self.on_delivery
                            )
                            break
                        except BufferError:
                            p.poll(0.005)
                    p.poll(0)
                t0 = time.perf_counter_ns()
                p.commit_transaction(OP_TIMEOUT_S)
                self.commit_ns.append(time.perf_counter_ns() - t0)
                self.commits += 1
            self.ended_ns = time.perf_counter_ns()
        except Exception as exc:
            self.ended_ns = time.perf_counter_ns()
            self.error = err_text(exc)


def txn_phase(
    bootstrap: str,
    name: str,
    producers: int,
    records: int,
    seconds: float,
    value: bytes,
    pid: int | None = None,
) -> dict[str, object]:
    """``pid``: the broker's process, to report its CPU per transaction (all threads) over
    the timed part."""
    topic = create_topic(bootstrap, f"bench-{name.replace('_', '-')}")
    try:
        workers = [
            TxnWorker(bootstrap, topic, records, value, f"{name}{i}") for i in range(producers)
        ]
        for w in workers:
            w.init()
        start = threading.Event()
        deadline = [0]
        threads = [
            threading.Thread(target=w.run, args=(start, deadline), name=f"txn-{i}", daemon=True)
            for i, w in enumerate(workers)
        ]
        for t in threads:
            t.start()
        cpu0 = proc_cpu_seconds(pid) if pid else 0.0
        t0 = time.perf_counter_ns()
        deadline[0] = t0 + int(seconds * 1e9)
        start.set()
        # Watchdog: a producer that stops committing for STALL_S is a failure.
        last, since = -1, time.monotonic()
        while any(t.is_alive() for t in threads):
            for t in threads:
                t.join(0.2)
            total = sum(w.commits for w in workers)
            if total > last:
                last, since = total, time.monotonic()
            elif time.monotonic() - since > STALL_S + OP_TIMEOUT_S:
                raise RuntimeError(f"{name}: no commit for {STALL_S + OP_TIMEOUT_S:.0f} s")
        cpu1 = proc_cpu_seconds(pid) if pid else 0.0
        errors = [f"{w.txn_id}: {w.error}" for w in workers if w.error]
        derrs = [e for w in workers for e in w.delivery_errors]
        if errors or derrs:
            raise RuntimeError(f"{name}: producer errors {errors[:3]}, delivery errors {derrs[:3]}")
        elapsed = (max(w.ended_ns for w in workers) - t0) / 1e9
        commits = sum(w.commits for w in workers)
        committed_records = commits * records
        delivered = sum(w.delivered for w in workers)
        if delivered != committed_records:
            raise RuntimeError(f"{name}: {delivered} delivered vs {committed_records} committed")
        for w in workers:
            w.producer.flush(10)
        commit_ms = sorted(x / 1e6 for w in workers for x in w.commit_ns)
        verified = count_committed(bootstrap, topic, committed_records)
        cpu = {}
        if pid and commits:
            cpu["broker_cpu_ms_per_tx"] = round((cpu1 - cpu0) * 1000 / commits, 3)
        return {
            **cpu,
            "producers": producers,
            "records_per_txn": records,
            "seconds": round(elapsed, 2),
            "transactions": commits,
            "records": committed_records,
            "tx_s": round(commits / elapsed, 1),
            "records_s": round(committed_records / elapsed),
            "commit_p50_ms": round(percentile(commit_ms, 0.50), 3),
            "commit_p99_ms": round(percentile(commit_ms, 0.99), 3),
            "commit_max_ms": round(commit_ms[-1], 3) if commit_ms else None,
            "verified": verified,
        }
    finally:
        delete_topic(bootstrap, topic)


def count_committed(bootstrap: str, topic: str, expected: int) -> bool:
    """read_committed consumer from the start: True if exactly `expected` records."""
    c = confluent_kafka.Consumer(
        {
            **ck_common(bootstrap),
            "group.id": f"bench-verify-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.queue.backoff.ms": 10,
        }
    )
    try:
        c.assign([TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
        got = 0
        since = time.monotonic()
        # Read until the expected count, then once more briefly to catch extras
        # (records of aborted or unfinished transactions must not be delivered).
        extra_window = False
        while True:
            msgs = c.consume(num_messages=10_000, timeout=0.5)
            for m in msgs:
                if m.error():
                    raise RuntimeError(f"verify: {m.error()}")
                got += 1
            if msgs:
                since = time.monotonic()
            if got >= expected:
                if extra_window:
                    break
                extra_window = True
            elif time.monotonic() - since > 10:
                break
        if got != expected:
            log(f"  verify {topic}: read {got} committed records, expected {expected}")
        return got == expected
    finally:
        c.close()


# --------------------------------------------------------------------------- open txn

WARMUP = b"W"
BASE = b"B"
TIMED = b"T"


def open_txn_run(bootstrap: str, plan: Plan) -> dict[str, object]:
    topic = create_topic(bootstrap, "bench-open-txn")
    try:
        return _open_txn_run(bootstrap, topic, plan)
    finally:
        delete_topic(bootstrap, topic)


def _open_txn_run(bootstrap: str, topic: str, plan: Plan) -> dict[str, object]:
    consumer = confluent_kafka.Consumer(
        {
            **ck_common(bootstrap),
            "group.id": f"bench-open-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": FETCH_WAIT_MAX_MS,
            "fetch.min.bytes": 1,
        }
    )
    plain = confluent_kafka.Producer(
        {**ck_common(bootstrap), "acks": "all", "linger.ms": 0, "compression.type": "none"}
    )
    holder = confluent_kafka.Producer(
        {
            **ck_common(bootstrap),
            "transactional.id": f"bench-holder-{uuid.uuid4().hex[:10]}",
            "linger.ms": 0,
            "transaction.timeout.ms": TXN_TIMEOUT_MS,
        }
    )
    consumer.list_topics(topic, timeout=30)  # the consumer's own metadata cache
    _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    consumer.assign([TopicPartition(topic, 0, high)])
    plain.list_topics(topic, timeout=30)
    holder.list_topics(topic, timeout=30)
    holder.init_transactions(OP_TIMEOUT_S)

    base_ns: list[int] = []
    timed: list[tuple[int, int]] = []  # (receive perf_counter_ns, latency ns)
    warm_seen = threading.Event()
    stop_consumer = threading.Event()
    consumer_errors: list[str] = []
    holder_seen: list[bytes] = []

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
                kind = v[:1]
                if kind == TIMED:
                    timed.append((now, now - int(v[1:20])))
                elif kind == BASE:
                    base_ns.append(now - int(v[1:20]))
                elif kind == WARMUP:
                    warm_seen.set()
                else:
                    holder_seen.append(v[:20])  # aborted: must never be seen
        except Exception as exc:
            consumer_errors.append(repr(exc))

    delivery_errors: list[str] = []

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None and len(delivery_errors) < 10:
            delivery_errors.append(str(err))

    def stamped(kind: bytes) -> bytes:
        head = kind + b"%019d" % time.perf_counter_ns()
        return head + b"x" * (VALUE_BYTES - len(head))

    def steady(kind: bytes, seconds: float) -> tuple[int, float, int]:
        n = round(plan.plain_rate * seconds)
        interval_ns = 1_000_000_000 // plan.plain_rate
        behind = 0
        start = time.perf_counter_ns()
        for i in range(n):
            lag = start + i * interval_ns - time.perf_counter_ns()
            if lag > 0:
                time.sleep(lag / 1e9)
            elif lag < -interval_ns:
                behind += 1
            plain.produce(topic, stamped(kind), partition=0, on_delivery=on_delivery)
            plain.poll(0)
        return n, (time.perf_counter_ns() - start) / 1e9, behind

    def wait_until(pred: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + STALL_S + plan.hold_seconds
        while not pred():
            if time.monotonic() > deadline:
                raise RuntimeError(f"open_txn: {what}")
            time.sleep(0.01)

    thread = threading.Thread(target=consume_loop, name="open-txn-consumer", daemon=True)
    thread.start()
    holder_open = False
    abort_error: str | None = None
    try:
        deadline = time.monotonic() + STALL_S
        while not warm_seen.is_set():
            if time.monotonic() > deadline:
                raise RuntimeError("open_txn: consumer saw no warm-up message within 30 s")
            plain.produce(topic, stamped(WARMUP), partition=0, on_delivery=on_delivery)
            plain.poll(0)
            warm_seen.wait(0.05)
        time.sleep(0.5)  # let the warm-up drain

        n_base, _, _ = steady(BASE, plan.baseline_seconds)
        plain.flush(30)
        wait_until(lambda: len(base_ns) >= n_base, f"baseline: got {len(base_ns)}/{n_base}")

        # Open a transaction with one record, make sure it is in the log.
        holder.begin_transaction()
        holder_open = True
        holder.produce(topic, b"H" + b"h" * (VALUE_BYTES - 1), partition=0, on_delivery=on_delivery)
        if holder.flush(30) > 0:
            raise RuntimeError("open_txn: transactional record not delivered within 30 s")
        opened = time.monotonic()
        opened_ns = time.perf_counter_ns()

        n, send_s, behind = steady(TIMED, plan.plain_seconds)
        if plain.flush(30) > 0:
            raise RuntimeError("open_txn: plain producer could not flush within 30 s")
        left = plan.hold_seconds - (time.monotonic() - opened)
        if left > 0:
            time.sleep(left)
        abort_ns = time.perf_counter_ns()
        received_while_open = len(timed)
        try:
            holder.abort_transaction(OP_TIMEOUT_S)
        except Exception as exc:
            abort_error = err_text(exc)
        holder_open = False
        held_s = time.monotonic() - opened
        wait_until(lambda: len(timed) >= n, f"received {len(timed)}/{n} plain records")
        drained_ns = time.perf_counter_ns()
        time.sleep(0.3)  # would an aborted record still show up?
    finally:
        if holder_open:
            with contextlib.suppress(Exception):
                holder.abort_transaction(10)
        stop_consumer.set()
        thread.join(5)
        consumer.close()
    if delivery_errors or consumer_errors or abort_error:
        raise RuntimeError(
            f"open_txn: delivery errors {delivery_errors[:3]}, consumer errors "
            f"{consumer_errors[:3]}, abort error {abort_error}"
        )
    if holder_seen:
        raise RuntimeError(
            f"open_txn: read_committed consumer received aborted record(s) {holder_seen[:2]}"
        )
    ms = sorted(lat / 1e6 for _, lat in timed)
    base = sorted(x / 1e6 for x in base_ns)
    worst = sorted(timed, key=lambda rl: rl[1], reverse=True)[:5]
    return {
        "rate_msgs_s": plan.plain_rate,
        "sent": n,
        "sent_rate": round(n / send_s),
        "sends_behind_schedule": behind,
        "held_open_s": round(held_s, 2),
        "received_while_open": received_while_open,
        "received_after_abort_s": round((drained_ns - abort_ns) / 1e9, 3),
        "p50_ms": round(percentile(ms, 0.50), 3),
        "p99_ms": round(percentile(ms, 0.99), 3),
        "max_ms": round(ms[-1], 3),
        "histogram_ms": histogram(ms),
        "slow_share": slow_share(ms),
        # (seconds from the transaction's opening to the send, latency ms)
        "worst": [(round((r - lat - opened_ns) / 1e9, 2), round(lat / 1e6, 1)) for r, lat in worst],
        "baseline": {
            "samples": len(base),
            "p50_ms": round(percentile(base, 0.50), 3),
            "p99_ms": round(percentile(base, 0.99), 3),
            "max_ms": round(base[-1], 3),
            "histogram_ms": histogram(base),
            "slow_share": slow_share(base),
        },
    }


# --------------------------------------------------------------------------- driver


def med(runs: list[dict[str, object]], key: str) -> float:
    return statistics.median(float(r[key]) for r in runs)


def sweep_phase(
    bootstrap: str, args: argparse.Namespace, plan: Plan, value: bytes, pid: int | None, label: str
) -> dict[int, dict[str, object]]:
    """One small_txn measurement per producer count of --sweep-producers."""
    out: dict[int, dict[str, object]] = {}
    for n in args.sweep_producers:
        r = txn_phase(bootstrap, f"sweep_{n}", n, SMALL_RECORDS, plan.small_txn_seconds, value, pid)
        out[n] = r
        cpu = r.get("broker_cpu_ms_per_tx")
        log(
            f"{label} sweep      {n} producers x (begin/{SMALL_RECORDS} recs/commit): "
            f"{r['tx_s']:>8,.1f} tx/s"
            + (f", broker CPU {cpu:.3f} ms per transaction" if cpu is not None else "")
            + f", verified {r['verified']}"
        )
    return out


def run_all(
    bootstrap: str, args: argparse.Namespace, plan: Plan, pid: int | None = None
) -> dict[str, object]:
    value = os.urandom(VALUE_BYTES)
    k = args.producers
    phases: dict[str, list[dict[str, object]]] = collections.defaultdict(list)
    for run in range(1, args.runs + 1):
        label = f"[run {run}/{args.runs}]"
        if "small" in args.phases:
            r = txn_phase(bootstrap, "small_txn", k, SMALL_RECORDS, plan.small_txn_seconds, value)
            phases["small_txn"].append(r)
            log(
                f"{label} small_txn  {k} producers x (begin/{SMALL_RECORDS} recs/commit): "
                f"{r['tx_s']:>8,.1f} tx/s {r['records_s']:>8,} recs/s, commit p50 "
                f"{r['commit_p50_ms']:.2f} ms p99 {r['commit_p99_ms']:.2f} ms, "
                f"verified {r['verified']}"
            )
        for producers in sorted({1, k}) if "large" in args.phases else []:
            name = f"large_txn_{producers}"
            r = txn_phase(bootstrap, name, producers, LARGE_RECORDS, plan.large_txn_seconds, value)
            phases[name].append(r)
            log(
                f"{label} {name:12s}{producers} producer(s) x (begin/{LARGE_RECORDS} recs/commit): "
                f"{r['tx_s']:>6,.1f} tx/s {r['records_s']:>8,} recs/s, commit p50 "
                f"{r['commit_p50_ms']:.2f} ms p99 {r['commit_p99_ms']:.2f} ms, "
                f"verified {r['verified']}"
            )
        if "sweep" in args.phases:
            for n, r in sweep_phase(bootstrap, args, plan, value, pid, label).items():
                phases[f"sweep_{n}"].append(r)
        if "open" not in args.phases:
            continue
        r = open_txn_run(bootstrap, plan)
        phases["open_txn"].append(r)
        log(
            f"{label} open_txn   {plan.plain_rate}/s plain records for {plan.plain_seconds:g} s "
            f"next to a transaction held {r['held_open_s']} s: received while open "
            f"{r['received_while_open']}/{r['sent']}, p50 {r['p50_ms']:.2f} ms, p99 "
            f"{r['p99_ms']:.2f} ms, max {r['max_ms']:.2f} ms (baseline p50 "
            f"{r['baseline']['p50_ms']:.2f} ms, p99 {r['baseline']['p99_ms']:.2f} ms); "
            f"50-110 ms share {r['slow_share']:.1%} (baseline {r['baseline']['slow_share']:.1%}), "
            f"worst (s after open, ms) {r['worst'][:3]}"
        )

    summary: dict[str, object] = {}
    small = phases["small_txn"]
    if small:
        _summarize_small(summary, small, k, plan)
    summary["large_txn"] = {
        name: {
            "producers": rs[0]["producers"],
            "records_per_txn": LARGE_RECORDS,
            "seconds": plan.large_txn_seconds,
            "records_s": round(med(rs, "records_s")),
            "tx_s": round(med(rs, "tx_s"), 1),
            "commit_p50_ms": round(med(rs, "commit_p50_ms"), 3),
            "commit_p99_ms": round(med(rs, "commit_p99_ms"), 3),
            "runs_records_s": [r["records_s"] for r in rs],
            "all_verified": all(r["verified"] for r in rs),
        }
        for name, rs in phases.items()
        if name.startswith("large_txn")
    }
    if "sweep" in args.phases:
        summary["sweep"] = {
            n: {
                "tx_s": round(med(phases[f"sweep_{n}"], "tx_s"), 1),
                "runs_tx_s": [r["tx_s"] for r in phases[f"sweep_{n}"]],
                "broker_cpu_ms_per_tx": [
                    r.get("broker_cpu_ms_per_tx") for r in phases[f"sweep_{n}"]
                ],
                "all_verified": all(r["verified"] for r in phases[f"sweep_{n}"]),
            }
            for n in args.sweep_producers
        }
    ot = phases["open_txn"]
    if ot:
        _summarize_open(summary, ot, plan)
    summary["runs_detail"] = {k_: v for k_, v in phases.items() if k_ != "open_txn"}
    return summary


def _summarize_open(summary: dict[str, object], ot: list[dict[str, object]], plan: Plan) -> None:
    summary["open_txn"] = {
        "rate_msgs_s": plan.plain_rate,
        "plain_seconds": plan.plain_seconds,
        "hold_seconds": plan.hold_seconds,
        "fetch_wait_max_ms": FETCH_WAIT_MAX_MS,
        "isolation_level": "read_committed",
        "p50_ms": round(med(ot, "p50_ms"), 3),
        "p99_ms": round(med(ot, "p99_ms"), 3),
        "received_while_open": round(med(ot, "received_while_open")),
        "sent": ot[0]["sent"],
        "baseline_p50_ms": round(statistics.median(r["baseline"]["p50_ms"] for r in ot), 3),
        "baseline_p99_ms": round(statistics.median(r["baseline"]["p99_ms"] for r in ot), 3),
        "runs": ot,
    }


def _summarize_small(
    summary: dict[str, object], small: list[dict[str, object]], k: int, plan: Plan
) -> None:
    summary["small_txn"] = {
        "producers": k,
        "records_per_txn": SMALL_RECORDS,
        "seconds": plan.small_txn_seconds,
        "tx_s": round(med(small, "tx_s"), 1),
        "records_s": round(med(small, "records_s")),
        "runs_tx_s": [r["tx_s"] for r in small],
        "all_verified": all(r["verified"] for r in small),
    }
    summary["commit"] = {
        "from": "small_txn",
        "p50_ms": round(med(small, "commit_p50_ms"), 3),
        "p99_ms": round(med(small, "commit_p99_ms"), 3),
        "runs_p50_ms": [r["commit_p50_ms"] for r in small],
        "runs_p99_ms": [r["commit_p99_ms"] for r in small],
    }


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--bootstrap",
        help="host:port of the broker to measure (default: start a tmsgate gateway)",
    )
    ap.add_argument("--runs", type=int, default=None, help="runs per figure (default 3)")
    ap.add_argument("--quick", action="store_true", help="smoke run: short phases, 1 run")
    ap.add_argument(
        "--producers", type=int, default=4, help="K concurrent transactional producers (default 4)"
    )
    ap.add_argument(
        "--sweep-producers",
        default="1,2,4,8",
        help="producer counts of the sweep phase, comma-separated (default 1,2,4,8)",
    )
    ap.add_argument(
        "--broker-pid",
        type=int,
        help="pid of the broker at --bootstrap, for its CPU per transaction in the sweep",
    )
    ap.add_argument(
        "--keep-topics",
        action="store_true",
        help="do not delete each measurement's topic afterwards (default: delete)",
    )
    ap.add_argument(
        "--phases",
        default="small,large,open",
        help="which measurements, comma-separated: small, large, open, sweep (default: "
        "small, large and open). "
        "`--phases open` measures the open-transaction latency on a gateway that has not "
        "just written and deleted the large phases' topics (their clean-up and compaction "
        "run beside it otherwise)",
    )
    args = ap.parse_args()
    args.phases = {p.strip() for p in args.phases.split(",") if p.strip()}
    if not args.phases <= {"small", "large", "open", "sweep"}:
        ap.error("--phases takes small, large, open and sweep")
    try:
        args.sweep_producers = [int(n) for n in args.sweep_producers.split(",") if n.strip()]
    except ValueError:
        ap.error("--sweep-producers takes whole numbers, comma-separated")
    if not args.sweep_producers or min(args.sweep_producers) < 1:
        ap.error("--sweep-producers needs producer counts >= 1")
    if args.runs is None:
        args.runs = 1 if args.quick else 3
    if args.runs < 1:
        ap.error("--runs must be >= 1")
    if args.producers < 1:
        ap.error("--producers must be >= 1")
    return args


def main() -> None:
    global KEEP_TOPICS
    args = parse_args()
    KEEP_TOPICS = args.keep_topics
    counter = setup_logging()
    plan = QUICK if args.quick else FULL
    started = time.monotonic()
    summary: dict[str, object] = {
        "cpus": os.cpu_count(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "value_bytes": VALUE_BYTES,
        "runs": args.runs,
        "quick": args.quick,
        "keep_topics": args.keep_topics,
        "clients": {
            "confluent_kafka": confluent_kafka.version()[0],
            "librdkafka": confluent_kafka.libversion()[0],
        },
    }
    gateway: dict[str, object] = {}
    with contextlib.ExitStack() as stack:
        own = self_started_gateway(gateway, "tmsgate-txn-bench-")
        bootstrap = args.bootstrap or stack.enter_context(own)
        summary["bootstrap"] = bootstrap
        summary["self_started_gateway"] = not args.bootstrap
        pid = args.broker_pid if args.bootstrap else gateway.get("pid")
        summary.update(run_all(bootstrap, args, plan, pid))  # type: ignore[arg-type]
    if gateway:
        summary["gateway"] = gateway
    summary["client_warnings"] = {"by_logger": dict(counter.counts), "first": counter.samples}
    summary["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    summary["wall_seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
