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
import json
import sys
from typing import Any

from tmsgate.storage import StorageError

from .inspect_cli import common_arguments, open_for_reading
from .kafka.groups.codec import CorruptState
from .views import GroupsView


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


def cmd_groups(args: argparse.Namespace) -> int:
    with open_for_reading(args.store) as store:
        view = GroupsView(store, args.namespace)
        if args.groups_command == "list":
            return _list(view, args.json)
        return _describe(view, args.group, args.json)


def _list(view: GroupsView, as_json: bool) -> int:
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


def _describe(view: GroupsView, group_ids: list[str], as_json: bool) -> int:
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


def _show(assignment: Any) -> str:
    if isinstance(assignment, list):
        return ",".join(assignment) or "(none)"
    return f"{assignment['bytes']} bytes (not the consumer protocol)"


def _print_table(rows: list[tuple[str, ...]], indent: str = "") -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print(indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
