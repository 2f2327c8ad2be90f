"""``hbase://``: the store on HBase, through HBase's Thrift 1 server (happybase).

URL: ``hbase://host[:port][/prefix][?salt_buckets=N&pool_size=N&timeout_ms=N&connect_probe_ms=N]``;
port 9090 and prefix ``tmsgate`` by default. The prefix names the store's HBase tables, so several
stores can share one cluster. docs/hbase.md is the operator's side of this module.

Tables (created on first use, with one column family ``d``, VERSIONS 1, ROW bloom filter):

- ``<prefix>_messages``: the MessageTable (keys under ``M``), salted;
- ``<prefix>_payloads``: the PayloadTable (keys under ``P``), salted;
- ``<prefix>_metadata``: *every other* key (``T``, ``C``, ``X``, ``S``, ``R``, ``W``,
  ``I``, and any table byte added later), row key = the whole key, value in ``d:v``. One
  table for all the small tables: they are small, and a new table byte needs no new
  HBase table. It also holds this engine's own row, ``\\x00tmsgate:hbase`` (columns
  ``d:salt_buckets``, ``d:layout``, ``d:clock``), which has no ``d:v`` and so is never
  seen as a store key.

MessageTable and PayloadTable rows use the seed's column layout: ``keys.row_columns``
splits a row value into ``d:o`` (flags, base offset, count), ``d:t`` (write pointer),
``d:l`` (ttl), ``d:m`` (Kafka metadata) and ``d:p`` (payload), each present only when the
row has it; ``keys.row_from_columns`` rebuilds the value. A value under ``M``/``P`` that
is not such a row (a caller using the backend as plain key-value) is kept whole in
``d:v``.

Salting (the transactional-queues article): the row key of an ``M``/``P`` key is one
salt byte, ``crc32(whole key) % salt_buckets``, then the key without its table byte, so
that the consecutive keys of a hot topic land on ``salt_buckets`` different regions. A
scan opens one scanner per bucket over ``[salt + start, salt + stop)`` and merges them
(heapq.merge) back into key order, ascending or descending; ``get`` computes the salt.
The bucket count is part of every row key, so it is recorded when the store is created
and a URL asking for another count is refused.

What HBase promises, and what this engine adds:

- a row is written atomically (one ``Put``), and nothing more: rows of one phase go in
  one ``mutateRowsTs`` per table (chunked when large), and ``write_phases`` starts a
  phase only once every call of the previous one returned. That is the Backend contract.
- Cell timestamps are the engine's, not the region server's: every phase gets a
  strictly increasing timestamp. HBase's delete markers mask every put at or below
  their timestamp, *including puts made later* ("deletes mask puts"); with server
  timestamps, a key deleted and written again in the same millisecond (the writer's
  intent row, every batch) would stay deleted. To keep that true across restarts,
  the engine reserves timestamps ahead (``d:clock`` in its own row holds a bound no
  timestamp used so far reaches; a new process starts above it).
- A put replaces the row's columns: the put writes the new value's columns and deletes
  the ones it lacks, in the same ``mutateRowsTs`` (HBase's Thrift handler applies a
  call's puts before its deletes). A reader rebuilds a row only from the cells of its
  newest put (those carrying the ``o`` column's timestamp), so a reader between the two
  never sees a mixture.
- Thrift and socket errors become ``BackendError`` naming ``host:port`` and the
  operation. A call that fails because the pooled connection was dropped (the Thrift
  server closes idle connections) is made once more on a new connection: every call
  the engine makes is idempotent (writes carry their timestamp), but ``checkAndPut``,
  which check_and_put retries its own way (below).
- The Thrift server's worker threads: HBase's Thrift 1 server (TBoundedThreadPoolServer)
  serves each open connection with one worker thread for the connection's whole life,
  ``hbase.thrift.minWorkerThreads`` (16) of them; on many releases a connection beyond
  that is accepted but left unanswered until another one closes. So a new connection's
  first exchange is a probe with a short deadline (``connect_probe_ms``, 2 s): a call to
  a method the service lacks, which any worker answers at once (UNKNOWN_METHOD) without
  touching the cluster. No answer: the connection is closed and BackendError says the
  server has no free worker thread and what to size (minWorkerThreads, pool_size),
  instead of every call on it waiting out ``timeout_ms`` (30 s). Calls on probed
  connections keep ``timeout_ms``. ``pool_size`` defaults to 8: one gateway leaves half
  of a default server's threads to a second gateway or other Thrift clients.

``check_and_put`` (the leases of leases.py) is HBase's ``checkAndPut`` on a metadata row's
``d:v``: compare one column, apply one Put, atomically, in the WAL before it answers.
What Thrift 1 gives, and what the engine makes of it:

- Its Put carries **the region server's clock** (HConstants.LATEST_TIMESTAMP): Thrift 1's
  ``Mutation`` has no timestamp, so it cannot carry the engine's. Cells of one row stamped
  by two clocks can hide each other: a cell or a delete marker that ``write`` stamped
  ahead of the server's clock (the engine's clock runs up to CLOCK_RESERVE_MS ahead after
  a restart) hides a later checkAndPut's put, which still answers true. So **a key
  written with check_and_put is written with check_and_put only** (lease rows are). As a
  guard, a successful checkAndPut is read back: if the row still holds the value it was
  compared with, the put is hidden and BackendError says so (rather than two callers
  both "winning" from that value).
- HBase compares an empty cell equal to an absent one, so an empty ``expected`` or
  ``value`` is refused (BackendError) rather than answered wrongly.
- No checkAndDelete in Thrift 1: ``value`` None is refused. MessageTable and PayloadTable
  rows span several columns, which one checkAndPut cannot compare or replace: keys under
  ``M`` and ``P`` are refused.
- A checkAndPut is not idempotent. When the connection drops during one, it is made once
  more on a new connection; if that one finds the row changed, the row is read: holding
  our value, the first call landed (values written with check_and_put are taken to be
  unique to their writer, as lease rows are: holder and epoch); anything else raises
  BackendError, the outcome being unknown.

Scans read in chunks: each chunk opens a scanner, takes up to N rows and closes it
(``scannerOpenWithScan``, ``scannerGetList``, ``scannerClose``), so no connection or
server-side scanner is held while the caller holds the iterator. Chunks start small
(a probe for one row costs little) and grow. The first chunk of every bucket is fetched
in parallel.

Finding a Kafka offset (``seek_offset``; reader.start_for_offset uses it where a backend
states one): reader.py's search probes "the first row at or after a key" some 15 to 40 times,
and here each such probe would be a scan of every bucket (3 Thrift calls per bucket). A
bucket's rows are a sample of the topic's, in key order, so the engine runs that search
over one bucket's rows (one scanner per probe, reading a few rows' ``d:o`` cells only),
then one merged scan of the buckets between the two rows of the bucket that enclose the
offset. The rows found are kept as hints (a sparse base offset -> row key map per topic,
bounded), verified by a get before use, since rows go (TTL, topic deletion, a settled
partial write whose offsets later rows took). The row found is read whole, and the
reader starts its read with it. docs/hbase.md has the figures.

Thrift calls used: getTableNames, createTable, getColumnDescriptors, checkAndPut (the
engine row; check_and_put), getRowWithColumns, getRowsWithColumns (checking offset
hints), mutateRowTs, mutateRowsTs, scannerOpenWithScan (with ``columns`` for the offset
search), scannerGetList, scannerClose; and on each new connection ``tmsgate_worker_probe``,
which the service lacks (the worker probe above). HBase >= 0.98 (reversed scans);
HBase 1.x and 2.x Thrift 1 servers (``hbase thrift start``, default threadpool server:
buffered transport, binary protocol).

``snapshot`` and ``disk_reserve_bytes`` are ignored (no lock on HBase, no local disk);
``collect_garbage`` returns {} (HBase compacts by itself). Several gateways on one prefix
(``serve --cluster``, gateway/cluster.py) take turns per partition by lease; a taker calls
``sync_clock`` first, so its cells are newer than the previous leader's.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import io
import logging
import queue
import re
import socket
import struct
import threading
import time
import weakref
import zlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlsplit

import happybase
import Hbase_thrift  # the module happybase loads from the Hbase.thrift it ships
import thriftpy2
from thriftpy2.protocol import TBinaryProtocol
from thriftpy2.thrift import TApplicationException, TClient, TException
from thriftpy2.transport import TTransportException

from . import keys
from .backend import Mutation
from .errors import BackendError
from .offset_hints import HeadRow, OffsetHints, holds
from .offset_search import SearchIO, search_buckets

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_PORT = 9090
DEFAULT_PREFIX = "tmsgate"
DEFAULT_SALT_BUCKETS = 8
MAX_SALT_BUCKETS = 256  # one salt byte
# Connections per process, each holding one of the Thrift server's worker threads for its
# life (hbase.thrift.minWorkerThreads, 16 by default): 8 leave room for a second gateway.
DEFAULT_POOL_SIZE = 8
DEFAULT_TIMEOUT_MS = 30_000
# How long a new connection's probe waits for a worker thread to answer (a worker answers
# it at once; only a connection no worker serves, or a stalled server, takes longer).
DEFAULT_CONNECT_PROBE_MS = 2_000
HBASE_DEFAULT_MIN_WORKER_THREADS = 16  # TBoundedThreadPoolServer.DEFAULT_MIN_WORKER_THREADS

FAMILY = b"d"
_FAMILY_COL = FAMILY + b":"
RAW = b"v"  # the whole value (metadata rows, and M/P values that are not rows)
ROW_COLUMNS = (keys.COL_HEAD, keys.COL_TX, keys.COL_TTL, keys.COL_META, keys.COL_PAYLOAD)
_HEAD = _FAMILY_COL + keys.COL_HEAD
_RAW = _FAMILY_COL + RAW
_ROW_COLUMN_NAMES = {_FAMILY_COL + c: c for c in ROW_COLUMNS}
_ALL_COLUMN_NAMES = (*_ROW_COLUMN_NAMES, _RAW)

# Which key prefix goes to which salted table; everything else goes to <prefix>_metadata.
SALTED_TABLES = {keys.MESSAGE: "messages", keys.PAYLOAD: "payloads"}
METADATA_TABLE = "metadata"
# The key space cut into pieces that each live in one table, in key order:
# (table byte of a salted table, or None for metadata; low; high or None for unbounded).
_PIECES: tuple[tuple[bytes | None, bytes, bytes | None], ...] = (
    (None, b"", keys.MESSAGE),
    (keys.MESSAGE, keys.MESSAGE, keys.prefix_end(keys.MESSAGE)),
    (None, keys.prefix_end(keys.MESSAGE), keys.PAYLOAD),
    (keys.PAYLOAD, keys.PAYLOAD, keys.prefix_end(keys.PAYLOAD)),
    (None, keys.prefix_end(keys.PAYLOAD), None),
)

ENGINE_ROW = b"\x00tmsgate:hbase"
_SALT_COL = _FAMILY_COL + b"salt_buckets"
_LAYOUT_COL = _FAMILY_COL + b"layout"
_CLOCK_COL = _FAMILY_COL + b"clock"
LAYOUT = b"1"
# Timestamps are reserved this far ahead (one small write per reservation); a restarted
# engine starts at most this far ahead of the wall clock.
CLOCK_RESERVE_MS = 10_000

SCAN_FIRST_ROWS = 4  # a probe for the first row of a range fetches little
SCAN_GROWTH = 8
SCAN_MAX_ROWS = 256  # rows per scanner (a Thrift 1 scan cannot bound bytes)
WRITE_MAX_ROWS = 1000  # rows per mutateRowsTs call
WRITE_MAX_BYTES = 8 << 20

_PREFIX_RE = re.compile(r"^(?:[A-Za-z0-9_]+:)?[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_OPTIONS = ("salt_buckets", "pool_size", "timeout_ms", "connect_probe_ms")

# The worker probe: a service of one method that HBase's Hbase service does not have, so
# that a Thrift worker answers it from the connection alone (TApplicationException
# UNKNOWN_METHOD), with no call into the cluster and nothing in HBase's logs.
_PROBE_SERVICE = thriftpy2.load_fp(
    io.StringIO("service TmsgateProbe { void tmsgate_worker_probe() }"),
    module_name="tmsgate_worker_probe_thrift",
).TmsgateProbe

# Errors of a call: the Thrift layer's (HBase's IOError, IllegalArgument, AlreadyExists and
# TApplicationException are TExceptions too), the socket's, and an exhausted pool.
_CALL_ERRORS = (TException, OSError, happybase.NoConnectionsAvailable)


def presplit_command(table: str, salt_buckets: int) -> str:
    """The HBase shell command that creates a salted table pre-split at every bucket."""
    splits = ", ".join(f'"\\x{b:02x}"' for b in range(1, salt_buckets))
    spec = "{NAME => 'd', VERSIONS => 1, BLOOMFILTER => 'ROW'}"
    if not splits:
        return f"create '{table}', {spec}"
    return f"create '{table}', {spec}, {{SPLITS => [{splits}]}}"


class HBaseBackend:
    """The Backend (backend.py) on one HBase cluster, under one table-name prefix."""

    atomic_batches = False  # HBase writes each row atomically, and nothing more
    space = None  # the region servers' disks are HBase's to guard
    path = None
    scan_stored = None  # values are kept as they are

    def __init__(
        self,
        host: str,
        port: int = DEFAULT_PORT,
        prefix: str = DEFAULT_PREFIX,
        *,
        salt_buckets: int | None = None,
        pool_size: int = DEFAULT_POOL_SIZE,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        connect_probe_ms: int = DEFAULT_CONNECT_PROBE_MS,
    ) -> None:
        self.host, self.port, self.prefix = host, port, prefix
        self.url = f"hbase://{host}:{port}/{prefix}"
        self._pool_size = pool_size
        self._timeout_s = timeout_ms / 1000
        self._probe_s = min(connect_probe_ms, timeout_ms) / 1000
        # Sockets of pooled connections a worker thread has answered (probed once each).
        self._served: weakref.WeakSet[socket.socket] = weakref.WeakSet()
        self._closed = False
        self._executor: ThreadPoolExecutor | None = None
        self._executor_lock = threading.Lock()
        self.tables = {t: f"{prefix}_{name}".encode() for t, name in SALTED_TABLES.items()}
        self.metadata_table = f"{prefix}_{METADATA_TABLE}".encode()
        self._hints = OffsetHints()
        try:
            # Connects one connection at once, so a wrong address fails here.
            self._pool = happybase.ConnectionPool(
                size=pool_size,
                host=host,
                port=port,
                timeout=timeout_ms,
                table_prefix=None,
                autoconnect=True,
            )
        except _CALL_ERRORS as exc:
            raise self._error("connect", exc) from exc
        try:
            self.salt_buckets = self._open_tables(salt_buckets)
            clock = self._engine_row().get(_CLOCK_COL)
        except BaseException:
            self._close_pool()
            raise
        reserved = int(clock) if clock else 0
        self._clock_lock = threading.Lock()
        self._last_ts = reserved - 1  # the first timestamp is at least the reserved bound
        self._reserved = reserved

    # --- opening -------------------------------------------------------------------------
    def _open_tables(self, asked_buckets: int | None) -> int:
        existing = set(self._call("list tables", lambda conn: conn.client.getTableNames()))
        meta = self.metadata_table
        if meta not in existing:
            self._create_table(meta)
        row = self._engine_row()
        if _LAYOUT_COL not in row:
            self._put_if_absent(_LAYOUT_COL, LAYOUT)
        if _SALT_COL not in row:
            self._put_if_absent(_SALT_COL, str(asked_buckets or DEFAULT_SALT_BUCKETS).encode())
        row = self._engine_row()  # what was recorded (by this process or by a racing one)
        if row.get(_LAYOUT_COL) != LAYOUT:
            raise BackendError(
                f"the store at {self.url} has HBase layout {row.get(_LAYOUT_COL)!r}; "
                f"this tmsgate reads layout {LAYOUT.decode()}"
            )
        buckets = int(row[_SALT_COL])
        if asked_buckets is not None and asked_buckets != buckets:
            raise BackendError(
                f"the store at {self.url} was created with salt_buckets={buckets}; it "
                f"cannot be opened with salt_buckets={asked_buckets} (the bucket count is "
                "part of every row key): leave salt_buckets out of the URL to use the "
                "recorded count"
            )
        for name in self.tables.values():
            if name not in existing:
                self._create_table(name)
                log.warning(
                    "created HBase table %s with one region: on a real cluster, create it "
                    "pre-split instead (docs/hbase.md): %s",
                    name.decode(),
                    presplit_command(name.decode(), buckets),
                )
        for name in (meta, *self.tables.values()):
            families = self._call(
                f"describe table {name.decode()}",
                lambda conn, name=name: conn.client.getColumnDescriptors(name),
            )
            if _FAMILY_COL not in families:
                raise BackendError(
                    f"HBase table {name.decode()} (store {self.url}) has no column family "
                    f"'{FAMILY.decode()}'; it was not created by tmsgate"
                )
        return buckets

    def _create_table(self, name: bytes) -> None:
        families = {
            FAMILY.decode(): {
                "max_versions": 1,
                "bloom_filter_type": "ROW",
                "block_cache_enabled": True,
            }
        }

        def create(conn: Any) -> None:
            with contextlib.suppress(Hbase_thrift.AlreadyExists):  # another process was first
                conn.create_table(name, families)

        self._call(f"create table {name.decode()}", create)

    def _engine_row(self) -> dict[bytes, bytes]:
        rows = self._call(
            "read the engine row",
            lambda conn: conn.client.getRowWithColumns(self.metadata_table, ENGINE_ROW, None, {}),
        )
        if not rows:
            return {}
        return {name: cell.value for name, cell in rows[0].columns.items()}

    def _put_if_absent(self, column: bytes, value: bytes) -> None:
        mutation = Hbase_thrift.Mutation(column=column, value=value)
        self._call(
            f"record {column.decode()}",
            lambda conn: conn.client.checkAndPut(
                self.metadata_table, ENGINE_ROW, column, None, mutation, {}
            ),
        )

    # --- calls ---------------------------------------------------------------------------
    def _call(self, op: str, fn: Callable[[Any], T], retry: bool = True) -> T:
        """``fn(connection)`` on a pooled connection, errors made BackendError. A dropped
        connection is replaced (by the pool) and, with ``retry``, the call made once
        more."""
        retried = False
        while True:
            if self._closed:
                raise BackendError(f"{self.url}: {op} refused: the backend is closed")
            try:
                with self._pool.connection(timeout=self._timeout_s) as conn:
                    self._check_worker(conn)
                    return fn(conn)
            except _CALL_ERRORS as exc:
                if retried or not retry or not _dropped_connection(exc):
                    raise self._error(op, exc) from exc
                retried = True
                log.info(
                    "HBase connection to %s:%s dropped (%s); retrying",
                    self.host,
                    self.port,
                    _detail(exc),
                )

    def _check_worker(self, conn: Any) -> None:
        """On a connection no call has been answered on yet (new, or reopened), wait
        ``connect_probe_ms`` at most for a Thrift worker thread to answer the probe; a
        connection no worker serves is closed (its probe, once a worker reads it, would
        answer a later call) and BackendError says why. A dropped connection raises as
        any call's would (_call reconnects)."""
        sock = conn.transport.sock
        if sock is None or sock in self._served:
            return
        sock.settimeout(self._probe_s)
        try:
            TClient(_PROBE_SERVICE, TBinaryProtocol(conn.transport)).tmsgate_worker_probe()
        except TApplicationException as exc:
            if exc.type != TApplicationException.UNKNOWN_METHOD:
                raise
        except TimeoutError:
            conn.close()
            raise self._no_worker() from None
        except TTransportException as exc:
            if exc.type != TTransportException.TIMED_OUT:
                raise
            conn.close()
            raise self._no_worker() from None
        sock.settimeout(self._timeout_s)
        self._served.add(sock)

    def _no_worker(self) -> BackendError:
        return BackendError(
            f"HBase Thrift server {self.host}:{self.port} (store {self.url}): it accepted "
            f"a new connection but no worker thread answered it within "
            f"{self._probe_s * 1000:g} ms: the server has no free worker thread. Each open "
            "connection holds one of hbase.thrift.minWorkerThreads (default "
            f"{HBASE_DEFAULT_MIN_WORKER_THREADS}) for its whole life; raise it on the Thrift "
            "server to at least gateways x pool_size + other Thrift clients, or lower "
            f"pool_size in the URL (this store's: {self._pool_size}); docs/hbase.md. A "
            "server merely slow to answer: raise connect_probe_ms."
        )

    def _error(self, op: str, exc: BaseException) -> BackendError:
        if isinstance(exc, happybase.NoConnectionsAvailable):
            detail = (
                f"all {self._pool_size} pooled connections stayed busy for "
                f"{self._timeout_s:g} s (pool_size in the URL)"
            )
        else:
            detail = _detail(exc)
        return BackendError(
            f"HBase Thrift server {self.host}:{self.port} (store {self.url}): {op} failed: {detail}"
        )

    # --- keys and values -----------------------------------------------------------------
    def _locate(self, key: bytes) -> tuple[bytes, bytes]:
        """(HBase table, row key) of a store key."""
        table = self.tables.get(key[:1])
        if table is None:
            if not key:
                raise BackendError("an empty key has no table")
            return self.metadata_table, key
        return table, self._salt(key) + key[1:]

    def _salt(self, key: bytes) -> bytes:
        return bytes((zlib.crc32(key) % self.salt_buckets,))

    def _put(self, key: bytes, value: bytes) -> list[Any]:
        """The Thrift mutations that make ``value`` the row's whole content."""
        Mut = Hbase_thrift.Mutation
        if key[:1] not in self.tables:
            return [Mut(column=_RAW, value=value)]
        cols = _split_row(value)
        names = {_RAW: value} if cols is None else {_FAMILY_COL + c: v for c, v in cols.items()}
        out = [Mut(column=name, value=v) for name, v in names.items()]
        out += [Mut(isDelete=True, column=name) for name in _ALL_COLUMN_NAMES if name not in names]
        return out

    # --- writing -------------------------------------------------------------------------
    def write(self, mutations: Sequence[Mutation], sync: bool = True) -> None:
        self._write_phase(mutations)

    def write_phases(self, phases: Sequence[Sequence[Mutation]], sync: bool = True) -> None:
        for phase in phases:
            if phase:
                self._write_phase(phase)

    def _write_phase(self, mutations: Sequence[Mutation]) -> None:
        """One phase: every row in HBase's WAL when this returns. ``sync`` has no other
        meaning on HBase: a mutation is acknowledged once its WAL edit is synced."""
        latest: dict[bytes, bytes | None] = {}
        for key, value in mutations:  # a key's last mutation wins, as in a LevelDB batch
            latest[key] = value
        if not latest:
            return
        delete_row = [Hbase_thrift.Mutation(isDelete=True, column=FAMILY)]
        by_table: dict[bytes, list[tuple[Any, int]]] = {}
        for key, value in latest.items():
            table, row = self._locate(key)
            muts = delete_row if value is None else self._put(key, value)
            size = len(row) + (0 if value is None else len(value))
            batch = Hbase_thrift.BatchMutation(row=row, mutations=muts)
            by_table.setdefault(table, []).append((batch, size))
        ts = self._next_timestamp()
        for table, batches in by_table.items():
            for chunk in _chunks(batches):
                self._call(
                    f"write {len(chunk)} rows to {table.decode()}",
                    functools.partial(_mutate_rows, table, chunk, ts),
                )

    # --- conditional writes ------------------------------------------------------------
    def check_and_put_many(
        self, changes: Sequence[tuple[bytes, bytes | None, bytes | None]]
    ) -> list[bool]:
        """One checkAndPut after another: Thrift 1 has no batch of conditional puts."""
        return [self.check_and_put(key, expected, value) for key, expected, value in changes]

    def check_and_put(self, key: bytes, expected: bytes | None, value: bytes | None) -> bool:
        """HBase's checkAndPut on a metadata row's ``d:v`` (the module's notes: server
        timestamps, no deletes, no empty values, metadata rows only)."""
        table, row = self._locate(key)
        if table != self.metadata_table:
            raise BackendError(
                f"{self.url}: check_and_put only on metadata rows, not on {key[:1]!r} keys "
                "(a MessageTable or PayloadTable row spans several columns)"
            )
        if value is None:
            raise BackendError(
                f"{self.url}: check_and_put cannot delete on HBase (Thrift 1 has no checkAndDelete)"
            )
        if value == b"" or expected == b"":
            raise BackendError(
                f"{self.url}: check_and_put cannot compare or write an empty value on HBase "
                "(its checkAndPut takes an empty cell for an absent one)"
            )
        op = f"check_and_put on {table.decode()}"
        mput = Hbase_thrift.Mutation(column=_RAW, value=value, writeToWAL=True)

        def check_and_put(conn: Any) -> bool:
            return bool(conn.client.checkAndPut(table, row, _RAW, expected, mput, {}))

        uncertain = False
        try:
            done = self._call(op, check_and_put, retry=False)
        except BackendError as exc:
            if not _dropped_connection(exc.__cause__):
                raise
            log.info("HBase connection dropped during %s (%s); retrying", op, exc.__cause__)
            uncertain = True  # the first call may have landed
            done = self._call(op, check_and_put, retry=False)
        if not done and not uncertain:
            return False
        current = self.get(key)
        if done:
            if current == expected and current != value:
                raise BackendError(
                    f"{self.url}: {op}: checkAndPut said it put {key!r}, but the row still "
                    "holds the value it was compared with: the put, stamped by the region "
                    "server's clock, is hidden by a newer cell or delete marker (written by "
                    "write(), whose timestamps may run ahead, or the server's clock went "
                    "back); write a check_and_put key with check_and_put only"
                )
            return True
        if current == value:
            return True  # the first call landed; its answer was lost with the connection
        raise BackendError(
            f"{self.url}: {op}: the connection dropped during checkAndPut on {key!r} and the "
            "row has changed since: whether this write landed is unknown"
        )

    def _next_timestamp(self) -> int:
        """A cell timestamp above every one this store used before (in any process)."""
        with self._clock_lock:
            ts = max(self._last_ts + 1, time.time_ns() // 1_000_000)
            if ts >= self._reserved:
                bound = ts + CLOCK_RESERVE_MS
                mutation = Hbase_thrift.Mutation(column=_CLOCK_COL, value=str(bound).encode())
                # The bound's own timestamp is the bound, so the newest cell is the highest.
                self._call(
                    "reserve cell timestamps",
                    lambda conn: conn.client.mutateRowTs(
                        self.metadata_table, ENGINE_ROW, [mutation], bound, {}
                    ),
                )
                self._reserved = bound
            self._last_ts = ts
            return ts

    # --- reading -------------------------------------------------------------------------
    def get(self, key: bytes) -> bytes | None:
        table, row = self._locate(key)
        rows = self._call("get", lambda conn: conn.client.getRowWithColumns(table, row, None, {}))
        return _value(rows[0].columns) if rows else None

    def scan(
        self,
        start: bytes,
        stop: bytes,
        *,
        reverse: bool = False,
        include_start: bool = True,
    ) -> Iterator[tuple[bytes, bytes]]:
        """Keys in [start, stop), ascending (or descending), fetched lazily in chunks."""
        if self._closed:
            raise BackendError(f"{self.url}: scan refused: the backend is closed")
        pieces = []
        for table_byte, low, high in _PIECES:
            lo = max(start, low)
            hi = stop if high is None else min(stop, high)
            if lo < hi:
                pieces.append((table_byte, lo, hi))
        if reverse:
            pieces.reverse()
        for table_byte, lo, hi in pieces:
            if table_byte is None:
                rows = self._metadata_rows(lo, hi, reverse)
            else:
                rows = self._salted_rows(table_byte, lo, hi, reverse)
            for key, value in rows:
                if include_start or key != start:
                    yield key, value

    def _metadata_rows(self, lo: bytes, hi: bytes, reverse: bool) -> Iterator[tuple[bytes, bytes]]:
        table = self.metadata_table
        first = self._fetch(table, lo, hi, reverse, SCAN_FIRST_ROWS)
        for result in self._stream(table, lo, hi, reverse, first):
            value = _value(result.columns)
            if value is not None:
                yield result.row, value

    def _salted_rows(
        self, table_byte: bytes, lo: bytes, hi: bytes, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        """Keys [lo, hi) of one salted table: a scanner range per bucket, merged."""
        table = self.tables[table_byte]
        buckets = range(self.salt_buckets)
        merged = self._merged(table, table_byte, buckets, lo, hi, reverse, None)
        for result in merged:
            value = _value(result.columns)
            if value is not None:
                yield table_byte + result.row[1:], value

    def _merged(
        self,
        table: bytes,
        table_byte: bytes,
        buckets: Sequence[int],
        lo: bytes,
        hi: bytes,
        reverse: bool,
        columns: list[bytes] | None,
    ) -> Iterator[Any]:
        """The rows of store keys [lo, hi) in ``buckets`` of one salted table, merged into
        key order: the first chunk of every bucket fetched in parallel, then lazily."""
        ranges = [_bucket_range(table_byte, b, lo, hi) for b in buckets]
        fetch = functools.partial(
            self._fetch, table, reverse=reverse, n=SCAN_FIRST_ROWS, columns=columns
        )
        if len(ranges) == 1:
            firsts = [fetch(*ranges[0])]
        else:
            futures = [self._pool_executor().submit(fetch, *r) for r in ranges]
            firsts = [f.result() for f in futures]
        streams = [
            self._stream(table, row_lo, row_hi, reverse, first, columns)
            for (row_lo, row_hi), first in zip(ranges, firsts, strict=True)
        ]
        return heapq.merge(*streams, key=_unsalted, reverse=reverse)

    def _stream(
        self,
        table: bytes,
        lo: bytes,
        hi: bytes | None,
        reverse: bool,
        first: tuple[list[Any], bool],
        columns: list[bytes] | None = None,
    ) -> Iterator[Any]:
        """The rows of [lo, hi) (hi None: to the table's end) in order, chunk by chunk,
        starting with an already fetched chunk."""
        rows, done = first
        n = SCAN_FIRST_ROWS
        while True:
            yield from rows
            if done or not rows:
                return
            n = min(n * SCAN_GROWTH, SCAN_MAX_ROWS)
            if reverse:
                hi = rows[-1].row
            else:
                lo = rows[-1].row + b"\x00"  # the next possible row key
            rows, done = self._fetch(table, lo, hi, reverse, n, columns)

    def _fetch(
        self,
        table: bytes,
        lo: bytes,
        hi: bytes | None,
        reverse: bool,
        n: int,
        columns: list[bytes] | None = None,
    ) -> tuple[list[Any], bool]:
        """Up to ``n`` rows of [lo, hi) nearest the scan's start, and whether the range
        holds no more (``columns``: only those cells, and only rows having one). A
        reversed HBase scan includes its start row and excludes its stop row, the
        opposite of [lo, hi): it starts at ``hi`` (dropped if there), and stops just
        below ``lo`` (rows below ``lo`` dropped)."""
        if reverse:
            want = n + 1  # the row at ``hi`` may come first, and is not ours
            scan = Hbase_thrift.TScan(
                startRow=hi or b"",
                stopRow=_below(lo),
                caching=want,
                reversed=True,
                columns=columns,
            )
        else:
            want = n
            scan = Hbase_thrift.TScan(startRow=lo, stopRow=hi, caching=want, columns=columns)

        def run(conn: Any) -> list[Any]:
            client = conn.client
            scanner = client.scannerOpenWithScan(table, scan, {})
            try:
                return client.scannerGetList(scanner, want)
            finally:
                client.scannerClose(scanner)

        raw = self._call(f"scan {table.decode()}", run)
        done = len(raw) < want
        rows = []
        for result in raw:
            row = result.row
            if hi is not None and row >= hi:
                continue
            if row < lo:
                done = True  # a reversed scan went below the range
                break
            rows.append(result)
        if len(rows) > n:
            del rows[n:]
            done = False
        return rows, done

    def _pool_executor(self) -> ThreadPoolExecutor:
        with self._executor_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=max(1, min(self.salt_buckets, self._pool_size)),
                    thread_name_prefix="tmsgate-hbase-scan",
                )
            return self._executor

    # --- the offset search (reader.start_for_offset) ------------------------------------
    def seek_offset(self, prefix: bytes, offset: int) -> tuple[bytes, bytes | None] | None:
        """The MessageTable row of ``prefix`` (a topic generation's message keys) holding
        ``offset``: the last row whose base offset is at most ``offset`` (its key, and its
        value as read now, None if it went meanwhile), or None if no row starts at or
        below it. reader.start_for_offset's search, without a salted scan per probe: one
        salt bucket's rows are searched, then the buckets merged over the last gap
        (storage/offset_search.py).

        The rows found are remembered (storage/offset_hints.py) as hints, never as facts:
        rows go (TTL, topic deletion, a partial write settled and its offsets given to
        later rows), so a hint is used only once a read shows its row there with the same
        base and count. A hint row holding the offset is the answer (one get); others bound
        the search (one getRowsWithColumns of their ``d:o`` cells)."""
        if self._closed:
            raise BackendError(f"{self.url}: seek_offset refused: the backend is closed")
        if prefix[:1] != keys.MESSAGE:
            raise ValueError(f"seek_offset searches MessageTable keys, not {prefix[:1]!r}")
        table = self.tables[keys.MESSAGE]
        lo: HeadRow | None = None
        hi: HeadRow | None = None
        for _ in range(3):  # a stale hint is dropped and the next one tried
            lo, hi = self._hints.bracket(prefix, offset)
            if lo is None or lo.base + lo.count <= offset:
                lo, hi = self._verified(table, prefix, lo, hi)
                break
            value = self._get_value(table, lo.key)
            if holds(value, lo):
                self._hints.note(prefix, [lo])  # used: kept longer
                return lo.key, value
            self._hints.forget(prefix, lo)
        else:
            lo = hi = None
        found = self._search_buckets(table, prefix, offset, lo, hi)
        if found is None:
            return None
        return found.key, self._get_value(table, found.key)

    def _search_buckets(
        self,
        table: bytes,
        prefix: bytes,
        offset: int,
        lo: HeadRow | None,
        hi: HeadRow | None,
    ) -> HeadRow | None:
        """seek_offset between verified rows ``lo`` and ``hi`` (offset_search.py), each
        probe one scanner on one bucket (``d:o`` cells only); the rows found noted as
        hints."""
        buckets = self.salt_buckets
        bucket = zlib.crc32(prefix) % buckets  # the searched bucket; spreads topics

        def probe(start: bytes, stop: bytes, reverse: bool, n: int) -> tuple[list[HeadRow], bool]:
            row_lo, row_hi = _bucket_range(keys.MESSAGE, bucket, start, stop)
            rows, done = self._fetch(table, row_lo, row_hi, reverse, n, [_HEAD])
            heads = [_head_row(r) for r in rows]
            return (heads[::-1] if reverse else heads), done

        def ends(start: bytes, stop: bytes, which: list[bool]) -> dict[bool, list[HeadRow]]:
            if len(which) == 2 and buckets > 1:
                executor = self._pool_executor()
                futures = [executor.submit(probe, start, stop, r, 1) for r in which]
                return dict(zip(which, (f.result()[0] for f in futures), strict=True))
            return {r: probe(start, stop, r, 1)[0] for r in which}

        def merged(scanned: list[int], start: bytes, stop: bytes) -> Iterator[HeadRow]:
            for result in self._merged(table, keys.MESSAGE, scanned, start, stop, False, [_HEAD]):
                yield _head_row(result)

        io = SearchIO(probe, ends, merged)
        best, above = search_buckets(prefix, offset, lo, hi, buckets, bucket, io)
        # Hints: the row found (the offset may be named again, or another offset of the
        # row), the row after it, and the hints used (kept longer); not every row probed.
        self._hints.note(prefix, [r for r in (lo, hi, best, above) if r is not None])
        return best

    def _verified(
        self, table: bytes, prefix: bytes, lo: HeadRow | None, hi: HeadRow | None
    ) -> tuple[HeadRow | None, HeadRow | None]:
        """Hint rows ``lo`` and ``hi`` if they are still there with the same head (one
        getRowsWithColumns of their ``d:o`` cells); a stale one is forgotten."""
        hints = [h for h in (lo, hi) if h is not None]
        if not hints:
            return None, None
        rows = [self._salt(h.key) + h.key[1:] for h in hints]
        results = self._call(
            "verify offset hints",
            lambda conn: conn.client.getRowsWithColumns(table, rows, [_HEAD], {}),
        )
        heads = {keys.MESSAGE + r.row[1:]: _head_row(r) for r in results if _HEAD in r.columns}
        for h in hints:
            if heads.get(h.key) != h:
                self._hints.forget(prefix, h)
        lo = lo if lo is not None and heads.get(lo.key) == lo else None
        hi = hi if hi is not None and heads.get(hi.key) == hi else None
        if lo is not None and hi is not None and lo.key >= hi.key:
            return None, None  # not in key order: no hint is better than a wrong one
        return lo, hi

    def _get_value(self, table: bytes, key: bytes) -> bytes | None:
        row = self._salt(key) + key[1:]
        rows = self._call("get", lambda conn: conn.client.getRowWithColumns(table, row, None, {}))
        return _value(rows[0].columns) if rows else None

    # --- the rest ------------------------------------------------------------------------
    def sync_clock(self) -> None:
        """Backend.sync_clock. Every process's cell timestamps stay below the bound it
        reserved, and ``d:clock``'s newest cell is the highest bound any process reserved:
        from just below it, this process's later cells are newer than every cell written
        so far (by its own clock, another gateway's cell could be the newer one, and hide
        a rewrite of the same row: a taken-over partition's intent and producer-state
        rows). Costs one read, and moves this process's clock up to CLOCK_RESERVE_MS
        ahead: for when a row changes writer (a takeover), not for every write."""
        clock = self._engine_row().get(_CLOCK_COL)
        bound = int(clock) if clock else 0
        with self._clock_lock:
            self._last_ts = max(self._last_ts, bound - 1)

    def scan_keys(self, start: bytes, stop: bytes) -> Iterator[bytes]:
        return (key for key, _ in self.scan(start, stop))

    def scan_heads(
        self, start: bytes, stop: bytes, head: int
    ) -> Iterator[tuple[bytes, bytes, int]]:
        # HBase has no cheaper way to a cell's length than reading the cell.
        return ((key, value[:head], len(value)) for key, value in self.scan(start, stop))

    def collect_garbage(self) -> dict[str, int]:
        return {}  # HBase drops deleted cells at major compaction by itself

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._executor_lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
        self._close_pool()

    def _close_pool(self) -> None:
        # happybase's pool has no close: close the connections it holds now (one that a
        # thread still uses is closed when it is collected).
        while True:
            try:
                conn = self._pool._queue.get_nowait()
            except queue.Empty:
                return
            conn.close()

    def __repr__(self) -> str:
        return f"HBaseBackend({self.url}, salt_buckets={self.salt_buckets})"


def _head_row(result: Any) -> HeadRow:
    _, base, count = keys.ROW_HEAD.unpack(result.columns[_HEAD].value)
    return HeadRow(keys.MESSAGE + result.row[1:], base, count)


def _mutate_rows(table: bytes, chunk: list[Any], ts: int, conn: Any) -> None:
    conn.client.mutateRowsTs(table, chunk, ts, {})


def _chunks(batches: list[tuple[Any, int]]) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    size = 0
    for batch, n in batches:
        if chunk and (len(chunk) >= WRITE_MAX_ROWS or size + n > WRITE_MAX_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(batch)
        size += n
    if chunk:
        yield chunk


def _split_row(value: bytes) -> dict[bytes, bytes] | None:
    """A MessageTable/PayloadTable row's columns, or None if the value is not such a row
    (the columns would not rebuild it exactly)."""
    try:
        cols = keys.row_columns(value)
    except (IndexError, struct.error):
        return None
    if len(cols[keys.COL_HEAD]) != keys.ROW_HEAD.size or any(
        len(cols.get(c, b"12345678")) != 8 for c in (keys.COL_TX, keys.COL_TTL)
    ):
        return None  # too short for the columns its flags name
    return cols if keys.row_from_columns(cols) == value else None


def _value(columns: dict[bytes, Any]) -> bytes | None:
    """A row's value from its cells: the seed's columns written by its newest put (the
    cells sharing the ``o`` column's timestamp), or ``d:v``, whichever is newer."""
    raw = columns.get(_RAW)
    head = columns.get(_HEAD)
    if head is None or (raw is not None and raw.timestamp > head.timestamp):
        return None if raw is None else raw.value
    ts = head.timestamp
    cols = {}
    for name, cell in columns.items():
        col = _ROW_COLUMN_NAMES.get(name)
        if col is not None and cell.timestamp == ts:
            cols[col] = cell.value
    return keys.row_from_columns(cols)


def _unsalted(result: Any) -> bytes:
    return result.row[1:]


def _bucket_range(
    table_byte: bytes, bucket: int, lo: bytes, hi: bytes
) -> tuple[bytes, bytes | None]:
    """The row keys of store keys [lo, hi) (both in, or ``hi`` above, ``table_byte``'s
    table) in one salt bucket; None: to the table's end."""
    salt = bytes((bucket,))
    if hi[:1] == table_byte:
        return salt + lo[1:], salt + hi[1:]
    # the table's end: the bucket's end
    return salt + lo[1:], (bytes((bucket + 1,)) if bucket < 255 else None)


def _below(lo: bytes) -> bytes | None:
    """An exclusive stop row for a reversed scan that still includes ``lo``: exactly the
    row below when ``lo`` ends in a zero byte, else a lower one (the rows between are
    dropped by _fetch). None: no bound."""
    if not lo:
        return None
    if lo[-1] == 0:
        return lo[:-1] or None
    return lo[:-1] + bytes((lo[-1] - 1,))


def _dropped_connection(exc: BaseException) -> bool:
    """The connection broke (closed by the server, reset, refused), as opposed to HBase
    answering with an error or the call timing out."""
    if isinstance(exc, TTransportException):
        return exc.type != TTransportException.TIMED_OUT
    return isinstance(exc, OSError) and not isinstance(exc, TimeoutError)


def _detail(exc: BaseException) -> str:
    if isinstance(
        exc, (Hbase_thrift.IOError, Hbase_thrift.IllegalArgument, Hbase_thrift.AlreadyExists)
    ):
        message = exc.message
        if isinstance(message, bytes):
            message = message.decode("utf-8", "replace")
        # HBase sends a Java stack trace: its first line says what happened.
        first = (message or "").strip().splitlines()
        return f"{type(exc).__name__}: {first[0] if first else '(no message)'}"
    if isinstance(exc, TTransportException):
        return f"connection: {exc.message or exc}"
    if isinstance(exc, TApplicationException):
        message = exc.message
        if isinstance(message, bytes):  # happybase's protocol leaves strings undecoded
            message = message.decode("utf-8", "replace")
        return f"Thrift: {message or 'application error'}"
    if isinstance(exc, TimeoutError):
        return "no answer within the timeout (timeout_ms in the URL)"
    return f"{type(exc).__name__}: {exc}"


def _int_option(params: dict[str, str], name: str, low: int, high: int | None) -> int | None:
    raw = params.get(name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or value < low or (high is not None and value > high):
        bounds = f"{low}..{high}" if high is not None else f">= {low}"
        raise BackendError(f"hbase:// option {name}={raw!r}: need an integer {bounds}")
    return value


def open_url(
    rest: str, snapshot: bool = False, disk_reserve_bytes: int | None = None
) -> HBaseBackend:
    """``hbase://`` + ``host[:port][/prefix][?salt_buckets=N&pool_size=N&timeout_ms=N&
    connect_probe_ms=N]``. ``snapshot`` and ``disk_reserve_bytes`` do not apply to HBase
    and are ignored."""
    parts = urlsplit("//" + rest)
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError as exc:
        raise BackendError(f"hbase://{rest}: bad port ({exc})") from exc
    host = parts.hostname
    if not host:
        raise BackendError(f"hbase://{rest}: no host; try hbase://localhost:9090/tmsgate")
    prefix = parts.path.strip("/") or DEFAULT_PREFIX
    if not _PREFIX_RE.match(prefix):
        raise BackendError(
            f"hbase://{rest}: table prefix {prefix!r} is not a valid HBase table name "
            "(letters, digits, '_', '-', '.'; optionally 'namespace:' first)"
        )
    params = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(params) - set(_OPTIONS))
    if unknown:
        raise BackendError(
            f"unknown hbase:// option(s) {', '.join(unknown)}; known: {', '.join(_OPTIONS)}"
        )
    return HBaseBackend(
        host,
        port,
        prefix,
        salt_buckets=_int_option(params, "salt_buckets", 1, MAX_SALT_BUCKETS),
        pool_size=_int_option(params, "pool_size", 1, None) or DEFAULT_POOL_SIZE,
        timeout_ms=_int_option(params, "timeout_ms", 1, None) or DEFAULT_TIMEOUT_MS,
        connect_probe_ms=_int_option(params, "connect_probe_ms", 1, None)
        or DEFAULT_CONNECT_PROBE_MS,
    )
