"""Kafka gateway benchmark: produce and fetch throughput through a real `tmsgate serve`.

    .venv/bin/python bench/kafka_gateway_bench.py [--batches 200] [--records 500] [--size 1024]

A raw client (kafka-python's protocol classes, aiokafka's batch builder) keeps
--in-flight Produce requests pipelined on --connections connections, then reads the
topic back with Fetch. Client-side work is done before timing, so the figures are the
gateway's (decode, store publish with fsync, encode) rather than a client library's.
Prints one line per phase and a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

VENV_BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("gateway closed the connection")
        buf += chunk
    return bytes(buf)


def recv_frame(sock: socket.socket) -> bytes:
    return recv_exact(sock, struct.unpack(">i", recv_exact(sock, 4))[0])


def produce_frames(topic: str, batches: int, records: int, size: int, codec: int) -> list[bytes]:
    value = os.urandom(size // 2) * 2  # half-compressible, like typical JSON-ish payloads
    frames = []
    for i in range(batches):
        b = DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, 1 << 30)
        for j in range(records):
            b.append(j, int(time.time() * 1000), b"key-%d" % j, value, [])
        pd = ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=bytes(b.build()))
        req = ProduceRequest(
            transactional_id=None,
            acks=-1,
            timeout_ms=30000,
            topic_data=[ProduceRequest.TopicProduceData(name=topic, partition_data=[pd])],
        )
        req.with_header(correlation_id=i, client_id="bench")
        frames.append(bytes(req.encode(version=9, header=True, framed=True)))
    return frames


def produce(address: tuple[str, int], frames: list[bytes], in_flight: int) -> None:
    sock = socket.create_connection(address)
    sent = received = 0
    while received < len(frames):
        while sent < len(frames) and sent - received < in_flight:
            sock.sendall(frames[sent])
            sent += 1
        resp = ProduceResponse.decode(recv_frame(sock), version=9, header=True)
        assert resp.responses[0].partition_responses[0].error_code == 0
        received += 1
    sock.close()


def fetch_all(address: tuple[str, int], topic: str, total: int, max_bytes: int) -> int:
    sock = socket.create_connection(address)
    offset = cid = 0
    fetched_bytes = 0
    while offset < total:
        part = FetchRequest.FetchTopic.FetchPartition(
            partition=0,
            fetch_offset=offset,
            partition_max_bytes=max_bytes,
            log_start_offset=-1,
            current_leader_epoch=-1,
            last_fetched_epoch=-1,
        )
        req = FetchRequest(
            replica_id=-1,
            max_wait_ms=500,
            min_bytes=1,
            max_bytes=max_bytes,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=[FetchRequest.FetchTopic(topic=topic, partitions=[part])],
            forgotten_topics_data=[],
            rack_id="",
        )
        cid += 1
        req.with_header(correlation_id=cid, client_id="bench")
        sock.sendall(req.encode(version=12, header=True, framed=True))
        resp = FetchResponse.decode(recv_frame(sock), version=12, header=True)
        records = resp.responses[0].partitions[0].records or b""
        fetched_bytes += len(records)
        pos = 0
        while pos + 12 <= len(records):  # next offset of the last batch
            length = struct.unpack_from(">i", records, pos + 8)[0]
            base = struct.unpack_from(">q", records, pos)[0]
            lod = struct.unpack_from(">i", records, pos + 23)[0]
            offset = base + lod + 1
            pos += 12 + length
    sock.close()
    return fetched_bytes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--records", type=int, default=500)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--codec", type=int, default=0, help="0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd")
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--in-flight", type=int, default=5)
    ap.add_argument("--fetch-bytes", type=int, default=4 << 20)
    args = ap.parse_args()

    workdir = tempfile.mkdtemp(prefix="tmsgate-bench-")
    port = free_port()
    proc = subprocess.Popen(
        [
            str(VENV_BIN / "tmsgate"),
            "serve",
            "--store",
            f"leveldb://{workdir}/store",
            "--kafka-listen",
            f"127.0.0.1:{port}",
            "--no-http",
            "--log-level",
            "WARNING",
        ]
    )
    address = ("127.0.0.1", port)
    try:
        for _ in range(200):
            try:
                socket.create_connection(address, 0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        per_conn = [
            produce_frames(
                "bench", args.batches // args.connections, args.records, args.size, args.codec
            )
            for _ in range(args.connections)
        ]
        produce(address, per_conn[0][:1], 1)  # create the topic outside the timing
        total = 1 + sum(len(f) for f in per_conn) * args.records - args.records
        started = time.perf_counter()
        threads = [
            threading.Thread(target=produce, args=(address, f[1:] if i == 0 else f, args.in_flight))
            for i, f in enumerate(per_conn)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        produce_s = time.perf_counter() - started
        total = sum(len(f) for f in per_conn) * args.records
        mb = total * args.size / 1e6
        print(
            f"produce: {total} records in {produce_s:.2f}s = {total / produce_s:,.0f} rec/s, "
            f"{mb / produce_s:.1f} MB/s (acks=all, fsync)",
            file=sys.stderr,
        )
        started = time.perf_counter()
        fetched = fetch_all(address, "bench", total, args.fetch_bytes)
        fetch_s = time.perf_counter() - started
        print(
            f"fetch:   {total} records in {fetch_s:.2f}s = {total / fetch_s:,.0f} rec/s, "
            f"{fetched / 1e6 / fetch_s:.1f} MB/s",
            file=sys.stderr,
        )
        print(
            json.dumps(
                {
                    "records": total,
                    "record_bytes": args.size,
                    "codec": args.codec,
                    "produce_rec_s": round(total / produce_s),
                    "fetch_rec_s": round(total / fetch_s),
                }
            )
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
