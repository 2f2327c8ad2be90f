"""Shared plumbing for the stream-processing compat tests (test_quixstreams.py, test_faust.py).

The apps under test run as separate processes (so a test can SIGKILL them) with the Python
named by TMSGATE_COMPAT_<LIBRARY>_PYTHON (TMSGATE_COMPAT_QUIXSTREAMS_PYTHON,
TMSGATE_COMPAT_FAUST_PYTHON), or else the interpreter running pytest. A library that pins a
different confluent-kafka than the suite's (quixstreams 3.x wants confluent-kafka<2.13) can so
live in a venv of its own. The tests' own producers and read_committed consumers are
the suite's confluent-kafka.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

HERE = Path(__file__).resolve().parent
SENTINEL_KEY = b"__compat_sentinel__"


def python_for(module: str) -> str:
    """The interpreter that runs the app using `module`."""
    return os.environ.get(f"TMSGATE_COMPAT_{module.upper()}_PYTHON") or sys.executable


def import_error(module: str) -> str | None:
    """None when `module` imports under python_for(module), else the reason (for a skip)."""
    py = python_for(module)
    try:
        p = subprocess.run(
            [py, "-c", f"import {module}"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{py} -c 'import {module}': {exc!r}"
    if p.returncode != 0:
        tail = p.stderr.strip().splitlines()[-1:] or ["?"]
        return (
            f"{module} is not importable by {py} ({tail[0]}); install it or point "
            f"TMSGATE_COMPAT_{module.upper()}_PYTHON at an interpreter that has it"
        )
    return None


def tail(path: Path, max_chars: int = 6000) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return "<no output>"
    text = data.decode("utf-8", "replace")
    # The apps' own noise (deprecation warnings at import) is not worth the space.
    return text[-max_chars:]


class App:
    """One app process: `python streams_apps/<script> args...`, output to a log file.

    A test starts it, kills it (SIGKILL) or stops it (SIGTERM), and starts it again; every run
    appends to the same log, with a banner, so a failure shows the whole story.
    """

    def __init__(self, python: str, script: str, args: list, log_path: Path):
        self.cmd = [python, str(HERE / script), *map(str, args)]
        self.log_path = log_path
        self.env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONWARNINGS="ignore")
        self.proc: subprocess.Popen | None = None
        self.runs = 0
        self.log_start = 0  # where the current run's output starts in the log

    def start(self, args: list[str] | None = None) -> None:
        assert self.proc is None or self.proc.poll() is not None, "app already running"
        cmd = self.cmd if args is None else [*self.cmd[:2], *map(str, args)]
        self.runs += 1
        with open(self.log_path, "ab") as log:
            self.log_start = log.tell()
            log.write(f"\n===== run #{self.runs}: {' '.join(cmd)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no clean shutdown, an open transaction is left behind."""
        if self.proc is None:
            return
        with open(self.log_path, "ab") as log:
            log.write(b"\n===== SIGKILL\n")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM and wait (SIGKILL after `timeout`); returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with open(self.log_path, "ab") as log:
                    log.write(f"\n===== no exit {timeout:.0f}s after SIGTERM: SIGKILL\n".encode())
                self.kill()
        return self.proc.returncode

    def output(self, max_chars: int = 6000) -> str:
        return tail(self.log_path, max_chars)

    def run_output(self) -> str:
        """The current (last) run's output only."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self.log_start)
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def describe(self) -> str:
        state = "running" if self.alive() else f"exited {self.proc and self.proc.returncode}"
        return f"app {self.cmd[1]} ({state}); its output (tail):\n{self.output()}"


def create_topics(bootstrap: str, topics: dict[str, int], timeout: float = 20.0) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futs = admin.create_topics(
        [NewTopic(t, num_partitions=n, replication_factor=1) for t, n in topics.items()],
        request_timeout=timeout,
    )
    for f in futs.values():
        f.result(timeout)


def topic_configs(bootstrap: str, topic: str, timeout: float = 20.0) -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    fut = admin.describe_configs([res], request_timeout=timeout)[res]
    return {k: v.value for k, v in fut.result(timeout).items()}


def topic_exists(bootstrap: str, topic: str) -> bool:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return topic in admin.list_topics(timeout=10).topics


def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None]]) -> None:
    """Plain (idempotent) producer, every record acknowledged or the test fails."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    errors: list[str] = []

    def cb(err, msg):
        if err is not None:
            errors.append(str(err))

    for i, (k, v) in enumerate(records):
        while True:
            try:
                p.produce(topic, key=k, value=v, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.1)
        if i % 500 == 0:
            p.poll(0)
    left = p.flush(30)
    assert left == 0 and not errors, (
        f"produce to {topic}: {left} unacknowledged, errors {errors[:3]}"
    )


