"""Topic metadata records and the per-topic state the writer keeps in memory."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from . import keys
from .errors import InvalidTopicProperties
from .ids import TopicId, TopicMetadata

if TYPE_CHECKING:
    from .tables import Tables


def validate_properties(props: dict[str, str] | None) -> dict[str, str]:
    """Properties are strings; ``ttl`` is whole seconds >= 0 (0 keeps messages forever)."""
    out: dict[str, str] = {}
    for key, value in (props or {}).items():
        if not isinstance(key, str) or not key:
            raise InvalidTopicProperties(f"property names are non-empty strings, got {key!r}")
        out[key] = str(value)
    if "ttl" in out:
        raw = out["ttl"].strip()
        if not (raw.isascii() and raw.isdigit()):
            raise InvalidTopicProperties(
                f"ttl must be a whole number of seconds >= 0, got {out['ttl']!r}"
            )
        out["ttl"] = str(int(raw))
    return out


def encode_metadata(md: TopicMetadata) -> bytes:
    return json.dumps(
        {
            "generation": md.generation,
            "properties": md.properties,
            "topic_uuid": md.topic_uuid.hex(),
            "created_ms": md.created_ms,
        },
        sort_keys=True,
    ).encode()


def decode_metadata(topic: TopicId, raw: bytes) -> TopicMetadata:
    doc = json.loads(raw)
    return TopicMetadata(
        topic=topic,
        generation=int(doc["generation"]),
        properties=dict(doc.get("properties", {})),
        topic_uuid=bytes.fromhex(doc.get("topic_uuid", "")),
        created_ms=int(doc.get("created_ms", 0)),
    )


def new_metadata(
    topic: TopicId, previous_generation: int, props: dict[str, str], now_ms: int
) -> TopicMetadata:
    # A deleted topic's generation is negated; the next one continues from its magnitude.
    return TopicMetadata(topic, abs(previous_generation) + 1, props, uuid.uuid4().bytes, now_ms)


@dataclass(slots=True)
class OpenTxRow:
    base_offset: int
    write_pointer: int


@dataclass(slots=True)
class TopicState:
    """What the writer needs to append to a topic, and readers need to bound their scans.

    Only the writer thread changes ``next_offset``, ``last_ts`` and ``last_seq``; readers
    read them (single attribute reads are atomic under the GIL)."""

    metadata: TopicMetadata
    msg_prefix: bytes
    payload_prefix: bytes
    referenced_prefix: bytes
    open_tx_prefix: bytes
    intent_key: bytes  # where a write in flight describes its rows (intents.py)
    next_offset: int = 0  # the writer's: includes rows not yet durable
    visible_offset: int = 0  # readers': advanced once the rows are on disk
    last_ts: int = 0
    last_seq: int = -1
    # wp -> [messages in PayloadTable rows, last write_ts, last pseq, rows]: loaded from
    # disk on first use
    stored: dict[int, list[int]] = field(default_factory=dict)
    # TransactionManager.issued_high when this state was loaded: a later write pointer's
    # PayloadTable rows were all written through this state, so ``stored`` knows them
    # without a scan (an empty range's scan skips every delete after it: slow after a
    # large topic was deleted, until LevelDB compacts).
    known_wp: int = 0
    published_refs: set[int] = field(default_factory=set)  # wps already made visible
    open_tx_rows: list[OpenTxRow] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Read-side caches, each saving LevelDB seeks on every fetch of a consumer that keeps
    # up: the first row (key, base offset) at or above the retention floor, and where
    # reads that ended at an offset may continue (offset -> scan start key). Both stay
    # true as rows are appended, since offsets grow with keys; see Store._earliest.
    first_row: tuple[bytes, bytes, int] | None = None  # (floor then, key, base offset)
    # The log start delete_records set (Kafka's DeleteRecords): offsets below are gone.
    start_offset: int = 0
    resume_keys: dict[int, bytes] = field(default_factory=dict)

    @property
    def topic(self) -> TopicId:
        return self.metadata.topic

    @property
    def ttl_ms(self) -> int | None:
        return self.metadata.ttl_ms


def load_state(tables: Tables, md: TopicMetadata, in_progress: Callable[[int], bool]) -> TopicState:
    """Rebuild a topic's writer state from its last row (and the janitor's checkpoint)."""
    t, gen = md.topic, md.generation
    st = TopicState(
        metadata=md,
        msg_prefix=keys.data_prefix(keys.MESSAGE, t, gen),
        payload_prefix=keys.data_prefix(keys.PAYLOAD, t, gen),
        referenced_prefix=keys.data_prefix(keys.REFERENCED, t, gen),
        open_tx_prefix=keys.data_prefix(keys.OPEN_TX, t, gen),
        intent_key=keys.intent_key(t),
    )
    doc = tables.metadata.checkpoint(t)
    if doc and doc.get("generation") == gen:
        st.next_offset = doc["next_offset"]
        st.last_ts, st.last_seq = doc["last_ts"], doc["last_seq"]
    last = tables.messages.last_row(st)
    if last is not None:
        key, value = last
        ts, seq = keys.MESSAGE_SUFFIX.unpack_from(key, len(st.msg_prefix))
        flags, base, count, *_ = keys.decode_row(value)
        if flags & keys.F_PACKED:  # its messages took seq .. seq + count - 1
            seq += count - 1
        if (ts, seq) > (st.last_ts, st.last_seq):
            st.last_ts, st.last_seq = ts, seq
        st.next_offset = max(st.next_offset, base + count)
    # Transactional rows whose transaction may still be in progress bound the last
    # stable offset; each has a marker, so finding them needs no clock assumptions.
    for _, wp, base in tables.metadata.open_tx_markers(st):
        if in_progress(wp):
            st.open_tx_rows.append(OpenTxRow(base, wp))
    st.visible_offset = st.next_offset
    return st
