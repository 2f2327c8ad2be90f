"""The asyncio client: the same calls and transaction context as _sync, awaited."""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import AsyncIterator, Callable, Generator
from types import TracebackType
from typing import Any, TypeVar

import httpx

from ._calls import Call, Payloads, TopicCalls, TransactionCalls, http_options
from ._errors import TmsConnectionError
from ._scope import Flush, Pause, Scope, Step
from ._sync import DEFAULT_TIMEOUT_S
from ._types import Message, RollbackDetail, TopicInfo, Transaction, TransactionList, TxStatus
from ._wire import Encoding

T = TypeVar("T")


async def send(http: httpx.AsyncClient, call: Call[T]) -> T:
    try:
        response = await http.request(
            call.method, call.path, content=call.body, headers=call.headers
        )
    except httpx.TransportError as exc:
        raise TmsConnectionError(f"{call.method} {call.path}: {exc!r}") from exc
    return call.result(response.status_code, response.content)


class AsyncTransactionClient:
    def __init__(self, http: httpx.AsyncClient) -> None:
        self._http = http
        self._calls = TransactionCalls()

    async def start(self, timeout_s: float | None = None) -> Transaction:
        return await send(self._http, self._calls.start(timeout_s))

    async def snapshot(self) -> Transaction:
        return await send(self._http, self._calls.snapshot())

    async def commit(self, tx: Transaction | int) -> TxStatus:
        return await send(self._http, self._calls.end(tx, "commit"))

    async def abort(self, tx: Transaction | int) -> TxStatus:
        return await send(self._http, self._calls.end(tx, "abort"))

    async def invalidate(self, tx: Transaction | int) -> TxStatus:
        return await send(self._http, self._calls.end(tx, "invalidate"))

    async def state(self, tx: Transaction | int) -> TxStatus:
        return await send(self._http, self._calls.state(tx))

    async def list(self) -> TransactionList:
        return await send(self._http, self._calls.list())


class AsyncMessagingClient:
    """MessagingClient for asyncio; ``async with`` it, or await aclose()."""

    def __init__(
        self,
        base_url: str,
        namespace: str = "default",
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        encoding: Encoding | str = Encoding.AVRO,
        http: httpx.AsyncClient | None = None,
        token: str | None = None,
        auth: tuple[str, str] | None = None,
        verify: bool | str | os.PathLike[str] | ssl.SSLContext = True,
    ) -> None:
        options = http_options(token, auth, verify, http)
        self._own_http = http is None
        self._http = http or httpx.AsyncClient(base_url=base_url, timeout=timeout, **options)
        self._topics = TopicCalls(namespace, Encoding(encoding))
        self.transactions = AsyncTransactionClient(self._http)

    @property
    def namespace(self) -> str:
        return self._topics.namespace

    @property
    def encoding(self) -> Encoding:
        return self._topics.encoding

    async def aclose(self) -> None:
        if self._own_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncMessagingClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def create_topic(self, topic: str, properties: dict[str, Any] | None = None) -> TopicInfo:
        return await send(self._http, self._topics.create(topic, properties))

    async def update_topic(self, topic: str, properties: dict[str, Any]) -> TopicInfo:
        return await send(self._http, self._topics.update(topic, properties))

    async def get_topic(self, topic: str) -> TopicInfo:
        return await send(self._http, self._topics.get(topic))

    async def list_topics(self) -> list[str]:
        return await send(self._http, self._topics.list())

    async def delete_topic(self, topic: str) -> None:
        await send(self._http, self._topics.delete(topic))

    async def publish(
        self, topic: str, payloads: Payloads, tx: Transaction | int | None = None
    ) -> RollbackDetail | None:
        return await send(self._http, self._topics.publish(topic, payloads, tx))

    async def store(self, topic: str, payloads: Payloads, tx: Transaction | int) -> None:
        await send(self._http, self._topics.store(topic, payloads, tx))

    async def rollback(self, topic: str, detail: RollbackDetail) -> int | None:
        return await send(self._http, self._topics.rollback(topic, detail))

    async def poll(
        self,
        topic: str,
        start_from: Message | bytes | int | None = None,
        inclusive: bool = True,
        limit: int | None = None,
        tx: Transaction | bytes | None = None,
    ) -> list[Message]:
        return await send(self._http, self._topics.poll(topic, start_from, inclusive, limit, tx))

    async def fetch(
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
    ) -> AsyncIterator[Message]:
        """As MessagingClient.fetch, for ``async for``."""
        position, incl = start_from, inclusive
        while True:
            snapshot = await self.transactions.snapshot() if read_committed and tx is None else tx
            batch = await self.poll(topic, position, incl, batch_size, snapshot)
            for message in batch:
                yield message
                position, incl = message.id, False
            if not batch:
                if not follow:
                    return
                await asyncio.sleep(idle_wait_s)

    def transaction(self, timeout_s: float | None = None) -> AsyncTransactionContext:
        """``async with client.transaction() as tx:`` see TransactionContext."""
        return AsyncTransactionContext(self, timeout_s)


class AsyncTransactionContext(Scope):
    """TransactionContext for ``async with``; Kafka producers are flushed on a thread."""

    def __init__(self, client: AsyncMessagingClient, timeout_s: float | None) -> None:
        super().__init__(client._topics, timeout_s)
        self._client = client

    async def _perform(self, step: Step) -> Any:
        if isinstance(step, Call):
            return await send(self._client._http, step)
        if isinstance(step, Flush):
            for participant in step.participants:
                flush = participant.tms_discard if step.discard else participant.tms_flush
                await asyncio.to_thread(flush, self)
            return None
        if isinstance(step, Pause):
            await asyncio.sleep(step.seconds)
            return None
        raise TypeError(f"unknown step {step!r}")

    async def _drive(self, steps: Generator[Step, Any, Any]) -> Any:
        return await drive(steps, self._perform)

    async def __aenter__(self) -> AsyncTransactionContext:
        await self._drive(self._begin_steps())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._drive(self._exit_steps(exc))

    async def store(self, topic: str, payloads: Payloads) -> None:
        await self._drive(self._store_steps(topic, payloads))

    async def prepare(self) -> list[RollbackDetail]:
        return await self._drive(self._prepare_steps())


async def drive(steps: Generator[Step, Any, Any], perform: Callable[[Step], Any]) -> Any:
    try:
        step = next(steps)
        while True:
            try:
                result = await perform(step)
            except BaseException as exc:
                step = steps.throw(exc)
            else:
                step = steps.send(result)
    except StopIteration as stop:
        return stop.value
