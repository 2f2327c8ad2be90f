"""Log compaction beside Apache Kafka: how fast a compacted topic is cleaned, and what
cleaning costs the produce path (docs/compaction.md, docs/benchmarks.md).

    .venv/bin/python bench/compaction_bench.py [--bootstrap host:port] [--quick] [--cold]
        [--records 1000000] [--keys 10000] [--tombstones 1000] [--workers N]
        [--cleaner-max-share X] [--gateway-log-level INFO] [--timeline FILE]

Without --bootstrap it starts its own `tmsgate serve` (LevelDB in a temp dir) with
`--cleaner-backoff-ms 1000` (and, with --cold, `--cleaner-produced-keys-mb 0`: the cleaner
reads every row back from the disk, as after a restart) and its defaults otherwise (at
--gateway-log-level INFO its log has each cleaner pass's wall and CPU time); with
--bootstrap it measures any broker, e.g. Apache Kafka 4.1 started with
`log.cleaner.backoff.ms=1000` (say so beside the figures).

The workload (1 KiB values, confluent-kafka, acks=all, one partition):
1. `write`: after an untimed warm-up (--plain records to a plain topic), --records
   records over --keys keys to a compacted topic (cleanup.policy
   compact, segment.bytes 16 MiB, segment.ms 1000, min.cleanable.dirty.ratio 0.01 (with
   Kafka's 0.5 the tail written after its last pass stays dirty), defaults otherwise), then
   --tombstones tombstones for distinct keys; after segment.ms one more record (key
   `__roll__`), since Kafka never cleans its active segment and rolls it only when a
   record arrives after segment.ms (tmsgate's head ends by time the same way).
   The topic is created with min.compaction.lag.ms 1 h, so that nothing is cleaned while
   it is written; IncrementalAlterConfigs then sets it to 0, which starts the cleaning.
2. `baseline` and `during`: a producer in a process of its own (one confluent-kafka
   producer, as fast as the broker acknowledges) writes another plain topic from
   --baseline-s before that alteration until the compacted topic is clean; its
   acknowledgements, sampled every 50 ms, give its msgs/s before the cleaning (less the
   first second) and while the cleaner works, and `during_ratio` (target: >= 0.8).
3. `cleaned_s`: from the alteration until a read of the compacted
   topic from offset 0 returns each key at most once (the latest value or tombstone of
   every key: --keys + 1 records), probed every half second (each probe reads up to the
   topic's last offset or past --keys + 1 records); `cleaner_records_per_s` is
   --records + --tombstones over it. Every probe checks that each key it sees holds its
   latest value or a tombstone, in offset order. Then, as long again, the same probes
   of the clean topic with nothing to clean: `probes_only_ratio` is the producer's rate
   then over the baseline, what the probes alone cost it.
4. With --data-dir (the self-started gateway's store always): its size on disk when
   clean and --settle-s later (the janitor's pass collects value-log segments every 60 s;
   Kafka deletes cleaned segments after file.delete.delay.ms, 60 s).
Progress goes to stderr, one JSON summary to stdout.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kafka_clients_bench import (
    ck_common,
    dir_bytes,
    log,
    proc_cpu_seconds,
    self_started_gateway,
)

VALUE = bytes(1024)
PLAIN_RECORDS = 200_000
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": str(16 << 20),
    "segment.ms": "1000",
    # Kafka cleans only once the dirty part is half the log (the default 0.5): what the
    # cleaner had not reached before the last writes then stays dirty for good.
    "min.cleanable.dirty.ratio": "0.01",
    # Nothing is cleaned while the topic is written: set to 0 once it is, which starts
    # the cleaning the benchmark times (with 0 from the start both clean as it is written).
    "min.compaction.lag.ms": "3600000",
}


def create(bootstrap: str, prefix: str, config: dict[str, str], avoid: int | None = None) -> str:
    """A fresh one-partition topic; with ``avoid``, one whose leader is another broker
    (`--workers`: the topic produced during the cleaning led by another worker than the
    cleaned one, so that the cleaner and that producer use different processes)."""
    admin = AdminClient(ck_common(bootstrap))
    for _ in range(20):
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        admin.create_topics([NewTopic(name, 1, 1, config=config)])[name].result(60)
        if avoid is None or leader_of(bootstrap, name) != avoid:
            return name
    raise RuntimeError(f"no topic led by another broker than {avoid} in 20 tries")


def leader_of(bootstrap: str, topic: str) -> int:
    admin = AdminClient(ck_common(bootstrap))
    deadline = time.monotonic() + 30
    while True:
        leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
        if leader >= 0 or time.monotonic() > deadline:
            return leader
        time.sleep(0.1)


def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None]]) -> float:
    """Seconds to produce ``records`` (key, value) with acks=all, every report checked."""
    p = confluent_kafka.Producer(
        {**ck_common(bootstrap), "acks": "all", "linger.ms": 5, "batch.size": 1_000_000}
    )
    failed: list[str] = []

    def done(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(str(err))

    p.list_topics(topic, timeout=30)
    started = time.perf_counter()
    for key, value in records:
        while True:
            try:
                p.produce(topic, value, key, partition=0, on_delivery=done)
                break
            except BufferError:
                p.poll(0.005)
        p.poll(0)
    if p.flush(120) or failed:
        raise RuntimeError(f"produce to {topic}: {len(failed)} failed, first {failed[:3]}")
    return time.perf_counter() - started


def probe(bootstrap: str, topic: str, latest: dict[bytes, bytes | None], limit: int) -> int:
    """Records a read from offset 0 returns, stopping past ``limit``; checks what it sees."""
    c = confluent_kafka.Consumer(
        {
            **ck_common(bootstrap),
            "group.id": f"probe-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 4 << 20,
            # librdkafka prefetches up to 64 MiB by default: a probe of a dirty topic
            # would have the broker send ~60 MB it never looks at, a load on the broker
            # (and the machine) that the steady producer would count against the cleaner
            "queued.max.messages.kbytes": 4096,
        }
    )
    tp = confluent_kafka.TopicPartition(topic, 0)
    _, high = c.get_watermark_offsets(tp, timeout=30)
    c.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    seen: set[bytes] = set()
    count, last = 0, -1
    quiet_since = time.monotonic()
    try:
        while count <= limit and last < high - 1:
            # Short waits: a consume(1000, 1.0) holding fewer than 1,000 records waits out
            # its whole second, which would add about a second to every broker's figure.
            msgs = c.consume(1000, 0.05)
            if not msgs:
                if time.monotonic() - quiet_since > 10:
                    break
                continue
            quiet_since = time.monotonic()
            for m in msgs:
                if m.error():
                    raise RuntimeError(str(m.error()))
                assert m.offset() > last, "offsets go up"
                last = m.offset()
                count += 1
                if m.key() in seen:
                    count = limit + 1  # a key twice: not clean yet
                seen.add(m.key())
    finally:
        c.close()
    if count <= limit:
        for key, value in latest.items():
            if value is not None and key not in seen:
                raise RuntimeError(f"key {key!r} lost its latest value")
    return count


def _steady_process(bootstrap: str, topic: str, stop: Any, ready: Any, out: Any) -> None:
    """Produce 1 KiB records to ``topic`` (acks=all) as fast as the broker takes them until
    ``stop`` is set; put into ``out`` its timeline: (wall time, records acknowledged so far)
    every 50 ms. A process of its own, so that the probes' Python in the main one (a
    consumer reading thousands of records) does not slow it down."""
    p = confluent_kafka.Producer(
        {**ck_common(bootstrap), "acks": "all", "linger.ms": 5, "batch.size": 1_000_000}
    )
    p.list_topics(topic, timeout=30)
    timeline: list[tuple[float, int]] = []
    sent, next_mark = 0, 0.0
    ready.set()
    while not stop.is_set():
        try:
            p.produce(topic, VALUE, partition=0)
            sent += 1
        except BufferError:
            p.poll(0.005)
        if sent % 256 == 0:
            p.poll(0)
            now = time.time()
            if now >= next_mark:
                timeline.append((now, sent - len(p)))  # acknowledged: sent, not in flight
                next_mark = now + 0.05
    p.flush(120)
    timeline.append((time.time(), sent - len(p)))
    out.put(timeline)


class SteadyProducer:
    """_steady_process, producing once the constructor returns."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        ctx = multiprocessing.get_context("spawn")  # librdkafka's threads do not survive fork
        self._stop, self._out, ready = ctx.Event(), ctx.Queue(), ctx.Event()
        args = (bootstrap, topic, self._stop, ready, self._out)
        self._proc = ctx.Process(target=_steady_process, args=args, daemon=True)
        self._proc.start()
        if not ready.wait(120):
            raise RuntimeError("the producer process did not start")

    def timeline(self) -> list[tuple[float, int]]:
        self._stop.set()
        found: list[tuple[float, int]] = self._out.get(timeout=300)
        self._proc.join(30)
        return found


