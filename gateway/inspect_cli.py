"""Operator commands that look into a store without consuming from it.

    tmsgate topics list [--namespace NS]
    tmsgate topics describe TOPIC
    tmsgate topics delete-records TOPIC --offset N [--partition P]
    tmsgate inspect TOPIC --from OFFSET|TIME|MESSAGE-ID [--limit N] [--tx]
    tmsgate tx list

They open the store directly; when a running gateway holds it locked they read a
point-in-time copy instead (``open_store(..., snapshot=True)``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from tmsgate.storage import (
    TX_PER_MS,
    BackendError,
    MessageId,
    StorageError,
    Store,
    TopicId,
    open_store,
)

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
    common(tsub.add_parser("list", help="list the topics of a namespace"))
    describe = tsub.add_parser("describe", help="properties, generation and offsets of topics")
    common(describe)
    describe.add_argument("topic", nargs="*")
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
def open_for_reading(url: str) -> Iterator[Store]:
    try:
        store = open_store(url)
    except BackendError as exc:
        if "lock" not in str(exc).lower():
            raise
        store = open_store(url, snapshot=True)
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
    with open_for_reading(args.store) as store:
        if args.topics_command == "list":
            for t in store.list_topics(args.namespace):
                print(json.dumps({"topic": t.topic}) if args.json else t.topic)
            return 0
        names = args.topic or [t.topic for t in store.list_topics(args.namespace)]
        for name in names:
            t = TopicId(args.namespace, name)
            md = store.get_topic(t)
            earliest, nxt = store.offsets(t)
            doc = {
                "topic": name,
                "namespace": args.namespace,
                "generation": md.generation,
                "topic_id": md.topic_uuid.hex(),
                "properties": md.properties,
                "earliest_offset": earliest,
                "next_offset": nxt,
                "last_stable_offset": store.last_stable_offset(t),
            }
            cleaning = store.compaction_status(t)
            if cleaning is not None:
                doc["compaction"] = cleaning
            if args.json:
                print(json.dumps(doc))
            else:
                print(
                    f"{name}  generation={md.generation}  offsets=[{earliest}, {nxt})"
                    f"  lso={doc['last_stable_offset']}  id={doc['topic_id']}"
                    f"  properties={json.dumps(md.properties, sort_keys=True)}"
                )
                if cleaning is not None:
                    print(
                        f"  compaction: dirty ratio {cleaning['dirty_ratio']}"
                        f"  first dirty offset {cleaning['first_dirty_offset']}"
                        f"  cleaner lag {cleaning['lag_ms']} ms"
                        f"  clean {cleaning['clean_bytes']} B, dirty {cleaning['dirty_bytes']} B"
                    )
    return 0


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
        t = TopicId(args.namespace, args.topic)
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
