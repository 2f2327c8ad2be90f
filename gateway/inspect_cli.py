"""Operator commands that look into a store without consuming from it.

    tmsgate topics list [--namespace NS]
    tmsgate topics describe [TOPIC ...] [--cluster]
    tmsgate topics delete-records TOPIC --offset N [--partition P]
    tmsgate inspect TOPIC [--partition P] --from OFFSET|TIME|MESSAGE-ID [--limit N] [--tx]
    tmsgate tx list

They open the store directly; when a running gateway holds it locked they read a
point-in-time copy instead (``open_store(..., snapshot=True)``). Topics are Kafka's: a
topic of N partitions (N TMS topics ``name``, ``name~1``, ...) is shown once, with its
partitions, through the read model of gateway/views.py.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tmsgate.storage import (
    TX_PER_MS,
    BackendError,
    MessageId,
    StorageError,
    Store,
    TopicId,
    TopicNotFound,
    open_store,
)
from tmsgate.storage.leases import wall_clock_ms
from tmsgate.storage.partitions import partition_count, shared_properties

from .cluster import PARTITION, node_of
from .views import SizeCache, TopicsView, TopicView

DEFAULT_STORE = "leveldb://./data"


def common_arguments(p: argparse.ArgumentParser) -> None:
    """--store, --namespace and --json, shared by every command that reads a store."""
    p.add_argument(
        "--store",
        default=os.environ.get("TMSGATE_STORE", DEFAULT_STORE),
        help="store URL (default: $TMSGATE_STORE or %(default)s)",
    )
    p.add_argument(
        "--namespace",
        default=os.environ.get("TMSGATE_NAMESPACE", "default"),
        help="the TMS namespace of the gateway's Kafka topics (default: %(default)s)",
    )
    p.add_argument("--json", action="store_true", help="print JSON lines")


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    common = common_arguments

    topics = sub.add_parser("topics", help="list or describe topics")
    tsub = topics.add_subparsers(dest="topics_command", required=True)
    common(tsub.add_parser("list", help="the Kafka topics of a namespace and their partitions"))
    describe = tsub.add_parser(
        "describe", help="configs, partitions, offsets and sizes of topics (default: all)"
    )
    common(describe)
    describe.add_argument("topic", nargs="*")
    describe.add_argument(
        "--cluster",
        action="store_true",
        help="also each partition's leader: the node id of the gateway holding its lease "
        "(a store shared by `tmsgate serve --cluster` gateways)",
    )
    delete = tsub.add_parser(
        "delete-records",
        help="move a partition's log start (Kafka's DeleteRecords) on a store no gateway "
        "holds; with a gateway running use kafka-delete-records.sh",
    )
    common(delete)
    delete.add_argument("topic")
    delete.add_argument("--partition", type=int, default=0)
    delete.add_argument(
        "--offset", type=int, required=True, help="the new earliest offset (-1: the end)"
    )
    topics.set_defaults(func=cmd_topics)

    inspect = sub.add_parser("inspect", help="show messages without consuming them")
    common(inspect)
    inspect.add_argument("topic")
    inspect.add_argument("--partition", type=int, default=0, help="default: %(default)s")
    inspect.add_argument(
        "--from",
        dest="start",
        default="0",
        help="an offset (123), a time (ISO 8601 or epoch ms with a 'ms' suffix: 1700000000000ms)"
        " or a 40-hex-digit message id",
    )
    inspect.add_argument("--limit", type=int, default=20)
    inspect.add_argument("--tx", action="store_true", help="read as a transactional consumer")
    inspect.set_defaults(func=cmd_inspect)

    tx = sub.add_parser("tx", help="transactions")
    txsub = tx.add_subparsers(dest="tx_command", required=True)
    common(txsub.add_parser("list", help="in-progress and invalid transactions"))
    tx.set_defaults(func=cmd_tx)


@contextmanager
def open_for_reading(url: str, shared: bool = False) -> Iterator[Store]:
    """``shared``: a store several gateways use (``serve --cluster``): opened as one of
    them would, so that it settles no other gateway's writes."""
    try:
        store = open_store(url, shared=shared)
    except BackendError as exc:
        if "lock" not in str(exc).lower():
            raise
        store = open_store(url, snapshot=True, shared=shared)
        print(f"(store in use; reading a point-in-time copy of {url})", file=sys.stderr)
    try:
        yield store
    finally:
        store.close()


