"""Consumer groups end to end: a `tmsgate serve` subprocess over LevelDB, and the real
clients (kafka-python 3, aiokafka, confluent-kafka, kcat, the Java client)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from kafka.admin import KafkaAdminClient

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# Short enough to keep the suite fast, what a test deployment would set; Kafka's is 3000.
INITIAL_DELAY_MS = 100
SESSION_MS = 6000  # Kafka's group.min.session.timeout.ms


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Gateway:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.store_url = f"leveldb://{workdir / 'store'}"
        self.log_path = workdir / "gateway.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = dict(
            os.environ,
            PYTHONUNBUFFERED="1",
            TMSGATE_GROUP_INITIAL_REBALANCE_DELAY_MS=str(INITIAL_DELAY_MS),
        )
        cmd = [
            sys.executable,
            str(HERE / "groups_gateway.py"),
            "serve",
            "--store",
            self.store_url,
            "--kafka-listen",
            self.bootstrap,
            "--no-http",
        ]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"gateway exited:\n{self.log()}"
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"gateway did not listen:\n{self.log()}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=20)
            self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]


@pytest.fixture(scope="module")
def gw(tmp_path_factory) -> Iterator[Gateway]:
    gateway = Gateway(tmp_path_factory.mktemp("groups-gw"))
    gateway.start()
    yield gateway
    gateway.stop()
    log = gateway.log_path.read_text(errors="replace")
    assert "Traceback" not in log and " ERROR " not in log, log[-6000:]


@pytest.fixture
def topic(gw: Gateway) -> str:
    return f"gt-{uuid.uuid4().hex[:8]}"


def produce(gw: Gateway, topic: str, n: int, start: int = 0) -> None:
    p = KafkaProducer(bootstrap_servers=gw.bootstrap)
    for i in range(start, start + n):
        p.send(topic, f"m-{i}".encode())
    p.flush()
    p.close()


def consume_python(gw: Gateway, topic: str, group: str, n: int, **kw) -> list[int]:
    """kafka-python: read n records in the group, commit, close; -> their offsets."""
    c = KafkaConsumer(
        topic,
        bootstrap_servers=gw.bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=10000,
        **kw,
    )
    got = []
    for r in c:
        got.append(r.offset)
        if len(got) == n:
            break
    c.commit({TopicPartition(topic, 0): OffsetAndMetadata(got[-1] + 1, "kp", -1)} if got else None)
    c.close()
    return got


def wait_for(pred: Callable[[], object], timeout: float, what: str) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def committed(gw: Gateway, group: str, topic: str) -> int:
    admin = KafkaAdminClient(bootstrap_servers=gw.bootstrap)
    try:
        offsets = admin.list_group_offsets(group)[group]
    finally:
        admin.close()
    meta = offsets.get(TopicPartition(topic, 0))
    return -1 if meta is None else meta.offset


# --- resume after commit, per client -----------------------------------------------------
def test_kafka_python_resumes_exactly_after_the_commit(gw, topic):
    produce(gw, topic, 30)
    assert consume_python(gw, topic, "kp", 10) == list(range(10))
    assert committed(gw, "kp", topic) == 10
    assert consume_python(gw, topic, "kp", 20) == list(range(10, 30))


def test_aiokafka_resumes_exactly_after_the_commit(gw, topic):
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as TP

    produce(gw, topic, 30)

    async def read(n: int) -> list[int]:
        c = AIOKafkaConsumer(
            topic,
            bootstrap_servers=gw.bootstrap,
            group_id="aio",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await c.start()
        got: list[int] = []
        try:
            async for r in c:
                got.append(r.offset)
                if len(got) == n:
                    break
            await c.commit({TP(topic, 0): got[-1] + 1})
            assert await c.committed(TP(topic, 0)) == got[-1] + 1
        finally:
            await c.stop()
        return got

    assert asyncio.run(asyncio.wait_for(read(12), 30)) == list(range(12))
    assert asyncio.run(asyncio.wait_for(read(18), 30)) == list(range(12, 30))


def test_confluent_kafka_resumes_exactly_after_the_commit(gw, topic):
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as TP

    produce(gw, topic, 30)

    def read(n: int) -> list[int]:
        c = Consumer(
            {
                "bootstrap.servers": gw.bootstrap,
                "group.id": "ck",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        c.subscribe([topic])
        got: list[int] = []
        deadline = time.monotonic() + 20
        last = None
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            got.append(m.offset())
            last = m
        c.commit(message=last, asynchronous=False)
        (tp,) = c.committed([TP(topic, 0)], timeout=10)
        assert tp.offset == got[-1] + 1
        c.close()
        return got

    assert read(7) == list(range(7))
    assert read(23) == list(range(7, 30))


def test_kcat_balanced_consumer_commits(gw, topic):
    kcat = shutil.which("kcat")
    if kcat is None:
        pytest.skip("kcat not installed")
    produce(gw, topic, 5)
    out = subprocess.run(
        [
            kcat,
            "-b",
            gw.bootstrap,
            "-G",
            "kc",
            "-X",
            "auto.offset.reset=earliest",
            "-e",
            "-q",
            "-f",
            "%o\n",
            topic,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.split() == ["0", "1", "2", "3", "4"], out.stderr
    assert wait_for(lambda: committed(gw, "kc", topic) == 5, 10, "kcat's commit")


def test_two_groups_each_receive_every_message(gw, topic):
    produce(gw, topic, 25)
    assert consume_python(gw, topic, "both-a", 25) == list(range(25))
    assert consume_python(gw, topic, "both-b", 25) == list(range(25))


def test_a_recreated_topic_does_not_inherit_the_old_commit(gw, topic):
    produce(gw, topic, 5)
    assert consume_python(gw, topic, "regen", 2) == [0, 1]
    admin = KafkaAdminClient(bootstrap_servers=gw.bootstrap)
    try:
        admin.delete_topics([topic])
    finally:
        admin.close()
    produce(gw, topic, 6)  # auto-created again: a new generation, offsets from 0
    assert consume_python(gw, topic, "regen", 6) == list(range(6))


# --- membership ------------------------------------------------------------------------
class Member:
    def __init__(self, gw: Gateway, client: str, topic: str, group: str) -> None:
        self.client = client
        self.events: list[dict] = []
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(HERE / "group_member.py"),
                client,
                gw.bootstrap,
                topic,
                group,
                str(SESSION_MS),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.events.append(json.loads(line))
            except ValueError:
                continue

    @property
    def assignment(self) -> list[int] | None:
        assigned = [e for e in self.events if e["event"] == "assigned"]
        return assigned[-1]["partitions"] if assigned else None

    def offsets(self, since: int = 0) -> list[int]:
        return [e["offset"] for e in self.events[since:] if e["event"] == "msg"]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


def test_one_owner_among_three_clients_and_takeover_after_sigkill(gw, topic):
    """kafka-python, aiokafka and librdkafka in one group: exactly one owns partition 0.
    Its process is SIGKILLed (no LeaveGroup); within the session timeout another member
    takes over and resumes exactly at the last committed offset."""
    produce(gw, topic, 1)
    group = f"trio-{topic}"
    members = [Member(gw, c, topic, group) for c in ("kafka-python", "aiokafka", "confluent")]
    stop = threading.Event()
    sent = [1]

    def keep_producing() -> None:
        p = KafkaProducer(bootstrap_servers=gw.bootstrap, linger_ms=0)
        while not stop.is_set():
            p.send(topic, f"m-{sent[0]}".encode())
            p.flush()
            sent[0] += 1
            time.sleep(0.02)
        p.close()

    producer = threading.Thread(target=keep_producing, daemon=True)
    producer.start()
    try:

        def settled() -> object:
            assignments = [m.assignment for m in members]
            return None not in assignments and sorted(map(tuple, assignments)) == [(), (), (0,)]

        wait_for(settled, 40, f"one owner among {[m.assignment for m in members]}")
        owner = next(m for m in members if m.assignment == [0])
        wait_for(lambda: len(owner.offsets()) > 20, 20, "the owner consuming")
        owner.kill()
        killed_at = time.monotonic()
        time.sleep(1)  # a commit already on the wire when it died may still land
        last_commit = committed(gw, group, topic)
        assert last_commit > 0
        others = [m for m in members if m is not owner]
        marks = [len(m.events) for m in others]
        wait_for(
            lambda: any(m.offsets(k) for m, k in zip(others, marks, strict=True)), 30, "a takeover"
        )
        took = time.monotonic() - killed_at
        heir, mark = next((m, k) for m, k in zip(others, marks, strict=True) if m.offsets(k))
        assert heir.assignment == [0]
        assert heir.offsets(mark)[0] == last_commit, (heir.client, heir.offsets(mark)[:5])
        assert took < SESSION_MS / 1000 + 5, f"takeover took {took:.1f} s"
        print(f"takeover by {heir.client} after {took:.1f} s")
    finally:
        stop.set()
        for m in members:
            m.kill()


def test_regex_subscription_picks_up_a_topic_created_later(gw, topic):
    first, later = f"{topic}-re-a", f"{topic}-re-b"
    produce(gw, first, 3)
    c = KafkaConsumer(
        bootstrap_servers=gw.bootstrap,
        group_id=f"re-{topic}",
        auto_offset_reset="earliest",
        metadata_max_age_ms=500,
        consumer_timeout_ms=500,
    )
    c.subscribe(pattern=f"^{topic}-re-.*")
    try:
        seen: set[tuple[str, int]] = set()

        def poll() -> set:
            for records in c.poll(timeout_ms=200).values():
                seen.update((r.topic, r.offset) for r in records)
            return seen

        wait_for(lambda: {(first, i) for i in range(3)} <= poll(), 20, "the first topic")
        produce(gw, later, 2)
        wait_for(lambda: {(later, 0), (later, 1)} <= poll(), 20, "the topic created later")
        assert c.assignment() == {TopicPartition(first, 0), TopicPartition(later, 0)}
    finally:
        c.close()


# --- durability -------------------------------------------------------------------------
def test_offsets_and_groups_survive_a_gateway_restart(gw, topic):
    produce(gw, topic, 10)
    assert consume_python(gw, topic, "durable", 4) == [0, 1, 2, 3]
    # A member that stays up across the restart keeps its generation: no rebalance.
    live = KafkaConsumer(
        topic,
        bootstrap_servers=gw.bootstrap,
        group_id="durable-live",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=500,
    )
    try:
        wait_for(lambda: live.poll(timeout_ms=200) or live.assignment(), 20, "a live member")
        generation = live._coordinator._generation.generation_id
        member_id = live._coordinator._generation.member_id
        gw.restart()
        produce(gw, topic, 2, start=10)
        got = []
        wait_for(
            lambda: (
                got.extend(r.offset for rs in live.poll(timeout_ms=200).values() for r in rs)
                or 11 in got
            ),
            30,
            "consumption after the restart",
        )
        assert live._coordinator._generation.generation_id == generation
        assert live._coordinator._generation.member_id == member_id
        admin = KafkaAdminClient(bootstrap_servers=gw.bootstrap)
        try:
            desc = admin.describe_groups(["durable-live"])["durable-live"]
        finally:
            admin.close()
        assert desc["group_state"] == "Stable"
        assert [m["member_id"] for m in desc["members"]] == [member_id]
    finally:
        live.close()
    assert committed(gw, "durable", topic) == 4
    assert consume_python(gw, topic, "durable", 8) == list(range(4, 12))


# --- the Java AdminClient ----------------------------------------------------------------
def java_classpath(tmp_path: Path) -> str:
    lib = ROOT / "compat-tests" / "java" / "lib"
    if shutil.which("javac") is None or not list(lib.glob("kafka-clients-*.jar")):
        build = ROOT / "compat-tests" / "java" / "build.sh"
        if shutil.which("javac") is None or not build.exists():
            pytest.skip("no JDK or kafka-clients jars")
        subprocess.run(["bash", str(build)], check=True, capture_output=True, timeout=300)
    out = tmp_path / "java"
    subprocess.run(
        [
            "javac",
            "-nowarn",
            "-cp",
            f"{lib}/*",
            "-d",
            str(out),
            str(HERE / "java" / "GroupsAdmin.java"),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return f"{out}:{lib}/*"


def test_java_admin_client_lists_describes_alters_and_deletes_groups(gw, topic, tmp_path):
    classpath = java_classpath(tmp_path)
    produce(gw, topic, 6)
    group = f"java-{topic}"
    p = subprocess.run(
        [
            "java",
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            "-cp",
            classpath,
            "GroupsAdmin",
            gw.bootstrap,
            group,
            topic,
            "4",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr[-4000:]
    steps = {d["step"]: d for d in map(json.loads, p.stdout.splitlines())}
    assert steps["consumed"]["offsets"] == [0, 1, 2, 3]
    assert {"group": group, "state": "Stable"} in steps["list"]["groups"]
    d = steps["describe"]
    assert (d["state"], d["assignor"], d["coordinator"]) == ("Stable", "range", 0)
    assert [(m["client_id"], m["assignment"]) for m in d["members"]] == [
        ("java-groups", [f"{topic}-0"])
    ]
    assert d["members"][0]["host"] == "/127.0.0.1"
    assert steps["offsets"]["offsets"] == [
        {"topic": topic, "partition": 0, "offset": 4, "metadata": "java"}
    ]
    assert steps["altered"]["offsets"][0]["offset"] == 2
    assert steps["describe-empty"] == {"step": "describe-empty", "state": "Empty", "members": 0}
    assert steps["offsets-deleted"]["offsets"] in (
        [],
        [{"topic": topic, "partition": 0, "offset": -1, "metadata": None}],
    )
    assert group not in {g["group"] for g in steps["deleted"]["groups"]}
