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

  Steps 3-4 are the steps every commit takes once its decision is recorded, Kafka's
  too (gateway/commits.py: one plan, one runner, one replay, one fault hook); they and 5
  are idempotent, and ``recover()`` (at start, before listening) replays every recorded
  manifest, so a kill -9 anywhere ends with all of it visible exactly once, or (before
  step 2) none of it.

Several gateways (``--cluster``): the controller runs the transaction manager
(storage/shared_transactions.py), so every transition is made there. On another gateway
each call of this service is sent to the controller (``tx.*`` cluster calls,
gateway/cluster_calls.py) and answered by its service; queries and snapshots come from
this gateway's view of the manager. A commit's step 3 runs on each topic's leader
(gateway/partition_work.py); the controller records and replays manifests, and a new
controller replays what the last one recorded (``recover``, at takeover).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from tmsgate.storage import (
    NotTransactionLeader,
    SharedTransactions,
    Store,
    StoredRange,
    TopicId,
    Transaction,
    TransactionNotInProgress,
    decode_transaction,
    encode_transaction,
)
from tmsgate.storage.transactions import COMMITTED, IN_PROGRESS

from .cluster_calls import Body, b64, topic_of, unb64
from .commits import CommitPlan, Commits, Part
from .errors import TransactionOwned
from .partition_work import PartitionWork, range_of, range_row

if TYPE_CHECKING:
    from .cluster_calls import ClusterCalls

log = logging.getLogger("tmsgate.transactions")

