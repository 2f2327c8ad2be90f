"""Kafka Connect 4.1 in distributed mode against a live tmsgate, with exactly-once source support.

A real worker (`org.apache.kafka.connect.cli.ConnectDistributed`, jars from
compat-tests/connect/fetch_jars.sh) keeps its config, offsets and status in topics it creates
itself (cleanup.policy=compact, replication factor 1) on the gateway, and runs two connectors
created through its REST API:

  FileStreamSource  in.txt -> topic T   exactly.once.support=required, transaction.boundary=poll
  FileStreamSink    T -> out.txt        consumer.override.isolation.level=read_committed

With `exactly.once.source.support=enabled` the worker writes its config topic with a
transactional producer, fences zombie source tasks (Admin.fenceProducers) and commits each
poll's records together with the source offsets in one transaction.

Each test writes lines, waits for them in out.txt, stops the worker (SIGTERM, or SIGKILL while
a batch is in flight), appends more lines and starts a fresh worker on the same storage topics:
the connectors must come back from the config topic by themselves and carry on where they were.
Then T, read with a read_committed consumer (confluent-kafka), holds every line exactly once
and in order; out.txt does too after SIGTERM, and after SIGKILL (the file sink is
at-least-once) holds every line, in order once duplicates are dropped, with no more
duplicates than the batch written after the sink group's last committed offset (the SIGKILL
variant waits for that commit before the kill, so the new worker's sink must resume from it).

The Jetty 12 jars in the wheel come with jetty-security 9.4, which Jetty 12's servlet context
cannot load; fetch_jars.sh leaves it out and compiles a small stand-in (see its header).

A wait that times out fails with the worker's error lines and the tail of its log (the
gateway's log is added by conftest).

    .venv/bin/pytest compat-tests/test_kafka_connect.py
    CONNECT_COMPAT_LOG_LEVEL=DEBUG ...     # the worker's log level (connect-log4j2.properties)
    TMSGATE_COMPAT_KEEP_LOG=1 ...          # keep a copy of the worker's log in the temp dir
    TMSGATE_COMPAT_BOOTSTRAP=host:port ... # against a running broker (e.g. Apache Kafka 4.1)
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import pytest
from compat_helpers import IN_CI, free_port, require_tool

pytestmark = pytest.mark.timeout(240)

HERE = Path(__file__).resolve().parent
CONNECT_DIR = HERE / "connect"
LOG4J2 = CONNECT_DIR / "connect-log4j2.properties"

FETCH_TIMEOUT_S = 300.0
REST_UP_TIMEOUT_S = 60.0  # JVM start, cluster id, joining the group
CONNECTOR_TIMEOUT_S = 60.0  # connector + task RUNNING
DATA_TIMEOUT_S = 60.0  # lines through source -> T -> sink
STOP_TIMEOUT_S = 30.0

FIRST = 2000  # lines before the worker is stopped
IN_FLIGHT = 2000  # SIGKILL variant: lines appended just before the kill
AFTER = 1000  # lines appended while no worker runs


# --------------------------------------------------------------------------- jars


@pytest.fixture(scope="session")
def connect_classpath() -> str:
    """Runs compat-tests/connect/fetch_jars.sh once per session; returns the -cp value.

    A missing `java`/`javac` skips (fails under CI, like the rest of the suite); a failed jar
    download always fails.
    """
    require_tool("java", "Kafka Connect needs a Java 17 runtime")
    require_tool("javac", "fetch_jars.sh compiles a jetty-security stand-in (JDK 17)")
    try:
        p = subprocess.run(
            ["bash", str(CONNECT_DIR / "fetch_jars.sh")],
            capture_output=True,
            text=True,
            timeout=FETCH_TIMEOUT_S,
            env=dict(os.environ, PYTHON=sys.executable),
        )
    except subprocess.TimeoutExpired:
        pytest.fail(
            f"compat-tests/connect/fetch_jars.sh did not finish within {FETCH_TIMEOUT_S:.0f}s",
            pytrace=False,
        )
    if p.returncode != 0:
        pytest.fail(
            f"compat-tests/connect/fetch_jars.sh failed (exit {p.returncode}; CI={IN_CI}):\n"
            f"{p.stderr[-3000:]}",
            pytrace=False,
        )
    return p.stdout.strip().splitlines()[-1]


# --------------------------------------------------------------------------- worker


# Worker log lines worth showing in a failure's tail: log records, stack traces, our markers.
_TAIL_KEEP = ("[", "\tat ", "Caused by", "org.", "java.", "=====")


class ConnectWorker:
    """One `ConnectDistributed` JVM; every start appends to the same worker.log."""

    def __init__(self, classpath: str, workdir: Path, bootstrap: str, ident: str):
        self.classpath = classpath
        self.workdir = workdir
        self.log_path = workdir / "worker.log"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.props_path = workdir / "worker.properties"
        props = {
            "bootstrap.servers": bootstrap,
            "group.id": f"compat-connect-{ident}",
            "config.storage.topic": f"compat-connect-{ident}-configs",
            "offset.storage.topic": f"compat-connect-{ident}-offsets",
            "status.storage.topic": f"compat-connect-{ident}-status",
            "config.storage.replication.factor": "1",
            "offset.storage.replication.factor": "1",
            "status.storage.replication.factor": "1",
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            "exactly.once.source.support": "enabled",
            "listeners": self.url,
            "rest.advertised.host.name": "127.0.0.1",
            "rest.advertised.port": str(self.port),
            # The file connectors are on the classpath and declare themselves in
            # META-INF/services; no reflective scan (the reflections jar is not shipped).
            "plugin.discovery": "service_load",
            # Sink offsets committed often (fewer duplicates after SIGKILL), and a departed
            # worker's connectors reassigned at once instead of after 5 minutes.
            "offset.flush.interval.ms": "1000",
            "scheduled.rebalance.max.delay.ms": "0",
            "session.timeout.ms": "6000",
            "heartbeat.interval.ms": "2000",
            # The sink task's consumer: a SIGKILLed worker's member leaves its group after 6 s
            # rather than the consumer default of 45 s.
            "consumer.session.timeout.ms": "6000",
            "consumer.heartbeat.interval.ms": "2000",
        }
        self.props_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.log_start = 0  # where the current run's output begins in worker.log

    def command(self) -> list[str]:
        return [
            "java",
            "-Xmx384m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            f"-Dlog4j2.configurationFile={LOG4J2}",
            "-cp",
            self.classpath,
            "org.apache.kafka.connect.cli.ConnectDistributed",
            str(self.props_path),
        ]

    def start(self) -> None:
        assert self.proc is None
        self.starts += 1
        with open(self.log_path, "ab") as log:
            self.log_start = log.tell()
            log.write(
                f"\n===== compat-tests: {_now()} worker start #{self.starts}: "
                f"{shlex.join(self.command())}\n".encode()
            )
            log.flush()
            self.proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=str(self.workdir),
                start_new_session=True,
            )

    def stop(self, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT_S) -> int | None:
        if self.proc is None:
            return None
        proc, self.proc = self.proc, None
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== compat-tests: {_now()} {signal.Signals(sig).name}\n".encode())
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
                raise AssertionError(
                    f"Connect worker did not exit within {timeout:.0f}s of "
                    f"{signal.Signals(sig).name}\n{self.report()}"
                ) from None
        with open(self.log_path, "ab") as log:
            log.write(
                f"\n===== compat-tests: {_now()} worker exit code {proc.returncode}\n".encode()
            )
        return proc.returncode

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _lines(self, whole: bool = False) -> list[str]:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0 if whole else self.log_start)
                return f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return ["<no worker log>"]

    def report(self, tail: int = 60) -> str:
        """ERROR/WARN lines (with the first line of what follows) and the tail of this run."""
        lines = self._lines()
        picked: list[str] = []
        for i, ln in enumerate(lines):
            if " ERROR " in ln or " WARN " in ln:
                picked.append(ln[:600])
                nxt = lines[i + 1] if i + 1 < len(lines) else ""
                if nxt.startswith(("org.", "java.", "Caused by")):
                    picked.append("    " + nxt[:600])
        if len(picked) > 60:
            picked = [*picked[:30], f"... ({len(picked) - 60} more)", *picked[-30:]]
        # The tail without lines that only differ in numbers from a later one (a client
        # retrying the same failing request fills the log with them).
        tail_lines: list[str] = []
        seen: dict[str, int] = {}
        for ln in reversed(lines):
            if not ln.startswith(_TAIL_KEEP):  # e.g. the clients' configuration dumps
                continue
            key = re.sub(r"\d+", "#", ln)
            if key in seen:
                seen[key] += 1
                continue
            seen[key] = 0
            tail_lines.append(ln[:600])
            if len(tail_lines) >= tail:
                break
        tail_lines.reverse()
        similar = sum(seen.values())
        if similar:
            tail_lines.append(f"({similar} more lines like these, differing only in numbers)")
        state = (
            "running"
            if self.alive()
            else f"NOT RUNNING (exit {self.proc.returncode if self.proc else 'n/a'})"
        )
        return (
            f"--- Connect worker [{state}], log {self.log_path} ---\n"
            f"--- ERROR/WARN lines of this run ---\n" + "\n".join(picked) + "\n"
            f"--- last {tail} distinct lines ---\n" + "\n".join(tail_lines)
        )

    # ---- REST

    def rest(self, method: str, path: str, **kw) -> httpx.Response:
        return httpx.request(method, self.url + path, timeout=10.0, **kw)

    def wait(self, pred, timeout: float, what: str, interval: float = 0.25):
        """Poll pred() until truthy; on timeout fail with what, the last error and the log."""
        deadline = time.monotonic() + timeout
        last: object = None
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(
                    f"Connect worker exited (code {self.proc.returncode}) while waiting for "
                    f"{what}\n{self.report()}"
                )
            try:
                v = pred()
                if v:
                    return v
            except (httpx.HTTPError, OSError, ValueError, KeyError) as exc:
                last = exc
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}\n"
                    f"{self.report()}"
                )
            time.sleep(interval)

    def wait_rest(self) -> None:
        def up():
            r = self.rest("GET", "/")
            return r.status_code == 200 and "version" in r.json()

        self.wait(up, REST_UP_TIMEOUT_S, f"the worker's REST API on {self.url}")

    def put_config(self, name: str, config: dict[str, str]) -> None:
        """PUT /connectors/<name>/config, retried while the herder is not ready yet."""
        last: list[object] = []

        def put():
            r = self.rest("PUT", f"/connectors/{name}/config", json=config)
            last[:] = [r.status_code, r.text[:2000]]
            if r.status_code in (200, 201):
                return True
            if r.status_code in (400, 404, 422):  # config rejected: no point retrying
                raise AssertionError(
                    f"PUT /connectors/{name}/config -> {r.status_code}: {r.text}\n{self.report()}"
                )
            return False

        self.wait(put, CONNECTOR_TIMEOUT_S, f"PUT /connectors/{name}/config (last: {last})")

    def wait_running(self, name: str) -> None:
        state: list[object] = []

        def running():
            r = self.rest("GET", f"/connectors/{name}/status")
            if r.status_code != 200:
                state[:] = [r.status_code, r.text[:2000]]
                return False
            st = r.json()
            state[:] = [st]
            for part in [st["connector"], *st["tasks"]]:
                if part["state"] == "FAILED":
                    raise AssertionError(
                        f"connector {name} FAILED: {part.get('trace', part)}\n{self.report()}"
                    )
            return st["connector"]["state"] == "RUNNING" and any(
                t["state"] == "RUNNING" for t in st["tasks"]
            )

        try:
            self.wait(running, CONNECTOR_TIMEOUT_S, f"connector {name} and its task RUNNING")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nlast status: {state}") from None


# --------------------------------------------------------------------------- helpers


def _now() -> str:
    """Wall-clock time as the worker's log prints it ([HH:MM:SS,mmm])."""
    t = time.time()
    return time.strftime("[%H:%M:%S", time.localtime(t)) + f",{int(t * 1000) % 1000:03d}]"


