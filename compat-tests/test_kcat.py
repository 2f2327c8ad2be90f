"""kcat (Debian's 1.7.1 on librdkafka 2.0.2: an older librdkafka) against a live tmsgate gateway.

  produce:  kcat -b B -P -t T -z codec -K '\\t' -Z -H k=v ...   (stdin lines "key<TAB>value")
  consume:  kcat -b B -C -t T -o beginning -e -J                (JSON envelope per record)
            kcat -b B -C ... -f '%o|%k|%s|%h\\n'                 (format string)
  offsets:  kcat -b B -Q -t T:0:<ts>   (-1 latest, -2 earliest, or a timestamp)
  metadata: kcat -b B -L -J -t T
kcat sets one header set for every record of a run (-H), so per-record headers are not tested.
"""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest
from compat_helpers import (
    CODECS,
    Rec,
    assert_dense_offsets,
    assert_no_redelivery,
    assert_same_records,
    make_records,
    require_tool,
    sleep_past_ms_boundary,
)

pytestmark = pytest.mark.timeout(90)

RUN_TIMEOUT_S = 45


@pytest.fixture(scope="module")
def kcat_bin():
    return require_tool("kcat", "install the Debian package kcat")


def kcat(kcat_bin, gateway, *args, stdin: bytes | None = None, timeout=RUN_TIMEOUT_S, check=True):
    cmd = [kcat_bin, "-b", gateway.bootstrap, "-m", "10", "-X", "socket.timeout.ms=10000", *args]
    try:
        p = subprocess.run(cmd, input=stdin, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(
            f"{' '.join(cmd)} did not finish within {timeout}s\n"
            f"stdout: {exc.stdout!r}\nstderr: {exc.stderr!r}"
        ) from None
    if check:
        assert p.returncode == 0, (
            f"{' '.join(cmd)} exited {p.returncode}\nstderr: {p.stderr.decode(errors='replace')}"
        )
    return p


def kproduce(kcat_bin, gateway, topic, lines: list[bytes], codec="none", headers=(), extra=()):
    args = ["-P", "-t", topic, "-K", "\t", "-Z", "-X", "message.timeout.ms=20000", *extra]
    if codec != "none":
        args += ["-z", codec]
    for h in headers:
        args += ["-H", h]
    p = kcat(kcat_bin, gateway, *args, stdin=b"".join(line + b"\n" for line in lines))
    assert b"Delivery failed" not in p.stderr, p.stderr.decode(errors="replace")
    return p


def kconsume(kcat_bin, gateway, topic, n, offset="beginning"):
    p = kcat(
        kcat_bin, gateway, "-C", "-t", topic, "-o", str(offset), "-c", str(n), "-e", "-J", "-q"
    )
    out = [json.loads(line) for line in p.stdout.decode().splitlines() if line.strip()]
    assert_no_redelivery([(m["partition"], m["offset"]) for m in out], f"kcat -C -o {offset}")
    assert len(out) == n, (
        f"kcat consumed {len(out)} of {n} records; stderr: {p.stderr.decode(errors='replace')}"
    )
    return out


def enc(s):
    return None if s is None else s.encode()


def header_pairs(flat):
    flat = flat or []
    return tuple((flat[i], enc(flat[i + 1])) for i in range(0, len(flat), 2))


def as_recs(msgs) -> list[Rec]:
    return [Rec(enc(m["key"]), enc(m["payload"]), header_pairs(m.get("headers"))) for m in msgs]


def lines_for(records: list[Rec]) -> list[bytes]:
    return [(r.key or b"") + b"\t" + (r.value or b"") for r in records]


def kcat_records(n, tag, start=0, headers=(("src", b"kcat"),)):
    return [Rec(r.key, r.value, headers) for r in make_records(n, tag, start=start, size=150)]


@pytest.mark.parametrize("codec", CODECS)
def test_codec_roundtrip(kcat_bin, gateway, topic, codec):
    records = kcat_records(300, codec)
    kproduce(kcat_bin, gateway, topic, lines_for(records), codec, headers=["src=kcat"])
    got = kconsume(kcat_bin, gateway, topic, len(records))
    assert_dense_offsets([m["offset"] for m in got], 0, len(records))
    assert {m["partition"] for m in got} == {0}
    assert_same_records(as_recs(got), records)


def test_headers_roundtrip(kcat_bin, gateway, topic):
    hdrs = ["a=1", "dup=first", "dup=second", "empty=", "eq=x=y", "sp=a b", "nullvalue"]
    kproduce(kcat_bin, gateway, topic, [b"k\tv"], headers=hdrs)
    (m,) = kconsume(kcat_bin, gateway, topic, 1)
    assert m["headers"] == [
        "a",
        "1",
        "dup",
        "first",
        "dup",
        "second",
        "empty",
        "",
        "eq",
        "x=y",
        "sp",
        "a b",
        "nullvalue",
        None,
    ]


def test_null_key_and_null_value(kcat_bin, gateway, topic):
    # -Z: an empty key or value is sent as NULL; a line without the delimiter has no key
    kproduce(kcat_bin, gateway, topic, [b"\tnull key", b"no delimiter", b"tombstone\t", b"k\tv"])
    got = kconsume(kcat_bin, gateway, topic, 4)
    assert [(m["key"], m["payload"]) for m in got] == [
        (None, "null key"),
        (None, "no delimiter"),
        ("tombstone", None),
        ("k", "v"),
    ]


def test_format_string_output(kcat_bin, gateway, topic):
    kproduce(kcat_bin, gateway, topic, [b"k0\tv0", b"k1\tv1"], headers=["h=x"])
    p = kcat(
        kcat_bin,
        gateway,
        "-C",
        "-t",
        topic,
        "-o",
        "beginning",
        "-c",
        "2",
        "-e",
        "-q",
        "-f",
        "%t|%p|%o|%k|%s|%h|%S\\n",
    )
    assert p.stdout.decode().splitlines() == [
        f"{topic}|0|0|k0|v0|h=x|2",
        f"{topic}|0|1|k1|v1|h=x|2",
    ]


def test_order_and_dense_offsets_across_runs(kcat_bin, gateway, topic):
    a = kcat_records(1000, "a")
    b = kcat_records(500, "b", start=1000)
    kproduce(
        kcat_bin,
        gateway,
        topic,
        lines_for(a),
        "lz4",
        headers=["src=kcat"],
        extra=["-X", "batch.num.messages=50"],
    )
    kproduce(kcat_bin, gateway, topic, lines_for(b), "snappy", headers=["src=kcat"])
    got = kconsume(kcat_bin, gateway, topic, 1500)
    assert_dense_offsets([m["offset"] for m in got], 0, 1500)
    assert_same_records(as_recs(got), a + b)
    # absolute start offset
    mid = kconsume(kcat_bin, gateway, topic, 10, offset=995)
    assert_dense_offsets([m["offset"] for m in mid], 995, 10)
    assert_same_records(as_recs(mid), (a + b)[995:1005])
    # relative from the end
    tail = kconsume(kcat_bin, gateway, topic, 5, offset=-5)
    assert_dense_offsets([m["offset"] for m in tail], 1495, 5)


def test_restart_in_the_middle(kcat_bin, gateway, topic):
    a = kcat_records(100, "before")
    b = kcat_records(50, "after", start=100)
    kproduce(kcat_bin, gateway, topic, lines_for(a), "gzip", headers=["src=kcat"])
    gateway.restart()
    kproduce(kcat_bin, gateway, topic, lines_for(b), "zstd", headers=["src=kcat"])
    got = kconsume(kcat_bin, gateway, topic, 150)
    assert_dense_offsets([m["offset"] for m in got], 0, 150)
    assert_same_records(as_recs(got), a + b)


_Q = re.compile(r"^(\S+) \[(\d+)\] offset (-?\d+)$")


def kquery(kcat_bin, gateway, topic, ts) -> int:
    p = kcat(kcat_bin, gateway, "-Q", "-t", f"{topic}:0:{ts}")
    lines = [ln for ln in p.stdout.decode().splitlines() if ln.strip()]
    assert len(lines) == 1, (
        f"kcat -Q printed {lines!r}; stderr: {p.stderr.decode(errors='replace')}"
    )
    m = _Q.match(lines[0])
    assert m and m.group(1) == topic and m.group(2) == "0", lines[0]
    return int(m.group(3))


def test_query_offsets(kcat_bin, gateway, topic):
    assert kquery(kcat_bin, gateway, topic, -2) == 0
    assert kquery(kcat_bin, gateway, topic, -1) == 0
    kproduce(kcat_bin, gateway, topic, lines_for(kcat_records(30, "a")))
    ts = sleep_past_ms_boundary()
    kproduce(kcat_bin, gateway, topic, lines_for(kcat_records(20, "b", start=30)))
    assert kquery(kcat_bin, gateway, topic, -2) == 0
    assert kquery(kcat_bin, gateway, topic, -1) == 50
    assert kquery(kcat_bin, gateway, topic, ts) == 30
    # a timestamp after every record: Kafka answers -1
    assert kquery(kcat_bin, gateway, topic, int(time.time() * 1000) + 3_600_000) == -1
    # consume from a timestamp
    got = kconsume(kcat_bin, gateway, topic, 20, offset=f"s@{ts}")
    assert_dense_offsets([m["offset"] for m in got], 30, 20)


def test_metadata_list(kcat_bin, gateway, topic):
    p = kcat(kcat_bin, gateway, "-L", "-J", "-t", topic)
    md = json.loads(p.stdout)
    broker_ids = {b["id"] for b in md["brokers"]}
    assert broker_ids, md
    host, port = gateway.bootstrap.rsplit(":", 1)
    assert any(b["name"].startswith(f"{host}:{port}") for b in md["brokers"]), md["brokers"]
    (t,) = md["topics"]
    assert t["topic"] == topic and "error" not in t, t
    (part,) = t["partitions"]
    assert part["partition"] == 0 and part["leader"] in broker_ids, part
    # the whole-cluster listing includes the topic too
    all_md = json.loads(kcat(kcat_bin, gateway, "-L", "-J").stdout)
    assert topic in {x["topic"] for x in all_md["topics"]}


def test_metadata_unknown_topic(kcat_bin, gateway, topic_name):
    # Metadata v4 with allow_auto_topic_creation=false: Kafka answers UNKNOWN_TOPIC_OR_PARTITION.
    # (kcat's default is true, and then Kafka creates the topic, as tmsgate may.)
    p = kcat(
        kcat_bin,
        gateway,
        "-X",
        "allow.auto.create.topics=false",
        "-L",
        "-J",
        "-t",
        topic_name,
        check=False,
    )
    md = json.loads(p.stdout)
    (t,) = md["topics"]
    assert t["topic"] == topic_name
    assert t.get("error") == "Broker: Unknown topic or partition", (
        f"unknown topic listed without the error: {t}"
    )
