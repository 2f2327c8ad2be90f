"""Live fuzz: every API and version over raw sockets while a canary keeps working (issue,
defect 5).

A ``tmsgate serve`` gateway on LevelDB gets, for every API and version it advertises
(ApiVersions), on a fresh connection each: a valid request (built from kafka-python's
schema, tests/schema_requests.py); the same with a null written into each field that
can carry one, nullable or not; random mutations of it (bytes overwritten, null
lengths, extreme ints); a frame whose body is cut short; a frame the client stops
sending halfway; random requests. Also, per API, all of those pipelined on one
connection, and one request for each API the gateway does not serve. Meanwhile a
confluent-kafka canary produces (idempotent, acks=all) and consumes (assigned
partition) on its own topic.

Checks:

- a null the schema forbids closes the connection without an answer, and the gateway
  logs one line naming the field; a valid request and a legal null are answered;
- a cut-short body or frame closes the connection;
- no request made a handler fail: no ERROR line in the gateway log (the driver logs
  "<API> vN (correlation id C) failed: ..." with the traceback);
- the canary got back every acknowledged message, in order, none twice, and had no
  delivery errors; afterwards the gateway still answers.

Per API version, bounded mode sends 8 byte mutations and 40 random requests (every
field a random legal value: extreme ints, odd strings, 0-3 array elements, legal
nulls), about 8,000 connections in 10-30 s on two cores; ``TMSGATE_FAULTS_LONG=1``
sends 200 and 1,000 (about 180,000 connections). ``TMSGATE_LIVE_FUZZ_MUTATIONS`` and
``TMSGATE_LIVE_FUZZ_RANDOM`` set the numbers outright, ``TMSGATE_LIVE_FUZZ_SEED``
replays a run. The figures (seed, requests sent, connections closed by the gateway,
canary messages...) go to the fault suite's summary through ``faults_report``.
"""

from __future__ import annotations

import os
import random
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import kafka_requests as kr
import pytest
import schema_requests as sr
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from .conftest import scale

pytestmark = pytest.mark.timeout(600)

MUTATIONS = int(os.environ.get("TMSGATE_LIVE_FUZZ_MUTATIONS", scale(8, 200)))
RANDOM_REQUESTS = int(os.environ.get("TMSGATE_LIVE_FUZZ_RANDOM", scale(40, 1000)))
SEED = int(os.environ.get("TMSGATE_LIVE_FUZZ_SEED", random.randrange(1 << 32)))
WORKERS = 4
# A case with an expected outcome waits this long for it; a random one only briefly,
# then counts as unanswered (a long poll, a JoinGroup waiting for a rebalance, acks=0).
EXPECTED_TIMEOUT_S = 20.0
RANDOM_TIMEOUT_S = 1.0
CANARY_START_BOUND_S = 60.0
CANARY_DRAIN_BOUND_S = 60.0
RECORDS = kr.batch([(b"k", b"fuzz", [("h", b"v")])] * 2)
EXTREMES = [b"\xff\xff", b"\xff\xff\xff\xff", b"\x00", b"\x7f\xff\xff\xff", b"\x80\x00"]


@dataclass(frozen=True)
class Case:
    label: str
    data: bytes
    expect: str | None = None  # "answered" or "closed"; None: either, or no answer
    stop_sending: bool = False  # shut the write side down after data (a frame cut short)

    @property
    def timeout(self) -> float:
        return RANDOM_TIMEOUT_S if self.expect is None else EXPECTED_TIMEOUT_S


# --------------------------------------------------------------------------- the cases


def _frame(body: bytes | bytearray) -> bytes:
    return struct.pack(">i", len(body)) + bytes(body)


def _mutate(rng: random.Random, framed: bytes) -> bytes:
    body = bytearray(framed[4:])
    for _ in range(rng.randint(1, 8)):
        pos = rng.randrange(4, len(body))  # api key and version stay: the route's decoder
        patch = rng.choice([*EXTREMES, bytes([rng.randrange(256)])])
        body[pos : pos + len(patch)] = patch
    del body[len(framed) - 4 :]  # a patch at the end must not grow the request
    return _frame(body)


