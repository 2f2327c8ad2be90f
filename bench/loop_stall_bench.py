"""Does one huge request stall everyone else? Produce latency beside huge requests.

    .venv/bin/python bench/loop_stall_bench.py [--seconds 8] [--rate 200] [--attackers 1]
        [--attack metadata,describe_configs,...] [--bootstrap host:port]

Starts `tmsgate serve` on a temp store (unless --bootstrap is given), then runs a
confluent-kafka producer (acks=all, linger.ms=0) at --rate messages a second and
measures each message's produce-to-acknowledgement latency: first alone, then while
--attackers raw connections send one kind of ~1 MB request naming ~40k-500k items
after another. Beside it a probe connection sends a one-topic Metadata request every
10 ms: its round trip shows the event loop's stalls without the fsync that every
acknowledgement waits for (on a shared disk, fsync alone can reach 100 ms), and a disk
probe fsyncs a small file in the same temp directory every 10 ms: its p99/max show when the
disk, not the gateway, delayed acknowledgements. Prints p50/p99/max per phase, how many
huge requests were answered and their median time, and a JSON summary. Target: produce
p99 under 50 ms in every phase.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from kafka.protocol.admin import (
    CreateTopicsRequest,
    DeleteGroupsRequest,
    DeleteTopicsRequest,
    DescribeConfigsRequest,
    DescribeGroupsRequest,
    IncrementalAlterConfigsRequest,
)
from kafka.protocol.consumer import (
    FetchRequest,
    ListOffsetsRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
)
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest

VENV_BIN = Path(sys.executable).parent
TOPIC = "stall-bench"
ONE_MB = 1 << 20


def _names(n: int, prefix: str = "t") -> list[str]:
    return [f"{prefix}{i:06d}" for i in range(n)]


# Each builder -> (request object, version): about 1 MB naming as many items as fit.
def metadata_empty() -> tuple[Any, int]:
    """The issue's case: Metadata v1 naming 500,000 (empty, invalid) topics."""
    topics = [MetadataRequest.MetadataRequestTopic(name="") for _ in range(500_000)]
    return MetadataRequest(topics=topics, allow_auto_topic_creation=True), 1


def metadata_unknown() -> tuple[Any, int]:
    """Metadata v4 naming ~110k distinct valid topics that do not exist (no auto-create)."""
    topics = [MetadataRequest.MetadataRequestTopic(name=n) for n in _names(110_000)]
    return MetadataRequest(topics=topics, allow_auto_topic_creation=False), 4


def describe_configs() -> tuple[Any, int]:
    res = DescribeConfigsRequest.DescribeConfigsResource
    resources = [
        res(resource_type=2, resource_name=n, configuration_keys=None) for n in _names(100_000)
    ]
    return DescribeConfigsRequest(resources=resources, include_synonyms=False), 1


def list_offsets() -> tuple[Any, int]:
    part = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition
    parts = [part(partition_index=i, timestamp=-1, current_leader_epoch=-1) for i in range(80_000)]
    topic = ListOffsetsRequest.ListOffsetsTopic(name=TOPIC, partitions=parts)
    return ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[topic]), 1


def fetch() -> tuple[Any, int]:
    part = FetchRequest.FetchTopic.FetchPartition
    parts = [
        part(partition=i, fetch_offset=0, partition_max_bytes=1024, log_start_offset=-1)
        for i in range(40_000)
    ]
    topics = [FetchRequest.FetchTopic(topic=TOPIC, partitions=parts)]
    req = FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=ONE_MB,
        isolation_level=0,
        topics=topics,
        forgotten_topics_data=[],
    )
    return req, 4


def offset_fetch() -> tuple[Any, int]:
    topic = OffsetFetchRequest.OffsetFetchRequestTopic
    topics = [topic(name=n, partition_indexes=[0]) for n in _names(80_000)]
    return OffsetFetchRequest(group_id="stall-bench", topics=topics), 1


def offset_commit() -> tuple[Any, int]:
    topic = OffsetCommitRequest.OffsetCommitRequestTopic
    part = topic.OffsetCommitRequestPartition
    topics = [
        topic(
            name=n, partitions=[part(partition_index=0, committed_offset=0, committed_metadata="")]
        )
        for n in _names(60_000)
    ]
    req = OffsetCommitRequest(
        group_id="stall-bench", generation_id_or_member_epoch=-1, member_id="", topics=topics
    )
    return req, 2


def create_topics() -> tuple[Any, int]:
    """Invalid names only, so the store is not filled with topics."""
    topic = CreateTopicsRequest.CreatableTopic
    topics = [
        topic(
            name=f"bad name {n}", num_partitions=1, replication_factor=1, assignments=[], configs=[]
        )
        for n in _names(50_000)
    ]
    return CreateTopicsRequest(topics=topics, timeout_ms=5000, validate_only=True), 2


