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
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field

TXN_AREA = "kafka.txn"
CODEC_VERSION = 1
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

    def clear_transaction(self, state: TxnState, now_ms: int) -> None:
        self.state = state
        self.write_pointer = 0
        self.started_ms = self.decided_ms = -1
        self.topics, self.groups, self.offsets = set(), set(), {}
        self.updated_ms = now_ms

    def pending_for(self, group_id: str) -> dict[TopicPartition, PendingOffset]:
        return self.offsets.get(group_id, {})


class CorruptTxnRecord(ValueError):
    pass


def encode_record(rec: TxnRecord) -> bytes:
    doc = {
        "v": CODEC_VERSION,
        "pid": rec.producer_id,
        "epoch": rec.epoch,
        "timeout_ms": rec.timeout_ms,
        "state": rec.state.value,
        "wp": rec.write_pointer,
        "started_ms": rec.started_ms,
        "updated_ms": rec.updated_ms,
        "decided_ms": rec.decided_ms,
        "topics": sorted(rec.topics),
        "groups": sorted(rec.groups),
        "previous": list(rec.previous),
        "offsets": {
            g: [[t, p, o.offset, o.leader_epoch, o.metadata] for (t, p), o in sorted(tps.items())]
            for g, tps in sorted(rec.offsets.items())
        },
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def decode_record(transactional_id: str, raw: bytes) -> TxnRecord:
    try:
        doc = json.loads(raw)
        if doc.get("v") != CODEC_VERSION:
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
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptTxnRecord(f"transaction record of {transactional_id!r}: {exc}") from exc
