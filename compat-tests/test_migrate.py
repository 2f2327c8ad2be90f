"""`tmsgate migrate` (docs/migration.md) end to end: a source tmsgate gateway subprocess
(with the HTTP API, for rolled-back rows), a target that is a second gateway (`--to`) or
a store directory (`--store`), the command run as a subprocess, and real clients
(confluent-kafka, kafka-python) reading both sides.

- full copy to a store: partition counts, retention.ms and max.message.bytes, every
  record (key, value, headers, timestamp) at its source offset, zstd batches, null keys,
  values and header values, the gaps of rolled-back HTTP rows and aborted
  `tms.tx.write_pointer` records kept (in the middle of a partition, and a partition that
  is all gap), a log start moved by retention kept, --verify's table, --finish;
- group offsets: an inactive group's copied unchanged, an active one skipped unless
  --force, offsets never moved back, a group running on the target left alone;
- resumable: the command SIGKILLed mid-copy (and the target gateway crashed after it),
  then SIGINTed (graceful), then run to the end: nothing written twice, nothing lost,
  --verify passes; the same with --store, the command's own gateway killed mid-write;
- a consumer group switching clusters mid-stream while producers keep writing to the
  source and --follow copies: every record exactly once; ordinary producers get
  POLICY_VIOLATION until SIGINT ends the follow with --finish;
- --dry-run changes nothing (--to and --store), lists the groups it would copy and creates
  no store (a relative leveldb:// path); an unreachable source says so and changes
  nothing; --verify exits 1 on a difference;
  refusals (a target topic with records not being migrated, more partitions on the
  target, a store whose gateway runs) and a grow;
- committed `tms.tx.write_pointer` records of a tmsgate source are copied; a topic being
  migrated from another source is refused; commit metadata is copied; --verify's table
  shows long partition names whole.

Synchronisation is by polling with a deadline (ListOffsets, OffsetFetch, the command's
listening port), never by sleeping; nothing is timed.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import time
import uuid
from collections import Counter

import pytest
from compat_helpers import free_port, wait_until
from migrate_helpers import (
    Migration,
    Offsets,
    Record,
    Run,
    Server,
    alter_configs,
    commit_consumed,
    commit_offsets,
    committed,
    consume_n,
    create_topic,
    describe_configs,
    group_consumer,
    group_members,
    http_client,
    kafka_python_produce,
    listening_ports,
    migrate,
    offsets,
    offsets_for_times,
    produce,
    produce_error,
    read_all,
    topics,
    wait_for_offsets,
    wp_header,
)
from tmsgate.pipelines.migrate import Throttle

pytestmark = pytest.mark.timeout(180)

MIGRATION_SOURCE = "tmsgate.migration.source"
POLICY_VIOLATION = 44


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """The source cluster: a tmsgate gateway with its HTTP API (transactions)."""
    srv = Server(tmp_path_factory.mktemp("migrate-source"), http=True).start()
    yield srv
    srv.stop()


@pytest.fixture
def servers(source, tmp_path, request):
    """Factory of target gateways (no HTTP), stopped at the end of the test. Their logs and
    the source's go into a failed test's report (conftest's report hook)."""
    started: list[Server] = [source]
    request.node._tmsgate_private = started

    def make(start: bool = True) -> Server:
        srv = Server(tmp_path / f"target{len(started)}")
        started.append(srv)
        return srv.start() if start else srv

    yield make
    for srv in started[1:]:
        srv.stop()


@pytest.fixture
def target(servers) -> Server:
    return servers()


@pytest.fixture
def name():
    """name("x") -> a fresh topic or group name of this test (short: --verify's table
    elides long names, see test_verify_exits_1_on_a_difference); .all: a --topics or
    --groups regular expression matching exactly this test's names."""
    prefix = f"m{uuid.uuid4().hex[:8]}-"

    def make(suffix: str) -> str:
        return prefix + suffix

    make.prefix = prefix
    make.all = re.escape(prefix) + ".*"
    return make


def ts_base() -> int:
    return int(time.time() * 1000) - 3_600_000  # CreateTime an hour ago, distinct per record


def recs(partition: int, n: int, tag: str, start: int = 0, ts0: int | None = None):
    """Records i = start .. start+n-1 for produce(): key k-<tag>-<i>, value v-..., two
    headers, CreateTime ts0 + i."""
    ts0 = ts_base() if ts0 is None else ts0
    return [
        (
            partition,
            f"k-{tag}-{i}".encode(),
            f"v-{tag}-{i}".encode() * 3,
            [("idx", str(i).encode()), ("tag", tag.encode())],
            ts0 + i,
        )
        for i in range(start, start + n)
    ]


def by_partition(records: list[Record]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for r in records:
        out.setdefault(r.partition, []).append(r.offset)
    return out


def assert_same(got: list[Record], want: list[Record], what: str) -> None:
    for i, (g, w) in enumerate(zip(got, want, strict=False)):
        assert g == w, f"{what}: first difference at #{i}:\n  target {g}\n  source {w}"
    assert len(got) == len(want), f"{what}: {len(got)} records on the target, {len(want)} source"


# --------------------------------------------------------------------------- 1. full copy


def test_full_copy_to_a_store_keeps_records_offsets_gaps_and_configs(
    source, servers, name, tmp_path
):
    s = source.bootstrap
    main, expired = name("main"), name("expired")
    create_topic(s, main, 3, {"retention.ms": "3600000", "max.message.bytes": "500000"})
    create_topic(s, expired, 1, {"retention.ms": "1000"})
    # expired: three records that retention removes (the log then starts at 3)
    produce(s, expired, [(0, b"old", b"old", [], None)] * 3)
    ts0 = ts_base()
    # partition 0: 5 records, then a gap: 3 HTTP rows of a transaction rolled back and 2
    # Kafka records with the transaction's tms.tx.write_pointer header, the transaction
    # aborted; then 5 records after the gap
    produce(s, main, recs(0, 5, "p0", 0, ts0))
    with http_client(source.http_url) as http:
        wp = http.start_tx()
        response = http.publish(main, wp, ["rolled-1", "rolled-2", "rolled-3"])
        assert http.rollback(main, response) == 3
        produce(s, main, [(0, b"in-tx", b"aborted", [wp_header(wp)], ts0)] * 2)
        # partition 2 holds only such records: a partition that is all gap
        produce(s, main, [(2, b"in-tx", b"aborted", [wp_header(wp)], ts0)] * 2)
        http.end(wp, "abort")
    produce(s, main, recs(0, 5, "p0", 5, ts0))
    # partition 1: zstd batches, null keys and values, repeated and null header values
    odd = [
        (1, None, b"null key", [("h", b"1"), ("h", b"2")], ts0 + 100),
        (1, b"tombstone", None, [("null", None)], ts0 + 101),
        (1, b"", b"", [], ts0 + 102),
    ]
    produce(s, main, recs(1, 40, "p1", 0, ts0) + odd, **{"compression.type": "zstd"})

    source_offsets = Offsets(s)
    try:
        wait_until(
            lambda: source_offsets(expired, 1) == {0: (3, 3)},
            20,
            f"retention to move {expired}'s log start to 3",
            0.1,
        )
        src_offsets = source_offsets(main, 3)
    finally:
        source_offsets.close()
    src = read_all(s, main, 3)
    # the source has the gap: offsets 5..9 of partition 0 hold nothing read_committed sees
    assert by_partition(src)[0] == [0, 1, 2, 3, 4, 10, 11, 12, 13, 14]
    assert src_offsets == {0: (0, 15), 1: (0, 43), 2: (0, 2)}

    tgt = servers(start=False)
    run = migrate(
        tmp_path,
        "--from",
        s,
        "--store",
        tgt.store_url,
        "--topics",
        name.all,
        "--finish",
        "--verify",
    )
    assert run.rc == 0, run
    assert run.verify_rows() == {
        f"{main}-0": "ok",
        f"{main}-1": "ok",
        f"{main}-2": "ok",
        f"{expired}-0": "ok",
    }, run
    assert run.copied == 10 + 43, run

    tgt.start()  # a gateway on the migrated store, to look at it
    t = tgt.bootstrap
    got_topics = topics(t)
    assert (got_topics[main], got_topics[expired]) == (3, 1)
    configs = describe_configs(t, main)
    assert (configs["retention.ms"], configs["max.message.bytes"]) == ("3600000", "500000")
    assert configs.get(MIGRATION_SOURCE) is None  # --finish ended migration mode
    assert describe_configs(t, expired)["retention.ms"] == "1000"

    # every record equal, at its source offset; the gap kept; the same offsets listed
    assert_same(read_all(t, main, 3), src, f"{main} read_committed")
    assert offsets(t, main, 3) == src_offsets
    # the record after the gap has the same offset on both sides
    assert [r.offset for r in read_all(t, main, 3) if r.key == b"k-p0-5"] == [10]
    assert [r.offset for r in src if r.key == b"k-p0-5"] == [10]
    # the gap's rows are on the source (read_uncommitted sees them there) but the target
    # holds no record in it, whatever the isolation level
    dense = {0: list(range(15)), 1: list(range(43)), 2: [0, 1]}
    assert by_partition(read_all(s, main, 3, "read_uncommitted")) == dense
    assert by_partition(read_all(t, main, 3, "read_uncommitted")) == {
        0: [0, 1, 2, 3, 4, *range(10, 15)],
        1: list(range(43)),
    }
    # timestamps are the records': a lookup by time finds the same offsets on both sides
    # (where no gap is involved: on the source, the gap's rows carry timestamps too)
    times = [ts0 - 1, ts0 + 3, ts0 + 39, ts0 + 101, ts0 + 10_000]
    assert offsets_for_times(t, main, 1, times) == offsets_for_times(s, main, 1, times)
    assert offsets_for_times(t, main, 0, times[:2]) == offsets_for_times(s, main, 0, times[:2])
    assert offsets_for_times(t, main, 0, [ts0 + 7]) == [(12, ts0 + 7)]  # past the gap
    # the partition whose source log starts at 3 starts at 3 on the target
    assert offsets(t, expired, 1) == {0: (3, 3)}

    # after --finish ordinary producers write, each partition continuing at its source end
    assert produce_error(t, main, 0) == (None, 15)
    assert produce_error(t, main, 2) == (None, 2)
    assert produce_error(t, expired, 0) == (None, 3)


def test_records_retention_deleted_before_they_were_copied_stay_a_gap(
    source, target, name, tmp_path
):
    s, t = source.bootstrap, target.bootstrap
    topic = name("short")
    create_topic(s, topic, 1, {"retention.ms": "1000"})
    produce(s, topic, [(0, b"first", b"x", [], None)] * 3)
    args = ["--from", s, "--to", t, "--topics", name.all]
    run = migrate(tmp_path, *args)
    assert run.rc == 0, run
    assert offsets(t, topic, 1)[0][1] == 3
    # between two runs the source's retention deletes what the next run was to copy
    produce(s, topic, [(0, b"gone", b"x", [], None)] * 4)
    wait_until(lambda: offsets(s, topic, 1) == {0: (7, 7)}, 20, "retention on the source", 0.1)

    run = migrate(tmp_path, *args)
    assert run.rc == 0, run
    assert f"{topic}-0: the source deleted offsets 3..6 before they were copied" in run.err, run
    assert offsets(t, topic, 1)[0][1] == 7  # the gap keeps the offsets: the next is 7 too


# --------------------------------------------------------------------------- 2. group offsets


def test_group_offsets_copied_for_inactive_groups_active_ones_need_force(
    source, target, name, tmp_path
):
    s, t = source.bootstrap, target.bootstrap
    topic, idle, busy = name("t"), name("idle"), name("busy")
    create_topic(s, topic, 2)
    produce(s, topic, recs(0, 30, "a") + recs(1, 30, "b"))

    # idle: committed offsets and no member (as a standalone consumer leaves it)
    idle_offsets = {(topic, 0): 17, (topic, 1): 8}
    commit_offsets(s, idle, idle_offsets)
    active = group_consumer(s, busy, topic)
    try:
        busy_offsets = commit_consumed(active, consume_n(active, 10), topic)
        assert group_members(s, busy) == 1
        assert committed(s, idle) == idle_offsets

        args = ["--from", s, "--to", t, "--topics", name.all, "--groups", name.all]
        run = migrate(tmp_path, *args)
        assert run.rc == 0, run
        assert committed(t, idle) == idle_offsets, run
        assert committed(t, busy) == {}, run
        assert f"group {busy}: 0 offsets copied skipped: 1 consumers run in it" in run.out, run

        run = migrate(tmp_path, *args, "--force")
        assert run.rc == 0, run
        assert committed(t, busy) == busy_offsets == committed(s, busy), run
    finally:
        active.close()

    # an offset only moves forward on the target
    commit_offsets(s, idle, dict.fromkeys(idle_offsets, 1))
    run = migrate(tmp_path, *args)
    assert run.rc == 0, run
    assert committed(t, idle) == idle_offsets, run

    # a group that already runs on the target is left alone
    moved = group_consumer(t, busy, topic)
    try:
        consume_n(moved, 1)  # it joined and got its partitions
        commit_offsets(s, busy, {(topic, 0): 30, (topic, 1): 30})
        run = migrate(tmp_path, *args)
        assert run.rc == 0, run
        assert (
            f"group {busy}: 0 offsets copied skipped: consumers already run in it on the target"
            in run.out
        ), run
        assert committed(t, busy) == busy_offsets
    finally:
        moved.close()
    # ... and copied once it stops there
    wait_until(lambda: group_members(t, busy) == 0, 30, f"{busy} to be empty on the target")
    run = migrate(tmp_path, *args)
    assert run.rc == 0, run
    assert committed(t, busy) == {(topic, 0): 30, (topic, 1): 30}, run


# --------------------------------------------------------------------------- 3. SIGKILL, resume

BIG_RECORDS = 80_000  # of 1 KiB: the copy takes a second or two
HALF = BIG_RECORDS // 2
PAD = b"." * 1000


@pytest.fixture(scope="module")
def big_topic(source) -> str:
    """2 partitions of 40,000 records of 1 KiB each (lz4 batches) on the source."""
    topic = f"m{uuid.uuid4().hex[:8]}-big"
    create_topic(source.bootstrap, topic, 2)
    ts0 = ts_base()
    produce(
        source.bootstrap,
        topic,
        (
            (i % 2, b"%d" % i, b"%08d" % i + PAD, [("i", b"%d" % i)], ts0 + i)
            for i in range(BIG_RECORDS)
        ),
        **{"linger.ms": 20, "compression.type": "lz4"},
    )
    assert offsets(source.bootstrap, topic, 2) == {0: (0, HALF), 1: (0, HALF)}
    return topic


def check_big_copy(bootstrap: str, topic: str) -> None:
    """Every record of big_topic once, at its source offset (dense from 0)."""
    assert offsets(bootstrap, topic, 2) == {0: (0, HALF), 1: (0, HALF)}
    got = read_all(bootstrap, topic, 2)
    for p in (0, 1):
        offs = [r.offset for r in got if r.partition == p]
        assert offs == list(range(HALF)), f"partition {p}: offsets not unique and dense"
    assert all(r.value == b"%08d" % int(r.key) + PAD for r in got)
    assert Counter(r.key for r in got) == Counter(b"%d" % i for i in range(BIG_RECORDS))


def test_sigkilled_copy_continues_where_the_target_ends(source, target, big_topic, tmp_path):
    s, t, topic = source.bootstrap, target.bootstrap, big_topic
    args = ["--from", s, "--to", t, "--topics", re.escape(topic)]

    def interrupt(sig: int, extra: list[str], beyond: int) -> Run:
        """Run the command; once the target holds more than ``beyond`` records of the
        topic (so the copy is under way), send it ``sig``. The command is stopped
        (SIGSTOP) while the target is looked at, and let go again if it is not that far:
        polled while it ran, the whole copy (1-2 s) could land between two answers of a
        target busy with it, and the kill came after the end."""
        m = Migration(tmp_path, args + extra)
        try:
            wait_until(lambda: topic in topics(t), 30, f"{topic} on the target", 0.05)
            watch = Offsets(t)
            try:
                deadline = time.monotonic() + 60
                while True:
                    assert m.running(), f"the copy ended before it was interrupted\n{m.result()}"
                    m.signal(signal.SIGSTOP)
                    with contextlib.suppress(Exception):  # e.g. no leader yet: look again
                        if sum(watch.latest(topic, 2).values()) > beyond:
                            break
                    m.signal(signal.SIGCONT)
                    assert time.monotonic() < deadline, f"no more than {beyond} records copied"
                    time.sleep(0.01)
            finally:
                watch.close()
            m.signal(sig)  # SIGKILL ends it stopped; SIGINT waits for the SIGCONT
            m.signal(signal.SIGCONT)
            return m.wait()
        finally:
            m.kill()

    # 1. kill -9 in the middle of the copy, then crash the target too (what the killed
    #    command had in flight lands or not). The topic is ~2 MB on the wire (lz4), so
    #    one fetch takes a whole partition: paced to 200 kB/s, the copy takes ~9 s and
    #    the kill cannot come after its end.
    interrupt(signal.SIGKILL, ["--max-bytes-per-second", "200000"], 0)
    target.crash_restart()
    at_kill = offsets(t, topic, 2)
    copied = sum(hi for _, hi in at_kill.values())
    assert 0 < copied < BIG_RECORDS, f"the kill came after the whole copy: {at_kill}"

    # 2. SIGINT (a --follow run, so that it is still copying): it ends gracefully, after
    #    writing what it fetched; what it reports is what the target holds
    run = interrupt(signal.SIGINT, ["--follow"], copied)
    assert run.rc == 0, run
    at_int = offsets(t, topic, 2)
    for p, (_, hi) in at_int.items():
        assert f"  {topic}-{p}: next offset {hi}\n" in run.out, (at_int, str(run))
    # it forwarded what the first had not written (and, of a fetched batch straddling
    # where the target ended, the part the target skipped)
    assert run.copied >= sum(hi for _, hi in at_int.values()) - copied, (at_kill, str(run))

    # 3. run again to the end: --verify passes, nothing is written twice, nothing lost
    run = migrate(tmp_path, *args, "--verify")
    assert run.rc == 0, run
    assert set(run.verify_rows().values()) == {"ok"} and len(run.verify_rows()) == 2, run
    check_big_copy(t, topic)


def test_paced_copy_fetches_at_most_a_second_of_its_rate_at_once(source, target, name, tmp_path):
    """--max-bytes-per-second: every fetch asks for at most one second's worth, and the
    fetcher sleeps until the bytes fetched are within the rate (a clock of our own:
    no timing is asserted)."""
    now = [100.0]
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    throttle = Throttle(1000, clock=lambda: now[0], sleep=sleep)
    assert throttle.cap(32 << 20) == 1000 and throttle.cap(10) == 10

    async def paced() -> None:
        await throttle.fetched_bytes(2500)  # 2.5 s of the rate at once: wait 2.5 s
        now[0] += 1.0  # the next fetch took a second itself
        await throttle.fetched_bytes(500)  # 3 s of bytes after 3.5 s: no wait
        await throttle.fetched_bytes(1000)  # 4 s of bytes after 3.5 s: wait 0.5 s

    asyncio.run(paced())
    assert slept == [2.5, 0.5]
    with pytest.raises(ValueError):
        Throttle(0)

    # the command line refuses a rate that is not a positive number, saying why
    for bad, why in (("0", "must be above 0"), ("1e6", "not a whole number")):
        run = migrate(
            tmp_path,
            "--from",
            source.bootstrap,
            "--to",
            target.bootstrap,
            "--max-bytes-per-second",
            bad,
        )
        assert run.rc == 2 and why in run.err, run

    # and a paced copy is a whole copy
    s, t = source.bootstrap, target.bootstrap
    topic = name("paced")
    create_topic(s, topic, 1)
    produce(s, topic, recs(0, 50, "a"))
    run = migrate(
        tmp_path,
        "--from",
        s,
        "--to",
        t,
        "--topics",
        name.all,
        "--max-bytes-per-second",
        "4000",
        "--verify",
    )
    assert run.rc == 0, run
    assert offsets(t, topic, 1) == {0: (0, 50)}


def test_sigkilled_copy_to_a_store_continues_where_the_store_ends(
    source, servers, big_topic, tmp_path
):
    """--store: the command's own gateway dies with it, mid-write; the store recovers and the
    next run continues from what it holds."""
    s, topic = source.bootstrap, big_topic
    store = servers(start=False)
    args = ["--from", s, "--store", store.store_url, "--topics", re.escape(topic)]

    m = Migration(tmp_path, args)
    try:
        # the command's gateway listens on a loopback port of its own: watch it copy
        port = wait_until(lambda: listening_ports(m.proc.pid), 30, "the embedded gateway", 0.02)
        watch = Offsets(f"127.0.0.1:{port[0]}")
        try:

            def copying() -> bool:
                assert m.running(), f"the copy ended before it was killed\n{m.result()}"
                return sum(watch.latest(topic, 2).values()) > 0

            wait_until(copying, 60, "the first records in the store", 0.02)
        finally:
            watch.close()
        m.signal(signal.SIGKILL)
        m.wait()
    finally:
        m.kill()

    plan = migrate(tmp_path, *args, "--dry-run")
    assert plan.rc == 0, plan
    at = [int(x) for x in re.findall(r"target at (\d+),", plan.out)]
    assert len(at) == 2 and 0 < sum(at) < BIG_RECORDS, plan
    run = migrate(tmp_path, *args, "--verify")
    assert run.rc == 0, str(run)[-6000:]
    assert set(run.verify_rows().values()) == {"ok"} and len(run.verify_rows()) == 2, run
    assert run.copied >= BIG_RECORDS - sum(at), (at, str(run))
    store.start()
    check_big_copy(store.bootstrap, topic)


# --------------------------------------------------------------------------- 4. switch clusters


def test_group_switches_clusters_mid_stream_while_follow_copies(source, target, name, tmp_path):
    s, t = source.bootstrap, target.bootstrap
    topic, group = name("stream"), name("g")
    create_topic(s, topic, 2)
    ts0 = ts_base()
    produce(s, topic, recs(0, 50, "a", 0, ts0) + recs(1, 50, "b", 0, ts0))

    # the group reads part of the topic on the source and stops
    c = group_consumer(s, group, topic)
    first = consume_n(c, 40)
    on_source = commit_consumed(c, first, topic)
    c.close()

    # a plain run copies the records and the group's offsets
    run = migrate(tmp_path, "--from", s, "--to", t, "--topics", name.all, "--groups", name.all)
    assert run.rc == 0, run
    assert committed(t, group) == on_source, run

    follow_args = ["--from", s, "--to", t, "--topics", name.all, "--groups", name.all]
    follow = Migration(tmp_path, [*follow_args, "--follow", "--finish", "--verify"])
    try:
        # while migrating, only the migration may produce to the topic
        err, _ = produce_error(t, topic, 0)
        assert err is not None and err.code() == POLICY_VIOLATION, err
        refused = kafka_python_produce(t, topic, 1)
        assert isinstance(refused, Exception), refused
        assert type(refused).__name__ == "PolicyViolationError", repr(refused)
        assert "being migrated" in str(refused), str(refused)

        # the group continues on the target while producers still write to the source
        c = group_consumer(t, group, topic)
        try:
            got = consume_n(c, 20)
            produce(s, topic, recs(0, 50, "a", 50, ts0) + recs(1, 50, "b", 50, ts0))
            produce(
                s, topic, [(0, b"end", b"end", [], ts0 + 999), (1, b"end", b"end", [], ts0 + 999)]
            )
            # read until both partitions' last records (the "end" markers) arrived
            while sum(r.key == b"end" for r in got) < 2:
                got += consume_n(c, 1, timeout=60)
            on_target = commit_consumed(c, got, topic)
        finally:
            c.close()
        assert follow.running(), follow.result()

        # every record exactly once across both clusters, each at its source offset
        keys = Counter(r.key for r in first + got if r.key != b"end")
        assert keys == Counter(f"k-{tag}-{i}".encode() for tag in "ab" for i in range(100)), (
            f"duplicates {[k for k, n in keys.items() if n > 1][:5]}, {sum(keys.values())} in all"
        )
        src = {(r.partition, r.offset): r for r in read_all(s, topic, 2)}
        assert all(src[(r.partition, r.offset)] == r for r in first + got)

        # the producers stop; once the target caught up, SIGINT ends the follow gracefully
        wait_for_offsets(t, topic, {0: 101, 1: 101})
        follow.signal(signal.SIGINT)
        run = follow.wait()
    finally:
        follow.kill()
    assert run.rc == 0, run
    assert run.verify_rows() == {f"{topic}-0": "ok", f"{topic}-1": "ok"}, run
    # the final offset copy did not move the group back to where it left the source
    assert committed(t, group) == on_target
    # --finish: ordinary producers may write now, after the source's offsets
    assert describe_configs(t, topic).get(MIGRATION_SOURCE) is None
    assert produce_error(t, topic, 1) == (None, 101)


# --------------------------------------------------------------------------- 5. dry run


def test_dry_run_lists_the_plan_and_changes_nothing(source, servers, name, tmp_path):
    s = source.bootstrap
    new, grown = name("new"), name("grown")
    create_topic(s, new, 2, {"retention.ms": "60000"})
    create_topic(s, grown, 3)
    produce(s, new, recs(0, 5, "a") + recs(1, 7, "b"))
    produce(s, grown, recs(2, 4, "c"))
    target = servers()
    t = target.bootstrap
    create_topic(t, grown, 1)
    before = (topics(t), describe_configs(t, grown))

    run = migrate(tmp_path, "--from", s, "--to", t, "--topics", name.all, "--dry-run")
    assert run.rc == 0, run
    assert re.search(
        rf"^create {re.escape(new)}: 2 partitions, configs .*'retention.ms': '60000'", run.out, re.M
    ), run
    assert f"grow {grown} to 3 partitions" in run.out, run
    for line in (
        f"copy {new}-0: source [0, 5), target at 0, ~5 offsets to copy",
        f"copy {new}-1: source [0, 7), target at 0, ~7 offsets to copy",
        f"copy {grown}-2: source [0, 4), target at 0, ~4 offsets to copy",
    ):
        assert line in run.out, run
    assert (topics(t), describe_configs(t, grown)) == before
    assert offsets(t, grown, 1) == {0: (0, 0)}

    # --store: nothing is created in the store either
    store = servers(start=False)
    run = migrate(
        tmp_path, "--from", s, "--store", store.store_url, "--topics", name.all, "--dry-run"
    )
    assert run.rc == 0, run
    assert f"create {grown}: 3 partitions" in run.out, run
    store.start()
    assert not [x for x in topics(store.bootstrap) if x.startswith(name.prefix)]


def test_dry_run_lists_groups_and_creates_no_store(source, name, tmp_path):
    """leveldb://rel/store is rel/store under the current directory; a dry run lists the
    groups it would copy (and why not) and leaves no directory behind."""
    s = source.bootstrap
    topic, idle, busy = name("t"), name("idle"), name("busy")
    create_topic(s, topic, 2)
    produce(s, topic, recs(0, 4, "a") + recs(1, 2, "b"))
    commit_offsets(s, idle, {(topic, 0): 3, (topic, 1): 2})
    c = group_consumer(s, busy, topic)
    try:
        consume_n(c, 1)
        args = ["--from", s, "--topics", name.all, "--groups", name.all, "--dry-run"]
        run = migrate(tmp_path, *args, "--store", "leveldb://rel/store", cwd=tmp_path)
    finally:
        c.close()
    assert run.rc == 0, run
    assert f"({tmp_path / 'rel' / 'store'}) does not exist yet" in run.out, run
    assert f"copy {topic}-0: source [0, 4), target at 0, ~4 offsets to copy" in run.out, run
    assert f"group {idle}: 2 offsets to copy" in run.out, run
    assert re.search(rf"group {re.escape(busy)}: 0 offsets to copy skipped: 1 consumers", run.out)
    assert not (tmp_path / "rel").exists()


def test_an_unreachable_source_says_so_and_changes_nothing(tmp_path):
    port = free_port()  # nothing listens there
    store = tmp_path / "store"
    run = migrate(tmp_path, "--from", f"127.0.0.1:{port}", "--store", f"leveldb://{store}")
    assert run.rc == 1, run
    assert f"cannot reach the source cluster (--from) at 127.0.0.1:{port}" in run.err, run
    assert "run it again" not in run.err and "Traceback" not in run.err, run
    assert not store.exists()


# --------------------------------------------------------------------------- 6. --verify


@pytest.mark.parametrize(
    "long_name",
    [
        False,
        True,
    ],
    ids=["short-name", "long-name"],
)
def test_verify_exits_1_on_a_difference(source, target, name, tmp_path, long_name):
    """The target holds the same offsets but one value differs: the copy has nothing to do
    (the target is at the source's end), and --verify finds the difference and names the
    partition."""
    s, t = source.bootstrap, target.bootstrap
    topic = name("orders.eu-west.payments-settled.v2" if long_name else "v")
    ts0 = ts_base()
    records = recs(0, 10, "a", 0, ts0) + recs(1, 10, "b", 0, ts0)
    changed = [*records]
    changed[3] = (*changed[3][:2], b"changed", *changed[3][3:])
    for bootstrap, data in ((s, records), (t, changed)):
        create_topic(bootstrap, topic, 2)
        produce(bootstrap, topic, data)
    # the target's topic is taken for one this source migrates (the config migrate sets)
    alter_configs(t, topic, {MIGRATION_SOURCE: s})

    run = migrate(tmp_path, "--from", s, "--to", t, "--topics", name.all, "--verify")
    assert run.copied == 0, run
    assert run.rc == 1, run
    assert run.verify_rows() == {f"{topic}-0": "DIFFERENT", f"{topic}-1": "ok"}, run
    row = next(x for x in run.out.splitlines() if f"{topic}-0" in x and "DIFFERENT" in x)
    assert "[0, 10)" in row and " / " in row, row  # same offsets and counts, two checksums


# --------------------------------------------------------------------------- 7. refusals


def test_refuses_a_target_topic_with_records_not_being_migrated(source, target, name, tmp_path):
    s, t = source.bootstrap, target.bootstrap
    taken, other = name("taken"), name("other")
    for topic in (taken, other):
        create_topic(s, topic, 1)
        produce(s, topic, recs(0, 3, "src"))
    create_topic(t, taken, 1)
    produce(t, taken, recs(0, 2, "own"))
    mine = read_all(t, taken, 1)

    run = migrate(tmp_path, "--from", s, "--to", t, "--topics", name.all)
    assert run.rc == 1, run
    assert (
        f"topic {taken} already exists on the target with records and is not being migrated"
        in run.err
    ), run
    # nothing changed on the target
    assert other not in topics(t)
    assert read_all(t, taken, 1) == mine
    assert describe_configs(t, taken).get(MIGRATION_SOURCE) is None
    assert produce_error(t, taken, 0) == (None, 2)


def test_target_with_fewer_partitions_grows_and_more_is_refused(source, target, name, tmp_path):
    s, t = source.bootstrap, target.bootstrap
    grown, shrunk = name("grown"), name("shrunk")
    create_topic(s, grown, 3)
    produce(s, grown, recs(0, 4, "a") + recs(1, 5, "b") + recs(2, 6, "c"))
    create_topic(t, grown, 1)  # empty, not being migrated: taken over and grown

    run = migrate(tmp_path, "--from", s, "--to", t, "--topics", re.escape(grown), "--verify")
    assert run.rc == 0, run
    assert len(run.verify_rows()) == 3 and set(run.verify_rows().values()) == {"ok"}, run
    assert topics(t)[grown] == 3
    assert describe_configs(t, grown)[MIGRATION_SOURCE] == s
    assert read_all(t, grown, 3) == read_all(s, grown, 3)

    create_topic(s, shrunk, 2)
    create_topic(t, shrunk, 3)
    run = migrate(tmp_path, "--from", s, "--to", t, "--topics", re.escape(shrunk))
    assert run.rc == 1, run
    assert "partitions cannot be removed" in run.err and shrunk in run.err, run
    assert describe_configs(t, shrunk).get(MIGRATION_SOURCE) is None


def test_store_with_a_running_gateway_is_refused(source, target, name, tmp_path):
    s, t = source.bootstrap, target.bootstrap
    topic = name("locked")
    create_topic(s, topic, 1)
    produce(s, topic, recs(0, 3, "a"))
    run = migrate(tmp_path, "--from", s, "--store", target.store_url, "--topics", name.all)
    assert run.rc == 1, run
    assert "is a gateway running on it?" in run.err, run
    assert topic not in topics(t)


# --------------------------------------------------------------------------- known bugs


def test_committed_header_transaction_records_are_copied(source, target, name, tmp_path):
    s, t = source.bootstrap, target.bootstrap
    topic = name("committed-tx")
    create_topic(s, topic, 1)
    ts0 = ts_base()
    produce(s, topic, recs(0, 2, "a", 0, ts0))
    with http_client(source.http_url) as http:
        wp = http.start_tx()
        produce(s, topic, [(0, b"in-tx", b"committed", [wp_header(wp)], ts0 + 10)])
        http.end(wp, "commit")
    produce(s, topic, recs(0, 2, "a", 2, ts0))
    assert [r.key for r in read_all(s, topic, 1)] == [
        b"k-a-0",
        b"k-a-1",
        b"in-tx",
        b"k-a-2",
        b"k-a-3",
    ]

    run = migrate(tmp_path, "--from", s, "--to", t, "--topics", name.all, "--verify")
    assert run.rc == 0, run
    assert offsets(t, topic, 1) == {0: (0, 5)}
    assert [r.key for r in read_all(t, topic, 1)] == [
        b"k-a-0",
        b"k-a-1",
        b"in-tx",
        b"k-a-2",
        b"k-a-3",
    ]


def test_refuses_a_topic_being_migrated_from_another_source(source, target, name, tmp_path):
    s, t = source.bootstrap, target.bootstrap
    topic = name("elsewhere")
    create_topic(t, topic, 1)
    produce(t, topic, recs(0, 2, "from-a"))
    alter_configs(t, topic, {MIGRATION_SOURCE: "cluster-a.example:9092"})
    create_topic(s, topic, 1)
    produce(s, topic, recs(0, 5, "from-b"))

    run = migrate(tmp_path, "--from", s, "--to", t, "--topics", name.all)
    assert offsets(t, topic, 1) == {0: (0, 2)}, "records of two clusters mixed in one partition"
    assert run.rc == 1, run
    assert "cluster-a.example:9092" in run.err, run


def test_group_offset_metadata_is_copied(source, target, name, tmp_path):
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    s, t = source.bootstrap, target.bootstrap
    topic, group = name("md"), name("g")
    create_topic(s, topic, 1)
    produce(s, topic, recs(0, 5, "a"))
    c = Consumer({"bootstrap.servers": s, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 3, "app-state-7")], asynchronous=False)
    finally:
        c.close()

    def offsets_with_metadata(bootstrap: str):
        admin = AdminClient({"bootstrap.servers": bootstrap})
        got = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
        return [(tp.partition, tp.offset, tp.metadata) for tp in got.result(20).topic_partitions]

    assert offsets_with_metadata(s) == [(0, 3, "app-state-7")]
    run = migrate(tmp_path, "--from", s, "--to", t, "--topics", name.all, "--groups", name.all)
    assert run.rc == 0, run
    assert offsets_with_metadata(t) == [(0, 3, "app-state-7")]
