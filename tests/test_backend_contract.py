"""The backend contract (storage/backend.py), run against every storage engine.

The contract is HBase's: a row is written atomically, and nothing more. Every test that
takes ``engine`` or ``open_engine`` runs once per engine:

- ``leveldb``: ``leveldb:///<tmp_path>/db``;
- ``memory``: ``memory://<unique name>`` (dropped after the test);
- ``hbase-standin``: ``hbase://<stand-in>/<unique prefix>`` against the Thrift stand-in
  of tests/hbase_standin.py (started once per module; skipped while that module or
  happybase is missing);
- ``hbase-real``: ``hbase://$TMSGATE_TEST_HBASE/<unique prefix>`` (skipped unless that
  variable names a host:port);
- ``served``: ``served://<socket>`` of a BackendServer (storage/served.py) in this process
  over ``leveldb:///<tmp_path>/db``; ``reopen`` with no other client open restarts the
  server and its LevelDB on the same directory, so persistence is the owner's.

Values under keys that start with b"M" or b"P" (the MessageTable and the PayloadTable)
are always shaped as the store shapes them (keys.encode_row / keys.encode_gap): the
hbase engine splits those into columns and need not accept other bytes there.

The memory engine's fault injection (Faults, BackendCrashed) is tested at the end.
"""

from __future__ import annotations

import importlib
import itertools
import os
import random
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from tmsgate.storage import keys, memory
from tmsgate.storage.backend import Backend, Mutation, open_backend
from tmsgate.storage.errors import BackendError, StorageError
from tmsgate.storage.ids import TopicId
from tmsgate.storage.memory import BackendCrashed, Faults, MemoryBackend, MemoryTable
from tmsgate.storage.served import BackendServer
from tmsgate.storage.space import SpaceGuard

ENGINES = ["leveldb", "memory", "hbase-standin", "hbase-real", "served"]
HBASE_ENV = "TMSGATE_TEST_HBASE"
END = b"\xff" * 16  # above every key these tests write

# Every table prefix the store uses (storage/keys.py), with any added since.
TABLES = sorted(
    {b"M", b"P", b"R", b"W", b"T", b"C", b"X", b"S"}
    | {
        value
        for name, value in vars(keys).items()
        if name.isupper() and isinstance(value, bytes) and len(value) == 1 and value.isupper()
    }
)
ROW_TABLES = (keys.MESSAGE, keys.PAYLOAD)  # their values are rows, split into columns


# --- engines ---------------------------------------------------------------------------
def _unique(tag: str) -> str:
    return f"{tag}{uuid.uuid4().hex[:12]}"


def _need_happybase() -> None:
    try:
        importlib.import_module("happybase")
    except ImportError as exc:
        pytest.skip(f"happybase is not installed ({exc}): pip install 'tmsgate[hbase]'")


@pytest.fixture(scope="module")
def hbase_standin_address() -> Iterator[str]:
    """One Thrift stand-in for the module's tests; each test has its own table prefix."""
    _need_happybase()
    try:
        standin = importlib.import_module("hbase_standin")
    except ImportError as exc:
        pytest.skip(f"the HBase stand-in tests/hbase_standin.py is not importable: {exc}")
    with standin.running_standin() as address:
        yield address


class ServedOwner:
    """The owner of a ``served://`` store: a BackendServer over a LevelDB directory, as
    ``tmsgate serve --workers`` runs it (gateway/workers.py). The socket lives in a short
    directory of its own (a Unix socket path has at most 107 bytes)."""

    def __init__(self, db_dir: str) -> None:
        self.db_dir = db_dir
        self.db_url = f"leveldb://{db_dir}"
        self._socket_dir = tempfile.TemporaryDirectory(prefix="served-")
        self.socket_path = os.path.join(self._socket_dir.name, "store.sock")
        self.url = f"served://{self.socket_path}"
        self.server: BackendServer | None = None
        self.start()

    def start(self) -> None:
        backend = open_backend(self.db_url)
        self.server = BackendServer(backend, self.socket_path, self.db_dir)

    def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server.backend.close()
            self.server = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        self._socket_dir.cleanup()


@pytest.fixture(params=ENGINES)
def engine_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    kind = request.param
    if kind == "leveldb":
        yield f"leveldb://{tmp_path / 'db'}"
    elif kind == "served":
        owner = ServedOwner(str(tmp_path / "db"))
        request.node.served_owner = owner  # open_engine restarts it on reopen
        yield owner.url
        owner.close()
    elif kind == "memory":
        name = _unique("contract-")
        yield f"memory://{name}"
        memory.drop(name)
    elif kind == "hbase-standin":
        address = request.getfixturevalue("hbase_standin_address")
        yield f"hbase://{address}/{_unique('contract_')}"
    else:
        address = os.environ.get(HBASE_ENV)
        if not address:
            pytest.skip(f"set {HBASE_ENV}=host:port to run the contract against a real HBase")
        _need_happybase()
        yield f"hbase://{address}/{_unique('tmsgate_contract_')}"


class EngineOpener:
    """``open_engine()`` opens the test's URL (again after ``reopen``/``close``); every
    backend still open is closed at teardown."""

    def __init__(self, url: str, owner: ServedOwner | None = None) -> None:
        self.url = url
        self.owner = owner
        self.opened: list[Backend] = []

    def __call__(self) -> Backend:
        backend = open_backend(self.url)
        self.opened.append(backend)
        return backend

    def close(self, backend: Backend) -> None:
        self.opened.remove(backend)
        backend.close()

    def reopen(self, backend: Backend) -> Backend:
        self.close(backend)
        if self.owner is not None and not self.opened:
            self.owner.restart()  # what was written is read back from the disk
        return self()

    def close_all(self) -> None:
        while self.opened:
            self.opened.pop().close()


@pytest.fixture
def open_engine(request: pytest.FixtureRequest, engine_url: str) -> Iterator[EngineOpener]:
    opener = EngineOpener(engine_url, getattr(request.node, "served_owner", None))
    yield opener
    opener.close_all()


@pytest.fixture
def engine(open_engine: EngineOpener) -> Backend:
    return open_engine()


# --- helpers ---------------------------------------------------------------------------
def scan(
    backend: Backend,
    start: bytes = b"",
    stop: bytes = END,
    *,
    reverse: bool = False,
    include_start: bool = True,
) -> list[tuple[bytes, bytes]]:
    rows = list(backend.scan(start, stop, reverse=reverse, include_start=include_start))
    for row in rows:
        assert type(row) is tuple and len(row) == 2, row
        assert type(row[0]) is bytes and type(row[1]) is bytes, row
    return rows


def expected_scan(
    model: dict[bytes, bytes],
    start: bytes,
    stop: bytes,
    *,
    reverse: bool = False,
    include_start: bool = True,
) -> list[tuple[bytes, bytes]]:
    rows = sorted(
        (k, v) for k, v in model.items() if start <= k < stop and (include_start or k != start)
    )
    return rows[::-1] if reverse else rows


def value_for(key: bytes, n: int = 0) -> bytes:
    """A value that may go under ``key``: a row for the MessageTable and PayloadTable."""
    if key[:1] in ROW_TABLES:
        return keys.encode_row(n, 1, b"v" + key)
    return b"v%d:" % n + key


def get_checked(backend: Backend, key: bytes) -> bytes | None:
    value = backend.get(key)
    assert value is None or type(value) is bytes, value
    return value


def assert_contents(backend: Backend, model: dict[bytes, bytes]) -> None:
    """The backend holds exactly ``model`` (within b"" .. END), in order both ways."""
    assert scan(backend) == expected_scan(model, b"", END)
    assert scan(backend, reverse=True) == expected_scan(model, b"", END, reverse=True)
    for key, value in model.items():
        assert get_checked(backend, key) == value, key


