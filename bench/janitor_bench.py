"""The janitor's clean-up of a deleted topic, in-process (no gateway, no sockets).

    .venv/bin/python bench/janitor_bench.py [--rows 500000] [--value-bytes 1024] [--runs 3]

For each run: a fresh LevelDB store in a temporary directory, --rows messages published
to one topic in batches of 2,000 (values of --value-bytes go to the value log), the topic
deleted, then one janitor pass (``Store.cleanup``) timed: wall time and this process's user
and system CPU. The pass deletes every row of the deleted generation through the store's
writer and frees the value-log segments no row points into any more.

Progress goes to stderr, one JSON summary (medians and the runs) to stdout.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time

from tmsgate.storage import TopicId, open_store

BATCH = 2000


def one_run(rows: int, value_bytes: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="tmsgate-janitor-bench-") as tmp:
        store = open_store(f"leveldb://{tmp}/store")
        try:
            topic = TopicId("default", "deleted")
            store.create_topic(topic)
            value = b"x" * value_bytes
            for done in range(0, rows, BATCH):
                store.publish(topic, [value] * min(BATCH, rows - done))
            store.delete_topic(topic)
            before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            stats = store.cleanup()  # one janitor pass
            wall = time.perf_counter() - started
            after = resource.getrusage(resource.RUSAGE_SELF)
        finally:
            store.close()
    if stats["rows_deleted"] != rows:
        raise SystemExit(f"the pass deleted {stats['rows_deleted']} rows, not {rows}")
    return {
        "wall_s": round(wall, 3),
        "user_s": round(after.ru_utime - before.ru_utime, 3),
        "sys_s": round(after.ru_stime - before.ru_stime, 3),
        "vlog_segments_deleted": stats["vlog_segments_deleted"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=500_000)
    ap.add_argument("--value-bytes", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    runs = []
    for i in range(args.runs):
        runs.append(one_run(args.rows, args.value_bytes))
        print(f"run {i + 1}/{args.runs}: {runs[-1]}", file=sys.stderr, flush=True)
    summary = {
        "rows": args.rows,
        "value_bytes": args.value_bytes,
        **{k: statistics.median(r[k] for r in runs) for k in ("wall_s", "user_s", "sys_s")},
        "runs": runs,
    }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
