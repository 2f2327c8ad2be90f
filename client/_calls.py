"""Every endpoint as a Call: what to send and how to read the answer, without I/O.

The sync and async clients only move Calls over httpx, so both speak the API the same
way (the sans-I/O split the house style takes from h11).
"""

from __future__ import annotations

import json
import os
import ssl
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import quote

from ._errors import Conflict, NotFound, TmsError, TopicExists, TopicNotFound, error_from_response
from ._types import (
    Message,
    RollbackDetail,
    TopicInfo,
    Transaction,
    TransactionList,
    TxStatus,
)
from ._wire import Encoding, consume_request, message_list, publish_request

T = TypeVar("T")
JSON = "application/json"
Payloads = bytes | bytearray | memoryview | str | Iterable[bytes | bytearray | memoryview | str]


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[bytes], T]
    body: bytes | None = None
    content_type: str | None = None
    accept: str = JSON
    not_found: type[TmsError] = NotFound
    conflict: type[TmsError] = Conflict

    @property
    def headers(self) -> dict[str, str]:
        headers = {"Accept": self.accept}
        if self.content_type is not None:
            headers["Content-Type"] = self.content_type
        return headers

    def result(self, status: int, content: bytes) -> T:
        if 200 <= status < 300:
            return self.parse(content)
        raise error_from_response(status, content, not_found=self.not_found, conflict=self.conflict)


def http_options(
    token: str | None, auth: tuple[str, str] | None, verify: Any, http: object | None
) -> dict[str, Any]:
    """The httpx client options of a client's credentials and TLS verification: a bearer
    token or Basic ``auth`` (user, password), sent with every request; ``verify`` True
    (the system's CAs), False, a CA bundle's path or an ssl.SSLContext."""
    if token is not None and auth is not None:
        raise ValueError("give token= or auth=, not both")
    if http is not None and (token is not None or auth is not None or verify is not True):
        raise ValueError("with http=, set credentials and verify on that httpx client")
    if isinstance(verify, str | os.PathLike):
        verify = ssl.create_default_context(cafile=os.fspath(verify))
    options: dict[str, Any] = {"verify": verify}
    if token is not None:
        options["headers"] = {"Authorization": f"Bearer {token}"}
    if auth is not None:
        options["auth"] = auth  # httpx sends Basic with every request
    return options


def _json(content: bytes) -> Any:
    return json.loads(content)


def _nothing(_: bytes) -> None:
    return None


def _segment(name: str) -> str:
    return quote(name, safe="")


def payload_list(payloads: Payloads) -> list[bytes]:
    """One message (bytes or str) or an iterable of them -> a list of bytes; a str is
    sent as UTF-8."""
    if isinstance(payloads, str):
        return [payloads.encode()]
    if isinstance(payloads, bytes | bytearray | memoryview):
        return [bytes(payloads)]
    return [p.encode() if isinstance(p, str) else bytes(p) for p in payloads]


def write_pointer_of(tx: Transaction | int) -> int:
    return tx if isinstance(tx, int) else tx.write_pointer


def encoded_of(tx: Transaction | bytes | None) -> bytes | None:
    if tx is None or isinstance(tx, bytes):
        return tx
    return tx.encoded


