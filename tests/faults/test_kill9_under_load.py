"""kill -9 under load: idempotent producers and a committing consumer group while the
gateway is killed with SIGKILL every few seconds and restarted on the same store and port.

Load: a confluent-kafka producer (enable.idempotence=true, acks=all) on one topic and a
kafka-python 3 producer (idempotent by default) on another, each at a steady rate, every
record's value naming its producer and sequence number; delivery callbacks record what was
acknowledged and at which offset. A consumer group of two members (confluent-kafka and
kafka-python, subscribe() to both topics, round-robin assignment, so each member owns one
partition) commits synchronously after every non-empty poll; halfway through, the
kafka-python member is closed and a new one joins (a rebalance: partitions change hands). A
monitor reads the group's committed offsets with OffsetFetch (raw socket) every 100 ms.

Checked at the end (and printed as figures):
- acknowledged lost = 0: every acknowledged value is stored, at the offset it was
  acknowledged with (an ack may carry offset -1 after a retry: then only its presence);
- duplicates stored = 0: no value at two offsets (the producers are idempotent);
- duplicates delivered = 0: within one uninterrupted session of a member (from an
  assignment to the next revocation or loss), no offset comes twice and offsets only go up.
  A new session restarts from the committed offset, so re-delivery of what came after the
  last commit is at-least-once delivery and only counted (``redelivered``);
- committed offsets never go backwards: each member's acknowledged commits, and every
  OffsetFetch answer is at least the highest commit acknowledged before it was asked;
- progress: after the load the group commits the high watermark, and every stored record was
  delivered to some member at least once.

Bounded (CI): CYCLES kills about 3 s apart. Long (TMSGATE_FAULTS_LONG=1): many more, at
higher rates. The kill times come from a seeded random generator (seed printed in the
figures; TMSGATE_FAULTS_SEED=<n> repeats a run).
"""

from __future__ import annotations

import abc
import os
import random
import socket
import struct
import threading
import time
from bisect import bisect_left
from collections import Counter
from itertools import pairwise

import pytest

from .conftest import LONG, scale

CYCLES = scale(4, 60)
KILL_EVERY_S = scale((2.0, 4.0), (2.0, 8.0))
CF_RATE = scale(300, 1000)  # msg/s, confluent-kafka producer
KP_RATE = scale(150, 300)  # msg/s, kafka-python producer
DRAIN_BOUND_S = scale(90.0, 300.0)
GROUP = "faults-kill9"
TOPICS = ("faults-kill9-cf", "faults-kill9-kp")  # (confluent producer's, kafka-python's)

pytestmark = pytest.mark.timeout(300)


def create_topics(bootstrap: str, names: tuple[str, ...]) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20_000)
    try:
        admin.create_topics([NewTopic(name, 1, 1) for name in names])
    finally:
        admin.close()


class Stoppable(threading.Thread, abc.ABC):
    """A worker thread: subclasses say what it does (``body``) until ``stopping`` is set."""

    def __init__(self, name: str) -> None:
        super().__init__(daemon=True, name=name)
        self.stopping = threading.Event()
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            self.body()
        except BaseException as exc:  # reported by the test
            self.failure = exc

    @abc.abstractmethod
    def body(self) -> None: ...

    def stop(self, timeout: float = 60) -> None:
        self.stopping.set()
        self.join(timeout)


# --------------------------------------------------------------------------- producers


