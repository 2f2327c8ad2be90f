"""What the coordinator keeps in the store's state areas, and the consumer protocol bytes
it looks into.

Two areas (``Store.put_states`` / ``scan_state``; the store owns the row keys):

- ``kafka.groups``, key ``<group>``: the group as of its last completed rebalance
  (generation, protocol, leader, members with the chosen protocol's metadata and their
  assignment), JSON. Written when a leader's assignment is accepted and when the group
  becomes empty; deleted with the group.
- ``kafka.offsets``, key ``<group>/<topic>/<partition>``: one committed offset,
  ``version u8 | offset i64 | leader epoch i32 | commit time i64 | topic uuid 16 |
  metadata UTF-8``. The topic uuid is the store's id of the topic generation the
  offset was committed against; after the topic is deleted (and maybe recreated) the
  offset no longer matches and is treated as absent.

Group and topic names are percent-encoded in keys, so ``<group>/`` is a prefix of
exactly that group's offsets whatever characters a group id has.
"""

from __future__ import annotations

import base64
import functools
import json
import struct
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

GROUPS_AREA = "kafka.groups"
OFFSETS_AREA = "kafka.offsets"
_OFFSET = struct.Struct(">Bqiq16s")
_OFFSET_VERSION = 1
_GROUP_VERSION = 1


class CorruptState(ValueError):
    """A state row that does not decode (written by a newer version, or damaged)."""


# --- committed offsets ----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_ms: int
    topic_uuid: bytes


def group_key(group_id: str) -> str:
    return quote(group_id, safe="")


def offsets_prefix(group_id: str) -> str:
    return group_key(group_id) + "/"


@functools.lru_cache(maxsize=1 << 16)  # the same few keys are committed over and over
def offset_key(group_id: str, topic: str, partition: int) -> str:
    return f"{offsets_prefix(group_id)}{quote(topic, safe='')}/{partition}"


def group_of_key(key: str) -> str:
    """The group a row of either area belongs to: both keys start with the group's
    (percent-encoded, so it holds no ``/``)."""
    return unquote(key.partition("/")[0])


def parse_offset_key(key: str) -> tuple[str, str, int]:
    try:
        group, topic, partition = key.split("/")
        return unquote(group), unquote(topic), int(partition)
    except ValueError:
        raise CorruptState(f"offset key {key!r} is not <group>/<topic>/<partition>") from None


def encode_offset(c: CommittedOffset) -> bytes:
    head = _OFFSET.pack(_OFFSET_VERSION, c.offset, c.leader_epoch, c.commit_ms, c.topic_uuid)
    return head + c.metadata.encode("utf-8")


def decode_offset(raw: bytes) -> CommittedOffset:
    if len(raw) < _OFFSET.size or raw[0] != _OFFSET_VERSION:
        raise CorruptState(f"committed offset of {len(raw)} bytes does not decode")
    _v, offset, epoch, commit_ms, topic_uuid = _OFFSET.unpack_from(raw, 0)
    try:
        metadata = raw[_OFFSET.size :].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptState(f"committed offset metadata is not UTF-8: {exc}") from None
    return CommittedOffset(offset, epoch, metadata, commit_ms, topic_uuid)


# --- group records --------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class MemberRecord:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    metadata: bytes  # for the group's protocol
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupRecord:
    group_id: str
    generation: int
    protocol_type: str | None
    protocol_name: str | None
    leader_id: str | None
    state_ms: int
    members: tuple[MemberRecord, ...]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def encode_group(record: GroupRecord) -> bytes:
    doc = {
        "v": _GROUP_VERSION,
        "generation": record.generation,
        "protocol_type": record.protocol_type,
        "protocol_name": record.protocol_name,
        "leader_id": record.leader_id,
        "state_ms": record.state_ms,
        "members": [
            {
                "member_id": m.member_id,
                "instance_id": m.instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "session_timeout_ms": m.session_timeout_ms,
                "rebalance_timeout_ms": m.rebalance_timeout_ms,
                "metadata": _b64(m.metadata),
                "assignment": _b64(m.assignment),
            }
            for m in record.members
        ],
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def decode_group(group_id: str, raw: bytes) -> GroupRecord:
    try:
        doc: dict[str, Any] = json.loads(raw)
        if doc.get("v") != _GROUP_VERSION:
            raise CorruptState(f"group record version {doc.get('v')!r} is not {_GROUP_VERSION}")
        members = tuple(
            MemberRecord(
                str(m["member_id"]),
                m["instance_id"],
                str(m["client_id"]),
                str(m["client_host"]),
                int(m["session_timeout_ms"]),
                int(m["rebalance_timeout_ms"]),
                base64.b64decode(m["metadata"]),
                base64.b64decode(m["assignment"]),
            )
            for m in doc["members"]
        )
        return GroupRecord(
            group_id,
            int(doc["generation"]),
            doc["protocol_type"],
            doc["protocol_name"],
            doc["leader_id"],
            int(doc["state_ms"]),
            members,
        )
    except CorruptState:
        raise
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptState(f"group record of {group_id!r} does not decode: {exc}") from None


# --- consumer protocol ----------------------------------------------------------------
def subscription_topics(metadata: bytes) -> list[str] | None:
    """Topics of a ConsumerProtocolSubscription, or None if it does not decode."""
    from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

    try:
        return list(ConsumerProtocolSubscription.decode(metadata).topics)
    except Exception:  # arbitrary client bytes: anything may be raised
        return None


def assignment_partitions(assignment: bytes) -> list[tuple[str, list[int]]] | None:
    """(topic, partitions) of a ConsumerProtocolAssignment, or None if it does not decode."""
    from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

    if not assignment:
        return []
    try:
        decoded = ConsumerProtocolAssignment.decode(assignment)
        return [(tp.topic, list(tp.partitions)) for tp in decoded.assigned_partitions]
    except Exception:  # arbitrary client bytes: anything may be raised
        return None
