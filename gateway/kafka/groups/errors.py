"""Kafka error codes of the group coordinator, and the typed error it raises.

``tmsgate.protocol.ErrorCode`` lists the codes the rest of the gateway answers with;
the coordinator needs more (generations, members, groups). The numbers are Kafka's
(clients/src/main/java/org/apache/kafka/common/protocol/Errors.java); a test checks
each one against kafka-python's ``kafka.errors``.
"""

from __future__ import annotations

import enum


class GroupErrorCode(enum.IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    UNKNOWN_TOPIC_OR_PARTITION = 3
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    INVALID_REQUEST = 42
    KAFKA_STORAGE_ERROR = 56
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    UNSTABLE_OFFSET_COMMIT = 88


class GroupError(Exception):
    """A group request that Kafka answers with an error code instead of doing it."""

    def __init__(self, code: GroupErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code

    def __repr__(self) -> str:
        return f"GroupError({self.code.name}, {str(self)!r})"
