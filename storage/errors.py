"""Typed storage errors. None of them carries a backend type: backends translate their own."""

from __future__ import annotations


class StorageError(Exception):
    """Base class of every error the store raises."""


class StoreClosed(StorageError):
    """The store was closed; no further calls are served."""


class TopicNotFound(StorageError):
    def __init__(self, topic: object) -> None:
        super().__init__(f"topic {topic} does not exist")
        self.topic = topic


class TopicAlreadyExists(StorageError):
    def __init__(self, topic: object) -> None:
        super().__init__(f"topic {topic} already exists")
        self.topic = topic


class InvalidTopicProperties(StorageError):
    """A topic property has a value the store cannot use (say, a negative ttl)."""


class InvalidTransaction(StorageError):
    """A transactional call that the transaction's state does not allow."""


class TransactionNotInProgress(InvalidTransaction):
    def __init__(self, write_pointer: int) -> None:
        super().__init__(f"write pointer {write_pointer} is not an in-progress transaction")
        self.write_pointer = write_pointer


class OffsetOutOfRange(StorageError):
    def __init__(self, offset: int, earliest: int, next_offset: int) -> None:
        super().__init__(
            f"offset {offset} is outside the topic's range [{earliest}, {next_offset}]"
        )
        self.offset = offset
        self.earliest = earliest
        self.next_offset = next_offset


class StateConflict(StorageError):
    """Raised by a publish's ``state`` callable to refuse the write: the state it would
    record no longer follows what is durable. Only that publish fails."""


class BackendError(StorageError):
    """The backend failed (I/O error, corruption, lock held by another process)."""