def delete_topics() -> tuple[Any, int]:
    return DeleteTopicsRequest(topic_names=_names(100_000), timeout_ms=5000), 1


def produce() -> tuple[Any, int]:
    """acks=1 naming ~100k partitions of the bench topic, all but partition 0 unknown (v7:
    its answer carries no error messages, so it stays near 2 MB)."""
    part = ProduceRequest.TopicProduceData.PartitionProduceData
    parts = [part(index=i, records=None) for i in range(1, 100_000)]
    topic = ProduceRequest.TopicProduceData(name=TOPIC, partition_data=parts)
    return ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[topic]), 7


def alter_configs() -> tuple[Any, int]:
    """IncrementalAlterConfigs of ~25k topics whose names are invalid (refused unwritten)."""
    res = IncrementalAlterConfigsRequest.AlterConfigsResource
    cfg = res.AlterableConfig
    resources = [
        res(
            resource_type=2,
            resource_name=f"bad name {n}",
            configs=[cfg(name="retention.ms", config_operation=0, value="60000")],
        )
        for n in _names(25_000)
    ]
    return IncrementalAlterConfigsRequest(resources=resources, validate_only=True), 0


def describe_groups() -> tuple[Any, int]:
    return DescribeGroupsRequest(groups=_names(100_000, "g")), 0


def delete_groups() -> tuple[Any, int]:
    return DeleteGroupsRequest(groups_names=_names(100_000, "g")), 0


def offset_delete() -> tuple[Any, int]:
    topic = OffsetDeleteRequest.OffsetDeleteRequestTopic
    part = topic.OffsetDeleteRequestPartition
    topics = [topic(name=TOPIC, partitions=[part(partition_index=i) for i in range(200_000)])]
    return OffsetDeleteRequest(group_id="stall-bench", topics=topics), 0


ATTACKS: dict[str, Callable[[], tuple[Any, int]]] = {
    f.__name__: f
    for f in (
        metadata_empty,
        metadata_unknown,
        describe_configs,
        list_offsets,
        fetch,
        offset_fetch,
        offset_commit,
        create_topics,
        delete_topics,
        produce,
        alter_configs,
        describe_groups,
        delete_groups,
        offset_delete,
    )
}


def encoded(attack: str) -> bytes:
    req, version = ATTACKS[attack]()
    req.with_header(correlation_id=1, client_id="stall-bench")
    return bytes(req.encode(version=version, header=True, framed=True))


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), ONE_MB))
        if not chunk:
            raise ConnectionError("gateway closed the connection")
        buf += chunk
    return bytes(buf)


class Attacker(threading.Thread):
    """Sends one huge request after another on its own connection until stopped."""

    def __init__(self, address: tuple[str, int], frame: bytes, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.address, self.frame, self.stop = address, frame, stop
        self.seconds: list[float] = []
        self.error: str | None = None

    def run(self) -> None:
        try:
            with socket.create_connection(self.address, timeout=300) as sock:
                while not self.stop.is_set():
                    started = time.perf_counter()
                    sock.sendall(self.frame)
                    size = struct.unpack(">i", _recv_exact(sock, 4))[0]
                    _recv_exact(sock, size)
                    self.seconds.append(time.perf_counter() - started)
        except OSError as exc:
            self.error = f"{type(exc).__name__}: {exc}"


class Probe(threading.Thread):
    """Small Metadata requests on a connection of their own: round trips in ms."""

    def __init__(self, address: tuple[str, int], stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.address, self.stop = address, stop
        self.ms: list[float] = []
        req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)])
        req.with_header(correlation_id=1, client_id="stall-probe")
        self.frame = bytes(req.encode(version=1, header=True, framed=True))

    def run(self) -> None:
        with socket.create_connection(self.address, timeout=300) as sock:
            while not self.stop.wait(0.01):
                started = time.perf_counter()
                sock.sendall(self.frame)
                _recv_exact(sock, struct.unpack(">i", _recv_exact(sock, 4))[0])
                self.ms.append((time.perf_counter() - started) * 1000)