# --- single rows -----------------------------------------------------------------------
def test_put_get_overwrite_delete(engine: Backend) -> None:
    assert get_checked(engine, b"k") is None
    engine.write([(b"k", b"v1")])
    assert get_checked(engine, b"k") == b"v1"
    engine.write([(b"k", b"v2")])
    assert get_checked(engine, b"k") == b"v2"
    engine.write([(b"k", None)])
    assert get_checked(engine, b"k") is None
    engine.write([(b"k", None)])  # deleting a missing key is no error
    engine.write([])  # nor is an empty write
    assert get_checked(engine, b"k") is None
    assert scan(engine) == []

    engine.write([(b"k", b"back")], sync=False)
    assert get_checked(engine, b"k") == b"back"


def test_empty_value_is_not_missing(engine: Backend) -> None:
    engine.write([(b"empty", b""), (b"full", b"x")])
    assert get_checked(engine, b"empty") == b""
    assert get_checked(engine, b"empty") is not None
    assert scan(engine) == [(b"empty", b""), (b"full", b"x")]
    engine.write([(b"full", b"")])
    assert get_checked(engine, b"full") == b""
    engine.write([(b"empty", None)])
    assert get_checked(engine, b"empty") is None
    assert scan(engine) == [(b"full", b"")]


def test_last_mutation_of_a_key_in_one_write_wins(engine: Backend) -> None:
    engine.write([(b"b", b"old"), (b"e", b"old")])
    engine.write(
        [
            (b"a", b"1"),
            (b"b", b"1"),
            (b"a", b"2"),
            (b"c", b"1"),
            (b"c", None),  # put then delete: deleted
            (b"d", None),
            (b"d", b"4"),  # delete then put: put
            (b"a", b"3"),
            (b"e", None),
            (b"e", b"new"),
            (b"e", None),
        ]
    )
    assert scan(engine) == [(b"a", b"3"), (b"b", b"1"), (b"d", b"4")]
    engine.write([(b"b", b"x"), (b"b", None)])
    assert get_checked(engine, b"b") is None

    # A large write (more than a small write's mutations, values long enough for
    # LevelDB's value log) with repeated keys, long and short values, deletes.
    big = [(b"big%02d" % i, bytes([i]) * 300) for i in range(20)]
    engine.write(
        [
            *big,
            (b"big05", None),
            (b"big07", b"y" * 70_000),
            (b"big07", b"short"),
            (b"big09", b"z" * 1000),
            (b"big11", b"q"),
            (b"big11", b"w" * 100_000),
            (b"big13", None),
            (b"big13", b"u" * 5000),
            (b"big13", None),
        ]
    )
    model = dict(big)
    model.pop(b"big05")
    model[b"big07"] = b"short"
    model[b"big09"] = b"z" * 1000
    model[b"big11"] = b"w" * 100_000
    model.pop(b"big13")
    model.update({b"a": b"3", b"d": b"4"})
    assert_contents(engine, model)


def test_binary_keys_and_unsigned_bytewise_order(engine: Backend) -> None:
    ordered = [
        b"\x00",
        b"\x00\x00",
        b"\x00\x01",
        b"\x00\xff",
        b"\x01",
        b"\x01\x00",
        b"a",
        b"a\x00",
        b"a\x00\x00",
        b"a\x01",
        b"ab",
        b"a\x7f",
        b"a\x80",
        b"a\xff",
        b"b",
        b"\x7f",
        b"\x7f\xff",
        b"\x80",
        b"\x80\x00",
        b"\xfe\xff",
        b"\xff",
        b"\xff\x00",
        b"\xff\xff",
        b"\xff\xff\xff",
    ]
    assert ordered == sorted(ordered)
    shuffled = ordered[:]
    random.Random(7).shuffle(shuffled)
    engine.write([(k, b"v" + k) for k in shuffled])
    model = {k: b"v" + k for k in ordered}
    assert scan(engine) == [(k, b"v" + k) for k in ordered]
    assert scan(engine, reverse=True) == [(k, b"v" + k) for k in reversed(ordered)]
    for key in ordered:
        assert get_checked(engine, key) == b"v" + key

    def position(key: bytes) -> int:
        return [k for k, _ in scan(engine)].index(key)

    assert position(b"a") < position(b"a\x00") < position(b"a\x01") < position(b"b")
    assert position(b"\x7f") < position(b"\x80")  # unsigned, not signed bytes
    assert position(b"\x00") < position(b"\x00\x00") < position(b"\x01")

    # Keys that are prefixes of each other are different rows.
    assert scan(engine, b"a", b"a\x01") == [
        (b"a", b"va"),
        (b"a\x00", b"va\x00"),
        (b"a\x00\x00", b"va\x00\x00"),
    ]
    assert scan(engine, b"a\x00", b"a\x00\x01") == [
        (b"a\x00", b"va\x00"),
        (b"a\x00\x00", b"va\x00\x00"),
    ]
    engine.write([(b"a", None), (b"\xff", None)])
    model.pop(b"a")
    model.pop(b"\xff")
    assert get_checked(engine, b"a\x00") == b"va\x00"
    assert get_checked(engine, b"\xff\x00") == b"v\xff\x00"
    assert_contents(engine, model)
    for start, stop in [(b"\x00", b"\x01"), (b"\x7f", b"\x81"), (b"\xff", b"\xff\xff\xff\x00")]:
        for reverse in (False, True):
            for include_start in (True, False):
                got = scan(engine, start, stop, reverse=reverse, include_start=include_start)
                assert got == expected_scan(
                    model, start, stop, reverse=reverse, include_start=include_start
                ), (start, stop, reverse, include_start)


# --- scans -----------------------------------------------------------------------------
def test_scan_bounds(engine: Backend) -> None:
    model = {b"k%02d" % i: b"v%02d" % i for i in range(0, 20, 2)}  # k00, k02, ... k18
    engine.write(list(model.items()))
    # Half-open, both directions, include_start only ever about ``start``.
    assert [k for k, _ in scan(engine, b"k04", b"k10")] == [b"k04", b"k06", b"k08"]
    assert [k for k, _ in scan(engine, b"k04", b"k10", reverse=True)] == [b"k08", b"k06", b"k04"]
    assert [k for k, _ in scan(engine, b"k04", b"k10", include_start=False)] == [b"k06", b"k08"]
    assert [k for k, _ in scan(engine, b"k04", b"k10", reverse=True, include_start=False)] == [
        b"k08",
        b"k06",
    ]
    # An absent start key: include_start changes nothing.
    assert [k for k, _ in scan(engine, b"k05", b"k10", include_start=False)] == [b"k06", b"k08"]
    # Empty ranges.
    for reverse in (False, True):
        for include_start in (False, True):
            kw = {"reverse": reverse, "include_start": include_start}
            assert scan(engine, b"k04", b"k04", **kw) == []
            assert scan(engine, b"k05", b"k06", **kw) == []
            assert scan(engine, b"a", b"k00", **kw) == []
            assert scan(engine, b"k18\x00", b"z", **kw) == []
            one = scan(engine, b"k04", b"k04\x00", **kw)
            assert one == ([(b"k04", b"v04")] if include_start else [])

    bounds = [b"", b"k", b"k00", b"k01", b"k05", b"k06", b"k06\x00", b"k18", b"k19", b"l", END]
    for start, stop in itertools.combinations_with_replacement(bounds, 2):
        for reverse in (False, True):
            for include_start in (True, False):
                got = scan(engine, start, stop, reverse=reverse, include_start=include_start)
                want = expected_scan(
                    model, start, stop, reverse=reverse, include_start=include_start
                )
                assert got == want, (start, stop, reverse, include_start)


def test_reverse_scan_whose_only_row_is_the_start_key(engine: Backend) -> None:
    """A reverse scan starts from the last row below ``stop``; when that row is ``start``
    itself it is still returned (with include_start). plyvel's reverse iterator stops
    there without returning it (plyvel 1.5.1, Iterator.real_prev compares the first row
    with ``start`` using >= whatever include_start says)."""
    engine.write([(b"a", b"1"), (b"c", b"3"), (b"e", b"5")])
    assert scan(engine, b"c", b"d", reverse=True) == [(b"c", b"3")]
    assert scan(engine, b"c", b"e", reverse=True) == [(b"c", b"3")]
    assert scan(engine, b"a", b"b", reverse=True) == [(b"a", b"1")]
    assert scan(engine, b"e", END, reverse=True) == [(b"e", b"5")]
    assert scan(engine, b"c", b"d", reverse=True, include_start=False) == []
    assert scan(engine, b"c", b"e\x00", reverse=True) == [(b"e", b"5"), (b"c", b"3")]