def append_lines(path: Path, lines: list[str]) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write("".join(ln + "\n" for ln in lines))
        f.flush()
        os.fsync(f.fileno())


def read_lines(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    # FileStreamSink may be mid-write: only complete lines count.
    return text.split("\n")[:-1]


def read_committed(bootstrap: str, topic: str, expect_at_least: int, timeout: float) -> list[str]:
    """Every value of topic (partition 0) from the beginning, with isolation.level=read_committed,
    until the end of the partition is reached with at least expect_at_least records seen."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"compat-connect-reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    got: list[str] = []
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    if len(got) >= expect_at_least:
                        return got
                    continue
                raise AssertionError(f"read_committed consumer of {topic}: {m.error()}")
            got.append(m.value().decode() if m.value() is not None else None)
        raise AssertionError(
            f"read_committed consumer of {topic}: {len(got)} records after {timeout:.0f}s, "
            f"expected at least {expect_at_least}; last {got[-3:]}"
        )
    finally:
        c.close()


def committed_offset(bootstrap: str, group: str, topic: str) -> int | None:
    """The offset group has committed on topic partition 0 (OffsetFetch), None if none."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        (tp,) = c.committed([TopicPartition(topic, 0)], timeout=10)
        return tp.offset if tp.offset >= 0 else None
    finally:
        c.close()


def first_difference(got: list[str], expected: list[str]) -> str:
    for i, (g, e) in enumerate(zip(got, expected, strict=False)):
        if g != e:
            return f"first difference at line {i}: got {g!r}, expected {e!r}"
    return f"got {len(got)} lines, expected {len(expected)}" + (
        f"; first extra {got[len(expected)]!r}" if len(got) > len(expected) else ""
    )


def dedup(lines: list[str]) -> list[str]:
    seen: set[str] = set()
    return [ln for ln in lines if not (ln in seen or seen.add(ln))]


# --------------------------------------------------------------------------- test


@pytest.mark.parametrize("stop_signal", ["SIGTERM", "SIGKILL"])
def test_distributed_worker_file_connectors_exactly_once(
    gateway, topic, connect_classpath, tmp_path, stop_signal
):
    sig = getattr(signal, stop_signal)
    ident = uuid.uuid4().hex[:8]
    workdir = tmp_path / "connect"
    workdir.mkdir()
    infile, outfile = workdir / "in.txt", workdir / "out.txt"
    infile.touch()
    worker = ConnectWorker(connect_classpath, workdir, gateway.bootstrap, ident)
    source, sink = f"file-source-{ident}", f"file-sink-{ident}"
    expected: list[str] = []

    def more(n: int, phase: str) -> None:
        start = len(expected)
        new = [f"line-{i:06d}-{phase}-{ident}" for i in range(start, start + n)]
        expected.extend(new)
        append_lines(infile, new)

    def wait_output(what: str, exact: bool) -> None:
        def done():
            got = read_lines(outfile)
            return dedup(got)[: len(expected)] == expected if not exact else got == expected

        def progress() -> str:
            got = read_lines(outfile)
            return f"out.txt has {len(got)} lines ({len(set(got))} distinct) of {len(expected)}"

        try:
            worker.wait(done, DATA_TIMEOUT_S, f"{what} in out.txt", interval=0.2)
        except AssertionError as exc:
            raise AssertionError(f"{progress()}\n{exc}") from None

    try:
        # ---- first worker: create both connectors through the REST API
        worker.start()
        worker.wait_rest()
        worker.put_config(
            source,
            {
                "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
                "tasks.max": "1",
                "file": str(infile),
                "topic": topic,
                "exactly.once.support": "required",
                "transaction.boundary": "poll",
            },
        )
        worker.put_config(
            sink,
            {
                "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
                "tasks.max": "1",
                "file": str(outfile),
                "topics": topic,
                "consumer.override.isolation.level": "read_committed",
                "consumer.override.auto.offset.reset": "earliest",
            },
        )
        worker.wait_running(source)
        worker.wait_running(sink)

        more(FIRST, "a")
        wait_output(f"the first {FIRST} lines", exact=True)

        # ---- stop the worker
        if sig == signal.SIGKILL:
            # The sink's group has committed the first batch (offset.flush.interval.ms=1000),
            # so the new worker's sink resumes from there (OffsetCommit kept across the kill).
            worker.wait(
                lambda: committed_offset(gateway.bootstrap, f"connect-{sink}", topic) == FIRST,
                DATA_TIMEOUT_S,
                f"group connect-{sink} to commit offset {FIRST} on {topic}",
            )
            # Kill with a batch in flight: some of it may be in an open transaction or written
            # to out.txt without the sink's offsets committed.
            before = len(read_lines(outfile))
            more(IN_FLIGHT, "b")
            worker.wait(
                lambda: len(read_lines(outfile)) > before,
                DATA_TIMEOUT_S,
                "the in-flight batch to start reaching out.txt",
                interval=0.01,
            )
            worker.stop(signal.SIGKILL)
        else:
            rc = worker.stop(signal.SIGTERM)
            assert rc in (0, 143, -signal.SIGTERM), (
                f"worker exit code after SIGTERM: {rc}\n{worker.report()}"
            )

        # ---- lines written while no worker runs; a new worker, connectors not recreated
        more(AFTER, "c")
        worker.start()
        worker.wait_rest()

        def both_listed():
            r = worker.rest("GET", "/connectors")
            return r.status_code == 200 and set(r.json()) == {source, sink}

        worker.wait(both_listed, CONNECTOR_TIMEOUT_S, "both connectors back from the config topic")
        worker.wait_running(source)
        worker.wait_running(sink)
        wait_output(f"all {len(expected)} lines after the restart", exact=sig == signal.SIGTERM)

        # ---- topic T, read_committed: exactly once, in order (exactly-once source)
        in_topic = read_committed(gateway.bootstrap, topic, len(expected), DATA_TIMEOUT_S)
        assert in_topic == expected, (
            f"topic {topic} (read_committed) is not the input exactly once in order: "
            f"{first_difference(in_topic, expected)}"
        )

        out = read_lines(outfile)
        if sig == signal.SIGTERM:
            assert out == expected, f"out.txt: {first_difference(out, expected)}"
        else:
            # The file sink is at-least-once: duplicates allowed, nothing missing or invented,
            # and in order once duplicates are dropped.
            assert set(out) == set(expected), (
                f"out.txt: {len(set(expected) - set(out))} lines missing, "
                f"{len(set(out) - set(expected))} unexpected"
            )
            assert dedup(out) == expected, (
                f"out.txt (deduplicated): {first_difference(dedup(out), expected)}"
            )
            # Redelivered at most what followed the committed offset (the in-flight batch).
            assert len(out) - len(expected) <= IN_FLIGHT, (
                f"out.txt has {len(out) - len(expected)} duplicate lines, more than the "
                f"{IN_FLIGHT} written after the sink's committed offset {FIRST}: the new worker's "
                f"sink did not resume from its group's committed offset"
            )
    finally:
        with contextlib.suppress(Exception):
            worker.stop(signal.SIGTERM, timeout=15)
        if os.environ.get("TMSGATE_COMPAT_KEEP_LOG"):
            keep = Path(tempfile.gettempdir()) / f"connect-worker-{ident}.log"
            shutil.copy(worker.log_path, keep)
            print(f"\nConnect worker log: {keep}", file=sys.stderr)