class DiskProbe(threading.Thread):
    """fsync of a small append every 10 ms, in ms: the disk's own latency meanwhile."""

    def __init__(self, directory: Path, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.path, self.stop = directory / "disk-probe", stop
        self.ms: list[float] = []

    def run(self) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            while not self.stop.wait(0.01):
                started = time.perf_counter()
                os.write(fd, b"x" * 100)
                os.fsync(fd)
                self.ms.append((time.perf_counter() - started) * 1000)
        finally:
            os.close(fd)


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def produce_for(bootstrap: str, seconds: float, rate: float) -> dict[str, Any]:
    """Produce at ``rate`` for ``seconds``: latencies (ms) of acknowledged messages."""
    latencies: list[float] = []
    failures: list[str] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 0,
            "message.timeout.ms": 60_000,
        }
    )

    def delivered(err: Any, msg: Any, sent: float) -> None:
        if err is not None:
            failures.append(str(err))
        else:
            latencies.append((time.perf_counter() - sent) * 1000)

    interval = 1.0 / rate
    start = time.perf_counter()
    n = 0
    while (now := time.perf_counter()) - start < seconds:
        due = start + n * interval
        if now >= due:
            sent = time.perf_counter()
            producer.produce(TOPIC, b"x" * 100, on_delivery=lambda e, m, s=sent: delivered(e, m, s))
            n += 1
        producer.poll(max(0.0, min(0.001, due + interval - time.perf_counter())))
    left = producer.flush(60)
    return {
        "sent": n,
        "acked": len(latencies),
        "failed": len(failures) + left,
        "p50_ms": round(percentile(latencies, 50), 2),
        "p99_ms": round(percentile(latencies, 99), 2),
        "max_ms": round(max(latencies, default=float("nan")), 2),
    }


def phase(
    bootstrap: str, attack: str | None, attackers: int, seconds: float, rate: float, tmp: Path
) -> dict[str, Any]:
    host, port = bootstrap.rsplit(":", 1)
    stop = threading.Event()
    probe = Probe((host, int(port)), stop)
    disk = DiskProbe(tmp, stop)
    threads = []
    if attack is not None:
        frame = encoded(attack)
        threads = [Attacker((host, int(port)), frame, stop) for _ in range(attackers)]
        for t in threads:
            t.start()
        time.sleep(0.2)  # let the first huge requests arrive before measuring
    probe.start()
    disk.start()
    result = produce_for(bootstrap, seconds, rate)
    stop.set()
    for t in [probe, disk, *threads]:
        t.join(300)
    seconds_each = [s for t in threads for s in t.seconds]
    result.update(
        attack=attack or "none",
        probe_p50_ms=round(percentile(probe.ms, 50), 2),
        probe_p99_ms=round(percentile(probe.ms, 99), 2),
        disk_fsync_p99_ms=round(percentile(disk.ms, 99), 2),
        disk_fsync_max_ms=round(max(disk.ms, default=float("nan")), 2),
        huge_requests_answered=len(seconds_each),
        huge_request_p50_s=round(percentile(seconds_each, 50), 3) if seconds_each else None,
        attacker_errors=[t.error for t in threads if t.error],
    )
    return result


def start_gateway(store: Path, port: int, extra: list[str]) -> subprocess.Popen[bytes]:
    args = [str(VENV_BIN / "tmsgate"), "serve", "--store", f"leveldb://{store}"]
    args += ["--kafka-listen", f"127.0.0.1:{port}", "--no-http", "--log-level", "WARNING", *extra]
    proc = subprocess.Popen(args)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("gateway did not start")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=8.0, help="produce time per phase")
    ap.add_argument("--rate", type=float, default=200.0, help="messages a second")
    ap.add_argument("--attackers", type=int, default=1, help="connections sending huge requests")
    ap.add_argument("--attack", default=",".join(ATTACKS), help="comma-separated kinds")
    ap.add_argument("--bootstrap", help="use this gateway instead of starting one")
    ap.add_argument("--serve-arg", action="append", default=[], help="extra `tmsgate serve` arg")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tmsgate-stall-"))
    proc = None
    try:
        bootstrap = args.bootstrap
        if bootstrap is None:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            proc = start_gateway(tmp / "store", port, args.serve_arg)
            bootstrap = f"127.0.0.1:{port}"
        produce_for(bootstrap, 1.0, args.rate)  # create the topic, warm up
        results = []
        for attack in [None, *args.attack.split(",")]:
            r = phase(bootstrap, attack, args.attackers, args.seconds, args.rate, tmp)
            results.append(r)
            print(
                f"{r['attack']:>17}: produce p50 {r['p50_ms']:6.1f} p99 {r['p99_ms']:6.1f}"
                f" max {r['max_ms']:6.1f} ms, acked {r['acked']}/{r['sent']}"
                f" failed {r['failed']}; probe p50 {r['probe_p50_ms']:5.1f}"
                f" p99 {r['probe_p99_ms']:6.1f} ms; disk fsync p99 {r['disk_fsync_p99_ms']:5.1f}"
                f" max {r['disk_fsync_max_ms']:6.1f} ms; huge answered"
                f" {r['huge_requests_answered']} (p50 {r['huge_request_p50_s']} s)"
                f" {' '.join(r['attacker_errors'])}",
                flush=True,
            )
        print(json.dumps(results))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
