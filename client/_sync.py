"""The blocking client: MessagingClient, TransactionClient and the transaction context."""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, TypeVar

import httpx

from ._calls import Call, Payloads, TopicCalls, TransactionCalls, http_options
from ._errors import TmsConnectionError
from ._scope import Flush, Pause, Scope, Step, Steps
from ._types import Message, RollbackDetail, TopicInfo, Transaction, TransactionList, TxStatus
from ._wire import Encoding

T = TypeVar("T")
DEFAULT_TIMEOUT_S = 30.0


def send(http: httpx.Client, call: Call[T]) -> T:
    try:
        response = http.request(call.method, call.path, content=call.body, headers=call.headers)
    except httpx.TransportError as exc:
        raise TmsConnectionError(f"{call.method} {call.path}: {exc!r}") from exc
    return call.result(response.status_code, response.content)


class TransactionClient:
    """The transaction service: start, commit, abort, invalidate, snapshot, state, list."""

    def __init__(self, http: httpx.Client) -> None:
        self._http = http
        self._calls = TransactionCalls()

    def start(self, timeout_s: float | None = None) -> Transaction:
        return send(self._http, self._calls.start(timeout_s))

    def snapshot(self) -> Transaction:
        """A read-only snapshot (write pointer 0) of what is committed now."""
        return send(self._http, self._calls.snapshot())

    def commit(self, tx: Transaction | int) -> TxStatus:
        return send(self._http, self._calls.end(tx, "commit"))

    def abort(self, tx: Transaction | int) -> TxStatus:
        return send(self._http, self._calls.end(tx, "abort"))

    def invalidate(self, tx: Transaction | int) -> TxStatus:
        return send(self._http, self._calls.end(tx, "invalidate"))

    def state(self, tx: Transaction | int) -> TxStatus:
        return send(self._http, self._calls.state(tx))

    def list(self) -> TransactionList:
        return send(self._http, self._calls.list())


class MessagingClient:
    """The seed's programmatic API over HTTP, for one namespace.

    ``encoding`` picks the body encoding of publish/store/rollback/poll: Avro binary by
    default, JSON optional. Use as a context manager, or call close().
    """

    def __init__(
        self,
        base_url: str,
        namespace: str = "default",
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        encoding: Encoding | str = Encoding.AVRO,
        http: httpx.Client | None = None,
        token: str | None = None,
        auth: tuple[str, str] | None = None,
        verify: bool | str | os.PathLike[str] | ssl.SSLContext = True,
    ) -> None:
        options = http_options(token, auth, verify, http)
        self._own_http = http is None
        self._http = http or httpx.Client(base_url=base_url, timeout=timeout, **options)
        self._topics = TopicCalls(namespace, Encoding(encoding))
        self.transactions = TransactionClient(self._http)

    @property
    def namespace(self) -> str:
        return self._topics.namespace

    @property
    def encoding(self) -> Encoding:
        return self._topics.encoding

    def close(self) -> None:
        if self._own_http:
            self._http.close()

    def __enter__(self) -> MessagingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- topics --------------------------------------------------------------------------
    def create_topic(self, topic: str, properties: dict[str, Any] | None = None) -> TopicInfo:
        return send(self._http, self._topics.create(topic, properties))

    def update_topic(self, topic: str, properties: dict[str, Any]) -> TopicInfo:
        """Replace all properties of the topic."""
        return send(self._http, self._topics.update(topic, properties))

    def get_topic(self, topic: str) -> TopicInfo:
        return send(self._http, self._topics.get(topic))

    def list_topics(self) -> list[str]:
        return send(self._http, self._topics.list())

    def delete_topic(self, topic: str) -> None:
        send(self._http, self._topics.delete(topic))

    # --- messages ------------------------------------------------------------------------
    def publish(
        self, topic: str, payloads: Payloads, tx: Transaction | int | None = None
    ) -> RollbackDetail | None:
        """Publish to the MessageTable. Under ``tx`` (a Transaction or write pointer) the
        answer is the RollbackDetail to pass to rollback(); None when not transactional.
        Under ``tx`` with no payloads, publishes what store() put in the PayloadTable."""
        return send(self._http, self._topics.publish(topic, payloads, tx))

    def store(self, topic: str, payloads: Payloads, tx: Transaction | int) -> None:
        """Write payloads to the PayloadTable under ``tx``; one later publish(topic, [], tx)
        makes them all appear in the topic at once."""
        send(self._http, self._topics.store(topic, payloads, tx))

    def rollback(self, topic: str, detail: RollbackDetail) -> int | None:
        """Mark the messages of a transactional publish rolled back; -> how many (JSON
        encoding only; None with Avro, whose answer is empty)."""
        return send(self._http, self._topics.rollback(topic, detail))

    def poll(
        self,
        topic: str,
        start_from: Message | bytes | int | None = None,
        inclusive: bool = True,
        limit: int | None = None,
        tx: Transaction | bytes | None = None,
    ) -> list[Message]:
        """One read. ``start_from``: a message (id) or a publish time in epoch ms; None is
        the earliest. With ``tx`` (a Transaction or its encoded bytes) the read is
        transactional: it stops at the first message of a transaction still in progress."""
        return send(self._http, self._topics.poll(topic, start_from, inclusive, limit, tx))

    def fetch(
        self,
        topic: str,
        start_from: Message | bytes | int | None = None,
        inclusive: bool = True,
        *,
        batch_size: int | None = None,
        tx: Transaction | bytes | None = None,
        read_committed: bool = False,
        follow: bool = False,
        idle_wait_s: float = 0.5,
    ) -> Iterator[Message]:
        """Messages from ``start_from`` on, polling again after the last one seen.

        Ends when a poll comes back empty, unless ``follow`` (then waits ``idle_wait_s``
        and polls again, for ever). ``read_committed`` takes a fresh snapshot for every
        poll, so a follower sees transactions as they commit; a fixed ``tx`` never does.
        """
        position, incl = start_from, inclusive
        while True:
            snapshot = self.transactions.snapshot() if read_committed and tx is None else tx
            batch = self.poll(topic, position, incl, batch_size, snapshot)
            for message in batch:
                yield message
                position, incl = message.id, False
            if not batch:
                if not follow:
                    return
                time.sleep(idle_wait_s)

    # --- transactions --------------------------------------------------------------------
    def transaction(self, timeout_s: float | None = None) -> TransactionContext:
        """``with client.transaction() as tx:`` see TransactionContext."""
        return TransactionContext(self, timeout_s)


