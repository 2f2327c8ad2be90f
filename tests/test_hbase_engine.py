"""The hbase:// engine (storage/hbase.py) over real sockets: happybase -> a Thrift 1 server.

The server is the stand-in in tests/hbase_standin.py (a stand-in for tests, not HBase).
With ``TMSGATE_TEST_HBASE=host:port`` set, every test that needs only a Thrift 1 server
runs against that real HBase too (its tables are dropped afterwards); the tests that stop
the server or inject faults run on the stand-in only.
"""

from __future__ import annotations

import os
import random
import struct
import sys
import threading
import uuid
import zlib
from collections.abc import Callable, Iterator

import pytest

happybase = pytest.importorskip("happybase", reason="the hbase extra is not installed")

from hbase_standin import StandinServer  # noqa: E402
from tmsgate.storage import (  # noqa: E402
    BackendError,
    StorageError,
    Store,
    TopicId,
    keys,
    offset_hints,
    open_backend,
)
from tmsgate.storage import hbase as engine  # noqa: E402
from tmsgate.storage.memory import MemoryBackend  # noqa: E402

REAL_HBASE = os.environ.get("TMSGATE_TEST_HBASE")
SERVERS = ["standin"] + (["real"] if REAL_HBASE else [])


@pytest.fixture(scope="module")
def standin() -> Iterator[StandinServer]:
    with StandinServer() as server:
        yield server


@pytest.fixture(params=SERVERS)
def address(request: pytest.FixtureRequest) -> str:
    if request.param == "real":
        assert REAL_HBASE
        return REAL_HBASE
    return request.getfixturevalue("standin").address


@pytest.fixture
def hbase_url(address: str) -> Iterator[str]:
    """A fresh table prefix; its tables are dropped afterwards."""
    prefix = f"test{uuid.uuid4().hex[:12]}"
    yield f"hbase://{address}/{prefix}"
    host, _, port = address.partition(":")
    conn = happybase.Connection(host, int(port))
    try:
        for name in conn.tables():
            if name.startswith(prefix.encode() + b"_"):
                conn.delete_table(name, disable=True)
    finally:
        conn.close()


@pytest.fixture
def backend(hbase_url: str) -> Iterator[engine.HBaseBackend]:
    b = open_backend(hbase_url)
    assert isinstance(b, engine.HBaseBackend)
    yield b
    b.close()


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scans fetch 1, 2, 3, 3, ... rows per scanner: every continuation path runs."""
    monkeypatch.setattr(engine, "SCAN_FIRST_ROWS", 1)
    monkeypatch.setattr(engine, "SCAN_GROWTH", 2)
    monkeypatch.setattr(engine, "SCAN_MAX_ROWS", 3)


def raw_table(url: str, suffix: str) -> happybase.Table:
    """The HBase table ``<prefix>_<suffix>`` through happybase itself, on a connection of
    its own (closed once the table is dropped). A timeout, so that a Thrift server with no
    free worker thread (docs/hbase.md) fails the test rather than hanging it."""
    address, _, prefix = url.removeprefix("hbase://").partition("/")
    host, _, port = address.partition(":")
    conn = happybase.Connection(host, int(port), timeout=engine.DEFAULT_TIMEOUT_MS)
    return conn.table(f"{prefix}_{suffix}")


def salted_row(key: bytes, buckets: int = engine.DEFAULT_SALT_BUCKETS) -> bytes:
    return bytes((zlib.crc32(key) % buckets,)) + key[1:]


def message_key(topic: str, ts: int, seq: int = 0) -> bytes:
    t = TopicId("ns", topic)
    return keys.data_prefix(keys.MESSAGE, t, 1) + keys.MESSAGE_SUFFIX.pack(ts, seq)


def row(payload: bytes | None = b"x", base: int = 0, **kw: object) -> bytes:
    return keys.encode_row(base, 1, payload, **kw)  # type: ignore[arg-type]


# --- the Backend contract ----------------------------------------------------------------
def test_write_get_and_delete(backend: engine.HBaseBackend) -> None:
    m, p = message_key("a", 1), keys.PAYLOAD + b"ns:a\x00" + bytes(22)
    values = {
        m: row(b"hello", write_pointer=5, meta=b"k", ttl_ms=9),
        p: row(b"payload"),
        b"Tns:a\x00": b'{"generation": 1}',
        b"Sgroups\x00g1": b"",  # an empty value is a value
        b"Mnot-a-row": b"\x01",  # under M but not a row: kept whole
    }
    backend.write(list(values.items()))
    for key, value in values.items():
        assert backend.get(key) == value
    assert backend.get(message_key("a", 2)) is None
    assert backend.get(b"Tmissing") is None

    backend.write([(m, None), (b"Tns:a\x00", None), (b"Sgroups\x00g1", b"again")])
    assert backend.get(m) is None and backend.get(b"Tns:a\x00") is None
    assert backend.get(b"Sgroups\x00g1") == b"again"
    # The last mutation of a key in one write wins, as in a LevelDB batch.
    backend.write([(b"Xk", b"1"), (b"Xk", None), (b"Xj", None), (b"Xj", b"2")])
    assert backend.get(b"Xk") is None and backend.get(b"Xj") == b"2"


def test_a_key_deleted_and_written_again_at_once_is_there(
    backend: engine.HBaseBackend,
) -> None:
    """HBase's delete markers mask every put at or below their timestamp, also later
    ones: the engine's own increasing timestamps keep a rewrite visible."""
    for i in range(40):
        backend.write([(b"Ifast", b"v%d" % i)])
        backend.write_phases([[(b"Ifast", None)], [(b"Ifast", b"w%d" % i)]])
        assert backend.get(b"Ifast") == b"w%d" % i
        key = message_key("fast", i)
        backend.write([(key, row())])
        backend.write([(key, None)])
        backend.write([(key, row(b"again"))])
        assert backend.get(key) == row(b"again")


