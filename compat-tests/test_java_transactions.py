"""Kafka transactions with the Java client (kafka-clients 3.9.0) against a live tmsgate, through
compat-tests/java/KafkaTxn.java:

  KafkaProducer with transactional.id: initTransactions, beginTransaction, send,
  sendOffsetsToTransaction(offsets, consumer.groupMetadata()), commitTransaction,
  abortTransaction; KafkaConsumer with isolation.level=read_committed.

One JVM runs a whole scenario (a list of steps, one JSON result line each), so a test costs one
or two JVM starts; the kill tests SIGKILL a driver that reports {"event":"hang"} with its
transaction open.

tmsgate has one partition per topic and gives committed transactional records ordinary dense
offsets (no commit markers; aborted records take no offsets), so the assertions are on contents
and order; offsets are checked (dense from 0) only in the tmsgate-only parts, which are skipped
against an external broker (TMSGATE_COMPAT_BOOTSTRAP, e.g. a real Apache Kafka).
"""

from __future__ import annotations

import json
import os
import queue
import shlex
import signal
import subprocess
import threading
import time
import uuid

import pytest
from compat_helpers import assert_dense_offsets

pytestmark = pytest.mark.timeout(150)

FENCED = {
    "org.apache.kafka.common.errors.ProducerFencedException",
    "org.apache.kafka.common.errors.InvalidProducerEpochException",
}


# --------------------------------------------------------------------------- driver


def st(name: str, **kw) -> str:
    """One KafkaTxn step: name:key=value:..."""
    return ":".join([name, *(f"{k}={v}" for k, v in kw.items())])


class Scenario:
    """Steps for one KafkaTxn run; add() returns the step's label for looking its result up."""

    def __init__(self):
        self.steps: list[str] = []
        self.labels: dict[str, int] = {}

    def add(self, label: str, name: str, **kw) -> str:
        assert label not in self.labels, label
        self.labels[label] = len(self.steps)
        self.steps.append(st(name, **kw))
        return label


class TxnResult:
    def __init__(self, scenario: Scenario, cmd: list[str], rc, lines: list[dict], stderr: str):
        self.scenario = scenario
        self.cmd = cmd
        self.rc = rc
        self.steps = [x for x in lines if "step" in x]
        self.events = [x for x in lines if "event" in x]
        self.stderr = stderr

    def context(self) -> str:
        shown = []
        for spec, res in zip(self.scenario.steps, self.steps, strict=False):
            brief = {k: v for k, v in res.items() if k != "records"}
            if "records" in res:
                brief["records[:3]"] = res["records"][:3]
            shown.append(f"  {spec}\n    -> {json.dumps(brief)[:1500]}")
        return (
            f"java KafkaTxn (rc {self.rc})\n"
            + "\n".join(shown)
            + f"\n  events: {json.dumps(self.events)[:1500]}"
            + f"\n--- stderr (tail) ---\n{self.stderr[-5000:]}"
        )

    def __getitem__(self, label: str) -> dict:
        i = self.scenario.labels[label]
        assert i < len(self.steps), f"step {label!r} did not report\n{self.context()}"
        return self.steps[i]

    def ok(self, label: str) -> dict:
        r = self[label]
        assert r["ok"], (
            f"step {label!r} failed: {r.get('error')}: {r.get('message')}\n{self.context()}"
        )
        return r


