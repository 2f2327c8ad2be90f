"""A Kafka transactional id's durable record, and its codec (docs/transactions.md).

One row per transactional id, in the store's state area ``kafka.txn``: the producer id
and epoch it maps to, its timeout, and the transaction it has open. The row is written
whenever the state changes in a way a restart must know:

  Empty / CompleteCommit / CompleteAbort   nothing open (InitProducerId, after EndTxn)
  Ongoing                                  a TMS transaction is open: its write pointer
  PrepareCommit                            THE COMMIT DECISION: the write pointer, every
                                           topic written and every group offset to
                                           commit; a restart finishes it (coordinator.py)

One row is the whole decision, so recording it needs no multi-row atomicity.

The row is written twice a transaction (Ongoing, PrepareCommit), so its codec is a
packed struct rather than JSON (a third of the cost): a version byte, the fixed fields
(_FIXED), then the topics, the groups and the pending offsets, each a count followed by
its items; strings are a uint16 length (metadata: uint32) and UTF-8. Version-1 rows, JSON
objects, are still read.
"""

from __future__ import annotations

import enum
import json
import struct
from dataclasses import dataclass, field

from tmsgate.protocol import ErrorCode

TXN_AREA = "kafka.txn"
# 2: binary (below). 1: JSON, as written before; still read.
CODEC_VERSION = 2
TopicPartition = tuple[str, int]


class TxnState(enum.Enum):
    # Kafka's names (kafka-transactions.sh shows them, ListTransactions filters by them).
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"

    @property
    def is_open(self) -> bool:
        return self in (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


# The states a record may move to from each: Kafka's transaction state machine
# (TransactionState's valid previous states, read forwards) as tmsgate runs it. An abort
# is one step here (no marker to write on every leader first), so PrepareAbort is never
# entered; a commit that could not be decided (timed out, a store failed) goes back to
# Ongoing to be aborted; a recorded commit found impossible at recovery is dropped.
TRANSITIONS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: frozenset({TxnState.EMPTY, TxnState.ONGOING}),
    TxnState.ONGOING: frozenset({TxnState.PREPARE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_COMMIT: frozenset(
        {TxnState.COMPLETE_COMMIT, TxnState.ONGOING, TxnState.COMPLETE_ABORT}
    ),
    TxnState.PREPARE_ABORT: frozenset({TxnState.COMPLETE_ABORT}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.EMPTY, TxnState.ONGOING}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.EMPTY, TxnState.ONGOING}),
}


class TxnError(Exception):
    """A request refused with a Kafka error code."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def producing_write_pointer(
    rec: TxnRecord | None, transactional_id: str, producer_id: int, epoch: int, topic: str
) -> int:
    """Produce: the write pointer of ``rec``'s open transaction, which a transactional
    batch of ``producer_id`` at ``epoch`` to ``topic`` (a partition's TMS topic) is stored
    under; TxnError with Kafka's code otherwise. The producer id must be the transactional
    id's (Kafka's check since KIP-890): the request's id is the one whose ACL was checked."""
    if rec is None or rec.producer_id != producer_id:
        raise TxnError(
            ErrorCode.INVALID_PRODUCER_ID_MAPPING,
            f"producer {producer_id} is not the producer of transactional id "
            f"{transactional_id!r} (InitProducerId first)",
        )
    if epoch != rec.epoch:
        raise TxnError(
            ErrorCode.INVALID_PRODUCER_EPOCH,
            f"producer epoch {epoch} of {transactional_id!r} is not the current "
            f"epoch {rec.epoch} (fenced, or its transaction was aborted)",
        )
    if rec.state is not TxnState.ONGOING or topic not in rec.topics:
        raise TxnError(
            ErrorCode.INVALID_TXN_STATE,
            f"topic {topic!r} is not part of an open transaction of "
            f"{transactional_id!r} (AddPartitionsToTxn first)",
        )
    return rec.write_pointer


class InvalidTransition(RuntimeError):
    """A move the transition table does not allow: a bug, never a client's doing."""


@dataclass(frozen=True, slots=True)
class PendingOffset:
    """An offset sent by TxnOffsetCommit: committed to its group with the transaction."""

    offset: int
    leader_epoch: int
    metadata: str


@dataclass(slots=True)
class TxnRecord:
    transactional_id: str
    producer_id: int
    epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    write_pointer: int = 0  # the open TMS transaction (0: none)
    started_ms: int = -1
    updated_ms: int = 0
    decided_ms: int = -1  # when the commit was decided: its offsets' commit time
    topics: set[str] = field(default_factory=set)  # TMS topics: partitions, name~p
    groups: set[str] = field(default_factory=set)
    offsets: dict[str, dict[TopicPartition, PendingOffset]] = field(default_factory=dict)
    # The (producer id, epoch) before the last InitProducerId bump: a client that did not
    # get that answer retries naming it, and gets the same answer again (KIP-360).
    previous: tuple[int, int] = (-1, -1)

    def move(self, state: TxnState) -> None:
        """To ``state``, as TRANSITIONS allows (InvalidTransition otherwise)."""
        if state not in TRANSITIONS[self.state]:
            raise InvalidTransition(
                f"transactional id {self.transactional_id!r}: {self.state.value} -> {state.value}"
            )
        self.state = state

    def clear_transaction(self, state: TxnState, now_ms: int) -> None:
        """Move to ``state`` with no transaction open (its pointer, topics, offsets gone)."""
        self.move(state)
        self.write_pointer = 0
        self.started_ms = self.decided_ms = -1
        self.topics, self.groups, self.offsets = set(), set(), {}
        self.updated_ms = now_ms

    def pending_for(self, group_id: str) -> dict[TopicPartition, PendingOffset]:
        return self.offsets.get(group_id, {})


