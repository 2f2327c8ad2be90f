"""Start real gateways for tests: in-process on a thread, or as a `tmsgate serve` process.

Both listen on a real socket over a LevelDB store on disk, so the clients under test
(kafka-python, aiokafka, confluent-kafka, raw sockets) talk to the real thing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from tmsgate.gateway.cluster import ClusterConfig
from tmsgate.gateway.kafka import GatewayConfig, KafkaServer
from tmsgate.gateway.services import ServeConfig, Services, serve
from tmsgate.protocol import response_class
from tmsgate.storage.backend import register_engine

VENV_BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class GatewayThread:
    """A gateway on its own event loop in a daemon thread."""

    def __init__(
        self,
        store_url: str,
        config: GatewayConfig | None = None,
        *,
        http: bool = False,
        clock: Callable[[], int] | None = None,
        cluster: ClusterConfig | None = None,
    ) -> None:
        """``http``: serve the HTTP API too, on a free port (``http_url``). ``clock``: the
        store's clock in epoch ms (default: the wall clock), for tests that move time.
        ``cluster``: one of several gateways sharing the store (gateway/cluster.py)."""
        self.store_url = store_url
        self.clock = clock
        self.cluster = cluster
        self.config = replace(config or GatewayConfig(), host="127.0.0.1", port=0)
        self.http = http
        self.server: KafkaServer | None = None
        self.services: Services | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, daemon=True, name="gateway")

    @property
    def bootstrap(self) -> str:
        assert self.server is not None
        host, port = self.server.address
        return f"{host}:{port}"

    @property
    def address(self) -> tuple[str, int]:
        assert self.server is not None
        return self.server.address

    @property
    def http_url(self) -> str:
        assert self.services is not None and self.services.http_server is not None
        host, port = self.services.http_server.address
        return f"http://{host}:{port}"

    @property
    def broker(self) -> Any:
        assert self.server is not None
        return self.server.broker

    def start(self) -> GatewayThread:
        self._thread.start()
        if not self._ready.wait(30) or self._error is not None:
            raise RuntimeError(f"gateway did not start: {self._error!r}")
        return self

    def stop(self) -> None:
        """Stop the gateway and wait for it; again is a no-op."""
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: stopped
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def run(self, coro: Any, timeout_s: float = 10) -> Any:
        """Run a coroutine on the gateway's loop and return its result."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    def call(self, fn: Any, *args: Any) -> Any:
        """Run fn(*args) on the gateway's loop thread and return its result."""
        assert self._loop is not None

        async def run() -> Any:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    def _main(self) -> None:
        async def run() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()

            def ready(services: Services) -> None:
                self.services = services
                self.server = services.kafka_server
                self._ready.set()

            http = None
            if self.http:
                from tmsgate.gateway.http.config import HttpConfig

                http = HttpConfig(host="127.0.0.1", port=0)
            config = ServeConfig(
                self.store_url, self.config, http, clock=self.clock, cluster=self.cluster
            )
            await serve(config, stop=self._stop, on_ready=ready, handle_signals=False)

        try:
            asyncio.run(run())
        except BaseException as exc:  # surfaced by start()
            self._error = exc
            self._ready.set()


class FailingWrite:
    """The LevelDB engine, except that the next write (once ``armed``) holding a row of
    ``table`` (a key prefix: b"M" MessageTable, b"P" PayloadTable, b"S" state rows) fails
    as a disk error at the fsync would, after ``delay_s`` (an fsync in progress).

    An engine by URL like any other, ``failing-leveldb:///path`` (registered below), so the
    store and its writer hold it from the start and the failure hits the real write path;
    ``FailingWrite.at(path)`` is the one opened at ``path``."""

    _opened: dict[str, FailingWrite] = {}

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.table = b""
        self.delay_s = 0.0
        self.armed = False

    @classmethod
    def at(cls, path: Any, table: bytes, delay_s: float = 0.0) -> FailingWrite:
        disk = cls._opened[str(path)]
        disk.table, disk.delay_s = table, delay_s
        return disk

    def write(self, mutations: Any, sync: bool = True) -> None:
        if self.armed and any(k[:1] == self.table for k, _ in mutations):
            self.armed = False
            if self.delay_s:
                time.sleep(self.delay_s)
            from tmsgate.storage import BackendError

            raise BackendError("EIO (injected)")
        self.backend.write(mutations, sync)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)


