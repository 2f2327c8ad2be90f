"""A write one worker sends on to the worker that leads its topic (gateway/http/forward.py),
and the leader killed -9 after the request reached it: the client must be told the outcome
is unknown (504 ``outcome_unknown``), never 421 ``not_leader``.

A 421 says "not stored: send it to the leader", and a client doing so stores it again if the
leader had written it before it died: the history checker found a TMS transaction's record
twice that way (compat-tests/test_txn_history_workers.py, 2026-11-29). Here the leader is
stopped at the write itself, deterministically: ``TMSGATE_FAULT_TXN_RECORDS_PAUSE`` holds
its writer before any PayloadTable row (gateway/faults.py), and an HTTP ``store`` writes
PayloadTable rows. The request goes to the other worker's own HTTP listener, so it is the
one that sends it on (the shared port would leave the choice to the kernel).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import httpx
from test_workers import NAMESPACE, WorkersGateway, last_option, leaders, node_id_of
from tmsgate.gateway.faults import TXN_RECORDS_PAUSE

PAUSED = "fault: records write paused"


def wait_for_log(gw: WorkersGateway, text: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in gw.log_path.read_text(errors="replace"):
        assert time.monotonic() < deadline, f"no {text!r} in the log\n{gw.log_tail()}"
        time.sleep(0.1)


def test_a_relayed_write_whose_leader_dies_is_answered_504_not_421(tmp_path: Path) -> None:
    gw = WorkersGateway(tmp_path, env={TXN_RECORDS_PAUSE: "1"}).start()
    try:
        topics = f"{gw.http_url}/v1/namespaces/{NAMESPACE}/topics"
        assert httpx.put(f"{topics}/relayed", timeout=30).status_code == 200
        leader_node = leaders(gw.bootstrap, "relayed", partitions=1)[0]
        workers = gw.children()
        leader = next(pid for pid in workers if node_id_of(pid) == leader_node)
        (other,) = workers - {leader}
        other_url = last_option(other, "--http-advertised")
        started = httpx.post(f"{gw.http_url}/v1/transactions", json={}, timeout=30)
        assert started.status_code == 200, started.text
        wp = started.json()["writePointer"]

        answers: list[httpx.Response] = []
        store = threading.Thread(
            target=lambda: answers.append(
                httpx.post(
                    f"{other_url}/v1/namespaces/{NAMESPACE}/topics/relayed/store",
                    json={"transactionWritePointer": wp, "messages": ["once"]},
                    timeout=60,
                )
            )
        )
        store.start()
        wait_for_log(gw, PAUSED)  # the leader has the request, its writer is held
        os.kill(leader, signal.SIGKILL)
        store.join(90)
        assert answers, "the store was not answered"
        answer = answers[0]
        assert answer.status_code == 504, answer.text
        assert answer.json()["error"] == "outcome_unknown", answer.text
        assert "may have been applied" in answer.json()["message"]

        # The others are served on: the parent starts the leader again, and a publish
        # (MessageTable rows only: the fault holds PayloadTable writes) is stored.
        gw.wait_ready(not_these={leader})
        deadline = time.monotonic() + 30
        while True:
            r = httpx.post(f"{topics}/relayed/publish", json={"messages": ["after"]}, timeout=30)
            if r.status_code != 421:
                break
            assert time.monotonic() < deadline, r.text
            time.sleep(0.2)
        assert r.status_code == 200, r.text
    finally:
        gw.stop()
