"""The transaction context's protocol, written once for the sync and async clients.

A context starts a transaction, collects what is published in it, and at the end either
publishes and commits, or rolls back and aborts. Its steps are generators that yield
Calls (HTTP requests), Flushes (Kafka producers enlisted by the shim) and Pauses; the sync
and async contexts only drive them, so both follow the same rules:

- success: flush the enlisted producers, publish what was buffered (one transactional
  publish per topic; for topics that went through ``store``, the payloads are stored and
  one empty publish moves them into the MessageTable), then commit;
- failure anywhere before the commit: roll back every publish, then abort;
- a commit whose answer was lost is sent again (a second commit answers 409 "committed"
  if the first one landed); it is never rolled back, because the caller may already have
  recorded its own decision to commit (see examples/atomic_notification.py).
"""

from __future__ import annotations

import logging
from collections.abc import Generator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

from ._calls import Call, Payloads, TopicCalls, TransactionCalls, payload_list
from ._errors import TmsConnectionError, TmsError, TransactionConflict, TransactionInDoubt
from ._types import RollbackDetail, Transaction, TxState

log = logging.getLogger("tmsgate.client")

COMMIT_ATTEMPTS = 3
_current: ContextVar[Scope | None] = ContextVar("tmsgate_client_transaction", default=None)


def current_transaction() -> Scope | None:
    """The innermost transaction context active in this thread or task, if any."""
    return _current.get()


class Participant(Protocol):
    """Something that sends under the transaction by itself (the Kafka producer shim)."""

    def tms_flush(self, scope: Scope) -> None:
        """Deliver everything sent under the scope; raise if any of it failed."""

    def tms_discard(self, scope: Scope) -> None:
        """Best effort before an abort: let in-flight sends land (they will be invisible)."""


@dataclass(frozen=True, slots=True)
class Flush:
    participants: tuple[Participant, ...]
    discard: bool


@dataclass(frozen=True, slots=True)
class Pause:
    seconds: float


Step = Call[Any] | Flush | Pause
Steps = Generator[Step, Any, Any]


class Scope:
    """The state of one transaction context (base of the sync and async contexts)."""

    def __init__(self, topics: TopicCalls, timeout_s: float | None) -> None:
        self._topics = topics
        self._txs = TransactionCalls()
        self._timeout_s = timeout_s
        self._tx: Transaction | None = None
        self._buffered: dict[str, list[bytes]] = {}
        self._stored: dict[str, None] = {}  # topics with stored payloads, insertion-ordered
        self._participants: list[Participant] = []
        self.rollback_details: list[RollbackDetail] = []
        self._token: Any = None
        self.closed = False

    @property
    def transaction(self) -> Transaction:
        if self._tx is None:
            raise RuntimeError("the transaction context has not been entered")
        return self._tx

    @property
    def write_pointer(self) -> int:
        return self.transaction.write_pointer

    def publish(self, topic: str, payloads: Payloads) -> None:
        """Buffer messages; they are published under the transaction at commit (or at an
        explicit prepare()), the seed's path for writes close to commit time."""
        self._check_open()
        self._buffered.setdefault(topic, []).extend(payload_list(payloads))

    def enlist(self, participant: Participant) -> None:
        self._check_open()
        if all(p is not participant for p in self._participants):
            self._participants.append(participant)

    def _check_open(self) -> None:
        if self._tx is None or self.closed:
            raise RuntimeError("the transaction context is not active")

    # --- steps -------------------------------------------------------------------------
    def _begin_steps(self) -> Steps:
        self._tx = yield self._txs.start(self._timeout_s)
        self._token = _current.set(self)

    def _leave(self) -> None:
        """Stop stamping Kafka records; called first thing on exit."""
        if self._token is not None:
            _current.reset(self._token)
            self._token = None

    def _store_steps(self, topic: str, payloads: Payloads) -> Steps:
        self._check_open()
        yield self._topics.store(topic, payloads, self.transaction)
        self._stored[topic] = None

    def _prepare_steps(self) -> Steps:
        self._check_open()
        if self._participants:
            yield Flush(tuple(self._participants), discard=False)
        tx = self.transaction
        for topic in list(self._buffered) + [t for t in self._stored if t not in self._buffered]:
            messages = self._buffered.pop(topic, [])
            if topic in self._stored and messages:
                # Mixing payloads in the request with stored ones is undefined by the seed:
                # store them too, so the empty publish below moves all of them, in order.
                yield self._topics.store(topic, messages, tx)
            stored = topic in self._stored
            self._stored.pop(topic, None)
            detail = yield self._topics.publish(topic, [] if stored else messages, tx)
            self.rollback_details.append(detail)
        return list(self.rollback_details)

    def _commit_steps(self) -> Steps:
        tx = self.transaction
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            try:
                yield self._txs.end(tx, "commit")
                return
            except TransactionConflict as exc:
                if exc.state == TxState.COMMITTED:
                    # Committed already: our earlier attempt whose answer was lost (or a
                    # recovery process). Rolling back now would be refused anyway.
                    return
                yield from self._abandon_steps(exc)
                raise
            except TmsConnectionError as exc:
                if attempt == COMMIT_ATTEMPTS:
                    raise TransactionInDoubt(
                        f"commit of transaction {tx.write_pointer} sent, outcome unknown: {exc}",
                        tx.write_pointer,
                    ) from exc
                yield Pause(0.2 * attempt)

    def _abandon_steps(self, cause: BaseException) -> Steps:
        """Roll back and abort; failures here are noted on the cause, not raised, because
        an aborted transaction's messages are invisible to transactional readers anyway
        (and a transaction nobody aborts times out into the invalid list)."""
        if self._participants:
            try:
                yield Flush(tuple(self._participants), discard=True)
            except Exception as exc:
                _note(cause, f"flushing Kafka producers before abort failed: {exc!r}")
        for detail in self.rollback_details:
            try:
                yield self._topics.rollback(detail.topic, detail)
            except TmsError as exc:
                _note(cause, f"rollback of {detail.topic} failed: {exc}")
        if self._tx is not None:
            try:
                yield self._txs.end(self._tx, "abort")
            except TmsError as exc:
                _note(cause, f"abort of transaction {self._tx.write_pointer} failed: {exc}")

    def _exit_steps(self, exc: BaseException | None) -> Steps:
        self._leave()
        try:
            if exc is not None:
                yield from self._abandon_steps(exc)
                return
            try:
                yield from self._prepare_steps()
            except BaseException as failure:
                yield from self._abandon_steps(failure)
                raise
            yield from self._commit_steps()
        finally:
            self.closed = True


def _note(exc: BaseException, text: str) -> None:
    log.warning("%s", text)
    exc.add_note(text)
