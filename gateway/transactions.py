"""The transaction service: Tephra's semantics on the store's durable transaction manager,
for the HTTP API and SDK; Kafka transactions use the same manager through the Kafka
transaction coordinator (gateway/kafka/txn), and their write pointers are refused here.

Starting, committing and aborting each write the manager's state durably (an fsync,
shared with concurrent writers); they are awaited as the store's futures, without a thread
per call. Queries answer from memory. Non-transactional publishing and polling never go
through here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge
from tmsgate.storage import (
    Store,
    Transaction,
    TransactionNotInProgress,
    decode_transaction,
    encode_transaction,
)

from .errors import TransactionOwned

log = logging.getLogger("tmsgate.transactions")

DEFAULT_TIMEOUT_S = 30.0  # Tephra's default transaction timeout
MAX_TIMEOUT_S = 86_400.0  # a day: a longer-lived transaction holds every reader back


class TransactionService:
    def __init__(
        self,
        store: Store,
        registry: CollectorRegistry,
        kafka_owner: Callable[[int], str | None] = lambda wp: None,
    ) -> None:
        """``kafka_owner(wp)``: the Kafka transactional id whose transaction ``wp`` is
        (the Kafka transaction coordinator's), else None."""
        self._manager = store.transactions
        self._kafka_owner = kafka_owner
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
        timeout = DEFAULT_TIMEOUT_S if timeout_s is None else float(timeout_s)
        if not 0 < timeout <= MAX_TIMEOUT_S:
            raise ValueError(f"timeout must be between 0 and {MAX_TIMEOUT_S:g} seconds")
        tx = await asyncio.wrap_future(self._manager.start_async(timeout))
        self._ended.labels("started").inc()
        return tx

    async def snapshot(self) -> Transaction:
        """A read-only transaction for consumers: no write pointer is taken."""
        return self._manager.snapshot()

    async def commit(self, wp: int) -> None:
        self._refuse_kafka(wp)
        await asyncio.wrap_future(self._manager.commit_async(wp))
        self._ended.labels("committed").inc()

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