class CorruptTxnRecord(ValueError):
    pass


_STATES = list(TxnState)
_STATE_INDEX = {state: n for n, state in enumerate(_STATES)}
# version, producer id, epoch, timeout, state, write pointer, started, updated, decided,
# previous producer id, previous epoch, topics, groups, groups with offsets
_FIXED = struct.Struct(">BqhiBqqqqqhHHH")
_OFFSET = struct.Struct(">iqi")  # partition, offset, leader epoch
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")


def _text(value: str, wide: bool = False) -> bytes:
    raw = value.encode()
    return (_U32 if wide else _U16).pack(len(raw)) + raw


def encode_record(rec: TxnRecord) -> bytes:
    parts = [
        _FIXED.pack(
            CODEC_VERSION,
            rec.producer_id,
            rec.epoch,
            rec.timeout_ms,
            _STATE_INDEX[rec.state],
            rec.write_pointer,
            rec.started_ms,
            rec.updated_ms,
            rec.decided_ms,
            rec.previous[0],
            rec.previous[1],
            len(rec.topics),
            len(rec.groups),
            len(rec.offsets),
        )
    ]
    parts += [_text(t) for t in sorted(rec.topics)]
    parts += [_text(g) for g in sorted(rec.groups)]
    for group, offsets in sorted(rec.offsets.items()):
        parts += [_text(group), _U32.pack(len(offsets))]
        for (topic, partition), o in sorted(offsets.items()):
            parts += [
                _text(topic),
                _OFFSET.pack(partition, o.offset, o.leader_epoch),
                _text(o.metadata, wide=True),
            ]
    return b"".join(parts)


class _Reader:
    __slots__ = ("pos", "raw")

    def __init__(self, raw: bytes, pos: int) -> None:
        self.raw, self.pos = raw, pos

    def unpack(self, fmt: struct.Struct) -> tuple[int, ...]:
        values = fmt.unpack_from(self.raw, self.pos)
        self.pos += fmt.size
        return values

    def text(self, wide: bool = False) -> str:
        (n,) = self.unpack(_U32 if wide else _U16)
        end = self.pos + n
        if end > len(self.raw):
            raise ValueError("a string runs past the end of the record")
        value = self.raw[self.pos : end].decode()
        self.pos = end
        return value


def decode_record(transactional_id: str, raw: bytes) -> TxnRecord:
    if raw[:1] == b"{":
        return _decode_json(transactional_id, raw)
    try:
        r = _Reader(raw, 0)
        (version, pid, epoch, timeout, state, wp, started, updated, decided, prev_pid,
         prev_epoch, n_topics, n_groups, n_offsets) = r.unpack(_FIXED)  # fmt: skip
        if version != CODEC_VERSION:
            raise CorruptTxnRecord(f"unknown transaction record version {version}")
        topics = {r.text() for _ in range(n_topics)}
        groups = {r.text() for _ in range(n_groups)}
        offsets: dict[str, dict[TopicPartition, PendingOffset]] = {}
        for _ in range(n_offsets):
            group = r.text()
            (count,) = r.unpack(_U32)
            pending = offsets[group] = {}
            for _ in range(count):
                topic = r.text()
                partition, offset, leader_epoch = r.unpack(_OFFSET)
                pending[(topic, partition)] = PendingOffset(offset, leader_epoch, r.text(True))
        if r.pos != len(raw):
            raise ValueError(f"{len(raw) - r.pos} bytes after the record")
        return TxnRecord(
            transactional_id,
            pid,
            epoch,
            timeout,
            _STATES[state],
            wp,
            started,
            updated,
            decided,
            topics,
            groups,
            offsets,
            (prev_pid, prev_epoch),
        )
    except CorruptTxnRecord:
        raise
    except (ValueError, IndexError, struct.error) as exc:  # UnicodeDecodeError is a ValueError
        raise CorruptTxnRecord(f"transaction record of {transactional_id!r}: {exc}") from exc


def _decode_json(transactional_id: str, raw: bytes) -> TxnRecord:
    """A version-1 row (JSON), as written before version 2."""
    try:
        doc = json.loads(raw)
        if doc.get("v") != 1:
            raise CorruptTxnRecord(f"unknown transaction record version {doc.get('v')!r}")
        return TxnRecord(
            transactional_id,
            int(doc["pid"]),
            int(doc["epoch"]),
            int(doc["timeout_ms"]),
            TxnState(doc["state"]),
            int(doc["wp"]),
            int(doc["started_ms"]),
            int(doc["updated_ms"]),
            int(doc["decided_ms"]),
            set(doc["topics"]),
            set(doc["groups"]),
            {
                g: {(t, int(p)): PendingOffset(int(o), int(le), str(m)) for t, p, o, le, m in tps}
                for g, tps in doc["offsets"].items()
            },
            tuple(doc.get("previous", (-1, -1))),  # type: ignore[arg-type]
        )
    except CorruptTxnRecord:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CorruptTxnRecord(f"transaction record of {transactional_id!r}: {exc}") from exc