def cmd_delete_records(args: argparse.Namespace) -> int:
    try:
        store = open_store(args.store)
    except BackendError as exc:
        if "lock" in str(exc).lower():
            print(
                "a running gateway holds this store: use kafka-delete-records.sh against it",
                file=sys.stderr,
            )
            return 2
        raise
    try:
        t = TopicId.of_partition(args.namespace, args.topic, args.partition)
        low = store.delete_records(t, args.offset)
        store.cleanup()  # deletes the rows below the new log start now
    except StorageError as exc:
        print(f"{args.topic}-{args.partition}: {exc}", file=sys.stderr)
        return 1
    finally:
        store.close()
    print(json.dumps({"topic": args.topic, "partition": args.partition, "low_watermark": low}))
    return 0


def cmd_topics(args: argparse.Namespace) -> int:
    if args.topics_command == "delete-records":
        return cmd_delete_records(args)
    cluster = getattr(args, "cluster", False)
    with open_for_reading(args.store, shared=cluster) as store:
        if args.topics_command == "list":
            _list_topics(TopicsView(store, args.namespace).names(), args.json)
            return 0
        view = TopicsView(
            store,
            args.namespace,
            size_of=SizeCache(store),
            leader_of=leaders(store) if cluster else lambda t: None,
        )
        if not args.topic:
            topics = view.topics()
        else:
            topics = [_one_topic(view, name, args.namespace) for name in args.topic]
        for topic in topics:
            if args.json:
                print(json.dumps(topic_document(topic)))
            else:
                print("\n".join(describe_lines(topic, cluster)))
    return 0


def _one_topic(view: TopicsView, name: str, namespace: str) -> TopicView:
    _kafka_topic(namespace, name)
    try:
        return view.topic(name)
    except TopicNotFound:
        raise TopicNotFound(f"{name!r} (namespace {namespace})") from None


def _kafka_topic(namespace: str, name: str) -> TopicId:
    """The TMS topic of partition 0 of Kafka topic ``name``; StorageError for a name that
    is not a Kafka topic's (a partition's TMS topic, ``orders~1``, or no valid name)."""
    try:
        t = TopicId(namespace, name)
    except ValueError as exc:
        raise StorageError(str(exc)) from None
    if t.partition:
        raise StorageError(
            f"{name!r} is partition {t.partition} of topic {t.kafka_name!r}: name the "
            f"topic ({t.kafka_name}), and for inspect the partition (--partition {t.partition})"
        )
    return t


def _list_topics(names: list[tuple[str, int]], as_json: bool) -> None:
    if as_json:
        for name, count in names:
            print(json.dumps({"topic": name, "partitions": count}))
        return
    if not names:
        print("no topics", file=sys.stderr)
        return
    width = max(len("TOPIC"), *(len(n) for n, _ in names))
    print(f"{'TOPIC':<{width}}  PARTITIONS")
    for name, count in names:
        print(f"{name:<{width}}  {count}")


def leaders(store: Store) -> Callable[[TopicId], int | None]:
    """Each partition's leader as the leases in the store say (gateway/cluster.py): the
    node id of the gateway holding its ``partition/<topic>`` lease, unexpired; None for
    a partition no gateway leads now (or a store no ``serve --cluster`` gateway uses)."""
    now = wall_clock_ms()
    held: dict[str, int] = {}
    for lease in store.lease_table().all(PARTITION):
        node = node_of(lease.holder)
        if lease.held_at(now) and node is not None:
            held[lease.name[len(PARTITION) :]] = node.node_id
    return lambda topic: held.get(str(topic))


def topic_document(topic: TopicView) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "topic": topic.name,
        "namespace": topic.namespace,
        "generation": topic.generation,
        "topic_id": topic.topic_id,
        "properties": shared_properties(topic.properties),
        "partition_count": len(topic.partitions),
        "size_bytes": topic.size_bytes,
        "partitions": [
            {
                "partition": p.partition,
                "earliest_offset": p.earliest_offset,
                "next_offset": p.next_offset,
                "last_stable_offset": p.last_stable_offset,
                "messages": p.messages,
                "size_bytes": p.size_bytes,
                "leader": p.leader,
            }
            for p in topic.partitions
        ],
    }
    if topic.compaction is not None:
        doc["compaction"] = topic.compaction
    return doc


PARTITION_COLUMNS = ("Partition", "Earliest", "Next", "LSO", "Messages", "Size")