class Reader:
    """A read_committed consumer (no group: assign from the beginning) that accumulates the
    records of one topic's partitions across calls, in (partition, offset) order."""

    def __init__(self, bootstrap: str, topic: str, partitions: int = 1):
        self.topic = topic
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"compat-streams-reader-{os.getpid()}-{time.monotonic_ns()}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 100,
            }
        )
        self.consumer.assign(
            [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)]
        )
        self.records: list[tuple[int, int, bytes | None, bytes | None]] = []
        self.errors: list[str] = []

    def drain(self, seconds: float = 0.3) -> int:
        """Poll for up to `seconds`; returns how many records came."""
        n = 0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            msgs = self.consumer.consume(1000, timeout=0.1)
            for m in msgs:
                if m.error():
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        self.errors.append(str(m.error()))
                    continue
                self.records.append((m.partition(), m.offset(), m.key(), m.value()))
                n += 1
        return n

    def data(self) -> list[tuple[bytes | None, bytes | None]]:
        return [(k, v) for _, _, k, v in self.records if k != SENTINEL_KEY]

    def wait(self, pred: Callable[[], bool], timeout: float, what: str, app: App | None) -> None:
        """Drain until pred() holds; fail (with the app's output) on timeout or app exit."""
        deadline = time.monotonic() + timeout
        while not pred():
            if app is not None and not app.alive():
                self.drain(1.0)
                if pred():
                    return
                raise AssertionError(
                    f"waiting for {what}: the app exited (code {app.proc.returncode}); "
                    f"{len(self.data())} records read from {self.topic}\n{app.describe()}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out after {timeout:.0f}s waiting for {what}; "
                    f"{len(self.data())} records read from {self.topic} "
                    f"({self.positions()}); reader errors "
                    f"{self.errors[-3:]}\n" + (app.describe() if app is not None else "")
                )
            self.drain(0.3)

    def positions(self) -> str:
        """Per partition: the last offset read and the broker's watermarks (whether the
        records were not written, or written and not read)."""
        out = []
        for tp in self.consumer.assignment():
            low, high = self.consumer.get_watermark_offsets(tp, timeout=5)
            last = max((o for p, o, _, _ in self.records if p == tp.partition), default=-1)
            out.append(f"p{tp.partition}: read up to {last}, watermarks [{low}, {high})")
        return "; ".join(out)

    def read_to_end(self, bootstrap: str, timeout: float = 30.0) -> None:
        """Produce a plain sentinel record to every partition and read up to all of them: the
        records before it are then all there is (committed), not a guess from a timeout.
        Call with no transactional writer left running."""
        parts = {p for p, *_ in self.records} | {0}
        n_parts = max(parts) + 1
        produce_sentinels(bootstrap, self.topic, n_parts)
        deadline = time.monotonic() + timeout
        while True:
            seen = {p for p, _, k, _ in self.records if k == SENTINEL_KEY}
            if len(seen) >= n_parts:
                return
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{self.topic}: the sentinel record(s) did not show up within {timeout}s "
                    f"under read_committed (seen in partitions {sorted(seen)}); reader errors "
                    f"{self.errors[-3:]}"
                )
            self.drain(0.3)

    def read_to_watermarks(self, partitions: int, timeout: float = 30.0) -> None:
        """Read every partition up to its high watermark as it is now (for topics a test
        must not write a sentinel to, such as an app's changelog; no writer may be running)."""
        tps = [TopicPartition(self.topic, p) for p in range(partitions)]
        highs = {tp.partition: self.consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in tps}
        deadline = time.monotonic() + timeout
        while True:
            pos = {tp.partition: tp.offset for tp in self.consumer.position(tps)}
            behind = {p: (pos[p], h) for p, h in highs.items() if h > 0 and pos[p] < h}
            if not behind:
                return
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{self.topic}: not read up to the high watermarks within {timeout}s: "
                    f"(position, high watermark) per partition {behind}; errors {self.errors[-3:]}"
                )
            self.drain(0.3)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.consumer.close()


