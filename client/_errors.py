"""One exception hierarchy, built from the server's JSON error body.

Every error the server answers is ``{"error": kind, "message": ...}`` plus extra fields
(``state`` and ``writePointer`` for transaction conflicts). The class is chosen from the
status and the body, refined by what the call was about (a 404 from a topic endpoint is a
TopicNotFound, a 409 from topic creation a TopicExists), so it does not depend on the
exact kind strings the server uses.
"""

from __future__ import annotations

import json
from typing import Any


class TmsError(Exception):
    """Any failure of a TMS call. ``status`` is the HTTP status (None: no answer)."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        kind: str | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message
        self.body = body or {}

    def __str__(self) -> str:
        where = f"HTTP {self.status}" if self.status is not None else "no response"
        detail = f"{where}, {self.kind}" if self.kind else where
        return f"{self.message} ({detail})"


class TmsConnectionError(TmsError):
    """The request may not have reached the server, or its answer was lost."""


class BadRequest(TmsError):
    """400: the request was refused as malformed (bad name, ttl, body...)."""


class Unauthorized(TmsError):
    """401: no credentials, or wrong ones (token=, auth= of the client), and the gateway
    requires them; Basic over plain HTTP too."""


class Forbidden(TmsError):
    """403: the gateway's ACLs do not let the principal do this (the message names the
    operation and the resource)."""


class NotFound(TmsError):
    """404."""


class TopicNotFound(NotFound):
    pass


class NamespaceNotFound(TopicNotFound):
    """404 namespace_not_found: no topic there, so none of the one asked for either
    (a TopicNotFound, as gateways before this answer said)."""


class Conflict(TmsError):
    """409."""


class TopicExists(Conflict):
    pass


class TransactionConflict(Conflict):
    """409 from a transactional call: the write pointer is not an in-progress transaction.

    ``state`` is its current state as the server reported it (e.g. "committed",
    "invalid", "unknown")."""

    @property
    def state(self) -> str | None:
        value = self.body.get("state")
        return None if value is None else str(value)

    @property
    def write_pointer(self) -> int | None:
        value = self.body.get("writePointer")
        return None if value is None else int(value)


class PayloadTooLarge(TmsError):
    """413: the body exceeds the server's limit."""


class UnsupportedMediaType(TmsError):
    """415."""


class ServerError(TmsError):
    """5xx."""


class ServiceUnavailable(ServerError):
    """503: e.g. the store is not writable (disk full)."""


class OutcomeUnknown(ServerError):
    """504 outcome_unknown: the write reached the gateway process leading its topic, which
    died before answering (``serve --workers``); it may be stored. Read the topic, or
    abort the transaction, before sending it again."""


class TransactionInDoubt(TmsError):
    """The commit was sent but its outcome could not be learned; resolve it later by
    ``TransactionClient.state(write_pointer)`` (see the atomic notification example)."""

    def __init__(self, message: str, write_pointer: int) -> None:
        super().__init__(message)
        self.write_pointer = write_pointer


_BY_STATUS: dict[int, type[TmsError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    415: UnsupportedMediaType,
    503: ServiceUnavailable,
    504: OutcomeUnknown,
}


def error_from_response(
    status: int,
    content: bytes,
    *,
    not_found: type[TmsError] = NotFound,
    conflict: type[TmsError] = Conflict,
) -> TmsError:
    body = _json_object(content)
    kind = body.get("error")
    message = str(body.get("message") or content[:200].decode("utf-8", "replace") or status)
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else TmsError)
    if status == 404:
        cls = NamespaceNotFound if kind == "namespace_not_found" else not_found
    elif status == 409:
        # A state field means the write pointer was the problem, whatever the endpoint.
        cls = TransactionConflict if "state" in body else conflict
    return cls(message, status=status, kind=None if kind is None else str(kind), body=body)


def _json_object(content: bytes) -> dict[str, Any]:
    try:
        value = json.loads(content)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
