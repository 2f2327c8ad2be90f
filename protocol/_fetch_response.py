"""FetchResponse, encoded directly (see _produce_response for why).

The schema (FetchResponse.json, versions 4-17 here, flexible from 12) is followed field
by field, and tests compare every version byte for byte with kafka-python's encoder.
Each partition's records go out as their own chunk, never copied into the frame. Only
what this broker sends is written: no diverging epoch, current leader, snapshot id or
node endpoints (tagged fields a leader of one-partition topics leaves out).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from typing import NamedTuple

from ._primitives import EMPTY_TAGS, length, null_length, string

_I32 = struct.Struct(">i")
_HEAD_V7 = struct.Struct(">ihi")  # throttle time, error code, session id
_PARTITION = struct.Struct(">ihqqq")  # index, error, high watermark, last stable, log start
_ABORTED = struct.Struct(">qq")  # producer id, first offset
FIRST_FLEXIBLE = 12
FIRST_TOPIC_ID = 13


class FetchPartition(NamedTuple):
    index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: Sequence[tuple[int, int]] | None  # (producer id, first offset)
    # The record batches, as one buffer or a list of chunks to send one after another.
    records: bytes | bytearray | memoryview | list[bytes | bytearray | memoryview] | None


class FetchTopic(NamedTuple):
    name: str | None  # versions 4-12
    topic_id: uuid.UUID | None  # version 13+
    partitions: Sequence[FetchPartition]


class FetchResult(NamedTuple):
    """A handler's answer to a fetch request, encoded when it is written."""

    version: int
    topics: Sequence[FetchTopic]
    error_code: int = 0
    session_id: int = 0
    throttle_time_ms: int = 0

    def frame(self, correlation_id: int) -> list[bytes | bytearray | memoryview]:
        return encode_fetch_response(self.version, correlation_id, self)


def encode_fetch_response(
    version: int, correlation_id: int, result: FetchResult
) -> list[bytes | bytearray | memoryview]:
    """The whole frame as chunks to write in order: records are passed through."""
    flexible = version >= FIRST_FLEXIBLE
    chunks: list[bytes | bytearray | memoryview] = []
    parts = [_I32.pack(correlation_id)]
    if flexible:
        parts.append(EMPTY_TAGS)
    if version >= 7:
        parts.append(_HEAD_V7.pack(result.throttle_time_ms, result.error_code, result.session_id))
    else:
        parts.append(_I32.pack(result.throttle_time_ms))
    parts.append(length(len(result.topics), flexible))
    for topic in result.topics:
        if version >= FIRST_TOPIC_ID:
            parts.append((topic.topic_id or uuid.UUID(int=0)).bytes)
        else:
            parts.append(string(topic.name, flexible))
        parts.append(length(len(topic.partitions), flexible))
        for p in topic.partitions:
            head = _PARTITION.pack(
                p.index, p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset
            )
            parts.append(head if version >= 5 else head[:-8])
            aborted = p.aborted_transactions
            if aborted is None:
                parts.append(null_length(flexible))
            else:
                parts.append(length(len(aborted), flexible))
                tags = EMPTY_TAGS if flexible else b""  # each entry is a structure
                parts += [_ABORTED.pack(pid, first) + tags for pid, first in aborted]
            if version >= 11:
                parts.append(_I32.pack(-1))  # preferred read replica: none
            records = p.records
            if records is None:
                parts.append(null_length(flexible))
            else:
                pieces = records if isinstance(records, list) else [records]
                size = sum(map(len, pieces))
                parts.append(length(size, flexible))
                if size:
                    chunks.append(b"".join(parts))
                    chunks += pieces
                    parts = []
            if flexible:
                parts.append(EMPTY_TAGS)
        if flexible:
            parts.append(EMPTY_TAGS)
    if flexible:
        parts.append(EMPTY_TAGS)
    chunks.append(b"".join(parts))
    size = sum(map(len, chunks))
    chunks[0] = _I32.pack(size) + chunks[0]
    return chunks
