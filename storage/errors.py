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
    """``state`` says where the transaction is instead: committed, aborted, invalid (timed
    out or invalidated) or unknown (TransactionManager.state)."""

    def __init__(self, write_pointer: int, state: str = "unknown") -> None:
        super().__init__(
            f"write pointer {write_pointer} is not an in-progress transaction (it is {state})"
        )
        self.write_pointer = write_pointer
        self.state = state


class OffsetOutOfRange(StorageError):
    def __init__(self, offset: int, earliest: int, next_offset: int) -> None:
        super().__init__(
            f"offset {offset} is outside the topic's range [{earliest}, {next_offset}]"
        )
        self.offset = offset
        self.earliest = earliest
        self.next_offset = next_offset


class OffsetGap(StorageError):
    """An exact-offset write (publish_exact_async) starting beyond the topic's next
    offset: the offsets between would hold nothing without anyone having said so."""

    def __init__(self, topic: object, offset: int, next_offset: int) -> None:
        super().__init__(
            f"topic {topic} continues at offset {next_offset}: a write starting at "
            f"{offset} would leave offsets {next_offset}..{offset - 1} without messages"
        )
        self.offset = offset
        self.next_offset = next_offset


class StateConflict(StorageError):
    """Raised by a publish's ``state`` callable to refuse the write: the state it would
    record no longer follows what is durable. Only that publish fails."""


class NotLeader(StorageError):
    """Several gateways share the store and this one does not lead the topic (now): its
    writes go to the gateway holding the topic's lease (gateway/cluster.py)."""

    def __init__(self, topic: object, detail: str = "") -> None:
        super().__init__(
            f"this gateway does not lead topic {topic}" + (f": {detail}" if detail else "")
        )
        self.topic = topic


class BackendError(StorageError):
    """The backend failed (I/O error, corruption, lock held by another process)."""


class DiskFull(BackendError):
    """The store's disk is full: publishes and stores are refused at once until space is
    free again, while reads, deletes and small metadata writes go on (docs/storage-api.md,
    "Full disk"). ``free_bytes`` is the free space last measured, ``need_bytes`` what
    writes resume at."""

    def __init__(self, free_bytes: int, need_bytes: int, detail: str | None = None) -> None:
        message = (
            f"disk full: writes are refused until space is free ({_mib(free_bytes)} MiB free, "
            f"need {need_bytes >> 20} MiB)"
        )
        super().__init__(f"{message}: {detail}" if detail else message)
        self.free_bytes = free_bytes
        self.need_bytes = need_bytes


def _mib(n: int) -> str:
    # One decimal, so that a nearly full disk does not read "0 MiB free".
    return f"{n / (1 << 20):.1f}"