def open_failing(rest: str, **options: Any) -> FailingWrite:
    from tmsgate.storage import leveldb

    disk = FailingWrite(leveldb.open_url(rest, **options))
    FailingWrite._opened[rest] = disk
    return disk


register_engine("failing-leveldb", __name__, "open_failing")


@contextmanager
def gateway_thread(
    tmp_path: Path,
    http: bool = False,
    clock: Callable[[], int] | None = None,
    engine: str = "leveldb",
    **config: Any,
) -> Iterator[GatewayThread]:
    """A gateway on a LevelDB store in ``tmp_path / "store"`` (``engine``: the URL's scheme,
    e.g. ``failing-leveldb``)."""
    gw = GatewayThread(
        f"{engine}://{tmp_path / 'store'}", GatewayConfig(**config), http=http, clock=clock
    )
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()


class GatewayProcess:
    """``tmsgate serve`` as a child process (what operators run)."""

    def __init__(
        self,
        store_dir: Path,
        port: int | None = None,
        *extra: str,
        env: dict[str, str] | None = None,
    ) -> None:
        self.port = port or free_port()
        self.http_port = free_port()
        self.store_dir = store_dir
        self.args = [
            str(VENV_BIN / "tmsgate"),
            "serve",
            "--store",
            f"leveldb://{store_dir}",
            "--kafka-listen",
            f"127.0.0.1:{self.port}",
            "--http-listen",
            f"127.0.0.1:{self.http_port}",
            *extra,
        ]
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[str] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def start(self, args: list[str] | None = None) -> GatewayProcess:
        self.proc = subprocess.Popen(
            args or self.args,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=self.env,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited: {self.proc.stdout.read()}")  # type: ignore[union-attr]
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                # HTTP starts last, unless turned off.
                if "--no-http" not in (args or self.args):
                    socket.create_connection(("127.0.0.1", self.http_port), 0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("gateway did not start listening")

    def terminate(self, sig: int = signal.SIGTERM, timeout: float = 20) -> tuple[int, str]:
        assert self.proc is not None
        self.proc.send_signal(sig)
        out, _ = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


class RawClient:
    """Speaks the wire protocol with kafka-python's classes, for exact assertions."""

    def __init__(self, address: tuple[str, int], client_id: str = "raw-test") -> None:
        self.sock = socket.create_connection(address, timeout=10)
        self.client_id = client_id
        self._cid = 0

    def close(self) -> None:
        self.sock.close()

    def send(self, request: Any, version: int) -> int:
        self._cid += 1
        request.with_header(correlation_id=self._cid, client_id=self.client_id)
        self.sock.sendall(request.encode(version=version, header=True, framed=True))
        return self._cid

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes:
        size = struct.unpack(">i", self._recv_exact(4))[0]
        return self._recv_exact(size)

    def receive(self, api_key: int, version: int) -> Any:
        frame = self.recv_frame()
        return response_class(api_key, version).decode(frame, version=version, header=True)

    def request(self, request: Any, version: int) -> Any:
        cid = self.send(request, version)
        resp = self.receive(request.API_KEY, version)
        assert resp.header.correlation_id == cid
        return resp

    def closed_by_peer(self, timeout: float = 5) -> bool:
        self.sock.settimeout(timeout)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by the gateway")
            buf += chunk
        return bytes(buf)


def kafka_records(bootstrap: str, topic: str, end: int, **kw: Any) -> list[Any]:
    """Records a kafka-python consumer returns from the beginning until its position
    reaches ``end`` (aborted offsets a read_committed consumer skips count too)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **kw)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    records: list[Any] = []
    deadline = time.monotonic() + 30
    try:
        while consumer.position(tp) < end:
            assert time.monotonic() < deadline, f"stuck at {consumer.position(tp)} of {end}"
            for batch in consumer.poll(timeout_ms=200).values():
                records.extend(batch)
    finally:
        consumer.close()
    return records
