"""A STAND-IN for HBase's Thrift 1 server, for tests. It is not HBase.

No HBase can run where tmsgate's tests run, so the ``hbase://`` engine (storage/hbase.py)
is tested against this: a Thrift 1 server speaking HBase's own IDL (the Hbase.thrift that
happybase ships, loaded with thriftpy2), buffered transport and binary protocol like
``hbase thrift start``, over tables kept in this process's memory. It follows HBase's
documented semantics for what it implements, so that the engine meets them here first:

- each row's mutation is applied under the table's lock (atomic per row), and nothing
  more: ``mutateRows``/``mutateRowsTs`` apply every row's puts, then every row's deletes,
  one row at a time, as HBase's Thrift handler does (``mutateRow`` deletes, then puts);
- cells have versions and timestamps (the caller's, or the server's clock in ms); a
  family keeps ``maxVersions`` versions and reads return the newest; delete markers mask
  every cell at or below their timestamp, also cells put *after* the delete ("deletes
  mask puts"), until a major compaction drops the markers; ``timeToLive`` hides old cells;
- ``checkAndPut`` compares the newest visible cell of one column under the table's lock
  and applies one Put stamped with the server's clock (Thrift 1's Mutation has no
  timestamp); an empty or null expected value matches an absent cell *or* an empty one,
  a non-empty one an equal cell (HRegion.checkAndMutate);
- scanners: start row inclusive, stop row exclusive, empty means unbounded; reversed
  scans start at their (inclusive) start row and go down to their (exclusive) stop row;
  ``scannerGetList`` returns up to ``nbRows`` rows, each as it is when fetched;
- errors are HBase's: ``IOError`` (unknown table or family, disabled table: the message
  starts with the Java exception HBase would name), ``IllegalArgument`` (bad arguments,
  unknown scanner id), ``AlreadyExists``.

Calls it does not implement (``atomicIncrement``, ``increment*``, ``append``,
``getRowOrBefore``, ``getRegionInfo``) and options it does not support
(``TScan.filterString``, ``TScan.batchSize``) answer with a clear error naming this file.
There is no persistence, no regions (one per table), no WAL, no replication.

Connections hold worker threads as on HBase's Thrift 1 server (TBoundedThreadPoolServer,
``hbase thrift start``): each accepted connection is served by one worker thread for its
whole life, and there are ``min_worker_threads`` of them (default 16, HBase's
``hbase.thrift.minWorkerThreads``). A connection beyond that is accepted (TCP) but gets
no answer, its calls unread, until a connection closes and frees a worker; then it is
served. (HBase releases that size the pool's core by ``hbase.thrift.minWorkerThreads``
start more threads only once ``hbase.thrift.maxQueuedRequests``, 1000, connections wait;
the stand-in never grows. docs/hbase.md has which releases do what.) Tests that run
several clients on one stand-in give it the threads an operator would give HBase.

Use: ``with running_standin() as address:`` ("127.0.0.1:PORT") for a server in a thread,
``StandinServer`` to stop and restart one or inject faults (``fail_mutations``; and
``drop_calls``: the connection dies before or after a call is applied), or by hand:
``python tests/hbase_standin.py --port 9090 [--min-worker-threads 16]``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import re
import signal
import socket
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from importlib import resources
from typing import Any

import thriftpy2
from sortedcontainers import SortedDict
from thriftpy2.protocol import TBinaryProtocolFactory
from thriftpy2.thrift import TApplicationException, TException, TProcessor
from thriftpy2.transport import TBufferedTransportFactory, TSocket, TTransportException

# The same module happybase uses (thriftpy2 caches a loaded IDL by path and name).
Hbase_thrift = thriftpy2.load(
    str(resources.files("happybase") / "Hbase.thrift"), module_name="Hbase_thrift"
)
IOError_ = Hbase_thrift.IOError
IllegalArgument = Hbase_thrift.IllegalArgument
AlreadyExists = Hbase_thrift.AlreadyExists
TCell = Hbase_thrift.TCell
TColumn = Hbase_thrift.TColumn
TRowResult = Hbase_thrift.TRowResult

log = logging.getLogger("hbase_standin")

LATEST_TIMESTAMP = (1 << 63) - 1  # HConstants.LATEST_TIMESTAMP: "now, on the server"
MAX_ROW_LENGTH = 32767  # HConstants.MAX_ROW_LENGTH
FOREVER = 0x7FFFFFFF  # HConstants.FOREVER (a family's timeToLive, seconds)
# TBoundedThreadPoolServer.DEFAULT_MIN_WORKER_THREADS (hbase.thrift.minWorkerThreads)
DEFAULT_MIN_WORKER_THREADS = 16
_NAMESPACE = re.compile(rb"^[A-Za-z0-9_]+$")
_QUALIFIER = re.compile(rb"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_COMPRESSION = {"NONE", "GZ", "LZO", "SNAPPY", "LZ4", "BZIP2", "ZSTD", "LZMA"}
_BLOOM = {"NONE", "ROW", "ROWCOL", "ROWPREFIX_FIXED_LENGTH"}

Column = tuple[bytes, bytes]  # (family, qualifier)
ColumnSpec = tuple[bytes, bytes | None]  # a family (qualifier None) or one column


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def _io_error(java_class: str, message: str) -> Exception:
    return IOError_(message=f"{java_class}: {message}")


def _illegal(message: str) -> Exception:
    return IllegalArgument(message=f"java.lang.IllegalArgumentException: {message}")


def parse_column(raw: bytes) -> ColumnSpec:
    """HBase's CellUtil.parseColumn: ``f`` is a family, ``f:q`` (also ``f:``) a column."""
    family, sep, qualifier = raw.partition(b":")
    return (family, qualifier if sep else None)


