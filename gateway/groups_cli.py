"""Operator view of consumer groups, read from the store.

    tmsgate groups list [--store URL] [--namespace NS] [--json]
    tmsgate groups describe GROUP [GROUP ...] [--store URL] [--namespace NS] [--json]

State, generation, protocol, members and their assignment are the group as of its last
completed rebalance (what the coordinator keeps durable); committed offsets are exact.
Lag is the topic's high watermark (next offset) minus the committed offset. An offset
committed to a topic that was deleted or recreated since is shown as stale and has no
lag. Like ``tmsgate topics``, this opens the store directly, or a point-in-time copy
when a running gateway holds it locked.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from tmsgate.storage import StorageError, Store, TopicId, TopicNotFound

from .inspect_cli import common_arguments, open_for_reading
from .kafka.groups.codec import (
    GROUPS_AREA,
    OFFSETS_AREA,
    CommittedOffset,
    CorruptState,
    GroupRecord,
    assignment_partitions,
    decode_group,
    decode_offset,
    group_key,
    offsets_prefix,
    parse_offset_key,
)

CONSUMER = "consumer"


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    common = common_arguments

    groups = sub.add_parser("groups", help="list or describe Kafka consumer groups")
    gsub = groups.add_subparsers(dest="groups_command", required=True)
    common(gsub.add_parser("list", help="every group with its state, members and total lag"))
    describe = gsub.add_parser(
        "describe", help="state, members, assignment, committed offsets and lag of groups"
    )
    common(describe)
    describe.add_argument("group", nargs="+")
    groups.set_defaults(func=cmd_groups)


@dataclass(frozen=True, slots=True)
class OffsetRow:
    topic: str
    partition: int
    committed: CommittedOffset
    high_watermark: int | None  # None: the topic generation is gone (stale offset)

    @property
    def lag(self) -> int | None:
        if self.high_watermark is None:
            return None
        return max(0, self.high_watermark - self.committed.offset)


class GroupView:
    """The durable state of the groups of one store."""

    def __init__(self, store: Store, namespace: str) -> None:
        self.store = store
        self.namespace = namespace
        self._topics: dict[tuple[str, int], tuple[bytes, int] | None] = {}

    def group_ids(self) -> list[str]:
        ids = {unquote(key) for key, _ in self.store.scan_state(GROUPS_AREA)}
        for key, _ in self.store.scan_state(OFFSETS_AREA):
            try:
                ids.add(parse_offset_key(key)[0])
            except CorruptState:
                continue
        return sorted(ids)

    def record(self, group_id: str) -> GroupRecord | None:
        raw = self.store.get_state(GROUPS_AREA, group_key(group_id))
        return None if raw is None else decode_group(group_id, raw)

    def offsets(self, group_id: str) -> list[OffsetRow]:
        rows = []
        for key, raw in self.store.scan_state(OFFSETS_AREA, offsets_prefix(group_id)):
            _group, topic, partition = parse_offset_key(key)
            committed = decode_offset(raw)
            current = self._topic(topic, partition)
            live = current is not None and current[0] == committed.topic_uuid
            rows.append(OffsetRow(topic, partition, committed, current[1] if live else None))
        return sorted(rows, key=lambda r: (r.topic, r.partition))

    def _topic(self, name: str, partition: int) -> tuple[bytes, int] | None:
        """(topic uuid, the partition's high watermark) of the topic's current generation
        (the uuid is partition 0's: the Kafka topic's, which committed offsets keep)."""
        key = (name, partition)
        if key not in self._topics:
            try:
                md = self.store.get_topic(TopicId(self.namespace, name))
                tid = TopicId.of_partition(self.namespace, name, partition)
                self._topics[key] = (bytes(md.topic_uuid), self.store.offsets(tid)[1])
            except (TopicNotFound, ValueError):
                self._topics[key] = None
        return self._topics[key]

    def summary(self, group_id: str) -> dict[str, Any]:
        rec = self.record(group_id)
        offsets = self.offsets(group_id)
        lags = [r.lag for r in offsets if r.lag is not None]
        return {
            "group": group_id,
            "state": _state(rec),
            "generation": rec.generation if rec else 0,
            "protocol_type": (rec.protocol_type or "") if rec else "",
            "protocol": (rec.protocol_name or "") if rec else "",
            "members": len(rec.members) if rec else 0,
            "offsets": len(offsets),
            "lag": sum(lags) if lags else None,
        }

    def describe(self, group_id: str) -> dict[str, Any] | None:
        rec = self.record(group_id)
        offsets = self.offsets(group_id)
        if rec is None and not offsets:
            return None
        doc = self.summary(group_id)
        doc["leader"] = rec.leader_id if rec else None
        doc["since"] = _iso(rec.state_ms) if rec else None
        doc["members"] = [
            {
                "member_id": m.member_id,
                "instance_id": m.instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "session_timeout_ms": m.session_timeout_ms,
                "assignment": _assignment(rec, m.assignment),
            }
            for m in (rec.members if rec else ())
        ]
        doc["offsets"] = [
            {
                "topic": r.topic,
                "partition": r.partition,
                "committed": r.committed.offset,
                "high_watermark": r.high_watermark,
                "lag": r.lag,
                "metadata": r.committed.metadata,
                "committed_at": _iso(r.committed.commit_ms),
                "stale": r.high_watermark is None,
            }
            for r in offsets
        ]
        return doc


def cmd_groups(args: argparse.Namespace) -> int:
    with open_for_reading(args.store) as store:
        view = GroupView(store, args.namespace)
        if args.groups_command == "list":
            return _list(view, args.json)
        return _describe(view, args.group, args.json)


def _list(view: GroupView, as_json: bool) -> int:
    rows = [view.summary(g) for g in view.group_ids()]
    if as_json:
        for row in rows:
            print(json.dumps(row))
        return 0
    header = ("GROUP", "STATE", "GENERATION", "MEMBERS", "PROTOCOL", "OFFSETS", "LAG")
    table = [header] + [
        (
            r["group"],
            r["state"],
            str(r["generation"]),
            str(r["members"]),
            "/".join(p for p in (r["protocol_type"], r["protocol"]) if p) or "-",
            str(r["offsets"]),
            "-" if r["lag"] is None else str(r["lag"]),
        )
        for r in rows
    ]
    _print_table(table)
    if not rows:
        print("(no consumer groups)")
    return 0


def _describe(view: GroupView, group_ids: list[str], as_json: bool) -> int:
    status = 0
    for group_id in group_ids:
        doc = view.describe(group_id)
        if doc is None:
            print(f"error: group {group_id!r} does not exist", file=sys.stderr)
            status = 1
            continue
        if as_json:
            print(json.dumps(doc))
            continue
        protocol = "/".join(p for p in (doc["protocol_type"], doc["protocol"]) if p) or "-"
        print(
            f"group {group_id}: {doc['state']}, generation {doc['generation']}, "
            f"protocol {protocol}, leader {doc['leader'] or '-'}"
            + (f" (as of the rebalance at {doc['since']})" if doc["since"] else "")
        )
        print(f"members: {len(doc['members'])}")
        for m in doc["members"]:
            static = f" instance={m['instance_id']}" if m["instance_id"] else ""
            print(
                f"  {m['member_id']}{static}  client={m['client_id']}  host={m['client_host']}"
                f"  session={m['session_timeout_ms']}ms  assignment={_show(m['assignment'])}"
            )
        print(f"offsets: {len(doc['offsets'])}")
        if doc["offsets"]:
            table = [("TOPIC", "PARTITION", "COMMITTED", "HIGH-WATERMARK", "LAG", "METADATA")]
            for o in doc["offsets"]:
                stale = o["stale"]
                table.append(
                    (
                        o["topic"],
                        str(o["partition"]),
                        str(o["committed"]),
                        "stale: topic deleted or recreated" if stale else str(o["high_watermark"]),
                        "-" if o["lag"] is None else str(o["lag"]),
                        o["metadata"] or "",
                    )
                )
            _print_table(table, indent="  ")
    return status


def run(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args))
    except (StorageError, CorruptState) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _state(rec: GroupRecord | None) -> str:
    return "Stable" if rec is not None and rec.members else "Empty"


def _assignment(rec: GroupRecord | None, raw: bytes) -> Any:
    if rec is not None and rec.protocol_type == CONSUMER:
        parts = assignment_partitions(raw)
        if parts is not None:
            return [f"{topic}-{p}" for topic, partitions in parts for p in partitions]
    return {"bytes": len(raw)}


def _show(assignment: Any) -> str:
    if isinstance(assignment, list):
        return ",".join(assignment) or "(none)"
    return f"{assignment['bytes']} bytes (not the consumer protocol)"


def _print_table(rows: list[tuple[str, ...]], indent: str = "") -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print(indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")
