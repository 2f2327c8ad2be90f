"""kill -9 in the middle of publishing: every acknowledged message survives with its offset.

A child process publishes from several threads and prints each acknowledgement (after
publish() returned, i.e. after the fsync). The parent SIGKILLs it mid-stream, reopens the
store and checks that every acknowledged message is there, at its offset, that offsets are
dense and that nothing is duplicated."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from tmsgate.storage import Message, TopicId, open_store

ACKS_BEFORE_KILL = 200
DEADLINE_S = 60.0

CHILD = textwrap.dedent(
    """
    import json, sys, threading
    from tmsgate.storage import Entry, TopicAlreadyExists, TopicId, open_store

    url, threads_n, tx_every, tag = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    pad = "x" * int(sys.argv[5])  # long enough, and payloads go to the value log
    if pad:
        import tmsgate.storage.leveldb
        tmsgate.storage.leveldb.SMALL_WRITE_MUTATIONS = 0  # even one message at a time
    store = open_store(url)
    topic = TopicId("crash", "t")
    try:
        store.create_topic(topic)
    except TopicAlreadyExists:
        pass
    out = threading.Lock()
    print(json.dumps({"ready": True}), flush=True)

    def run(i):
        j = 0
        while True:
            batch = [f"{tag}:{i}:{j}:{k}{pad}".encode() for k in range(1 + (i + j) % 4)]
            if tx_every and j % tx_every == 0:
                tx = store.transactions.start(timeout_s=3600)
                r = store.publish(topic, [Entry(b, meta=b"tx") for b in batch], tx=tx)
                store.transactions.commit(tx)
                wp = tx.write_pointer
            else:
                r = store.publish(topic, batch, state={("acks", str(i)): str(j).encode()})
                wp = None
            line = {"base": r.base_offset, "count": r.count, "id": r.first_id.hex(),
                    "payloads": [b.decode() for b in batch], "wp": wp, "thread": i, "round": j}
            with out:
                sys.stdout.write(json.dumps(line) + "\\n")
                sys.stdout.flush()
            j += 1

    for i in range(threads_n):
        threading.Thread(target=run, args=(i,), daemon=True).start()
    threading.Event().wait()
    """
)


def run_and_kill(
    url: str, threads_n: int, tx_every: int, tag: str = "r1", pad: int = 0
) -> list[dict]:
    """Start the publisher, read acknowledgements until enough, SIGKILL it; -> the acks."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, url, str(threads_n), str(tx_every), tag, str(pad)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    acks: list[dict] = []
    deadline = time.monotonic() + DEADLINE_S
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        while len(acks) < ACKS_BEFORE_KILL:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"only {len(acks)} acknowledgements within {DEADLINE_S} s")
            if not sel.select(timeout=left):
                continue
            line = proc.stdout.readline()
            if not line:
                pytest.fail(f"publisher exited ({proc.wait()}): {proc.stderr.read()[-2000:]}")
            doc = json.loads(line)
            if "base" in doc:
                acks.append(doc)
        os.kill(proc.pid, signal.SIGKILL)
        # acknowledgements already in the pipe were acknowledged before the kill too
        rest, _ = proc.communicate(timeout=DEADLINE_S)
    finally:
        sel.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    for line in rest.splitlines():
        try:
            doc = json.loads(line)
        except json.JSONDecodeError:  # a line cut short by the kill was never complete
            continue
        if "base" in doc:
            acks.append(doc)
    return acks


def read_everything(url: str) -> tuple[list[Message], tuple[int, int], dict]:
    store = open_store(url)
    try:
        topic = TopicId("crash", "t")
        earliest, nxt = store.offsets(topic)
        msgs: list[Message] = []
        pos = earliest
        while pos < nxt:
            res = store.read(topic, offset=pos, max_messages=1000)
            msgs.extend(res.messages)
            assert res.next_offset > pos
            pos = res.next_offset
        states = dict(store.scan_state("acks"))
        # the store is usable after the crash: the next publish continues densely
        assert store.publish(topic, [b"after-crash"]).base_offset == nxt
        return msgs, (earliest, nxt), states
    finally:
        store.close()


def check(acks: list[dict], msgs: list[Message], offsets: tuple[int, int]) -> None:
    earliest, nxt = offsets
    assert earliest == 0
    assert [m.offset for m in msgs] == list(range(nxt)), "offsets are not dense"
    by_offset = {m.offset: m for m in msgs}
    for ack in acks:
        for k, payload in enumerate(ack["payloads"]):
            m = by_offset.get(ack["base"] + k)
            assert m is not None, f"acknowledged message lost: {ack}"
            assert m.payload == payload.encode(), (ack, m)
            assert m.write_pointer == ack["wp"]
        assert by_offset[ack["base"]].id.hex() == ack["id"]
    bodies = [m.payload for m in msgs]
    assert len(set(bodies)) == len(bodies), "a message was stored twice"
    ids = [m.id for m in msgs]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    # acknowledged offsets were unique and are all inside the recovered range
    acked = [ack["base"] + k for ack in acks for k in range(ack["count"])]
    assert len(set(acked)) == len(acked)
    assert max(acked) < nxt


@pytest.mark.timeout(120)
@pytest.mark.parametrize("threads_n,tx_every,pad", [(1, 0, 0), (4, 5, 0), (4, 3, 600)])
def test_kill_9_while_publishing_loses_no_acknowledged_message(
    tmp_path, threads_n: int, tx_every: int, pad: int
) -> None:
    """pad=600: payloads live in the value log, so a kill can fall between its write and
    LevelDB's."""
    url = f"leveldb://{tmp_path / 'store'}"
    acks = run_and_kill(url, threads_n, tx_every, pad=pad)
    assert len(acks) >= ACKS_BEFORE_KILL
    msgs, offsets, states = read_everything(url)
    check(acks, msgs, offsets)
    # producer state written atomically with the data is at least as new as what was acked
    for ack in acks:
        if ack["wp"] is None:
            assert int(states[str(ack["thread"])]) >= ack["round"]


@pytest.mark.timeout(120)
def test_kill_9_twice_then_reopen(tmp_path) -> None:
    url = f"leveldb://{tmp_path / 'store'}"
    first = run_and_kill(url, 2, 0)
    second = run_and_kill(url, 2, 3, tag="r2", pad=1000)
    msgs, offsets, _ = read_everything(url)
    check(first + second, msgs, offsets)
    assert min(a["base"] for a in second) > max(a["base"] for a in first)