def test_standin_masks_puts_like_hbase(standin: StandinServer) -> None:
    """Why the engine sets timestamps: with the server's, a put in the millisecond of a
    delete stays deleted (as on HBase), and a major compaction drops the marker."""
    conn = happybase.Connection(standin.host, standin.port)
    name = f"mask{uuid.uuid4().hex[:8]}"
    conn.create_table(name, {"d": {"max_versions": 1}})
    table = conn.table(name)
    table.put(b"r", {b"d:c": b"1"}, timestamp=100)
    table.delete(b"r", timestamp=200)
    table.put(b"r", {b"d:c": b"2"}, timestamp=150)  # later, but below the marker
    assert table.row(b"r") == {}
    table.put(b"r", {b"d:c": b"3"}, timestamp=201)
    assert table.row(b"r") == {b"d:c": b"3"}
    table.put(b"r", {b"d:c": b"0"}, timestamp=50)  # an older version: the newest wins
    assert table.row(b"r", include_timestamp=True) == {b"d:c": (b"3", 201)}
    table.delete(b"q", timestamp=500)
    table.put(b"q", {b"d:c": b"x"}, timestamp=400)
    assert table.row(b"q") == {}
    conn.compact_table(name, major=True)
    table.put(b"q", {b"d:c": b"x"}, timestamp=400)
    assert table.row(b"q") == {b"d:c": b"x"}
    conn.close()