def test_scan_across_every_table_prefix(engine: Backend) -> None:
    suffixes = [b"", b"\x00", b"ns:t\x00", b"ns:t\x00\x00\x00\x00\x01", b"\x7f", b"\xff\xff"]
    inside = [table + s for table in TABLES for s in suffixes]
    outside = [b"0", b"B\xff\xff", b"Y", b"Z\x00", b"a", b"\x00", b"\xff"]
    model = {k: value_for(k, i) for i, k in enumerate(inside + outside)}
    rows = list(model.items())
    random.Random(3).shuffle(rows)
    engine.write(rows)
    assert_contents(engine, model)
    for i, low in enumerate(TABLES):
        for high in TABLES[i:]:
            start, stop = low, keys.prefix_end(high)
            for reverse in (False, True):
                for include_start in (True, False):
                    got = scan(engine, start, stop, reverse=reverse, include_start=include_start)
                    assert got == expected_scan(
                        model, start, stop, reverse=reverse, include_start=include_start
                    ), (start, stop, reverse, include_start)
    whole = scan(engine, TABLES[0], keys.prefix_end(TABLES[-1]))
    assert [k for k, _ in whole] == sorted(inside)


def test_big_scans_return_every_row_once_in_order(engine: Backend) -> None:
    n = 3000
    model = {b"big" + i.to_bytes(4, "big"): i.to_bytes(4, "big") * (i % 5) for i in range(n)}
    rows = list(model.items())
    random.Random(5).shuffle(rows)
    engine.write(rows)
    ordered = sorted(model.items())
    assert scan(engine, b"big", b"bih") == ordered
    assert scan(engine, b"big", b"bih", reverse=True) == ordered[::-1]
    start, stop = ordered[500][0], ordered[2900][0]
    assert scan(engine, start, stop, include_start=False) == ordered[501:2900]
    assert scan(engine, start, stop, reverse=True, include_start=False) == ordered[2899:500:-1]
    # Deleting most rows leaves a sparse range to scan past.
    engine.write([(k, None) for i, (k, _) in enumerate(ordered) if i % 97])
    left = [row for i, row in enumerate(ordered) if i % 97 == 0]
    assert scan(engine, b"big", b"bih") == left
    assert scan(engine, b"big", b"bih", reverse=True) == left[::-1]


def _write_mixed_rows(engine: Backend) -> None:
    """Values large (LevelDB's value log) and small, under every table prefix, some of
    them deleted again."""
    model = {
        table + b"ns:t\x00" + i.to_bytes(4, "big"): value_for(table, i) * (1 + 400 * (i % 3))
        for table in TABLES
        for i in range(40)
    }
    engine.write(list(model.items()))
    engine.write([(k, None) for i, k in enumerate(sorted(model)) if i % 7 == 0])


def test_key_scans_name_the_rows_a_scan_returns(engine: Backend) -> None:
    """scan_keys (what the janitor deletes by): the same keys as scan, values large
    (LevelDB's value log) and small, across table prefixes and after deletes."""
    _write_mixed_rows(engine)
    for i, low in enumerate(TABLES):
        for high in TABLES[i:]:
            start, stop = low, keys.prefix_end(high)
            assert list(engine.scan_keys(start, stop)) == [k for k, _ in scan(engine, start, stop)]
    assert list(engine.scan_keys(b"a", b"a")) == []


def test_head_scans_give_each_rows_first_bytes_and_length(engine: Backend) -> None:
    """scan_heads (what the compaction cleaner's survey reads): the rows scan returns,
    each cut to its first bytes with its whole length, for values large (LevelDB's value
    log) and small, across table prefixes and after deletes."""
    _write_mixed_rows(engine)
    for head in (0, 5, 13, 100_000):
        for i, low in enumerate(TABLES):
            for high in TABLES[i:]:
                start, stop = low, keys.prefix_end(high)
                want = [(k, v[:head], len(v)) for k, v in scan(engine, start, stop)]
                assert list(engine.scan_heads(start, stop, head)) == want
    assert list(engine.scan_heads(b"a", b"a", 13)) == []


def test_abandoned_scans_leave_the_engine_working(open_engine: EngineOpener) -> None:
    engine = open_engine()
    model = {b"ab%05d" % i: b"%d" % i for i in range(1000)}
    engine.write(list(model.items()))
    ordered = sorted(model.items())
    for reverse in (False, True):
        rows = engine.scan(b"ab", b"ac", reverse=reverse)
        taken = list(itertools.islice(rows, 300))
        assert taken == (ordered[::-1] if reverse else ordered)[:300]
        rows.close()  # type: ignore[attr-defined]
    # Started and left open (not closed, not exhausted) while the engine goes on.
    dangling = engine.scan(b"ab", b"ac")
    assert next(dangling) == ordered[0]
    dangling_reverse = engine.scan(b"ab", b"ac", reverse=True)
    assert next(dangling_reverse) == ordered[-1]
    engine.write([(b"ab%05d" % i, b"new") for i in range(1000, 1300)])
    model.update({b"ab%05d" % i: b"new" for i in range(1000, 1300)})
    assert get_checked(engine, b"ab01299") == b"new"
    assert_contents(engine, model)
    del dangling, dangling_reverse
    engine = open_engine.reopen(engine)
    assert_contents(engine, model)


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
def test_rows_written_during_a_scan(engine: Backend, reverse: bool) -> None:
    """The scan neither fails nor repeats a row, and returns every row that was there
    throughout, with a value it had; rows added or deleted meanwhile may or may not be
    returned (no snapshot is promised)."""
    original = [b"s%05d" % i for i in range(0, 2400, 2)]  # even: odd keys fall between
    engine.write([(k, b"old") for k in original])
    allowed: dict[bytes, set[bytes]] = {k: {b"old"} for k in original}
    deleted: set[bytes] = set()
    seen: list[tuple[bytes, bytes]] = []
    rows = engine.scan(b"s", b"t", reverse=reverse)
    for round_ in range(3):
        seen += itertools.islice(rows, 350)
        added = [b"s%05d" % i for i in range(2 * round_ + 1, 2400, 14)]
        overwritten = original[round_::5]
        gone = original[round_ + 1 :: 7]
        mutations: list[Mutation] = [(k, b"added") for k in added]
        mutations += [(k, b"new") for k in overwritten]
        mutations += [(k, None) for k in gone]
        engine.write(mutations)
        for k in added:
            allowed.setdefault(k, set()).add(b"added")
        for k in overwritten:
            allowed[k].add(b"new")
        deleted.update(gone)
    seen += rows
    got = [k for k, _ in seen]
    assert len(got) == len(set(got)), "a row was returned twice"
    assert got == sorted(got, reverse=reverse), "rows out of order"
    for key, value in seen:
        assert key in allowed, key
        assert value in allowed[key], (key, value)
    kept = {k for k in original if k not in deleted}
    missing = kept - set(got)
    assert not missing, f"rows there throughout the scan were not returned: {sorted(missing)}"


