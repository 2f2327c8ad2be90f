"""`tmsgate topics|inspect|tx` against a real store, run as the installed console script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tmsgate.gateway.cli import main
from tmsgate.storage import Entry, TopicId, open_store, partitions

TMSGATE = str(Path(sys.executable).with_name("tmsgate"))


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TMSGATE, *args], capture_output=True, text=True, timeout=60, check=False)


Capture = pytest.CaptureFixture[str]


def here(capsys: Capture, *args: str) -> subprocess.CompletedProcess[str]:
    """The command run in this process (quicker than the console script, same code)."""
    code = main(list(args))
    out = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, out.out, out.err)


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
    assert out.stdout.split() == ["TOPIC", "PARTITIONS", "audit", "1"]

    out = run("topics", "describe", "audit", "--store", url, "--json")
    doc = json.loads(out.stdout)
    assert doc["properties"] == {"ttl": "3600"}
    [p0] = doc["partitions"]
    assert (p0["earliest_offset"], p0["next_offset"], p0["last_stable_offset"]) == (0, 4, 2)

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


def test_topics_are_kafka_topics_with_their_partitions(tmp_path: Path, capsys: Capture) -> None:
    """A Kafka topic of 3 partitions (3 TMS topics: orders, orders~1, orders~2) is listed
    and described once, with every partition; inspect reads any one of them."""
    url = f"leveldb://{tmp_path / 'store'}"
    with open_store(url) as store:
        partitions.create(store, TopicId("default", "orders"), {"retention.ms": "60000"}, 3)
        store.create_topic(TopicId("default", "audit"), {})
        store.publish(TopicId.of_partition("default", "orders", 1), [b"a", b"b"])
        store.publish(TopicId.of_partition("default", "orders", 2), [b"c"])
        # a gateway of `serve --cluster` (node 2) leads partition 1: its lease, in the store
        holder = "2 10.0.0.2:9092 - 4711.1"
        assert store.lease_table().acquire("partition/default:orders~1", holder, 600_000)

    out = here(capsys, "topics", "list", "--store", url, "--json")
    assert [json.loads(line) for line in out.stdout.splitlines()] == [
        {"topic": "audit", "partitions": 1},
        {"topic": "orders", "partitions": 3},
    ]

    out = here(capsys, "topics", "describe", "orders", "--store", url, "--json", "--cluster")
    doc = json.loads(out.stdout)
    assert doc["partition_count"] == 3 and doc["properties"] == {"retention.ms": "60000"}
    rows = [
        (p["partition"], p["next_offset"], p["messages"], p["leader"]) for p in doc["partitions"]
    ]
    assert rows == [(0, 0, 0, None), (1, 2, 2, 2), (2, 1, 1, None)]
    sizes = [p["size_bytes"] for p in doc["partitions"]]
    assert sizes[0] == 0 < sizes[2] < sizes[1] and doc["size_bytes"] == sum(sizes)

    out = here(capsys, "topics", "describe", "--store", url, "--cluster")  # every topic, as a table
    lines = out.stdout.splitlines()
    assert lines[0].startswith("Topic: audit\t") and "PartitionCount: 1" in lines[0]
    at = next(i for i, line in enumerate(lines) if line.startswith("Topic: orders\t"))
    assert "PartitionCount: 3" in lines[at] and lines[at + 1] == "\tConfigs: retention.ms=60000"
    assert lines[at + 2].split() == [
        *("Partition", "Earliest", "Next", "LSO", "Messages", "Size", "Leader")
    ]
    assert [line.split()[:5] + line.split()[-1:] for line in lines[at + 3 : at + 6]] == [
        ["0", "0", "0", "0", "0", "-"],
        ["1", "0", "2", "2", "2", "2"],
        ["2", "0", "1", "1", "1", "-"],
    ]

    for missing in ("nope", "orders~1"):
        bad = here(capsys, "topics", "describe", missing, "--store", url)
        assert bad.returncode == 1 and bad.stdout == "", bad
    assert (
        "'nope' (namespace default) does not exist"
        in here(capsys, "topics", "describe", "nope", "--store", url).stderr
    )
    assert "partition 1 of topic 'orders'" in bad.stderr

    out = here(capsys, "inspect", "orders", "--partition", "1", "--store", url, "--json")
    assert [json.loads(line)["payload"] for line in out.stdout.splitlines()] == ["a", "b"]
    out = here(capsys, "inspect", "orders", "--store", url, "--json")  # partition 0: empty
    assert out.returncode == 0 and out.stdout == ""
    bad = here(capsys, "inspect", "orders", "--partition", "3", "--store", url)
    assert bad.returncode == 1
    assert "has 3 partitions (0..2): there is no partition 3" in bad.stderr


def test_empty_store_says_so(tmp_path: Path, capsys: Capture) -> None:
    url = f"leveldb://{tmp_path / 'store'}"
    with open_store(url):
        pass
    out = here(capsys, "users", "list", "--store", url)
    assert out.returncode == 0 and out.stdout.startswith("no SCRAM users in"), out
    out = here(capsys, "users", "list", "--store", url, "--json")
    assert json.loads(out.stdout) == {}
    out = here(capsys, "topics", "list", "--store", url)
    assert out.returncode == 0 and out.stdout == "" and "no topics" in out.stderr