class Acks:
    """Acknowledged (value -> offset) of one producer; -1 when the ack had no offset."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: dict[bytes, int] = {}
        self.failed: list[str] = []
        self.sent = 0

    def ok(self, value: bytes, offset: int) -> None:
        with self.lock:
            self.acked[value] = offset

    def fail(self, why: str) -> None:
        with self.lock:
            self.failed.append(why)


class ConfluentProducer(Stoppable):
    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        super().__init__("cf-producer")
        from confluent_kafka import Producer

        self.topic, self.rate, self.acks = topic, rate, Acks()
        self.p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 180_000,
                "reconnect.backoff.max.ms": 500,
            }
        )

    def _done(self, err, msg) -> None:
        if err is None:
            self.acks.ok(msg.value(), msg.offset())
        else:
            self.acks.fail(str(err))

    def body(self) -> None:
        start = time.monotonic()
        while not self.stopping.is_set():
            due = int((time.monotonic() - start) * self.rate) + 1
            while self.acks.sent < due:
                try:
                    self.p.produce(self.topic, b"cf-%d" % self.acks.sent, on_delivery=self._done)
                except BufferError:
                    break
                self.acks.sent += 1
            self.p.poll(0.01)
        remaining = self.p.flush(DRAIN_BOUND_S)
        if remaining:
            self.acks.fail(f"{remaining} records unflushed")


class KafkaPythonProducer(Stoppable):
    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        super().__init__("kp-producer")
        from kafka import KafkaProducer

        self.topic, self.rate, self.acks = topic, rate, Acks()
        self.p = KafkaProducer(
            bootstrap_servers=bootstrap,
            linger_ms=5,
            request_timeout_ms=5_000,
            delivery_timeout_ms=180_000,
            reconnect_backoff_max_ms=500,
        )
        assert self.p.config["enable_idempotence"], "kafka-python 3 producers are idempotent"

    def body(self) -> None:
        start = time.monotonic()
        while not self.stopping.is_set():
            due = int((time.monotonic() - start) * self.rate) + 1
            while self.acks.sent < due:
                value = b"kp-%d" % self.acks.sent
                fut = self.p.send(self.topic, value=value)
                fut.add_callback(lambda md, v=value: self.acks.ok(v, md.offset))
                fut.add_errback(lambda exc: self.acks.fail(repr(exc)))
                self.acks.sent += 1
            time.sleep(0.01)
        self.p.flush(timeout=DRAIN_BOUND_S)
        self.p.close(timeout=10)


# --------------------------------------------------------------------------- group members


Delivery = tuple[str, int]  # (topic, offset)


class Member(Stoppable):
    """A group member: (topic, offset) delivered per session (an assignment, until the next
    revocation or loss), acknowledged commits."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.lock = threading.Lock()
        self.sessions: list[list[Delivery]] = []
        self.current: list[Delivery] | None = None
        # (monotonic time of the ack, topic, offset)
        self.commits: list[tuple[float, str, int]] = []
        self.commit_failures = 0
        self.errors: list[str] = []

    def assigned(self) -> None:
        with self.lock:
            self.current = []
            self.sessions.append(self.current)

    def revoked(self) -> None:
        with self.lock:
            self.current = None

    def delivered(self, topic: str, offset: int) -> None:
        with self.lock:
            if self.current is None:  # a record outside any assignment: its own session
                self.errors.append(f"{topic} offset {offset} delivered while unassigned")
                self.sessions.append([(topic, offset)])
            else:
                self.current.append((topic, offset))

    def committed(self, topic: str, offset: int) -> None:
        with self.lock:
            self.commits.append((time.monotonic(), topic, offset))


class ConfluentMember(Member):
    def __init__(self, bootstrap: str, name: str = "cf-member") -> None:
        super().__init__(name)
        from confluent_kafka import Consumer

        self.c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": GROUP,
                "client.id": f"faults-{name}",
                "partition.assignment.strategy": "roundrobin",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": 10_000,
                "heartbeat.interval.ms": 1_000,
                "fetch.wait.max.ms": 100,
                "reconnect.backoff.max.ms": 500,
            }
        )

    def body(self) -> None:
        from confluent_kafka import KafkaException

        self.c.subscribe(
            list(TOPICS),
            on_assign=lambda c, parts: self.assigned(),
            on_revoke=lambda c, parts: self.revoked(),
            on_lost=lambda c, parts: self.revoked(),
        )
        try:
            while not self.stopping.is_set():
                msgs = self.c.consume(500, 0.2)
                got = False
                for m in msgs:
                    if m.error():
                        self.errors.append(str(m.error()))
                        continue
                    self.delivered(m.topic(), m.offset())
                    got = True
                if not got:
                    continue
                try:
                    for tp in self.c.commit(asynchronous=False) or []:
                        if tp.error is None and tp.offset >= 0:
                            self.committed(tp.topic, tp.offset)
                        elif tp.error is not None:
                            self.commit_failures += 1
                except KafkaException:
                    self.commit_failures += 1
        finally:
            self.c.close()