# --- values ----------------------------------------------------------------------------
def test_values_up_to_one_mib(open_engine: EngineOpener) -> None:
    engine = open_engine()
    rng = random.Random(11)
    sizes = [0, 1, 63, 64, 255, 256, 257, 4095, 65_535, 65_536, 65_537, 300_000, 1 << 20]
    model = {b"size%08d" % n: rng.randbytes(n) for n in sizes}
    for key, value in model.items():  # one at a time (small writes)
        engine.write([(key, value)])
    batch = {b"batch%08d" % n: rng.randbytes(n) for n in sizes}
    engine.write(list(batch.items()) + [(b"pad%02d" % i, b"p" * 300) for i in range(10)])
    model.update(batch)
    model.update({b"pad%02d" % i: b"p" * 300 for i in range(10)})
    assert_contents(engine, model)
    # Large over small, small over large, large deleted.
    engine.write([(b"size%08d" % 1, rng.randbytes(1 << 20))])
    engine.write([(b"size%08d" % (1 << 20), b"tiny")])
    engine.write([(b"batch%08d" % 300_000, None)])
    model[b"size%08d" % 1] = engine.get(b"size%08d" % 1)  # type: ignore[assignment]
    assert len(model[b"size%08d" % 1]) == 1 << 20
    model[b"size%08d" % (1 << 20)] = b"tiny"
    model.pop(b"batch%08d" % 300_000)
    assert_contents(engine, model)
    engine = open_engine.reopen(engine)
    assert_contents(engine, model)


def test_many_small_values(engine: Backend) -> None:
    rng = random.Random(13)
    model = {b"small%05d" % i: rng.randbytes(i % 37) for i in range(2000)}
    rows = list(model.items())
    for i in range(0, 1900, 100):
        engine.write(rows[i : i + 100])
    for key, value in rows[1900:]:
        engine.write([(key, value)], sync=False)
    assert_contents(engine, model)


def test_collect_garbage(open_engine: EngineOpener) -> None:
    engine = open_engine()
    model = {b"gc%03d" % i: bytes([i]) * 1000 for i in range(40)}
    engine.write(list(model.items()))
    engine.write([(b"gc%03d" % i, None) for i in range(0, 40, 2)])
    engine.write([(b"gc%03d" % i, b"again" * 100) for i in range(1, 40, 4)] + [(b"x", b"1")] * 17)
    for i in range(0, 40, 2):
        model.pop(b"gc%03d" % i)
    model.update({b"gc%03d" % i: b"again" * 100 for i in range(1, 40, 4)})
    model[b"x"] = b"1"
    stats = engine.collect_garbage()
    assert isinstance(stats, dict)
    assert all(isinstance(k, str) and isinstance(v, int) for k, v in stats.items()), stats
    assert_contents(engine, model)
    engine = open_engine.reopen(engine)
    assert isinstance(engine.collect_garbage(), dict)
    assert_contents(engine, model)


# --- phases ----------------------------------------------------------------------------
def test_write_phases(engine: Backend) -> None:
    engine.write_phases(
        [
            [(b"a", b"1"), (b"b", b"1")],
            [(b"a", b"2")],
            [],
            [(b"c", b"1")],
            [(b"b", None)],
        ]
    )
    assert scan(engine) == [(b"a", b"2"), (b"c", b"1")]
    engine.write_phases([])
    engine.write_phases([[], []])
    engine.write_phases([[(b"d", None)], [(b"d", b"x")]])
    assert get_checked(engine, b"d") == b"x"
    engine.write_phases([[(b"e", b"1"), (b"e", b"2")]])  # one phase: last mutation wins
    assert get_checked(engine, b"e") == b"2"
    engine.write_phases([[(b"a", None)], [], [(b"a", b"3"), (b"f", b"")]], sync=False)
    assert scan(engine) == [(b"a", b"3"), (b"c", b"1"), (b"d", b"x"), (b"e", b"2"), (b"f", b"")]
    # Phases with many rows (LevelDB may merge them into one batch).
    first = [(b"p%04d" % i, b"one") for i in range(100)]
    second = [(b"p%04d" % i, b"two" * 100) for i in range(0, 100, 3)]
    third = [(b"p%04d" % i, None) for i in range(0, 100, 9)]
    engine.write_phases([first, second, third])
    expect = dict(first) | dict(second)
    for key, _ in third:
        expect.pop(key)
    assert scan(engine, b"p", b"q") == sorted(expect.items())


# --- persistence -----------------------------------------------------------------------
def test_persistence_across_close_and_reopen(open_engine: EngineOpener) -> None:
    engine = open_engine()
    model: dict[bytes, bytes] = {}
    first: list[Mutation] = [(b"keep%03d" % i, b"%d" % i) for i in range(50)]
    first += [
        (b"gone", b"x"),
        (b"empty", b""),
        (b"\x00bin\xff", b"\xff\x00"),
        (b"big", b"B" * 70_000),
    ]
    engine.write(first)
    engine.write([(b"gone", None), (b"keep007", b"seven")])
    engine.write_phases([[(b"phase", b"1")], [(b"phase", b"2")]])
    model.update(first)
    model.pop(b"gone")
    model[b"keep007"] = b"seven"
    model[b"phase"] = b"2"
    assert_contents(engine, model)
    engine = open_engine.reopen(engine)
    assert_contents(engine, model)
    assert get_checked(engine, b"gone") is None
    engine.write([(b"later", b"l"), (b"keep000", None)], sync=False)
    model[b"later"] = b"l"
    model.pop(b"keep000")
    engine = open_engine.reopen(engine)
    assert_contents(engine, model)


# --- MessageTable and PayloadTable rows ------------------------------------------------
def _row_shapes() -> list[bytes]:
    rng = random.Random(17)
    return [
        keys.encode_row(0, 1, b"hello"),
        keys.encode_row(1, 1, b""),  # an empty payload
        keys.encode_row(2, 1, None),  # a null payload
        keys.encode_row(3, 5, rng.randbytes(1000), 77),
        keys.encode_row(8, 1, b"p", None, b"meta", 60_000),
        keys.encode_row(9, 1, None, 12, b"", None),  # empty meta, null payload
        keys.encode_row(10, 3, b"\x00\xff" * 5000, 2**63 - 1, b"m" * 300, 2**64 - 1),
        keys.encode_row(13, 1, b"", 5, b"\x00", 0),
        keys.negate_write_pointer(keys.encode_row(14, 1, b"rolled back", 99)),
        keys.encode_row(15, 2, None, 123, reference=True),
        keys.encode_row(17, 2, None, 124, reference=True, sealed=True),
        keys.encode_row(19, 1, None, 125, b"meta", 1000, reference=True, sealed=True),
        keys.negate_write_pointer(keys.encode_row(20, 4, None, 126, reference=True)),
        keys.encode_row(24, 1, None, sealed=True),
        keys.encode_gap(25, 100),
        keys.encode_gap(2**40, keys.MAX_ROW_COUNT),
        keys.encode_row(2**63, 1, bytes(range(256)) * 4, -1, bytes(range(255, -1, -1)), 7),
        keys.encode_row(0, 1, rng.randbytes(1 << 20)),  # a 1 MiB payload
    ]


def _row_key(table: bytes, i: int) -> bytes:
    topic = TopicId("ns", "contract")
    prefix = keys.data_prefix(table, topic, 3)
    if table == keys.MESSAGE:
        return prefix + keys.MESSAGE_SUFFIX.pack(1_700_000_000_000 + i, i % 7)
    return prefix + keys.PAYLOAD_SUFFIX.pack(1000 + i, 1_700_000_000_000 + i, i % 7)


def test_message_and_payload_rows_round_trip(open_engine: EngineOpener) -> None:
    engine = open_engine()
    shapes = _row_shapes()
    model = {_row_key(t, i): v for t in ROW_TABLES for i, v in enumerate(shapes)}
    engine.write(list(model.items()))
    for key, value in model.items():
        assert get_checked(engine, key) == value, (key, keys.decode_row(value)[:5])
    assert_contents(engine, model)
    for table in ROW_TABLES:
        prefix = keys.all_generations_prefix(table, TopicId("ns", "contract"))
        for reverse in (False, True):
            got = scan(engine, prefix, keys.prefix_end(prefix), reverse=reverse)
            assert got == expected_scan(model, prefix, keys.prefix_end(prefix), reverse=reverse)
    engine = open_engine.reopen(engine)
    assert_contents(engine, model)


