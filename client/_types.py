"""Values the SDK hands back: messages, rollback details, topics, transactions."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ._wire import Encoding, decode_transaction, latin1_bytes, publish_response

_ID = struct.Struct(">QHQH")
_WP = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class Message:
    """One message: its 20-byte id (sortable in consumption order) and its payload."""

    id: bytes
    payload: bytes

    @property
    def publish_timestamp(self) -> int:
        """Publish time in epoch milliseconds, read from the id (the seed's layout:
        publish_ts(8) seq(2) write_ts(8) pseq(2))."""
        return _ID.unpack(self.id)[0]

    @property
    def sequence_id(self) -> int:
        return _ID.unpack(self.id)[1]


@dataclass(frozen=True, slots=True)
class RollbackDetail:
    """What a transactional publish answered: opaque bytes to send back on rollback.

    The seed says clients should not parse them; ``raw`` goes back byte for byte in the
    encoding it came in. The decoded fields are offered for logging and recovery records.
    """

    topic: str
    raw: bytes
    encoding: Encoding = Encoding.AVRO

    @property
    def fields(self) -> dict[str, Any]:
        return publish_response(self.encoding, self.raw)

    @property
    def write_pointer(self) -> int | None:
        value = self.fields["transactionWritePointer"]
        return None if value is None else int(value)


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    properties: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> TopicInfo:
        return cls(str(body["name"]), {str(k): str(v) for k, v in body["properties"].items()})


class TxState(StrEnum):
    IN_PROGRESS = "in_progress"
    COMMITTED = "committed"
    ABORTED = "aborted"
    INVALID = "invalid"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class TxStatus:
    write_pointer: int
    state: TxState

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> TxStatus:
        return cls(int(body["writePointer"]), TxState(body["state"]))


@dataclass(frozen=True, slots=True)
class Transaction:
    """A transaction (or, with write_pointer 0, a read-only snapshot).

    ``encoded`` is the server's codec bytes: pass the Transaction itself (or these bytes)
    as ``tx`` to poll for a transactional read.
    """

    write_pointer: int
    read_pointer: int
    in_progress: tuple[int, ...]
    invalid: tuple[int, ...]
    encoded: bytes
    timeout_s: float | None = None

    @property
    def header_value(self) -> bytes:
        """The 8-byte big-endian write pointer of Kafka header ``tms.tx.write_pointer``."""
        return _WP.pack(self.write_pointer)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Transaction:
        timeout = body.get("timeoutSeconds")
        return cls(
            int(body["writePointer"]),
            int(body["readPointer"]),
            tuple(int(x) for x in body["inProgress"]),
            tuple(int(x) for x in body["invalid"]),
            latin1_bytes(body["encoded"]),
            None if timeout is None else float(timeout),
        )

    @classmethod
    def from_encoded(cls, encoded: bytes) -> Transaction:
        """Rebuild from codec bytes (e.g. kept in an application's own database)."""
        wp, rp, in_progress, invalid = decode_transaction(encoded)
        return cls(wp, rp, in_progress, invalid, bytes(encoded))


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    write_pointer: int
    expires_at_ms: int


@dataclass(frozen=True, slots=True)
class TransactionList:
    in_progress: tuple[OpenTransaction, ...]
    invalid: tuple[int, ...]

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> TransactionList:
        return cls(
            tuple(
                OpenTransaction(int(e["writePointer"]), int(e["expiresAtMs"]))
                for e in body["inProgress"]
            ),
            tuple(int(x) for x in body["invalid"]),
        )