class _Row:
    __slots__ = ("cells", "column_marks", "family_marks")

    def __init__(self) -> None:
        self.cells: dict[Column, list[tuple[int, bytes]]] = {}  # versions, newest first
        self.family_marks: dict[bytes, int] = {}  # delete-family markers' timestamps
        self.column_marks: dict[Column, int] = {}  # delete-column markers' timestamps


class _Table:
    def __init__(self, name: bytes, families: dict[bytes, Any]) -> None:
        self.name = name
        self.families = families  # family -> ColumnDescriptor (name "f:")
        self.rows: SortedDict = SortedDict()
        self.lock = threading.RLock()
        self.enabled = True
        self.created_ms = now_ms()

    # --- writing (the caller holds self.lock) ----------------------------------------
    def check_family(self, family: bytes) -> None:
        if family not in self.families:
            raise _io_error(
                "org.apache.hadoop.hbase.regionserver.NoSuchColumnFamilyException",
                f"Column family {family.decode(errors='replace')} does not exist in "
                f"table {self.name.decode(errors='replace')}",
            )

    def put(self, row: bytes, family: bytes, qualifier: bytes, ts: int, value: bytes) -> None:
        r = self.rows.get(row)
        if r is None:
            r = self.rows[row] = _Row()
        column = (family, qualifier)
        mark = max(r.family_marks.get(family, -1), r.column_marks.get(column, -1))
        if ts <= mark:
            return  # masked by a delete marker: invisible until a major compaction
        versions = [v for v in r.cells.get(column, ()) if v[0] != ts]
        versions.append((ts, value))
        versions.sort(key=lambda v: v[0], reverse=True)
        del versions[self.families[family].maxVersions :]
        r.cells[column] = versions

    def delete(self, row: bytes, spec: ColumnSpec, ts: int) -> None:
        """A delete-family (qualifier None) or delete-column marker: every version at or
        below ``ts``, now and later."""
        r = self.rows.get(row)
        if r is None:
            r = self.rows[row] = _Row()
        family, qualifier = spec
        if qualifier is None:
            r.family_marks[family] = max(r.family_marks.get(family, -1), ts)
            doomed = [c for c in r.cells if c[0] == family]
        else:
            r.column_marks[spec] = max(r.column_marks.get(spec, -1), ts)  # type: ignore[index]
            doomed = [spec] if spec in r.cells else []  # type: ignore[list-item]
        for column in doomed:
            kept = [v for v in r.cells[column] if v[0] > ts]
            if kept:
                r.cells[column] = kept
            else:
                del r.cells[column]

    def major_compact(self) -> None:
        with self.lock:
            for key in list(self.rows):
                r = self.rows[key]
                r.family_marks.clear()
                r.column_marks.clear()
                if not r.cells:
                    del self.rows[key]

    # --- reading (the caller holds self.lock) ----------------------------------------
    def visible(
        self, row: bytes, columns: list[ColumnSpec] | None, before: int, now: int
    ) -> dict[Column, tuple[int, bytes]]:
        """The newest cell of each column, of timestamp < ``before`` (Get.setTimeRange(0,
        before)), not expired by the family's TTL, among ``columns`` (None: all)."""
        r = self.rows.get(row)
        if r is None:
            return {}
        out = {}
        for column, versions in r.cells.items():
            family, qualifier = column
            if columns is not None and not any(
                f == family and (q is None or q == qualifier) for f, q in columns
            ):
                continue
            ttl = self.families[family].timeToLive
            oldest = now - ttl * 1000 if 0 < ttl < FOREVER else None
            for ts, value in versions:
                if ts >= before:
                    continue
                if oldest is None or ts >= oldest:
                    out[column] = (ts, value)
                break
        return out

    def versions(
        self, row: bytes, spec: ColumnSpec, before: int, n: int, now: int
    ) -> list[tuple[int, bytes]]:
        """Up to ``n`` newest versions of each column ``spec`` names (a family: all its
        columns, in qualifier order), of timestamp < ``before``, not expired."""
        r = self.rows.get(row)
        if r is None:
            return []
        family, qualifier = spec
        ttl = self.families[family].timeToLive
        oldest = now - ttl * 1000 if 0 < ttl < FOREVER else -1
        out = []
        for column in sorted(r.cells):
            if column[0] != family or (qualifier is not None and column[1] != qualifier):
                continue
            live = [v for v in r.cells[column] if oldest <= v[0] < before]
            out += live[: max(n, 0)]
        return out


