"""The one table from gateway and storage exceptions to Kafka error codes."""

from __future__ import annotations

import logging

from tmsgate.protocol import ErrorCode, ProtocolError
from tmsgate.storage import (
    InvalidTopicProperties,
    InvalidTransaction,
    OffsetOutOfRange,
    StateConflict,
    StorageError,
    StoreClosed,
    TopicAlreadyExists,
    TopicNotFound,
)

from .config import InvalidConfig, InvalidTopicName

log = logging.getLogger("tmsgate.kafka")

# Most specific first: the first isinstance match wins.
_TABLE: tuple[tuple[type[BaseException], ErrorCode], ...] = (
    (TopicNotFound, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    (TopicAlreadyExists, ErrorCode.TOPIC_ALREADY_EXISTS),
    (InvalidTopicProperties, ErrorCode.INVALID_CONFIG),
    (InvalidTransaction, ErrorCode.INVALID_TXN_STATE),
    (OffsetOutOfRange, ErrorCode.OFFSET_OUT_OF_RANGE),
    # Only idempotent produce raises it: the batch no longer follows what is durable.
    (StateConflict, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
    # A closing store: the client retries (KAFKA_STORAGE_ERROR is retriable) and
    # reconnects, to this gateway once it is back.
    (StoreClosed, ErrorCode.KAFKA_STORAGE_ERROR),
    (StorageError, ErrorCode.KAFKA_STORAGE_ERROR),
    (InvalidTopicName, ErrorCode.INVALID_TOPIC_EXCEPTION),
    (InvalidConfig, ErrorCode.INVALID_CONFIG),
)


def error_code(exc: BaseException) -> ErrorCode:
    code = getattr(exc, "code", None)
    if isinstance(exc, ProtocolError) and isinstance(code, ErrorCode):
        return code
    for cls, mapped in _TABLE:
        if isinstance(exc, cls):
            return mapped
    return ErrorCode.UNKNOWN_SERVER_ERROR


def error_of(exc: BaseException, what: str) -> tuple[ErrorCode, str]:
    """(code, message) for a response; unexpected exceptions are logged with traceback."""
    code = error_code(exc)
    if code in (ErrorCode.UNKNOWN_SERVER_ERROR, ErrorCode.KAFKA_STORAGE_ERROR):
        log.error("%s failed: %s", what, exc, exc_info=exc)
    return code, str(exc) or type(exc).__name__
