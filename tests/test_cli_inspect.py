"""`tmsgate topics|inspect|tx` against a real store, run as the installed console script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tmsgate.storage import Entry, TopicId, open_store

TMSGATE = str(Path(sys.executable).with_name("tmsgate"))


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TMSGATE, *args], capture_output=True, text=True, timeout=60, check=False)


def test_topics_inspect_and_tx(tmp_path: Path) -> None:
    url = f"leveldb://{tmp_path / 'store'}"
    t = TopicId("default", "audit")
    with open_store(url) as store:
        store.create_topic(t, {"ttl": "3600"})
        first = store.publish(t, [b"one", Entry(b"two", meta=b"m")])
        tx = store.transactions.start(timeout_s=600)
        store.publish(t, [b"pending"], tx=tx)
        store.publish(t, [b"three"])

    out = run("topics", "list", "--store", url)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["audit"]

    out = run("topics", "describe", "audit", "--store", url, "--json")
    doc = json.loads(out.stdout)
    assert doc["properties"] == {"ttl": "3600"}
    assert (doc["earliest_offset"], doc["next_offset"], doc["last_stable_offset"]) == (0, 4, 2)

    out = run("inspect", "audit", "--store", url, "--from", "1", "--json")
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(r["offset"], r["payload"]) for r in rows] == [(1, "two"), (2, "pending"), (3, "three")]

    # a transactional view stops at the transaction still in progress
    out = run("inspect", "audit", "--store", url, "--tx")
    assert "one" in out.stdout and "pending" not in out.stdout and "held" in out.stdout

    out = run("inspect", "audit", "--store", url, "--from", first.last_id.hex(), "--json")
    assert [json.loads(line)["offset"] for line in out.stdout.splitlines()] == [1, 2, 3]

    out = run("tx", "list", "--store", url, "--json")
    assert list(json.loads(out.stdout)["in_progress"]) == [str(tx.write_pointer)]

    bad = run("inspect", "nope", "--store", url)
    assert bad.returncode == 1 and "does not exist" in bad.stderr

    bad = run("inspect", "audit", "--store", url, "--from", "yesterday-ish")
    assert bad.returncode != 0 and "--from" in bad.stderr


def test_inspect_reads_a_copy_while_the_store_is_open(tmp_path: Path) -> None:
    url = f"leveldb://{tmp_path / 'store'}"
    t = TopicId("default", "live")
    with open_store(url) as store:  # held open (locked), as a running gateway holds it
        store.create_topic(t)
        store.publish(t, [b"visible"])
        out = run("inspect", "live", "--store", url, "--json")
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["payload"] == "visible"
        assert "point-in-time copy" in out.stderr
        store.publish(t, [b"after"])  # the store is untouched by the copy
        assert [m.payload for m in store.poll(t)] == [b"visible", b"after"]


def test_compacted_topic_described_and_records_deleted(tmp_path: Path) -> None:
    from tmsgate.protocol import encode_meta

    url = f"leveldb://{tmp_path / 'store'}"
    t = TopicId("default", "changelog")
    with open_store(url) as store:
        # segment.ms 1: every row is past the head a millisecond after it is written
        props = {"cleanup.policy": "compact", "segment.ms": "1"}
        store.create_topic(t, props)
        meta = encode_meta(b"k", [], 0)
        store.publish(t, [Entry(b"v%d" % i, meta=meta) for i in range(10)])

    out = run("topics", "describe", "changelog", "--store", url, "--json")
    doc = json.loads(out.stdout)
    cleaning = doc["compaction"]
    assert cleaning["first_dirty_offset"] == 0 and cleaning["dirty_bytes"] > 0
    assert cleaning["dirty_ratio"] == 1.0  # nothing cleaned yet
    out = run("topics", "describe", "changelog", "--store", url)
    assert "compaction: dirty ratio 1.0" in out.stdout

    out = run("topics", "delete-records", "changelog", "--offset", "4", "--store", url)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["low_watermark"] == 4
    out = run("topics", "delete-records", "changelog", "--offset", "99", "--store", url)
    assert out.returncode == 1 and "outside the topic's range" in out.stderr, out.stderr
    with open_store(url) as store:
        assert store.offsets(t) == (4, 10)