class TopicCalls:
    """Calls of one namespace's topic endpoints."""

    def __init__(self, namespace: str, encoding: Encoding) -> None:
        self.namespace = namespace
        self.encoding = Encoding(encoding)
        self._base = f"/v1/namespaces/{_segment(namespace)}/topics"

    def _topic(self, topic: str, tail: str = "") -> str:
        return f"{self._base}/{_segment(topic)}{tail}"

    # --- admin ---------------------------------------------------------------------------
    def create(self, topic: str, properties: dict[str, Any] | None) -> Call[TopicInfo]:
        body = json.dumps(properties).encode() if properties else None
        return Call(
            "PUT",
            self._topic(topic),
            lambda c: TopicInfo.from_json(_json(c)),
            body,
            JSON if body is not None else None,
            conflict=TopicExists,
        )

    def update(self, topic: str, properties: dict[str, Any]) -> Call[TopicInfo]:
        return Call(
            "PUT",
            self._topic(topic, "/properties"),
            lambda c: TopicInfo.from_json(_json(c)),
            json.dumps(properties).encode(),
            JSON,
            not_found=TopicNotFound,
        )

    def get(self, topic: str) -> Call[TopicInfo]:
        return Call(
            "GET",
            self._topic(topic),
            lambda c: TopicInfo.from_json(_json(c)),
            not_found=TopicNotFound,
        )

    def list(self) -> Call[list[str]]:
        return Call("GET", self._base, lambda c: [str(t) for t in _json(c)])

    def delete(self, topic: str) -> Call[None]:
        return Call("DELETE", self._topic(topic), _nothing, not_found=TopicNotFound)

    # --- data ----------------------------------------------------------------------------
    def _data(self, topic: str, tail: str, body: bytes, parse: Callable[[bytes], T]) -> Call[T]:
        enc = self.encoding
        return Call(
            "POST", self._topic(topic, tail), parse, body, enc, enc, not_found=TopicNotFound
        )

    def publish(
        self, topic: str, payloads: Payloads, tx: Transaction | int | None
    ) -> Call[RollbackDetail | None]:
        wp = None if tx is None else write_pointer_of(tx)
        body = publish_request(self.encoding, wp, payload_list(payloads))
        enc = self.encoding

        def parse(content: bytes) -> RollbackDetail | None:
            # Non-transactional publishes answer an empty body: nothing to roll back.
            return None if wp is None else RollbackDetail(topic, content, enc)

        return self._data(topic, "/publish", body, parse)

    def store(self, topic: str, payloads: Payloads, tx: Transaction | int) -> Call[None]:
        body = publish_request(self.encoding, write_pointer_of(tx), payload_list(payloads))
        return self._data(topic, "/store", body, _nothing)

    def rollback(self, topic: str, detail: RollbackDetail) -> Call[int | None]:
        # Sent back in the encoding it was answered in, byte for byte (the seed: opaque).
        enc = detail.encoding

        def parse(content: bytes) -> int | None:
            # JSON answers {"rolledBack": n}; Avro answers an empty body.
            if enc is Encoding.JSON and content.strip():
                return int(_json(content)["rolledBack"])
            return None

        return Call(
            "POST",
            self._topic(topic, "/rollback"),
            parse,
            detail.raw,
            enc,
            enc,
            not_found=TopicNotFound,
        )

    def poll(
        self,
        topic: str,
        start_from: Message | bytes | int | None,
        inclusive: bool,
        limit: int | None,
        tx: Transaction | bytes | None,
    ) -> Call[list[Message]]:
        if isinstance(start_from, Message):
            start_from = start_from.id
        body = consume_request(self.encoding, start_from, inclusive, limit, encoded_of(tx))
        enc = self.encoding
        return self._data(
            topic, "/poll", body, lambda c: [Message(i, p) for i, p in message_list(enc, c)]
        )


class TransactionCalls:
    """Calls of the transaction service (JSON in and out)."""

    BASE = "/v1/transactions"

    def start(self, timeout_s: float | None) -> Call[Transaction]:
        body = None if timeout_s is None else json.dumps({"timeoutSeconds": timeout_s}).encode()
        return Call(
            "POST",
            self.BASE,
            lambda c: Transaction.from_json(_json(c)),
            body,
            JSON if body is not None else None,
        )

    def snapshot(self) -> Call[Transaction]:
        return Call("POST", f"{self.BASE}/snapshot", lambda c: Transaction.from_json(_json(c)))

    def end(self, tx: Transaction | int, action: str) -> Call[TxStatus]:
        wp = write_pointer_of(tx)
        return Call("POST", f"{self.BASE}/{wp}/{action}", lambda c: TxStatus.from_json(_json(c)))

    def state(self, tx: Transaction | int) -> Call[TxStatus]:
        wp = write_pointer_of(tx)
        return Call("GET", f"{self.BASE}/{wp}", lambda c: TxStatus.from_json(_json(c)))

    def list(self) -> Call[TransactionList]:
        return Call("GET", self.BASE, lambda c: TransactionList.from_json(_json(c)))
