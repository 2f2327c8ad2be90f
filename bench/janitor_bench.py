"""The janitor's clean-up of a deleted topic, in-process (no gateway, no sockets).

    .venv/bin/python bench/janitor_bench.py [--rows 500000] [--value-bytes 1024] [--runs 3]
                                            [--live]

For each run: a fresh LevelDB store in a temporary directory, --rows messages published
to one topic in batches of 2,000 (values of --value-bytes go to the value log), the topic
deleted, then one janitor pass (``Store.cleanup``) timed: wall time and this process's user
and system CPU. The pass deletes every row of the deleted generation through the store's
writer and frees the value-log segments no row points into any more.

--live: the topic is kept, so the pass finds nothing to delete; it still counts the live
bytes of every value-log segment (the collector's census), which is what a janitor pass
costs a gateway that keeps its data. The segments are first dropped from the page cache
(as the value log itself does beyond its newest 256 MiB), and `read_mb` / `rchar_mb` give
what the pass read from the disk and through read calls (/proc/self/io).

Progress goes to stderr, one JSON summary (medians and the runs) to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tmsgate.storage import TopicId, open_store

BATCH = 2000


def _io() -> dict[str, int]:
    with open("/proc/self/io") as f:
        return {k: int(v) for k, v in (line.split(": ") for line in f)}


def _uncache(directory: Path) -> None:
    for path in directory.glob("*.vlog"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def one_run(rows: int, value_bytes: int, live: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="tmsgate-janitor-bench-") as tmp:
        store = open_store(f"leveldb://{tmp}/store")
        try:
            topic = TopicId("default", "deleted")
            store.create_topic(topic)
            value = b"x" * value_bytes
            batch = max(1, min(BATCH, (16 << 20) // value_bytes))
            for done in range(0, rows, batch):
                store.publish(topic, [value] * min(batch, rows - done))
            if live:
                _uncache(Path(tmp) / "store" / "vlog")
            else:
                store.delete_topic(topic)
            io_before = _io()
            before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            stats = store.cleanup()  # one janitor pass
            wall = time.perf_counter() - started
            after = resource.getrusage(resource.RUSAGE_SELF)
            io_after = _io()
        finally:
            store.close()
    if stats["rows_deleted"] != (0 if live else rows):
        raise SystemExit(f"the pass deleted {stats['rows_deleted']} rows")
    return {
        "wall_s": round(wall, 3),
        "user_s": round(after.ru_utime - before.ru_utime, 3),
        "sys_s": round(after.ru_stime - before.ru_stime, 3),
        "read_mb": round((io_after["read_bytes"] - io_before["read_bytes"]) / 1e6, 1),
        "rchar_mb": round((io_after["rchar"] - io_before["rchar"]) / 1e6, 1),
        "vlog_segments_deleted": stats["vlog_segments_deleted"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=500_000)
    ap.add_argument("--value-bytes", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--live", action="store_true", help="keep the topic: a census-only pass")
    args = ap.parse_args()
    runs = []
    for i in range(args.runs):
        runs.append(one_run(args.rows, args.value_bytes, args.live))
        print(f"run {i + 1}/{args.runs}: {runs[-1]}", file=sys.stderr, flush=True)
    summary = {
        "rows": args.rows,
        "value_bytes": args.value_bytes,
        "live": args.live,
        **{
            k: statistics.median(r[k] for r in runs)
            for k in ("wall_s", "user_s", "sys_s", "read_mb", "rchar_mb")
        },
        "runs": runs,
    }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
