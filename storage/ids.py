"""The store's value types: topic ids, message ids and what publish and read return."""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from typing import NamedTuple

_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
# Partition p > 0 of Kafka topic ``name`` is the TMS topic ``name~p`` (partition 0 is
# ``name`` itself, so single-partition stores read as before). Kafka never allows ``~``
# in a topic name, so no user's topic can collide with a partition; ``~`` is also an
# unreserved URL character, so the HTTP API addresses ``/topics/orders~3`` as it is.
PARTITION_MARK = "~"
MAX_PARTITIONS = 100_000
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}(~[1-9][0-9]{0,4})?$")
_MESSAGE_ID = struct.Struct(">QHQH")
_ID_SUFFIX = struct.Struct(">QH")  # publish time, seq: a MessageTable key's end (keys.py)


@dataclass(frozen=True, slots=True, order=True)
class TopicId:
    """A topic within a namespace. Names follow Kafka's rules so every topic is reachable."""

    namespace: str
    topic: str

    def __post_init__(self) -> None:
        for part, what, rule in (
            (self.namespace, "namespace", _NAME),
            (self.topic, "topic", _TOPIC),
        ):
            if not isinstance(part, str) or not rule.match(part):
                raise ValueError(
                    f"invalid {what} name {part!r}: use 1-249 characters of [A-Za-z0-9._-]"
                    + (", then ~P for partition P > 0" if rule is _TOPIC else "")
                )
            base = part.partition(PARTITION_MARK)[0]
            if base in (".", ".."):  # Kafka refuses them: they are directory names
                raise ValueError(f"invalid {what} name {part!r}: '.' and '..' are reserved")

    def __str__(self) -> str:
        return f"{self.namespace}:{self.topic}"

    @property
    def kafka_name(self) -> str:
        """The Kafka topic this TMS topic is a partition of."""
        return self.topic.partition(PARTITION_MARK)[0]

    @property
    def partition(self) -> int:
        """Which partition of ``kafka_name`` this topic is (0 for a plain topic)."""
        _, mark, index = self.topic.partition(PARTITION_MARK)
        return int(index) if mark else 0

    @classmethod
    def of_partition(cls, namespace: str, name: str, partition: int) -> TopicId:
        """The TMS topic holding ``partition`` of Kafka topic ``name``."""
        if partition == 0:
            return cls(namespace, name)
        if not 0 < partition < MAX_PARTITIONS or PARTITION_MARK in name:
            raise ValueError(f"no partition {partition} of topic {name!r}")
        return cls(namespace, f"{name}{PARTITION_MARK}{partition}")

    @classmethod
    def stored(cls, namespace: str, topic: str) -> TopicId:
        """A topic id read back from the store, unchecked: a store written before a rule
        was added ('.' and '..') must still list, read and delete what it holds."""
        tid = object.__new__(cls)
        object.__setattr__(tid, "namespace", namespace)
        object.__setattr__(tid, "topic", topic)
        return tid


class MessageId(bytes):
    """20 bytes: publish_ts(8) seq(2) write_ts(8) pseq(2), big-endian.

    Byte order is consumption order, so ids compare correctly as plain bytes. Messages
    published straight into the MessageTable have write_ts = pseq = 0.
    """

    __slots__ = ()
    SIZE = 20

    def __new__(cls, raw: bytes | bytearray | memoryview) -> MessageId:
        if len(raw) != cls.SIZE:
            raise ValueError(f"a message id has {cls.SIZE} bytes, got {len(raw)}")
        return super().__new__(cls, raw)

    @classmethod
    def trusted(cls, raw: bytes) -> MessageId:
        """Skip the length check, for ids the store builds from its own keys."""
        return bytes.__new__(cls, raw)

    @classmethod
    def of(cls, publish_ts: int, seq: int, write_ts: int = 0, pseq: int = 0) -> MessageId:
        return cls(_MESSAGE_ID.pack(publish_ts, seq, write_ts, pseq))

    @property
    def parts(self) -> tuple[int, int, int, int]:
        return _MESSAGE_ID.unpack(self)

    @property
    def publish_ts(self) -> int:
        return self.parts[0]

    @property
    def seq(self) -> int:
        return self.parts[1]

    @property
    def write_ts(self) -> int:
        return self.parts[2]

    @property
    def pseq(self) -> int:
        return self.parts[3]

    def __repr__(self) -> str:
        return f"MessageId({self.hex()})"


class Entry(NamedTuple):
    """One message to publish. ``meta`` is opaque to the store (the gateway keeps Kafka's
    key, headers and client timestamp there); ``ttl_ms`` may only shorten the topic's TTL.
    A tuple: produce builds one per Kafka record."""

    payload: bytes | None
    meta: bytes | None = None
    ttl_ms: int | None = None


class Message(NamedTuple):
    # A tuple rather than a frozen dataclass: reads build hundreds of thousands per second.
    id: MessageId
    payload: bytes | None
    offset: int
    publish_ts: int
    write_pointer: int | None = None
    meta: bytes | None = None


