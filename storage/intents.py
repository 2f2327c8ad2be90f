"""Intents: how a write that lands only in part is settled after a crash.

A backend without multi-row atomicity (HBase) may keep any part of a write that failed.
For the MessageTable that would leave holes in a topic's dense offsets, and rows whose
consequences (producer state, the markers of transactional rows) were never written.
So before the writer writes the rows a batch appends to a topic, it writes one intent
row for the topic (``I | topic``) naming those rows (first key, last key, how many) and
carrying what they imply; it deletes the intent once the rows and their consequences
are durable (writer.Batch.phases).

An intent still there when the store opens (or after a failed write) belongs to a write
that nobody was told succeeded. ``settle`` then finishes it or undoes it:
- every named row is there: the consequences are written again (idempotent puts) and
  the write stands, as if only its acknowledgement had been lost;
- some row is missing: the rows that did land are deleted (they are new keys, so this
  removes only that write), and its consequences were never written (they come after
  all rows in the order of phases).
Either way the intent goes last, so a crash while settling settles again.

Layout of an intent row's value (big-endian):
    version 1 (1) | ranges (4) | per range: first_len (2) first last_len (2) last rows (4)
    | derived (4) | per mutation: key_len (4) key kind (1: 1 put, 0 delete) [len (4) value]
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterable, Sequence

from . import keys
from .backend import Backend, Mutation
from .errors import BackendError
from .ids import TopicId

log = logging.getLogger(__name__)

VERSION = 1
_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")

Range = tuple[bytes, bytes, int]  # first key, last key, rows


def encode_intents(
    ranges: Sequence[tuple[bytes, bytes, bytes, int]],
    derived: Sequence[tuple[bytes, Mutation]],
) -> dict[bytes, bytes]:
    """Intent rows (key -> value) for a batch's appended ranges and derived mutations,
    each given with its intent key."""
    by_key: dict[bytes, tuple[list[Range], list[Mutation]]] = {}
    for key, first, last, rows in ranges:
        by_key.setdefault(key, ([], []))[0].append((first, last, rows))
    for key, mutation in derived:
        by_key.setdefault(key, ([], []))[1].append(mutation)
    return {key: encode_intent(r, d) for key, (r, d) in by_key.items()}


def encode_intent(ranges: Sequence[Range], derived: Sequence[Mutation]) -> bytes:
    parts = [_U8.pack(VERSION), _U32.pack(len(ranges))]
    for first, last, rows in ranges:
        parts += [_U16.pack(len(first)), first, _U16.pack(len(last)), last, _U32.pack(rows)]
    parts.append(_U32.pack(len(derived)))
    for key, value in derived:
        parts += [_U32.pack(len(key)), key]
        if value is None:
            parts.append(_U8.pack(0))
        else:
            parts += [_U8.pack(1), _U32.pack(len(value)), value]
    return b"".join(parts)


def decode_intent(raw: bytes) -> tuple[list[Range], list[Mutation]]:
    if not raw or raw[0] != VERSION:
        raise BackendError(f"intent row of unknown version {raw[:1]!r}")
    pos = 1
    (n,) = _U32.unpack_from(raw, pos)
    pos += 4
    ranges: list[Range] = []
    for _ in range(n):
        (flen,) = _U16.unpack_from(raw, pos)
        first = raw[pos + 2 : pos + 2 + flen]
        pos += 2 + flen
        (llen,) = _U16.unpack_from(raw, pos)
        last = raw[pos + 2 : pos + 2 + llen]
        pos += 2 + llen
        (rows,) = _U32.unpack_from(raw, pos)
        pos += 4
        ranges.append((first, last, rows))
    (n,) = _U32.unpack_from(raw, pos)
    pos += 4
    derived: list[Mutation] = []
    for _ in range(n):
        (klen,) = _U32.unpack_from(raw, pos)
        key = raw[pos + 4 : pos + 4 + klen]
        pos += 4 + klen
        kind = raw[pos]
        pos += 1
        value = None
        if kind:
            (vlen,) = _U32.unpack_from(raw, pos)
            value = raw[pos + 4 : pos + 4 + vlen]
            pos += 4 + vlen
        derived.append((key, value))
    return ranges, derived


def settle(backend: Backend, topics: Iterable[TopicId] | None = None) -> dict[str, int]:
    """Finish or undo every write an intent row says may have landed in part (only those
    of ``topics`` when given: with several gateways on one store, each settles only the
    topics it leads, since an intent of another topic may be a write still in flight);
    -> counts of intents settled each way and rows deleted."""
    stats = {"intents_finished": 0, "intents_undone": 0, "rows_undone": 0}
    if topics is None:
        found = list(backend.scan(keys.INTENT, keys.prefix_end(keys.INTENT)))
    else:
        found = []
        for topic in topics:
            key = keys.intent_key(topic)
            raw = backend.get(key)
            if raw is not None:
                found.append((key, raw))
    for key, raw in found:
        ranges, derived = decode_intent(raw)
        landed = [[k for k, _ in backend.scan(first, last + b"\x00")] for first, last, _ in ranges]
        if all(len(found) == rows for found, (_, _, rows) in zip(landed, ranges, strict=True)):
            backend.write_phases([derived, [(key, None)]])
            stats["intents_finished"] += 1
        else:
            doomed = [(k, None) for found in landed for k in found]
            backend.write_phases([doomed, [(key, None)]])
            stats["intents_undone"] += 1
            stats["rows_undone"] += len(doomed)
    if stats["intents_finished"] or stats["intents_undone"]:
        log.warning(
            "settled writes a crash or failure left in part: %d finished, %d undone "
            "(%d rows deleted)",
            stats["intents_finished"],
            stats["intents_undone"],
            stats["rows_undone"],
        )
    return stats