def _cases_for(rng: random.Random, api_key: int, version: int) -> list[Case]:
    name = f"{sr.request_class(api_key).name} v{version}"
    sample = sr.encode(sr.sample(api_key, version, records=RECORDS), version, framed=True)
    cases = [Case(name, sample, "answered")]
    for field in sr.null_fields(api_key, version):
        request = sr.with_null(sr.sample(api_key, version, records=RECORDS), field.path)
        expect = "answered" if field.nullable else "closed"
        cases.append(
            Case(f"{name} {field.name}=null", sr.encode(request, version, framed=True), expect)
        )
    cases += [Case(f"{name} mutation {i}", _mutate(rng, sample)) for i in range(MUTATIONS)]
    for i in range(RANDOM_REQUESTS):
        request = sr.random_request(rng, api_key, version, records=RECORDS)
        cases.append(Case(f"{name} random {i}", sr.encode(request, version, framed=True)))
    cut = rng.randrange(8, len(sample) - 4)
    cases.append(Case(f"{name} body cut at {cut}", _frame(sample[4 : 4 + cut]), "closed"))
    cases.append(Case(f"{name} frame cut at {cut}", sample[: 4 + cut], "closed", stop_sending=True))
    return cases


def build_cases(rng: random.Random, served: dict[int, tuple[int, int]]) -> list[Case]:
    cases: list[Case] = []
    for api_key, (low, high) in sorted(served.items()):
        per_api: list[Case] = []
        for version in range(low, high + 1):
            per_api += _cases_for(rng, api_key, version)
        cases += per_api
        whole = [c for c in per_api if not c.stop_sending]
        rng.shuffle(whole)
        cases.append(
            Case(f"api {api_key}: {len(whole)} pipelined", b"".join(c.data for c in whole))
        )
    for api_key, version in sr.all_versions():
        if api_key not in served and version == sr.request_class(api_key).max_version:
            data = sr.encode(sr.sample(api_key, version), version, framed=True)
            cases.append(Case(f"unserved api {api_key} v{version}", data, "closed"))
    return cases


# --------------------------------------------------------------------------- the wire


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def send_case(address: tuple[str, int], case: Case) -> tuple[str, int]:
    """-> (outcome, answers): "answered" (an answer to a single request), "closed" (by
    the gateway, after `answers` answers) or "no answer" (within the case's timeout)."""
    answers = 0
    single = len(case.data) == 4 + struct.unpack(">i", case.data[:4])[0]
    with socket.create_connection(address, timeout=case.timeout) as sock:
        try:
            sock.sendall(case.data)
            if case.stop_sending:
                sock.shutdown(socket.SHUT_WR)
            while True:
                head = _recv_exact(sock, 4)
                if head is None or _recv_exact(sock, struct.unpack(">i", head)[0]) is None:
                    return "closed", answers
                answers += 1
                if single:
                    return "answered", answers
        except (ConnectionResetError, BrokenPipeError):
            return "closed", answers
        except TimeoutError:
            return "no answer", answers


def advertised(address: tuple[str, int]) -> dict[int, tuple[int, int]]:
    request = ApiVersionsRequest(client_software_name="fz", client_software_version="1")
    request.with_header(correlation_id=1, client_id="fz")
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(request.encode(version=3, header=True, framed=True))
        size = struct.unpack(">i", _recv_exact(sock, 4) or b"")[0]
        frame = _recv_exact(sock, size)
    response = ApiVersionsResponse.decode(frame, version=3, header=True)
    assert response.error_code == 0
    return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}


# --------------------------------------------------------------------------- the canary


