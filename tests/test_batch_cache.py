"""BatchCache: produced batches served back by offset, bounded, per topic generation."""

from __future__ import annotations

import os
import struct

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from tmsgate.gateway.kafka.batch_cache import BatchCache
from tmsgate.protocol import decode_batch


def produced(n: int, compression: int = 0, base: int = 0) -> bytes:
    b = DefaultRecordBatchBuilder(2, compression, 0, -1, -1, -1, 1 << 20)
    for i in range(n):
        # 9 KB incompressible values: batches of 2 or more are above the cache's MIN_BYTES
        b.append(i, 1_700_000_000_000 + i, b"k%d" % i, b"v%d." % i + os.urandom(9000), [])
    raw = bytes(b.build())
    return struct.pack(">q", base) + raw[8:]


def whole(chunks: list) -> list[bytes]:
    """The cache hands out two chunks per batch: the new head and the rest."""
    return [bytes(chunks[i]) + bytes(chunks[i + 1]) for i in range(0, len(chunks), 2)]


def offsets(chunks: list) -> list[int]:
    out = []
    for raw in whole(chunks):
        base = struct.unpack_from(">q", raw)[0]
        out += [base + i for i, _ in enumerate(decode_batch(raw).records)]
    return out


def test_batches_come_back_with_their_assigned_offsets() -> None:
    cache = BatchCache(1 << 20)
    cache.put(b"t1", 0, 3, produced(3))
    cache.put(b"t1", 3, 2, produced(2))
    got, nxt = cache.read(b"t1", 0, 5, 1 << 20, True)
    assert offsets(got) == [0, 1, 2, 3, 4] and nxt == 5
    # from inside a batch: the whole batch holding the offset, as Kafka sends it
    got, nxt = cache.read(b"t1", 1, 5, 1 << 20, True)
    assert offsets(got) == [0, 1, 2, 3, 4] and nxt == 5
    # CRC still valid after the offset rewrite (decode_batch checks it)
    assert decode_batch(whole(got)[1]).records[0].value.startswith(b"v0.")


def test_limit_budget_gaps_and_generations() -> None:
    cache = BatchCache(1 << 20)
    cache.put(b"t1", 0, 3, produced(3))
    cache.put(b"t1", 5, 2, produced(2))  # offsets 3-4 not cached (say, transactional)
    got, nxt = cache.read(b"t1", 0, 10, 1 << 20, True)
    assert offsets(got) == [0, 1, 2] and nxt == 3
    assert cache.read(b"t1", 3, 10, 1 << 20, True) == ([], 3)
    # never past the limit (high watermark / last stable offset)
    assert cache.read(b"t1", 5, 6, 1 << 20, True) == ([], 5)
    # the first batch comes whole; later ones only within the budget
    one = len(produced(3))
    got, nxt = cache.read(b"t1", 0, 10, 1, True)
    assert len(whole(got)) == 1 and nxt == 3
    assert cache.read(b"t1", 0, 10, one - 1, True, first_whole=False) == ([], 0)
    # another generation of the topic has its own id
    assert cache.read(b"t2", 0, 10, 1 << 20, True) == ([], 0)
    cache.drop_topic(b"t1")
    assert cache.read(b"t1", 0, 10, 1 << 20, True) == ([], 0) and cache.size == 0


def test_zstd_only_for_fetch_versions_that_accept_it() -> None:
    cache = BatchCache(1 << 20)
    cache.put(b"t", 0, 3, produced(3, compression=4))
    assert cache.read(b"t", 0, 3, 1 << 20, False) == ([], 0)
    got, _ = cache.read(b"t", 0, 3, 1 << 20, True)
    assert offsets(got) == [0, 1, 2]


def test_bounded_oldest_go_first() -> None:
    size = len(produced(3))
    cache = BatchCache(size * 2)
    for i in range(4):
        cache.put(b"t", i * 3, 3, produced(3))
    assert cache.size <= size * 2
    assert cache.read(b"t", 0, 12, 1 << 20, True) == ([], 0)
    assert offsets(cache.read(b"t", 6, 12, 1 << 20, True)[0]) == list(range(6, 12))
    off = BatchCache(0)
    off.put(b"t", 0, 3, produced(3))  # 0 turns the cache off
    assert off.size == 0
    tiny = BatchCache(1 << 20)
    tiny.put(b"t", 0, 1, produced(1)[:100])  # below MIN_BYTES: left to the store
    assert tiny.size == 0 and not tiny.covers(b"t", 0)


def test_a_batch_after_other_chunks_never_starts_before_the_offset() -> None:
    # The fetch path reads the store up to an offset inside a cached batch, then asks
    # the cache to continue (first_whole=False). Appending the whole batch would send
    # its first offsets a second time, going backwards: clients only drop records
    # below the fetch offset of the request, so they delivered them twice.
    cache = BatchCache(1 << 20)
    cache.put(b"t1", 0, 3, produced(3))
    cache.put(b"t1", 3, 2, produced(2))
    assert cache.read(b"t1", 1, 5, 1 << 20, True, first_whole=False) == ([], 1)
    # at a batch boundary it continues
    got, nxt = cache.read(b"t1", 3, 5, 1 << 20, True, first_whole=False)
    assert offsets(got) == [3, 4] and nxt == 5
    # opening a response, the batch holding the offset still comes whole (as Kafka's)
    got, nxt = cache.read(b"t1", 1, 5, 1 << 20, True, first_whole=True)
    assert offsets(got) == [0, 1, 2, 3, 4] and nxt == 5


def test_a_cached_batch_is_served_with_leader_epoch_minus_one() -> None:
    """Producers send epoch 0 (librdkafka, kafka-python) or -1 (Java); a fetch gets -1,
    the epoch tmsgate reports everywhere, and the rest as sent (the CRC still holds)."""
    raw = produced(2)
    raw = raw[:12] + struct.pack(">i", 0) + raw[16:]
    cache = BatchCache(1 << 20)
    cache.put(b"t1", 7, 2, raw)
    got, _ = cache.read(b"t1", 7, 9, 1 << 20, True)
    [served] = whole(got)
    assert struct.unpack_from(">qii", served) == (7, len(raw) - 12, -1)
    assert served[16:] == raw[16:]
    assert [r.offset for r in decode_batch(served).records] == [7, 8]