def _row_result(row: bytes, cells: dict[Column, tuple[int, bytes]], sort: bool) -> Any:
    named = {f + b":" + q: TCell(value=v, timestamp=ts) for (f, q), (ts, v) in cells.items()}
    if sort:
        return TRowResult(
            row=row, sortedColumns=[TColumn(columnName=n, cell=c) for n, c in sorted(named.items())]
        )
    return TRowResult(row=row, columns=named)


class _Scanner:
    def __init__(
        self,
        table: _Table,
        start: bytes,
        stop: bytes,
        reverse: bool,
        columns: list[ColumnSpec] | None,
        before: int,
        sort: bool,
    ) -> None:
        self.table = table
        self.stop = stop or None
        self.reverse = reverse
        self.columns = columns
        self.before = before
        self.sort = sort
        self.cursor: bytes | None = start or None  # where the next row may be
        self.cursor_inclusive = True
        self.done = False

    def next(self, n: int) -> list[Any]:
        out: list[Any] = []
        if self.done or n <= 0:
            return out
        table = self.table
        with table.lock:
            now = now_ms()
            if self.reverse:
                keys = table.rows.irange(
                    minimum=self.stop,
                    maximum=self.cursor,
                    inclusive=(False, self.cursor_inclusive),
                    reverse=True,
                )
            else:
                keys = table.rows.irange(
                    minimum=self.cursor,
                    maximum=self.stop,
                    inclusive=(self.cursor_inclusive, False),
                )
            for row in keys:
                self.cursor, self.cursor_inclusive = row, False
                cells = table.visible(row, self.columns, self.before, now)
                if cells:
                    out.append(_row_result(row, cells, self.sort))
                    if len(out) >= n:
                        return out
        self.done = True
        return out


class DropConnection(BaseException):
    """Raised by a handler to close the client's connection without answering (a
    BaseException, so that neither _hbase_call nor thriftpy2's processor answers it)."""


def _declared(method: str) -> tuple[type, ...]:
    """The exceptions the IDL lets ``method`` throw."""
    spec = getattr(Hbase_thrift.Hbase, method + "_result").thrift_spec
    return tuple(field[2] for field in spec.values() if field[1] != "success")


