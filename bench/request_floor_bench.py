"""The CPU a Python asyncio server needs just to take in a request and answer it.

    .venv/bin/python bench/request_floor_bench.py [--requests 50000] [--runs 3]

A floor for the gateway's cost per request, with none of the gateway in it: a uvloop
server (the gateway's event loop) that splits Kafka-sized frames (1,100 bytes, a produce
of one 1 KiB record) out of its socket and writes a fixed 60-byte answer to each, doing
nothing else. Two servers:

- ``callback``: answers inside ``data_received``, the cheapest an asyncio server can be;
- ``task``: one task per request, as a server that awaits anything (a store, a lock) must.

One client process (this one, a blocking socket) sends requests with a window of requests
in flight: 1, one at a time, as librdkafka's requests arrive when a producer spreads over
10,000 topics (each ProduceRequest carries one partition, confluentinc/librdkafka#1700,
and the client is too busy to pipeline them: measured 1.0-1.1 records per request); 5,
librdkafka's max.in.flight for one partition. The server's CPU (utime + stime of its
process, from /proc) per request is the figure: medians of --runs runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import struct
import time
from pathlib import Path
from typing import Any

FRAME = 1100
ANSWER = struct.pack(">i", 56) + bytes(56)
CLK_TCK = os.sysconf("SC_CLK_TCK")


class Server(asyncio.Protocol):
    def __init__(self, per_task: bool) -> None:
        self._per_task = per_task
        self._buf = bytearray()
        self._transport: Any = None  # uvloop's TCPTransport
        self._tasks: set[asyncio.Future[None]] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # uvloop sets TCP_NODELAY itself

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        while len(buf) >= 4:
            (size,) = struct.unpack_from(">i", buf, 0)
            if len(buf) < 4 + size:
                break
            frame = bytes(buf[4 : 4 + size])
            del buf[: 4 + size]
            if self._per_task:
                task = asyncio.ensure_future(self._answer(frame))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            else:
                self._write()

    async def _answer(self, frame: bytes) -> None:
        self._write()

    def _write(self) -> None:
        self._transport.write(ANSWER)


def serve(port_pipe: int, per_task: bool) -> None:
    import uvloop

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: Server(per_task), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        os.write(port_pipe, struct.pack(">H", port))
        await asyncio.Event().wait()

    uvloop.run(main())


def cpu_seconds(pid: int) -> float:
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def drive(port: int, requests: int, window: int) -> None:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    frame = struct.pack(">i", FRAME) + os.urandom(FRAME)
    sent = answered = 0
    pending = 0
    while answered < requests:
        while sent < requests and sent - answered < window:
            sock.sendall(frame)
            sent += 1
        data = sock.recv(65536)
        if not data:
            raise RuntimeError("the server closed the connection")
        pending += len(data)
        answered += pending // len(ANSWER)
        pending %= len(ANSWER)
    sock.close()


def one_run(per_task: bool, requests: int, window: int) -> tuple[float, float]:
    """-> (server CPU µs per request, requests/s)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the server
        os.close(read_end)
        try:
            serve(write_end, per_task)
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        (port,) = struct.unpack(">H", os.read(read_end, 2))
        drive(port, 1000, window)  # warm-up
        before, started = cpu_seconds(pid), time.perf_counter()
        drive(port, requests, window)
        seconds = time.perf_counter() - started
        used = cpu_seconds(pid) - before
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(read_end)
    return used / requests * 1e6, requests / seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=50_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    report: dict[str, object] = {"cpus": os.cpu_count(), "frame_bytes": FRAME}
    for window in (1, 5):
        for name, per_task in (("callback", False), ("task", True)):
            samples = [one_run(per_task, args.requests, window) for _ in range(args.runs)]
            us = statistics.median(s[0] for s in samples)
            rate = statistics.median(s[1] for s in samples)
            report[f"window {window}, {name}"] = {
                "server_us_per_request": round(us, 1),
                "runs_us": [round(s[0], 1) for s in samples],
                "requests_per_s": round(rate),
            }
            print(
                f"window {window}, {name:8}: server {us:5.1f} us/request "
                f"{[round(s[0], 1) for s in samples]}, {rate:,.0f} requests/s",
                flush=True,
            )
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
