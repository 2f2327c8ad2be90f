"""kill -9 under a stream of HTTP transactions: the transaction service's state survives.

Four clients loop start -> transactional publish -> commit or abort over HTTP while the
gateway is killed with SIGKILL and restarted, again and again. Afterwards, for every
transaction whose answer the client received:
  - an acknowledged commit stays committed, and its message is visible to a transactional
    reader exactly once;
  - an acknowledged abort stays invalid (aborted), and its message is never visible;
  - a transaction cut short by a kill is in one of the legal states (still in progress
    until someone ends it), and a transactional reader sees its message only if it reads
    as committed;
and write pointers never repeat or go back across restarts.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field

import httpx

from faults.conftest import scale

TOPIC = "tx-kill9"
BASE = f"/v1/namespaces/default/topics/{TOPIC}"
TIMEOUT_S = 3600  # open transactions cut short by a kill must not time out mid-test


@dataclass
class Ledger:
    # A condition: the test waits on it until enough transactions were started.
    lock: threading.Condition = field(default_factory=threading.Condition)
    started: list[int] = field(default_factory=list)  # in the order the answers came
    committed: set[int] = field(default_factory=set)
    aborted: set[int] = field(default_factory=set)
    published: set[int] = field(default_factory=set)
    errors: int = 0


def client_loop(url: str, ledger: Ledger, stop: threading.Event, seed: int) -> None:
    rng = random.Random(seed)
    with httpx.Client(base_url=url, timeout=10) as http:
        while not stop.is_set():
            try:
                answer = http.post("/v1/transactions", json={"timeoutSeconds": TIMEOUT_S})
                answer.raise_for_status()
                wp = answer.json()["writePointer"]
                with ledger.lock:
                    ledger.started.append(wp)
                    ledger.lock.notify_all()
                body = {"transactionWritePointer": wp, "messages": [str(wp)]}
                http.post(f"{BASE}/publish", json=body).raise_for_status()
                with ledger.lock:
                    ledger.published.add(wp)
                outcome = "commit" if rng.random() < 0.7 else "abort"
                http.post(f"/v1/transactions/{wp}/{outcome}").raise_for_status()
                with ledger.lock:
                    (ledger.committed if outcome == "commit" else ledger.aborted).add(wp)
            except (httpx.HTTPError, KeyError):
                with ledger.lock:
                    ledger.errors += 1
                stop.wait(0.05)  # the gateway is down or restarting: try again shortly


def visible_payloads(http: httpx.Client) -> list[int]:
    snapshot = http.post("/v1/transactions/snapshot").json()["encoded"]
    out: list[int] = []
    start = None
    while True:
        request = {"startFrom": start, "inclusive": False, "limit": 1000, "transaction": snapshot}
        if start is None:
            request["inclusive"] = True
        page = http.post(f"{BASE}/poll", json=request)
        page.raise_for_status()
        messages = page.json()
        if not messages:
            return out
        out.extend(int(m["payload"]) for m in messages)
        start = messages[-1]["id"]


def test_transaction_state_survives_kill9(fault_gateway, faults_report) -> None:
    gw = fault_gateway()
    httpx.put(f"{gw.http_url}{BASE}").raise_for_status()
    ledger = Ledger()
    stop = threading.Event()
    clients = [
        threading.Thread(target=client_loop, args=(gw.http_url, ledger, stop, i), daemon=True)
        for i in range(4)
    ]
    for c in clients:
        c.start()
    rng = random.Random(7)
    cycles = scale(5, 60)
    answered_before_kill: list[int] = []  # how many starts were answered when it died
    try:
        for _ in range(cycles):
            # Let some transactions through, then kill wherever the clients are.
            target = len(ledger.started) + rng.randint(5, 40)
            with ledger.lock:
                assert ledger.lock.wait_for(lambda t=target: len(ledger.started) >= t, 60)
            gw.kill9()
            with ledger.lock:  # nothing answers now: the split is exact
                answered_before_kill.append(len(ledger.started))
            gw.start()
    finally:
        stop.set()
        for c in clients:
            c.join(30)

    with httpx.Client(base_url=gw.http_url, timeout=30) as http:
        states = {wp: http.get(f"/v1/transactions/{wp}").json()["state"] for wp in ledger.started}
        listed = http.get("/v1/transactions").json()
        # A transactional reader stops at the first entry still in progress (the seed), so
        # end the ones the kills cut short first, as a client's recovery would.
        for wp in ledger.started:
            if states[wp] == "in_progress":
                http.post(f"/v1/transactions/{wp}/abort").raise_for_status()
        visible = visible_payloads(http)

    cut_short = set(ledger.started) - ledger.committed - ledger.aborted
    faults_report(
        kills=gw.kills,
        started=len(ledger.started),
        committed=len(ledger.committed),
        aborted=len(ledger.aborted),
        cut_short=len(cut_short),
        client_errors=ledger.errors,
        visible=len(visible),
    )
    assert len(ledger.committed) > cycles and ledger.aborted, "too little got through"
    assert len(set(ledger.started)) == len(ledger.started), "a write pointer was reissued"
    # Pointers issued after a kill are above every pointer issued before it.
    for cut in answered_before_kill:
        before, after = ledger.started[:cut], ledger.started[cut:]
        if before and after:
            assert min(after) > max(before)
    assert all(states[wp] == "committed" for wp in ledger.committed)
    assert all(states[wp] in ("aborted", "invalid") for wp in ledger.aborted)
    assert all(states[wp] in ("in_progress", "committed", "invalid") for wp in cut_short)
    in_progress = {row["writePointer"] for row in listed["inProgress"]}
    assert {wp for wp in cut_short if states[wp] == "in_progress"} <= in_progress
    # Each message's transaction decides whether a transactional reader sees it.
    assert len(visible) == len(set(visible)), "a message was visible twice"
    should_see = {wp for wp in ledger.started if states[wp] == "committed"}
    assert set(visible) == should_see
    assert not set(visible) & ledger.aborted
