"""Model-based test: random publish / transactional publish / store / publish-reference /
commit / abort / rollback / poll / reopen sequences against a real store and a plain
in-memory model of the TMS seed's rules.

The model is a list of MessageTable rows (each with its messages, write pointer and
rolled-back flag) and each transaction's state. After every step the whole topic is read
non-transactionally and compared with the model (offsets dense and stable, ids strictly
increasing and stable, publish times never going back). Polls from random offsets,
message ids and timestamps, with and without a transaction, are compared with what the
seed's scan rules give on the model: transactional reads skip rolled-back and invalid
entries, stop at the first in-progress one, and otherwise see the same order as everyone.
The fake clock moves forward, stays, and sometimes goes backwards (by up to 90 s).

On e0fd945 this machine found, and shrank to a few steps each, the bugs now pinned by
test_storage_store.py's ``*_across_reopen`` and ``*_clock_went_back`` regression tests.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from dataclasses import dataclass, field

import kafka_requests
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from tmsgate.protocol import batch_messages
from tmsgate.storage import (
    Entry,
    InvalidTransaction,
    Message,
    MessageId,
    RollbackDetail,
    Store,
    StoredBatch,
    TopicId,
    Transaction,
    TransactionNotInProgress,
    open_store,
)

EPOCH_MS = 1_700_000_000_000
# Hypothesis runs (and, on a failure, shrinks) thousands of short store lifetimes; creating
# and fsyncing a fresh LevelDB costs ~30 ms on disk and ~2 ms on tmpfs. It is still a real
# LevelDB with real files, close and reopen; fsync durability is test_storage_crash.py's job.
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
TX_TIMEOUT_S = 10_000_000.0  # no transaction times out during a run
KEYED = st.lists(st.booleans(), min_size=1, max_size=4)  # a Kafka batch: a key per record?


class Clock:
    def __init__(self) -> None:
        self.now = EPOCH_MS

    def __call__(self) -> int:
        return self.now


@dataclass
class Row:
    """One MessageTable row: one message, or a PayloadTable reference to several."""

    base: int
    items: list[tuple[bytes | None, bytes | None]]  # (payload, meta) per message
    wp: int | None
    reference: bool = False
    rolled_back: bool = False

    @property
    def end(self) -> int:
        return self.base + len(self.items)


@dataclass
class TxModel:
    wp: int
    read_pointer: int
    in_progress: frozenset[int]  # the snapshot taken at start
    invalid: frozenset[int]
    status: str = "open"  # open | committed | invalid
    stored: list[tuple[bytes | None, bytes | None]] = field(default_factory=list)
    ref_published: bool = False
    publishes: list[tuple[RollbackDetail, list[int]]] = field(default_factory=list)  # rows


DELTAS = st.one_of(
    st.just(0),
    st.integers(1, 3),
    st.integers(4, 2_000),
    st.integers(-3, -1),
    st.integers(-5_000, -4),
    st.just(-90_000),  # a big step back (NTP)
)
ITEM = st.tuples(st.booleans(), st.booleans())  # (null payload?, with meta?)
ITEMS = st.lists(ITEM, min_size=1, max_size=3)
LIMIT = st.integers(1, 6)


class StoreModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="tms-model-", dir=SCRATCH)
        self.url = f"leveldb://{self.dir}"
        self.clock = Clock()
        self.store: Store = self.open()
        self.topic = TopicId("model", "t")
        self.store.create_topic(self.topic)
        self.rows: list[Row] = []
        self.txs: dict[int, TxModel] = {}
        self.last_wp = 0
        self.ids: dict[int, MessageId] = {}  # offset -> id, once seen
        self.expected_ids: dict[int, MessageId] = {}  # offset -> id from a PublishResult
        self.ref_prefixes: dict[int, bytes] = {}  # base offset of a reference row -> id[:10]
        self.counter = 0
        self.continue_at: int | None = None  # where the last read by offset ended

    def open(self) -> Store:
        return open_store(self.url, clock=self.clock)

    def teardown(self) -> None:
        try:
            self.store.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    # --- model helpers ---------------------------------------------------------------------
    @property
    def next_offset(self) -> int:
        return self.rows[-1].end if self.rows else 0

    def make_items(self, spec: list[tuple[bool, bool]]) -> tuple[list, list]:
        entries, model = [], []
        for null, with_meta in spec:
            self.counter += 1
            payload = None if null else f"m{self.counter}".encode()
            meta = f"h{self.counter}".encode() if with_meta else None
            entries.append(Entry(payload, meta=meta) if null or with_meta else payload)
            model.append((payload, meta))
        return entries, model

    def wps(self, status: str) -> list[int]:
        return sorted(wp for wp, t in self.txs.items() if t.status == status)

    def open_wps(self) -> list[int]:
        return self.wps("open")

    def messages(self) -> list[tuple[int, Row, bytes | None, bytes | None]]:
        return [(r.base + i, r, p, m) for r in self.rows for i, (p, m) in enumerate(r.items)]

    def visibility(self, row: Row, reader: TxModel | None) -> str:
        """The seed's / Tephra's rule for a transactional reader (``reader`` None: snapshot)."""
        if row.wp is None:
            return "accept"
        if row.rolled_back:
            return "skip"
        if reader is None:  # a fresh snapshot: the current state
            status = self.txs[row.wp].status
            return {"open": "hold", "invalid": "skip", "committed": "accept"}[status]
        if row.wp == reader.wp:
            return "accept"
        if row.wp in reader.invalid:
            return "skip"
        if row.wp > reader.read_pointer or row.wp in reader.in_progress:
            return "hold"
        return "accept"

    def expected_read(
        self,
        *,
        tx: bool,
        reader: TxModel | None,
        limit: int,
        offset: int | None = None,
        start_id: bytes | None = None,
        inclusive: bool = True,
        start_ts: int | None = None,
    ) -> tuple[list[tuple[int, bytes | None]], int, bool]:
        """What a read must return: ([(offset, payload)], next_offset, held)."""
        rows = self.rows
        if start_id is not None:
            rows = [r for r in rows if self.row_key(r) >= start_id[:10]]
        elif start_ts is not None:
            first = start_ts if inclusive else start_ts + 1
            rows = [r for r in rows if self.ids[r.base].publish_ts >= first]
        out: list[tuple[int, bytes | None]] = []
        held = False
        resume = offset if offset is not None else rows[0].base if rows else self.next_offset
        for row in rows:
            if offset is not None and row.end <= offset:
                continue
            if tx:
                vis = self.visibility(row, reader)
                if vis == "skip":
                    resume = row.end
                    continue
                if vis == "hold":
                    held = True
                    break
            for i, (payload, _) in enumerate(row.items):
                off = row.base + i
                if offset is not None and off < offset:
                    resume = off + 1
                    continue
                if start_id is not None:
                    mid = self.ids[off]
                    if mid < start_id or (not inclusive and mid == start_id):
                        resume = off + 1
                        continue
                if len(out) >= limit:
                    break
                out.append((off, payload))
                resume = off + 1
            if len(out) >= limit:
                break
        return out, resume, held

    def row_key(self, row: Row) -> bytes:
        return bytes(self.ids[row.base][:10])

    def check_read(self, res, expected) -> None:
        out, nxt, held = expected
        got = [(m.offset, m.payload) for m in res.messages]
        assert got == out, (got, out)
        assert res.held == held, (res.held, held)
        assert res.next_offset == nxt, (res.next_offset, nxt)
        for m in res.messages:
            assert m.id == self.ids[m.offset]

    def pick_reader(self, data) -> tuple[Transaction | None, TxModel | None]:
        """A fresh snapshot, or the view of an open transaction (its own writes included)."""
        choices = ["snapshot", *self.open_wps()]
        pick = data.draw(st.sampled_from(choices), label="reader")
        if pick == "snapshot":
            snap = self.store.transactions.snapshot()
            assert snap.read_pointer == self.last_wp
            assert snap.in_progress == frozenset(self.open_wps())
            assert snap.invalid == frozenset(self.wps("invalid"))
            return snap, None
        model = self.txs[pick]
        return Transaction(pick, model.read_pointer, model.in_progress, model.invalid), model

    # --- clock -----------------------------------------------------------------------------
    @rule(delta=DELTAS)
    def move_clock(self, delta: int) -> None:
        self.clock.now += delta

    # --- publishing ------------------------------------------------------------------------
    @rule(spec=ITEMS)
    def publish(self, spec) -> None:
        entries, items = self.make_items(spec)
        r = self.store.publish(self.topic, entries)
        self.record_direct(r, items, None)

    def make_kafka_batch(self, keyed: list[bool]) -> tuple[bytes, list]:
        """A Kafka batch of len(keyed) records, and its model items (payload, meta)."""
        records = []
        for with_key in keyed:
            self.counter += 1
            records.append((b"k" if with_key else None, f"m{self.counter}".encode(), []))
        raw = kafka_requests.batch(records, timestamp=EPOCH_MS)
        return raw, [(p, m) for p, m, _ in batch_messages(raw)]

    @rule(keyed=KEYED)
    def publish_kafka_batch(self, keyed: list[bool]) -> None:
        """A plain Kafka produce kept as sent (keys.F_KAFKA_BATCH): its records are
        messages like any other to every read."""
        raw, items = self.make_kafka_batch(keyed)
        r = self.store.publish_kafka_batch_async(self.topic, raw, len(items)).result()
        self.record_direct(r, items, None)

    def record_direct(self, r, items, wp: int | None) -> list[int]:
        assert r.base_offset == self.next_offset and r.count == len(items)
        assert r.publish_ts == r.first_id.publish_ts
        self.expected_ids[r.base_offset] = r.first_id
        self.expected_ids[r.base_offset + r.count - 1] = r.last_id
        first = len(self.rows)
        for i, item in enumerate(items):
            self.rows.append(Row(r.base_offset + i, [item], wp))
        return list(range(first, len(self.rows)))

    @rule()
    def start_tx(self) -> None:
        tx = self.store.transactions.start(timeout_s=TX_TIMEOUT_S)
        assert tx.write_pointer > self.last_wp
        assert tx.read_pointer == self.last_wp
        assert tx.in_progress == frozenset(self.open_wps())
        assert tx.invalid == frozenset(self.wps("invalid"))
        self.txs[tx.write_pointer] = TxModel(
            tx.write_pointer, tx.read_pointer, tx.in_progress, tx.invalid
        )
        self.last_wp = tx.write_pointer

    @precondition(lambda self: self.txs)
    @rule(data=st.data(), spec=ITEMS)
    def tx_publish(self, data, spec) -> None:
        wp = data.draw(st.sampled_from(sorted(self.txs)), label="wp")
        entries, items = self.make_items(spec)
        if self.txs[wp].status != "open":
            try:
                self.store.publish(self.topic, entries, tx=wp)
            except TransactionNotInProgress:
                return
            raise AssertionError("published with a transaction that is not in progress")
        r = self.store.publish(self.topic, entries, tx=wp)
        assert r.rollback is not None and r.rollback.write_pointer == wp
        rows = self.record_direct(r, items, wp)
        self.txs[wp].publishes.append((r.rollback, rows))

    @precondition(lambda self: self.txs)
    @rule(data=st.data(), spec=ITEMS)
    def store_payloads(self, data, spec) -> None:
        wp = data.draw(st.sampled_from(sorted(self.txs)), label="wp")
        t = self.txs[wp]
        entries, items = self.make_items(spec)
        if t.status != "open":
            try:
                self.store.store(self.topic, entries, wp)
            except TransactionNotInProgress:
                return
            raise AssertionError("stored with a transaction that is not in progress")
        if t.ref_published:
            try:
                self.store.store(self.topic, entries, wp)
            except InvalidTransaction:
                return
            raise AssertionError("stored more payloads after they were published")
        self.store.store(self.topic, entries, wp)
        t.stored.extend(items)

    @precondition(lambda self: self.txs)
    @rule(data=st.data())
    def publish_reference(self, data) -> None:
        wp = data.draw(st.sampled_from(sorted(self.txs)), label="wp")
        t = self.txs[wp]
        if t.status != "open":
            try:
                self.store.publish(self.topic, [], tx=wp)
            except TransactionNotInProgress:
                return
            raise AssertionError("published with a transaction that is not in progress")
        if t.ref_published:
            try:
                self.store.publish(self.topic, [], tx=wp)
            except InvalidTransaction:
                return
            raise AssertionError("published the same stored payloads twice")
        r = self.store.publish(self.topic, [], tx=wp)
        assert r.base_offset == self.next_offset
        assert r.count == len(t.stored)
        if not t.stored:
            return
        t.ref_published = True
        self.ref_prefixes[r.base_offset] = bytes(r.first_id[:10])
        self.rows.append(Row(r.base_offset, list(t.stored), wp, reference=True))
        t.publishes.append((r.rollback, [len(self.rows) - 1]))
        t.stored = []

    @precondition(lambda self: self.txs)
    @rule(data=st.data(), commit=st.booleans())
    def finish_tx(self, data, commit: bool) -> None:
        wp = data.draw(st.sampled_from(sorted(self.txs)), label="wp")
        t = self.txs[wp]
        finish = self.store.transactions.commit if commit else self.store.transactions.abort
        if t.status != "open":
            try:
                finish(wp)
            except TransactionNotInProgress:
                return
            raise AssertionError("finished a transaction that is not in progress")
        finish(wp)
        t.status = "committed" if commit else "invalid"

    @precondition(
        lambda self: any(t.publishes and t.status != "committed" for t in self.txs.values())
    )
    @rule(data=st.data())
    def rollback(self, data) -> None:
        """The client rolls back a transactional publish of a transaction it did not commit."""
        candidates = [
            (wp, i)
            for wp, t in sorted(self.txs.items())
            if t.status != "committed"
            for i in range(len(t.publishes))
        ]
        wp, i = data.draw(st.sampled_from(candidates), label="publish")
        detail, row_indexes = self.txs[wp].publishes[i]
        changed = self.store.rollback(self.topic, detail)
        rows = [self.rows[j] for j in row_indexes]
        assert changed == sum(1 for r in rows if not r.rolled_back)
        for r in rows:
            r.rolled_back = True

    # --- reading ---------------------------------------------------------------------------
    @rule(data=st.data(), limit=LIMIT, tx=st.booleans())
    def poll_from_offset(self, data, limit: int, tx: bool) -> None:
        offset = data.draw(st.integers(0, self.next_offset), label="offset")
        reader, model = self.pick_reader(data) if tx else (None, None)
        res = self.store.read(self.topic, offset=offset, max_messages=limit, tx=reader)
        self.check_read(res, self.expected_read(tx=tx, reader=model, limit=limit, offset=offset))
        self.continue_at = res.next_offset

    @rule(data=st.data(), limit=LIMIT)
    def fetch_kafka_batches(self, data, limit: int) -> None:
        """A Kafka fetch's read: stored batches come whole (counted as one toward the
        limit), as the records every other read returns, with the same ids."""
        offset = data.draw(st.integers(0, self.next_offset), label="offset")
        res = self.store.read(self.topic, offset=offset, max_messages=limit, kafka_batches=True)
        got = []
        for row in res.rows:
            if type(row) is StoredBatch:
                assert row.base_offset >= offset
                msgs = self.store.read(
                    self.topic, offset=row.base_offset, max_messages=row.count
                ).messages
                assert row.message_ids() == [bytes(m.id) for m in msgs]
                records = batch_messages(row.batch)
                got += [(row.base_offset + i, p) for i, (p, _, _) in enumerate(records)]
            else:
                got.append((row[2], row[1]))
        want, _, _ = self.expected_read(tx=False, reader=None, limit=1 << 30, offset=offset)
        assert got == want[: len(got)]
        assert len(got) >= min(limit, len(want))
        assert res.next_offset == (got[-1][0] + 1 if got else offset)

    @precondition(lambda self: self.continue_at is not None)
    @rule(limit=LIMIT)
    def poll_continuing(self, limit: int) -> None:
        """A consumer keeping up: it reads on from where its last read ended (the store
        then starts from a remembered key instead of searching)."""
        offset = self.continue_at
        assert offset is not None
        res = self.store.read(self.topic, offset=offset, max_messages=limit)
        self.check_read(res, self.expected_read(tx=False, reader=None, limit=limit, offset=offset))
        self.continue_at = res.next_offset

    @precondition(lambda self: self.ids)
    @rule(data=st.data(), limit=LIMIT, tx=st.booleans(), inclusive=st.booleans())
    def poll_from_id(self, data, limit: int, tx: bool, inclusive: bool) -> None:
        offset = data.draw(st.sampled_from(sorted(self.ids)), label="at")
        start = self.ids[offset]
        reader, model = self.pick_reader(data) if tx else (None, None)
        res = self.store.read(
            self.topic, start=start, inclusive=inclusive, max_messages=limit, tx=reader
        )
        expected = self.expected_read(
            tx=tx, reader=model, limit=limit, start_id=bytes(start), inclusive=inclusive
        )
        self.check_read(res, expected)

    @precondition(lambda self: self.ids)
    @rule(
        data=st.data(),
        limit=LIMIT,
        tx=st.booleans(),
        inclusive=st.booleans(),
        shift=st.integers(-1, 1),
    )
    def poll_from_time(self, data, limit: int, tx: bool, inclusive: bool, shift: int) -> None:
        offset = data.draw(st.sampled_from(sorted(self.ids)), label="at")
        ts = self.ids[offset].publish_ts + shift
        reader, model = self.pick_reader(data) if tx else (None, None)
        res = self.store.read(
            self.topic, start=ts, inclusive=inclusive, max_messages=limit, tx=reader
        )
        expected = self.expected_read(
            tx=tx, reader=model, limit=limit, start_ts=ts, inclusive=inclusive
        )
        self.check_read(res, expected)

    # --- restart ---------------------------------------------------------------------------
    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = self.open()
        assert set(self.store.transactions.in_progress()) == set(self.open_wps())
        assert self.store.transactions.invalid() == self.wps("invalid")

    # --- invariants ------------------------------------------------------------------------
    @invariant()
    def whole_topic_matches_the_model(self) -> None:
        res = self.store.read(self.topic, offset=0, max_messages=10_000)
        msgs: list[Message] = res.messages
        expected = self.messages()
        assert [m.offset for m in msgs] == list(range(self.next_offset)), "offsets not dense"
        assert res.next_offset == self.next_offset and not res.held
        assert self.store.offsets(self.topic) == (0, self.next_offset)
        for m, (off, row, payload, meta) in zip(msgs, expected, strict=True):
            assert (m.offset, m.payload, m.meta) == (off, payload, meta)
            wp = None if row.wp is None else (-row.wp if row.rolled_back else row.wp)
            assert m.write_pointer == wp
            assert m.publish_ts == m.id.publish_ts
            if row.reference:
                assert m.id.write_ts > 0
                assert bytes(m.id[:10]) == self.ref_prefixes[row.base]
            else:
                assert m.id[10:] == bytes(10)
            known = self.ids.setdefault(m.offset, m.id)
            assert known == m.id, "a message id changed"
            if m.offset in self.expected_ids:
                assert m.id == self.expected_ids[m.offset]
        ids = [m.id for m in msgs]
        assert all(a < b for a, b in itertools.pairwise(ids)), "ids not increasing"
        times = [m.publish_ts for m in msgs]
        assert times == sorted(times), "publish time went back"

    @invariant()
    def last_stable_offset_matches(self) -> None:
        open_rows = [
            r.base
            for r in self.rows
            if r.wp is not None and not r.rolled_back and self.txs[r.wp].status == "open"
        ]
        expected = min(open_rows) if open_rows else self.next_offset
        assert self.store.last_stable_offset(self.topic) == expected


# One failure is shrunk and reported per run: shrinking several at once can take minutes.
SETTINGS = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
StoreModel.TestCase.settings = SETTINGS
TestStoreModel = StoreModel.TestCase
