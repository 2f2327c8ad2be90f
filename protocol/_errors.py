"""Kafka error codes and the protocol layer's own typed exceptions.

Only the codes tmsgate answers with are listed, for every API (one table: the group
coordinator's codes too); the numbers are Kafka's
(clients/src/main/java/org/apache/kafka/common/protocol/Errors.java).
"""

from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    UNSUPPORTED_COMPRESSION_TYPE = 76
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    ELECTION_NOT_NEEDED = 84
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    UNKNOWN_TOPIC_ID = 100
    INCONSISTENT_TOPIC_ID = 103
    TRANSACTIONAL_ID_NOT_FOUND = 105
    MISMATCHED_ENDPOINT_TYPE = 114


class ProtocolError(Exception):
    """Base of the errors the sans-I/O codecs raise."""


class FrameTooLarge(ProtocolError):
    """A frame's length prefix is above the configured limit (or negative)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"request of {size} bytes is above the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class MalformedRequest(ProtocolError):
    """A frame whose header or body does not decode."""


class ConnectionClosed(ProtocolError):
    """Data arrived after the connection object gave up on its byte stream."""


class CorruptRecords(ProtocolError):
    """A record batch that fails its CRC, is truncated or does not decompress."""

    code = ErrorCode.CORRUPT_MESSAGE


class InvalidRecords(ProtocolError):
    """A well-formed record batch that Kafka's log validator would refuse."""

    code = ErrorCode.INVALID_RECORD


class UnsupportedMessageFormat(ProtocolError):
    """Legacy magic 0/1 message sets (Produce v3+ requires magic 2)."""

    code = ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT


class MalformedMeta(ProtocolError):
    """Stored Kafka metadata (key, headers, timestamp) that does not decode."""
