"""``tmsgate migrate --verify``: compare each partition on the source and the target.

Both sides are read as a read_committed consumer reads them: offsets (earliest, end),
the number of records, and a SHA-256 over every record's offset, timestamp, key,
value and headers. A partition matches when all of them are equal.
"""

from __future__ import annotations

import asyncio
import hashlib
import struct
import sys
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition
from rich.console import Console
from rich.table import Table

_QQ = struct.Struct(">qq")
_LEN = struct.Struct(">i")
POLL_MS = 500


@dataclass(frozen=True, slots=True)
class Side:
    earliest: int
    end: int
    records: int
    digest: str


def _field(h: Any, value: bytes | None) -> None:
    if value is None:
        h.update(_LEN.pack(-1))
    else:
        h.update(_LEN.pack(len(value)))
        h.update(value)


async def read_side(bootstrap: str, tps: list[tuple[str, int]]) -> dict[tuple[str, int], Side]:
    """Read every partition from its earliest offset to its end (the last stable
    offset when reading starts)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        client_id="tmsgate-migrate-verify",
        max_partition_fetch_bytes=8 << 20,
        fetch_max_bytes=32 << 20,
    )
    await consumer.start()
    try:
        parts = [TopicPartition(t, p) for t, p in tps]
        consumer.assign(parts)
        starts = await consumer.beginning_offsets(parts)
        ends = await consumer.end_offsets(parts)  # read_committed: last stable offsets
        hashes = {tp: hashlib.sha256() for tp in parts}
        counts = dict.fromkeys(parts, 0)
        todo = set()
        for tp in parts:
            if starts[tp] < ends[tp]:
                consumer.seek(tp, starts[tp])
                todo.add(tp)
            else:
                consumer.pause(tp)
        while todo:
            batches = await consumer.getmany(*todo, timeout_ms=POLL_MS)
            for tp, records in batches.items():
                h = hashes[tp]
                for r in records:
                    if r.offset >= ends[tp]:
                        break
                    h.update(_QQ.pack(r.offset, r.timestamp))
                    _field(h, r.key)
                    _field(h, r.value)
                    h.update(_LEN.pack(len(r.headers)))
                    for name, value in r.headers:
                        _field(h, name.encode())
                        _field(h, value)
                    counts[tp] += 1
            for tp in list(todo):
                if await consumer.position(tp) >= ends[tp]:
                    todo.discard(tp)
                    consumer.pause(tp)
        return {
            (tp.topic, tp.partition): Side(starts[tp], ends[tp], counts[tp], hashes[tp].hexdigest())
            for tp in parts
        }
    finally:
        await consumer.stop()


async def verify(source: str, target: str, parts: list[Any], out: Any = sys.stdout) -> bool:
    """Print a table of every partition; -> True if all of them match."""
    tps = sorted({(p.topic, p.partition) for p in parts})
    if not tps:
        return True
    src, tgt = await asyncio.gather(read_side(source, tps), read_side(target, tps))
    table = Table(title="tmsgate migrate --verify")
    for name in ("partition", "source offsets", "target offsets", "records", "checksum", ""):
        table.add_column(name)
    ok = True
    for tp in tps:
        a, b = src[tp], tgt[tp]
        same = a == b
        ok &= same
        table.add_row(
            f"{tp[0]}-{tp[1]}",
            f"[{a.earliest}, {a.end})",
            f"[{b.earliest}, {b.end})",
            f"{a.records}" if a.records == b.records else f"{a.records} / {b.records}",
            a.digest[:12] if a.digest == b.digest else f"{a.digest[:12]} / {b.digest[:12]}",
            "ok" if same else "DIFFERENT",
        )
    widest = max(len(f"{t}-{p}") for t, p in tps)
    Console(file=out, width=max(120, widest + 100)).print(table)
    return ok
