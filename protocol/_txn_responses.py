"""AddPartitionsToTxnResponse (v0-3) and EndTxnResponse (v0-4), encoded directly.

A transactional producer sends both in every transaction (with one Produce between), so
their answers are a third of the responses a small transaction costs. kafka-python's
generic encoder builds a data container per topic and partition and walks the schema for
each field, ~15-25 us a response; these write the same bytes in a few. The schemas
(AddPartitionsToTxnResponse.json, EndTxnResponse.json; flexible from v3) are followed
field by field, and tests compare every version byte for byte with kafka-python's
encoder. Versions beyond these (the batched, broker-to-broker AddPartitionsToTxn v4+,
EndTxn v5's producer id and epoch) are not answered by the gateway.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

from ._primitives import EMPTY_TAGS, length, string

_I32 = struct.Struct(">i")
_END_TXN = struct.Struct(">iih")  # correlation id, throttle time, error code
_END_TXN_FLEXIBLE = struct.Struct(">ibih")  # correlation id, header tags, throttle, error
_PARTITION = struct.Struct(">ih")  # partition index, error code
FIRST_FLEXIBLE = 3
MAX_END_TXN_VERSION = 4
MAX_ADD_PARTITIONS_VERSION = 3


class EndTxnResult(NamedTuple):
    """A handler's answer to EndTxn, encoded when it is written."""

    version: int
    error_code: int
    throttle_time_ms: int = 0

    def frame(self, correlation_id: int) -> bytes:
        return encode_end_txn_response(self.version, correlation_id, self)


def encode_end_txn_response(version: int, correlation_id: int, result: EndTxnResult) -> bytes:
    """The whole frame: size, response header (v1, with tags, when flexible), body."""
    if not 0 <= version <= MAX_END_TXN_VERSION:
        raise ValueError(f"EndTxn v{version} is not encoded here")
    if version >= FIRST_FLEXIBLE:
        body = (
            _END_TXN_FLEXIBLE.pack(correlation_id, 0, result.throttle_time_ms, result.error_code)
            + EMPTY_TAGS
        )
    else:
        body = _END_TXN.pack(correlation_id, result.throttle_time_ms, result.error_code)
    return _I32.pack(len(body)) + body


class AddPartitionsTopicResult(NamedTuple):
    name: str
    partitions: Sequence[tuple[int, int]]  # (partition index, error code)


class AddPartitionsResult(NamedTuple):
    """A handler's answer to AddPartitionsToTxn v0-3, encoded when it is written."""

    version: int
    topics: Sequence[AddPartitionsTopicResult]
    throttle_time_ms: int = 0

    def frame(self, correlation_id: int) -> bytes:
        return encode_add_partitions_response(self.version, correlation_id, self)


def encode_add_partitions_response(
    version: int, correlation_id: int, result: AddPartitionsResult
) -> bytes:
    if not 0 <= version <= MAX_ADD_PARTITIONS_VERSION:
        raise ValueError(f"AddPartitionsToTxn v{version} is not encoded here")
    flexible = version >= FIRST_FLEXIBLE
    parts = [_I32.pack(correlation_id)]
    if flexible:
        parts.append(EMPTY_TAGS)
    parts.append(_I32.pack(result.throttle_time_ms))
    parts.append(length(len(result.topics), flexible))
    for topic in result.topics:
        parts.append(string(topic.name, flexible))
        parts.append(length(len(topic.partitions), flexible))
        for index, error_code in topic.partitions:
            parts.append(_PARTITION.pack(index, error_code))
            if flexible:
                parts.append(EMPTY_TAGS)
        if flexible:
            parts.append(EMPTY_TAGS)
    if flexible:
        parts.append(EMPTY_TAGS)
    body = b"".join(parts)
    return _I32.pack(len(body)) + body
