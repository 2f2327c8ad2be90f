"""The store's three tables, as CDAP's TMS has them: MessageTable, PayloadTable and
MetadataTable, each a thin class over the backend's one ordered key space.

The backend holds every table under its own key prefix (keys.py builds every row key and
value; these classes only read). LevelDB keeps them in one database; HBase gives each
its own HBase table (storage/hbase.py), salting the two data tables. Writes do not go
through these classes: the store's writer gathers every write into a batch written in
phases (writer.py), so that a batch can span tables without multi-row atomicity.

- **MessageTable** (``M | topic | generation | publish_ts | seq``): the rows consumers
  read in order; a row is one message, a packed run of one publish's messages
  (keys.F_PACKED), a gap, or a reference to a transaction's payloads. A row's value
  carries its first offset and count (keys.py).
- **PayloadTable** (``P | topic | generation | write_pointer | write_ts | pseq``):
  messages stored under a transaction, published by one reference row at commit; a
  row holds one message or, packed, the several of one store call (keys.F_PACKED).
- **MetadataTable**: topic records (``T``), janitor checkpoints (``C``), transaction
  state (``X``), small durable state (``S``: groups, producers, ACLs, ...), intents of
  writes in flight (``I``), leases (``L``), and two kinds of per-topic markers: a
  transaction's payloads were published (``R``), a transactional row to watch (``W``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from . import keys
from .backend import Backend
from .ids import TopicId, TopicMetadata
from .topics import decode_metadata

if TYPE_CHECKING:
    from .topics import TopicState

_U64 = keys.U64


class MessageTable:
    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    def rows(
        self, start: bytes, stop: bytes | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Rows with ``start <= key < stop`` (keys from keys.py, of one topic), in key order
        (descending with ``reverse``)."""
        return self._backend.scan(start, stop, reverse=reverse)

    def topic_rows(
        self, st: TopicState, start: bytes | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """The rows of a topic's generation, from ``start`` (a row key) or its first row."""
        return self._backend.scan(
            start or st.msg_prefix, keys.prefix_end(st.msg_prefix), reverse=reverse
        )

    def topic_row_heads(
        self, st: TopicState, start: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes, int]]:
        """The rows of a topic's generation as (key, the value's first ROW_HEAD bytes, the
        value's length): flags, offsets and sizes without reading the messages."""
        return self._backend.scan_heads(
            start or st.msg_prefix, keys.prefix_end(st.msg_prefix), keys.ROW_HEAD.size
        )

    def last_row(self, st: TopicState) -> tuple[bytes, bytes] | None:
        return next(self.topic_rows(st, reverse=True), None)


class PayloadTable:
    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    @staticmethod
    def prefix(st: TopicState, wp: int) -> bytes:
        """Where the payloads of write pointer ``wp`` on the topic's generation are."""
        return st.payload_prefix + _U64.pack(wp)

    def row_keys(self, st: TopicState, wp: int) -> Iterator[bytes]:
        """The keys of ``wp``'s payload rows, in write order; their values are not read
        (every caller counts or deletes them)."""
        prefix = self.prefix(st, wp)
        return self._backend.scan_keys(prefix, keys.prefix_end(prefix))

    def rows_between(
        self, st: TopicState, wp: int, start: bytes, stop: bytes | None
    ) -> list[tuple[bytes, int]]:
        """(row key, messages in it) of ``wp``'s rows from the suffix ``start`` up to (not
        including) ``stop`` (None: to the end)."""
        prefix = self.prefix(st, wp)
        end = keys.prefix_end(prefix) if stop is None else prefix + stop
        return [(k, keys.messages_in_row(v)) for k, v in self._backend.scan(prefix + start, end)]

    def summary(self, st: TopicState, wp: int) -> tuple[int, int, int, int]:
        """(messages, last write_ts, last pseq, rows) of ``wp``'s payload rows; (0, 0, -1, 0)
        for none. A packed row's messages take the pseqs after its key's."""
        prefix = self.prefix(st, wp)
        skip = len(prefix)
        messages = rows = 0
        last = (0, -1)
        for key, value in self._backend.scan(prefix, keys.prefix_end(prefix)):
            n = keys.messages_in_row(value)
            messages += n
            rows += 1
            ts, pseq = keys.PAYLOAD_ROW.unpack_from(key, skip)
            last = (ts, pseq + n - 1)
        return messages, *last, rows


