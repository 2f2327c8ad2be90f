"""``tmsgate users``: the SASL users of a store (gateway/users.py).

    tmsgate users add NAME [--mechanism SCRAM-SHA-256|SCRAM-SHA-512] [--iterations N]
                      --password-stdin [--store URL]
    tmsgate users list [--store URL] [--json]
    tmsgate users delete NAME [--mechanism M] [--store URL]

They open the store itself, so the gateway that serves it must be stopped (LevelDB lets one
process at a time open it); ``list`` reads a point-in-time copy while it runs."""

from __future__ import annotations

import argparse
import json
import sys

from tmsgate.storage import BackendError, open_store

from .inspect_cli import DEFAULT_STORE, open_for_reading
from .users import DEFAULT_ITERATIONS, MECHANISMS, UserError, Users


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("users", help="SASL users (SCRAM credentials in the store)")
    actions = p.add_subparsers(dest="users_command", required=True)

    def store_option(q: argparse.ArgumentParser) -> None:
        q.add_argument("--store", default=DEFAULT_STORE, help="store URL (default: %(default)s)")

    add = actions.add_parser("add", help="add a user, or set its password for a mechanism")
    add.add_argument("name")
    add.add_argument(
        "--mechanism",
        action="append",
        choices=MECHANISMS,
        help="repeat for both; default: both SCRAM mechanisms",
    )
    add.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS)
    add.add_argument(
        "--password-stdin",
        action="store_true",
        required=True,
        help="read the password from the first line of standard input",
    )
    store_option(add)
    listing = actions.add_parser("list", help="users and their mechanisms")
    listing.add_argument("--json", action="store_true")
    store_option(listing)
    delete = actions.add_parser("delete", help="delete a user (or one mechanism's credential)")
    delete.add_argument("name")
    delete.add_argument("--mechanism", choices=MECHANISMS)
    store_option(delete)


def run(args: argparse.Namespace) -> int:
    if args.users_command == "list":
        with open_for_reading(args.store) as store:
            users = Users(store).list()
        if args.json:
            print(json.dumps(users, sort_keys=True))
            return 0
        for name, mechs in sorted(users.items()):
            print(f"{name}\t" + ", ".join(f"{m} ({i} iterations)" for m, i in mechs.items()))
        return 0
    try:
        store = open_store(args.store)
    except BackendError as exc:
        print(
            f"cannot open {args.store} to change users ({exc}): stop the gateway that "
            "serves it first",
            file=sys.stderr,
        )
        return 1
    try:
        users = Users(store)
        if args.users_command == "add":
            password = sys.stdin.readline().rstrip("\r\n")
            for mechanism in args.mechanism or MECHANISMS:
                users.set_password(args.name, mechanism, password, args.iterations)
            print(f"user {args.name}: {', '.join(args.mechanism or MECHANISMS)}")
            return 0
        if not users.delete(args.name, args.mechanism):
            print(f"no such user or credential: {args.name}", file=sys.stderr)
            return 1
        print(f"deleted {args.name}" + (f" ({args.mechanism})" if args.mechanism else ""))
        return 0
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        store.close()
