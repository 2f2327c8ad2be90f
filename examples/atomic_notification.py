"""Atomic notification: change a row in your own database and publish a notification
about it, so that both happen or neither does, across crashes.

The application's SQLite database is the commit decision (the seed's first use case: "a
state transition and the notification about that state change happen consistently"):

1. start a TMS transaction and record its write pointer in ``tms_intents`` (its own
   SQLite transaction), so recover() knows the transaction is ours;
2. publish the notification under the transaction (invisible to transactional readers
   until the commit) and keep the rollback details;
3. in ONE SQLite transaction, change the row and write ``tms_pending`` (write pointer,
   topic, payload): committing it is the decision to commit;
4. commit the TMS transaction, then forget the write pointer.

A crash before step 3 leaves no decision: recover() rolls back and aborts. A crash after
it leaves a decision: recover() commits; if the transaction timed out meanwhile (invalid),
it publishes the notification again in a new transaction, moving the decision to it the
same way, so exactly one notification is ever visible.

    python examples/atomic_notification.py --url http://127.0.0.1:8080 --db shop.db setup 3
    python examples/atomic_notification.py --url ... --db shop.db ship 2
    python examples/atomic_notification.py --url ... --db shop.db recover
    python examples/atomic_notification.py --url ... --db shop.db notifications

TMS_EXAMPLE_KILL_AT=before_db_commit|after_db_commit|after_tx_commit makes ``ship`` send
SIGKILL to itself at that point, to try the recovery.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sqlite3
import sys
from collections.abc import Callable

from tmsgate.client import (
    Encoding,
    MessagingClient,
    RollbackDetail,
    TmsError,
    TopicExists,
    TransactionConflict,
    TxState,
)

TOPIC = "order-events"
TX_TIMEOUT_S = 60.0
KILL_POINTS = ("before_db_commit", "after_db_commit", "after_tx_commit")

SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, status TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tms_intents (write_pointer INTEGER PRIMARY KEY);
CREATE TABLE IF NOT EXISTS tms_rollbacks (
    write_pointer INTEGER NOT NULL, topic TEXT NOT NULL, encoding TEXT NOT NULL, raw BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS tms_pending (
    write_pointer INTEGER PRIMARY KEY, topic TEXT NOT NULL, payload BLOB NOT NULL
);
"""

# The decisive SQLite transaction: given the connection and the write pointer, it makes
# the application's change and writes the tms_pending row.
Change = Callable[[sqlite3.Connection, int], None]