class MetadataTable:
    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    # --- topic records and checkpoints --------------------------------------------------------
    def topic(self, topic: TopicId) -> TopicMetadata | None:
        raw = self._backend.get(keys.topic_meta_key(topic))
        return decode_metadata(topic, raw) if raw else None

    def topics(
        self,
        namespace: str | None = None,
        known: Callable[[TopicId], TopicMetadata | None] | None = None,
    ) -> list[TopicMetadata]:
        """Every topic record (of one namespace), deleted generations included.
        ``known``: the metadata a caller already holds for a topic, taken instead of
        decoding its record (JSON, most of a scan's cost at 10,000 topics)."""
        prefix = keys.TOPIC if namespace is None else keys.namespace_meta_prefix(namespace)
        out = []
        for k, v in self._backend.scan(prefix, keys.prefix_end(prefix)):
            topic = keys.topic_from_meta_key(k)
            md = known(topic) if known is not None else None
            out.append(md if md is not None else decode_metadata(topic, v))
        return out

    def checkpoint(self, topic: TopicId) -> dict[str, int] | None:
        """The janitor's record of where a topic's rows continue (written when it deletes
        the last ones), or None."""
        raw = self._backend.get(keys.checkpoint_key(topic))
        return json.loads(raw) if raw else None

    # --- per-topic markers ----------------------------------------------------------------------
    def is_published(self, st: TopicState, wp: int) -> bool:
        """Whether the payloads of ``wp`` were published (their reference row written)."""
        return self._backend.get(st.referenced_prefix + _U64.pack(wp)) is not None

    def open_tx_markers(self, st: TopicState) -> Iterator[tuple[bytes, int, int]]:
        """(marker key, write pointer, base offset) of each transactional row to watch."""
        olen = len(st.open_tx_prefix)
        for key, _ in self._backend.scan(st.open_tx_prefix, keys.prefix_end(st.open_tx_prefix)):
            wp, base = keys.OPEN_TX_SUFFIX.unpack_from(key, olen)
            yield key, wp, base

    # --- transaction state ------------------------------------------------------------------------
    def last_write_pointer(self) -> int:
        """The last write pointer handed out, as durable (one get): every pointer in use
        is at most this, for the manager writes it before a pointer can be used."""
        raw = self._backend.get(keys.TX_LAST_WP)
        return _U64.unpack(raw)[0] if raw else 0

    def transaction_state(self) -> tuple[int, dict[int, int], set[int]]:
        """(last write pointer, in progress: write pointer -> expiry ms, invalid), as the rows
        hold them (transactions.py reconciles rows a partial write left)."""
        last_wp = self.last_write_pointer()
        skip = len(keys.TX_IN_PROGRESS)
        in_progress = {
            _U64.unpack_from(k, skip)[0]: _U64.unpack(v)[0]
            for k, v in self._backend.scan(
                keys.TX_IN_PROGRESS, keys.prefix_end(keys.TX_IN_PROGRESS)
            )
        }
        skip = len(keys.TX_INVALID)
        invalid = {
            _U64.unpack_from(k, skip)[0]
            for k, _ in self._backend.scan(keys.TX_INVALID, keys.prefix_end(keys.TX_INVALID))
        }
        return last_wp, in_progress, invalid

    # --- small durable state ----------------------------------------------------------------------
    def state(self, area: str, key: str) -> bytes | None:
        return self._backend.get(keys.state_key(area, key))

    def states(self, area: str, prefix: str = "") -> list[tuple[str, bytes]]:
        start = keys.state_prefix(area, prefix)
        skip = len(keys.state_prefix(area))
        return [
            (k[skip:].decode(), v) for k, v in self._backend.scan(start, keys.prefix_end(start))
        ]


def old_generation_keys(backend: Backend, topic: TopicId, generation: int) -> Iterator[bytes]:
    """Every row of ``topic``'s generations older than ``generation`` (> 0), or of the
    deleted generation ``-generation`` and older (< 0), in all four per-topic key spaces
    (MessageTable, PayloadTable and the MetadataTable's two markers): what the janitor
    deletes. A newer generation's rows are never among them."""
    for table in (keys.MESSAGE, keys.PAYLOAD, keys.REFERENCED, keys.OPEN_TX):
        whole = keys.all_generations_prefix(table, topic)
        if generation > 0:
            stop = keys.data_prefix(table, topic, generation)
        else:
            stop = keys.prefix_end(keys.data_prefix(table, topic, -generation))
        yield from backend.scan_keys(whole, stop)


class Tables:
    """The three tables of one backend, as the store and its helpers get them."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.messages = MessageTable(backend)
        self.payloads = PayloadTable(backend)
        self.metadata = MetadataTable(backend)

    def old_generation_keys(self, topic: TopicId, generation: int) -> Iterator[bytes]:
        return old_generation_keys(self.backend, topic, generation)
