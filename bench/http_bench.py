"""HTTP API benchmark: batch publish, transactions per second and commit latency through a
real `tmsgate serve`.

    .venv/bin/python bench/http_bench.py [--seconds 10] [--clients 8] [--only publish-avro]

Phases (each against a fresh topic, --clients concurrent keep-alive connections):
  publish-avro, publish-json  POST .../publish with --batch messages of --size bytes each
  transactions                POST /v1/transactions, then .../{wp}/commit, back to back
  healthz                     GET /healthz: the HTTP stack's ceiling (no store work)
  tx-latency                  start, then time a transactional publish of one message and
                              its commit (one client at a time, so the latency is the
                              gateway's, not a queue's)
Request bodies are built before timing and a minimal HTTP/1.1 client sends them, so the
figures are the gateway's (parse, decode, store publish with fsync, answer) rather than an
HTTP client library's (httpx costs ~200 us of CPU per request, on the same two cores).
Prints one line per phase and a JSON summary on the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import fastavro

VENV_BIN = Path(sys.executable).parent
PUBLISH_REQUEST = fastavro.parse_schema(
    {
        "type": "record",
        "name": "PublishRequest",
        "fields": [
            {"name": "transactionWritePointer", "type": ["long", "null"]},
            {"name": "messages", "type": {"type": "array", "items": "bytes"}},
        ],
    }
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Connection:
    """One keep-alive HTTP/1.1 connection: send a prepared request, read one response."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def request(self, raw: bytes) -> tuple[int, bytes]:
        self.writer.write(raw)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        body = await self.reader.readexactly(length) if length else b""
        if status >= 300:
            raise RuntimeError(f"HTTP {status}: {body[:200]!r}")
        return status, body

    def close(self) -> None:
        self.writer.close()