class TxnDriver:
    def __init__(self, classpath: str, bootstrap: str, tmp_path):
        self.classpath = classpath
        self.bootstrap = bootstrap
        self.tmp_path = tmp_path
        self.live: list[subprocess.Popen] = []

    def command(self, sc: Scenario, props=()) -> list[str]:
        cmd = [
            "java",
            "-Xss1m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            self.classpath,
            "KafkaTxn",
            self.bootstrap,
        ]
        for p in props:
            cmd += ["--prop", p]
        return cmd + sc.steps

    @staticmethod
    def _parse(stdout: str) -> list[dict]:
        return [
            json.loads(x) for x in (ln.strip() for ln in stdout.splitlines()) if x.startswith("{")
        ]

    def run(self, sc: Scenario, props=(), timeout: float = 90.0) -> TxnResult:
        cmd = self.command(sc, props)
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
            res = TxnResult(sc, cmd, None, self._parse(out), err)
            raise AssertionError(
                f"KafkaTxn did not finish within {timeout}s\n{res.context()}"
            ) from None
        res = TxnResult(sc, cmd, p.returncode, self._parse(p.stdout), p.stderr)
        assert p.returncode == 0, (
            f"KafkaTxn exited {p.returncode}: {shlex.join(cmd)}\n{res.context()}"
        )
        assert len(res.steps) == len(sc.steps), f"not every step reported\n{res.context()}"
        return res

    def run_and_kill(self, sc: Scenario, props=(), timeout: float = 60.0) -> TxnResult:
        """Run until the driver prints {"event":"hang"}, then SIGKILL it."""
        cmd = self.command(sc, props)
        errf = self.tmp_path / f"kafkatxn-{uuid.uuid4().hex[:6]}.stderr"
        with open(errf, "w") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
        self.live.append(proc)
        lines: queue.Queue = queue.Queue()

        def pump():
            for ln in proc.stdout:
                lines.put(ln)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        got: list[dict] = []
        deadline = time.monotonic() + timeout
        hung = False
        try:
            while time.monotonic() < deadline:
                try:
                    ln = lines.get(timeout=max(0.05, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if ln is None:
                    break
                if ln.strip().startswith("{"):
                    got.append(json.loads(ln))
                    if got[-1].get("event") == "hang":
                        hung = True
                        break
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        res = TxnResult(sc, cmd, proc.returncode, got, errf.read_text(errors="replace"))
        assert hung, f"KafkaTxn never reached its hang point within {timeout}s\n{res.context()}"
        return res

    def close(self):
        for proc in self.live:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.fixture
def txn(java_client, gateway, tmp_path):
    d = TxnDriver(java_client.classpath, gateway.bootstrap, tmp_path)
    yield d
    d.close()


def txid(tag: str) -> str:
    return f"compat-java-txn-{tag}-{uuid.uuid4().hex[:8]}"


# --------------------------------------------------------------------------- checks


def expected(i: int, tag: str) -> dict:
    # mirrors KafkaTxn.record()
    return {
        "key": f"k-{i}",
        "value": f"v-{i}-{tag}",
        "headers": [["idx", str(i)], ["hk", f"hv-{i}"]],
    }


def check_read(res: TxnResult, label: str, want: list[dict], *, dense: bool = False) -> list[dict]:
    """The read step `label` returned exactly `want` (key, value, headers), in order."""
    r = res.ok(label)
    got = [{k: x[k] for k in ("key", "value", "headers")} for x in r["records"]]
    for i, (g, w) in enumerate(zip(got, want, strict=False)):
        assert g == w, (
            f"{label}: record {i} (offset {r['records'][i]['offset']}) differs:\n"
            f"  got      {g}\n  expected {w}\n{res.context()}"
        )
    assert len(got) == len(want), (
        f"{label}: {len(got)} records, expected {len(want)}"
        + (f"; first extra {got[len(want)]}" if len(got) > len(want) else "")
        + f"\n{res.context()}"
    )
    assert r["complete"], f"{label}: the reader never reached the end offset\n{res.context()}"
    if dense:
        assert_dense_offsets([x["offset"] for x in r["records"]], 0, len(want), label)
        assert r["position"] == len(want), (r["position"], len(want))
    return r["records"]


def error_chain(r: dict) -> set[str]:
    return set(r.get("causes", [])) | set(r.get("send_causes", []))


# --------------------------------------------------------------------------- tests


def test_commit_visible_at_once_across_two_topics(txn, gateway, topic_name):
    """One transaction over two topics (interleaved sends, lz4): nothing visible before the
    commit, everything (in order, keys/headers/values intact) right after it."""
    a, b = f"{topic_name}-a", f"{topic_name}-b"
    sc = Scenario()
    sc.add("create-a", "create", topic=a)
    sc.add("create-b", "create", topic=b)
    sc.add("init", "producer", p="p", txid=txid("commit"), codec="lz4")
    sc.add("begin", "begin", p="p")
    sc.add("send-a1", "send", p="p", topic=a, start=0, n=30, tag="a")
    sc.add("send-b", "send", p="p", topic=b, start=0, n=20, tag="b")
    sc.add("send-a2", "send", p="p", topic=a, start=30, n=20, tag="a")
    sc.add("flush", "flush", p="p")
    sc.add("rc-a-open", "read", topic=a, iso="rc", settle_ms=500)
    sc.add("rc-b-open", "read", topic=b, iso="rc", settle_ms=300)
    sc.add("ru-a-open", "read", topic=a, iso="ru", settle_ms=300)
    sc.add("ru-b-open", "read", topic=b, iso="ru", settle_ms=300)
    sc.add("commit", "commit", p="p")
    sc.add("rc-a", "read", topic=a, iso="rc", want=50)
    sc.add("rc-b", "read", topic=b, iso="rc", want=20)
    sc.add("ru-a", "read", topic=a, iso="ru", want=50)
    res = txn.run(sc)
    for label in ("create-a", "create-b", "init", "begin", "send-a1", "send-b", "send-a2"):
        res.ok(label)
    flush = res.ok("flush")
    assert (flush["acked"], flush["failed"]) == (70, 0), f"{flush}\n{res.context()}"

    for label in ("rc-a-open", "rc-b-open"):
        r = res.ok(label)
        assert r["count"] == 0, f"{label}: read_committed saw an open transaction\n{res.context()}"
    if gateway.external:
        # the premise: the records really were on the broker before the commit
        assert res.ok("ru-a-open")["count"] == 50 and res.ok("ru-b-open")["count"] == 20
    else:
        for label in ("ru-a-open", "ru-b-open"):
            r = res.ok(label)
            assert r["count"] == 0, (
                f"{label}: tmsgate showed an open transaction to read_uncommitted\n{res.context()}"
            )

    res.ok("commit")
    want_a = [expected(i, "a") for i in range(50)]
    want_b = [expected(i, "b") for i in range(20)]
    tms = not gateway.external
    check_read(res, "rc-a", want_a, dense=tms)
    check_read(res, "rc-b", want_b, dense=tms)
    check_read(res, "ru-a", want_a, dense=tms)
    if tms:
        # "at once": the first end-offset lookup after commitTransaction() returned already
        # covers every record of the transaction, on both topics
        assert (res["rc-a"]["end0"], res["rc-b"]["end0"]) == (50, 20), res.context()


def test_abort_invisible(txn, gateway, topic_name):
    """Aborted transactions (two topics, then one more between commits) never show; the
    committed ones around them do, in order."""
    a, b = f"{topic_name}-a", f"{topic_name}-b"
    sc = Scenario()
    sc.add("create-a", "create", topic=a)
    sc.add("create-b", "create", topic=b)
    sc.add("init", "producer", p="p", txid=txid("abort"), codec="gzip")
    sc.add("begin1", "begin", p="p")
    sc.add("send1a", "send", p="p", topic=a, start=0, n=30, tag="aborted")
    sc.add("send1b", "send", p="p", topic=b, start=0, n=10, tag="aborted")
    sc.add("flush1", "flush", p="p")
    sc.add("abort1", "abort", p="p")
    sc.add("begin2", "begin", p="p")
    sc.add("send2", "send", p="p", topic=a, start=100, n=20, tag="kept")
    sc.add("commit2", "commit", p="p")
    sc.add("begin3", "begin", p="p")
    sc.add("send3", "send", p="p", topic=a, start=200, n=10, tag="aborted2")
    sc.add("send3b", "send", p="p", topic=b, start=200, n=5, tag="aborted2")
    sc.add("flush3", "flush", p="p")
    sc.add("abort3", "abort", p="p")
    sc.add("begin4", "begin", p="p")
    sc.add("send4", "send", p="p", topic=a, start=300, n=5, tag="kept2")
    sc.add("commit4", "commit", p="p")
    sc.add("rc-a", "read", topic=a, iso="rc", want=25)
    sc.add("rc-b", "read", topic=b, iso="rc", settle_ms=500)
    sc.add("ru-a", "read", topic=a, iso="ru", want=25)
    sc.add("ru-b", "read", topic=b, iso="ru", settle_ms=300)
    res = txn.run(sc)
    for label in sc.labels:
        if not label.startswith(("rc-", "ru-")):
            res.ok(label)
    assert (res["flush1"]["acked"], res["flush1"]["failed"]) == (40, 0), res.context()
    assert (res["flush3"]["acked"], res["flush3"]["failed"]) == (15, 0), res.context()

    want_a = [expected(i, "kept") for i in range(100, 120)]
    want_a += [expected(i, "kept2") for i in range(300, 305)]
    tms = not gateway.external
    check_read(res, "rc-a", want_a, dense=tms)
    check_read(res, "rc-b", [], dense=tms)
    if tms:
        # aborted records are not stored at all: read_uncommitted sees what read_committed sees
        check_read(res, "ru-a", want_a, dense=True)
        check_read(res, "ru-b", [], dense=True)
        assert res["rc-b"]["end"] == 0, res.context()


def test_fenced_zombie(txn, gateway, topic_name):
    """A second producer with the same transactional.id fences the first: the old one's
    send/commit fails with ProducerFencedException (or InvalidProducerEpochException) and its
    records never appear; the new one commits normally."""
    t = topic_name
    tx = txid("fence")
    sc = Scenario()
    sc.add("create", "create", topic=t)
    sc.add("init1", "producer", p="old", txid=tx)
    sc.add("begin1", "begin", p="old")
    sc.add("send1", "send", p="old", topic=t, start=0, n=10, tag="zombie")
    sc.add("flush1", "flush", p="old")
    sc.add("init2", "producer", p="new", txid=tx)
    sc.add("send1-late", "send", p="old", topic=t, start=10, n=5, tag="zombie")
    sc.add("commit1", "commit", p="old")
    sc.add("begin2", "begin", p="new")
    sc.add("send2", "send", p="new", topic=t, start=100, n=10, tag="new")
    sc.add("commit2", "commit", p="new")
    sc.add("begin1-again", "begin", p="old")
    sc.add("rc", "read", topic=t, iso="rc", want=10, settle_ms=500)
    sc.add("ru", "read", topic=t, iso="ru", want=10, settle_ms=300)
    res = txn.run(sc)
    for label in ("create", "init1", "begin1", "send1", "init2", "begin2", "send2", "commit2"):
        res.ok(label)
    assert (res["flush1"]["acked"], res["flush1"]["failed"]) == (10, 0), res.context()

    commit1 = res["commit1"]
    assert not commit1["ok"], f"the fenced producer's commit succeeded\n{res.context()}"
    seen = error_chain(res["send1-late"]) | error_chain(commit1)
    assert seen & FENCED, (
        f"the fenced producer got {sorted(seen)}, expected one of {sorted(FENCED)}\n{res.context()}"
    )
    assert not res["begin1-again"]["ok"], f"a fenced producer began a transaction\n{res.context()}"

    want = [expected(i, "new") for i in range(100, 110)]
    check_read(res, "rc", want, dense=not gateway.external)
    if not gateway.external:
        check_read(res, "ru", want, dense=True)


def test_killed_producer_aborted_by_next_instance(txn, gateway, topic_name):
    """A producer SIGKILLed with a flushed, open transaction: the next instance's
    initTransactions aborts it; only the new instance's records become visible."""
    t = topic_name
    tx = txid("kill")
    sc = Scenario()
    sc.add("create", "create", topic=t)
    sc.add("init", "producer", p="p", txid=tx)
    sc.add("begin", "begin", p="p")
    sc.add("send", "send", p="p", topic=t, start=0, n=20, tag="dead")
    sc.add("flush", "flush", p="p")
    sc.add("hang", "hang")
    dead = txn.run_and_kill(sc)
    for label in ("create", "init", "begin", "send"):
        dead.ok(label)
    assert (dead.ok("flush")["acked"], dead["flush"]["failed"]) == (20, 0), dead.context()

    sc2 = Scenario()
    sc2.add("init", "producer", p="q", txid=tx)
    sc2.add("begin", "begin", p="q")
    sc2.add("send", "send", p="q", topic=t, start=100, n=10, tag="new")
    sc2.add("commit", "commit", p="q")
    sc2.add("rc", "read", topic=t, iso="rc", want=10, settle_ms=500)
    sc2.add("ru", "read", topic=t, iso="ru", want=10, settle_ms=300)
    res = txn.run(sc2)
    for label in ("init", "begin", "send", "commit"):
        res.ok(label)
    want = [expected(i, "new") for i in range(100, 110)]
    check_read(res, "rc", want, dense=not gateway.external)
    if not gateway.external:
        check_read(res, "ru", want, dense=True)


def test_killed_producer_aborted_by_timeout(txn, gateway, topic_name):
    """transaction.timeout.ms=3000 and no new instance: a SIGKILLed producer's open transaction
    is aborted by the timeout (so is a live producer's: its late commit fails); none of their
    records ever appear, while a plain record written after them does."""
    t = topic_name
    tx_dead, tx_idle = txid("timeout-dead"), txid("timeout-idle")
    sc = Scenario()
    sc.add("create", "create", topic=t)
    sc.add("init", "producer", p="p", txid=tx_dead, txn_timeout_ms=3000)
    sc.add("begin", "begin", p="p")
    sc.add("send", "send", p="p", topic=t, start=0, n=20, tag="dead")
    sc.add("flush", "flush", p="p")
    sc.add("hang", "hang")
    dead = txn.run_and_kill(sc)
    for label in ("create", "init", "begin", "send"):
        dead.ok(label)
    assert (dead.ok("flush")["acked"], dead["flush"]["failed"]) == (20, 0), dead.context()
    killed_at = time.monotonic()

    sc2 = Scenario()
    sc2.add("init", "producer", p="idle", txid=tx_idle, txn_timeout_ms=3000)
    sc2.add("begin", "begin", p="idle")
    sc2.add("send", "send", p="idle", topic=t, start=50, n=5, tag="idle")
    sc2.add("flush", "flush", p="idle")
    sc2.add("sentinel", "plain", topic=t, start=1000, n=1, tag="sentinel")
    # Kafka: read_committed is held back until both transactions are aborted by the coordinator
    # (transaction timeout + its abort check interval, 10 s by default)
    sc2.add("rc-wait", "read", topic=t, iso="rc", want=1, max_ms=40000, settle_ms=0)
    # describe-txn repeats until the state is no longer Ongoing: the idle producer's
    # transaction is then past its timeout and aborted
    sc2.add("describe-dead", "describe-txn", txid=tx_dead, wait_ms=25000)
    sc2.add("describe-idle", "describe-txn", txid=tx_idle, wait_ms=25000)
    sc2.add("commit-idle", "commit", p="idle")
    sc2.add("rc", "read", topic=t, iso="rc", want=1, settle_ms=500)
    sc2.add("ru", "read", topic=t, iso="ru", want=1, settle_ms=300)
    res = txn.run(sc2, timeout=120)
    for label in ("init", "begin", "send", "sentinel"):
        res.ok(label)
    assert (res.ok("flush")["acked"], res["flush"]["failed"]) == (5, 0), res.context()
    sentinel = [expected(1000, "sentinel")]
    check_read(res, "rc-wait", sentinel)
    elapsed = time.monotonic() - killed_at
    assert elapsed > 3.0, elapsed

    unsupported = "org.apache.kafka.common.errors.UnsupportedVersionException"
    for label in ("describe-dead", "describe-idle"):
        d = res[label]
        if not d["ok"] and d.get("error") == unsupported and not gateway.external:
            continue  # DescribeTransactions is optional for tmsgate; the other checks stand
        res.ok(label)
        assert d["state"] in ("COMPLETE_ABORT", "EMPTY"), (
            f"{label}: transaction state {d['state']} (seen {d['states_seen']}) after its "
            f"timeout\n{res.context()}"
        )

    commit = res["commit-idle"]
    assert not commit["ok"], f"a transaction past its timeout committed\n{res.context()}"
    check_read(res, "rc", sentinel, dense=False)
    if not gateway.external:
        check_read(res, "ru", sentinel, dense=True)


def ctp_events(res: TxnResult, kind: str) -> list[dict]:
    return [e for e in res.events if e["event"] == kind]


def test_consume_transform_produce_exactly_once_across_kills(txn, gateway, topic_name):
    """A consume-transform-produce worker (group G, read_committed, a transactional producer,
    sendOffsetsToTransaction with consumer.groupMetadata(), a commit every 50 records) is
    SIGKILLed twice mid-run -- once with produced records in its open transaction, once after
    sendOffsetsToTransaction -- and restarted with the same transactional.id: the output holds
    every input record exactly once, in order, and the group's offset is the input's end."""
    n = 600
    inp, out = f"{topic_name}-in", f"{topic_name}-out"
    group = f"compat-java-ctp-{uuid.uuid4().hex[:8]}"
    tx = txid("ctp")
    worker = dict(**{"in": inp}, out=out, group=group, txid=tx, every=50)

    sc1 = Scenario()
    sc1.add("create-in", "create", topic=inp)
    sc1.add("create-out", "create", topic=out)
    sc1.add("input", "plain", topic=inp, start=0, n=n, tag="in")
    sc1.add("ctp", "ctp", **worker, hang_after=175)
    run1 = txn.run_and_kill(sc1)
    for label in ("create-in", "create-out"):
        run1.ok(label)
    offs = run1.ok("input")["offsets"]
    assert_dense_offsets(offs, 0, n, "input offsets")
    assert [e["offset"] for e in ctp_events(run1, "ctp-commit")] == [50, 100, 150], run1.context()
    (hang1,) = ctp_events(run1, "hang")
    assert (hang1["last_offset"], hang1["pending"]) == (174, 25), run1.context()

    sc2 = Scenario()
    sc2.add("ctp", "ctp", **worker, hang_after=100, hang_at="offsets")
    run2 = txn.run_and_kill(sc2)
    assert [e["offset"] for e in ctp_events(run2, "ctp-commit")] == [200], (
        f"the restarted worker did not resume at the committed offset 150\n{run2.context()}"
    )
    (hang2,) = ctp_events(run2, "hang")
    assert (hang2["last_offset"], hang2["offsets_sent"]) == (249, 250), run2.context()

    sc3 = Scenario()
    sc3.add("offset-before", "group-offset", group=group, topic=inp)
    sc3.add("ctp", "ctp", **worker, until=n, max_ms=60000)
    sc3.add("offset-after", "group-offset", group=group, topic=inp)
    sc3.add("rc-out", "read", topic=out, iso="rc", want=n, max_ms=30000)
    sc3.add("ru-out", "read", topic=out, iso="ru", want=n, max_ms=30000)
    res = txn.run(sc3, timeout=120)
    # the killed transaction's sendOffsetsToTransaction(250) must not count
    assert res.ok("offset-before")["offset"] == 200, res.context()
    ctp = res.ok("ctp")
    assert ctp["first_offset"] == 200 and ctp["done"], res.context()
    got = res.ok("offset-after")["offset"]
    assert got == n, f"group offset {got}, expected the input's end {n}\n{res.context()}"
    want = [
        {
            "key": f"k-{i}",
            "value": f"out:v-{i}-in",
            "headers": [["idx", str(i)], ["hk", f"hv-{i}"], ["src-offset", str(i)]],
        }
        for i in range(n)
    ]
    check_read(res, "rc-out", want, dense=not gateway.external)
    if not gateway.external:
        check_read(res, "ru-out", want, dense=True)