class KafkaPythonMember(Member):
    def __init__(self, bootstrap: str, name: str = "kp-member") -> None:
        super().__init__(name)
        from kafka import KafkaConsumer
        from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

        self.c = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=GROUP,
            client_id=f"faults-{name}",
            partition_assignment_strategy=(RoundRobinPartitionAssignor,),
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=10_000,
            heartbeat_interval_ms=1_000,
            fetch_max_wait_ms=100,
            request_timeout_ms=5_000,
            reconnect_backoff_max_ms=500,
        )

    def body(self) -> None:
        from kafka import ConsumerRebalanceListener
        from kafka.errors import KafkaError

        member = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                member.revoked()

            def on_partitions_assigned(self, assigned):
                if assigned:
                    member.assigned()
                else:
                    member.revoked()

            def on_partitions_lost(self, lost):
                member.revoked()

        self.c.subscribe(list(TOPICS), listener=Listener())
        try:
            while not self.stopping.is_set():
                try:
                    polled = self.c.poll(timeout_ms=200, max_records=500)
                except KafkaError as exc:
                    self.errors.append(repr(exc))
                    continue
                records = [r for batch in polled.values() for r in batch]
                for r in records:
                    self.delivered(r.topic, r.offset)
                if not records:
                    continue
                positions = {tp: self.c.position(tp) for tp in polled}
                try:
                    self.c.commit()
                    for tp, off in positions.items():
                        self.committed(tp.topic, off)
                except KafkaError:
                    self.commit_failures += 1
        finally:
            self.c.close(autocommit=False)


# --------------------------------------------------------------------------- OffsetFetch