@dataclass(frozen=True, slots=True)
class RollbackDetail:
    """What a transactional publish wrote; handing it back to rollback() undoes exactly that."""

    write_pointer: int
    start_ts: int
    start_seq: int
    end_ts: int
    end_seq: int


@dataclass(frozen=True, slots=True)
class StoredRange:
    """The PayloadTable messages one store() wrote for a write pointer: ids (write time,
    sequence) from start to end inclusive, ``count`` messages (in one row or more: a
    packed row's messages take consecutive sequences). Rows of one write pointer are
    written in key order, so the range holds that call's rows and no other's."""

    write_pointer: int
    start_ts: int
    start_seq: int
    end_ts: int
    end_seq: int
    count: int


@dataclass(frozen=True, slots=True)
class PublishResult:
    base_offset: int
    count: int
    first_id: MessageId | None
    last_id: MessageId | None
    publish_ts: int
    rollback: RollbackDetail | None = None


# One message as a read finds it: Message's fields in Message's order, with the id as
# plain bytes. A read collects these; Message objects are built only when asked for.
MessageRow = tuple[bytes, bytes | None, int, int, int | None, bytes | None]


class StoredBatch(NamedTuple):
    """A Kafka record batch kept as produced (keys.F_KAFKA_BATCH), as a read that asked
    for such batches finds it (Store.read with ``kafka_batches``): offsets
    ``base_offset`` .. ``base_offset + count - 1``, all plain messages."""

    key: bytes  # its MessageTable row's key
    base_offset: int
    count: int
    batch: memoryview  # as produced: base offset and leader epoch as the producer sent them

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.count

    @property
    def publish_ts(self) -> int:
        return _ID_SUFFIX.unpack_from(self.key, len(self.key) - _ID_SUFFIX.size)[0]

    def message_ids(self) -> list[bytes]:
        """Its messages' ids, in offset order: message i has the row's seq + i (a row key
        ends with the publish time and seq of its first message)."""
        ts, seq = _ID_SUFFIX.unpack_from(self.key, len(self.key) - _ID_SUFFIX.size)
        pack, zeros = _ID_SUFFIX.pack, bytes(10)
        return [pack(ts, seq + i) + zeros for i in range(self.count)]


class ReadResult:
    """What a read found: ``rows`` (MessageRow tuples, offset order), where the next read
    continues, and whether an open transaction held the read.

    Hot readers (Kafka fetch, the HTTP bulk read) take ``rows``; ``messages`` builds
    Message objects on first use. A read with ``kafka_batches`` (the Kafka fetch) has
    StoredBatch items among its rows, each for a run of offsets; ``messages`` is not
    for it. Building a MessageId and a Message per row was about a
    quarter of the CPU of a read from the store (1 KiB messages, 1,000 per read)."""

    __slots__ = ("_messages", "held", "next_offset", "rows", "settled", "split")

    def __init__(
        self,
        rows: list[MessageRow | StoredBatch],
        next_offset: int,
        held: bool = False,
        settled: bool = False,
        split: bytes | None = None,
    ) -> None:
        self.rows = rows
        self.next_offset = next_offset
        self.held = held
        # Every row read was a plain message (no write pointer, no TTL of its own, no
        # gap): reading these offsets again gives the same rows until the topic's TTL
        # removes them, so the Kafka listener may keep their encoding (fetch read-ahead).
        self.settled = settled
        # The key of the packed row the read stopped inside (the next offset's row), or None.
        self.split = split
        self._messages: list[Message] | None = None

    @property
    def messages(self) -> list[Message]:
        if self._messages is None:
            trusted, make = MessageId.trusted, Message._make
            self._messages = [make((trusted(r[0]), *r[1:])) for r in self.rows]  # type: ignore[arg-type]
        return self._messages

    def __repr__(self) -> str:
        return (
            f"ReadResult({len(self.rows)} messages, next_offset={self.next_offset}, "
            f"held={self.held})"
        )


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic: TopicId
    generation: int
    properties: dict[str, str] = field(default_factory=dict)
    topic_uuid: bytes = b""
    created_ms: int = 0

    @property
    def ttl_ms(self) -> int | None:
        """The topic's TTL; none on a topic that is compacted and not also deleted
        (``cleanup.policy`` = ``compact``: Kafka ignores retention.ms then)."""
        ttl = int(self.properties.get("ttl", "0") or 0)
        if ttl <= 0:
            return None
        policy = self.properties.get("cleanup.policy")
        if policy is not None and "delete" not in policy.split(","):
            return None
        return ttl * 1000

    @property
    def start_offset(self) -> int:
        """The log start set by delete_records (Kafka's DeleteRecords): offsets below it
        are gone, whatever the TTL."""
        return int(self.properties.get("start_offset", "0") or 0)