def describe_lines(topic: TopicView, cluster: bool) -> list[str]:
    """kafka-topics.sh --describe's layout (a topic line, its configs, then one line per
    partition), with offsets and sizes instead of replicas."""
    configs = ",".join(f"{k}={v}" for k, v in sorted(shared_properties(topic.properties).items()))
    lines = [
        f"Topic: {topic.name}\tTopicId: {topic.topic_id}\tPartitionCount: "
        f"{len(topic.partitions)}\tGeneration: {topic.generation}"
        f"\tSize: {_size(topic.size_bytes)}",
        f"\tConfigs: {configs}",
    ]
    header = PARTITION_COLUMNS + (("Leader",) if cluster else ())
    rows = [header]
    for p in topic.partitions:
        row = (
            str(p.partition),
            str(p.earliest_offset),
            str(p.next_offset),
            str(p.last_stable_offset),
            str(p.messages),
            _size(p.size_bytes),
        )
        rows.append(row + (("-" if p.leader is None else str(p.leader),) if cluster else ()))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines += [
        "\t" + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]
    cleaning = topic.compaction
    if cleaning is not None:
        lines.append(
            f"\tcompaction: dirty ratio {cleaning['dirty_ratio']}"
            f"  first dirty offset {cleaning['first_dirty_offset']}"
            f"  cleaner lag {cleaning['lag_ms']} ms"
            f"  clean {cleaning['clean_bytes']} B, dirty {cleaning['dirty_bytes']} B"
        )
    return lines


def _size(size: int | None) -> str:
    if size is None:
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def parse_start(text: str) -> dict[str, object]:
    """-> read() keyword arguments for an offset, a time or a message id."""
    if len(text) == 40 and all(c in "0123456789abcdefABCDEF" for c in text):
        return {"start": MessageId.fromhex(text)}
    if text.isdigit():
        return {"offset": int(text)}
    if text.endswith("ms") and text[:-2].isdigit():
        return {"start": int(text[:-2])}
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise SystemExit(
            f"--from {text!r}: expected an offset, a time (ISO 8601 or <epoch-ms>ms)"
            " or a 40-hex-digit message id"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return {"start": int(when.timestamp() * 1000)}


def cmd_inspect(args: argparse.Namespace) -> int:
    start = parse_start(args.start)
    with open_for_reading(args.store) as store:
        t = _partition(store, args.namespace, args.topic, args.partition)
        tx = store.transactions.snapshot() if args.tx else None
        res = store.read(t, max_messages=max(1, args.limit), tx=tx, **start)  # type: ignore[arg-type]
        for m in res.messages:
            doc = {
                "offset": m.offset,
                "id": m.id.hex(),
                "publish_time": _iso(m.publish_ts),
                "write_pointer": m.write_pointer,
                "payload": _show(m.payload),
                "meta_bytes": len(m.meta) if m.meta else 0,
            }
            if args.json:
                print(json.dumps(doc))
            else:
                wp = f" tx={m.write_pointer}" if m.write_pointer is not None else ""
                print(f"{m.offset:>8}  {m.id.hex()}  {doc['publish_time']}{wp}  {doc['payload']}")
        if not args.json:
            held = " (held at a transaction still in progress)" if res.held else ""
            print(f"-- {len(res.messages)} message(s); next offset {res.next_offset}{held}")
    return 0


def _partition(store: Store, namespace: str, name: str, partition: int) -> TopicId:
    """The TMS topic of a Kafka topic's partition; StorageError saying why not."""
    try:
        first = store.get_topic(_kafka_topic(namespace, name))
    except TopicNotFound:
        raise TopicNotFound(f"{name!r} (namespace {namespace})") from None
    count = partition_count(first.properties)
    if not 0 <= partition < count:
        raise StorageError(
            f"topic {name!r} has {count} partition{'s' if count > 1 else ''} "
            f"(0..{count - 1}): there is no partition {partition}"
        )
    return TopicId.of_partition(namespace, name, partition)


def cmd_tx(args: argparse.Namespace) -> int:
    with open_for_reading(args.store) as store:
        in_progress = store.transactions.in_progress()
        invalid = store.transactions.invalid()
    if args.json:
        print(json.dumps({"in_progress": in_progress, "invalid": invalid}))
        return 0
    print(f"in progress: {len(in_progress)}")
    for wp, expiry in sorted(in_progress.items()):
        print(f"  {wp}  started {_iso(wp // TX_PER_MS)}  expires {_iso(expiry)}")
    print(f"invalid: {len(invalid)}")
    for wp in invalid:
        print(f"  {wp}  started {_iso(wp // TX_PER_MS)}")
    return 0


def run(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args))
    except StorageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")


def _show(payload: bytes | None) -> str:
    if payload is None:
        return "null"
    text = payload[:200].decode("utf-8", "backslashreplace")
    return text + ("..." if len(payload) > 200 else "")
