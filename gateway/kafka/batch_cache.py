"""Recently produced record batches, kept as Kafka sends them, for consumers near the head.

The seed's scan cache, in Kafka terms: a produced v2 batch is, once the store has given
its records offsets ``base .. base+n-1``, exactly the batch a consumer fetching those
offsets should get (Kafka itself serves stored batches as they came). Keeping the bytes
lets a fetch near the head answer with a join of cached batches instead of reading rows
and encoding records again.

Only batches whose every record reads back unchanged are kept: non-transactional (no
``tms.tx.write_pointer``), CreateTime topics, client timestamps present. Entries are
keyed by the topic's generation id, so a re-created topic never sees the old batches.
The cache is bounded in bytes and in entries; the oldest batches go first. Batches under
MIN_BYTES are not kept: a consumer at the head reads those few messages from the store
anyway, and many tiny entries would only make Python's garbage collector walk longer
(an early version kept every single-message batch, and gen-2 pauses grew to 50 ms).
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from tmsgate.protocol import SERVED_HEAD, served_head

MIN_BYTES = 16 << 10
MAX_ENTRIES = 16_384
ZSTD = 4
_COMPRESSION_MASK = 0x07
_ATTRIBUTES_AT = 21  # v2 header: base offset 8, length 4, epoch 4, magic 1, crc 4
_CODEC_AT = _ATTRIBUTES_AT + 1 - SERVED_HEAD  # in a kept body: the attributes' low byte


@dataclass(slots=True)
class _TopicBatches:
    bases: list[int] = field(default_factory=list)  # ascending
    # base -> (last offset, the new first bytes (protocol.served_head), the rest as received)
    batches: dict[int, tuple[int, bytes, memoryview]] = field(default_factory=dict)


class BatchCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self.hits = 0
        self._topics: dict[bytes, _TopicBatches] = {}
        self._order: OrderedDict[tuple[bytes, int], int] = OrderedDict()  # insertion = age
        self._lock = threading.Lock()

    def put(self, topic_id: bytes, base_offset: int, count: int, raw: bytes | memoryview) -> None:
        """Keep a produced batch now that its records start at ``base_offset``.

        ``raw`` must be immutable (a view of a received request): it is kept, not copied,
        and only its base offset and leader epoch are replaced, at read time, by the stored
        head (protocol.served_head)."""
        if self.max_bytes <= 0 or not MIN_BYTES <= len(raw) <= self.max_bytes:
            return
        head, body = served_head(base_offset, raw), memoryview(raw)[SERVED_HEAD:]
        size = len(raw)
        with self._lock:
            tb = self._topics.setdefault(topic_id, _TopicBatches())
            if base_offset in tb.batches:
                return
            if not tb.bases or base_offset > tb.bases[-1]:
                tb.bases.append(base_offset)
            else:
                bisect.insort(tb.bases, base_offset)
            tb.batches[base_offset] = (base_offset + count - 1, head, body)
            self._order[(topic_id, base_offset)] = size
            self.size += size
            while self.size > self.max_bytes or len(self._order) > MAX_ENTRIES:
                self._evict_oldest()

    def read(
        self,
        topic_id: bytes,
        offset: int,
        limit: int,
        max_bytes: int,
        zstd_ok: bool,
        first_whole: bool = True,
    ) -> tuple[list[bytes | memoryview], int]:
        """Cached batches from the one holding ``offset`` on, contiguous, ending before
        ``limit`` (the high watermark or last stable offset); -> (chunks to concatenate,
        two per batch, and the next offset).
        With ``first_whole`` this read opens the response: its first batch comes whatever
        its size, as Kafka does for the first batch of a response, and may start before
        ``offset``. Without it, chunks come before these, so a batch must start exactly
        at ``offset``."""
        out: list[bytes | memoryview] = []
        size = 0
        with self._lock:
            tb = self._topics.get(topic_id)
            if tb is None:
                return out, offset
            i = bisect.bisect_right(tb.bases, offset) - 1
            while 0 <= i < len(tb.bases):
                base = tb.bases[i]
                last, head, body = tb.batches[base]
                if base > offset or last < offset or last >= limit:
                    break
                if base < offset and (out or not first_whole):
                    # Only a response's first batch may start before the fetch offset
                    # (clients drop records below the offset they asked for); a batch
                    # after others would send offsets twice, going backwards.
                    break
                if not zstd_ok and body[_CODEC_AT] & _COMPRESSION_MASK == ZSTD:
                    break
                if (out or not first_whole) and size + SERVED_HEAD + len(body) > max_bytes:
                    break
                out += (head, body)
                size += SERVED_HEAD + len(body)
                offset = last + 1
                i += 1
            if out:
                self.hits += 1
        return out, offset

    def covers(self, topic_id: bytes, offset: int) -> bool:
        """Whether a cached batch holds ``offset`` (cheap; read() may still decline it)."""
        with self._lock:
            tb = self._topics.get(topic_id)
            if tb is None:
                return False
            i = bisect.bisect_right(tb.bases, offset) - 1
            return i >= 0 and tb.batches[tb.bases[i]][0] >= offset

    def drop_topic(self, topic_id: bytes) -> None:
        with self._lock:
            tb = self._topics.pop(topic_id, None)
            if tb is None:
                return
            for base in tb.bases:
                self.size -= self._order.pop((topic_id, base), 0)

    def _evict_oldest(self) -> None:
        (topic_id, base), size = self._order.popitem(last=False)
        self.size -= size
        tb = self._topics[topic_id]
        del tb.batches[base]
        tb.bases.remove(base)  # the oldest is nearly always first: cheap
        if not tb.bases:
            del self._topics[topic_id]
