"""Kafka transactions (KIP-98 / KIP-447) with confluent-kafka, kafka-python and aiokafka.

Every scenario runs once per client (the `client` fixture): the client's transactional
producer writes, the same client's consumers (assign/seek from 0, no group) read with
read_committed and read_uncommitted.

- commit: one transaction over two topics is visible, in order, with keys, headers and
  timestamps; before the commit neither isolation level sees any of it.
- abort: aborted records never show up.
- fencing: a second producer with the same transactional.id fences the first (zombie).
- a producer SIGKILLed mid-transaction: aborted by the next instance's init_transactions, or
  (nobody re-inits) by transaction.timeout.ms.
- consume-transform-produce with send_offsets_to_transaction and a consumer group; the
  worker is SIGKILLed mid-transaction and a new one finishes: every input exactly once.

How a view is read: `views()` first produces a plain "sentinel" record, then reads from 0 up
to it, so "nothing else is there" is a fact and not a timeout. Sentinels are left out when
comparing contents.

tmsgate vs Kafka: on tmsgate an open transaction's records are not in the log at all
(committed records get dense offsets at commit, aborted ones none, no marker takes an
offset), so read_uncommitted never sees open or aborted records and an open transaction never
holds back read_committed. Kafka's read_uncommitted does see them, so those assertions are
tmsgate-only (on Kafka the same views check that the aborted records were really written).
Offsets are checked for density on tmsgate only (Kafka's commit/abort markers take offsets).

This file is also the script the subprocesses run:
    python test_transactions.py hang CLIENT BOOTSTRAP TOPIC TXID N TS0 TXN_TIMEOUT_MS
    python test_transactions.py ctp CLIENT BOOTSTRAP IN OUT GROUP TXID N_INPUTS BATCH KILL_AT
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from compat_helpers import (
    CONSUME_TIMEOUT_S,
    PRODUCE_TIMEOUT_S,
    Rec,
    assert_dense_offsets,
    assert_no_redelivery,
    make_records,
    wait_until,
)

pytestmark = pytest.mark.timeout(90)

HERE = Path(__file__).resolve().parent
TXN_OP_TIMEOUT_S = 30.0  # init/commit/abort/send_offsets: Kafka may retry CONCURRENT_TRANSACTIONS
SHORT_TXN_TIMEOUT_MS = 3000
SESSION_TIMEOUT_MS = 6000  # Kafka's group.min.session.timeout.ms: a killed member leaves fast
ISOLATIONS = ("read_committed", "read_uncommitted")
SENTINEL = b"sentinel-"


@dataclass(frozen=True)
class Msg:
    """A record to produce: topic, record, CreateTime timestamp (ms)."""

    topic: str
    rec: Rec
    ts: int


@dataclass(frozen=True)
class Got:
    """A consumed record."""

    offset: int
    rec: Rec
    ts: int


def make_msgs(topic: str, n: int, tag: str, ts0: int, start: int = 0) -> list[Msg]:
    return [
        Msg(topic, r, ts0 + i) for i, r in enumerate(make_records(n, tag, start, size=80), start)
    ]


def interleave(a: list[Msg], b: list[Msg]) -> list[Msg]:
    out = []
    for i in range(max(len(a), len(b))):
        out += a[i : i + 1] + b[i : i + 1]
    return out


def base_ts() -> int:
    # CreateTime timestamps a little in the past, distinct per record
    return int(time.time() * 1000) - 60_000


# --------------------------------------------------------------------------- confluent-kafka


class ConfluentProducer:
    def __init__(self, bootstrap: str, txid: str | None, txn_timeout_ms: int):
        from confluent_kafka import Producer

        self.txid = txid
        cfg = {
            "bootstrap.servers": bootstrap,
            "client.id": "compat-tx-confluent",
            "linger.ms": 5,
            # librdkafka: both must be <= transaction.timeout.ms
            "socket.timeout.ms": min(10_000, txn_timeout_ms),
            "message.timeout.ms": min(int(PRODUCE_TIMEOUT_S * 1000), txn_timeout_ms),
        }
        if txid:
            cfg.update({"transactional.id": txid, "transaction.timeout.ms": txn_timeout_ms})
        self.p = Producer(cfg)

    def init(self):
        if self.txid:
            self.p.init_transactions(TXN_OP_TIMEOUT_S)

    def begin(self):
        self.p.begin_transaction()

    def send(self, msgs: list[Msg]):
        from confluent_kafka import KafkaException

        errors = []

        def cb(err, msg):
            if err is not None:
                errors.append(err)

        for m in msgs:
            while True:
                try:
                    self.p.produce(
                        m.topic,
                        value=m.rec.value,
                        key=m.rec.key,
                        partition=0,
                        headers=list(m.rec.headers) or None,
                        timestamp=m.ts,
                        on_delivery=cb,
                    )
                    break
                except BufferError:
                    self.p.poll(0.1)
        # A fenced producer: flush() may raise SystemError from inside the delivery callback,
        # with the fatal KafkaException(_FENCED) as its __context__ (confluent-kafka 2.16).
        remaining = self.p.flush(PRODUCE_TIMEOUT_S)
        if errors:
            raise KafkaException(errors[0])
        assert remaining == 0, f"{remaining} records not delivered within {PRODUCE_TIMEOUT_S}s"

    def commit(self):
        self.p.commit_transaction(TXN_OP_TIMEOUT_S)

    def abort(self):
        self.p.abort_transaction(TXN_OP_TIMEOUT_S)

    def send_offsets(self, gc, topic: str, next_offset: int):
        from confluent_kafka import TopicPartition

        self.p.send_offsets_to_transaction(
            [TopicPartition(topic, 0, next_offset)],
            gc.c.consumer_group_metadata(),
            TXN_OP_TIMEOUT_S,
        )

    def close(self):
        with contextlib.suppress(Exception):
            self.p.close()


class ConfluentGroupConsumer:
    def __init__(self, bootstrap: str, topic: str, group: str):
        from confluent_kafka import Consumer

        self.c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": "compat-tx-confluent-worker",
                "group.id": group,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": SESSION_TIMEOUT_MS,
                "heartbeat.interval.ms": 1000,
                "fetch.wait.max.ms": 200,
            }
        )
        self.c.subscribe([topic])

    def poll(self, max_records: int) -> list[Got]:
        out = []
        for m in self.c.consume(num_messages=max_records, timeout=0.5):
            if m.error():
                print(f"consumer error: {m.error()}", file=sys.stderr, flush=True)
                if m.error().fatal():
                    raise RuntimeError(str(m.error()))
                continue
            out.append(_confluent_got(m))
        return out

    def close(self):
        with contextlib.suppress(Exception):
            self.c.close()


def _confluent_got(m) -> Got:
    return Got(m.offset(), Rec(m.key(), m.value(), tuple(m.headers() or ())), m.timestamp()[1])


class ConfluentClient:
    name = "confluent-kafka"
    Producer = ConfluentProducer
    GroupConsumer = ConfluentGroupConsumer

    @staticmethod
    def _consumer(bootstrap: str, isolation: str):
        from confluent_kafka import Consumer

        return Consumer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": "compat-tx-confluent",
                "group.id": f"compat-unused-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "auto.offset.reset": "error",
                "isolation.level": isolation,
                "fetch.wait.max.ms": 200,
                "socket.timeout.ms": 10_000,
            }
        )

    def read(self, bootstrap, topic, isolation, stop, timeout=CONSUME_TIMEOUT_S) -> list[Got]:
        from confluent_kafka import KafkaError, TopicPartition

        c = self._consumer(bootstrap, isolation)
        gots, errors = [], []
        try:
            c.assign([TopicPartition(topic, 0, 0)])
            deadline = time.monotonic() + timeout
            while not stop(gots):
                _check_deadline(deadline, timeout, topic, isolation, gots, errors)
                m = c.poll(0.3)
                if m is None:
                    continue
                if m.error():
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        errors.append(m.error())
                    continue
                gots.append(_confluent_got(m))
        finally:
            c.close()
        return gots

    def end_offset(self, bootstrap, topic, isolation) -> int:
        from confluent_kafka import TopicPartition

        c = self._consumer(bootstrap, isolation)
        try:
            return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1]
        finally:
            c.close()

    @staticmethod
    def is_fenced(exc: BaseException) -> bool:
        from confluent_kafka import KafkaError, KafkaException

        codes = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
        return any(
            isinstance(e, KafkaException) and e.args and e.args[0].code() in codes
            for e in _chain(exc)
        )


# --------------------------------------------------------------------------- kafka-python


class KafkaPythonProducer:
    def __init__(self, bootstrap: str, txid: str | None, txn_timeout_ms: int):
        from kafka import KafkaProducer

        self.txid = txid
        self.p = KafkaProducer(
            bootstrap_servers=bootstrap,
            client_id="compat-tx-kafka-python",
            transactional_id=txid,
            transaction_timeout_ms=txn_timeout_ms,
            linger_ms=5,
            request_timeout_ms=10_000,
            max_block_ms=int(TXN_OP_TIMEOUT_S * 1000),
            delivery_timeout_ms=int(PRODUCE_TIMEOUT_S * 1000),
        )

    def init(self):
        if self.txid:
            self.p.init_transactions()

    def begin(self):
        self.p.begin_transaction()

    def send(self, msgs: list[Msg]):
        futs = [
            self.p.send(
                m.topic,
                key=m.rec.key,
                value=m.rec.value,
                headers=list(m.rec.headers),
                partition=0,
                timestamp_ms=m.ts,
            )
            for m in msgs
        ]
        self.p.flush(timeout=PRODUCE_TIMEOUT_S)
        for f in futs:
            f.get(timeout=PRODUCE_TIMEOUT_S)

    def commit(self):
        self.p.commit_transaction()

    def abort(self):
        self.p.abort_transaction()

    def send_offsets(self, gc, topic: str, next_offset: int):
        from kafka import TopicPartition
        from kafka.structs import OffsetAndMetadata

        self.p.send_offsets_to_transaction(
            {TopicPartition(topic, 0): OffsetAndMetadata(next_offset, "", -1)},
            gc.c.group_metadata(),
        )

    def close(self):
        with contextlib.suppress(Exception):
            self.p.close(timeout=5)


class KafkaPythonGroupConsumer:
    def __init__(self, bootstrap: str, topic: str, group: str):
        from kafka import KafkaConsumer

        self.c = KafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            client_id="compat-tx-kafka-python-worker",
            group_id=group,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=1000,
            fetch_max_wait_ms=200,
        )

    def poll(self, max_records: int) -> list[Got]:
        out = []
        for recs in self.c.poll(timeout_ms=500, max_records=max_records).values():
            out += [_record_got(r) for r in recs]
        return out

    def close(self):
        with contextlib.suppress(Exception):
            self.c.close()


def _record_got(r) -> Got:
    """kafka-python and aiokafka ConsumerRecord."""
    return Got(r.offset, Rec(r.key, r.value, tuple((k, v) for k, v in r.headers)), r.timestamp)


class KafkaPythonClient:
    name = "kafka-python"
    Producer = KafkaPythonProducer
    GroupConsumer = KafkaPythonGroupConsumer

    @staticmethod
    def _consumer(bootstrap: str, isolation: str):
        from kafka import KafkaConsumer

        return KafkaConsumer(
            bootstrap_servers=bootstrap,
            client_id="compat-tx-kafka-python",
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="none",
            isolation_level=isolation,
            fetch_max_wait_ms=200,
            request_timeout_ms=10_000,
        )

    def read(self, bootstrap, topic, isolation, stop, timeout=CONSUME_TIMEOUT_S) -> list[Got]:
        from kafka import TopicPartition

        c = self._consumer(bootstrap, isolation)
        tp = TopicPartition(topic, 0)
        gots = []
        try:
            c.assign([tp])
            c.seek(tp, 0)
            deadline = time.monotonic() + timeout
            while not stop(gots):
                _check_deadline(deadline, timeout, topic, isolation, gots, [])
                for recs in c.poll(timeout_ms=300).values():
                    gots += [_record_got(r) for r in recs]
        finally:
            c.close()
        return gots

    def end_offset(self, bootstrap, topic, isolation) -> int:
        from kafka import TopicPartition

        c = self._consumer(bootstrap, isolation)
        tp = TopicPartition(topic, 0)
        try:
            return c.end_offsets([tp])[tp]
        finally:
            c.close()

    @staticmethod
    def is_fenced(exc: BaseException) -> bool:
        from kafka import errors as Errors

        return any(
            isinstance(e, (Errors.ProducerFencedError, Errors.InvalidProducerEpochError))
            for e in _chain(exc)
        )


# --------------------------------------------------------------------------- aiokafka


class _Aio:
    """One event loop on a daemon thread; the aiokafka wrappers below are synchronous."""

    _loop: asyncio.AbstractEventLoop | None = None
    _lock = threading.Lock()

    @classmethod
    def run(cls, coro, timeout: float = TXN_OP_TIMEOUT_S):
        with cls._lock:
            if cls._loop is None:
                cls._loop = asyncio.new_event_loop()
                threading.Thread(target=cls._loop.run_forever, daemon=True).start()
        fut = asyncio.run_coroutine_threadsafe(asyncio.wait_for(coro, timeout), cls._loop)
        return fut.result(timeout + 5)


class AiokafkaProducer:
    def __init__(self, bootstrap: str, txid: str | None, txn_timeout_ms: int):
        from aiokafka import AIOKafkaProducer

        self.txid = txid

        async def make():
            return AIOKafkaProducer(
                bootstrap_servers=bootstrap,
                client_id="compat-tx-aiokafka",
                transactional_id=txid,
                transaction_timeout_ms=txn_timeout_ms,
                linger_ms=5,
                request_timeout_ms=10_000,
            )

        self.p = _Aio.run(make())
        self.started = False

    def init(self):
        # aiokafka sends InitProducerId (init_transactions) in start()
        _Aio.run(self.p.start())
        self.started = True

    def begin(self):
        _Aio.run(self.p.begin_transaction())

    def send(self, msgs: list[Msg]):
        async def go():
            futs = [
                await self.p.send(
                    m.topic,
                    value=m.rec.value,
                    key=m.rec.key,
                    partition=0,
                    timestamp_ms=m.ts,
                    headers=list(m.rec.headers),
                )
                for m in msgs
            ]
            await asyncio.gather(*futs)

        _Aio.run(go(), PRODUCE_TIMEOUT_S)

    def commit(self):
        _Aio.run(self.p.commit_transaction())

    def abort(self):
        _Aio.run(self.p.abort_transaction())

    def send_offsets(self, gc, topic: str, next_offset: int):
        from aiokafka import TopicPartition

        _Aio.run(
            self.p.send_offsets_to_transaction({TopicPartition(topic, 0): next_offset}, gc.group)
        )

    def close(self):
        if self.started:
            with contextlib.suppress(Exception):
                _Aio.run(self.p.stop(), 10)


class AiokafkaGroupConsumer:
    def __init__(self, bootstrap: str, topic: str, group: str):
        from aiokafka import AIOKafkaConsumer

        self.group = group

        async def make():
            c = AIOKafkaConsumer(
                topic,
                bootstrap_servers=bootstrap,
                client_id="compat-tx-aiokafka-worker",
                group_id=group,
                isolation_level="read_committed",
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                session_timeout_ms=SESSION_TIMEOUT_MS,
                heartbeat_interval_ms=1000,
                fetch_max_wait_ms=200,
            )
            await c.start()
            return c

        self.c = _Aio.run(make())

    def poll(self, max_records: int) -> list[Got]:
        batches = _Aio.run(self.c.getmany(timeout_ms=500, max_records=max_records))
        return [_record_got(r) for recs in batches.values() for r in recs]

    def close(self):
        with contextlib.suppress(Exception):
            _Aio.run(self.c.stop(), 10)


class AiokafkaClient:
    name = "aiokafka"
    Producer = AiokafkaProducer
    GroupConsumer = AiokafkaGroupConsumer

    @staticmethod
    async def _consumer(bootstrap: str, isolation: str):
        from aiokafka import AIOKafkaConsumer

        c = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            client_id="compat-tx-aiokafka",
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="none",
            isolation_level=isolation,
            fetch_max_wait_ms=200,
            request_timeout_ms=10_000,
        )
        await c.start()
        return c

    def read(self, bootstrap, topic, isolation, stop, timeout=CONSUME_TIMEOUT_S) -> list[Got]:
        from aiokafka import TopicPartition

        async def go():
            c = await self._consumer(bootstrap, isolation)
            tp = TopicPartition(topic, 0)
            gots = []
            try:
                c.assign([tp])
                c.seek(tp, 0)
                deadline = time.monotonic() + timeout
                while not stop(gots):
                    _check_deadline(deadline, timeout, topic, isolation, gots, [])
                    batch = await c.getmany(tp, timeout_ms=300)
                    gots += [_record_got(r) for r in batch.get(tp, [])]
            finally:
                await c.stop()
            return gots

        return _Aio.run(go(), timeout + 10)

    def end_offset(self, bootstrap, topic, isolation) -> int:
        from aiokafka import TopicPartition

        async def go():
            c = await self._consumer(bootstrap, isolation)
            tp = TopicPartition(topic, 0)
            try:
                return (await c.end_offsets([tp]))[tp]
            finally:
                await c.stop()

        return _Aio.run(go())

    @staticmethod
    def is_fenced(exc: BaseException) -> bool:
        from aiokafka import errors as Errors

        return any(
            isinstance(e, (Errors.ProducerFenced, Errors.InvalidProducerEpoch)) for e in _chain(exc)
        )


CLIENTS = {c.name: c() for c in (ConfluentClient, KafkaPythonClient, AiokafkaClient)}


def _chain(exc: BaseException | None):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _check_deadline(deadline, timeout, topic, isolation, gots, errors):
    if time.monotonic() >= deadline:
        raise AssertionError(
            f"{isolation} consumer of {topic}: condition not met within {timeout}s; "
            f"got {len(gots)} records (last {gots[-3:]}); errors {errors[:5]}"
        )


# --------------------------------------------------------------------------- test helpers


@pytest.fixture(params=list(CLIENTS))
def client(request):
    return CLIENTS[request.param]


@pytest.fixture
def closing():
    """closing(x) registers a producer/consumer wrapper to close at teardown."""
    objs = []
    yield lambda o: objs.append(o) or o
    for o in reversed(objs):
        o.close()


def send_plain(gateway, msgs: list[Msg]) -> None:
    """Non-transactional records, written with confluent-kafka (not the client under test)."""
    p = ConfluentProducer(gateway.bootstrap, None, int(PRODUCE_TIMEOUT_S * 1000))
    try:
        p.send(msgs)
    finally:
        p.close()


def sentinel(gateway, topic: str) -> bytes:
    key = SENTINEL + uuid.uuid4().hex.encode()
    send_plain(gateway, [Msg(topic, Rec(key, b"sentinel", ()), int(time.time() * 1000))])
    return key


def views(client, gateway, topic, timeout=CONSUME_TIMEOUT_S) -> dict[str, list[Got]]:
    """All of `topic` from offset 0 for both isolation levels, read up to a fresh sentinel."""
    key = sentinel(gateway, topic)
    out = {}
    for iso in ISOLATIONS:
        gots = client.read(
            gateway.bootstrap,
            topic,
            iso,
            lambda g: bool(g) and g[-1].rec.key == key,
            timeout,
        )
        assert_no_redelivery([g.offset for g in gots], f"{client.name} {iso} {topic}")
        out[iso] = gots
    return out


def payload(gots: list[Got]) -> list[tuple[Rec, int]]:
    return [(g.rec, g.ts) for g in gots if not (g.rec.key or b"").startswith(SENTINEL)]


def expect(msgs: list[Msg], topic: str) -> list[tuple[Rec, int]]:
    return [(m.rec, m.ts) for m in msgs if m.topic == topic]


def assert_same(got: list[tuple[Rec, int]], expected: list[tuple[Rec, int]], what: str):
    for i, (g, e) in enumerate(zip(got, expected, strict=False)):
        assert g == e, f"{what}: first difference at #{i}:\n  got      {g!r}\n  expected {e!r}"
    assert len(got) == len(expected), (
        f"{what}: got {len(got)} records, expected {len(expected)}"
        + (f"; first extra {got[len(expected)]!r}" if len(got) > len(expected) else "")
    )


def check_views(gateway, topic, vs, committed, aborted=(), what=""):
    """committed: what both levels show (tmsgate) / read_committed shows (Kafka). aborted: on
    Kafka read_uncommitted also shows these (proof the scenario really wrote them)."""
    assert_same(payload(vs["read_committed"]), committed, f"{what} {topic} read_committed")
    if not gateway.external:
        assert_same(payload(vs["read_uncommitted"]), committed, f"{what} {topic} read_uncommitted")
        for iso in ISOLATIONS:
            offs = [g.offset for g in vs[iso]]
            assert_dense_offsets(offs, 0, len(offs), f"{what} {topic} {iso} offsets")
    else:
        uncommitted = payload(vs["read_uncommitted"])
        missing = [r for r in list(committed) + list(aborted) if r not in uncommitted]
        assert not missing, f"Kafka read_uncommitted of {topic} lacks {missing[:3]}"


def end_offsets(client, gateway, topic) -> dict[str, int]:
    return {iso: client.end_offset(gateway.bootstrap, topic, iso) for iso in ISOLATIONS}


def fenced_error(client, call) -> BaseException:
    with pytest.raises(Exception) as ei:
        call()
    assert client.is_fenced(ei.value), (
        f"{client.name}: expected a fenced error, got {type(ei.value).__name__}: {ei.value!r}"
    )
    return ei.value


class Script:
    """This file run as a script in a subprocess; stdout lines collected by a thread."""

    def __init__(self, tmp_path: Path, name: str, *args):
        self.name = name
        self.err_path = tmp_path / f"{name}.stderr"
        self.lines: list[str] = []
        self._changed = threading.Condition()  # a line came, or stdout closed
        self._eof = False
        with open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), *map(str, args)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                cwd=str(HERE),
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
            )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append(line.strip())
                self._changed.notify_all()
        with self._changed:
            self._eof = True
            self._changed.notify_all()

    def stderr_tail(self, n=40) -> str:
        try:
            return "\n".join(self.err_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "<none>"

    def wait_line(self, prefix: str, timeout: float) -> str:
        def found() -> str | None:
            return next((ln for ln in self.lines if ln.startswith(prefix)), None)

        with self._changed:
            self._changed.wait_for(lambda: found() is not None or self._eof, timeout)
            line = found()
        if line is not None:
            return line
        if self._eof:
            self.proc.wait(5)
            raise AssertionError(
                f"{self.name} exited {self.proc.returncode} before printing {prefix!r}; "
                f"stdout tail {self.lines[-5:]}\n--- stderr ---\n{self.stderr_tail()}"
            )
        raise AssertionError(
            f"{self.name} did not print {prefix!r} within {timeout}s; "
            f"stdout tail {self.lines[-5:]}\n--- stderr ---\n{self.stderr_tail()}"
        )

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def finish(self, timeout: float) -> None:
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"{self.name} did not finish within {timeout}s; stdout tail {self.lines[-5:]}\n"
                f"--- stderr ---\n{self.stderr_tail()}"
            ) from None
        assert rc == 0, (
            f"{self.name} exited {rc}; stdout tail {self.lines[-5:]}\n"
            f"--- stderr ---\n{self.stderr_tail()}"
        )


@pytest.fixture
def scripts(tmp_path):
    """scripts(name, *args) starts this file as a subprocess; all are killed at teardown."""
    started: list[Script] = []

    def start(name, *args) -> Script:
        s = Script(tmp_path, name, *args)
        started.append(s)
        return s

    yield start
    for s in started:
        with contextlib.suppress(Exception):
            s.kill()


# --------------------------------------------------------------------------- 1. commit


def test_commit_visible_across_two_topics(client, gateway, make_topics, closing):
    a, b = make_topics("a", "b")
    ts0 = base_ts()
    plain = make_msgs(a, 3, "plain", ts0)
    send_plain(gateway, plain)
    tx_a = make_msgs(a, 40, "txa", ts0 + 1000, start=3)
    tx_b = make_msgs(b, 25, "txb", ts0 + 2000)

    p = closing(client.Producer(gateway.bootstrap, f"tx-{uuid.uuid4().hex}", 60_000))
    p.init()
    p.begin()
    p.send(interleave(tx_a, tx_b))  # delivered: the broker has them, the transaction is open

    # Open transaction: read_committed ends before it (Kafka: the LSO; tmsgate: no offsets yet)
    assert client.end_offset(gateway.bootstrap, a, "read_committed") == 3
    assert client.end_offset(gateway.bootstrap, b, "read_committed") == 0
    got = client.read(gateway.bootstrap, a, "read_committed", lambda g: len(g) >= 3)
    assert_same(payload(got), expect(plain, a), "read_committed before commit")
    if not gateway.external:
        # tmsgate: the open transaction is not in the log for read_uncommitted either, and it
        # does not hold back read_committed (a plain record after it is readable at once)
        assert end_offsets(client, gateway, a) == {"read_committed": 3, "read_uncommitted": 3}
        assert end_offsets(client, gateway, b) == {"read_committed": 0, "read_uncommitted": 0}
        check_views(gateway, a, views(client, gateway, a), expect(plain, a), what="open tx")
        check_views(gateway, b, views(client, gateway, b), [], what="open tx")

    p.commit()
    if not gateway.external:
        # visible at once: no wait after commit returns (a, b each also hold one sentinel)
        assert end_offsets(client, gateway, a) == {iso: 3 + 1 + 40 for iso in ISOLATIONS}
        assert end_offsets(client, gateway, b) == {iso: 1 + 25 for iso in ISOLATIONS}
    va, vb = views(client, gateway, a), views(client, gateway, b)
    for iso in ISOLATIONS:  # committed: both levels, on Kafka too
        assert_same(payload(va[iso]), expect(plain + tx_a, a), f"{iso} {a} after commit")
        assert_same(payload(vb[iso]), expect(tx_b, b), f"{iso} {b} after commit")
    check_views(gateway, a, va, expect(plain + tx_a, a), what="committed")
    check_views(gateway, b, vb, expect(tx_b, b), what="committed")


# --------------------------------------------------------------------------- 2. abort


def test_abort_invisible(client, gateway, make_topics, closing):
    a, b = make_topics("a", "b")
    ts0 = base_ts()
    aborted = interleave(make_msgs(a, 30, "aborted-a", ts0), make_msgs(b, 20, "aborted-b", ts0))
    kept = make_msgs(a, 10, "kept", ts0 + 1000, start=30)

    p = closing(client.Producer(gateway.bootstrap, f"tx-{uuid.uuid4().hex}", 60_000))
    p.init()
    p.begin()
    p.send(aborted)
    p.abort()
    if not gateway.external:
        assert end_offsets(client, gateway, a) == {iso: 0 for iso in ISOLATIONS}
        assert end_offsets(client, gateway, b) == {iso: 0 for iso in ISOLATIONS}
    p.begin()
    p.send(kept)
    p.commit()

    check_views(gateway, a, views(client, gateway, a), expect(kept, a), expect(aborted, a))
    check_views(gateway, b, views(client, gateway, b), [], expect(aborted, b))


# --------------------------------------------------------------------------- 3. fencing


def test_fenced_zombie(client, gateway, make_topics, closing):
    (a,) = make_topics("a")
    ts0 = base_ts()
    txid = f"tx-{uuid.uuid4().hex}"
    zombie = make_msgs(a, 10, "zombie", ts0)
    late = make_msgs(a, 5, "zombie-late", ts0 + 100, start=10)
    good = make_msgs(a, 7, "good", ts0 + 1000, start=20)

    p1 = closing(client.Producer(gateway.bootstrap, txid, 60_000))
    p1.init()
    p1.begin()
    p1.send(zombie)
    p2 = closing(client.Producer(gateway.bootstrap, txid, 60_000))
    p2.init()  # fences p1 (and aborts its open transaction)

    # p1's further produce (or, if the client only learns at the end, its commit) is fenced
    def produce_and_commit():
        p1.send(late)
        p1.commit()

    fenced_error(client, produce_and_commit)
    try:  # a fenced producer cannot commit afterwards either
        p1.commit()
    except Exception:
        pass
    else:
        raise AssertionError(f"{client.name}: a fenced producer's commit succeeded")

    p2.begin()
    p2.send(good)
    p2.commit()
    check_views(gateway, a, views(client, gateway, a), expect(good, a), expect(zombie, a))


# --------------------------------------------------------------------------- 4. killed


def txn_state(gateway, txid: str) -> str:
    """The transaction's state by DescribeTransactions (kafka-python's admin client)."""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=gateway.bootstrap)
    try:
        return admin.describe_transactions([txid])[txid].state.value
    finally:
        admin.close()


def _start_hang(scripts, client, gateway, topic, txid, n, ts0, txn_timeout_ms):
    s = scripts("hang", "hang", client.name, gateway.bootstrap, topic, txid, n, ts0, txn_timeout_ms)
    s.wait_line("READY", 45)
    return s


def test_killed_producer_aborted_by_next_init(client, gateway, make_topics, scripts, closing):
    (a,) = make_topics("a")
    ts0 = base_ts()
    txid = f"tx-{uuid.uuid4().hex}"
    s = _start_hang(scripts, client, gateway, a, txid, 20, ts0, 60_000)
    s.kill()  # SIGKILL with 20 records produced, transaction open (timeout 60 s)
    zombie = make_msgs(a, 20, "hang", ts0)

    good = make_msgs(a, 8, "good", ts0 + 1000, start=20)
    p = closing(client.Producer(gateway.bootstrap, txid, 60_000))
    p.init()  # aborts the dead instance's transaction
    p.begin()
    p.send(good)
    p.commit()
    check_views(gateway, a, views(client, gateway, a), expect(good, a), expect(zombie, a))


def test_killed_producer_aborted_by_timeout(client, gateway, make_topics, scripts):
    (a,) = make_topics("a")
    ts0 = base_ts()
    txid = f"tx-{uuid.uuid4().hex}"
    s = _start_hang(scripts, client, gateway, a, txid, 20, ts0, SHORT_TXN_TIMEOUT_MS)
    s.kill()
    zombie = make_msgs(a, 20, "hang", ts0)

    after = make_msgs(a, 5, "after", ts0 + 1000, start=20)
    send_plain(gateway, after)
    if not gateway.external:
        # tmsgate: the open (dead) transaction never holds back read_committed
        assert end_offsets(client, gateway, a) == {iso: 5 for iso in ISOLATIONS}
    # Kafka: read_committed gets past the dead transaction only once it is aborted by timeout
    # (transaction.timeout.ms, checked every transaction.abort.timed.out.transaction.cleanup
    # .interval.ms, 10 s by default)
    got = client.read(gateway.bootstrap, a, "read_committed", lambda g: len(g) >= 5, 40)
    assert_same(payload(got), expect(after, a), "read_committed after the dead transaction")
    # The coordinator aborts it by timeout (DescribeTransactions says so), then it never
    # appeared. On tmsgate no read waits for that; on Kafka the read above already did.
    wait_until(lambda: txn_state(gateway, txid) == "CompleteAbort", 30, f"{txid} aborted")
    check_views(gateway, a, views(client, gateway, a), expect(after, a), expect(zombie, a))


# --------------------------------------------------------------------------- 5. c-t-p


CTP_INPUTS = 2000
CTP_BATCH = 50


def transform(g: Got) -> Msg:
    # output record i: the input's key, "T:" + its value, header src=<input offset> first
    rec = Rec(g.rec.key, b"T:" + g.rec.value, (("src", str(g.offset).encode()), *g.rec.headers))
    return Msg("", rec, g.ts)


@pytest.mark.timeout(150)
def test_consume_transform_produce_exactly_once(client, gateway, make_topics, scripts):
    t_in, t_out = make_topics("in", "out")
    ts0 = base_ts()
    inputs = make_records(CTP_INPUTS, "in", size=40)
    send_plain(gateway, [Msg(t_in, r, ts0 + i) for i, r in enumerate(inputs)])
    expected = [(transform(Got(i, r, ts0 + i)).rec, ts0 + i) for i, r in enumerate(inputs)]
    group, txid = f"ctp-{uuid.uuid4().hex[:12]}", f"tx-ctp-{uuid.uuid4().hex[:12]}"
    seed = random.randrange(1 << 30)
    kill_at = random.Random(seed).randrange(4 * CTP_BATCH, CTP_INPUTS - 4 * CTP_BATCH)
    where = f"(random seed {seed}: worker 1 killed mid-transaction at input offset {kill_at})"

    args = [client.name, gateway.bootstrap, t_in, t_out, group, txid, CTP_INPUTS, CTP_BATCH]
    w1 = scripts("worker-1", "ctp", *args, kill_at)
    w1.wait_line("PAUSED", 60)  # outputs up to kill_at produced, transaction still open
    w1.kill()
    committed_by_w1 = max(int(ln.split()[1]) for ln in w1.lines if ln.startswith("COMMITTED"))
    assert 0 < committed_by_w1 <= kill_at, (committed_by_w1, where)

    w2 = scripts("worker-2", "ctp", *args, -1)
    w2.finish(90)
    assert "DONE" in w2.lines, w2.lines[-5:]

    vs = views(client, gateway, t_out)
    got = payload(vs["read_committed"])
    srcs = Counter(int(dict(r.headers)["src"]) for r, _ in got)
    dups = sorted(o for o, c in srcs.items() if c > 1)
    missing = sorted(set(range(CTP_INPUTS)) - set(srcs))
    assert not dups and not missing, (
        f"output (read_committed): {len(dups)} inputs twice (first {dups[:5]}), "
        f"{len(missing)} missing (first {missing[:5]}); {where}"
    )
    assert_same(got, expected, f"output read_committed {where}")
    check_views(gateway, t_out, vs, expected, what=where)
    if gateway.external:  # Kafka keeps worker 1's aborted outputs for read_uncommitted
        n_zombie = kill_at - committed_by_w1 + 1
        assert len(payload(vs["read_uncommitted"])) == CTP_INPUTS + n_zombie, where

    def group_offset():
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": group})
        try:
            (tp,) = c.committed([TopicPartition(t_in, 0)], timeout=10)
            return tp.offset
        finally:
            c.close()

    end_in = CLIENTS["confluent-kafka"].end_offset(gateway.bootstrap, t_in, "read_committed")
    assert end_in == CTP_INPUTS
    wait_until(lambda: group_offset() == end_in, 15, f"group {group} offset {end_in}")


# --------------------------------------------------------------------------- subprocesses


def _hang(client_name, bootstrap, topic, txid, n, ts0, txn_timeout_ms):
    """Open a transaction, produce n records (delivered), print READY, wait to be killed."""
    client = CLIENTS[client_name]
    p = client.Producer(bootstrap, txid, int(txn_timeout_ms))
    p.init()
    p.begin()
    p.send(make_msgs(topic, int(n), "hang", int(ts0)))
    print("READY", flush=True)
    threading.Event().wait()  # until the test kills this process
    return 1


def _ctp(client_name, bootstrap, t_in, t_out, group, txid, n_inputs, batch, kill_at):
    """Consume t_in with group `group` (read_committed), write transform(record) to t_out in
    transactions of up to `batch` inputs with the consumed offsets sent to the transaction.
    With kill_at >= 0: in the transaction holding that input, produce up to it, print
    PAUSED and wait to be killed. Prints COMMITTED <next offset> after each commit, DONE."""
    client = CLIENTS[client_name]
    n_inputs, batch, kill_at = int(n_inputs), int(batch), int(kill_at)
    p = client.Producer(bootstrap, txid, 60_000)
    p.init()  # before joining: aborts a dead instance's transaction (and its offsets)
    gc = client.GroupConsumer(bootstrap, t_in, group)
    committed, buf = -1, []
    try:
        while committed != n_inputs:
            if not buf:
                buf = gc.poll(batch)
                continue
            chunk, buf = buf[:batch], buf[batch:]
            out = [Msg(t_out, transform(g).rec, g.ts) for g in chunk]
            p.begin()
            if any(g.offset == kill_at for g in chunk):
                upto = next(i for i, g in enumerate(chunk) if g.offset == kill_at)
                p.send(out[: upto + 1])
                print("PAUSED", flush=True)
                threading.Event().wait()  # until the test kills this process
                return 1
            p.send(out)
            p.send_offsets(gc, t_in, chunk[-1].offset + 1)
            p.commit()
            committed = chunk[-1].offset + 1
            print(f"COMMITTED {committed}", flush=True)
    finally:
        gc.close()
        p.close()
    print("DONE", flush=True)
    return 0


if __name__ == "__main__":
    cmd, *rest = sys.argv[1:]
    sys.exit({"hang": _hang, "ctp": _ctp}[cmd](*rest))