def rate_between(timeline: list[tuple[float, int]], start: float, end: float) -> float:
    """Records acknowledged per second from ``start`` to ``end`` (wall times), from the
    timeline's marks nearest inside that span."""
    inside = [(t, n) for t, n in timeline if start <= t <= end]
    if len(inside) < 2:
        raise RuntimeError(f"too few marks between {start:.2f} and {end:.2f}")
    (t0, n0), (t1, n1) = inside[0], inside[-1]
    return (n1 - n0) / (t1 - t0)


def run(bootstrap: str, args: argparse.Namespace, pid: int | None) -> dict[str, object]:
    report: dict[str, object] = {}
    plain = [(None, VALUE)] * args.plain
    produce(bootstrap, create(bootstrap, "warmup", {}), plain)  # untimed
    topic = create(bootstrap, "compacted", COMPACTED)
    keys = [b"key-%06d" % i for i in range(args.keys)]
    records: list[tuple[bytes | None, bytes | None]] = [
        (keys[i % args.keys], VALUE) for i in range(args.records)
    ]
    records += [(keys[i], None) for i in range(args.tombstones)]
    latest = {k: v for k, v in records}
    seconds = produce(bootstrap, topic, records)
    report["write_msgs_per_s"] = round(len(records) / seconds)
    log(f"compacted topic written: {len(records)} records, {report['write_msgs_per_s']} msgs/s")
    time.sleep(1.1)  # past segment.ms: the next record rolls Kafka's segment
    produce(bootstrap, topic, [(b"__roll__", b"x")])
    latest[b"__roll__"] = b"x"
    avoid = leader_of(bootstrap, topic) if args.workers > 1 else None
    during_topic = create(bootstrap, "during", {}, avoid=avoid)

    # The cleaner starts now: min.compaction.lag.ms held it off while the topic was written.
    admin = AdminClient(ck_common(bootstrap))
    lag = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("min.compaction.lag.ms", "0", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    steady = SteadyProducer(bootstrap, during_topic)
    time.sleep(args.baseline_s)  # the baseline: the same producer before the cleaning
    altered_at = time.time()
    admin.incremental_alter_configs([lag])[lag].result(30)
    written_at = time.monotonic()
    cpu0 = proc_cpu_seconds(pid) if pid else None
    limit = args.keys + 1
    probes = 0
    while True:
        time.sleep(0.5)
        probes += 1
        got = probe(bootstrap, topic, latest, limit)
        log(f"probe {probes}: {'more than ' + str(limit) if got > limit else got} records")
        if got <= limit:
            break
        if time.monotonic() - written_at > args.timeout_s:
            raise RuntimeError(f"not compacted within {args.timeout_s} s")
    cleaned = time.monotonic() - written_at
    clean_at = time.time()
    cpu_clean = proc_cpu_seconds(pid) if pid else None
    # The control: as long again, the same probes of the topic now clean, with no
    # cleaning. What produce loses here is the probes' cost (the broker serving them,
    # the probing process on the same cores), not the cleaner's.
    control_probes = 0
    while time.time() - clean_at < cleaned or control_probes < 1:
        time.sleep(0.5)
        control_probes += 1
        probe(bootstrap, topic, latest, limit)
    control_end = time.time()
    timeline = steady.timeline()
    if args.timeline:  # for a look at the spread: wall time from the alteration, acked
        Path(args.timeline).write_text("".join(f"{t - altered_at:.3f} {n}\n" for t, n in timeline))
    report["baseline_msgs_per_s"] = round(
        rate_between(timeline, altered_at - args.baseline_s + 1, altered_at)
    )
    report["cleaned_s"] = round(cleaned, 1)
    report["cleaner_records_per_s"] = round(len(records) / cleaned)
    report["during_msgs_per_s"] = round(rate_between(timeline, altered_at, clean_at))
    report["during_ratio"] = round(report["during_msgs_per_s"] / report["baseline_msgs_per_s"], 2)  # type: ignore[operator]
    report["probes_only_msgs_per_s"] = round(rate_between(timeline, clean_at, control_end))
    report["probes_only_ratio"] = round(
        report["probes_only_msgs_per_s"] / report["baseline_msgs_per_s"],  # type: ignore[operator]
        2,
    )
    if cpu0 is not None and pid:
        report["broker_cpu_s_until_clean"] = round(cpu_clean - cpu0, 1)  # type: ignore[operator]
    if args.data_dir:
        report["data_bytes_when_clean"] = dir_bytes(Path(args.data_dir))
        time.sleep(args.settle_s)  # the janitor's pass / Kafka's file.delete.delay.ms
        report[f"data_bytes_{args.settle_s:.0f}s_later"] = dir_bytes(Path(args.data_dir))
    log(f"cleaned in {cleaned:.1f} s; produce during cleaning {report['during_ratio']}x baseline")
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bootstrap", help="measure this broker instead of a fresh gateway")
    ap.add_argument("--broker-pid", type=int, help="its pid, for its CPU time")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--tombstones", type=int, default=1_000)
    ap.add_argument("--plain", type=int, default=PLAIN_RECORDS)
    ap.add_argument("--baseline-s", type=float, default=6.0, help="how long the baseline produces")
    ap.add_argument("--timeout-s", type=float, default=900)
    ap.add_argument("--data-dir", help="the broker's data directory, to measure space reclaimed")
    ap.add_argument("--settle-s", type=float, default=65.0)
    ap.add_argument(
        "--cleaner-max-share",
        type=float,
        help="the gateway's --cleaner-max-share (default: its own)",
    )
    ap.add_argument(
        "--workers",
        type=int,
        default=1,
        help="the gateway's --workers; above 1, the topic produced during the cleaning is "
        "led by another worker than the cleaned topic",
    )
    ap.add_argument(
        "--cold",
        action="store_true",
        help="the gateway's cleaner reads every row back (--cleaner-produced-keys-mb 0), as "
        "after a restart or beyond that memory",
    )
    ap.add_argument("--gateway-log-level", default="WARNING", help="INFO: the cleaner's passes too")
    ap.add_argument("--timeline", help="write the steady producer's acknowledgements here")
    ap.add_argument("--quick", action="store_true", help="100,000 records over 1,000 keys")
    args = ap.parse_args()
    if args.quick:
        args.records, args.keys, args.tombstones, args.plain = 100_000, 1_000, 100, 50_000
    out: dict[str, object] = {"records": args.records, "keys": args.keys}
    if args.bootstrap:
        out.update(broker=args.bootstrap, **run(args.bootstrap, args, args.broker_pid))
    else:
        gw: dict[str, object] = {}
        extra = ["--cleaner-backoff-ms", "1000"]
        if args.cleaner_max_share is not None:
            extra += ["--cleaner-max-share", str(args.cleaner_max_share)]
        extra += ["--workers", str(args.workers), "--log-level", args.gateway_log_level]
        if args.cold:
            extra += ["--cleaner-produced-keys-mb", "0"]
        with self_started_gateway(gw, "tmsgate-compaction-bench-", extra) as bootstrap:
            args.data_dir = gw["store_dir"]
            out.update(broker="tmsgate", **run(bootstrap, args, int(gw["pid"])))  # type: ignore[arg-type]
        out["gateway"] = gw
    print(json.dumps(out))


if __name__ == "__main__":
    main()
