"""MetadataResponse, encoded directly.

A client spread over many topics asks for the metadata of all of them, again and again
(librdkafka ~200 times while a producer first reaches 10,000 topics; the Java client once
per new topic, each time naming every topic it knows). kafka-python's generic encoder
builds a data container per topic and partition and walks the schema for each field:
with the containers, about 50 µs per topic here, so 0.5-1 s for 10,000 topics, while the
client's other requests on the connection wait behind the answer. This writes the same
bytes with a few ``struct`` calls per topic. The schema (MetadataResponse.json, versions
0-13, flexible from 9) is followed field by field, and tests compare every version byte
for byte with kafka-python's encoder.

Only what this gateway sends is written: no leader epochs (-1), no offline replicas, no
internal topics, authorized operations left at their default (not asked for: -2^31),
no tagged fields.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from typing import NamedTuple

from ._primitives import EMPTY_TAGS, length, string

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_BROKER_PORT = struct.Struct(">i")
_PARTITION_HEAD = struct.Struct(">hii")  # error code, index, leader
_NO_OPERATIONS = _I32.pack(-(2**31))  # authorized operations: not asked for
_NO_EPOCH = _I32.pack(-1)
_ZERO_UUID = bytes(16)
FIRST_FLEXIBLE = 9


class MetadataPartition(NamedTuple):
    error_code: int
    index: int
    leader_id: int  # -1: none (moving between gateways)
    replicas: Sequence[int]  # also the in-sync replicas


class MetadataTopic(NamedTuple):
    error_code: int
    name: str | None  # null only from version 12, for a topic asked for by id
    topic_id: uuid.UUID | None  # version 10+; None: the zero id
    partitions: Sequence[MetadataPartition]


class MetadataBroker(NamedTuple):
    node_id: int
    host: str
    port: int
    rack: str | None = None


class MetadataResult(NamedTuple):
    """A handler's answer to a metadata request, encoded when it is written. A topic may
    come already encoded (encode_metadata_topic, same version): a caller can keep the
    entries of topics that do not change."""

    version: int
    brokers: Sequence[MetadataBroker]
    cluster_id: str | None
    controller_id: int
    topics: Sequence[MetadataTopic | bytes]
    throttle_time_ms: int = 0

    @property
    def entries(self) -> int:
        """What encoding it costs, by the entry: to encode a large one off the loop."""
        return len(self.topics) + sum(
            len(t.partitions) for t in self.topics if type(t) is MetadataTopic
        )

    def frame(self, correlation_id: int) -> bytes:
        return encode_metadata_response(self.version, correlation_id, self)


def _int32s(values: Sequence[int], flexible: bool) -> bytes:
    return length(len(values), flexible) + b"".join(_I32.pack(v) for v in values)


def encode_metadata_topic(version: int, topic: MetadataTopic) -> bytes:
    """One topic's entry in a MetadataResponse of ``version``."""
    flexible = version >= FIRST_FLEXIBLE
    parts = [_I16.pack(topic.error_code), string(topic.name, flexible)]
    if version >= 10:
        parts.append(topic.topic_id.bytes if topic.topic_id is not None else _ZERO_UUID)
    if version >= 1:
        parts.append(b"\x00")  # is_internal: false
    parts.append(length(len(topic.partitions), flexible))
    for p in topic.partitions:
        parts.append(_PARTITION_HEAD.pack(p.error_code, p.index, p.leader_id))
        if version >= 7:
            parts.append(_NO_EPOCH)
        nodes = _int32s(p.replicas, flexible)
        parts.append(nodes)  # replica nodes
        parts.append(nodes)  # in-sync replica nodes: the same
        if version >= 5:
            parts.append(length(0, flexible))  # offline replicas: none
        if flexible:
            parts.append(EMPTY_TAGS)
    if version >= 8:
        parts.append(_NO_OPERATIONS)
    if flexible:
        parts.append(EMPTY_TAGS)
    return b"".join(parts)


def encode_metadata_response(version: int, correlation_id: int, result: MetadataResult) -> bytes:
    """The whole frame: size, response header (v1, with tags, when flexible), body."""
    flexible = version >= FIRST_FLEXIBLE
    parts = [_I32.pack(correlation_id)]
    if flexible:
        parts.append(EMPTY_TAGS)
    if version >= 3:
        parts.append(_I32.pack(result.throttle_time_ms))
    parts.append(length(len(result.brokers), flexible))
    for b in result.brokers:
        parts.append(_I32.pack(b.node_id))
        parts.append(string(b.host, flexible))
        parts.append(_BROKER_PORT.pack(b.port))
        if version >= 1:
            parts.append(string(b.rack, flexible))
        if flexible:
            parts.append(EMPTY_TAGS)
    if version >= 2:
        parts.append(string(result.cluster_id, flexible))
    if version >= 1:
        parts.append(_I32.pack(result.controller_id))
    parts.append(length(len(result.topics), flexible))
    parts.extend(
        t if type(t) is bytes else encode_metadata_topic(version, t) for t in result.topics
    )
    if 8 <= version <= 10:
        parts.append(_NO_OPERATIONS)  # the cluster's authorized operations
    if version >= 13:
        parts.append(b"\x00\x00")  # top-level error code: none
    if flexible:
        parts.append(EMPTY_TAGS)
    body = b"".join(parts)
    return _I32.pack(len(body)) + body