class TransactionContext(Scope):
    """A transaction for the duration of a ``with`` block.

    ``tx.publish(topic, payloads)`` buffers and publishes at commit; ``tx.store(...)``
    writes to the PayloadTable now and publishes once per topic at commit. Kafka
    producers from tmsgate.client.kafka stamp their records with the write pointer while
    the block runs. Leaving the block normally publishes and commits; an exception rolls
    back, aborts and propagates.
    """

    def __init__(self, client: MessagingClient, timeout_s: float | None) -> None:
        super().__init__(client._topics, timeout_s)
        self._client = client

    def _drive(self, steps: Steps) -> Any:
        return drive(steps, self._perform)

    def _perform(self, step: Step) -> Any:
        if isinstance(step, Call):
            return send(self._client._http, step)
        if isinstance(step, Flush):
            for participant in step.participants:
                (participant.tms_discard if step.discard else participant.tms_flush)(self)
            return None
        if isinstance(step, Pause):
            time.sleep(step.seconds)
            return None
        raise TypeError(f"unknown step {step!r}")

    def __enter__(self) -> TransactionContext:
        self._drive(self._begin_steps())
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._drive(self._exit_steps(exc))

    def store(self, topic: str, payloads: Payloads) -> None:
        self._drive(self._store_steps(topic, payloads))

    def prepare(self) -> list[RollbackDetail]:
        """Publish everything buffered or stored so far (and flush enlisted Kafka
        producers): afterwards only the commit is left. The block's end does this anyway;
        call it to record the rollback details, or your own commit decision, before the
        commit (see examples/atomic_notification.py)."""
        return self._drive(self._prepare_steps())


def drive(steps: Steps, perform: Callable[[Step], Any]) -> Any:
    """Run a step generator to its end, feeding it each step's result (or exception)."""
    try:
        step = next(steps)
        while True:
            try:
                result = perform(step)
            except BaseException as exc:
                step = steps.throw(exc)
            else:
                step = steps.send(result)
    except StopIteration as stop:
        return stop.value
