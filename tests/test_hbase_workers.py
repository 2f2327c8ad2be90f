"""The Thrift server's worker threads: the stand-in holds one per open connection, as
HBase's Thrift 1 server does, and the hbase:// engine says at once when none is free.

HBase's TBoundedThreadPoolServer serves each connection with one worker thread for the
connection's whole life (hbase.thrift.minWorkerThreads, 16 by default); a connection
beyond that is accepted but gets no answer until another closes (docs/hbase.md). These
tests run on tests/hbase_standin.py (a stand-in for tests, not HBase) with 2 workers.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

happybase = pytest.importorskip("happybase", reason="the hbase extra is not installed")

from hbase_standin import StandinServer  # noqa: E402
from tmsgate.storage import BackendError, open_backend  # noqa: E402

WORKERS = 2
WAIT_S = 10  # generous bounds for what must happen; nothing is asserted about timing


@pytest.fixture
def server() -> Iterator[StandinServer]:
    with StandinServer(min_worker_threads=WORKERS) as s:
        yield s


def served_connection(server: StandinServer) -> happybase.Connection:
    """A connection a worker serves (it answered a call), holding that worker."""
    conn = happybase.Connection(server.host, server.port, timeout=WAIT_S * 1000)
    conn.tables()
    return conn


def wait_for(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {WAIT_S} s: {what}")
        time.sleep(0.02)


def test_a_connection_past_the_workers_waits_unanswered_until_one_closes(
    server: StandinServer,
) -> None:
    holders = [served_connection(server) for _ in range(WORKERS)]
    answers: list[list[bytes]] = []
    third = happybase.Connection(server.host, server.port)  # no timeout: it waits

    def ask() -> None:
        answers.append(third.tables())

    asking = threading.Thread(target=ask, daemon=True)
    asking.start()
    try:
        wait_for(lambda: server.waiting == 1, "the third connection queued for a worker")
        # Queued: nothing reads its call, so nothing can have answered it.
        assert answers == [] and asking.is_alive()
        assert server.hbase.calls["getTableNames"] == WORKERS
        holders[0].tables()  # the connections holding the workers are still served
        holders.pop(0).close()  # frees a worker: the third connection is served
        asking.join(WAIT_S)
        assert answers == [[]] and server.waiting == 0
    finally:
        for conn in [*holders, third]:
            conn.close()


def test_an_engine_with_no_free_worker_fails_at_once_naming_the_setting(
    server: StandinServer,
) -> None:
    holders = [served_connection(server) for _ in range(WORKERS)]
    url = f"hbase://{server.address}/workers{uuid.uuid4().hex[:8]}"
    try:
        # The probe of a new connection waits connect_probe_ms, not timeout_ms (30 s).
        with pytest.raises(BackendError) as err:
            open_backend(url + "?connect_probe_ms=200")
        message = str(err.value)
        assert server.address in message
        assert "no free worker thread" in message
        assert "hbase.thrift.minWorkerThreads" in message and "pool_size" in message
        assert "no answer within the timeout" not in message  # not the generic timeout
        holders.pop().close()  # a worker frees: the store opens and works
        backend = open_backend(url + "?pool_size=1")
        try:
            backend.write([(b"Tk", b"v")])
            assert backend.get(b"Tk") == b"v"
        finally:
            backend.close()
    finally:
        for conn in holders:
            conn.close()


def test_connections_the_engine_opens_later_are_probed_too(server: StandinServer) -> None:
    """A pooled connection opened while the store runs (more calls at once than open
    connections) meets the same probe. The test holds the backend's one open pooled
    connection (a worker) and another client the other worker: a get from another
    thread opens a second pooled connection, which no worker serves."""
    url = f"hbase://{server.address}/later{uuid.uuid4().hex[:8]}"
    backend = open_backend(url + "?pool_size=2&connect_probe_ms=200")
    errors: list[BaseException] = []

    def get() -> None:
        try:
            backend.get(b"Tk")
        except BackendError as exc:
            errors.append(exc)

    holder = served_connection(server)
    try:
        with backend._pool.connection():  # the pooled connection opened at open_backend
            getter = threading.Thread(target=get)
            getter.start()
            getter.join(WAIT_S)
        assert len(errors) == 1 and "hbase.thrift.minWorkerThreads" in str(errors[0])
        holder.close()
        wait_for(lambda: server.waiting == 0, "the closed connection's turn passed")
        backend.write([(b"Tk", b"v")])  # a worker is free again: served
        assert backend.get(b"Tk") == b"v"
    finally:
        holder.close()
        backend.close()