def produce_sentinels(bootstrap: str, topic: str, partitions: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for part in range(partitions):
        p.produce(topic, key=SENTINEL_KEY, value=b"", partition=part)
    assert p.flush(20) == 0, f"sentinel to {topic} not acknowledged"


def outputs_of(reader: Reader) -> list[tuple[str, int]]:
    """(key, count) of the {"key": K, "count": N} records read so far, in output order."""
    out = []
    for k, v in reader.data():
        doc = json.loads(v)
        assert doc["key"] == k.decode(), f"output key {k!r} carries {doc!r}"
        out.append((doc["key"], doc["count"]))
    return out


def prefix_report(outputs: list[tuple[str, int]]) -> str:
    """For a run that failed half-way: are the outputs committed so far a consistent prefix
    (every key's counts 1, 2, ..., m for some m)?"""
    per_key: dict[str, list[int]] = {}
    for k, c in outputs:
        per_key.setdefault(k, []).append(c)
    bad = {k: v for k, v in per_key.items() if v != list(range(1, len(v) + 1))}
    if not bad:
        return (
            f"the {len(outputs)} committed outputs so far are a consistent prefix "
            f"(every one of {len(per_key)} keys counts 1..m, no duplicate, no gap)"
        )
    k, v = next(iter(sorted(bad.items())))
    steps = [(a, b) for a, b in itertools.pairwise(v) if b != a + 1]
    return (
        f"the {len(outputs)} committed outputs so far are NOT consistent: {len(bad)} keys "
        f"have duplicates or gaps, e.g. {k}: {len(v)} outputs, first bad steps {steps[:5]}"
    )


def check_running_counts(
    outputs: list[tuple[str, int]], expected: dict[str, int], what: str
) -> None:
    """outputs: (key, count) in output order. Every key's counts must be exactly 1, 2, ...,
    expected[key]: strictly increasing by one (no duplicate, no gap), ending at the number of
    input records for the key."""
    per_key: dict[str, list[int]] = {}
    for k, c in outputs:
        per_key.setdefault(k, []).append(c)
    problems = []
    for k in sorted(set(expected) | set(per_key)):
        got = per_key.get(k, [])
        want = expected.get(k, 0)
        if got != list(range(1, want + 1)):
            dups = len(got) - len(set(got))
            gaps = sorted(set(range(1, want + 1)) - set(got))
            bad_steps = [(a, b) for a, b in itertools.pairwise(got) if b != a + 1]
            problems.append(
                f"key {k}: expected counts 1..{want}, got {len(got)} outputs ending at "
                f"{got[-1] if got else None}; {dups} duplicates, missing {gaps[:10]}, "
                f"first bad steps {bad_steps[:5]}"
            )
    assert not problems, (
        f"{what}: {len(problems)} of {len(expected)} keys wrong "
        f"({len(outputs)} outputs for {sum(expected.values())} inputs):\n  "
        + "\n  ".join(problems[:15])
    )
