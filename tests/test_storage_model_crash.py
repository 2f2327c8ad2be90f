"""The store model test (test_storage_model.py) on a backend that is atomic per row only,
with writes that fail or crash between two rows.

The memory:// engine writes every row on its own, in a shuffled order within each phase
(as HBase regions may), and is armed by the rules below to fail the write in progress,
or crash, after a chosen number of rows. A crash drops the store and opens another on
the rows that are left, as a restarted process would; a failure leaves the store running
(it settles what the write left before the caller hears of it).

An operation that failed or crashed was not acknowledged, so either outcome is allowed,
but only whole: after settling, a publish is there with all its messages or not at all,
a reference with all its payloads or not at all, a transaction started or not, committed
or still in progress, aborted or still in progress; only a rollback may be partial (each
of its rows negated or not), as the seed allows. The model adopts what the store shows
and the invariants of the base model then hold: nothing acknowledged lost, offsets dense
and stable, ids increasing and stable, nothing uncommitted or rolled back visible to a
transactional reader, and the last stable offset right.
"""

from __future__ import annotations

import os
import uuid

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule
from test_storage_model import (
    ITEMS,
    KEYED,
    SETTINGS,
    TX_TIMEOUT_S,
    Row,
    StoreModel,
    TxModel,
)
from tmsgate.storage import (
    BackendError,
    InvalidTransaction,
    Message,
    RollbackDetail,
    Store,
    TransactionNotInProgress,
    keys,
    memory,
)
from tmsgate.storage.memory import Faults, MemoryBackend

ROWS = st.integers(0, 7)