class Canary:
    """confluent-kafka: an idempotent producer and an assigned consumer on one topic."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.acked: list[int] = []  # sequence numbers, in acknowledgement order
        self.consumed: list[tuple[int, int]] = []  # (offset, sequence number)
        self.errors: list[str] = []
        self.stop_producing = threading.Event()
        self.stop_consuming = threading.Event()
        self.threads = [
            threading.Thread(target=self._produce, name="canary-producer", daemon=True),
            threading.Thread(target=self._consume, name="canary-consumer", daemon=True),
        ]

    def start(self) -> Canary:
        """Start both, and return once a message went round (or CANARY_START_BOUND_S)."""
        for t in self.threads:
            t.start()
        deadline = time.monotonic() + CANARY_START_BOUND_S  # a bound, not an assertion
        while not self.consumed and not self.errors and time.monotonic() < deadline:
            time.sleep(0.05)
        return self

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(f"delivery: {err}")
        else:
            self.acked.append(int(msg.value()))

    def _produce(self) -> None:
        from confluent_kafka import Producer

        p = Producer(
            {"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 2}
        )
        seq = 0
        while not self.stop_producing.is_set():
            p.produce(self.topic, value=b"%d" % seq, on_delivery=self._delivered)
            seq += 1
            p.poll(0.005)
        if p.flush(30) != 0:
            self.errors.append("producer: messages still unacknowledged after flush")

    def _consume(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        c = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"{self.topic}-reader",
                "enable.auto.commit": False,
            }
        )
        c.assign([TopicPartition(self.topic, 0, OFFSET_BEGINNING)])
        while not self.stop_consuming.is_set():
            msg = c.poll(0.1)
            if msg is None:
                continue
            if msg.error():
                self.errors.append(f"consume: {msg.error()}")
                continue
            self.consumed.append((msg.offset(), int(msg.value())))
        c.close()

    def finish(self) -> None:
        self.stop_producing.set()
        self.threads[0].join(60)
        deadline = time.monotonic() + CANARY_DRAIN_BOUND_S  # a bound, not an assertion
        last = self.acked[-1] if self.acked else None
        while time.monotonic() < deadline and last is not None:
            if any(seq == last for _off, seq in self.consumed[-50:]):
                break
            time.sleep(0.1)
        self.stop_consuming.set()
        self.threads[1].join(30)


def canary_problems(canary: Canary) -> list[str]:
    values = [seq for _off, seq in canary.consumed]
    offsets = [off for off, _seq in canary.consumed]
    acked = set(canary.acked)
    problems = list(canary.errors)
    if len(set(values)) != len(values):
        dups = [v for v, n in Counter(values).items() if n > 1]
        problems.append(f"{len(dups)} messages consumed twice, e.g. {dups[:5]}")
    if any(b <= a for a, b in pairwise(offsets)):
        problems.append("consumed offsets do not strictly increase")
    got = [v for v in values if v in acked]
    if got != canary.acked:
        missing = sorted(acked - set(values))
        problems.append(
            f"acknowledged messages not consumed in order: {len(missing)} missing "
            f"(e.g. {missing[:5]}), {len(got)} of {len(canary.acked)} back"
        )
    return problems


# --------------------------------------------------------------------------- the test


def _count_frames(data: bytes) -> int:
    """Whole frames in data (a cut-short frame counts too: it was sent)."""
    count = pos = 0
    while pos + 4 <= len(data):
        count += 1
        pos += 4 + max(0, struct.unpack_from(">i", data, pos)[0])
    return count


def test_live_fuzz_every_api_with_a_canary(
    fault_gateway: Callable[..., Any], fault_topic_name: str, faults_report: Callable[..., None]
) -> None:
    gw = fault_gateway(name="live-fuzz")
    address = ("127.0.0.1", gw.port)
    served = advertised(address)
    cases = build_cases(random.Random(SEED), served)
    with socket.create_connection(address, timeout=10) as sock:  # before the canary reads it
        create = kr.create_topic(fault_topic_name)
        create.with_header(correlation_id=1, client_id="canary")
        sock.sendall(create.encode(version=5, header=True, framed=True))
        assert _recv_exact(sock, 4) is not None
    canary = Canary(gw.bootstrap, fault_topic_name).start()
    acked_before = len(canary.acked)

    with ThreadPoolExecutor(WORKERS, thread_name_prefix="fuzz") as pool:
        results = list(pool.map(lambda c: send_case(address, c), cases))
    acked_during = len(canary.acked) - acked_before
    canary.finish()
    still_answers = advertised(address) == served
    gw.stop()
    log = gw.log_path.read_text("utf-8", "replace")

    outcomes = Counter(outcome for outcome, _n in results)
    wrong = [
        f"{c.label}: {outcome} (expected {c.expect})"
        for c, (outcome, _n) in zip(cases, results, strict=True)
        if c.expect is not None and outcome != c.expect
    ]
    errors = [line for line in log.splitlines() if " ERROR " in line or "Traceback" in line]
    null_lines = log.count("is null but not nullable")
    illegal_nulls = sum(1 for c in cases if c.expect == "closed" and c.label.endswith("=null"))
    faults_report(
        seed=SEED,
        apis=len(served),
        versions=sum(high - low + 1 for low, high in served.values()),
        connections=len(cases),
        requests_sent=sum(_count_frames(c.data) for c in cases),
        answered=sum(n for _o, n in results),
        closed_by_gateway=outcomes["closed"],
        no_answer=outcomes["no answer"],
        illegal_null_cases=illegal_nulls,
        null_log_lines=null_lines,
        canary_acked=len(canary.acked),
        canary_acked_during_fuzz=acked_during,
        canary_consumed=len(canary.consumed),
        canary_errors=len(canary.errors),
        gateway_errors=len(errors),
    )

    assert not errors, "the gateway logged errors:\n" + "\n".join(errors[:40])
    assert not wrong, f"{len(wrong)} cases answered unexpectedly:\n" + "\n".join(wrong[:40])
    assert null_lines >= illegal_nulls, "each illegal null is logged, naming the field"
    assert still_answers
    assert acked_during > 0, "the canary kept producing during the fuzz"
    problems = canary_problems(canary)
    assert not problems, "canary: " + "; ".join(problems)
