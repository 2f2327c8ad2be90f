"""The transaction service: Tephra's semantics on the store's durable transaction manager,
for the HTTP API and SDK; Kafka transactions use the same manager through the Kafka
transaction coordinator (gateway/kafka/txn), and their write pointers are refused here.

Starting, committing and aborting each write the manager's state durably (an fsync,
shared with concurrent writers); they are awaited as the store's futures, without a thread
per call. Queries answer from memory. Non-transactional publishing and polling never go
through here.

Two additions serve writers made of many workers (a Spark sink, docs/spark.md):

- **Keyed transactions.** ``start(key=K)`` answers the same transaction to every call with
  K while it is in progress, and its final state once it committed; after an abort or a
  timeout, K starts a new one. So a batch that a crashed driver replays finds out that it
  already committed, and its tasks all write into one transaction. The key's row
  (``txkey`` state area) is forgotten ``KEY_RETENTION_MS`` after it was made.
- **Commits with a manifest.** ``commit(wp, publish=...)`` keeps, on each named topic,
  only the PayloadTable rows of the stores it lists (a failed task attempt's rows are
  dropped), publishes each topic's reference row and commits, in commit-point order:

    1. decide     TransactionManager.decide(wp): no timeout or abort can end it now
    2. record     the manifest's row (``txcommit`` area): the decision, durable
    3. publish    per topic: Store.publish_kept_async (deletes, then the reference row)
    4. commit     the TMS commit: every topic visible at once to transactional readers
    5. forget     the manifest's row is deleted

  Steps 3-5 are idempotent; ``recover()`` (at start, before listening) replays every
  recorded manifest, so a kill -9 anywhere ends with all of it visible exactly once, or
  (before step 2) none of it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge
from tmsgate.storage import (
    Store,
    StoredRange,
    TopicId,
    Transaction,
    TransactionNotInProgress,
    decode_transaction,
    encode_transaction,
)
from tmsgate.storage.transactions import COMMITTED, IN_PROGRESS

from .errors import NotInCluster, TransactionOwned

log = logging.getLogger("tmsgate.transactions")

DEFAULT_TIMEOUT_S = 30.0  # Tephra's default transaction timeout
MAX_TIMEOUT_S = 86_400.0  # a day: a longer-lived transaction holds every reader back
KEY_AREA = "txkey"
COMMIT_AREA = "txcommit"
MAX_KEY_LENGTH = 255
# A Spark sink asks for a batch's key again only when it replays that batch: after a
# crash, within the query's restart. A week covers any restart an operator makes.
KEY_RETENTION_MS = 7 * 86_400_000

Manifest = Sequence[tuple[TopicId, Sequence[StoredRange]]]


@dataclass(frozen=True, slots=True)
class KeyedStart:
    """What start(key=...) answers: a transaction in progress (``tx``), or the committed
    write pointer of the key (``tx`` None)."""

    write_pointer: int
    state: str
    tx: Transaction | None


def check_key(key: str) -> None:
    if not 0 < len(key) <= MAX_KEY_LENGTH or not key.isascii() or not key.isprintable():
        raise ValueError(f"a transaction key has 1-{MAX_KEY_LENGTH} printable ASCII characters")


class TransactionService:
    def __init__(
        self,
        store: Store,
        registry: CollectorRegistry,
        kafka_owner: Callable[[int], str | None] = lambda wp: None,
        *,
        clustered: bool = False,
    ) -> None:
        """``kafka_owner(wp)``: the Kafka transactional id whose transaction ``wp`` is
        (the Kafka transaction coordinator's), else None."""
        self._store = store
        self._manager = store.transactions
        # Several gateways: each has its own transaction manager over one store, whose
        # write pointers could collide; until one is shared, none starts a transaction.
        self._clustered = clustered
        self._kafka_owner = kafka_owner
        self._key_lock = asyncio.Lock()  # one transaction per key, whoever asks first
        self._next_key_sweep_ms = 0
        self.before_step: Callable[[str], Awaitable[None]] | None = None  # fault points
        self._open = Gauge(
            "tmsgate_transactions_open",
            "Transactions in progress (started, not yet committed, aborted or timed out)",
            registry=registry,
        )
        self._open.set_function(lambda: float(len(self._manager.in_progress())))
        self._invalid = Gauge(
            "tmsgate_transactions_invalid",
            "Write pointers on the invalid list (aborted or timed out)",
            registry=registry,
        )
        self._invalid.set_function(lambda: float(len(self._manager.invalid())))
        self._ended = Counter(
            "tmsgate_transactions",
            "Transactions started and ended, by outcome",
            ["outcome"],
            registry=registry,
        )
        for outcome in ("started", "committed", "aborted", "invalidated"):
            self._ended.labels(outcome)

    # --- transitions (durable) -------------------------------------------------------------
    async def start(self, timeout_s: float | None = None) -> Transaction:
        if self._clustered:
            raise NotInCluster(
                "transactions are not served yet when several gateways share the store "
                "(tmsgate serve --cluster): run a single gateway for transactions"
            )
        timeout = DEFAULT_TIMEOUT_S if timeout_s is None else float(timeout_s)
        if not 0 < timeout <= MAX_TIMEOUT_S:
            raise ValueError(f"timeout must be between 0 and {MAX_TIMEOUT_S:g} seconds")
        tx = await asyncio.wrap_future(self._manager.start_async(timeout))
        self._ended.labels("started").inc()
        return tx

    async def start_keyed(self, key: str, timeout_s: float | None = None) -> KeyedStart:
        """The transaction of ``key`` (see the module docstring)."""
        check_key(key)
        if self._clustered:
            await self.start()  # refused with the reason
        async with self._key_lock:
            raw = self._store.get_state(KEY_AREA, key)
            if raw is not None:
                wp = int(json.loads(raw)["wp"])
                state = self._manager.state(wp)
                if state == COMMITTED:
                    return KeyedStart(wp, COMMITTED, None)
                if state == IN_PROGRESS:
                    snap = self._manager.snapshot()
                    tx = Transaction(wp, snap.read_pointer, snap.in_progress - {wp}, snap.invalid)
                    return KeyedStart(wp, IN_PROGRESS, tx)
                log.info("transaction key %r: %d is %s; starting another", key, wp, state)
            tx = await self.start(timeout_s)
            row = json.dumps({"wp": tx.write_pointer, "atMs": self._store.now_ms()})
            await asyncio.wrap_future(self._store.put_states_async({(KEY_AREA, key): row.encode()}))
            return KeyedStart(tx.write_pointer, IN_PROGRESS, tx)

    async def snapshot(self) -> Transaction:
        """A read-only transaction for consumers: no write pointer is taken."""
        return self._manager.snapshot()

    async def commit(self, wp: int) -> None:
        self._refuse_kafka(wp)
        await asyncio.wrap_future(self._manager.commit_async(wp))
        self._ended.labels("committed").inc()

    async def commit_publishing(self, wp: int, manifest: Manifest) -> None:
        """Commit after publishing only the listed stores (module docstring, steps 1-5)."""
        self._refuse_kafka(wp)
        self._manager.decide(wp)  # 1; TransactionNotInProgress if it cannot commit
        record = {
            "wp": wp,
            "publish": [
                [t.namespace, t.topic, [_range_row(r) for r in ranges]] for t, ranges in manifest
            ],
        }
        key = f"{wp:020d}"
        await self._step("record")
        await asyncio.wrap_future(
            self._store.put_states_async({(COMMIT_AREA, key): json.dumps(record).encode()})
        )  # 2
        await self._apply(wp, manifest, key)
        self._ended.labels("committed").inc()

    async def _step(self, name: str) -> None:
        if self.before_step is not None:
            await self.before_step(name)

    async def _apply(self, wp: int, manifest: Manifest, key: str) -> None:
        for i, (topic, ranges) in enumerate(manifest):  # 3
            await asyncio.wrap_future(self._store.publish_kept_async(topic, wp, ranges))
            if i == 0:
                await self._step("publish")  # one topic's reference written, others not
        await self._step("commit")
        try:
            await asyncio.wrap_future(self._manager.commit_async(wp))  # 4
        except TransactionNotInProgress as exc:
            if exc.state != COMMITTED:  # committed: a replay after step 4
                raise
        await self._step("forget")
        await asyncio.wrap_future(self._store.put_states_async({(COMMIT_AREA, key): None}))  # 5

    async def recover(self) -> None:
        """Finish every commit whose manifest was recorded (at start, before listening)."""
        for key, raw in self._store.scan_state(COMMIT_AREA):
            record = json.loads(raw)
            wp = int(record["wp"])
            manifest = [
                (TopicId.stored(ns, name), [_range_of(wp, r) for r in rows])
                for ns, name, rows in record["publish"]
            ]
            if self._manager.state(wp) != COMMITTED:
                self._manager.decide(wp, recovering=True)
            log.warning("finishing the commit of write pointer %d decided before a restart", wp)
            await self._apply(wp, manifest, key)

    def forget_old_keys(self) -> int:
        """Delete transaction keys older than KEY_RETENTION_MS (at most once an hour: it
        scans them all); -> how many."""
        now = self._store.now_ms()
        if now < self._next_key_sweep_ms:
            return 0
        self._next_key_sweep_ms = now + 3_600_000
        floor = now - KEY_RETENTION_MS
        old = {
            (KEY_AREA, key): None
            for key, raw in self._store.scan_state(KEY_AREA)
            if int(json.loads(raw)["atMs"]) < floor
        }
        if old:
            self._store.put_states(old)
        return len(old)

    async def abort(self, wp: int) -> None:
        self._refuse_kafka(wp)
        await asyncio.wrap_future(self._manager.abort_async(wp))
        self._ended.labels("aborted").inc()

    async def invalidate(self, wp: int) -> None:
        if not await asyncio.wrap_future(self._manager.invalidate_async(wp)):
            raise TransactionNotInProgress(wp, self._manager.state(wp))
        self._ended.labels("invalidated").inc()
        log.info("transaction %d invalidated", wp)

    def _refuse_kafka(self, wp: int) -> None:
        owner = self._kafka_owner(wp)
        if owner is not None:
            raise TransactionOwned(wp, owner)

    # --- queries ---------------------------------------------------------------------------
    def state(self, wp: int) -> str:
        return self._manager.state(wp)

    def in_progress(self) -> dict[int, int]:
        """write pointer -> expiry (epoch ms)."""
        return self._manager.in_progress()

    def invalid(self) -> list[int]:
        return self._manager.invalid()

    # --- the codec -------------------------------------------------------------------------
    @staticmethod
    def encode(tx: Transaction) -> bytes:
        return encode_transaction(tx)

    @staticmethod
    def decode(raw: bytes) -> Transaction:
        return decode_transaction(raw)


def _range_row(r: StoredRange) -> list[int]:
    return [r.start_ts, r.start_seq, r.end_ts, r.end_seq, r.count]


def _range_of(wp: int, row: Sequence[int]) -> StoredRange:
    start_ts, start_seq, end_ts, end_seq, count = row
    return StoredRange(wp, start_ts, start_seq, end_ts, end_seq, count)