class CrashingStoreModel(StoreModel):
    def __init__(self) -> None:
        self.name = f"crash-model-{uuid.uuid4().hex}"
        self.table = memory.table(self.name)
        self.faults = Faults(seed=0)
        self.crashes = 0
        super().__init__()

    def open(self) -> Store:
        while True:
            self.backend = MemoryBackend(self.table, self.faults)
            try:
                return Store(self.backend, clock=self.clock)
            except BackendError:
                # Crashed while settling at open (an armed crash): open again.
                self.faults.crash_after_rows = None
                self.faults.fail_after_rows = None

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            memory.drop(self.name)

    # --- faults ----------------------------------------------------------------------------
    @rule(rows=ROWS)
    def arm_crash(self, rows: int) -> None:
        if self.faults.crash_after_rows is None:
            self.faults.crash_after_rows = rows

    @rule(rows=ROWS)
    def arm_failure(self, rows: int) -> None:
        if self.faults.fail_after_rows is None:
            self.faults.fail_after_rows = rows

    @rule(seed=st.integers(0, 2**16))
    def reshuffle(self, seed: int) -> None:
        self.faults.rng.seed(seed)

    def recover(self) -> None:
        """After an operation raised BackendError: restart if the backend crashed."""
        if not self.backend.crashed:
            return
        self.crashes += 1
        self.faults.crash_after_rows = None
        self.faults.fail_after_rows = None
        self.store.close()
        self.store = self.open()
        self.continue_at = None

    def landed(self, count: int) -> list[Message]:
        """The messages at the model's next offset: none, or exactly ``count`` of them."""
        res = self.store.read(self.topic, offset=self.next_offset, max_messages=count + 5)
        assert len(res.messages) in (0, count), (
            f"a failed write left {len(res.messages)} of {count} messages"
        )
        return res.messages

    def adopt(self, msgs: list[Message], items: list, wp: int | None) -> list[int]:
        """Model rows for messages a failed publish did write (one row per message)."""
        first = len(self.rows)
        if not msgs:
            return []
        for m, item in zip(msgs, items, strict=True):
            assert (m.payload, m.meta) == item
            assert m.write_pointer == wp
            self.rows.append(Row(m.offset, [item], wp))
        return list(range(first, len(self.rows)))

    # --- the writing rules, each allowed to fail ---------------------------------------------
    @rule(spec=ITEMS)
    def publish(self, spec) -> None:
        entries, items = self.make_items(spec)
        try:
            r = self.store.publish(self.topic, entries)
        except BackendError:
            self.recover()
            self.adopt(self.landed(len(items)), items, None)
            return
        self.record_direct(r, items, None)

    @rule(keyed=KEYED)
    def publish_kafka_batch(self, keyed: list[bool]) -> None:
        raw, items = self.make_kafka_batch(keyed)
        try:
            r = self.store.publish_kafka_batch_async(self.topic, raw, len(items)).result()
        except BackendError:
            self.recover()
            self.adopt(self.landed(len(items)), items, None)
            return
        self.record_direct(r, items, None)

    @rule()
    def start_tx(self) -> None:
        before = set(self.store.transactions.in_progress())
        try:
            tx = self.store.transactions.start(timeout_s=TX_TIMEOUT_S)
        except BackendError:
            self.recover()
            new = set(self.store.transactions.in_progress()) - before
            assert len(new) <= 1
            if new:
                (wp,) = new
                assert wp > self.last_wp
                self.txs[wp] = TxModel(
                    wp,
                    self.last_wp,
                    frozenset(self.open_wps()),
                    frozenset(self.wps("invalid")),
                )
            # The last pointer may have landed without the transaction: no rows use it.
            self.last_wp = self.store.transactions.snapshot().read_pointer
            return
        assert tx.write_pointer > self.last_wp
        assert tx.read_pointer == self.last_wp
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
        try:
            r = self.store.publish(self.topic, entries, tx=wp)
        except BackendError:
            self.recover()
            msgs = self.landed(len(items))
            rows = self.adopt(msgs, items, wp)
            if msgs:
                f, last = msgs[0].id, msgs[-1].id
                detail = RollbackDetail(
                    wp, f.publish_ts, f.parts[1], last.publish_ts, last.parts[1]
                )
                self.txs[wp].publishes.append((detail, rows))
            return
        rows = self.record_direct(r, items, wp)
        self.txs[wp].publishes.append((r.rollback, rows))

    def stored_rows(self, wp: int) -> int:
        """The messages of ``wp`` in the PayloadTable (a row holds one, or several packed)."""
        prefix = keys.data_prefix(keys.PAYLOAD, self.topic, 1) + keys.U64.pack(wp)
        return sum(
            keys.messages_in_row(v)
            for _, v in self.store._backend.scan(prefix, keys.prefix_end(prefix))
        )

    @precondition(lambda self: self.txs)
    @rule(data=st.data(), spec=ITEMS)
    def store_payloads(self, data, spec) -> None:
        wp = data.draw(st.sampled_from(sorted(self.txs)), label="wp")
        t = self.txs[wp]
        if t.status != "open" or t.ref_published:
            return  # the refusals are the base model's to check
        entries, items = self.make_items(spec)
        try:
            self.store.store(self.topic, entries, wp)
        except BackendError:
            self.recover()
            n = self.stored_rows(wp)
            assert n in (len(t.stored), len(t.stored) + len(items)), "a store landed in part"
            if n > len(t.stored):
                t.stored.extend(items)
            return
        t.stored.extend(items)

    @precondition(lambda self: self.txs)
    @rule(data=st.data())
    def publish_reference(self, data) -> None:
        wp = data.draw(st.sampled_from(sorted(self.txs)), label="wp")
        t = self.txs[wp]
        if t.status != "open" or t.ref_published or not t.stored:
            return
        try:
            r = self.store.publish(self.topic, [], tx=wp)
        except BackendError:
            self.recover()
            msgs = self.landed(len(t.stored))
            if not msgs:
                return
            base = msgs[0].offset
            r_detail = RollbackDetail(
                wp,
                msgs[0].publish_ts,
                msgs[0].id.parts[1],
                msgs[0].publish_ts,
                msgs[0].id.parts[1],
            )
            self.ref_prefixes[base] = bytes(msgs[0].id[:10])
        else:
            assert r.count == len(t.stored)
            base, r_detail = r.base_offset, r.rollback
            self.ref_prefixes[base] = bytes(r.first_id[:10])
        t.ref_published = True
        self.rows.append(Row(base, list(t.stored), wp, reference=True))
        t.publishes.append((r_detail, [len(self.rows) - 1]))
        t.stored = []
        # The marker landed with (or was settled after) the reference: a second publish
        # of the same payloads is refused.
        try:
            self.store.publish(self.topic, [], tx=wp)
        except InvalidTransaction:
            pass
        else:
            raise AssertionError("published the same stored payloads twice")

    @precondition(lambda self: self.txs)
    @rule(data=st.data(), commit=st.booleans())
    def finish_tx(self, data, commit: bool) -> None:
        wp = data.draw(st.sampled_from(sorted(self.txs)), label="wp")
        t = self.txs[wp]
        if t.status != "open":
            return
        txm = self.store.transactions
        try:
            (txm.commit if commit else txm.abort)(wp)
        except BackendError:
            self.recover()
            state = self.store.transactions.state(wp)
            if state == "in_progress":
                return
            # How an abort ended is remembered in memory only: after a restart, "invalid".
            assert state in (("committed",) if commit else ("aborted", "invalid")), state
        t.status = "committed" if commit else "invalid"

    @precondition(
        lambda self: any(t.publishes and t.status != "committed" for t in self.txs.values())
    )
    @rule(data=st.data())
    def rollback(self, data) -> None:
        candidates = [
            (wp, i)
            for wp, t in sorted(self.txs.items())
            if t.status != "committed"
            for i in range(len(t.publishes))
        ]
        wp, i = data.draw(st.sampled_from(candidates), label="publish")
        detail, row_indexes = self.txs[wp].publishes[i]
        rows = [self.rows[j] for j in row_indexes]
        try:
            changed = self.store.rollback(self.topic, detail)
        except BackendError:
            self.recover()
            for r in rows:  # a rollback may land row by row, as the seed allows
                (m,) = self.store.read(self.topic, offset=r.base, max_messages=1).messages[:1]
                r.rolled_back = m.write_pointer is not None and m.write_pointer < 0
            return
        assert changed == sum(1 for r in rows if not r.rolled_back)
        for r in rows:
            r.rolled_back = True

    @invariant()
    def last_stable_offset_matches(self) -> None:
        """As the base model's, with partial rollbacks: a publish holds the last stable
        offset from its first row while any of its rows is not rolled back (its marker
        names its first row, and goes only once every row is negated)."""
        holds = [
            self.rows[rows[0]].base
            for t in self.txs.values()
            if t.status == "open"
            for _, rows in t.publishes
            if any(not self.rows[j].rolled_back for j in rows)
        ]
        expected = min(holds) if holds else self.next_offset
        assert self.store.last_stable_offset(self.topic) == expected


# A soak: TMSGATE_CRASH_MODEL_EXAMPLES=20000 (about 15 minutes here).
CrashingStoreModel.TestCase.settings = settings(
    SETTINGS, max_examples=int(os.environ.get("TMSGATE_CRASH_MODEL_EXAMPLES", "400"))
)
TestCrashingStoreModel = CrashingStoreModel.TestCase