class CommitMonitor(Stoppable):
    """The group's committed offsets by raw OffsetFetch v5, every 100 ms:
    (monotonic time the request was sent, topic, offset; -1 for none yet)."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__("commit-monitor")
        host, port = bootstrap.rsplit(":", 1)
        self.address = (host, int(port))
        self.seen: list[tuple[float, str, int]] = []
        self.latest: dict[str, int] = dict.fromkeys(TOPICS, -1)
        self.failures = 0
        self.sock: socket.socket | None = None
        self.cid = 0

    def fetch(self) -> dict[str, int]:
        from kafka.protocol.consumer import OffsetFetchRequest, OffsetFetchResponse

        if self.sock is None:
            self.sock = socket.create_connection(self.address, timeout=3)
        t = OffsetFetchRequest.OffsetFetchRequestTopic
        topics = [t(name=name, partition_indexes=[0]) for name in TOPICS]
        req = OffsetFetchRequest(group_id=GROUP, topics=topics)
        self.cid += 1
        req.with_header(correlation_id=self.cid, client_id="faults-monitor")
        self.sock.sendall(req.encode(version=5, header=True, framed=True))
        size = struct.unpack(">i", self._exact(4))[0]
        resp = OffsetFetchResponse.decode(self._exact(size), version=5, header=True)
        if resp.error_code:
            raise ConnectionError(f"OffsetFetch error {resp.error_code}")
        out = {}
        for rt in resp.topics:
            p = rt.partitions[0]
            if p.error_code:
                raise ConnectionError(f"OffsetFetch partition error {p.error_code}")
            out[rt.name] = int(p.committed_offset)
        return out

    def _exact(self, n: int) -> bytes:
        assert self.sock is not None
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return bytes(buf)

    def body(self) -> None:
        while not self.stopping.wait(0.1):
            sent = time.monotonic()
            try:
                got = self.fetch()
            except (OSError, ConnectionError, ValueError):
                self.failures += 1
                if self.sock is not None:
                    self.sock.close()
                self.sock = None
                continue
            self.seen += [(sent, topic, off) for topic, off in got.items()]
            self.latest.update(got)
        if self.sock is not None:
            self.sock.close()


# --------------------------------------------------------------------------- checks


def read_all(bootstrap: str, topic: str, high: int) -> dict[int, bytes]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "faults-kill9-reader",
            "enable.auto.commit": False,
        }
    )
    out: dict[int, bytes] = {}
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + DRAIN_BOUND_S
        while len(out) < high and time.monotonic() < deadline:
            for m in c.consume(10_000, 0.5):
                if not m.error():
                    out[m.offset()] = m.value()
    finally:
        c.close()
    return out


def high_watermarks(bootstrap: str) -> dict[str, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "faults-kill9-wm"})
    try:
        return {t: c.get_watermark_offsets(TopicPartition(t, 0), timeout=20)[1] for t in TOPICS}
    finally:
        c.close()


def session_faults(sessions: list[list[Delivery]]) -> tuple[int, int]:
    """(offsets delivered twice within a session, steps backwards within a session)."""
    twice = backwards = 0
    for s in sessions:
        twice += len(s) - len(set(s))
        for topic in {t for t, _ in s}:
            offs = [o for t, o in s if t == topic]
            backwards += sum(1 for a, b in pairwise(offs) if b <= a)
    return twice, backwards


def commit_regressions(
    members: list[Member], seen: list[tuple[float, str, int]]
) -> tuple[int, int]:
    """(acknowledged commits of a member below its previous one for the topic; OffsetFetch
    answers below a commit acknowledged before the request was sent, or below an earlier
    answer)."""
    member_back = fetch_back = 0
    for topic in TOPICS:
        acks: list[tuple[float, int]] = []
        for m in members:
            offs = [(t, o) for t, tp, o in m.commits if tp == topic]
            member_back += sum(1 for a, b in pairwise(offs) if b[1] < a[1])
            acks += offs
        acks.sort()
        times = [t for t, _ in acks]
        best, hi = [], -1  # running max of acknowledged commits
        for _, o in acks:
            hi = max(hi, o)
            best.append(hi)
        prev = -1
        for sent, tp, off in seen:
            if tp != topic:
                continue
            i = bisect_left(times, sent)
            floor = best[i - 1] if i > 0 else -1
            if off < max(floor, prev):
                fetch_back += 1
            prev = max(prev, off)
    return member_back, fetch_back


def commit_stall(seen: list[tuple[float, str, int]], start: float, end: float) -> float:
    """The longest time (s) a topic's committed offset stood still between start and end
    (a figure only: rebalances interrupted by kills take a while)."""
    worst = 0.0
    for topic in TOPICS:
        last_move, last = start, None
        for sent, tp, off in seen:
            if tp != topic or not start <= sent <= end:
                continue
            if off != last:
                worst = max(worst, sent - last_move)
                last_move, last = sent, off
        worst = max(worst, end - last_move)
    return worst


def test_kill9_under_load(fault_gateway, faults_report, store_args):
    """On LevelDB, and on hbase:// (atomic per row only: a kill leaves writes in part,
    which the restarted gateway settles before it listens)."""
    seed = int(os.environ.get("TMSGATE_FAULTS_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    gw = fault_gateway(*store_args, name="kill9")
    create_topics(gw.bootstrap, TOPICS)
    t0 = time.monotonic()

    producers = [
        ConfluentProducer(gw.bootstrap, TOPICS[0], CF_RATE),
        KafkaPythonProducer(gw.bootstrap, TOPICS[1], KP_RATE),
    ]
    members: list[Member] = [ConfluentMember(gw.bootstrap), KafkaPythonMember(gw.bootstrap)]
    monitor = CommitMonitor(gw.bootstrap)
    running: list[Stoppable] = [*producers, *members, monitor]
    for t in running:
        t.start()
    try:
        # The group forms and both members consume before the first kill.
        deadline = time.monotonic() + DRAIN_BOUND_S
        while time.monotonic() < deadline and (
            min(monitor.latest.values()) < 0 or not all(m.sessions for m in members)
        ):
            time.sleep(0.1)
        formed_at = time.monotonic()
        for cycle in range(CYCLES):
            time.sleep(rng.uniform(*KILL_EVERY_S))
            gw.crash_restart()
            if cycle == CYCLES // 2:
                # A member leaves and another joins: partitions change hands, and the new
                # owner starts at the committed offsets.
                members[1].stop()
                members.append(KafkaPythonMember(gw.bootstrap, f"kp-member-{cycle}"))
                running.append(members[-1])
                members[-1].start()
        time.sleep(rng.uniform(*KILL_EVERY_S))  # load after the last restart
        load_end = time.monotonic()
        for p in producers:
            p.stop(DRAIN_BOUND_S + 30)
        # The group catches up: it commits the high watermarks.
        high = high_watermarks(gw.bootstrap)
        deadline = time.monotonic() + DRAIN_BOUND_S
        while monitor.latest != high and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        for t in running:
            t.stop()
    for t in running:
        assert t.failure is None, f"{t.name} failed: {t.failure!r}"

    lost: list[bytes] = []
    misplaced: list[tuple[bytes, int]] = []
    stored_dups = stored_n = 0
    never_delivered: list[Delivery] = []
    delivered = Counter(d for m in members for s in m.sessions for d in s)
    for topic, p in zip(TOPICS, producers, strict=True):
        stored = read_all(gw.bootstrap, topic, high[topic])
        stored_n += len(stored)
        assert len(stored) == high[topic], f"read {len(stored)} of {high[topic]} from {topic}"
        by_value = Counter(stored.values())
        stored_dups += sum(n - 1 for n in by_value.values() if n > 1)
        lost += [v for v in p.acks.acked if v not in by_value]
        misplaced += [(v, o) for v, o in p.acks.acked.items() if o >= 0 and stored.get(o) != v]
        never_delivered += [(topic, o) for o in range(high[topic]) if (topic, o) not in delivered]
    twice, backwards = session_faults([s for m in members for s in m.sessions])
    member_back, fetch_back = commit_regressions(members, monitor.seen)
    acked = [o for p in producers for o in p.acks.acked.values()]
    faults_report(
        seed=seed,
        long=LONG,
        cycles=gw.kills,
        # Restarts that found writes a kill left in part (hbase: intents settled).
        restarts_settling=gw.log_tail(1_000_000).count("settled writes a crash"),
        duration_s=round(time.monotonic() - t0, 1),
        group_formed_s=round(formed_at - t0, 1),
        max_commit_stall_s=round(commit_stall(monitor.seen, formed_at, load_end), 1),
        sent=sum(p.acks.sent for p in producers),
        acked=len(acked),
        acked_offset_unknown=sum(1 for o in acked if o < 0),
        produce_failures=sum(len(p.acks.failed) for p in producers),
        acknowledged_lost=len(lost),
        acked_at_wrong_offset=len(misplaced),
        stored=stored_n,
        duplicates_stored=stored_dups,
        delivered=sum(delivered.values()),
        sessions=sum(len(m.sessions) for m in members),
        redelivered_across_sessions=sum(delivered.values()) - len(delivered),
        duplicates_delivered=twice,
        backwards_in_session=backwards,
        never_delivered=len(never_delivered),
        commits_acked=sum(len(m.commits) for m in members),
        commit_failures=sum(m.commit_failures for m in members),
        committed_backwards=member_back + fetch_back,
        high_watermarks="/".join(str(high[t]) for t in TOPICS),
        final_committed="/".join(str(monitor.latest[t]) for t in TOPICS),
        offset_fetches=len(monitor.seen),
        # per member: sessions/delivered/commits acknowledged/commit failures/errors
        members=" ".join(
            f"{m.name}:{len(m.sessions)}/{sum(map(len, m.sessions))}/{len(m.commits)}"
            f"/{m.commit_failures}/{len(m.errors)}"
            for m in members
        ),
    )

    assert gw.kills == CYCLES
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {lost[:5]}"
    assert not misplaced, f"acknowledged (value, offset) not stored there: {misplaced[:5]}"
    assert stored_dups == 0, f"{stored_dups} values stored twice (idempotent producers)"
    assert twice == 0 and backwards == 0, (
        f"within one session: {twice} offsets delivered twice, {backwards} steps backwards"
    )
    assert member_back == 0 and fetch_back == 0, (
        f"committed offsets went backwards: {member_back} acknowledged commits below an "
        f"earlier one, {fetch_back} OffsetFetch answers below an acknowledged commit"
    )
    assert monitor.latest == high, f"the group committed {monitor.latest}, high watermarks {high}"
    assert not never_delivered, (
        f"{len(never_delivered)} records never delivered to the group: {never_delivered[:10]}"
    )
