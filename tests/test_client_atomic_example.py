"""examples/atomic_notification.py as a real process against a live gateway, SIGKILLed at
each step of its flow, then recovered: every committed state change has exactly one
notification visible to a transactional reader, and a change that did not commit has none.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gateway_harness import GatewayThread
from tmsgate.client import MessagingClient, TxState

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "atomic_notification.py"
TOPIC = "order-events"


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[GatewayThread]:
    # One gateway per test: the example uses one fixed topic.
    g = GatewayThread(f"leveldb://{tmp_path / 'store'}", http=True).start()
    try:
        yield g
    finally:
        g.stop()


class App:
    """The example's command line, run as a child process."""

    def __init__(self, gw: GatewayThread, db: Path) -> None:
        self.url = gw.http_url
        self.db = db

    def run(self, *args: str, kill_at: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {"TMS_EXAMPLE_KILL_AT": kill_at} if kill_at else {}
        return subprocess.run(
            [sys.executable, str(EXAMPLE), "--url", self.url, "--db", str(self.db), *args],
            capture_output=True,
            text=True,
            timeout=120,
            env={**_inherited_env(), **env},
        )

    def ok(self, *args: str) -> Any:
        done = self.run(*args)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout) if done.stdout.strip() else None

    def statuses(self) -> dict[int, str]:
        with sqlite3.connect(self.db) as db:
            return dict(db.execute("SELECT id, status FROM orders").fetchall())

    def open_intents(self) -> list[int]:
        with sqlite3.connect(self.db) as db:
            return [wp for (wp,) in db.execute("SELECT write_pointer FROM tms_intents")]


def _inherited_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "TMS_EXAMPLE_KILL_AT"}


def visible(tms: MessagingClient) -> Counter[int]:
    """Notifications per order, as a transactional reader (a fresh snapshot) sees them."""
    snapshot = tms.transactions.snapshot()
    messages = list(tms.fetch(TOPIC, tx=snapshot))
    return Counter(json.loads(m.payload)["order"] for m in messages)


def assert_consistent(app: App, tms: MessagingClient) -> None:
    shipped = {order for order, status in app.statuses().items() if status == "shipped"}
    seen = visible(tms)
    assert set(seen) == shipped, f"notified {dict(seen)}, shipped {shipped}"
    assert all(count == 1 for count in seen.values()), f"duplicates: {dict(seen)}"
    assert app.open_intents() == []


@pytest.mark.parametrize(
    ("kill_at", "shipped"),
    [
        (None, True),
        ("before_db_commit", False),
        ("after_db_commit", True),
        ("after_tx_commit", True),
    ],
)
def test_killed_at_each_step_then_recovered(
    gw: GatewayThread, tmp_path: Path, kill_at: str | None, shipped: bool
) -> None:
    app = App(gw, tmp_path / "shop.db")
    app.ok("setup", "3")
    app.ok("ship", "1")
    done = app.run("ship", "2", kill_at=kill_at)
    if kill_at is None:
        assert done.returncode == 0, done.stderr
    else:
        assert done.returncode == -signal.SIGKILL, done.stderr
    with MessagingClient(app.url) as tms:
        if kill_at in ("before_db_commit", "after_db_commit"):
            # In doubt: published, not committed; a transactional reader waits at it.
            (wp,) = app.open_intents()
            assert tms.transactions.state(wp).state is TxState.IN_PROGRESS
            assert visible(tms) == Counter({1: 1})
        outcomes = app.ok("recover")
        expected = {
            None: [],
            "before_db_commit": ["rolled back"],
            "after_db_commit": ["committed"],
            "after_tx_commit": ["already committed"],
        }[kill_at]
        assert list(outcomes.values()) == expected
        assert (app.statuses()[2] == "shipped") is shipped
        assert_consistent(app, tms)
        # The application goes on, and recovery again finds nothing to do.
        app.ok("ship", "3")
        assert app.ok("recover") == {}
        assert_consistent(app, tms)
        assert app.statuses() == {1: "shipped", 2: "shipped" if shipped else "new", 3: "shipped"}
        assert app.ok("notifications") == [
            {"order": o, "status": "shipped"} for o in ([1, 2, 3] if shipped else [1, 3])
        ]


def test_decided_but_timed_out_is_published_again(gw: GatewayThread, tmp_path: Path) -> None:
    """The row committed, then the transaction expired (invalid) before recovery: the
    notification is published again under a new transaction, once."""
    app = App(gw, tmp_path / "shop.db")
    app.ok("setup", "2")
    assert app.run("ship", "1", kill_at="after_db_commit").returncode == -signal.SIGKILL
    (wp,) = app.open_intents()
    with MessagingClient(app.url) as tms:
        tms.transactions.invalidate(wp)  # what the transaction timeout does
        assert visible(tms) == Counter()
        assert list(app.ok("recover").values()) == ["republished"]
        assert_consistent(app, tms)
        assert visible(tms) == Counter({1: 1})
        assert app.ok("recover") == {}


def test_failed_change_publishes_nothing(gw: GatewayThread, tmp_path: Path) -> None:
    """Shipping twice: the second change is refused inside the SQLite transaction, so the
    TMS transaction is rolled back and aborted; recovery only clears the record."""
    app = App(gw, tmp_path / "shop.db")
    app.ok("setup", "1")
    app.ok("ship", "1")
    again = app.run("ship", "1")
    assert again.returncode == 1 and "shipped already" in again.stderr
    with MessagingClient(app.url) as tms:
        assert visible(tms) == Counter({1: 1})
        outcomes = list(app.ok("recover").values())
        assert outcomes in (["already aborted"], ["already invalid"])
        assert_consistent(app, tms)
