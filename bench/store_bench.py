"""Store benchmark: fsync'd publish, non-transactional poll, and seeks by offset and time.

    .venv/bin/python bench/store_bench.py [--quick] [--runs 3] [--big 10000000]

Prints one line per measurement and a final JSON summary (medians over --runs).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time

import plyvel
from tmsgate.storage import TopicId, open_store

T = TopicId("bench", "events")


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def publish_rate(path: str, publishers: int, batch: int, total: int, size: int) -> float:
    store = open_store(f"leveldb://{path}")
    try:
        store.create_topic(T)
        payload = os.urandom(size)
        msgs = [payload] * batch
        per = total // publishers // batch

        def run() -> None:
            for _ in range(per):
                store.publish(T, msgs)

        threads = [threading.Thread(target=run) for _ in range(publishers)]
        t0 = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        return per * batch * publishers / (time.perf_counter() - t0)
    finally:
        store.close()


def plyvel_ceiling(path: str, batch: int, total: int, size: int) -> float:
    db = plyvel.DB(path, create_if_missing=True, compression=None, write_buffer_size=64 << 20)
    payload = os.urandom(size)
    t0 = time.perf_counter()
    n = 0
    for _ in range(total // batch):
        with db.write_batch(sync=True) as wb:
            for _ in range(batch):
                wb.put(b"M" + n.to_bytes(8, "big"), payload)
                n += 1
    rate = n / (time.perf_counter() - t0)
    db.close()
    return rate


def fill(path: str, count: int, size: int, batch: int = 2000) -> tuple[int, int]:
    """Publish ``count`` messages; -> (first publish ts, last publish ts)."""
    store = open_store(f"leveldb://{path}")
    store.create_topic(T)
    payload = os.urandom(size)
    first = last = 0
    for i in range(count // batch):
        r = store.publish(T, [payload] * batch)
        first = first or r.publish_ts
        last = r.publish_ts
        if i % 500 == 0:
            progress(f"  filled {i * batch:,}/{count:,}")
    store.close()
    return first, last


def poll_rate(path: str, limit: int = 1000, total: int = 500_000) -> float:
    store = open_store(f"leveldb://{path}")
    try:
        off, n = 0, 0
        t0 = time.perf_counter()
        while n < total:
            res = store.read(T, offset=off, max_messages=limit)
            if not res.messages:
                break
            n += len(res.messages)
            off = res.next_offset
        return n / (time.perf_counter() - t0)
    finally:
        store.close()


def seek_latency(path: str, first_ts: int, last_ts: int, samples: int = 2000) -> dict[str, float]:
    store = open_store(f"leveldb://{path}")
    try:
        _, nxt = store.offsets(T)
        rnd = random.Random(1)
        out = {}
        for name, fn in (
            ("offset", lambda: store.read(T, offset=rnd.randrange(nxt), max_messages=1)),
            ("time", lambda: store.read(T, start=rnd.randint(first_ts, last_ts), max_messages=1)),
        ):
            lat = []
            for _ in range(samples):
                t0 = time.perf_counter()
                res = fn()
                lat.append(time.perf_counter() - t0)
                assert res.messages
            lat.sort()
            out[f"seek_{name}_p50_us"] = lat[len(lat) // 2] * 1e6
            out[f"seek_{name}_p99_us"] = lat[int(len(lat) * 0.99)] * 1e6
        return out
    finally:
        store.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    ap.add_argument("--big", type=int, default=10_000_000, help="messages in the big seek run")
    args = ap.parse_args()
    total = 100_000 if args.quick else 400_000
    mid = 100_000 if args.quick else 1_000_000
    big = 200_000 if args.quick else args.big
    root = tempfile.mkdtemp(prefix="tmsgate-bench-")
    results: dict[str, list[float]] = {}

    def record(name: str, value: float) -> None:
        results.setdefault(name, []).append(value)
        progress(f"{name}: {value:,.1f}")

    try:
        for run in range(args.runs):
            progress(f"run {run + 1}/{args.runs}")
            for key, fn in (
                ("plyvel_ceiling_500x1KiB_msgs_s", lambda p: plyvel_ceiling(p, 500, total, 1024)),
                ("publish_1x500x1KiB_msgs_s", lambda p: publish_rate(p, 1, 500, total, 1024)),
                ("publish_8x500x1KiB_msgs_s", lambda p: publish_rate(p, 8, 500, total, 1024)),
                ("publish_8x1x1KiB_msgs_s", lambda p: publish_rate(p, 8, 1, 16_000, 1024)),
                ("publish_64x1x1KiB_msgs_s", lambda p: publish_rate(p, 64, 1, 32_000, 1024)),
            ):
                path = tempfile.mkdtemp(dir=root)
                record(key, fn(path))
                shutil.rmtree(path)
        for label, count, size in (("1M", mid, 1024), ("10M", big, 100)):
            path = tempfile.mkdtemp(dir=root)
            progress(f"filling {count:,} x {size} B")
            first, last = fill(path, count, size)
            for _ in range(args.runs):
                record(f"poll_{label}_msgs_s", poll_rate(path))
                for k, v in seek_latency(path, first, last).items():
                    record(f"{k}_{label}", v)
            shutil.rmtree(path)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    summary = {k: round(statistics.median(v), 1) for k, v in results.items()}
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
