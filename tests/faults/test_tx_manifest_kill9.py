"""kill -9 at every step of a commit with a manifest (what the Spark sink commits with):
all of it visible exactly once, or none of it.

Over HTTP, a keyed transaction stores three runs of records into topic A (one of them a
"failed task attempt" the manifest leaves out) and one into topic B, then commits with a
manifest naming the kept runs. The gateway runs with ``TMSGATE_FAULT_COMMIT_PAUSE=<step>``
(gateway/faults.py): the commit stops before that step, and the test kills the gateway with
SIGKILL while it waits there. After a restart (and a second one, to see the replay is
idempotent):

  * before ``record`` (no decision on disk): nothing of the transaction is visible, the key
    still answers the same transaction in progress, and committing it again works;
  * before any later step: A holds the kept records exactly once at offsets 0-2 (never the
    left-out run), B its one record, for read_committed and read_uncommitted readers, and
    the key answers ``committed``.
"""

from __future__ import annotations

import threading
import time
import uuid

import httpx
import pytest
from tmsgate.protocol.columns import MEDIA_TYPE, RecordColumns, decode_columns, encode_columns

pytestmark = pytest.mark.timeout(180)

STEPS = ["record", "parts", "partial", "commit", "done"]


def body(values: list[bytes]) -> bytes:
    n = len(values)
    return encode_columns(
        RecordColumns(
            offsets=[0] * n,
            timestamps=[-1] * n,
            write_pointers=[0] * n,
            keys=[None] * n,
            values=list(values),
            headers=[[] for _ in values],
        )
    )


def values_of(http: httpx.Client, topic: str, isolation: str) -> list[tuple[int, bytes | None]]:
    resp = http.post(
        f"/v1/namespaces/default/topics/{topic}/read",
        json={"offset": 0, "isolation": isolation},
    )
    assert resp.status_code == 200, resp.text
    cols = decode_columns(resp.content)
    return list(zip(cols.offsets, cols.values, strict=True))


@pytest.mark.parametrize("step", STEPS)
def test_kill9_between_manifest_commit_steps(fault_gateway, step, faults_report):
    gw = fault_gateway(env={"TMSGATE_FAULT_COMMIT_PAUSE": step})
    suffix = uuid.uuid4().hex[:8]
    topic_a, topic_b, key = f"a-{suffix}", f"b-{suffix}", f"spark/{suffix}/3"
    http = httpx.Client(base_url=gw.http_url, timeout=30)
    for topic in (topic_a, topic_b):
        assert http.put(f"/v1/namespaces/default/topics/{topic}").status_code == 200
    wp = http.post("/v1/transactions", json={"key": key, "timeoutSeconds": 600}).json()[
        "writePointer"
    ]

    def store(topic: str, values: list[bytes]) -> dict[str, int]:
        resp = http.post(
            f"/v1/namespaces/default/topics/{topic}/store",
            content=body(values),
            headers={"content-type": MEDIA_TYPE, "x-transaction-write-pointer": str(wp)},
        )
        assert resp.status_code == 200, resp.text
        return resp.json()

    kept_a = [store(topic_a, [b"a1", b"a2"]), None, store(topic_a, [b"a3"])]
    kept_a[1] = store(topic_a, [b"failed-attempt"])
    manifest = {
        "publish": [
            {"topic": topic_a, "stored": [kept_a[0], kept_a[2]]},
            {"topic": topic_b, "stored": [store(topic_b, [b"b1"])]},
        ]
    }
    outcome: list[object] = []

    def commit() -> None:
        try:
            with httpx.Client(base_url=gw.http_url, timeout=60) as client:
                outcome.append(client.post(f"/v1/transactions/{wp}/commit", json=manifest))
        except httpx.HTTPError as exc:  # the gateway was killed under it
            outcome.append(type(exc).__name__)

    committer = threading.Thread(target=commit, name="commit", daemon=True)
    committer.start()
    marker = f"fault: commit paused before {step}"
    deadline = time.monotonic() + 20
    while marker not in gw.log_tail(400) and time.monotonic() < deadline:
        assert gw.alive(), gw.log_tail()
        time.sleep(0.05)  # polling another process's log
    assert marker in gw.log_tail(400), gw.log_tail()
    gw.kill9()
    committer.join(15)
    gw.extra_env = {}  # restart without the fault point: the replay must run through
    gw.start()
    decided = step != "record"
    want_a = [(0, b"a1"), (1, b"a2"), (2, b"a3")] if decided else []
    want_b = [(0, b"b1")] if decided else []
    for restart in range(2):
        http = httpx.Client(base_url=gw.http_url, timeout=30)
        for isolation in ("read_committed", "read_uncommitted"):
            assert values_of(http, topic_a, isolation) == want_a, (step, restart, isolation)
            assert values_of(http, topic_b, isolation) == want_b, (step, restart, isolation)
        again = http.post("/v1/transactions", json={"key": key}).json()
        assert again["writePointer"] == wp
        assert again["state"] == ("committed" if decided else "in_progress")
        if restart == 0:
            gw.crash_restart()
    if not decided:  # the transaction lives on: its owner commits it now
        resp = http.post(f"/v1/transactions/{wp}/commit", json=manifest)
        assert resp.status_code == 200, resp.text
        assert values_of(http, topic_a, "read_committed") == [(0, b"a1"), (1, b"a2"), (2, b"a3")]
    faults_report(step=step, decided=decided, first_commit=str(outcome[:1])[:60])