def test_row_overwritten_by_another_shape(engine: Backend) -> None:
    """A row overwritten by a row with other columns (fewer, more, or none in common)
    reads back as exactly the new row: no column of the old one survives."""
    shapes = [s for s in _row_shapes() if len(s) < 100_000]
    pairs = list(itertools.product(range(len(shapes)), repeat=2))
    model: dict[bytes, bytes] = {}
    for table in ROW_TABLES:
        olds = [(_row_key(table, n), shapes[i]) for n, (i, _) in enumerate(pairs)]
        news = [(_row_key(table, n), shapes[j]) for n, (_, j) in enumerate(pairs)]
        engine.write(olds)
        engine.write(news)
        model.update(news)
    assert_contents(engine, model)
    # Both in one write: the later one wins.
    both: list[Mutation] = []
    for n, (i, j) in enumerate(pairs):
        key = _row_key(keys.MESSAGE, 10_000 + n)
        both += [(key, shapes[i]), (key, shapes[j])]
        model[key] = shapes[j]
    engine.write(both)
    assert_contents(engine, model)
    # The store's rollback rewrites a row with its write pointer negated.
    rolled = {k: keys.negate_write_pointer(v) for k, v in model.items()}
    engine.write(list(rolled.items()))
    assert_contents(engine, rolled)
    engine.write([(k, None) for k in rolled])
    assert scan(engine) == []


# --- concurrency -----------------------------------------------------------------------
def test_concurrent_writers_and_scanners(engine: Backend) -> None:
    writers, per_writer, batch = 4, 200, 5
    errors: list[BaseException] = []
    done = threading.Event()
    scans = [0, 0]

    def write(w: int) -> None:
        try:
            for i in range(0, per_writer, batch):
                rows = [(b"c%d-%04d" % (w, j), b"%d:%d" % (w, j)) for j in range(i, i + batch)]
                engine.write(rows)
                for key, value in rows:
                    got = engine.get(key)
                    assert got == value, (key, got)
        except BaseException as exc:
            errors.append(exc)

    def read(r: int) -> None:
        try:
            while True:
                finished = done.is_set()
                got = [k for k, _ in engine.scan(b"c", b"d", reverse=bool(r))]
                assert got == sorted(set(got), reverse=bool(r)), "a scan repeated or misordered"
                scans[r] += 1
                if finished:
                    return
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    readers = [threading.Thread(target=read, args=(r,)) for r in range(2)]
    for t in readers + threads:
        t.start()
    for t in threads:
        t.join(60)
    done.set()
    for t in readers:
        t.join(60)
    assert not any(t.is_alive() for t in threads + readers)
    assert not errors, errors
    assert min(scans) >= 1
    want = {
        b"c%d-%04d" % (w, j): b"%d:%d" % (w, j) for w in range(writers) for j in range(per_writer)
    }
    assert scan(engine, b"c", b"d") == sorted(want.items())


# --- against a model -------------------------------------------------------------------
ALPHABET = [
    b"",
    b"\x00",
    b"\x00\x00",
    b"\x01",
    b"a",
    b"a\x00",
    b"a\x01",
    b"ab",
    b"b",
    b"\x7f",
    b"\x80",
    b"\xff",
    b"\xff\x00",
    b"\xff\xff",
]
_keys = st.sampled_from(ALPHABET)
_mutations = st.lists(st.tuples(_keys, st.none() | st.binary(max_size=8)), max_size=6)
_bound = st.none() | _keys  # None: the end of the example's key space
_operations = st.one_of(
    st.tuples(st.just("write"), _mutations, st.booleans()),
    st.tuples(st.just("phases"), st.lists(_mutations, max_size=3), st.booleans()),
    st.tuples(st.just("get"), _keys),
    st.tuples(st.just("scan"), _bound, _bound, st.booleans(), st.booleans()),
)
_EXAMPLES = itertools.count()


