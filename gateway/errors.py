"""One error vocabulary for every listener: each storage and gateway error maps, in one
table, to the Kafka error code and to the HTTP status a client gets for it.

The Kafka handlers (``gateway/kafka/errors.py``) and the HTTP app (``gateway/http``) both
answer through this table, so a full disk or an unknown topic means the same thing to a
Kafka producer and to an HTTP client.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tmsgate.protocol import ErrorCode
from tmsgate.storage import (
    DiskFull,
    InvalidTopicProperties,
    InvalidTransaction,
    NotLeader,
    NotTransactionLeader,
    OffsetGap,
    OffsetOutOfRange,
    StateConflict,
    StorageError,
    StoreClosed,
    TopicAlreadyExists,
    TopicNotFound,
    TransactionNotInProgress,
)


class InvalidConfig(ValueError):
    """A Kafka config name or value tmsgate cannot honour (INVALID_CONFIG)."""


class InvalidTopicName(ValueError):
    """Not a legal topic or namespace name (Kafka's rules, for Kafka and HTTP alike)."""


class BadRequest(ValueError):
    """A request a listener refuses before it reaches the store (HTTP 400)."""


class TransactionOwned(ValueError):
    """A Kafka transaction's write pointer, committed or aborted by another listener: its
    records are referenced at the Kafka commit (EndTxn), so an HTTP commit would lose them.
    Invalidation stays open to operators (the producer is fenced at its EndTxn)."""

    def __init__(self, write_pointer: int, transactional_id: str) -> None:
        super().__init__(
            f"write pointer {write_pointer} is Kafka transactional id {transactional_id!r}'s "
            "transaction: only its producer commits or aborts it (EndTxn)"
        )
        self.write_pointer = write_pointer
        self.transactional_id = transactional_id


class NamespaceNotFound(LookupError):
    """An HTTP request in a namespace that does not exist: one exists while it holds a
    topic, and the gateway's Kafka namespace always does (docs/http-api.md)."""

    def __init__(self, namespace: str) -> None:
        super().__init__(
            f"namespace {namespace!r} does not exist: it has no topics (PUT "
            f"/v1/namespaces/{namespace}/topics/NAME creates one, and so the namespace)"
        )
        self.namespace = namespace


class PeerUnavailable(StorageError):
    """Another gateway of the cluster did not answer a cluster call, or no live gateway
    holds the role asked for now (gateway/cluster_calls.py): retriable."""


class AnswerLost(StorageError):
    """A write sent on to the worker that leads its topic (http/forward.py) whose answer
    never came back: the connection was lost after the request went out (the leader
    killed mid-write, say), so the write may have been applied. Never a 421, which says
    "not stored, send it to the leader": a client doing so could store it twice."""


class ClusterCallRefused(StorageError):
    """Another gateway answered a cluster call with an error its caller has no type for."""

    def __init__(self, name: str, status: int, body: dict[str, object]) -> None:
        self.status, self.kind, self.body = status, str(body.get("error", "error")), body
        super().__init__(f"{name}: {body.get('message', status)}")


@dataclass(frozen=True, slots=True)
class ErrorKind:
    kafka: ErrorCode
    http: int
    name: str  # the HTTP body's "error" field


# Most specific first: the first isinstance match wins.
_TABLE: tuple[tuple[type[BaseException], ErrorKind], ...] = (
    # Several gateways: another leads the topic now; Kafka clients refresh their metadata
    # and move, HTTP clients are told to ask again (the body names the leader's URL).
    (NotLeader, ErrorKind(ErrorCode.NOT_LEADER_OR_FOLLOWER, 421, "not_leader")),
    # Several gateways: the controller (which runs the transaction manager) is moving, or
    # another gateway is out of reach for a moment; clients look again and retry.
    (
        NotTransactionLeader,
        ErrorKind(ErrorCode.NOT_COORDINATOR, 503, "transaction_manager_moving"),
    ),
    (PeerUnavailable, ErrorKind(ErrorCode.COORDINATOR_NOT_AVAILABLE, 503, "gateway_unavailable")),
    # Maybe applied, maybe not: the client finds out (a read, or its transaction's abort).
    (AnswerLost, ErrorKind(ErrorCode.REQUEST_TIMED_OUT, 504, "outcome_unknown")),
    (
        ClusterCallRefused,
        ErrorKind(ErrorCode.COORDINATOR_NOT_AVAILABLE, 502, "cluster_call_failed"),
    ),
    (TopicNotFound, ErrorKind(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 404, "topic_not_found")),
    (
        NamespaceNotFound,
        ErrorKind(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 404, "namespace_not_found"),
    ),
    (TopicAlreadyExists, ErrorKind(ErrorCode.TOPIC_ALREADY_EXISTS, 409, "topic_exists")),
    (InvalidTopicProperties, ErrorKind(ErrorCode.INVALID_CONFIG, 400, "invalid_properties")),
    # Not in progress: committed, aborted, timed out or unknown (the body says which).
    (
        TransactionNotInProgress,
        ErrorKind(ErrorCode.INVALID_TXN_STATE, 409, "transaction_conflict"),
    ),
    (InvalidTransaction, ErrorKind(ErrorCode.INVALID_TXN_STATE, 400, "invalid_transaction")),
    (TransactionOwned, ErrorKind(ErrorCode.INVALID_TXN_STATE, 409, "transaction_owned")),
    (OffsetOutOfRange, ErrorKind(ErrorCode.OFFSET_OUT_OF_RANGE, 416, "offset_out_of_range")),
    # Only idempotent produce raises it: the batch no longer follows what is durable.
    (OffsetGap, ErrorKind(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, 409, "offset_gap")),
    (StateConflict, ErrorKind(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, 409, "state_conflict")),
    # A closing store: the client retries (KAFKA_STORAGE_ERROR is retriable) and
    # reconnects, to this gateway once it is back.
    (StoreClosed, ErrorKind(ErrorCode.KAFKA_STORAGE_ERROR, 503, "store_closed")),
    # A full disk: what a Kafka broker answers when its log directory fails (a full disk
    # included); retriable, so producers wait within delivery.timeout.ms for space. HTTP's
    # 507 Insufficient Storage says the same.
    (DiskFull, ErrorKind(ErrorCode.KAFKA_STORAGE_ERROR, 507, "disk_full")),
    (StorageError, ErrorKind(ErrorCode.KAFKA_STORAGE_ERROR, 500, "storage_error")),
    (InvalidTopicName, ErrorKind(ErrorCode.INVALID_TOPIC_EXCEPTION, 400, "invalid_name")),
    (InvalidConfig, ErrorKind(ErrorCode.INVALID_CONFIG, 400, "invalid_config")),
    (BadRequest, ErrorKind(ErrorCode.INVALID_REQUEST, 400, "bad_request")),
)
_UNEXPECTED = ErrorKind(ErrorCode.UNKNOWN_SERVER_ERROR, 500, "internal_error")


def error_kind(exc: BaseException) -> ErrorKind:
    for cls, kind in _TABLE:
        if isinstance(exc, cls):
            return kind
    return _UNEXPECTED


@dataclass(frozen=True, slots=True)
class HttpError:
    status: int
    kind: str
    message: str
    extra: dict[str, object] = field(default_factory=dict)

    def body(self) -> dict[str, object]:
        return {"error": self.kind, "message": self.message, **self.extra}


def http_error(exc: BaseException) -> HttpError:
    """The HTTP answer for ``exc``: its status, kind and a message saying what was wrong."""
    kind = error_kind(exc)
    message = str(exc) or type(exc).__name__
    if kind is _UNEXPECTED:
        return HttpError(500, kind.name, f"internal error: {message}")
    extra: dict[str, object] = {}
    if isinstance(exc, TransactionNotInProgress):
        extra = {"writePointer": exc.write_pointer, "state": exc.state}
    elif isinstance(exc, TransactionOwned):
        extra = {"writePointer": exc.write_pointer, "kafkaTransactionalId": exc.transactional_id}
    elif isinstance(exc, DiskFull):
        extra = {"freeBytes": exc.free_bytes, "needBytes": exc.need_bytes}
    elif isinstance(exc, OffsetOutOfRange):
        extra = {"earliest": exc.earliest, "latest": exc.next_offset}
    return HttpError(kind.http, kind.name, message, extra)


def is_unexpected(exc: BaseException) -> bool:
    """Not one of ours: a bug, logged with its traceback."""
    return error_kind(exc) is _UNEXPECTED
