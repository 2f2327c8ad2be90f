"""Store publish and poll on each storage engine: LevelDB, memory://, and hbase:// against
the Thrift 1 stand-in (tests/hbase_standin.py; not HBase: an in-process Python server, so
its figures show the cost of the engine's round trips and of writing in phases without
multi-row atomicity, not HBase's speed). ``read_1_at_random_offset`` reads one message at
each of ``messages / 100`` random offsets: an offset search (reader.start_for_offset; on
hbase:// the engine's seek_offset) and a read of one row, per message.

    .venv/bin/python bench/engines_bench.py [--runs 3] [--engines leveldb,memory,hbase]
        [--messages 100000] [--hbase-messages 20000] [--tree /path/to/other/checkout]

``--tree`` loads tmsgate from another checkout of this repository instead of the installed
one (to compare a commit with the working tree on the same machine, one after the other).
Prints one line per run and a JSON summary of medians (msgs/s).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

PACKAGES = {  # pyproject's [tool.setuptools.package-dir], for --tree
    "tmsgate": "tmsgate",
    "tmsgate/storage": "storage",
    "tmsgate/protocol": "protocol",
    "tmsgate/gateway": "gateway",
    "tmsgate/pipelines": "pipelines",
    "tmsgate/client": "client",
}


def use_tree(tree: str) -> None:
    """Import tmsgate from ``tree``: a package folder of symlinks, ahead of the editable
    install (whose finder is removed)."""
    root = tempfile.mkdtemp(prefix="tmsgate-tree-")
    os.makedirs(os.path.join(root, "tmsgate"))
    for name in os.listdir(os.path.join(tree, "tmsgate")):
        os.symlink(os.path.join(tree, "tmsgate", name), os.path.join(root, "tmsgate", name))
    for target, source in PACKAGES.items():
        if target != "tmsgate" and os.path.isdir(os.path.join(tree, source)):
            os.symlink(os.path.join(tree, source), os.path.join(root, target))
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
    sys.path.insert(0, root)


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@contextlib.contextmanager
def engine_url(engine: str) -> Iterator[str]:
    if engine == "leveldb":
        path = tempfile.mkdtemp(prefix="tms-bench-", dir="/var/tmp")
        try:
            yield f"leveldb://{path}"
        finally:
            shutil.rmtree(path, ignore_errors=True)
    elif engine == "memory":
        from tmsgate.storage import memory

        name = f"bench-{uuid.uuid4().hex}"
        try:
            yield f"memory://{name}"
        finally:
            memory.drop(name)
    elif engine == "hbase":
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
        from hbase_standin import running_standin

        with running_standin() as address:
            yield f"hbase://{address}/b{uuid.uuid4().hex[:10]}"
    else:
        raise SystemExit(f"unknown engine {engine!r}")


def timed(fn: Callable[[], int]) -> float:
    t0 = time.perf_counter()
    n = fn()
    return n / (time.perf_counter() - t0)


def measure(engine: str, messages: int, size: int) -> dict[str, float]:
    from tmsgate.storage import TopicId, open_store

    topic = TopicId("bench", "events")
    payload = os.urandom(size)
    out: dict[str, float] = {}
    with engine_url(engine) as url:
        store: Any = open_store(url)
        try:
            store.create_topic(topic)
            batch = [payload] * 500

            def publish_batches() -> int:
                for _ in range(messages // 500):
                    store.publish(topic, batch)
                return messages // 500 * 500

            out["publish_500"] = timed(publish_batches)
            singles = max(800, messages // 20)

            def publish_singles() -> int:
                per = singles // 8

                def run() -> None:
                    for _ in range(per):
                        store.publish(topic, [payload])

                threads = [threading.Thread(target=run) for _ in range(8)]
                for th in threads:
                    th.start()
                for th in threads:
                    th.join()
                return per * 8

            out["publish_1_x8"] = timed(publish_singles)

            def poll_all() -> int:
                offset, n = 0, 0
                end = store.offsets(topic)[1]
                while offset < end:
                    res = store.read(topic, offset=offset, max_messages=1000)
                    n += len(res.messages)
                    offset = res.next_offset
                return n

            out["poll_1000"] = timed(poll_all)
            end = store.offsets(topic)[1]
            rng = random.Random(7)
            lookups = [rng.randrange(end) for _ in range(max(50, messages // 100))]

            def read_at_random_offsets() -> int:
                for offset in lookups:
                    store.read(topic, offset=offset, max_messages=1)
                return len(lookups)

            out["read_1_at_random_offset"] = timed(read_at_random_offsets)
        finally:
            store.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--engines", default="leveldb,memory,hbase")
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--hbase-messages", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--tree", help="load tmsgate from this checkout instead")
    args = parser.parse_args()
    if args.tree:
        use_tree(os.path.abspath(args.tree))
    summary: dict[str, dict[str, float]] = {}
    for engine in args.engines.split(","):
        n = args.hbase_messages if engine == "hbase" else args.messages
        runs = []
        for i in range(args.runs):
            result = measure(engine, n, args.size)
            progress(
                f"{engine} run {i + 1}/{args.runs}: "
                + ", ".join(f"{k} {v / 1000:.1f}k msgs/s" for k, v in result.items())
            )
            runs.append(result)
        summary[engine] = {k: round(statistics.median(r[k] for r in runs)) for k in runs[0]}
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