def _hbase_call(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Count the call. An error the IDL does not declare for it (say IllegalArgument
    where only IOError is) goes back as IOError, as HBase wraps any failure in one, and
    so does an unexpected error (a bug here), instead of dropping the connection."""
    declared = _declared(fn.__name__)

    @functools.wraps(fn)
    def call(self: StandinHBase, *args: Any) -> Any:
        self.calls[fn.__name__] += 1
        self._maybe_drop(fn.__name__, after=False)
        try:
            result = fn(self, *args)
            self._maybe_drop(fn.__name__, after=True)
            return result
        except TApplicationException:
            raise
        except TException as exc:
            if isinstance(exc, declared):
                raise
            raise IOError_(message=getattr(exc, "message", None) or repr(exc)) from None
        except Exception as exc:
            log.exception("stand-in call %s failed", fn.__name__)
            detail = f"stand-in internal error: {exc!r}\n{traceback.format_exc()}"
            raise _io_error("java.io.IOException", detail) from exc

    return call


class StandinHBase:
    """The Thrift 1 ``Hbase`` service over in-memory tables (the handler)."""

    def __init__(self) -> None:
        self.tables: dict[bytes, _Table] = {}
        self.namespaces = {b"default", b"hbase"}
        self.lock = threading.Lock()  # tables and scanners (each table has its own lock)
        self.scanners: dict[int, _Scanner] = {}
        self._next_scanner = 0
        self.calls: Counter[str] = Counter()
        # Fault injection: the next mutateRows(Ts) calls fail after this many rows.
        self._faults: list[tuple[int, str] | None] = []
        # Fault injection: (method, after) -> how many more calls drop their connection.
        self._drops: Counter[tuple[str, bool]] = Counter()

    def fail_mutations(
        self, after_rows: int = 0, times: int = 1, message: str = "", skip_calls: int = 0
    ) -> None:
        """After ``skip_calls`` more mutateRows/mutateRowsTs calls succeed, make the next
        ``times`` ones apply ``after_rows`` row mutations (puts first, as HBase does) and
        then fail with IOError."""
        fault = (after_rows, message or "injected fault")
        with self.lock:
            self._faults += [None] * skip_calls + [fault] * times

    def drop_calls(self, method: str, times: int = 1, after: bool = True) -> None:
        """Make the next ``times`` calls of ``method`` close the client's connection
        without an answer: ``after`` the call was applied (the answer is lost), or before
        (the call never ran), as a server dying or a network failing would."""
        with self.lock:
            self._drops[(method, after)] += times

    def _maybe_drop(self, method: str, after: bool) -> None:
        with self.lock:
            if self._drops[(method, after)] <= 0:
                return
            self._drops[(method, after)] -= 1
        raise DropConnection(f"{method}: injected connection drop")

    def open_scanners(self) -> int:
        with self.lock:
            return len(self.scanners)

    def __getattr__(self, name: str) -> Any:
        if name in Hbase_thrift.Hbase.thrift_services:

            def unimplemented(*args: Any) -> Any:
                self.calls[name] += 1
                raise TApplicationException(
                    TApplicationException.UNKNOWN_METHOD,
                    f"{name} is not implemented by the HBase Thrift stand-in "
                    "(tests/hbase_standin.py); it is a stand-in for tests, not HBase",
                )

            return unimplemented
        raise AttributeError(name)

    # --- names and tables --------------------------------------------------------------
    def _name(self, raw: bytes) -> bytes:
        namespace, sep, qualifier = raw.rpartition(b":")
        if not sep:
            namespace = b"default"
        if not _NAMESPACE.match(namespace) or not _QUALIFIER.match(qualifier):
            raise _illegal(f"Illegal table name {raw!r}")
        if namespace not in self.namespaces:
            raise _io_error(
                "org.apache.hadoop.hbase.NamespaceNotFoundException", namespace.decode()
            )
        return qualifier if namespace == b"default" else namespace + b":" + qualifier

    def _table(self, raw: bytes, enabled: bool = True) -> _Table:
        try:
            name = self._name(raw)
        except IllegalArgument as exc:
            raise IOError_(message=exc.message) from None
        table = self.tables.get(name)
        if table is None:
            raise _io_error("org.apache.hadoop.hbase.TableNotFoundException", name.decode())
        if enabled and not table.enabled:
            raise _io_error(
                "org.apache.hadoop.hbase.TableNotEnabledException", f"{name.decode()} is disabled"
            )
        return table

    @_hbase_call
    def getTableNames(self) -> list[bytes]:
        with self.lock:
            return sorted(self.tables)

    @_hbase_call
    def createTable(self, tableName: bytes, columnFamilies: list[Any]) -> None:
        name = self._name(tableName or b"")
        if not columnFamilies:
            raise _illegal("Table should have at least one column family.")
        families = {}
        for cd in columnFamilies:
            family = parse_column(cd.name or b"")[0]
            if not family:
                raise IllegalArgument(message="column name is empty")
            if cd.maxVersions is None or cd.maxVersions < 1:
                raise _illegal(f"Maximum versions must be positive ({cd.maxVersions})")
            if (cd.compression or "NONE").upper() not in _COMPRESSION:
                raise _illegal(f"No enum constant for compression {cd.compression}")
            if (cd.bloomFilterType or "NONE").upper() not in _BLOOM:
                raise _illegal(f"No enum constant BloomType.{cd.bloomFilterType}")
            families[family] = Hbase_thrift.ColumnDescriptor(
                name=family + b":",
                maxVersions=cd.maxVersions,
                compression=(cd.compression or "NONE").upper(),
                inMemory=bool(cd.inMemory),
                bloomFilterType=(cd.bloomFilterType or "NONE").upper(),
                bloomFilterVectorSize=0,
                bloomFilterNbHashes=0,
                blockCacheEnabled=bool(cd.blockCacheEnabled),
                timeToLive=cd.timeToLive if cd.timeToLive and cd.timeToLive > 0 else FOREVER,
            )
        with self.lock:
            if name in self.tables:
                raise AlreadyExists(message="table name already in use")
            self.tables[name] = _Table(name, families)

    @_hbase_call
    def deleteTable(self, tableName: bytes) -> None:
        with self.lock:
            table = self._table(tableName, enabled=False)
            if table.enabled:
                raise _io_error(
                    "org.apache.hadoop.hbase.TableNotDisabledException", table.name.decode()
                )
            del self.tables[table.name]

    @_hbase_call
    def enableTable(self, tableName: bytes) -> None:
        self._table(tableName, enabled=False).enabled = True

    @_hbase_call
    def disableTable(self, tableName: bytes) -> None:
        self._table(tableName).enabled = False

    @_hbase_call
    def isTableEnabled(self, tableName: bytes) -> bool:
        return self._table(tableName, enabled=False).enabled

    @_hbase_call
    def getColumnDescriptors(self, tableName: bytes) -> dict[bytes, Any]:
        table = self._table(tableName, enabled=False)
        return {cd.name: cd for cd in table.families.values()}

    @_hbase_call
    def getTableRegions(self, tableName: bytes) -> list[Any]:
        try:
            table = self._table(tableName, enabled=False)
        except IOError_:
            return []  # HBase answers an empty list for a table that does not exist
        return [
            Hbase_thrift.TRegionInfo(
                startKey=b"",
                endKey=b"",
                id=table.created_ms,
                name=table.name + b",," + str(table.created_ms).encode(),
                version=1,
                serverName=b"localhost",
                port=16020,
            )
        ]

    @_hbase_call
    def compact(self, tableNameOrRegionName: bytes) -> None:
        self._table(tableNameOrRegionName)  # a minor compaction keeps delete markers

    @_hbase_call
    def majorCompact(self, tableNameOrRegionName: bytes) -> None:
        self._table(tableNameOrRegionName).major_compact()

    # --- reading -----------------------------------------------------------------------
    def _columns(self, table: _Table, columns: list[bytes] | None) -> list[ColumnSpec] | None:
        if not columns:
            return None
        specs = [parse_column(c) for c in columns]
        for family, _ in specs:
            table.check_family(family)
        return specs

    def _get_rows(
        self, tableName: bytes, rows: list[bytes], columns: list[bytes] | None, before: int
    ) -> list[Any]:
        table = self._table(tableName)
        specs = self._columns(table, columns)
        out = []
        with table.lock:
            now = now_ms()
            for row in rows:
                cells = table.visible(row, specs, before, now)
                if cells:  # an empty Result is left out, as rowResultFromHBase does
                    out.append(_row_result(row, cells, False))
        return out

    @_hbase_call
    def getRow(self, tableName: bytes, row: bytes, attributes: Any) -> list[Any]:
        return self._get_rows(tableName, [row], None, LATEST_TIMESTAMP)

    @_hbase_call
    def getRowTs(self, tableName: bytes, row: bytes, timestamp: int, attributes: Any) -> list[Any]:
        return self._get_rows(tableName, [row], None, timestamp)

    @_hbase_call
    def getRowWithColumns(
        self, tableName: bytes, row: bytes, columns: list[bytes] | None, attributes: Any
    ) -> list[Any]:
        return self._get_rows(tableName, [row], columns, LATEST_TIMESTAMP)

    @_hbase_call
    def getRowWithColumnsTs(
        self,
        tableName: bytes,
        row: bytes,
        columns: list[bytes] | None,
        timestamp: int,
        attributes: Any,
    ) -> list[Any]:
        return self._get_rows(tableName, [row], columns, timestamp)

    @_hbase_call
    def getRows(self, tableName: bytes, rows: list[bytes], attributes: Any) -> list[Any]:
        return self._get_rows(tableName, rows or [], None, LATEST_TIMESTAMP)

    @_hbase_call
    def getRowsTs(
        self, tableName: bytes, rows: list[bytes], timestamp: int, attributes: Any
    ) -> list[Any]:
        return self._get_rows(tableName, rows or [], None, timestamp)

    @_hbase_call
    def getRowsWithColumns(
        self, tableName: bytes, rows: list[bytes], columns: list[bytes] | None, attributes: Any
    ) -> list[Any]:
        return self._get_rows(tableName, rows or [], columns, LATEST_TIMESTAMP)

    @_hbase_call
    def getRowsWithColumnsTs(
        self,
        tableName: bytes,
        rows: list[bytes],
        columns: list[bytes] | None,
        timestamp: int,
        attributes: Any,
    ) -> list[Any]:
        return self._get_rows(tableName, rows or [], columns, timestamp)

    def _versions(
        self, tableName: bytes, row: bytes, column: bytes, before: int, n: int
    ) -> list[Any]:
        table = self._table(tableName)
        spec = parse_column(column or b"")
        table.check_family(spec[0])
        with table.lock:
            found = table.versions(row, spec, before, n, now_ms())
        return [TCell(value=v, timestamp=ts) for ts, v in found]

    @_hbase_call
    def get(self, tableName: bytes, row: bytes, column: bytes, attributes: Any) -> list[Any]:
        return self._versions(tableName, row, column, LATEST_TIMESTAMP, 1)

    @_hbase_call
    def getVer(
        self, tableName: bytes, row: bytes, column: bytes, numVersions: int, attributes: Any
    ) -> list[Any]:
        return self._versions(tableName, row, column, LATEST_TIMESTAMP, numVersions)

    @_hbase_call
    def getVerTs(
        self,
        tableName: bytes,
        row: bytes,
        column: bytes,
        timestamp: int,
        numVersions: int,
        attributes: Any,
    ) -> list[Any]:
        return self._versions(tableName, row, column, timestamp, numVersions)

    # --- writing -----------------------------------------------------------------------
    @staticmethod
    def _check_row(row: bytes | None) -> bytes:
        if not row:
            raise _illegal("Row length is 0")
        if len(row) > MAX_ROW_LENGTH:
            raise _illegal(f"Row length {len(row)} is > {MAX_ROW_LENGTH}")
        return row

    @staticmethod
    def _timestamp(timestamp: int) -> int:
        if timestamp < 0:
            raise _illegal(f"Timestamp cannot be negative. ts={timestamp}")
        return timestamp

    def _split(
        self, table: _Table, mutations: list[Any], batch: bool
    ) -> tuple[list[tuple[bytes, bytes, bytes]], list[ColumnSpec]]:
        """A row's mutations as (puts, deletes), as HBase's Thrift handler reads them: a
        put needs ``family:qualifier`` (a bare family is ignored by mutateRow and refused
        by mutateRows); a delete of ``family`` deletes the family."""
        puts, deletes = [], []
        for m in mutations or []:
            family, qualifier = parse_column(m.column or b"")
            table.check_family(family)
            if m.isDelete:
                deletes.append((family, qualifier))
            elif qualifier is None:
                log.warning(
                    "No column qualifier specified. Delete is the only mutation "
                    "supported over the whole column family."
                )
                if batch:
                    raise _illegal("Invalid famAndQf provided.")
            else:
                puts.append((family, qualifier, m.value if m.value is not None else b""))
        return puts, deletes

    def _apply_puts(self, table: _Table, row: bytes, puts: list[Any], ts: int) -> None:
        with table.lock:  # one row, atomically
            stamp = now_ms() if ts == LATEST_TIMESTAMP else ts
            for family, qualifier, value in puts:
                table.put(row, family, qualifier, stamp, value)

    def _apply_deletes(self, table: _Table, row: bytes, deletes: list[Any], ts: int) -> None:
        with table.lock:
            stamp = now_ms() if ts == LATEST_TIMESTAMP else ts
            for spec in deletes:
                table.delete(row, spec, stamp)

    def _mutate_row(self, tableName: bytes, row: bytes, mutations: list[Any], ts: int) -> None:
        table = self._table(tableName)
        row = self._check_row(row)
        puts, deletes = self._split(table, mutations, batch=False)
        ts = self._timestamp(ts)
        # HBase's mutateRowTs: table.delete(delete), then table.put(put): two operations.
        if deletes:
            self._apply_deletes(table, row, deletes, ts)
        if puts:
            self._apply_puts(table, row, puts, ts)

    def _mutate_rows(self, tableName: bytes, rowBatches: list[Any], ts: int) -> None:
        table = self._table(tableName)
        ts = self._timestamp(ts)
        split = []
        for batch in rowBatches or []:
            row = self._check_row(batch.row)
            split.append((row, *self._split(table, batch.mutations, batch=True)))
        with self.lock:
            fault = self._faults.pop(0) if self._faults else None
        budget = fault[0] if fault is not None else -1
        # HBase's mutateRowsTs: table.put(puts), then table.delete(deletes); each row's
        # Put (and Delete) is atomic, the call is not.
        steps = [(row, puts, True) for row, puts, _ in split if puts]
        steps += [(row, deletes, False) for row, _, deletes in split if deletes]
        for row, what, is_put in steps:
            if budget == 0:
                break
            budget -= 1
            if is_put:
                self._apply_puts(table, row, what, ts)
            else:
                self._apply_deletes(table, row, what, ts)
        if fault is not None:
            raise _io_error(
                "org.apache.hadoop.hbase.client.RetriesExhaustedWithDetailsException",
                fault[1],
            )

    @_hbase_call
    def mutateRow(self, tableName: bytes, row: bytes, mutations: list[Any], attributes: Any):
        self._mutate_row(tableName, row, mutations, LATEST_TIMESTAMP)

    @_hbase_call
    def mutateRowTs(
        self, tableName: bytes, row: bytes, mutations: list[Any], timestamp: int, attributes: Any
    ) -> None:
        self._mutate_row(tableName, row, mutations, timestamp)

    @_hbase_call
    def mutateRows(self, tableName: bytes, rowBatches: list[Any], attributes: Any) -> None:
        self._mutate_rows(tableName, rowBatches, LATEST_TIMESTAMP)

    @_hbase_call
    def mutateRowsTs(
        self, tableName: bytes, rowBatches: list[Any], timestamp: int, attributes: Any
    ) -> None:
        self._mutate_rows(tableName, rowBatches, timestamp)

    @_hbase_call
    def deleteAll(self, tableName: bytes, row: bytes, column: bytes, attributes: Any) -> None:
        self._delete_all(tableName, row, column, LATEST_TIMESTAMP)

    @_hbase_call
    def deleteAllTs(
        self, tableName: bytes, row: bytes, column: bytes, timestamp: int, attributes: Any
    ) -> None:
        self._delete_all(tableName, row, column, timestamp)

    def _delete_all(self, tableName: bytes, row: bytes, column: bytes, ts: int) -> None:
        table = self._table(tableName)
        spec = parse_column(column or b"")
        table.check_family(spec[0])
        self._apply_deletes(table, self._check_row(row), [spec], self._timestamp(ts))

    @_hbase_call
    def deleteAllRow(self, tableName: bytes, row: bytes, attributes: Any) -> None:
        self._delete_row(tableName, row, LATEST_TIMESTAMP)

    @_hbase_call
    def deleteAllRowTs(self, tableName: bytes, row: bytes, timestamp: int, attributes: Any):
        self._delete_row(tableName, row, timestamp)

    def _delete_row(self, tableName: bytes, row: bytes, ts: int) -> None:
        table = self._table(tableName)
        specs: list[ColumnSpec] = [(f, None) for f in table.families]
        self._apply_deletes(table, self._check_row(row), specs, self._timestamp(ts))

    @_hbase_call
    def checkAndPut(
        self,
        tableName: bytes,
        row: bytes,
        column: bytes,
        value: bytes | None,
        mput: Any,
        attributes: Any,
    ) -> bool:
        table = self._table(tableName)
        row = self._check_row(row)
        family, qualifier = parse_column(column or b"")
        put_family, put_qualifier = parse_column(mput.column or b"")
        if qualifier is None or put_qualifier is None:
            raise _illegal("checkAndPut needs family:qualifier columns")
        table.check_family(family)
        table.check_family(put_family)
        with table.lock:  # the check and the put under the row's lock
            now = now_ms()
            current = table.visible(row, [(family, qualifier)], LATEST_TIMESTAMP, now)
            found = current.get((family, qualifier))
            if not value:  # null or empty: no cell, or an empty one
                matches = found is None or found[1] == b""
            else:
                matches = found is not None and found[1] == value
            if not matches:
                return False
            # Put(row, HConstants.LATEST_TIMESTAMP): the server's clock, whatever the
            # caller's cells carry; a put at or below a newer cell stays hidden.
            table.put(row, put_family, put_qualifier, now, mput.value or b"")
            return True

    # --- scanners ----------------------------------------------------------------------
    def _open(
        self,
        tableName: bytes,
        start: bytes | None,
        stop: bytes | None,
        columns: list[bytes] | None,
        before: int = LATEST_TIMESTAMP,
        reverse: bool = False,
        sort: bool = False,
        prefix: bytes | None = None,
    ) -> int:
        table = self._table(tableName)
        specs = self._columns(table, columns)
        scanner = _Scanner(table, start or b"", stop or b"", reverse, specs, before, sort)
        if prefix:  # WhileMatchFilter(PrefixFilter): up to the first row without it
            scanner.stop = _prefix_end(prefix)
        with self.lock:
            sid = self._next_scanner
            self._next_scanner = (self._next_scanner + 1) & 0x7FFFFFFF
            self.scanners[sid] = scanner
            return sid

    @_hbase_call
    def scannerOpenWithScan(self, tableName: bytes, scan: Any, attributes: Any) -> int:
        if scan.filterString:
            raise _io_error(
                "java.io.IOException",
                "TScan.filterString is not supported by the HBase Thrift stand-in "
                "(tests/hbase_standin.py); it is a stand-in for tests, not HBase",
            )
        if scan.batchSize:
            raise _io_error(
                "java.io.IOException",
                "TScan.batchSize (partial rows) is not supported by the HBase Thrift "
                "stand-in (tests/hbase_standin.py)",
            )
        before = LATEST_TIMESTAMP if scan.timestamp is None else scan.timestamp
        return self._open(
            tableName,
            scan.startRow,
            scan.stopRow,
            scan.columns,
            before=before,
            reverse=bool(scan.reversed),
            sort=bool(scan.sortColumns),
        )

    @_hbase_call
    def scannerOpen(self, tableName: bytes, startRow: bytes, columns: Any, attributes: Any):
        return self._open(tableName, startRow, None, columns)

    @_hbase_call
    def scannerOpenWithStop(
        self, tableName: bytes, startRow: bytes, stopRow: bytes, columns: Any, attributes: Any
    ) -> int:
        return self._open(tableName, startRow, stopRow, columns)

    @_hbase_call
    def scannerOpenWithPrefix(
        self, tableName: bytes, startAndPrefix: bytes, columns: Any, attributes: Any
    ) -> int:
        return self._open(tableName, startAndPrefix, None, columns, prefix=startAndPrefix)

    @_hbase_call
    def scannerOpenTs(
        self, tableName: bytes, startRow: bytes, columns: Any, timestamp: int, attributes: Any
    ) -> int:
        return self._open(tableName, startRow, None, columns, before=timestamp)

    @_hbase_call
    def scannerOpenWithStopTs(
        self,
        tableName: bytes,
        startRow: bytes,
        stopRow: bytes,
        columns: Any,
        timestamp: int,
        attributes: Any,
    ) -> int:
        return self._open(tableName, startRow, stopRow, columns, before=timestamp)

    def _scanner(self, sid: int) -> _Scanner:
        with self.lock:
            scanner = self.scanners.get(sid)
        if scanner is None:
            raise IllegalArgument(message="scanner ID is invalid")
        return scanner

    @_hbase_call
    def scannerGetList(self, id: int, nbRows: int) -> list[Any]:
        return self._scanner(id).next(nbRows)

    @_hbase_call
    def scannerGet(self, id: int) -> list[Any]:
        return self._scanner(id).next(1)

    @_hbase_call
    def scannerClose(self, id: int) -> None:
        self._scanner(id)
        with self.lock:
            self.scanners.pop(id, None)


def _prefix_end(prefix: bytes) -> bytes | None:
    trimmed = prefix.rstrip(b"\xff")
    return trimmed[:-1] + bytes((trimmed[-1] + 1,)) if trimmed else None


class StandinServer:
    """The stand-in served on ``host:port`` (port 0: a free one) from a thread.

    ``stop()`` closes the listening socket and every client connection, as a dead server
    would; ``start()`` again serves the same tables on the same port. ``hbase`` is the
    handler (tables, call counts, ``fail_mutations``). ``idle_timeout_s`` closes a client
    connection idle that long, as HBase's Thrift server does (its read timeout).
    ``min_worker_threads``: connections served at once, each holding a worker for its
    life; later ones wait unanswered (the module's notes; ``waiting`` counts them)."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        idle_timeout_s: float | None = None,
        min_worker_threads: int = DEFAULT_MIN_WORKER_THREADS,
    ) -> None:
        if min_worker_threads < 1:
            raise ValueError(f"min_worker_threads={min_worker_threads}: need at least 1")
        self.host = host
        self.port = port
        self.idle_timeout_s = idle_timeout_s
        self.min_worker_threads = min_worker_threads
        self._workers = threading.BoundedSemaphore(min_worker_threads)
        self._waiting = 0  # accepted connections no worker serves yet
        self.hbase = StandinHBase()
        self._processor = TProcessor(Hbase_thrift.Hbase, self.hbase)
        self._transport = TBufferedTransportFactory()
        self._protocol = TBinaryProtocolFactory()
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._clients: set[socket.socket] = set()
        self._handlers: set[threading.Thread] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def waiting(self) -> int:
        """Accepted connections waiting for a free worker (unanswered)."""
        with self._lock:
            return self._waiting

    def start(self) -> StandinServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        sock.listen(128)
        sock.settimeout(0.05)  # accept() wakes up to see stop()
        self.port = sock.getsockname()[1]
        self._sock = sock
        self._stopping.clear()
        self._thread = threading.Thread(
            target=self._accept_loop, name=f"hbase-standin-{self.port}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self.close_connections()

    def close_connections(self) -> None:
        """Close every client connection now, as HBase's Thrift server closes idle ones
        (its read timeout); returns once their handlers have ended."""
        with self._lock:
            clients, handlers = list(self._clients), list(self._handlers)
        for client in clients:
            with contextlib.suppress(OSError):
                client.shutdown(socket.SHUT_RDWR)
        for handler in handlers:
            handler.join(timeout=5)

    def __enter__(self) -> StandinServer:
        return self.start() if self._sock is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _accept_loop(self) -> None:
        assert self._sock is not None
        while not self._stopping.is_set():
            try:
                client, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(self.idle_timeout_s)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            handler = threading.Thread(
                target=self._serve, args=(client,), name="hbase-standin-conn", daemon=True
            )
            with self._lock:
                self._clients.add(client)
                self._handlers.add(handler)
            handler.start()

    def _wait_for_worker(self) -> bool:
        """Take a worker for this connection's life, waiting (its bytes unread) while
        every worker serves another connection; False if the server stops meanwhile."""
        with self._lock:
            self._waiting += 1
        try:
            while not self._stopping.is_set():
                if self._workers.acquire(timeout=0.05):
                    return True
            return False
        finally:
            with self._lock:
                self._waiting -= 1

    def _serve(self, client: socket.socket) -> None:
        worker = self._wait_for_worker()
        try:
            if worker:
                self._process(client)
        finally:
            if worker:
                self._workers.release()
            with contextlib.suppress(OSError):
                client.close()
            with self._lock:
                self._clients.discard(client)
                self._handlers.discard(threading.current_thread())

    def _process(self, client: socket.socket) -> None:
        itrans = self._transport.get_transport(TSocket(sock=client))
        otrans = self._transport.get_transport(TSocket(sock=client))
        iprot = self._protocol.get_protocol(itrans)
        oprot = self._protocol.get_protocol(otrans)
        try:
            while not self._stopping.is_set():
                self._processor.process(iprot, oprot)
        except (TTransportException, OSError, DropConnection):
            pass  # the client left, the connection idled out, the server stops, or a fault
        except Exception:
            log.exception("stand-in connection failed")


@contextlib.contextmanager
def running_standin(**options: Any) -> Iterator[str]:
    """A stand-in on 127.0.0.1 and a free port for the block: yields ``"host:port"``."""
    with StandinServer(**options) as server:
        yield server.address


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="A stand-in for HBase's Thrift 1 server, for tests (not HBase: "
        "tables in memory, lost at exit)."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9090)
    parser.add_argument(
        "--idle-timeout", type=float, default=None, help="close connections idle this long (s)"
    )
    parser.add_argument(
        "--min-worker-threads",
        type=int,
        default=DEFAULT_MIN_WORKER_THREADS,
        help="connections served at once, one worker each for its life; later ones wait "
        "unanswered (HBase's hbase.thrift.minWorkerThreads, default %(default)s)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    # SIGTERM stops it as Ctrl-C does (a background job ignores SIGINT).
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    server = StandinServer(args.host, args.port, args.idle_timeout, args.min_worker_threads).start()
    # The first line of stdout names the address: with --port 0, the one the OS chose.
    print(f"HBase Thrift 1 stand-in (not HBase) on {server.address}; Ctrl-C stops it", flush=True)
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