@settings(
    max_examples=50,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(operations=st.lists(_operations, max_size=25))
def test_matches_a_dict_model(engine: Backend, operations: list[tuple]) -> None:
    # Each example has its own key space (the engine is shared by the examples).
    prefix = b"h" + next(_EXAMPLES).to_bytes(4, "big")
    note(f"key prefix {prefix!r}, operations {operations!r}")
    end = keys.prefix_end(prefix)
    model: dict[bytes, bytes] = {}

    def apply(mutations: Sequence[tuple[bytes, bytes | None]]) -> list[Mutation]:
        out: list[Mutation] = []
        for key, value in mutations:
            out.append((prefix + key, value))
            if value is None:
                model.pop(prefix + key, None)
            else:
                model[prefix + key] = value
        return out

    for op in operations:
        if op[0] == "write":
            engine.write(apply(op[1]), sync=op[2])
        elif op[0] == "phases":
            engine.write_phases([apply(phase) for phase in op[1]], sync=op[2])
        elif op[0] == "get":
            assert get_checked(engine, prefix + op[1]) == model.get(prefix + op[1]), op
        else:
            _, low, high, reverse, include_start = op
            start, stop = sorted(end if b is None else prefix + b for b in (low, high))
            got = scan(engine, start, stop, reverse=reverse, include_start=include_start)
            want = expected_scan(model, start, stop, reverse=reverse, include_start=include_start)
            assert got == want, op
    assert scan(engine, prefix, end) == sorted(model.items())
    assert scan(engine, prefix, end, reverse=True) == sorted(model.items(), reverse=True)


# --- the memory engine: shared names and fault injection -------------------------------
@pytest.fixture
def memory_name() -> Iterator[str]:
    name = _unique("faults-")
    yield name
    memory.drop(name)


def test_memory_names_are_shared_and_dropped(memory_name: str) -> None:
    url = f"memory://{memory_name}"
    one, two = open_backend(url), open_backend(url)
    one.write([(b"k", b"v")])
    assert two.get(b"k") == b"v"
    two.write([(b"k", None), (b"j", b"w")])
    assert list(one.scan(b"", END)) == [(b"j", b"w")]
    one.close()
    assert open_backend(url).get(b"j") == b"w"
    memory.drop(memory_name)
    assert list(open_backend(url).scan(b"", END)) == []
    # ``memory://`` alone: a private table for each backend.
    private_a, private_b = open_backend("memory://"), open_backend("memory://")
    private_a.write([(b"p", b"1")])
    assert private_b.get(b"p") is None
    assert private_a.get(b"p") == b"1"


class RecordingTable(MemoryTable):
    """A MemoryTable that remembers the order rows landed in."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[bytes] = []

    def put(self, key: bytes, value: bytes | None) -> None:
        super().put(key, value)
        self.log.append(key)


ROWS12 = [(b"r%02d" % i, b"v%02d" % i) for i in range(12)]


def _expect_crashed(backend: MemoryBackend) -> None:
    calls: list[Callable[[], object]] = [
        lambda: backend.get(b"r00"),
        lambda: backend.check_and_put(b"r00", None, b"x"),
        lambda: backend.write([(b"after", b"x")]),
        lambda: backend.write_phases([[(b"after", b"x")], [(b"after2", b"y")]]),
        lambda: list(backend.scan(b"", END)),
        lambda: list(backend.scan(b"", END, reverse=True)),
    ]
    for call in calls:
        with pytest.raises(BackendCrashed):
            call()


@pytest.mark.parametrize("k", [0, 1, 5, 11])
def test_crash_after_rows(memory_name: str, k: int) -> None:
    shared = memory.table(memory_name)
    backend = MemoryBackend(shared, Faults(seed=k, crash_after_rows=k))
    with pytest.raises(BackendCrashed):
        backend.write(ROWS12)
    assert backend.crashed
    landed = dict(shared.rows)
    assert len(landed) == k
    assert landed.items() <= dict(ROWS12).items()
    _expect_crashed(backend)
    assert dict(shared.rows) == landed  # nothing more landed
    backend.close()
    # A new backend on the same table (a restarted process) sees the k rows and goes on.
    after = open_backend(f"memory://{memory_name}")
    assert list(after.scan(b"", END)) == sorted(landed.items())
    after.write([(b"new", b"1")])
    assert after.get(b"new") == b"1"


def test_crash_after_rows_counts_across_writes_and_phases() -> None:
    table = MemoryTable()
    backend = MemoryBackend(table, Faults(seed=1, crash_after_rows=7))
    backend.write(ROWS12[:3])
    backend.write(ROWS12[3:6])  # exactly six rows so far: no crash yet
    with pytest.raises(BackendCrashed):
        backend.write_phases([ROWS12[6:8], ROWS12[8:]])
    assert len(table.rows) == 7
    assert set(table.rows) >= {k for k, _ in ROWS12[:6]}
    _expect_crashed(backend)

    table = MemoryTable()
    backend = MemoryBackend(table, Faults(crash_after_rows=len(ROWS12)))
    backend.write(ROWS12)  # every row lands; the next row written crashes
    with pytest.raises(BackendCrashed):
        backend.write([(b"one more", b"x")])
    assert dict(table.rows) == dict(ROWS12)


def test_rows_land_in_no_promised_order() -> None:
    """With faults, a write's rows land shuffled, so a crash leaves any subset."""
    subsets = set()
    for seed in range(20):
        table = MemoryTable()
        with pytest.raises(BackendCrashed):
            MemoryBackend(table, Faults(seed=seed, crash_after_rows=3)).write(ROWS12)
        subsets.add(tuple(table.rows))
    assert len(subsets) > 1


def test_last_mutation_wins_when_rows_are_shuffled() -> None:
    mutations: list[Mutation] = [
        (b"a", b"1"),
        (b"b", b"1"),
        (b"a", None),
        (b"c", b"1"),
        (b"a", b"2"),
        (b"b", None),
        (b"d", b"1"),
        (b"d", None),
        (b"c", b"2"),
    ]
    for seed in range(50):
        table = MemoryTable()
        table.rows.update({b"b": b"0", b"d": b"0"})
        MemoryBackend(table, Faults(seed=seed)).write(mutations)
        assert dict(table.rows) == {b"a": b"2", b"c": b"2"}, seed


def test_fail_rate_raises_and_leaves_a_subset() -> None:
    want = dict(ROWS12 + [(b"s%02d" % i, b"w") for i in range(8)])
    outcomes = {"ok": 0, "none": 0, "partial": 0}
    for seed in range(60):
        table = MemoryTable()
        backend = MemoryBackend(table, Faults(seed=seed, fail_rate=0.1))
        try:
            backend.write(list(want.items()))
        except BackendError as exc:
            assert not isinstance(exc, BackendCrashed)
            assert "injected" in str(exc)
            rows = dict(table.rows)
            assert rows.items() <= want.items()
            assert len(rows) < len(want)
            outcomes["partial" if rows else "none"] += 1
        else:
            assert dict(table.rows) == want
            outcomes["ok"] += 1
        # A failed write is not a crash: the backend goes on.
        assert not backend.crashed
        assert backend.failures == (0 if len(table.rows) == len(want) else 1)
        backend.faults.fail_rate = 0  # type: ignore[union-attr]
        backend.write(list(want.items()))
        assert dict(table.rows) == want
        assert list(backend.scan(b"", END)) == sorted(want.items())
    assert all(outcomes.values()), outcomes


def _faulty_run(faults: Faults) -> tuple[str | None, list[bytes], dict[bytes, bytes], int]:
    table = RecordingTable()
    backend = MemoryBackend(table, faults)
    error = None
    try:
        backend.write(ROWS12)
        backend.write_phases([ROWS12[:4], [(b"x", b"1"), (b"r00", None)], ROWS12[6:]])
        backend.write([(k, None) for k, _ in ROWS12[::2]])
    except BackendError as exc:
        error = type(exc).__name__
    return error, table.log, dict(table.rows), backend.failures


def test_the_same_seed_repeats_the_same_outcome() -> None:
    outcomes = []
    for seed in range(30):
        first = _faulty_run(Faults(seed=seed, fail_rate=0.03, crash_rate=0.02))
        assert _faulty_run(Faults(seed=seed, fail_rate=0.03, crash_rate=0.02)) == first
        outcomes.append(first)
    assert len({repr(o) for o in outcomes}) > 1  # and other seeds differ
    assert {o[0] for o in outcomes} >= {None, "BackendError", "BackendCrashed"}
    # Through the URL too (private tables).
    url = "memory://?seed=5&fail_rate=0.2"
    results = []
    for _ in range(2):
        backend = open_backend(url)
        try:
            backend.write(ROWS12)
            results.append(("ok", list(backend.scan(b"", END))))
        except BackendError:
            results.append(("failed", list(backend.scan(b"", END))))
    assert results[0] == results[1]


def test_write_phases_never_start_a_phase_before_the_last_one_landed() -> None:
    phases = [[(b"%d-%02d" % (p, i), b"%d" % p) for i in range(10)] for p in (1, 2, 3)]
    where = {key: p for p, phase in enumerate(phases) for key, _ in phase}
    stopped_in: dict[int | None, int] = {}
    for seed in range(300):
        table = RecordingTable()
        backend = MemoryBackend(table, Faults(seed=seed, fail_rate=0.04, crash_rate=0.01))
        try:
            backend.write_phases([[], *phases[:2], [], phases[2]])
            failed = False
        except BackendError:
            failed = True
        landed = [where[key] for key in table.log]
        assert landed == sorted(landed), f"seed {seed}: a row landed before an earlier phase's"
        counts = [landed.count(p) for p in range(3)]
        # A prefix of phases, then part of one.
        complete = 0
        while complete < 3 and counts[complete] == 10:
            complete += 1
        assert all(c == 0 for c in counts[complete + 1 :]), (seed, counts)
        assert failed == (complete < 3), (seed, counts)
        key = complete if failed else None
        stopped_in[key] = stopped_in.get(key, 0) + 1
    assert set(stopped_in) == {0, 1, 2, None}, stopped_in


def test_memory_url_options(memory_name: str) -> None:
    backend = open_backend(f"memory://{memory_name}?seed=1&fail_rate=0.5")
    assert isinstance(backend, MemoryBackend)
    assert backend.faults is not None
    assert (backend.faults.seed, backend.faults.fail_rate, backend.faults.crash_rate) == (
        1,
        0.5,
        0.0,
    )
    assert backend.table is memory.table(memory_name)
    plain = open_backend(f"memory://{memory_name}")
    assert isinstance(plain, MemoryBackend)
    assert plain.faults is None
    assert plain.table is backend.table

    with pytest.raises(BackendError, match="injected"):
        open_backend("memory://?fail_rate=1").write([(b"a", b"1")])
    with pytest.raises(BackendCrashed):
        open_backend("memory://?crash_rate=1").write([(b"a", b"1")])

    with pytest.raises(BackendError, match=r"unknown memory:// option\(s\) crash_after_rows"):
        open_backend(f"memory://{memory_name}?crash_after_rows=3")
    with pytest.raises(BackendError, match="bogus, other; known: seed, fail_rate, crash_rate"):
        open_backend(f"memory://{memory_name}?seed=1&other=&bogus=2")
    for bad in ("seed=abc", "fail_rate=", "crash_rate=lots"):
        with pytest.raises(BackendError, match="bad memory:// option"):
            open_backend(f"memory://{memory_name}?{bad}")
    with pytest.raises(StorageError, match="unknown store URL scheme"):
        open_backend("memroy://x")


# --- check_and_put ---------------------------------------------------------------------
# Keys of rows that check_and_put may change on every engine (on hbase: metadata rows,
# not under M or P).
CAS_KEYS = [b"Lp", b"k", b"T\x00ns:t\x00", b"\x00a", b"\xff", b"Z" * 300]


def _is_hbase(url: str) -> bool:
    return url.startswith("hbase://")


def test_check_and_put(engine: Backend) -> None:
    for key in CAS_KEYS:
        assert engine.check_and_put(key, None, b"v1") is True  # absent: put
        assert get_checked(engine, key) == b"v1"
        assert engine.check_and_put(key, None, b"v2") is False  # not absent any more
        for wrong in (b"other", b"v", b"v1\x00", b"V1", b"v2"):
            assert engine.check_and_put(key, wrong, b"v2") is False, wrong
        assert get_checked(engine, key) == b"v1"  # unchanged
        assert engine.check_and_put(key, b"v1", b"v2") is True
        assert get_checked(engine, key) == b"v2"
        assert engine.check_and_put(key, b"v1", b"v3") is False
        assert engine.check_and_put(key, b"v2", b"v2") is True  # the same value: a match
    assert engine.check_and_put(b"absent", b"v1", b"x") is False
    assert get_checked(engine, b"absent") is None
    assert scan(engine) == sorted((key, b"v2") for key in CAS_KEYS)
    assert scan(engine, reverse=True) == sorted(((key, b"v2") for key in CAS_KEYS), reverse=True)


FEATURES = ("atomic_batches", "space", "path", "seek_offset", "scan_stored")


def test_every_engine_states_the_features_the_protocol_lists(engine: Backend) -> None:
    """The store reads an engine's features (backend.Backend) and never probes for them,
    so each engine states every one, and what it states is usable: a local directory
    that exists, a space guard that measures, searches and scans that answer."""
    missing = [name for name in FEATURES if not hasattr(engine, name)]
    assert not missing, f"{type(engine).__name__} does not state {missing}"
    assert type(engine.atomic_batches) is bool
    if engine.path is not None:
        assert os.path.isdir(engine.path), engine.path
    if engine.space is not None:
        assert isinstance(engine.space, SpaceGuard)
        assert engine.path is not None  # a guarded disk is a local one
        assert engine.space.measure() >= 0
    if engine.seek_offset is not None:
        prefix = keys.data_prefix(keys.MESSAGE, TopicId("ns", "features"), 1)
        assert engine.seek_offset(prefix, 0) is None  # no row of that topic yet
    # Values from 10 bytes to 160 KiB: LevelDB keeps the large ones in its value log.
    rows = [(b"feature%02d" % i, bytes([i]) * (10 << i)) for i in range(15)]
    engine.write(rows)
    assert scan(engine, b"feature", b"featurf") == rows
    if engine.scan_stored is not None:
        assert [k for k, _ in engine.scan_stored(b"feature", b"featurf")] == [k for k, _ in rows]


def test_check_and_put_many_is_check_and_put_for_each_in_order(engine: Backend) -> None:
    """Each change as check_and_put would judge it after the ones before it (a later
    change of a key compares against what an earlier one of the same call wrote), and
    what it wrote is there (and durable: the engines' reopen tests read it back)."""
    assert engine.check_and_put_many([]) == []
    assert engine.check_and_put(CAS_KEYS[0], None, b"old")
    changes = [
        (CAS_KEYS[0], b"old", b"new"),  # wins
        (CAS_KEYS[1], None, b"a"),  # absent: wins
        (CAS_KEYS[2], b"x", b"b"),  # absent, not x: loses
        (CAS_KEYS[1], b"a", b"a2"),  # against the "a" this call wrote: wins
        (CAS_KEYS[0], b"old", b"again"),  # "new" by now: loses
        (CAS_KEYS[3], None, b"c"),
    ]
    assert engine.check_and_put_many(changes) == [True, True, False, True, False, True]
    assert get_checked(engine, CAS_KEYS[0]) == b"new"
    assert get_checked(engine, CAS_KEYS[1]) == b"a2"
    assert get_checked(engine, CAS_KEYS[2]) is None
    assert get_checked(engine, CAS_KEYS[3]) == b"c"
    many = [(b"Lmany%04d" % i, None, b"v%d" % i) for i in range(300)]
    assert engine.check_and_put_many(many) == [True] * 300
    assert engine.check_and_put_many(many) == [False] * 300
    assert scan(engine, b"Lmany", b"Lmanz") == [(k, v) for k, _, v in many]


def test_check_and_put_compares_whole_values(open_engine: EngineOpener) -> None:
    """Large values (LevelDB keeps them in its value log: the compare is of values, not
    of what LevelDB holds), values differing only in their last byte, binary values."""
    engine = open_engine()
    big1, big2 = b"a" * 100_000 + b"1", b"a" * 100_000 + b"2"
    binary = bytes(range(256)) * 3
    assert engine.check_and_put(b"Lbig", None, big1)
    assert not engine.check_and_put(b"Lbig", big2, b"x")
    assert not engine.check_and_put(b"Lbig", big1[:-1], b"x")
    assert engine.check_and_put(b"Lbig", big1, big2)
    assert get_checked(engine, b"Lbig") == big2
    assert not engine.check_and_put(b"Lbig", big1, b"y")
    assert engine.check_and_put(b"Lbig", big2, binary)
    assert engine.check_and_put(b"Lbig", binary, big1)
    engine = open_engine.reopen(engine)
    assert get_checked(engine, b"Lbig") == big1
    assert not engine.check_and_put(b"Lbig", big2, b"z")
    assert engine.check_and_put(b"Lbig", big1, b"small")
    assert get_checked(engine, b"Lbig") == b"small"


def test_check_and_put_deletes_and_empty_values(open_engine: EngineOpener) -> None:
    engine = open_engine()
    assert engine.check_and_put(b"Lk", None, b"v")
    if _is_hbase(open_engine.url):
        # Thrift 1 has no checkAndDelete, and HBase takes an empty cell for an absent one:
        # refused, not answered wrongly.
        for expected, value in [(b"v", None), (None, None), (None, b""), (b"", b"x"), (b"v", b"")]:
            with pytest.raises(BackendError, match="check_and_put cannot"):
                engine.check_and_put(b"Lk", expected, value)
        assert get_checked(engine, b"Lk") == b"v"
        return
    assert not engine.check_and_put(b"Lk", b"w", None)
    assert get_checked(engine, b"Lk") == b"v"
    assert engine.check_and_put(b"Lk", b"v", None)  # deleted
    assert get_checked(engine, b"Lk") is None
    assert engine.check_and_put(b"Lk", None, None)  # absent, and stays so: a match
    assert not engine.check_and_put(b"Lk", b"v", None)
    # An empty value is a value, not an absent row.
    assert engine.check_and_put(b"Le", None, b"")
    assert get_checked(engine, b"Le") == b""
    assert not engine.check_and_put(b"Le", None, b"x")
    assert engine.check_and_put(b"Le", b"", b"x")
    assert not engine.check_and_put(b"Labsent", b"", b"x")
    assert get_checked(engine, b"Labsent") is None
    assert scan(engine) == [(b"Le", b"x")]


def test_check_and_put_sees_what_write_wrote(open_engine: EngineOpener) -> None:
    if _is_hbase(open_engine.url):
        pytest.skip("on hbase a check_and_put key is written with check_and_put only")
    engine = open_engine()
    big = b"b" * 70_000
    # More than a small write's mutations: LevelDB moves the 300-byte values to its log.
    rows = [(b"w%02d" % i, b"x" * 300) for i in range(20)] + [(b"big", big)]
    engine.write(rows)
    assert engine.check_and_put(b"w03", b"x" * 300, b"new")
    assert not engine.check_and_put(b"big", big[:-1] + b"?", b"no")
    assert engine.check_and_put(b"big", big, b"small")
    engine.write([(b"w03", None)])
    assert engine.check_and_put(b"w03", None, b"back")
    engine.write_phases([[(b"w04", b"p1")], [(b"w04", b"p2")]])
    assert not engine.check_and_put(b"w04", b"p1", b"q")
    assert engine.check_and_put(b"w04", b"p2", b"q")
    engine.write([(b"w05", b"after")])
    assert get_checked(engine, b"w05") == b"after"
    assert get_checked(engine, b"w03") == b"back"


def test_check_and_put_races_have_one_winner(open_engine: EngineOpener) -> None:
    """8 threads race check_and_put on one key from the same expected value, 20 rounds:
    exactly one wins each round, and the row holds its value. On memory and hbase the
    threads are split over 2 backends (2 processes on one store)."""
    backends = [open_engine()]
    if not open_engine.url.startswith("leveldb://"):
        backends.append(open_engine())
    threads_n, rounds = 8, 20
    barrier = threading.Barrier(threads_n)
    won: list[list[bool]] = [[False] * threads_n for _ in range(rounds)]
    errors: list[BaseException] = []

    def race(i: int) -> None:
        backend = backends[i % len(backends)]
        try:
            for r in range(rounds):
                expected = None if r == 0 else b"round%d" % (r - 1)
                barrier.wait()
                if backend.check_and_put(b"Lhot", expected, b"round%d" % r):
                    won[r][i] = True
                    assert backend.get(b"Lhot") == b"round%d" % r
                barrier.wait()
        except BaseException as exc:  # reported below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=race, args=(i,)) for i in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors
    assert [sum(w) for w in won] == [1] * rounds, won
    assert get_checked(backends[0], b"Lhot") == b"round%d" % (rounds - 1)


# --- check_and_put on hbase ------------------------------------------------------------
def test_hbase_check_and_put_refuses_rows_of_several_columns(hbase_standin_address: str) -> None:
    backend = open_backend(f"hbase://{hbase_standin_address}/{_unique('cas_')}")
    try:
        for key in (_row_key(keys.MESSAGE, 1), _row_key(keys.PAYLOAD, 1)):
            with pytest.raises(BackendError, match="only on metadata rows"):
                backend.check_and_put(key, None, keys.encode_row(0, 1, b"x"))
            assert backend.get(key) is None
    finally:
        backend.close()


def test_hbase_check_and_put_detects_a_hidden_put(hbase_standin_address: str) -> None:
    """checkAndPut's put carries the region server's clock; a cell that write() stamped
    ahead of it hides the put (checkAndPut still answers true). The engine reads the row
    back and raises instead of letting a second caller win from the same value."""
    url = f"hbase://{hbase_standin_address}/{_unique('cas_')}"
    first = open_backend(url)
    try:
        first.write([(b"Swarm", b"1")])  # reserves timestamps ~10 s ahead
        ahead = open_backend(url)  # starts above them: ahead of the server's clock
        try:
            ahead.write([(b"Lk", b"v1"), (b"Lgone", b"x")])
            ahead.write([(b"Lgone", None)])
        finally:
            ahead.close()
        with pytest.raises(BackendError, match="hidden"):
            first.check_and_put(b"Lk", b"v1", b"v2")
        assert first.get(b"Lk") == b"v1"
        with pytest.raises(BackendError, match="hidden"):  # under a delete marker
            first.check_and_put(b"Lgone", None, b"v")
        assert first.get(b"Lgone") is None
        # Keys only check_and_put writes are exact.
        assert first.check_and_put(b"Lother", None, b"1")
        assert first.check_and_put(b"Lother", b"1", b"2")
        assert first.get(b"Lother") == b"2"
    finally:
        first.close()


def test_hbase_check_and_put_over_a_dropped_connection() -> None:
    _need_happybase()
    standin = pytest.importorskip("hbase_standin")
    with standin.StandinServer() as server:
        backend = open_backend(f"hbase://{server.address}/{_unique('drops_')}?pool_size=1")
        try:
            assert backend.check_and_put(b"Lk", None, b"v1")
            # Applied, then the connection dropped: the retry finds our value there.
            server.hbase.drop_calls("checkAndPut", after=True)
            assert backend.check_and_put(b"Lk", b"v1", b"v2") is True
            assert backend.get(b"Lk") == b"v2"
            # Dropped before it ran: the retry does it.
            server.hbase.drop_calls("checkAndPut", after=False)
            assert backend.check_and_put(b"Lk", b"v2", b"v3") is True
            assert backend.get(b"Lk") == b"v3"
            # A compare that failed, answer lost: nothing tells it from a write of ours
            # overwritten since, so the outcome is unknown.
            server.hbase.drop_calls("checkAndPut", after=True)
            with pytest.raises(BackendError, match="unknown"):
                backend.check_and_put(b"Lk", b"v2", b"v4")
            assert backend.get(b"Lk") == b"v3"
            # Dropped twice: an error, and the engine goes on.
            server.hbase.drop_calls("checkAndPut", times=2, after=False)
            with pytest.raises(BackendError, match=server.address):
                backend.check_and_put(b"Lk", b"v3", b"v5")
            assert backend.check_and_put(b"Lk", b"v3", b"v5")
            assert server.hbase.calls["checkAndPut"] >= 8
        finally:
            backend.close()


def test_hbase_standin_check_and_put_semantics(hbase_standin_address: str) -> None:
    """The stand-in's checkAndPut as HBase's HRegion.checkAndMutate: an empty or null
    expected value matches an absent cell or an empty one."""
    host, _, port = hbase_standin_address.partition(":")
    happybase = importlib.import_module("happybase")
    conn = happybase.Connection(host, int(port))
    name = _unique("casraw_").encode()
    conn.create_table(name, {"d": {"max_versions": 1}})
    try:
        Mutation = importlib.import_module("Hbase_thrift").Mutation
        client = conn.client

        def cas(expected: bytes | None, value: bytes) -> bool:
            return client.checkAndPut(
                name, b"r", b"d:c", expected, Mutation(column=b"d:c", value=value), {}
            )

        assert cas(b"x", b"1") is False  # absent is not b"x"
        assert cas(b"", b"") is True  # empty expected: absent matches; writes an empty cell
        assert cas(None, b"2") is True  # null expected: an empty cell matches too
        assert cas(None, b"3") is False
        assert cas(b"", b"3") is False
        assert cas(b"2", b"3") is True
        assert conn.table(name).row(b"r") == {b"d:c": b"3"}
    finally:
        conn.delete_table(name, disable=True)
        conn.close()


# --- check_and_put with faults (memory) ------------------------------------------------
def test_memory_check_and_put_is_one_row_for_faults() -> None:
    table = MemoryTable()
    table.rows[b"k"] = b"v0"
    # A failure comes before it: nothing changed, and the backend goes on.
    backend = MemoryBackend(table, Faults(fail_after_rows=0))
    with pytest.raises(BackendError, match="injected"):
        backend.check_and_put(b"k", b"v0", b"v1")
    assert table.rows[b"k"] == b"v0" and not backend.crashed
    assert backend.check_and_put(b"k", b"v0", b"v1")
    # A crash comes before it: nothing changed, and the backend is dead.
    backend = MemoryBackend(table, Faults(crash_after_rows=0))
    with pytest.raises(BackendCrashed):
        backend.check_and_put(b"k", b"v1", b"v2")
    assert table.rows[b"k"] == b"v1"
    _expect_crashed(backend)
    # It counts as one row, whether or not it wrote.
    backend = MemoryBackend(table, Faults(crash_after_rows=2))
    assert not backend.check_and_put(b"k", b"wrong", b"x")
    assert backend.check_and_put(b"k", b"v1", b"v2")
    with pytest.raises(BackendCrashed):
        backend.check_and_put(b"k", b"v2", b"v3")
    assert table.rows[b"k"] == b"v2"
    assert table.writes == 2  # the two that wrote


def test_memory_check_and_put_random_faults_leave_old_or_new() -> None:
    outcomes = set()
    for seed in range(60):
        runs = []
        for _ in range(2):  # the same seed, the same outcome
            table = MemoryTable()
            table.rows[b"k"] = b"old"
            backend = MemoryBackend(table, Faults(seed=seed, fail_rate=0.3, crash_rate=0.3))
            try:
                result = "won" if backend.check_and_put(b"k", b"old", b"new") else "lost"
            except BackendCrashed:
                result = "crashed"
            except BackendError:
                result = "failed"
            runs.append((result, table.rows[b"k"]))
        assert runs[0] == runs[1], seed
        result, row = runs[0]
        assert row == (b"new" if result == "won" else b"old"), runs
        outcomes.add(result)
    assert outcomes == {"won", "crashed", "failed"}
