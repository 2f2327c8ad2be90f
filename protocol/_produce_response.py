"""ProduceResponse, encoded directly: the one response sent for every produce request.

kafka-python's generic encoder builds a data container per topic and partition and walks
the schema for each field: ~20 us per single-partition response, about a tenth of the
event loop's work for a one-record produce. This writes the same bytes in ~3 us. The
schema (ProduceResponse.json, versions 3-13, flexible from 9) is followed field by
field, and tests compare every version byte for byte with kafka-python's encoder.

Only what a broker of one-partition topics sends is written: record errors (KIP-467,
v8+) when a batch was refused for some of its records, and no CurrentLeader or
NodeEndpoints (tagged fields a leader leaves out).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from typing import NamedTuple

from ._primitives import EMPTY_TAGS, length, string

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_PARTITION_HEAD = struct.Struct(">ihqq")  # index, error code, base offset, log append time
FIRST_FLEXIBLE = 9
FIRST_TOPIC_ID = 13


class PartitionResult(NamedTuple):
    index: int
    error_code: int
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    # (batch index, message) of each record that made the batch fail (v8+)
    record_errors: Sequence[tuple[int, str | None]] = ()


class TopicResult(NamedTuple):
    name: str | None  # versions 3-12
    topic_id: uuid.UUID | None  # version 13+
    partitions: Sequence[PartitionResult]


class ProduceResult(NamedTuple):
    """A handler's answer to a produce request, encoded when it is written."""

    version: int
    topics: Sequence[TopicResult]
    throttle_time_ms: int = 0

    def frame(self, correlation_id: int) -> bytes:
        return encode_produce_response(self.version, correlation_id, self)


def encode_produce_response(version: int, correlation_id: int, result: ProduceResult) -> bytes:
    """The whole frame: size, response header (v1, with tags, when flexible), body."""
    flexible = version >= FIRST_FLEXIBLE
    parts = [_I32.pack(correlation_id)]
    if flexible:
        parts.append(EMPTY_TAGS)
    parts.append(length(len(result.topics), flexible))
    for topic in result.topics:
        if version >= FIRST_TOPIC_ID:
            parts.append((topic.topic_id or uuid.UUID(int=0)).bytes)
        else:
            parts.append(string(topic.name, flexible))
        parts.append(length(len(topic.partitions), flexible))
        for p in topic.partitions:
            parts.append(
                _PARTITION_HEAD.pack(p.index, p.error_code, p.base_offset, p.log_append_time_ms)
            )
            if version >= 5:
                parts.append(_I64.pack(p.log_start_offset))
            if version >= 8:
                parts.append(length(len(p.record_errors), flexible))
                for index, message in p.record_errors:
                    parts += (_I32.pack(index), string(message, flexible))
                    if flexible:
                        parts.append(EMPTY_TAGS)
                parts.append(string(p.error_message, flexible))
            if flexible:
                parts.append(EMPTY_TAGS)
        if flexible:
            parts.append(EMPTY_TAGS)
    parts.append(_I32.pack(result.throttle_time_ms))
    if flexible:
        parts.append(EMPTY_TAGS)
    body = b"".join(parts)
    return _I32.pack(len(body)) + body