def keyspace(rng: random.Random, n: int) -> list[bytes]:
    """Keys across every table, with awkward bytes (0x00, 0xff, prefixes of each other)."""
    out = set()
    alphabet = [b"\x00", b"\x01", b"a", b"b", b"\xfe", b"\xff"]
    for _ in range(n):
        table = rng.choice([b"M", b"M", b"P", b"P", b"T", b"S", b"X", b"I", b"\x00x", b"Z"])
        out.add(table + b"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 4))))
    return sorted(out)


@pytest.mark.parametrize("chunks", ["default", "small"])
def test_scans_match_the_reference_engine(
    backend: engine.HBaseBackend, chunks: str, request: pytest.FixtureRequest
) -> None:
    """Forward and reverse scans, with and without start, over every table and awkward
    bounds, give exactly what memory:// (plyvel's semantics) gives."""
    if chunks == "small":
        request.getfixturevalue("small_chunks")
    rng = random.Random(7)
    ref = MemoryBackend()
    all_keys = keyspace(rng, 160)
    data = [(k, row(k) if k[:1] in b"MP" else k[::-1]) for k in all_keys]
    backend.write(data)
    ref.write(data)
    bounds = [*all_keys, b"", b"L", b"M", b"N", b"O", b"P", b"Q", b"M\xff\xff", b"\xff", b"Z\xff"]
    cases = [(b"\x00", b"\xff\xff")] + [tuple(sorted(rng.sample(bounds, 2))) for _ in range(60)]
    for start, stop in cases:
        for reverse in (False, True):
            for include_start in (True, False):
                got = list(backend.scan(start, stop, reverse=reverse, include_start=include_start))
                want = list(ref.scan(start, stop, reverse=reverse, include_start=include_start))
                assert got == want, (start, stop, reverse, include_start)
    assert list(backend.scan(b"T", b"M")) == []  # start above stop: nothing


@pytest.mark.parametrize("buckets", [1, 256])
def test_scans_with_one_bucket_and_with_every_salt_byte(hbase_url: str, buckets: int) -> None:
    """With 256 buckets a scan fetches min(buckets, pool_size) buckets at once, each on a
    connection of the pool, so the backend keeps pool_size connections open while
    raw_table opens one more. Each holds one of the Thrift server's 16 default worker
    threads (the stand-in's too): with the default pool_size (8) that is 9 of them; with
    the former default (16) the 17th waited for a worker forever."""
    b = open_backend(f"{hbase_url}?salt_buckets={buckets}")
    ref = MemoryBackend()
    try:
        all_keys = keyspace(random.Random(5), 60)
        # Keys in the last bucket, whose range is open-ended: the table's last rows.
        all_keys += [
            k for k in (b"M\xff%d" % i for i in range(2000)) if salted_row(k, 256)[0] == 255
        ]
        data = [(k, row(k) if k[:1] in b"MP" else k) for k in all_keys]
        b.write(data)
        ref.write(data)
        for start, stop in [(b"L", b"Q"), (b"M", b"N"), (b"M\x00", b"M\xff"), (b"A", b"\xff")]:
            for reverse in (False, True):
                got = list(b.scan(start, stop, reverse=reverse, include_start=False))
                assert got == list(ref.scan(start, stop, reverse=reverse, include_start=False))
        if buckets == 256:
            last = raw_table(hbase_url, "messages").scan(reverse=True, limit=1)
            assert next(iter(last))[0][0] == 255
    finally:
        b.close()


def test_salted_scans_come_back_in_key_order(
    hbase_url: str, backend: engine.HBaseBackend, small_chunks: None
) -> None:
    topics = [f"t{i}" for i in range(12)]
    rng = random.Random(3)
    written: dict[str, list[bytes]] = {t: [] for t in topics}
    batch = []
    for t in topics:
        for i in range(rng.randint(5, 40)):
            key = message_key(t, 1_000 + i * 7, i % 3)
            written[t].append(key)
            batch.append((key, row(b"%s-%d" % (t.encode(), i), base=i)))
    rng.shuffle(batch)
    backend.write_phases([batch[:100], batch[100:]])
    for t in topics:
        prefix = keys.data_prefix(keys.MESSAGE, TopicId("ns", t), 1)
        end = keys.prefix_end(prefix)
        got = [k for k, _ in backend.scan(prefix, end)]
        assert got == sorted(written[t])
        assert [k for k, _ in backend.scan(prefix, end, reverse=True)] == got[::-1]
        # Resume after a key, as the reader does.
        mid = got[len(got) // 2]
        assert [k for k, _ in backend.scan(mid, end, include_start=False)] == got[
            got.index(mid) + 1 :
        ]
    # The rows really are spread over the buckets (salt = the first byte of the row key).
    salts = {r[0] for r, _ in raw_table(hbase_url, "messages").scan()}
    assert len(salts) == engine.DEFAULT_SALT_BUCKETS


def test_rows_are_stored_in_the_seeds_columns(hbase_url: str, backend: engine.HBaseBackend) -> None:
    m = message_key("cols", 42)
    value = row(b"the payload", base=7, write_pointer=1234, meta=b"kafka-meta", ttl_ms=60_000)
    ref = keys.encode_row(8, 1, None, write_pointer=1234, reference=True)
    m2 = message_key("cols", 43)
    p = keys.data_prefix(keys.PAYLOAD, TopicId("ns", "cols"), 1) + bytes(18)
    backend.write([(m, value), (m2, ref), (p, row(b"stored"))])

    messages = raw_table(hbase_url, "messages")
    cells = messages.row(salted_row(m))
    assert cells == {
        b"d:o": keys.ROW_HEAD.pack(keys.F_TX | keys.F_TTL | keys.F_META | keys.F_PAYLOAD, 7, 1),
        b"d:t": struct.pack(">q", 1234),
        b"d:l": struct.pack(">Q", 60_000),
        b"d:m": b"kafka-meta",
        b"d:p": b"the payload",
    }
    assert set(messages.row(salted_row(m2))) == {b"d:o", b"d:t"}  # a reference: no p
    assert raw_table(hbase_url, "payloads").row(salted_row(p))[b"d:p"] == b"stored"
    assert raw_table(hbase_url, "metadata").row(engine.ENGINE_ROW)[b"d:salt_buckets"] == b"8"


def test_a_put_with_fewer_columns_leaves_no_stale_column(
    hbase_url: str, backend: engine.HBaseBackend
) -> None:
    m = message_key("stale", 1)
    backend.write([(m, row(b"payload", write_pointer=9, meta=b"meta", ttl_ms=5))])
    smaller = keys.encode_row(0, 1, None, write_pointer=-9, reference=True)
    backend.write([(m, smaller)])
    assert backend.get(m) == smaller
    assert set(raw_table(hbase_url, "messages").row(salted_row(m))) == {b"d:o", b"d:t"}
    backend.write([(m, b"\x00raw")])  # a value that is not a row, then a row again
    assert set(raw_table(hbase_url, "messages").row(salted_row(m))) == {b"d:v"}
    backend.write([(m, row(b"p"))])
    assert set(raw_table(hbase_url, "messages").row(salted_row(m))) == {b"d:o", b"d:p"}
    assert backend.get(m) == row(b"p")


def test_write_phases_apply_in_order(backend: engine.HBaseBackend) -> None:
    k = message_key("phases", 1)
    backend.write_phases([[(k, row(b"1"))], [], [(k, None)], [(k, row(b"3")), (b"Ck", b"c")]])
    assert backend.get(k) == row(b"3") and backend.get(b"Ck") == b"c"
    backend.write_phases([[(b"Ck", b"x")], [(b"Ck", None)]])
    assert backend.get(b"Ck") is None


def test_a_failed_phase_stops_the_later_ones(standin: StandinServer) -> None:
    """HBase may keep part of a failed call: the phases before it landed, part of it
    may have, none after it did."""
    b = open_backend(f"hbase://{standin.address}/phases{uuid.uuid4().hex[:8]}")
    try:
        first = [(b"Sa\x00%d" % i, b"1") for i in range(3)]
        second = [(b"Sb\x00%d" % i, b"2") for i in range(3)]
        third = [(b"Sc\x00%d" % i, b"3") for i in range(3)]
        b.write([(b"Sz", b"warm")])  # reserves timestamps now, not in the middle
        calls = standin.hbase.calls["mutateRowsTs"]
        # Each phase is one mutateRowsTs here (one table): the second fails after a row.
        standin.hbase.fail_mutations(after_rows=1, skip_calls=1, message="region server down")
        with pytest.raises(BackendError, match="region server down") as err:
            b.write_phases([first, second, third])
        assert standin.address in str(err.value)
        assert standin.hbase.calls["mutateRowsTs"] == calls + 2
        assert [b.get(k) for k, _ in first] == [b"1"] * 3
        assert sum(b.get(k) is not None for k, _ in second) == 1
        assert [b.get(k) for k, _ in third] == [None] * 3
    finally:
        b.close()


# --- connections and errors --------------------------------------------------------------
def test_a_stopped_server_gives_backend_errors_naming_it() -> None:
    server = StandinServer().start()
    try:
        b = open_backend(f"hbase://{server.address}/stopped")
        b.write([(b"Tk", b"v")])
        server.stop()
        with pytest.raises(BackendError, match=f"{server.address}.*get failed"):
            b.get(b"Tk")
        with pytest.raises(BackendError, match=f"{server.address}.*write 1 rows"):
            b.write([(b"Tk", b"w")])
        with pytest.raises(BackendError, match=server.address):
            list(b.scan(b"M", b"N"))
        server.start()  # the same port and tables: the pool reconnects
        assert b.get(b"Tk") == b"v"
        b.close()
        with pytest.raises(BackendError, match="closed"):
            b.get(b"Tk")
    finally:
        server.stop()


def test_nothing_listening_fails_at_open() -> None:
    server = StandinServer().start()
    address = server.address
    server.stop()  # the port is free now, and nothing listens on it
    with pytest.raises(BackendError, match=f"HBase Thrift server {address}.*connect failed"):
        open_backend(f"hbase://{address}/nobody")


def test_connections_the_server_closed_are_replaced() -> None:
    """HBase's Thrift server closes idle connections; the next call reconnects."""
    with StandinServer() as server:
        b = open_backend(f"hbase://{server.address}/idle?pool_size=2")
        b.write([(b"Tk", b"v")])
        server.close_connections()  # what its read timeout does to idle connections
        assert b.get(b"Tk") == b"v"
        server.close_connections()
        assert [k for k, _ in b.scan(b"M", b"Q")] == []
        b.write([(b"Tk", b"w")])
        assert b.get(b"Tk") == b"w"
        b.close()


def test_hbase_errors_are_backend_errors(standin: StandinServer) -> None:
    b = open_backend(f"hbase://{standin.address}/errors{uuid.uuid4().hex[:8]}")
    try:
        conn = happybase.Connection(standin.host, standin.port)
        conn.disable_table(f"{b.prefix}_metadata")
        with pytest.raises(BackendError, match=r"IOError: .*TableNotEnabledException"):
            b.get(b"Tk")
        conn.enable_table(f"{b.prefix}_metadata")
        assert b.get(b"Tk") is None
        conn.close()
    finally:
        b.close()


def test_scans_leave_no_scanner_open(standin: StandinServer) -> None:
    backend = open_backend(f"hbase://{standin.address}/scanners{uuid.uuid4().hex[:8]}")
    backend.write([(message_key("sc", i), row()) for i in range(50)])
    it = backend.scan(b"M", b"N")
    next(it)  # abandoned half way
    del it
    list(backend.scan(b"M", b"N", reverse=True))
    next(backend.scan(b"A", b"Z"), None)
    assert standin.hbase.open_scanners() == 0
    backend.close()


# --- the offset search (seek_offset) -----------------------------------------------------
def topic_rows(rng: random.Random, prefix: bytes, n: int) -> list[tuple[bytes, bytes]]:
    """MessageTable rows as the store appends them (keys and base offsets growing together):
    bursts in one millisecond, long pauses, rows of many offsets, and offsets no row holds
    (rows the janitor deleted)."""
    out, ts, seq, base = [], 1_000_000, 0, 0
    for i in range(n):
        step = rng.choice([0, 0, 0, 0, 1, 1, 7, 86_400_000])
        if step or seq == keys.MAX_SEQ:
            ts, seq = ts + max(step, 1), 0
        else:
            seq += 1
        count = rng.choice([1, 1, 1, 1, 2, 500])
        base += rng.choice([0, 0, 0, 0, 3, 1000])
        key = prefix + keys.MESSAGE_SUFFIX.pack(ts, seq)
        out.append((key, keys.encode_row(base, count, b"p%d" % i)))
        base += count
    return out


def holding(rows: list[tuple[bytes, bytes]], offset: int) -> tuple[bytes, bytes] | None:
    """What seek_offset answers: the last row starting at or below ``offset``."""
    found = None
    for key, value in rows:
        if keys.ROW_HEAD.unpack_from(value)[1] > offset:
            break
        found = (key, value)
    return found


def offsets_to_try(rows: list[tuple[bytes, bytes]], rng: random.Random) -> list[int]:
    """Every row's first and last offset and its neighbours, and random ones."""
    heads = [keys.ROW_HEAD.unpack_from(v)[1:] for _, v in rows]
    end = heads[-1][0] + heads[-1][1]
    out = {0, end, end + 5}
    for base, count in heads:
        out |= {base - 1, base, base + 1, base + count - 1, base + count}
    out |= {rng.randrange(end) for _ in range(50)}
    return sorted(o for o in out if o >= 0)


@pytest.mark.parametrize("buckets", [1, 3, 8])
def test_seek_offset_finds_the_row_holding_an_offset(hbase_url: str, buckets: int) -> None:
    rng = random.Random(buckets)
    b = open_backend(f"{hbase_url}?salt_buckets={buckets}")
    assert isinstance(b, engine.HBaseBackend)
    try:
        prefix = keys.data_prefix(keys.MESSAGE, TopicId("ns", "a"), 1)
        rows = topic_rows(rng, prefix, 400)
        # Neighbours in the key space: another generation, a topic whose name extends it.
        neighbours = topic_rows(rng, keys.data_prefix(keys.MESSAGE, TopicId("ns", "a"), 2), 30)
        neighbours += topic_rows(rng, keys.data_prefix(keys.MESSAGE, TopicId("ns", "ab"), 1), 30)
        b.write(rows + neighbours)
        tries = offsets_to_try(rows, rng)
        for round_ in ("cold", "with hints"):
            for offset in tries:
                assert b.seek_offset(prefix, offset) == holding(rows, offset), (round_, offset)
        empty = keys.data_prefix(keys.MESSAGE, TopicId("ns", "empty"), 1)
        assert b.seek_offset(empty, 0) is None
        with pytest.raises(ValueError):
            b.seek_offset(b"Tns:a\x00", 0)
    finally:
        b.close()
    with pytest.raises(BackendError, match="closed"):
        b.seek_offset(prefix, 0)


def test_seek_offset_checks_its_hints(standin: StandinServer) -> None:
    """Hints name rows that may have gone since: the janitor's deletes, and a write that
    landed in part and was settled (its rows deleted, its offsets given to later rows)."""
    b = open_backend(f"hbase://{standin.address}/hints{uuid.uuid4().hex[:8]}")
    assert isinstance(b, engine.HBaseBackend)
    try:
        prefix = keys.data_prefix(keys.MESSAGE, TopicId("ns", "h"), 1)
        rows = [
            (
                prefix + keys.MESSAGE_SUFFIX.pack(5_000 + i // 10, i % 10),
                keys.encode_row(i, 1, b"x"),
            )
            for i in range(300)
        ]
        b.write(rows)
        for offset in range(0, 300, 3):  # every third row is remembered, at least
            assert b.seek_offset(prefix, offset) == rows[offset]
        b.write([(k, None) for k, _ in rows[:100]])  # the janitor
        settled = [
            (prefix + keys.MESSAGE_SUFFIX.pack(9_000, i), keys.encode_row(250 + i, 1, b"y"))
            for i in range(50)
        ]
        b.write([(k, None) for k, _ in rows[250:]] + settled)  # offsets 250.. moved on
        now = rows[100:250] + settled
        for offset in range(0, 320):
            assert b.seek_offset(prefix, offset) == holding(now, offset), offset
        # A hint holding the offset, verified: one get, no scanner.
        assert b.seek_offset(prefix, 260) == settled[10]
        calls = standin.hbase.calls.copy()
        assert b.seek_offset(prefix, 260) == settled[10]
        assert standin.hbase.calls - calls == {"getRowWithColumns": 1}
        assert standin.hbase.open_scanners() == 0
    finally:
        b.close()


class PlainBackend:
    """The engine seen without seek_offset: reader.start_for_offset's own search."""

    seek_offset = None

    def __init__(self, backend: engine.HBaseBackend) -> None:
        self.scan, self.get = backend.scan, backend.get


def test_seek_offset_probes_one_bucket(standin: StandinServer) -> None:
    """Each probe of the search is one scanner on one salt bucket, where reader.py's
    search would scan every bucket per probe."""
    from types import SimpleNamespace

    from tmsgate.storage import reader

    b = open_backend(f"hbase://{standin.address}/probes{uuid.uuid4().hex[:8]}")
    assert isinstance(b, engine.HBaseBackend)
    try:
        prefix = keys.data_prefix(keys.MESSAGE, TopicId("ns", "p"), 1)
        rows = topic_rows(random.Random(11), prefix, 3000)
        b.write(rows)
        st = SimpleNamespace(msg_prefix=prefix)
        rng = random.Random(12)
        end = keys.ROW_HEAD.unpack_from(rows[-1][1])[1]
        seek_scanners = plain_scanners = 0
        for offset in (rng.randrange(end) for _ in range(8)):
            b._hints = offset_hints.OffsetHints()  # every search cold
            before = standin.hbase.calls["scannerOpenWithScan"]
            key = b.seek_offset(prefix, offset)
            seek_scanners += standin.hbase.calls["scannerOpenWithScan"] - before
            before = standin.hbase.calls["scannerOpenWithScan"]
            start = reader.start_for_offset(PlainBackend(b), st, offset)  # type: ignore[arg-type]
            plain_scanners += standin.hbase.calls["scannerOpenWithScan"] - before
            assert key is not None and start.key == key[0]
        assert seek_scanners * 4 < plain_scanners
        assert standin.hbase.open_scanners() == 0
    finally:
        b.close()


def test_a_read_by_offset_starts_with_the_row_the_search_read(standin: StandinServer) -> None:
    """reader.start_for_offset hands the row seek_offset read to reader.read: a read of
    that row alone makes no call, a read past it scans the rest."""
    from types import SimpleNamespace

    from tmsgate.storage import reader

    b = open_backend(f"hbase://{standin.address}/reads{uuid.uuid4().hex[:8]}")
    try:
        t = TopicId("ns", "r")
        prefix = keys.data_prefix(keys.MESSAGE, t, 1)
        rows = [
            (prefix + keys.MESSAGE_SUFFIX.pack(7_000 + i, 0), keys.encode_row(i, 1, b"m%d" % i))
            for i in range(50)
        ]
        b.write(rows)
        st = SimpleNamespace(
            msg_prefix=prefix, payload_prefix=keys.data_prefix(keys.PAYLOAD, t, 1), ttl_ms=None
        )

        def read(start: reader.ScanStart, n: int) -> list[tuple[int, bytes | None]]:
            res = reader.read(
                b, st, start, now_ms=8_000, max_messages=n, max_bytes=None, tx=None, next_offset=50
            )  # type: ignore[arg-type]
            return [(m.offset, m.payload) for m in res.messages]

        start = reader.start_for_offset(b, st, 20)  # type: ignore[arg-type]
        assert (start.key, start.first) == rows[20]
        calls = standin.hbase.calls.copy()
        assert read(start, 1) == [(20, b"m20")]
        assert standin.hbase.calls == calls  # the row the search read: no call
        assert read(start, 5) == [(o, b"m%d" % o) for o in range(20, 25)]
        calls = standin.hbase.calls.copy()
        start = reader.start_for_offset(b, st, 20)  # type: ignore[arg-type]
        assert standin.hbase.calls - calls == {"getRowWithColumns": 1}  # a hint
        assert read(start, 1) == [(20, b"m20")]
    finally:
        b.close()


def test_offset_hints_stay_bounded() -> None:
    hints = offset_hints.OffsetHints(per_prefix=4, prefixes=2)
    row = lambda base: offset_hints.HeadRow(b"M%03d" % base, base, 1)  # noqa: E731
    hints.note(b"a", [row(b) for b in (0, 10, 20, 30)])
    hints.note(b"a", [row(0)])  # used again: now the most recent
    hints.note(b"a", [row(40)])
    hints.note(b"a", [row(50)])  # 10 and 20 went, the least recently noted
    assert len(hints) == 4
    assert hints.bracket(b"a", 5) == (row(0), row(30))
    assert hints.bracket(b"a", 45) == (row(40), row(50))
    assert hints.bracket(b"a", -1) == (None, row(0))
    hints.forget(b"a", offset_hints.HeadRow(b"other", 0, 1))  # not the row remembered: kept
    assert hints.bracket(b"a", 0)[0] == row(0)
    hints.forget(b"a", row(0))
    assert hints.bracket(b"a", 0) == (None, row(30)) and len(hints) == 3
    hints.note(b"b", [row(1)])
    hints.bracket(b"a", 50)  # "a" used after "b"
    hints.note(b"c", [row(2)])  # a third prefix: the least recently used goes
    assert hints.bracket(b"b", 1) == (None, None)
    assert hints.bracket(b"a", 50)[0] == row(50) and hints.bracket(b"c", 2)[0] == row(2)


# --- the URL and the store's salt -------------------------------------------------------
def test_salt_buckets_are_a_property_of_the_store(hbase_url: str) -> None:
    b = open_backend(hbase_url + "?salt_buckets=3")
    key = message_key("salt", 1)
    b.write([(key, row())])
    b.close()
    with pytest.raises(BackendError, match=r"created with salt_buckets=3.*salt_buckets=8"):
        open_backend(hbase_url + "?salt_buckets=8")
    b = open_backend(hbase_url)  # no count given: the recorded one
    assert b.salt_buckets == 3 and b.get(key) == row()
    b.close()
    b = open_backend(hbase_url + "?salt_buckets=3&pool_size=2&timeout_ms=5000")
    assert b.get(key) == row()
    b.close()


@pytest.mark.parametrize(
    "rest, message",
    [
        ("h:9090/p?salt=3", "unknown hbase:// option.*salt"),
        ("h:9090/p?salt_buckets=0", "salt_buckets='0'.*1..256"),
        ("h:9090/p?salt_buckets=257", "1..256"),
        ("h:9090/p?pool_size=x", "pool_size"),
        ("h:9090/p?connect_probe_ms=0", "connect_probe_ms='0'.*>= 1"),
        ("h:9090/bad name", "not a valid HBase table name"),
        ("h:99999/p", "bad port"),
        (":9090/p", "no host"),
    ],
)
def test_bad_urls_are_refused(rest: str, message: str) -> None:
    with pytest.raises(BackendError, match=message):
        engine.open_url(rest)


def test_url_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[tuple] = []

    def fake(*args: object, **kw: object) -> None:
        opened.append((args, kw))

    monkeypatch.setattr(engine, "HBaseBackend", fake)
    engine.open_url("hbase-host")
    engine.open_url(
        "h:1234/ns_1:store.a?timeout_ms=10&connect_probe_ms=5", snapshot=True, disk_reserve_bytes=5
    )
    assert opened == [
        (
            ("hbase-host", 9090, "tmsgate"),
            {
                "salt_buckets": None,
                "pool_size": 8,
                "timeout_ms": 30_000,
                "connect_probe_ms": 2_000,
            },
        ),
        (
            ("h", 1234, "ns_1:store.a"),
            {"salt_buckets": None, "pool_size": 8, "timeout_ms": 10, "connect_probe_ms": 5},
        ),
    ]


def test_missing_happybase_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "tmsgate.storage.hbase")
    monkeypatch.setitem(sys.modules, "happybase", None)  # import happybase -> ImportError
    with pytest.raises(StorageError, match=r"needs happybase: pip install 'tmsgate\[hbase\]'"):
        open_backend("hbase://localhost:9090/x")


def test_presplit_command() -> None:
    assert engine.presplit_command("s_messages", 3) == (
        "create 's_messages', {NAME => 'd', VERSIONS => 1, BLOOMFILTER => 'ROW'}, "
        '{SPLITS => ["\\x01", "\\x02"]}'
    )
    assert "SPLITS" not in engine.presplit_command("s_messages", 1)


def test_timestamps_stay_above_an_earlier_process(hbase_url: str) -> None:
    """A restarted engine starts above every timestamp reserved before, so its deletes
    cover what the earlier one wrote and its puts are not masked by its deletes."""
    first = open_backend(hbase_url)
    first.write([(b"Sk", b"1")])
    for _ in range(50):  # run the clock ahead of the wall clock
        first._next_timestamp()
    last = first._last_ts
    first.close()
    second = open_backend(hbase_url)
    assert second._next_timestamp() > last
    second.write([(b"Sk", None)])
    assert second.get(b"Sk") is None
    second.write([(b"Sk", b"2")])
    assert second.get(b"Sk") == b"2"
    second.close()


# --- the stand-in itself ------------------------------------------------------------------
def test_standin_refuses_what_it_does_not_implement(standin: StandinServer) -> None:
    from thriftpy2.thrift import TApplicationException

    conn = happybase.Connection(standin.host, standin.port)
    name = f"un{uuid.uuid4().hex[:8]}"
    conn.create_table(name, {"d": {}})
    table = conn.table(name)
    with pytest.raises(TApplicationException) as err:
        table.counter_inc(b"r", b"d:c")
    assert b"not implemented by the HBase Thrift stand-in" in err.value.message
    with pytest.raises(Exception, match="filterString"):
        list(table.scan(filter=b"KeyOnlyFilter()"))
    with pytest.raises(Exception, match="NoSuchColumnFamilyException"):
        table.put(b"r", {b"other:c": b"1"})
    with pytest.raises(Exception, match="scanner ID is invalid"):
        conn.client.scannerGetList(12345, 1)
    with pytest.raises(Exception, match="TableNotFoundException"):
        conn.table("absent").row(b"r")
    table.put(b"r", {b"d:c": b"1"})  # the connection still works after all that
    assert table.row(b"r") == {b"d:c": b"1"}
    conn.close()


def test_standin_scans_like_hbase(standin: StandinServer) -> None:
    conn = happybase.Connection(standin.host, standin.port)
    name = f"sc{uuid.uuid4().hex[:8]}"
    conn.create_table(name, {"d": {"max_versions": 2}})
    table = conn.table(name)
    for k in (b"a", b"b", b"c", b"d"):
        table.put(k, {b"d:c": k})
    rows: Callable[..., list[bytes]] = lambda **kw: [k for k, _ in table.scan(**kw)]  # noqa: E731
    assert rows(row_start=b"b", row_stop=b"d") == [b"b", b"c"]
    assert rows(row_start=b"b") == [b"b", b"c", b"d"]
    assert rows(row_stop=b"c", batch_size=1) == [b"a", b"b"]
    assert rows(row_start=b"c", row_stop=b"a", reverse=True) == [b"c", b"b"]
    assert rows(row_start=b"c", reverse=True) == [b"c", b"b", b"a"]
    assert rows(reverse=True, limit=2) == [b"d", b"c"]
    assert rows(row_prefix=b"c") == [b"c"]
    # Versions: max_versions of them, newest first; a put at an existing timestamp
    # replaces that version.
    for ts, value in ((10, b"a10"), (30, b"a30"), (20, b"a20"), (30, b"a30!")):
        table.put(b"e", {b"d:c": value}, timestamp=ts)
    assert table.cells(b"e", b"d:c", versions=5, include_timestamp=True) == [
        (b"a30!", 30),
        (b"a20", 20),
    ]
    assert table.row(b"e") == {b"d:c": b"a30!"}
    assert table.row(b"e", timestamp=30) == {b"d:c": b"a20"}  # [0, 30)
    conn.close()


# --- a whole Store on HBase --------------------------------------------------------------
def test_a_store_on_hbase_publishes_reads_and_reopens(hbase_url: str) -> None:
    t = TopicId("ns", "orders")
    store = Store(open_backend(hbase_url))
    store.create_topic(t)
    store.publish(t, [b"a", b"b", b"c"])
    assert [m.payload for m in store.read(t, offset=1).messages] == [b"b", b"c"]

    tx = store.transactions.start()
    store.store(t, [b"stored-1", b"stored-2"], tx)  # the PayloadTable
    store.publish(t, [b"direct"], tx=tx)
    store.publish(t, [], tx=tx)  # makes the stored payloads visible
    store.transactions.commit(tx)
    store.publish(t, [b"after"])

    def everything(s: Store) -> list[tuple[int, bytes | None]]:
        out, pos = [], 0
        while True:
            res = s.read(t, offset=pos, max_messages=2)
            out += [(m.offset, m.payload) for m in res.messages]
            if res.next_offset == pos:
                return out
            pos = res.next_offset

    before = everything(store)
    assert [p for _, p in before] == [
        b"a",
        b"b",
        b"c",
        b"direct",
        b"stored-1",
        b"stored-2",
        b"after",
    ]
    assert [o for o, _ in before] == list(range(7))
    store.close()

    store = Store(open_backend(hbase_url))  # a restart: everything from HBase
    try:
        assert store.get_topic(t).generation == 1
        assert store.offsets(t)[1] == 7
        assert everything(store) == before
        assert [m.payload for m in store.read(t, offset=5).messages] == [b"stored-2", b"after"]
        store.publish(t, [b"more"])
        assert store.offsets(t)[1] == 8
    finally:
        store.close()


def test_a_store_on_hbase_keeps_state_aborts_and_generations(hbase_url: str) -> None:
    store = Store(open_backend(hbase_url))
    try:
        t = TopicId("ns", "t")
        store.create_topic(t)
        store.put_state("groups", "g1", b"offsets-1")
        store.put_states({("groups", "g2"): b"x", ("groups", "g1"): None})
        assert store.scan_state("groups") == [("g2", b"x")]
        store.put_state("groups", "g1", b"again")  # deleted, then written again at once
        assert store.get_state("groups", "g1") == b"again"

        tx = store.transactions.start()
        store.publish(t, [b"gone"], tx=tx)
        store.transactions.abort(tx)
        store.publish(t, [b"kept"])
        snapshot = store.transactions.snapshot()
        assert [m.payload for m in store.poll(t, tx=snapshot)] == [b"kept"]

        store.delete_topic(t)
        store.create_topic(t)
        assert store.get_topic(t).generation == 2
        store.publish(t, [b"new"])
        store.cleanup()  # the janitor drops generation 1's rows
        assert [m.payload for m in store.read(t, offset=0).messages] == [b"new"]
        old = keys.all_generations_prefix(keys.MESSAGE, t)
        assert [
            keys.generation_of(k, len(old))
            for k, _ in store._backend.scan(old, keys.prefix_end(old))
        ] == [2]
    finally:
        store.close()


def test_a_store_on_hbase_under_concurrent_writers_and_readers(hbase_url: str) -> None:
    store = Store(open_backend(hbase_url + "?pool_size=4"))
    topics = [TopicId("ns", f"c{i}") for i in range(4)]
    for t in topics:
        store.create_topic(t)
    errors: list[BaseException] = []

    def produce(t: TopicId) -> None:
        try:
            for i in range(15):
                store.publish(t, [b"%d-%d" % (i, j) for j in range(3)])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def consume() -> None:
        try:
            for _ in range(30):
                for t in topics:
                    nxt = store.offsets(t)[1]
                    if nxt:
                        store.read(t, offset=nxt - 1)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(t,)) for t in topics]
    threads += [threading.Thread(target=consume) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    try:
        assert errors == []
        for t in topics:
            got = [m.payload for m in store.read(t, offset=0, max_messages=100).messages]
            assert got == [b"%d-%d" % (i, j) for i in range(15) for j in range(3)]
    finally:
        store.close()