def kill_point(name: str) -> None:
    if os.environ.get("TMS_EXAMPLE_KILL_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


def open_db(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)  # explicit BEGIN/COMMIT below
    db.execute("PRAGMA synchronous = FULL")  # a commit is on disk before we go on
    db.executescript(SCHEMA)
    return db


class Atomic:
    """Runs ``BEGIN IMMEDIATE ... COMMIT`` (``ROLLBACK`` on an exception)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.db.execute("ROLLBACK" if exc_type is not None else "COMMIT")


def publish_decided(
    db: sqlite3.Connection, tms: MessagingClient, topic: str, payload: bytes, change: Change
) -> int:
    """Steps 1-4 above; -> the write pointer the notification was committed under."""
    with tms.transaction(timeout_s=TX_TIMEOUT_S) as tx:
        wp = tx.write_pointer
        with Atomic(db):
            db.execute("INSERT INTO tms_intents VALUES (?)", (wp,))
        tx.publish(topic, payload)
        details = tx.prepare()  # in the topic now, under the transaction
        with Atomic(db):
            db.executemany(
                "INSERT INTO tms_rollbacks VALUES (?, ?, ?, ?)",
                [(wp, d.topic, str(d.encoding), d.raw) for d in details],
            )
        kill_point("before_db_commit")
        with Atomic(db):  # the decision: the change and the pending row, together
            change(db, wp)
        kill_point("after_db_commit")
    kill_point("after_tx_commit")
    forget(db, wp)
    return wp


def ship(db: sqlite3.Connection, tms: MessagingClient, order_id: int) -> int:
    payload = json.dumps({"order": order_id, "status": "shipped"}).encode()

    def change(conn: sqlite3.Connection, wp: int) -> None:
        cur = conn.execute(
            "UPDATE orders SET status = 'shipped' WHERE id = ? AND status != 'shipped'",
            (order_id,),
        )
        if cur.rowcount != 1:
            raise ValueError(f"order {order_id} does not exist or has shipped already")
        conn.execute("INSERT INTO tms_pending VALUES (?, ?, ?)", (wp, TOPIC, payload))

    return publish_decided(db, tms, TOPIC, payload, change)


def forget(db: sqlite3.Connection, wp: int) -> None:
    with Atomic(db):
        for table in ("tms_pending", "tms_rollbacks", "tms_intents"):
            db.execute(f"DELETE FROM {table} WHERE write_pointer = ?", (wp,))


def recover(db: sqlite3.Connection, tms: MessagingClient) -> dict[int, str]:
    """Resolve every transaction this application started and did not finish, by its
    own record; -> {write pointer: what was done}. Safe to run again after a crash."""
    outcomes: dict[int, str] = {}
    for (wp,) in db.execute("SELECT write_pointer FROM tms_intents ORDER BY 1").fetchall():
        pending = db.execute(
            "SELECT topic, payload FROM tms_pending WHERE write_pointer = ?", (wp,)
        ).fetchone()
        state = tms.transactions.state(wp).state
        if state is TxState.IN_PROGRESS and pending:
            state = _commit(tms, wp)
            outcomes[wp] = "committed" if state is TxState.COMMITTED else "republished"
        elif state is TxState.IN_PROGRESS:
            _roll_back(db, tms, wp)
            outcomes[wp] = "rolled back"
        elif pending and state is not TxState.COMMITTED:
            outcomes[wp] = "republished"  # decided, but the transaction timed out
        else:
            outcomes[wp] = f"already {state}"
        if outcomes[wp] == "republished":
            _republish(db, tms, wp, pending[0], pending[1])
        else:
            forget(db, wp)
    return outcomes


def _commit(tms: MessagingClient, wp: int) -> TxState:
    try:
        return tms.transactions.commit(wp).state
    except TransactionConflict as exc:  # it timed out (invalid) since we looked
        return TxState(exc.state or "unknown")


def _roll_back(db: sqlite3.Connection, tms: MessagingClient, wp: int) -> None:
    rows = db.execute(
        "SELECT topic, encoding, raw FROM tms_rollbacks WHERE write_pointer = ?", (wp,)
    ).fetchall()
    try:
        for topic, encoding, raw in rows:
            tms.rollback(topic, RollbackDetail(topic, raw, Encoding(encoding)))
        tms.transactions.abort(wp)
    except TransactionConflict:
        # Timed out meanwhile: invalid, so its messages stay invisible all the same.
        pass


def _republish(
    db: sqlite3.Connection, tms: MessagingClient, old_wp: int, topic: str, payload: bytes
) -> int:
    """The notification again, under a new transaction; moving the tms_pending row to it
    is the decision, so a crash in here leaves one of the two transactions decided."""

    def move(conn: sqlite3.Connection, wp: int) -> None:
        conn.execute(
            "UPDATE tms_pending SET write_pointer = ? WHERE write_pointer = ?", (wp, old_wp)
        )
        conn.execute("DELETE FROM tms_rollbacks WHERE write_pointer = ?", (old_wp,))
        conn.execute("DELETE FROM tms_intents WHERE write_pointer = ?", (old_wp,))

    return publish_decided(db, tms, topic, payload, move)


def setup(db: sqlite3.Connection, tms: MessagingClient, orders: int) -> None:
    with contextlib.suppress(TopicExists):
        tms.create_topic(TOPIC)
    with Atomic(db):
        db.executemany(
            "INSERT OR IGNORE INTO orders VALUES (?, 'new')", [(i,) for i in range(1, orders + 1)]
        )


def notifications(tms: MessagingClient) -> list[dict[str, object]]:
    """What a transactional reader sees now: committed notifications only."""
    return [json.loads(m.payload) for m in tms.fetch(TOPIC, read_committed=True)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="the gateway's HTTP API")
    parser.add_argument("--db", required=True, help="the application's SQLite file")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("setup").add_argument("orders", type=int)
    sub.add_parser("ship").add_argument("order", type=int)
    sub.add_parser("recover")
    sub.add_parser("notifications")
    args = parser.parse_args(argv)
    db = open_db(args.db)
    with MessagingClient(args.url) as tms:
        try:
            if args.command == "setup":
                setup(db, tms, args.orders)
            elif args.command == "ship":
                print(json.dumps({"write_pointer": ship(db, tms, args.order)}))
            elif args.command == "recover":
                print(json.dumps({str(k): v for k, v in recover(db, tms).items()}))
            else:
                print(json.dumps(notifications(tms)))
        except (TmsError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