def http_request(
    method: str, path: str, body: bytes = b"", ctype: str = "application/json"
) -> bytes:
    return (
        f"{method} {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: {ctype}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def publish_body(encoding: str, messages: list[bytes], wp: int | None = None) -> bytes:
    if encoding == "avro":
        out = io.BytesIO()
        record = {"transactionWritePointer": wp, "messages": messages}
        fastavro.schemaless_writer(out, PUBLISH_REQUEST, record)
        return out.getvalue()
    union = None if wp is None else {"long": wp}
    texts = [m.decode("latin-1") for m in messages]
    return json.dumps({"transactionWritePointer": union, "messages": texts}).encode()


async def create_topic(port: int, topic: str) -> None:
    conn = await Connection.open(port)
    await conn.request(http_request("PUT", f"/v1/namespaces/default/topics/{topic}"))
    conn.close()


async def run_for(seconds: float, clients: int, one: object) -> tuple[int, float]:
    """Run ``one(conn)`` (which returns how many units it did) in a loop on each of
    ``clients`` connections for ``seconds``; -> (units, elapsed seconds)."""
    done = 0
    deadline = time.perf_counter() + seconds

    async def client() -> None:
        nonlocal done
        conn = await Connection.open(PORT)
        try:
            while time.perf_counter() < deadline:
                # Not `done += await ...`: that reads `done` before awaiting, and every
                # other client's additions meanwhile would be lost.
                units = await one(conn)  # type: ignore[operator]
                done += units
        finally:
            conn.close()

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return done, time.perf_counter() - started


async def publish_phase(encoding: str, args: argparse.Namespace) -> dict[str, float]:
    topic = f"bench-{encoding}-{os.getpid()}"
    await create_topic(PORT, topic)
    value = os.urandom(args.size // 2) * 2
    body = publish_body(encoding, [value] * args.batch)
    ctype = "avro/binary" if encoding == "avro" else "application/json"
    raw = http_request("POST", f"/v1/namespaces/default/topics/{topic}/publish", body, ctype)

    async def one(conn: Connection) -> int:
        await conn.request(raw)
        return args.batch

    msgs, elapsed = await run_for(args.seconds, args.clients, one)
    rate = msgs / elapsed
    print(
        f"publish-{encoding}: {msgs} msgs of {args.size} B in batches of {args.batch} from "
        f"{args.clients} clients in {elapsed:.1f} s: {rate:,.0f} msgs/s, "
        f"{rate * args.size / 1e6:.0f} MB/s",
        flush=True,
    )
    return {"msgs_per_s": rate, "mb_per_s": rate * args.size / 1e6}


async def transactions_phase(args: argparse.Namespace) -> dict[str, float]:
    start = http_request("POST", "/v1/transactions")

    async def one(conn: Connection) -> int:
        _, body = await conn.request(start)
        wp = json.loads(body)["writePointer"]
        await conn.request(http_request("POST", f"/v1/transactions/{wp}/commit"))
        return 1

    count, elapsed = await run_for(args.seconds, args.clients, one)
    rate = count / elapsed
    print(
        f"transactions: {count} started and committed by {args.clients} clients in "
        f"{elapsed:.1f} s: {rate:,.0f} tx/s",
        flush=True,
    )
    return {"tx_per_s": rate}


async def healthz_phase(args: argparse.Namespace) -> dict[str, float]:
    """The HTTP stack's own ceiling: GET /healthz does no store work. A transaction is two
    requests, so half this rate bounds transactions per second."""
    raw = b"GET /healthz HTTP/1.1\r\nHost: bench\r\n\r\n"

    async def one(conn: Connection) -> int:
        await conn.request(raw)
        return 1

    count, elapsed = await run_for(args.seconds, args.clients, one)
    rate = count / elapsed
    print(f"healthz: {count} requests by {args.clients} clients: {rate:,.0f} req/s", flush=True)
    return {"req_per_s": rate}


async def latency_phase(args: argparse.Namespace) -> dict[str, float]:
    topic = f"bench-latency-{os.getpid()}"
    await create_topic(PORT, topic)
    conn = await Connection.open(PORT)
    value = os.urandom(args.size)
    path = f"/v1/namespaces/default/topics/{topic}/publish"
    samples: list[float] = []
    deadline = time.perf_counter() + args.seconds
    while time.perf_counter() < deadline:
        _, body = await conn.request(http_request("POST", "/v1/transactions"))
        wp = json.loads(body)["writePointer"]
        publish = http_request("POST", path, publish_body("avro", [value], wp), "avro/binary")
        commit = http_request("POST", f"/v1/transactions/{wp}/commit")
        t0 = time.perf_counter()
        await conn.request(publish)
        await conn.request(commit)
        samples.append((time.perf_counter() - t0) * 1000)
    conn.close()
    samples.sort()
    p50 = statistics.median(samples)
    p99 = samples[int(len(samples) * 0.99) - 1] if len(samples) >= 100 else samples[-1]
    print(
        f"tx-latency: transactional publish of 1 x {args.size} B + commit, {len(samples)} "
        f"samples: p50 {p50:.2f} ms, p99 {p99:.2f} ms",
        flush=True,
    )
    return {"p50_ms": p50, "p99_ms": p99, "samples": len(samples)}


PHASES = ("publish-avro", "publish-json", "transactions", "tx-latency", "healthz")
PORT = 0


async def run_phases(args: argparse.Namespace) -> dict[str, object]:
    out: dict[str, object] = {}
    for phase in args.only or PHASES:
        if phase.startswith("publish-"):
            out[phase] = await publish_phase(phase.split("-")[1], args)
        elif phase == "transactions":
            out[phase] = await transactions_phase(args)
        elif phase == "healthz":
            out[phase] = await healthz_phase(args)
        else:
            out[phase] = await latency_phase(args)
    return out


def start_gateway(store: Path, http_port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [
            str(VENV_BIN / "tmsgate"),
            "serve",
            "--store",
            f"leveldb://{store}",
            "--kafka-listen",
            f"127.0.0.1:{free_port()}",
            "--http-listen",
            f"127.0.0.1:{http_port}",
            "--log-level",
            "WARNING",
        ]
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", http_port), 0.2).close()
            return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("gateway did not start")


def main() -> None:
    global PORT
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="per phase")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--batch", type=int, default=100, help="messages per publish")
    ap.add_argument("--size", type=int, default=1024, help="bytes per message")
    ap.add_argument("--only", action="append", choices=PHASES, help="run only these phases")
    ap.add_argument("--port", type=int, help="an already running gateway's HTTP port")
    args = ap.parse_args()
    tmp = proc = None
    if args.port:
        PORT = args.port
    else:
        tmp = Path(tempfile.mkdtemp(prefix="tmsgate-http-bench-"))
        PORT = free_port()
        proc = start_gateway(tmp / "store", PORT)
    try:
        try:
            import uvloop

            summary = uvloop.run(run_phases(args))
        except ImportError:
            summary = asyncio.run(run_phases(args))
        print(json.dumps(summary))
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
