"""``tmsgate users``: the SASL users of a store (gateway/users.py) and their bearer
tokens for the HTTP API (gateway/tokens.py).

    tmsgate users add NAME [--mechanism SCRAM-SHA-256|SCRAM-SHA-512] [--iterations N]
                      --password-stdin [--store URL]
    tmsgate users list [--store URL] [--json]
    tmsgate users delete NAME [--mechanism M] [--store URL]
    tmsgate users token NAME [--ttl-days N] [--store URL]    prints a new token
    tmsgate users token NAME --revoke ID | --revoke-all [--store URL]
    tmsgate users tokens [NAME] [--store URL] [--json]       ids and expiry, never tokens

A user left without a credential is gone, and its tokens are deleted with it. They open the
store itself, so the gateway that serves it must be stopped (LevelDB lets one process at a
time open it); ``list`` and ``tokens`` read a point-in-time copy while it runs."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from tmsgate.storage import BackendError, open_store

from .inspect_cli import DEFAULT_STORE, open_for_reading
from .tokens import DEFAULT_TTL_DAYS, Tokens
from .users import DEFAULT_ITERATIONS, MECHANISMS, UserError, Users


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("users", help="SASL users (SCRAM credentials in the store)")
    actions = p.add_subparsers(dest="users_command", required=True)

    def store_option(q: argparse.ArgumentParser) -> None:
        q.add_argument(
            "--store",
            default=os.environ.get("TMSGATE_STORE", DEFAULT_STORE),
            help="store URL (default: $TMSGATE_STORE or %(default)s), as `tmsgate serve`",
        )

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
    token = actions.add_parser("token", help="a new bearer token for the HTTP API, or revoke")
    token.add_argument("name")
    token.add_argument("--ttl-days", type=float, default=DEFAULT_TTL_DAYS)
    revoke = token.add_mutually_exclusive_group()
    revoke.add_argument("--revoke", metavar="ID", help="revoke the token of this id")
    revoke.add_argument("--revoke-all", action="store_true", help="revoke all the user's tokens")
    store_option(token)
    tokens = actions.add_parser("tokens", help="bearer tokens (ids and expiry) of a user or all")
    tokens.add_argument("name", nargs="?")
    tokens.add_argument("--json", action="store_true")
    store_option(tokens)


def run(args: argparse.Namespace) -> int:
    if args.users_command == "tokens":
        with open_for_reading(args.store) as store:
            listed = Tokens(store).list(args.name)
        for t in listed:
            doc = {"id": t.id, "user": t.user, "createdMs": t.created_ms, "expiresMs": t.expires_ms}
            text = f"{t.id}\t{t.user}\tcreated {_when(t.created_ms)}\texpires {_when(t.expires_ms)}"
            print(json.dumps(doc) if args.json else text)
        return 0
    if args.users_command == "list":
        with open_for_reading(args.store) as store:
            users = Users(store).list()
        if args.json:
            print(json.dumps(users, sort_keys=True))
            return 0
        if not users:
            print(
                f"no SCRAM users in {args.store} (add one: tmsgate users add NAME --password-stdin)"
            )
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
        if args.users_command == "token":
            return _token(Tokens(store), args)
        if not users.delete(args.name, args.mechanism):
            print(f"no such user or credential: {args.name}", file=sys.stderr)
            return 1
        # A user with no credential left is gone: its tokens go too (a user of that name
        # added later must not inherit them).
        revoked = [] if users.entries(args.name) else Tokens(store).revoke(args.name)
        print(
            f"deleted {args.name}"
            + (f" ({args.mechanism})" if args.mechanism else "")
            + (f" and its {len(revoked)} tokens" if revoked else "")
        )
        return 0
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        store.close()


def _token(tokens: Tokens, args: argparse.Namespace) -> int:
    if args.revoke or args.revoke_all:
        gone = tokens.revoke(args.name, None if args.revoke_all else args.revoke)
        if args.revoke and not gone:
            print(f"no token {args.revoke} of user {args.name}", file=sys.stderr)
            return 1
        print(f"revoked {len(gone)} tokens of {args.name}: " + " ".join(t.id for t in gone))
        return 0
    token, info = tokens.issue(args.name, args.ttl_days)
    print(token)  # the only copy: the store keeps its SHA-256
    print(f"token {info.id} of {info.user}, expires {_when(info.expires_ms)}", file=sys.stderr)
    return 0


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ms / 1000))
