"""Consumer-group benchmarks over the Kafka wire protocol, against any broker.

    .venv/bin/python bench/groups_bench.py                       # starts a tmsgate gateway
    .venv/bin/python bench/groups_bench.py --bootstrap host:9092 # or any Kafka broker

Measures, with raw requests (kafka-python's classes, one asyncio connection per member,
so client libraries' own timers do not blur the numbers):

- formation: N members join an empty group at once until all have their assignment
  (includes the broker's group.initial.rebalance.delay.ms, which is printed);
- rebalance: every member of the stable group rejoins at once (what a membership change
  makes them do) until all have their new assignment: the coordinator's join and sync
  barriers, without heartbeat-interval latency;
- membership change: one member joins a stable group whose members heartbeat every
  --heartbeat-ms, until all have synced in the new generation;
- commits/s: C connections each committing one offset at a time (OffsetCommit, answered
  after fsync on tmsgate), for --seconds; reports commits/s and latency percentiles.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

from kafka.protocol.consumer import (
    HeartbeatRequest,
    JoinGroupRequest,
    OffsetCommitRequest,
    SyncGroupRequest,
)
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription
from kafka.protocol.metadata import FindCoordinatorRequest
from tmsgate.protocol import response_class

JOIN_V, SYNC_V, HEARTBEAT_V, COMMIT_V = 5, 3, 3, 8
MEMBER_ID_REQUIRED, REBALANCE_IN_PROGRESS = 79, 27
LAUNCHER = """
import sys
from tmsgate.gateway.kafka import handlers
from tmsgate.gateway.kafka.handlers.group_routes import GROUP_ROUTES
served = {r.api_key for r in handlers.ROUTES}
handlers.ROUTES.extend(r for r in GROUP_ROUTES if r.api_key not in served)
from tmsgate.gateway.cli import main
sys.exit(main(sys.argv[1:]))
"""


class Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.cid = reader, writer, 0

    @classmethod
    async def open(cls, host: str, port: int) -> Conn:
        return cls(*await asyncio.open_connection(host, port))

    async def call(self, req_cls: Any, version: int, **fields: Any) -> Any:
        self.cid += 1
        req = req_cls(version=version, **fields)
        req.with_header(correlation_id=self.cid, client_id="groups-bench")
        self.writer.write(bytes(req.encode(header=True, framed=True)))
        (size,) = struct.unpack(">i", await self.reader.readexactly(4))
        frame = await self.reader.readexactly(size)
        return response_class(req_cls.API_KEY, version).decode(frame, version=version, header=True)

    def close(self) -> None:
        self.writer.close()


class Member:
    """One group member speaking the classic protocol (KIP-394 join)."""

    def __init__(self, conn: Conn, group: str, topic: str) -> None:
        self.conn, self.group = conn, group
        self.meta = bytes(
            ConsumerProtocolSubscription(version=0, topics=[topic], user_data=None).encode()
        )
        self.member_id, self.generation = "", -1

    async def join(self) -> Any:
        while True:
            proto = JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=self.meta)
            r = await self.conn.call(
                JoinGroupRequest,
                JOIN_V,
                group_id=self.group,
                session_timeout_ms=30000,
                rebalance_timeout_ms=30000,
                member_id=self.member_id,
                group_instance_id=None,
                protocol_type="consumer",
                protocols=[proto],
            )
            if r.error_code == MEMBER_ID_REQUIRED:
                self.member_id = r.member_id
                continue
            if r.error_code == REBALANCE_IN_PROGRESS:
                continue
            if r.error_code:
                raise RuntimeError(f"JoinGroup failed: error {r.error_code}")
            self.member_id, self.generation = r.member_id, r.generation_id
            return r

    async def sync(self, joined: Any) -> bytes:
        plan = [
            SyncGroupRequest.SyncGroupRequestAssignment(member_id=m.member_id, assignment=b"a")
            for m in joined.members
        ]
        r = await self.conn.call(
            SyncGroupRequest,
            SYNC_V,
            group_id=self.group,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=None,
            assignments=plan,
        )
        if r.error_code:
            raise RuntimeError(f"SyncGroup failed: error {r.error_code}")
        return bytes(r.assignment)

    async def rejoin(self) -> None:
        await self.sync(await self.join())

    async def heartbeat(self) -> int:
        r = await self.conn.call(
            HeartbeatRequest,
            HEARTBEAT_V,
            group_id=self.group,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=None,
        )
        return int(r.error_code)


async def coordinator(host: str, port: int, group: str) -> tuple[str, int]:
    conn = await Conn.open(host, port)
    try:
        r = await conn.call(FindCoordinatorRequest, 3, key=group, key_type=0)
        if r.error_code:
            raise RuntimeError(f"FindCoordinator failed: error {r.error_code}")
        return r.host, r.port
    finally:
        conn.close()


async def members_for(host: str, port: int, group: str, topic: str, n: int) -> list[Member]:
    chost, cport = await coordinator(host, port, group)
    return [Member(await Conn.open(chost, cport), group, topic) for _ in range(n)]


async def bench_rebalances(
    host: str, port: int, topic: str, n: int, rounds: int, heartbeat_ms: int
) -> dict[str, Any]:
    group = f"bench-{uuid.uuid4().hex[:8]}"
    members = await members_for(host, port, group, topic, n)
    start = time.perf_counter()
    await asyncio.gather(*(m.rejoin() for m in members))
    formation = time.perf_counter() - start

    barrier = []
    for _ in range(rounds):
        start = time.perf_counter()
        await asyncio.gather(*(m.rejoin() for m in members))
        barrier.append(time.perf_counter() - start)

    change = []
    for _ in range(rounds):
        (newcomer,) = await members_for(host, port, group, topic, 1)
        stop = asyncio.Event()

        async def keep_alive(m: Member, stop: asyncio.Event = stop) -> None:
            while not stop.is_set():
                await asyncio.sleep(heartbeat_ms / 1000)
                if await m.heartbeat() == REBALANCE_IN_PROGRESS:
                    await m.rejoin()
                    return

        start = time.perf_counter()
        await asyncio.gather(newcomer.rejoin(), *(keep_alive(m) for m in members))
        change.append(time.perf_counter() - start)
        stop.set()
        members.append(newcomer)
    for m in members:
        m.conn.close()
    return {
        "members": n,
        "formation_ms": round(formation * 1000, 1),
        "rebalance_ms_p50": round(statistics.median(barrier) * 1000, 2),
        "rebalance_ms_max": round(max(barrier) * 1000, 2),
        "membership_change_ms_p50": round(statistics.median(change) * 1000, 1),
        "heartbeat_ms": heartbeat_ms,
    }


async def bench_commits(
    host: str, port: int, topic: str, conns: int, seconds: float
) -> dict[str, Any]:
    group = f"bench-commit-{uuid.uuid4().hex[:8]}"
    chost, cport = await coordinator(host, port, group)
    P = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def committer(i: int) -> None:
        conn = await Conn.open(chost, cport)
        offset = 0
        try:
            while time.perf_counter() < deadline:
                offset += 1
                part = P(partition_index=0, committed_offset=offset, committed_metadata="")
                t = OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[part])
                start = time.perf_counter()
                r = await conn.call(
                    OffsetCommitRequest,
                    COMMIT_V,
                    group_id=f"{group}-{i}",
                    generation_id_or_member_epoch=-1,
                    member_id="",
                    group_instance_id=None,
                    topics=[t],
                )
                latencies.append(time.perf_counter() - start)
                code = r.topics[0].partitions[0].error_code
                if code:
                    raise RuntimeError(f"OffsetCommit failed: error {code}")
        finally:
            conn.close()

    start = time.perf_counter()
    await asyncio.gather(*(committer(i) for i in range(conns)))
    elapsed = time.perf_counter() - start
    latencies.sort()
    return {
        "connections": conns,
        "commits_per_s": round(len(latencies) / elapsed),
        "latency_ms_p50": round(latencies[len(latencies) // 2] * 1000, 2),
        "latency_ms_p99": round(latencies[int(len(latencies) * 0.99)] * 1000, 2),
    }


def ensure_topic(bootstrap: str, topic: str) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
    except TopicAlreadyExistsError:
        pass
    finally:
        admin.close()


def start_gateway(initial_delay_ms: int) -> tuple[subprocess.Popen[bytes], str, str]:
    workdir = tempfile.mkdtemp(prefix="groups-bench-")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    bootstrap = f"127.0.0.1:{port}"
    env = dict(
        os.environ,
        TMSGATE_GROUP_INITIAL_REBALANCE_DELAY_MS=str(initial_delay_ms),
        TMSGATE_LOG_LEVEL="WARNING",
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            LAUNCHER,
            "serve",
            "--store",
            f"leveldb://{workdir}/store",
            "--kafka-listen",
            bootstrap,
            "--no-http",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, bootstrap, workdir
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("the gateway did not start")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap", help="host:port of a running broker (default: start tmsgate)")
    p.add_argument("--members", type=int, default=10)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--heartbeat-ms", type=int, default=100)
    p.add_argument("--committers", default="1,8,64", help="connection counts to measure")
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument(
        "--initial-delay-ms",
        type=int,
        default=3000,
        help="group.initial.rebalance.delay.ms of the gateway this starts",
    )
    p.add_argument("--json", action="store_true")
    args = p.parse_args()

    proc = workdir = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        proc, bootstrap, workdir = start_gateway(args.initial_delay_ms)
    host, port = bootstrap.rsplit(":", 1)
    topic = "groups-bench"
    try:
        ensure_topic(bootstrap, topic)
        results: dict[str, Any] = {"bootstrap": bootstrap, "started_gateway": proc is not None}
        if proc is not None:
            results["initial_rebalance_delay_ms"] = args.initial_delay_ms
        results["rebalance"] = asyncio.run(
            bench_rebalances(host, int(port), topic, args.members, args.rounds, args.heartbeat_ms)
        )
        results["commits"] = [
            asyncio.run(bench_commits(host, int(port), topic, int(c), args.seconds))
            for c in args.committers.split(",")
        ]
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
            shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        print(json.dumps(results))
        return
    r = results["rebalance"]
    print(f"broker {bootstrap}" + (" (tmsgate started by the bench)" if proc else ""))
    delay = results.get("initial_rebalance_delay_ms")
    print(
        f"{r['members']} members form a group:       {r['formation_ms']:8.1f} ms"
        + (f"  (initial rebalance delay {delay} ms)" if delay is not None else "")
    )
    print(
        f"rebalance, all {r['members']} rejoin at once:  p50 {r['rebalance_ms_p50']:6.2f} ms"
        f"  max {r['rebalance_ms_max']:.2f} ms"
    )
    print(
        f"a member joins (heartbeats {r['heartbeat_ms']} ms): p50 "
        f"{r['membership_change_ms_p50']:6.1f} ms until all synced"
    )
    for c in results["commits"]:
        print(
            f"commits, {c['connections']:3d} connections: {c['commits_per_s']:8d}/s  "
            f"p50 {c['latency_ms_p50']:.2f} ms  p99 {c['latency_ms_p99']:.2f} ms"
        )


if __name__ == "__main__":
    main()