DEFAULT_TIMEOUT_S = 30.0  # Tephra's default transaction timeout
MAX_TIMEOUT_S = 86_400.0  # a day: a longer-lived transaction holds every reader back
KEY_AREA = "txkey"
COMMIT_AREA = "txcommit"
MAX_KEY_LENGTH = 255
# A Spark sink asks for a batch's key again only when it replays that batch: after a
# crash, within the query's restart. A week covers any restart an operator makes.
KEY_RETENTION_MS = 7 * 86_400_000
# Several gateways: how long the controller holds a view refresh whose snapshot has not
# changed (refresh_view), and how often it looks again meanwhile.
VIEW_WAIT_S = 1.0
VIEW_POLL_S = 0.01

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
        calls: ClusterCalls | None = None,
        commits: Commits | None = None,
    ) -> None:
        """``kafka_owner(wp)``: the Kafka transactional id whose transaction ``wp`` is
        (the Kafka transaction coordinator's), else None. ``calls``: several gateways
        (the module docstring)."""
        self._store = store
        self._manager = store.transactions
        self._calls = calls
        self._seen_snapshot: str | None = None  # the controller's last snapshot applied here
        self._commits = commits or Commits(store, PartitionWork(store))
        self._kafka_owner = kafka_owner
        if calls is not None:
            for name, handler in self._call_handlers().items():
                calls.register(name, handler)
        self._key_lock = asyncio.Lock()  # one transaction per key, whoever asks first
        self._next_key_sweep_ms = 0
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
    def _forwarded(self) -> bool:
        """Several gateways, and this one does not run the manager: ask the controller."""
        txm = self._manager
        return self._calls is not None and isinstance(txm, SharedTransactions) and not txm.leading

    async def _ask(self, name: str, body: Body) -> Body:
        assert self._calls is not None
        doc = await self._calls.to_controller(name, body)
        if "snapshot" in doc:  # every answer refreshes this gateway's view
            self.apply_snapshot(doc["snapshot"])
        return doc

    async def start(self, timeout_s: float | None = None) -> Transaction:
        timeout = DEFAULT_TIMEOUT_S if timeout_s is None else float(timeout_s)
        if not 0 < timeout <= MAX_TIMEOUT_S:
            raise ValueError(f"timeout must be between 0 and {MAX_TIMEOUT_S:g} seconds")
        if self._forwarded():
            doc = await self._ask("tx.start", {"timeoutS": timeout})
            return decode_transaction(unb64(doc["tx"]))
        tx = await asyncio.wrap_future(self._manager.start_async(timeout))
        self._ended.labels("started").inc()
        return tx

    async def start_keyed(self, key: str, timeout_s: float | None = None) -> KeyedStart:
        """The transaction of ``key`` (see the module docstring)."""
        check_key(key)
        if self._forwarded():  # the controller alone keeps one transaction per key
            doc = await self._ask("tx.start_keyed", {"key": key, "timeoutS": timeout_s})
            tx = decode_transaction(unb64(doc["tx"])) if doc.get("tx") else None
            return KeyedStart(int(doc["wp"]), str(doc["state"]), tx)
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
        if self._forwarded():
            await self._ask("tx.commit", {"wp": wp})
            return
        self._refuse_kafka(wp)
        await asyncio.wrap_future(self._manager.commit_async(wp))
        self._commits.partitions.tell_everyone(wp, committed=True)
        self._ended.labels("committed").inc()

    async def commit_publishing(self, wp: int, manifest: Manifest) -> None:
        """Commit after publishing only the listed stores (module docstring, steps 1-5)."""
        if self._forwarded():
            await self._ask("tx.commit_publishing", {"wp": wp, "publish": _manifest_doc(manifest)})
            return
        self._refuse_kafka(wp)
        self._manager.decide(wp)  # 1; TransactionNotInProgress if it cannot commit
        record = {"wp": wp, "publish": _manifest_doc(manifest)}
        key = f"{wp:020d}"
        await self._commits.step("record")
        await asyncio.wrap_future(
            self._store.put_states_async({(COMMIT_AREA, key): json.dumps(record).encode()})
        )  # 2
        await self._commits.run(_plan(wp, manifest), replay=False)  # 3, 4 (gateway/commits.py)
        self._commits.partitions.tell_everyone(wp, committed=True)  # HTTP reads anywhere
        await self._forget(key)  # 5
        self._ended.labels("committed").inc()

    async def _forget(self, key: str) -> None:
        await asyncio.wrap_future(self._store.put_states_async({(COMMIT_AREA, key): None}))

    async def recover(self) -> None:
        """Finish every commit whose manifest was recorded (at start, before listening;
        on a new controller), with the replay every commit has (gateway/commits.py)."""
        for key, raw in self._store.scan_state(COMMIT_AREA):
            record = json.loads(raw)
            wp = int(record["wp"])
            await self._commits.replay(_plan(wp, _manifest_of(wp, record["publish"])))
            await self._forget(key)  # finished, or (logged) impossible

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
        if self._forwarded():
            await self._ask("tx.abort", {"wp": wp})
            return
        self._refuse_kafka(wp)
        await asyncio.wrap_future(self._manager.abort_async(wp))
        self._commits.partitions.tell_everyone(wp, committed=False)
        self._ended.labels("aborted").inc()

    async def invalidate(self, wp: int) -> None:
        if self._forwarded():
            await self._ask("tx.invalidate", {"wp": wp})
            return
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

    async def current_state(self, wp: int) -> str:
        """state(), from the manager itself where this gateway's view may lag behind it."""
        if self._forwarded():
            return str((await self._ask("tx.state", {"wp": wp}))["state"])
        return self.state(wp)

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

    # --- several gateways ------------------------------------------------------------------
    def snapshot_doc(self) -> Body:
        """The manager's state for another gateway's view (``apply_snapshot``)."""
        return {
            "tx": b64(encode_transaction(self._manager.snapshot())),
            "expiries": self._manager.in_progress(),
        }

    def apply_snapshot(self, doc: Body) -> None:
        txm = self._manager
        self._seen_snapshot = str(doc["tx"])
        if isinstance(txm, SharedTransactions):
            expiries = {int(wp): int(ms) for wp, ms in doc["expiries"].items()}
            txm.apply(decode_transaction(unb64(doc["tx"])), expiries)

    async def refresh_view(self, wait_s: float = 0.0) -> None:
        """This gateway's view from the controller's manager (a follower: gateway/services.py).
        With ``wait_s``, a long poll: the controller answers once its snapshot differs
        from the one this gateway last applied, or after ``wait_s`` (at most VIEW_WAIT_S)
        unchanged, so an idle cluster makes a call a second instead of ten."""
        if self._forwarded():
            await self._ask("tx.snapshot", {"since": self._seen_snapshot, "waitS": wait_s})

    def _call_handlers(self) -> dict[str, Callable[[Body], Awaitable[Body]]]:
        """The ``tx.*`` cluster calls this service answers on the controller: each runs
        the method another gateway's service was asked, and sends back the manager's
        snapshot. A gateway that is not the controller any more refuses (its caller
        finds the new one)."""

        def answer(run: Callable[[Body], Awaitable[Body]]) -> Callable[[Body], Awaitable[Body]]:
            async def handler(body: Body) -> Body:
                self._manager_or_refuse()
                out = await run(body)
                out["snapshot"] = self.snapshot_doc()
                return out

            return handler

        async def start(body: Body) -> Body:
            return {"tx": b64(encode_transaction(await self.start(float(body["timeoutS"]))))}

        async def start_keyed(body: Body) -> Body:
            timeout = body.get("timeoutS")
            keyed = await self.start_keyed(
                str(body["key"]), None if timeout is None else float(timeout)
            )
            tx = b64(encode_transaction(keyed.tx)) if keyed.tx is not None else None
            return {"wp": keyed.write_pointer, "state": keyed.state, "tx": tx}

        async def commit(body: Body) -> Body:
            await self.commit(int(body["wp"]))
            return {}

        async def commit_publishing(body: Body) -> Body:
            wp = int(body["wp"])
            await self.commit_publishing(wp, _manifest_of(wp, body["publish"]))
            return {}

        async def abort(body: Body) -> Body:
            await self.abort(int(body["wp"]))
            return {}

        async def invalidate(body: Body) -> Body:
            await self.invalidate(int(body["wp"]))
            return {}

        async def state(body: Body) -> Body:
            return {"state": self.state(int(body["wp"]))}

        async def snapshot(body: Body) -> Body:
            since = body.get("since")
            loop_time = asyncio.get_running_loop().time
            deadline = loop_time() + min(float(body.get("waitS") or 0), VIEW_WAIT_S)
            while since is not None and loop_time() < deadline and since == self._current():
                await asyncio.sleep(VIEW_POLL_S)
                self._manager_or_refuse()  # still the controller, or the caller asks anew
            return {}

        calls = {
            "start": start,
            "start_keyed": start_keyed,
            "commit": commit,
            "commit_publishing": commit_publishing,
            "abort": abort,
            "invalidate": invalidate,
            "state": state,
            "snapshot": snapshot,
        }
        return {f"tx.{name}": answer(run) for name, run in calls.items()}

    def _current(self) -> str:
        return b64(encode_transaction(self._manager.snapshot()))

    def _manager_or_refuse(self) -> None:
        txm = self._manager
        if isinstance(txm, SharedTransactions) and not txm.leading:
            raise NotTransactionLeader("ask the controller (Metadata's controller id)")


def _plan(wp: int, manifest: Manifest) -> CommitPlan:
    return CommitPlan(wp, tuple(Part(topic, tuple(keep)) for topic, keep in manifest))


def _manifest_doc(manifest: Manifest) -> list[list[Any]]:
    return [[t.namespace, t.topic, [range_row(r) for r in ranges]] for t, ranges in manifest]


def _manifest_of(wp: int, doc: Sequence[Sequence[Any]]) -> Manifest:
    return [(topic_of([ns, name]), [range_of(wp, r) for r in rows]) for ns, name, rows in doc]
