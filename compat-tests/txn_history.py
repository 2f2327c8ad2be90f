#!/usr/bin/env python3
"""History checker: random concurrent transactional histories against a live gateway.

Real clients (confluent-kafka / librdkafka, httpx for the TMS HTTP API) run as subprocesses
and write, while the orchestrator SIGKILLs writers and the gateway (kill -9, restart on the
same store and ports) at random:

- ``tx*``  transactional producers (one transactional.id each): every transaction writes
  1-3 records to each of 1-3 topics, then commits (most) or aborts; ``tx0`` has a 3 s
  transaction.timeout.ms and now and then stalls past it before committing;
- ``pl*``  plain idempotent producers (acks=all), one of them feeding the EOS input topic;
- ``ht*``  TMS header transactions: start a transaction over HTTP, produce with the Kafka
  header ``tms.tx.write_pointer`` (and publish some records over HTTP under the same write
  pointer), then commit over HTTP, or roll the HTTP publishes back and abort;
- ``eos``  a consume-transform-produce worker (consumer group, read_committed,
  send_offsets_to_transaction) from the EOS input topic to the EOS output topic.

Every record value is a small JSON naming the record (``r``: ``<writer>:<txn seq>/<index>``
or ``<writer>:<seq>``), its transaction (``x``) and the transaction's size (``n``). Every
writer logs, line by line (so a SIGKILL loses nothing that was logged), what it planned
(``begin``), when it asked to commit (``committing``, a monotonic time taken *before* the
call), and what it was told (``committed``, ``commit_error``, ``aborted``, ``ack``...).

Consumers: a read_committed and a read_uncommitted consumer follow every topic live (with
the time each record was seen), a probe asks the read_committed end offset (LSO) of the
other topics of every multi-topic transaction the live consumer sees; at the end the
gateway is killed (-9) once more and restarted, and every topic is read from the beginning
by two read_committed consumers and one read_uncommitted consumer up to a sentinel.

Checks (each a count that must be 0):

- acknowledged_lost: a committed transaction (commit acknowledged, or TMS state committed)
  with none of its records in a final view, an acknowledged plain record missing, or a TMS
  transaction whose commit was answered "committed" in another state at the end;
- aborted_read: a record of a transaction that never committed (Kafka: commit never asked,
  or aborted; TMS: final state aborted/invalid) seen by a read_committed consumer, or, for
  Kafka transactions, by any consumer (tmsgate keeps open and aborted Kafka transactions
  out of the log; not checked with --real-kafka);
- uncommitted_read: a record seen before its transaction's commit was even asked
  (read_committed; read_uncommitted too for Kafka transactions on tmsgate). TMS header
  records are visible to read_uncommitted before the commit by design: not counted;
- torn: a committed (or unknown-outcome) transaction with some but not all of its records
  in a final view; or, live, a transaction seen in one topic while the LSO of another of its
  topics, asked right after, had not reached its records there, unless the record at that
  LSO belongs to a transaction that may still have been open then (a TMS header
  transaction, or another Kafka commit in progress): tmsgate makes every topic of a
  transaction visible at one moment (not checked with --real-kafka: Kafka writes its commit
  markers partition by partition; with --cluster, counted apart as
  lso_probe_behind_on_another_gateway: each gateway shows a commit once it learns of it);
- duplicate: a record twice in one view (idempotence; a commit applied twice);
- eos_duplicate: an EOS input offset twice in the output; eos_lost: an input offset below
  the group's committed offset missing from the output (or with the wrong source);
- order_mismatch: the two final read_committed consumers disagree about a topic's
  (offset, record) sequence, a live consumer's sequence is not a prefix of the final one,
  offsets go backwards, or one writer's records are out of order within a topic;
- wp_not_increasing: a TMS write pointer not above every one whose start was answered
  before its own start was asked (txn_history_cluster.check_write_pointers).

A transaction whose commit got an error, timed out or whose writer was killed while
committing is "unknown": all or nothing is fine, part of it is torn.

    .venv/bin/python compat-tests/txn_history.py --duration 600 --seed 7     # a long run
    .venv/bin/python compat-tests/txn_history.py --duration 3600 --gateway-kill-every 60 \\
        --writer-kill-every 4 --txn-writers 4 --topics 6 --workdir /tmp/history
    .venv/bin/python compat-tests/txn_history.py recheck /tmp/history       # checks again
    .venv/bin/python compat-tests/txn_history.py --bootstrap 127.0.0.1:19092 \\
        --real-kafka --duration 120                 # an Apache Kafka (no HTTP, no gateway kills)
    .venv/bin/python compat-tests/txn_history.py --cluster 3 --duration 300   # 3 gateways

``--cluster 3``: three ``tmsgate serve --cluster`` on one hbase:// store (the HBase stand-in
by default), the controller and other gateways killed in turn; txn_history_cluster.py.
``--workers 3``: one ``tmsgate serve --workers 3`` on LevelDB, a worker (the controller, another)
or the store's owner killed in turn; txn_history_workers.py.

Without --bootstrap it starts its own ``tmsgate serve`` (Kafka and HTTP listeners on free
ports, LevelDB store in the work dir). Progress goes to stderr, the summary (JSON: counts,
what was exercised, examples of each violation) to stdout; the exit code is 1 when a count
is not 0 or the run could not finish its reads. The work dir (store, gateway.log,
rdkafka.log, logs/<writer>.<incarnation>.jsonl and .stderr, history.json) is kept when
something is wrong, or with --keep/--workdir. The seed fixes the plans (topics, sizes,
commit or abort) and the fault schedule; thread and process timing still varies, so a
failing seed reproduces the situation, not necessarily the exact interleaving: keep the
work dir. TXN_HISTORY_RDKAFKA_DEBUG=eos,cgrp,protocol turns on librdkafka debug in the
writers' .stderr files; ``kill -USR1 <writer pid>`` dumps its Python stack there.

Clients use metadata.recovery.strategy=none: with librdkafka 2.16's default (rebootstrap),
a single broker down for a second (a gateway kill -9) gets decommissioned, and
send_offsets_to_transaction() can then hang forever past its timeout (librdkafka #5511,
#5456; seen here before the setting). The EOS worker also has a 90 s watchdog.
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import itertools
import json
import logging
import os
import queue
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

# Run as a script, this module is __main__: txn_history_cluster's `import txn_history` gets it
sys.modules.setdefault("txn_history", sys.modules[__name__])

HERE = Path(__file__).resolve().parent
TX_HEADER = "tms.tx.write_pointer"
NAMESPACE = "default"
START_TIMEOUT_S = 30.0
TXN_TIMEOUT_MS = 20_000
HTTP_TXN_TIMEOUT_S = 20
SESSION_TIMEOUT_MS = 6_000
EXAMPLES_PER_CHECK = 8

COUNT_KEYS = (
    "acknowledged_lost",
    "aborted_read",
    "uncommitted_read",
    "torn",
    "duplicate",
    "eos_duplicate",
    "eos_lost",
    "order_mismatch",
    "wp_not_increasing",
)
# how a TMS writer's transaction ended, in its log
HTTP_ENDS = ("committed", "aborted", "commit_error", "abort_error")


def mono() -> float:
    # CLOCK_MONOTONIC is system-wide on Linux: comparable across the writer processes.
    return time.monotonic()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


class Log:
    """JSON lines, one write() per event: a SIGKILL loses nothing already logged."""

    def __init__(self, path: str):
        self.f = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115

    def __call__(self, ev: str, **kw) -> None:
        kw["ev"] = ev
        self.f.write(json.dumps(kw, separators=(",", ":")) + "\n")


def read_log(path: Path) -> list[dict]:
    out = []
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return out
    for line in text.splitlines():
        with contextlib.suppress(ValueError):  # a line cut by SIGKILL
            out.append(json.loads(line))
    return out


def kerr(exc: BaseException):
    """The KafkaError inside a KafkaException, or None."""
    from confluent_kafka import KafkaError, KafkaException

    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def stop_flag() -> threading.Event:
    """SIGTERM: finish the transaction at hand, then exit. An orphan (the orchestrator died)
    exits at once."""
    ev = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: ev.set())

    def orphan_watch() -> None:
        # stdin is a pipe from the orchestrator that nothing is written to: it reads EOF
        # when the orchestrator has gone (however it died)
        sys.stdin.buffer.read()
        os._exit(5)

    threading.Thread(target=orphan_watch, daemon=True).start()
    return ev


# =========================================================================== writers
# Each writer runs in its own process: python txn_history.py worker '<json spec>'.


def _debug() -> dict:
    """Common librdkafka settings of the writers.

    metadata.recovery.strategy=none: with the default (rebootstrap), librdkafka 2.16
    decommissions the broker when the single broker is down a moment (a gateway kill -9),
    and send_offsets_to_transaction() can then hang forever, ignoring its timeout, when the
    group coordinator was that broker (librdkafka issues #5511, #5456).

    TXN_HISTORY_RDKAFKA_DEBUG=eos,cgrp,protocol: librdkafka debug in the writers' .stderr.
    """
    d = os.environ.get("TXN_HISTORY_RDKAFKA_DEBUG")
    return {**_no_rebootstrap(), **({"debug": d} if d else {})}


_NO_REBOOTSTRAP: dict | None = None


def _no_rebootstrap() -> dict:
    """{"metadata.recovery.strategy": "none"} where librdkafka knows the property."""
    global _NO_REBOOTSTRAP
    if _NO_REBOOTSTRAP is None:
        from confluent_kafka import KafkaException, Producer

        try:
            Producer({"metadata.recovery.strategy": "none", "log_level": 0})
            _NO_REBOOTSTRAP = {"metadata.recovery.strategy": "none"}
        except KafkaException:  # an older librdkafka: no re-bootstrap either
            _NO_REBOOTSTRAP = {}
    return _NO_REBOOTSTRAP


def _drop(p) -> None:
    if p is None:
        return
    with contextlib.suppress(Exception):
        p.purge()
    with contextlib.suppress(Exception):
        p.flush(0.5)


def _produce(p, topic: str, value: bytes, key: bytes | None, cb, headers=None) -> None:
    while True:
        try:
            p.produce(topic, value=value, key=key, partition=0, headers=headers, on_delivery=cb)
            return
        except BufferError:
            p.poll(0.05)


def _txn_producer(spec: dict, txid: str):
    from confluent_kafka import Producer

    tmo = spec.get("txn_timeout_ms", TXN_TIMEOUT_MS)
    return Producer(
        {
            "bootstrap.servers": spec["bootstrap"],
            **_debug(),
            "client.id": spec["id"],
            "transactional.id": txid,
            "transaction.timeout.ms": tmo,
            "message.timeout.ms": min(15_000, tmo),
            "socket.timeout.ms": min(10_000, tmo),
            "linger.ms": 2,
            "retry.backoff.ms": 100,
            "reconnect.backoff.ms": 100,
            "reconnect.backoff.max.ms": 500,
        }
    )


def _init_txns(p, log: Log, stop: threading.Event, deadline_s: float = 120.0) -> bool:
    end = mono() + deadline_s
    while mono() < end:
        try:
            p.init_transactions(20)
            log("init", t=mono())
            return True
        except Exception as exc:
            err = kerr(exc)
            log("init_error", err=str(err or exc))
            if err is None or err.fatal():
                return False
            if stop.is_set() and mono() > end - deadline_s + 20:
                return False
            stop.wait(0.3)
    return False


def worker_txn(spec: dict) -> int:
    """Transactional producer: plan, begin, produce, flush, then commit or abort."""
    rng = random.Random(spec["seed"])
    log = Log(spec["log"])
    stop = stop_flag()
    wid, topics, txid = spec["id"], spec["topics"], spec["txid"]
    pace = spec.get("pace_s", 0.02)
    commit_p = spec.get("commit_p", 0.8)
    p = None
    seq = 0
    errors: list = []

    def cb(err, msg):
        if err is not None:
            errors.append(err)

    def reset(reason: str) -> None:
        nonlocal p
        log("reset", why=reason)
        _drop(p)
        p = None

    def abort_or_reset(exc: BaseException | None) -> None:
        err = kerr(exc) if exc is not None else None
        if exc is not None and (err is None or err.fatal()):
            reset(str(err or exc))
            return
        for _ in range(3):
            try:
                p.abort_transaction(20)
                log("aborted_after_error", t=mono())
                return
            except Exception as exc2:
                err2 = kerr(exc2)
                log("abort_error", err=str(err2 or exc2))
                if err2 is None or err2.fatal() or not err2.retriable():
                    break
        reset("abort failed")

    while not stop.is_set():
        if p is None:
            p = _txn_producer(spec, txid)
            if not _init_txns(p, log, stop):
                reset("init failed")
                stop.wait(0.5)
                continue
        seq += 1
        x = f"{wid}:{seq}"
        k = rng.randint(1, min(3, len(topics)))
        chosen = sorted(rng.sample(topics, k))
        recs = []
        for t in chosen:
            for _ in range(rng.randint(1, 3)):
                recs.append([t, f"{x}/{len(recs)}"])
        intent = "commit" if rng.random() < commit_p else "abort"
        log("begin", x=x, recs=recs, intent=intent, t=mono())
        try:
            p.begin_transaction()
        except Exception as exc:
            log("begin_error", x=x, err=str(kerr(exc) or exc))
            reset("begin failed")
            continue
        errors.clear()
        n = len(recs)
        try:
            for t, rid in recs:
                v = json.dumps(
                    {"r": rid, "x": x, "n": n, "tp": chosen}, separators=(",", ":")
                ).encode()
                _produce(p, t, v, rid.encode(), cb)
            left = p.flush(15)
        except Exception as exc:
            log("produce_error", x=x, err=str(kerr(exc) or exc))
            abort_or_reset(exc)
            continue
        if errors or left:
            log("produce_error", x=x, err=str(errors[0]) if errors else f"{left} undelivered")
            abort_or_reset(None)
            continue
        if intent == "abort":
            log("aborting", x=x, t=mono())
            try:
                p.abort_transaction(20)
                log("aborted", x=x, t=mono())
            except Exception as exc:
                log("abort_error", x=x, err=str(kerr(exc) or exc), t=mono())
                abort_or_reset(exc)
        else:
            if rng.random() < spec.get("stall_p", 0):
                # outlive transaction.timeout.ms: the gateway aborts it (and bumps the
                # epoch); the commit then fails, and nothing of it may show
                stall = spec["txn_timeout_ms"] / 1000 + 2.5
                log("stall", x=x, s=stall, t=mono())
                time.sleep(stall)  # real time: the live gateway's own timeout must pass
            elif rng.random() < 0.1:
                stop.wait(rng.uniform(0, 0.3))  # hold a transaction open a while
            log("committing", x=x, t=mono())
            last = None
            for _ in range(3):
                try:
                    p.commit_transaction(20)
                    last = None
                    break
                except Exception as exc:
                    last = exc
                    err = kerr(exc)
                    log("commit_retry", x=x, err=str(err or exc))
                    if err is None or not err.retriable():
                        break
            if last is None:
                log("committed", x=x, t=mono())
            else:
                log("commit_error", x=x, err=str(kerr(last) or last), t=mono())
                abort_or_reset(last)
        if pace:
            stop.wait(rng.uniform(0, pace))
    _drop(p)
    log("exit", t=mono())
    return 0


def worker_plain(spec: dict) -> int:
    """Idempotent producer, acks=all; a delivery report without error is an acknowledgement."""
    from confluent_kafka import Producer

    rng = random.Random(spec["seed"])
    log = Log(spec["log"])
    stop = stop_flag()
    wid, topics = spec["id"], spec["topics"]
    pace = spec.get("pace_s", 0.01)
    fatal: list = []

    def cb(err, msg):
        rid = msg.key().decode()
        if err is None:
            log("ack", r=rid, tp=msg.topic(), o=msg.offset())
        else:
            log("nack", r=rid, err=str(err))
            if err.fatal():
                fatal.append(err)

    def make():
        return Producer(
            {
                "bootstrap.servers": spec["bootstrap"],
                **_debug(),
                "client.id": wid,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 60_000,
                "socket.timeout.ms": 10_000,
                "retry.backoff.ms": 100,
                "reconnect.backoff.ms": 100,
                "reconnect.backoff.max.ms": 500,
            }
        )

    p = make()
    seq = 0
    while not stop.is_set():
        if fatal:
            log("reset", why=str(fatal[0]))
            fatal.clear()
            _drop(p)
            p = make()
        seq += 1
        rid = f"{wid}:{seq}"
        t = rng.choice(topics)
        v = json.dumps({"r": rid}, separators=(",", ":")).encode()
        try:
            _produce(p, t, v, rid.encode(), cb)
        except Exception as exc:
            log("produce_error", r=rid, err=str(kerr(exc) or exc))
            stop.wait(0.2)
        p.poll(0)
        if pace:
            stop.wait(rng.uniform(0, pace))
    p.flush(30)
    log("exit", t=mono())
    return 0


def worker_http(spec: dict) -> int:
    """TMS transactions: start over HTTP, produce with the tms.tx.write_pointer header and
    publish over HTTP under the write pointer, then commit, or roll back and abort. With
    several gateways (``https``) the calls spread over them (txn_history_cluster.py)."""
    from confluent_kafka import Producer
    from txn_history_cluster import HttpGateways

    rng = random.Random(spec["seed"])
    log = Log(spec["log"])
    stop = stop_flag()
    wid, topics = spec["id"], spec["topics"]
    pace = spec.get("pace_s", 0.05)
    commit_p = spec.get("commit_p", 0.7)
    gws = HttpGateways(spec.get("https") or [spec["http"]], rng, log=log)
    errors: list = []

    def cb(err, msg):
        if err is not None:
            errors.append(err)

    def make():
        return Producer(
            {
                "bootstrap.servers": spec["bootstrap"],
                **_debug(),
                "client.id": wid,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 2,
                "message.timeout.ms": 15_000,
                "socket.timeout.ms": 10_000,
                "reconnect.backoff.ms": 100,
                "reconnect.backoff.max.ms": 500,
            }
        )

    def undo(x: str, wp: int, published: list) -> None:
        log("aborting", x=x, wp=wp, t=mono())
        for t, body in published:
            try:
                r, _, _ = gws.post(
                    f"/v1/namespaces/{NAMESPACE}/topics/{t}/rollback",
                    content=body,
                    headers={"Content-Type": "application/json"},
                )
                log("rollback", x=x, tp=t, status=r.status_code, body=r.text[:200])
            except Exception as exc:  # the abort below hides them from readers all the same
                log("rollback", x=x, tp=t, err=repr(exc))
        try:
            r, url, _ = gws.post(f"/v1/transactions/{wp}/abort", idempotent=True)
            state = None
            with contextlib.suppress(Exception):
                state = r.json().get("state")
            # 409 "aborted": an abort sent again after its gateway went away mid-call
            done = r.status_code == 200 or (r.status_code == 409 and state == "aborted")
            log(
                "aborted" if done else "abort_error",
                x=x,
                wp=wp,
                gw=url,
                status=r.status_code,
                body=r.text[:200],
                t=mono(),
            )
        except Exception as exc:
            log("abort_error", x=x, wp=wp, err=repr(exc), t=mono())

    def commit(x: str, wp: int, started_at: str) -> None:
        log("committing", x=x, wp=wp, t=mono())
        try:
            # on another gateway than the start's; a 503 (no controller now) is asked again:
            # a commit repeated answers 409 with the state when the first one got through
            r, url, _ = gws.post(
                f"/v1/transactions/{wp}/commit",
                at=gws.pick(avoid=started_at),
                idempotent=True,
            )
            doc: dict = {}
            with contextlib.suppress(Exception):
                doc = r.json()
            state = doc.get("state")
            if state == "committed" and r.status_code in (200, 409):
                log("committed", x=x, wp=wp, gw=url, status=r.status_code, t=mono())
            else:
                log(
                    "commit_error",
                    x=x,
                    wp=wp,
                    gw=url,
                    status=r.status_code,
                    body=r.text[:200],
                    t=mono(),
                )
        except Exception as exc:
            log("commit_error", x=x, wp=wp, err=repr(exc), t=mono())

    p = make()
    seq = 0
    while not stop.is_set():
        seq += 1
        x = f"{wid}:{seq}"
        try:
            r, started_at, t_ask = gws.post(
                "/v1/transactions",
                json={"timeoutSeconds": HTTP_TXN_TIMEOUT_S},
                idempotent=True,
            )
            t_got = mono()
            r.raise_for_status()
            wp = int(r.json()["writePointer"])
        except Exception as exc:
            log("start_error", x=x, err=repr(exc))
            stop.wait(0.3)
            continue
        k = rng.randint(1, min(3, len(topics)))
        chosen = sorted(rng.sample(topics, k))
        recs = []
        for t in chosen:
            for _ in range(rng.randint(1, 3)):
                recs.append([t, f"{x}/{len(recs)}", rng.choice("kkh")])  # via kafka/http
        intent = "commit" if rng.random() < commit_p else "abort"
        log(
            "begin",
            x=x,
            wp=wp,
            recs=recs,
            intent=intent,
            t=mono(),
            t_ask=t_ask,
            t_got=t_got,
            gw=started_at,
        )
        n = len(recs)
        hdr = [(TX_HEADER, struct.pack(">q", wp))]
        errors.clear()
        published: list = []
        ok = True
        try:
            by_topic: dict[str, list[str]] = defaultdict(list)
            for t, rid, via in recs:
                v = json.dumps({"r": rid, "x": x, "n": n, "tp": chosen}, separators=(",", ":"))
                if via == "k":
                    _produce(p, t, v.encode(), rid.encode(), cb, headers=hdr)
                else:
                    by_topic[t].append(v)
            for t, vals in by_topic.items():
                r, _, _ = gws.post(
                    f"/v1/namespaces/{NAMESPACE}/topics/{t}/publish",
                    json={"transactionWritePointer": wp, "messages": vals},
                )
                if r.status_code != 200:
                    log("publish_error", x=x, tp=t, status=r.status_code, body=r.text[:200])
                    ok = False
                    break
                published.append((t, r.content))
            left = p.flush(15)
            if errors or left:
                log("produce_error", x=x, err=str(errors[0]) if errors else f"{left} left")
                ok = False
        except Exception as exc:
            log("produce_error", x=x, err=repr(exc))
            ok = False
        if not ok:
            undo(x, wp, published)
            if errors:
                _drop(p)
                p = make()
            stop.wait(0.2)
            continue
        if intent == "abort":
            undo(x, wp, published)
        else:
            commit(x, wp, started_at)
        if pace:
            stop.wait(rng.uniform(0, pace))
    p.flush(15)
    log("exit", t=mono())
    return 0


def worker_eos(spec: dict) -> int:
    """Consume-transform-produce, exactly once: read_committed group consumer, one
    transaction per batch with the consumed offsets. Any error: exit (the orchestrator
    starts a new instance, whose init_transactions fences this one)."""
    from confluent_kafka import Consumer, TopicPartition

    log = Log(spec["log"])
    stop = stop_flag()
    wid, t_in, t_out = spec["id"], spec["in"], spec["out"]
    p = _txn_producer(spec, spec["txid"])
    if not _init_txns(p, log, stop, 60):
        return 3
    c = Consumer(
        {
            "bootstrap.servers": spec["bootstrap"],
            **_debug(),
            "client.id": wid,
            "group.id": spec["group"],
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": 1000,
            "fetch.wait.max.ms": 100,
            "reconnect.backoff.ms": 100,
            "reconnect.backoff.max.ms": 500,
        }
    )
    c.subscribe([t_in])
    errors: list = []
    step = {"since": mono(), "what": "start"}

    def watchdog() -> None:
        # a transaction step stuck far beyond its timeouts: give up, a new instance fences us
        while True:
            time.sleep(1)
            if mono() - step["since"] > 90:
                log("watchdog", stuck_in=step["what"], t=mono())
                os._exit(4)

    threading.Thread(target=watchdog, daemon=True).start()

    def cb(err, msg):
        if err is not None:
            errors.append(err)

    rc = 0
    try:
        while not stop.is_set():
            msgs = [m for m in c.consume(num_messages=50, timeout=0.3)]
            good = []
            for m in msgs:
                if m.error():
                    log("consume_error", err=str(m.error()))
                    if m.error().fatal():
                        raise RuntimeError(str(m.error()))
                    continue
                good.append(m)
            step.update(since=mono(), what="poll")
            if not good:
                continue
            step["what"] = "transaction"
            p.begin_transaction()
            errors.clear()
            for m in good:
                src = json.loads(m.value())["r"]
                v = json.dumps(
                    {"r": f"eos:{m.offset()}", "s": m.offset(), "src": src, "w": wid},
                    separators=(",", ":"),
                ).encode()
                _produce(p, t_out, v, None, cb)
            nxt = good[-1].offset() + 1
            p.send_offsets_to_transaction(
                [TopicPartition(t_in, 0, nxt)], c.consumer_group_metadata(), 20
            )
            log("committing", lo=good[0].offset(), hi=good[-1].offset(), t=mono())
            p.commit_transaction(20)
            if errors:
                raise RuntimeError(f"commit succeeded with failed deliveries: {errors[0]}")
            log("committed", lo=good[0].offset(), hi=good[-1].offset(), t=mono())
    except Exception as exc:
        log("error", err=str(kerr(exc) or exc), t=mono())
        rc = 3
    with contextlib.suppress(Exception):
        c.close()
    _drop(p)
    log("exit", rc=rc, t=mono())
    return rc


WORKERS = {"txn": worker_txn, "plain": worker_plain, "http": worker_http, "eos": worker_eos}


# =========================================================================== gateway


class GatewayProc:
    """tmsgate serve over a LevelDB store, Kafka + HTTP listeners on fixed ports."""

    def __init__(self, workdir: Path, http: bool, extra_args: list[str]):
        self.workdir = workdir
        self.store = workdir / "store"
        self.store.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "gateway.log"
        self.kafka_port = free_port()
        self.http_port = free_port() if http else None
        self.extra_args = extra_args
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def http_url(self) -> str | None:
        return f"http://127.0.0.1:{self.http_port}" if self.http_port else None

    def command(self) -> list[str]:
        exe = Path(sys.executable).parent / "tmsgate"
        cmd = [
            str(exe) if exe.exists() else "tmsgate",
            "serve",
            "--store",
            f"leveldb://{self.store}",
            "--kafka-listen",
            self.bootstrap,
        ]
        cmd += ["--http-listen", f"127.0.0.1:{self.http_port}"] if self.http_port else ["--no-http"]
        return cmd + self.extra_args

    def start(self) -> None:
        self.starts += 1
        env = {k: v for k, v in os.environ.items() if not k.startswith("TMSGATE_")}
        env["PYTHONUNBUFFERED"] = "1"
        with open(self.log_path, "ab") as f:
            f.write(f"\n===== txn_history: start #{self.starts}\n".encode())
            self.proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=f,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=str(self.workdir),
                start_new_session=True,
            )
        end = mono() + START_TIMEOUT_S
        while mono() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tmsgate exited ({self.proc.returncode}); see {self.log_path}")
            if port_open("127.0.0.1", self.kafka_port) and (
                self.http_port is None or port_open("127.0.0.1", self.http_port)
            ):
                return
            time.sleep(0.05)
        raise RuntimeError(f"tmsgate did not listen within {START_TIMEOUT_S}s; see {self.log_path}")

    def kill9(self) -> None:
        if self.proc is not None:
            with open(self.log_path, "ab") as f:
                f.write(b"\n===== txn_history: SIGKILL\n")
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    def stop(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None


# =========================================================================== orchestrator


@dataclass
class Slot:
    name: str
    kind: str
    spec: dict
    incarnation: int = 0
    proc: subprocess.Popen | None = None
    logs: list[Path] = field(default_factory=list)
    restart_at: float | None = None
    kills: int = 0
    deaths: int = 0  # exits we did not cause
    clean_exit: bool = False


def parse_value(v: bytes | None) -> dict | None:
    if not v:
        return None
    try:
        d = json.loads(v)
    except ValueError:
        return None
    return d if isinstance(d, dict) and "r" in d else None


class LiveConsumer(threading.Thread):
    """Follows every topic from the beginning; records (topic, offset, rid, seen time)."""

    def __init__(self, name: str, bootstrap: str, topics: list[str], isolation: str, on_rec=None):
        super().__init__(name=name, daemon=True)
        self.bootstrap, self.topics, self.isolation = bootstrap, topics, isolation
        self.on_rec = on_rec
        self.records: list[tuple[str, int, str, float]] = []
        self.errors: Counter = Counter()
        self.halt = threading.Event()

    def run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

        c = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                **_quiet(),
                "group.id": f"txn-history-live-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "auto.offset.reset": "error",  # a reset would re-read silently: make it loud
                "isolation.level": self.isolation,
                "fetch.wait.max.ms": 100,
                "reconnect.backoff.ms": 100,
                "reconnect.backoff.max.ms": 500,
            }
        )
        c.assign([TopicPartition(t, 0, OFFSET_BEGINNING) for t in self.topics])
        try:
            while not self.halt.is_set():
                for m in c.consume(num_messages=500, timeout=0.2):
                    if m.error():
                        if m.error().code() != KafkaError._PARTITION_EOF:
                            self.errors[str(m.error())] += 1
                        continue
                    d = parse_value(m.value())
                    rid = d["r"] if d else f"?{m.value()!r}"
                    t = mono()
                    self.records.append((m.topic(), m.offset(), rid, t))
                    if self.on_rec is not None and d is not None:
                        self.on_rec(m.topic(), d, t)
        finally:
            with contextlib.suppress(Exception):
                c.close()


class LsoProbe(threading.Thread):
    """For a multi-topic transaction seen by the live read_committed consumer in one topic,
    asks the read_committed end offset (LSO) of its other topics right after."""

    def __init__(self, bootstrap: str):
        super().__init__(name="lso-probe", daemon=True)
        self.bootstrap = bootstrap
        self.q: queue.Queue = queue.Queue()
        self.results: list[dict] = []  # {x, seen_tp, t_seen, t_q, lso: {topic: lso}}
        self.errors = 0
        self.halt = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                **_quiet(),
                "group.id": f"txn-history-probe-{uuid.uuid4().hex[:8]}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        try:
            while not self.halt.is_set():
                try:
                    items = [self.q.get(timeout=0.2)]
                except queue.Empty:
                    continue
                while True:
                    try:
                        items.append(self.q.get_nowait())
                    except queue.Empty:
                        break
                need = sorted({t for it in items for t in it["others"]})
                t_q = mono()  # after every t_seen of the batch
                lso = {}
                try:
                    for t in need:
                        lso[t] = c.get_watermark_offsets(
                            TopicPartition(t, 0), timeout=5, cached=False
                        )[1]
                except Exception:
                    self.errors += 1
                    continue
                for it in items:
                    self.results.append(
                        {
                            "x": it["x"],
                            "seen_tp": it["tp"],
                            "t_seen": it["t"],
                            "t_q": t_q,
                            "lso": {t: lso[t] for t in it["others"]},
                        }
                    )
        finally:
            with contextlib.suppress(Exception):
                c.close()


RDKAFKA_LOG = logging.getLogger("txn_history.rdkafka")
RDKAFKA_LOG.propagate = False


def _quiet() -> dict:
    """The orchestrator's clients: librdkafka logs to <workdir>/rdkafka.log, not stderr."""
    return {**_no_rebootstrap(), "logger": RDKAFKA_LOG}


def progress(msg: str, t0: float) -> None:
    print(f"[txn_history +{mono() - t0:6.1f}s] {msg}", file=sys.stderr, flush=True)


class History:
    def __init__(self, a: argparse.Namespace):
        self.a = a
        self.rng = random.Random(a.seed)
        self.run_id = f"{a.seed}-{uuid.uuid4().hex[:6]}"
        self.workdir = Path(a.workdir or tempfile.mkdtemp(prefix="txn-history-"))
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        if not RDKAFKA_LOG.handlers:
            RDKAFKA_LOG.addHandler(logging.FileHandler(self.workdir / "rdkafka.log"))
            RDKAFKA_LOG.setLevel(logging.INFO)
        self.gw: GatewayProc | None = None
        self.bootstrap = a.bootstrap
        self.http = None if a.no_http else a.http
        self.t0 = mono()
        self.gateway_kills = 0
        self.faults: list[dict] = []  # gateway kills: {t, node, role, ...}
        self.slots: dict[str, Slot] = {}
        self.notes: list[str] = []
        self.problems: list[str] = []  # what makes the run fail besides the counts
        p = f"hist-{self.run_id}"
        self.topics = [f"{p}-t{i}" for i in range(a.topics)]
        self.eos_in, self.eos_out = f"{p}-eos-in", f"{p}-eos-out"
        self.eos_group = f"{p}-eos-group"
        self.probe_seen: set[str] = set()

    # ------------------------------------------------------------------ setup
    def log(self, msg: str) -> None:
        progress(msg, self.t0)

    def start_gateway(self) -> None:
        if self.bootstrap:
            return
        extra = list(self.a.gateway_arg or [])
        self.gw = GatewayProc(self.workdir, http=not self.a.no_http, extra_args=extra)
        self.gw.start()
        self.bootstrap = self.gw.bootstrap
        self.http = self.gw.http_url
        self.log(f"gateway up: kafka {self.bootstrap} http {self.http} store {self.gw.store}")

    # Hooks of the cluster mode (txn_history_cluster.ClusterHistory overrides them).
    def http_urls(self) -> list[str]:
        return [self.http] if self.http else []

    def can_kill_gateways(self) -> bool:
        return self.gw is not None

    def first_gateway_kill(self, start: float, end: float) -> float:
        # every gateway_kill_every s on average, the first by 35% of the run
        every = self.a.gateway_kill_every
        return start + min(self.a.duration * 0.35, self.rng.uniform(0.6, 1.4) * every)

    def next_gateway_kill(self, now: float, end: float) -> float:
        return now + self.rng.uniform(0.6, 1.4) * self.a.gateway_kill_every

    def gateway_up(self) -> None:
        if self.gw is not None and (self.gw.proc is None or self.gw.proc.poll() is not None):
            self.gw.start()

    def final_gateway_crash(self) -> None:
        self.kill_gateway()

    def stop_gateways(self) -> None:
        if self.gw is not None:
            self.gw.stop()

    def cleanup(self) -> None:
        """On the way out, whatever happened: kill what runs."""
        for s in self.slots.values():
            if s.proc is not None and s.proc.poll() is None:
                s.proc.kill()
        if self.gw is not None and self.gw.proc is not None:
            self.gw.kill9()
        for t in (getattr(self, "live", {}) or {}).values():
            t.halt.set()
        if getattr(self, "probe", None) is not None:
            self.probe.halt.set()

    def cluster_stats(self) -> dict:
        return {}

    def create_topics(self) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap, **_quiet()})
        names = [*self.topics, self.eos_in, self.eos_out]
        fs = admin.create_topics([NewTopic(n, 1, 1) for n in names], request_timeout=30)
        for f in fs.values():
            f.result(30)

    def make_slots(self) -> None:
        a = self.a
        base = {"bootstrap": self.bootstrap, "http": self.http, "https": self.http_urls()}
        for i in range(a.txn_writers):
            self.slots[f"tx{i}"] = Slot(
                f"tx{i}",
                "txn",
                {
                    **base,
                    "topics": self.topics,
                    "txid": f"hist-{self.run_id}-tx{i}",
                    "pace_s": a.pace,
                    "commit_p": 0.8,
                    # the first writer has a short transaction.timeout.ms and now and then
                    # outlives it
                    **({"txn_timeout_ms": 3000, "stall_p": 0.02} if i == 0 else {}),
                },
            )
        for i in range(a.plain_writers):
            self.slots[f"pl{i}"] = Slot(
                f"pl{i}", "plain", {**base, "topics": self.topics, "pace_s": a.pace / 2}
            )
        if a.eos:
            self.slots["plin"] = Slot(
                "plin", "plain", {**base, "topics": [self.eos_in], "pace_s": a.pace}
            )
            self.slots["eos"] = Slot(
                "eos",
                "eos",
                {
                    **base,
                    "in": self.eos_in,
                    "out": self.eos_out,
                    "group": self.eos_group,
                    "txid": f"hist-{self.run_id}-eos",
                },
            )
        if self.http:
            for i in range(a.http_writers):
                self.slots[f"ht{i}"] = Slot(
                    f"ht{i}",
                    "http",
                    {**base, "topics": self.topics, "pace_s": a.pace * 2, "commit_p": 0.7},
                )

    def spawn(self, s: Slot) -> None:
        s.incarnation += 1
        wid = f"{s.name}.{s.incarnation}"
        logp = self.workdir / "logs" / f"{wid}.jsonl"
        s.logs.append(logp)
        spec = {**s.spec, "id": wid, "log": str(logp), "seed": self.rng.randrange(1 << 62)}
        err = open(self.workdir / "logs" / f"{wid}.stderr", "wb")  # noqa: SIM115
        s.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "worker", s.kind, json.dumps(spec)],
            stdin=subprocess.PIPE,  # never written: closes when this process goes (orphan_watch)
            stdout=err,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        err.close()
        s.restart_at = None
        s.clean_exit = False

    # ------------------------------------------------------------------ faults
    def kill_writer(self, s: Slot) -> None:
        if s.proc is None or s.proc.poll() is not None:
            return
        s.proc.kill()
        s.proc.wait(10)
        s.kills += 1
        s.proc = None
        s.restart_at = mono() + self.rng.uniform(0.2, 2.0)
        self.log(f"SIGKILL writer {s.name}.{s.incarnation}")
        if s.kind == "http":
            self.abort_open_http(s.logs[-1])

    def kill_gateway(self) -> None:
        assert self.gw is not None
        self.gw.kill9()
        self.gateway_kills += 1
        self.faults.append({"t": mono(), "node": 0, "role": "controller"})
        down = self.rng.uniform(0.0, 1.5)
        self.log(f"SIGKILL gateway (#{self.gateway_kills}); restarting in {down:.1f}s")
        time.sleep(down)
        self.gw.start()
        self.log("gateway restarted")

    def abort_open_http(self, logp: Path) -> None:
        """Recovery of a dead HTTP writer: abort its transaction left in progress."""
        import httpx

        evs = read_log(logp)
        ended = {e["x"] for e in evs if e["ev"] in HTTP_ENDS}
        open_ = [e for e in evs if e["ev"] == "begin" and e["x"] not in ended]
        for e in open_:
            with contextlib.suppress(Exception):
                httpx.post(f"{self.http}/v1/transactions/{e['wp']}/abort", timeout=10)

    def supervise(self) -> None:
        now = mono()
        for s in self.slots.values():
            if s.proc is not None and s.proc.poll() is not None:
                rc = s.proc.returncode
                s.proc = None
                s.deaths += 1
                s.restart_at = now + (1.0 if s.kind == "eos" else 0.3)
                if s.kind != "eos" or rc != 3:
                    self.notes.append(f"writer {s.name}.{s.incarnation} exited {rc} by itself")
                if s.kind == "http":
                    self.abort_open_http(s.logs[-1])
            if s.proc is None and s.restart_at is not None and now >= s.restart_at:
                self.spawn(s)

    # ------------------------------------------------------------------ run
    def on_live_rc(self, topic: str, d: dict, t: float) -> None:
        x = d.get("x")
        if not x or x in self.probe_seen:
            return
        self.probe_seen.add(x)
        tps = d.get("tp") or []
        others = [tp for tp in tps if tp != topic]
        if others:
            self.probe.q.put({"x": x, "tp": topic, "t": t, "others": others})

    def run(self) -> dict:
        a = self.a
        self.log(f"seed {a.seed}, workdir {self.workdir}")
        self.start_gateway()
        self.create_topics()
        self.make_slots()
        self.probe = LsoProbe(self.bootstrap)
        self.probe.start()
        self.live = {
            "rc": LiveConsumer(
                "live-rc", self.bootstrap, self.topics, "read_committed", self.on_live_rc
            ),
            "ru": LiveConsumer("live-ru", self.bootstrap, self.topics, "read_uncommitted"),
        }
        for c in self.live.values():
            c.start()
        for s in self.slots.values():
            self.spawn(s)
        can_kill_gw = self.can_kill_gateways() and not a.no_gateway_kills
        end = self.t0 + a.duration
        start = mono()
        next_gw = self.first_gateway_kill(start, end) if can_kill_gw else float("inf")
        next_wk = start + self.rng.uniform(1.0, a.writer_kill_every)
        next_report = start + 5
        # the first kills go round the kinds (transactional, EOS, HTTP, plain), then random
        order = {"txn": 0, "eos": 1, "http": 2, "plain": 3}
        names = sorted(self.slots, key=lambda n: (order[self.slots[n].kind], n))
        firsts = []
        for k in order:
            of_kind = [n for n in names if self.slots[n].kind == k]
            if of_kind:
                firsts.append(self.rng.choice(of_kind))
        while mono() < end:
            time.sleep(0.1)
            self.supervise()
            now = mono()
            if now >= next_wk and a.writer_kill_every > 0:
                victim = firsts.pop(0) if firsts else self.rng.choice(names)
                self.kill_writer(self.slots[victim])
                next_wk = now + self.rng.uniform(0.5, 1.5) * a.writer_kill_every
            if now >= next_gw and now < end - 8:
                self.kill_gateway()
                next_gw = self.next_gateway_kill(mono(), end)
            if now >= next_report:
                self.log(
                    f"live read: rc {len(self.live['rc'].records)} ru "
                    f"{len(self.live['ru'].records)} records; gateway kills "
                    f"{self.gateway_kills}; writer kills "
                    f"{sum(s.kills for s in self.slots.values())}"
                )
                next_report = now + 5
        return self.finish()

    def stop_slots(self, names: list[str], timeout: float = 40.0) -> None:
        for n in names:
            s = self.slots[n]
            s.restart_at = None
            if s.proc is not None and s.proc.poll() is None:
                s.proc.terminate()
        end = mono() + timeout
        for n in names:
            s = self.slots[n]
            if s.proc is None:
                continue
            try:
                s.proc.wait(max(0.1, end - mono()))
                s.clean_exit = s.proc.returncode == 0
            except subprocess.TimeoutExpired:
                s.proc.kill()
                s.proc.wait(10)
                self.notes.append(f"writer {s.name}.{s.incarnation} did not stop on SIGTERM")
            s.proc = None

    def fence(self, txid: str) -> None:
        """init_transactions for a transactional.id: aborts whatever it left open."""
        from confluent_kafka import Producer

        p = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                **_quiet(),
                "transactional.id": txid,
                "transaction.timeout.ms": TXN_TIMEOUT_MS,
            }
        )
        try:
            p.init_transactions(30)
        except Exception as exc:
            self.notes.append(f"fencing {txid}: {exc}")
        _drop(p)

    def eos_group_offset(self) -> int | None:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.bootstrap, **_quiet(), "group.id": self.eos_group})
        try:
            (tp,) = c.committed([TopicPartition(self.eos_in, 0)], timeout=10)
            return tp.offset
        except Exception:
            return None
        finally:
            c.close()

    def end_offset(self, topic: str, isolation: str) -> int:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                **_quiet(),
                "group.id": "txn-history-eo",
                "isolation.level": isolation,
            }
        )
        try:
            return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1]
        finally:
            c.close()

    def resolve_http(self) -> dict[str, str]:
        """Final TMS state of every HTTP transaction (aborting any still in progress)."""
        import httpx

        states: dict[str, str] = {}
        if not self.http:
            return states
        with httpx.Client(base_url=self.http, timeout=10) as h:
            for s in self.slots.values():
                if s.kind != "http":
                    continue
                for logp in s.logs:
                    for e in read_log(logp):
                        if e["ev"] != "begin":
                            continue
                        wp = e["wp"]
                        st = None
                        for _ in range(5):
                            try:
                                st = h.get(f"/v1/transactions/{wp}").json().get("state")
                                if st == "in_progress":
                                    h.post(f"/v1/transactions/{wp}/abort")
                                    continue
                                break
                            except Exception:
                                time.sleep(0.5)
                        states[e["x"]] = st or "?"
        return states

    def sentinels(self) -> dict[str, int]:
        from confluent_kafka import Producer

        p = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                **_quiet(),
                "acks": "all",
                "message.timeout.ms": 30_000,
            }
        )
        out: dict[str, int] = {}

        def cb(err, msg):
            if err is None:
                out[msg.topic()] = msg.offset()

        for t in [*self.topics, self.eos_in, self.eos_out]:
            p.produce(t, json.dumps({"r": f"sentinel:{t}"}).encode(), partition=0, on_delivery=cb)
        p.flush(30)
        return out

    def read_all(self, isolation: str, stops: dict[str, int], timeout: float = 90.0):
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        c = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                **_quiet(),
                "group.id": f"txn-history-final-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "auto.offset.reset": "error",
                "isolation.level": isolation,
                "fetch.wait.max.ms": 100,
            }
        )
        views: dict[str, list[tuple[int, dict | None, bytes | None]]] = {t: [] for t in stops}
        done: set[str] = set()
        c.assign([TopicPartition(t, 0, 0) for t in stops])
        deadline = mono() + timeout
        errs: Counter = Counter()
        try:
            while len(done) < len(stops) and mono() < deadline:
                for m in c.consume(num_messages=1000, timeout=0.3):
                    if m.error():
                        if m.error().code() != KafkaError._PARTITION_EOF:
                            errs[str(m.error())] += 1
                        continue
                    t = m.topic()
                    d = parse_value(m.value())
                    views[t].append((m.offset(), d, None if d else m.value()))
                    if m.offset() >= stops[t]:
                        done.add(t)
        finally:
            c.close()
        incomplete = sorted(set(stops) - done)
        return views, incomplete, errs

    def finish(self) -> dict:
        self.log("stopping writers")
        first = [n for n, s in self.slots.items() if s.kind != "eos"]
        self.gateway_up()
        self.stop_slots(first)
        for n in first:
            s = self.slots[n]
            if s.kind == "txn" and not s.clean_exit:
                self.fence(s.spec["txid"])
        eos_caught_up = None
        if "eos" in self.slots:
            s = self.slots["eos"]
            if s.proc is None:
                self.spawn(s)
            end_in = self.end_offset(self.eos_in, "read_committed")
            deadline = mono() + self.a.eos_catch_up_s
            off = None
            while mono() < deadline:
                self.supervise()
                off = self.eos_group_offset()
                if off is not None and off >= end_in:
                    break
                time.sleep(0.5)
            eos_caught_up = off is not None and off >= end_in
            self.log(f"eos: group offset {off}, input end {end_in}")
            self.stop_slots(["eos"])
            if not self.slots["eos"].clean_exit:
                self.fence(self.slots["eos"].spec["txid"])
        http_states = self.resolve_http()
        if self.can_kill_gateways() and self.a.final_crash:
            self.final_gateway_crash()  # everything acknowledged must survive a kill -9
        group_offset = self.eos_group_offset() if "eos" in self.slots else None
        self.log("final reads")
        stops = self.sentinels()
        final, incomplete, final_errs = {}, {}, {}
        for name, iso in (
            ("rc1", "read_committed"),
            ("rc2", "read_committed"),
            ("ru", "read_uncommitted"),
        ):
            final[name], incomplete[name], final_errs[name] = self.read_all(iso, stops)
        # let the live consumers reach the sentinels, then stop them
        deadline = mono() + 20
        for c in self.live.values():
            while mono() < deadline:
                last = {}
                for t, o, _, _ in c.records[-2000:]:
                    last[t] = max(last.get(t, -1), o)
                if all(last.get(t, -1) >= stops[t] for t in self.topics):
                    break
                time.sleep(0.2)
            c.halt.set()
        self.probe.halt.set()
        for c in self.live.values():
            c.join(10)
        self.probe.join(10)
        self.stop_gateways()

        data = {
            "topics": self.topics,
            "eos_in": self.eos_in if "eos" in self.slots else None,
            "eos_out": self.eos_out,
            "logs": {n: [read_log(p) for p in s.logs] for n, s in self.slots.items()},
            "kinds": {n: s.kind for n, s in self.slots.items()},
            "http_states": http_states,
            "final": final,
            "live": {k: c.records for k, c in self.live.items()},
            "probes": self.probe.results,
            "eos_group_offset": group_offset,
            "real_kafka": self.a.real_kafka,
            "faults": self.faults,
            # several gateways (or workers) each show a commit when they learn of it
            "atomic_visibility": not (self.a.cluster or self.a.workers),
        }
        with open(self.workdir / "history.json", "w") as f:  # --recheck DIR reads it again
            json.dump(data, f, default=_jsonable)
        counts, examples, stats = check(data)
        ok = all(v == 0 for v in counts.values())
        problems = list(self.problems)
        for name, inc in incomplete.items():
            if inc:
                problems.append(f"final {name} read did not reach the sentinel of {inc}")
        for k, c in self.live.items():
            for err, n in c.errors.items():
                if "range" in err.lower() or "reset" in err.lower():
                    problems.append(f"live {k} consumer: {err} (x{n})")
        if eos_caught_up is False:
            problems.append("the EOS worker did not catch up with its input")
        stats.update(
            {
                "seed": self.a.seed,
                "duration_s": round(mono() - self.t0, 1),
                "gateway_kills": self.gateway_kills,
                "writer_kills": sum(s.kills for s in self.slots.values()),
                "writer_self_exits": sum(s.deaths for s in self.slots.values()),
                "incarnations": {n: s.incarnation for n, s in self.slots.items()},
                "live_consumer_errors": {k: dict(c.errors) for k, c in self.live.items()},
                "final_consumer_errors": {k: dict(v) for k, v in final_errs.items()},
                "lso_probes": len(self.probe.results),
                "lso_probe_errors": self.probe.errors,
                **self.cluster_stats(),
            }
        )
        summary = {
            "ok": ok and not problems,
            "counts": counts,
            "stats": stats,
            "problems": problems,
            "notes": self.notes[:50],
            "examples": examples,
            "workdir": str(self.workdir),
        }
        return summary


# =========================================================================== the checker


def _jsonable(o):
    if isinstance(o, bytes):
        return o.decode("latin-1")
    raise TypeError(type(o))


def load_history(path: Path) -> dict:
    """history.json back into check()'s input (tuples and dicts as check() wants them)."""
    data = json.loads(path.read_text())
    data["final"] = {
        v: {t: [(o, d, raw) for o, d, raw in recs] for t, recs in view.items()}
        for v, view in data["final"].items()
    }
    data["live"] = {k: [tuple(r) for r in recs] for k, recs in data["live"].items()}
    return data


def _txn_model(data: dict):
    """From the writers' logs: every transaction with its records, outcome and times."""
    txns: dict[str, dict] = {}
    acked: dict[tuple[str, str], int] = {}
    for slot, incs in data["logs"].items():
        kind = data["kinds"][slot]
        for evs in incs:
            for e in evs:
                ev = e["ev"]
                if kind in ("txn", "http"):
                    x = e.get("x")
                    if ev == "begin":
                        txns[x] = {
                            "x": x,
                            "kind": "kafka" if kind == "txn" else "http",
                            "recs": [(r[0], r[1]) for r in e["recs"]],
                            "wp": e.get("wp"),
                            "intent": e["intent"],
                            "t_begin": e["t"],
                            "t_commit": None,
                            "t_end": None,
                            "outcome": "open",
                        }
                    elif x in txns:
                        tx = txns[x]
                        if ev == "committing":
                            tx["t_commit"], tx["outcome"] = e["t"], "committing"
                        elif ev == "committed":
                            tx["outcome"], tx["t_end"] = "committed", e["t"]
                        elif ev == "commit_error":
                            tx["outcome"], tx["t_end"] = "commit_error", e.get("t")
                        elif ev in ("aborted", "abort_error") and tx["t_commit"] is None:
                            tx["outcome"], tx["t_end"] = ev, e.get("t")
                        elif ev in ("produce_error", "begin_error", "publish_error"):
                            tx["outcome"] = ev
                        elif ev == "stall":
                            tx["stalled"] = True
                elif kind == "plain" and ev == "ack":
                    acked[(e["tp"], e["r"])] = e["o"]
    for x, tx in txns.items():
        # status: committed (acknowledged / TMS says committed), unknown (commit asked, no
        # answer), never (commit never asked, or TMS says aborted/invalid)
        if tx["kind"] == "kafka":
            if tx["outcome"] == "committed":
                tx["status"] = "committed"
            elif tx["t_commit"] is not None:
                tx["status"] = "unknown"
            else:
                tx["status"] = "never"
        else:
            st = tx["tms_state"] = data["http_states"].get(x)
            if tx["outcome"] == "committed" or st == "committed":
                tx["status"] = "committed"
                if tx["t_commit"] is None:
                    tx["status_note"] = "committed without a commit request"
            elif st in ("aborted", "invalid"):
                tx["status"] = "never"
            elif tx["t_commit"] is not None:
                tx["status"] = "unknown"
            else:
                tx["status"] = "never"
    return txns, acked


def check(data: dict):
    """-> (counts, examples, stats) from the logs and the consumers' views."""
    counts = dict.fromkeys(COUNT_KEYS, 0)
    examples: dict[str, list] = defaultdict(list)
    real_kafka = data.get("real_kafka", False)

    def bad(check_: str, n: int = 1, **ex) -> None:
        counts[check_] += n
        if len(examples[check_]) < EXAMPLES_PER_CHECK:
            examples[check_].append(ex)

    txns, acked = _txn_model(data)
    rec_txn = {rid: tx for tx in txns.values() for _, rid in tx["recs"]}
    topics = data["topics"]
    final = data["final"]

    # rid -> offsets per final view and topic
    where: dict[str, dict[tuple[str, str], list[int]]] = {}
    for vname, view in final.items():
        w: dict[tuple[str, str], list[int]] = defaultdict(list)
        for t, recs in view.items():
            for off, d, _ in recs:
                if d is not None:
                    w[(t, d["r"])].append(off)
        where[vname] = w

    # ---- duplicates (every view), offsets going backwards
    for vname, view in final.items():
        for t, recs in view.items():
            c = Counter(d["r"] for _, d, _ in recs if d is not None)
            for rid, k in c.items():
                if k > 1:
                    kind = "eos_duplicate" if t == data.get("eos_out") else "duplicate"
                    if kind == "eos_duplicate":
                        continue  # counted by source offset below
                    bad(
                        kind,
                        k - 1,
                        view=vname,
                        topic=t,
                        rid=rid,
                        times=k,
                        offsets=where[vname][(t, rid)],
                    )
            offs = [o for o, _, _ in recs]
            if any(b <= a for a, b in itertools.pairwise(offs)):
                bad("order_mismatch", view=vname, topic=t, what="offsets not increasing")

    # ---- transactions against the final views
    stats = Counter()
    rc_views = [v for v in final if v.startswith("rc")]
    for tx in txns.values():
        kind, status, n = tx["kind"], tx["status"], len(tx["recs"])
        stats[f"{kind}_txn_{status}"] += 1
        if tx.get("stalled"):
            stats[f"kafka_txn_stalled_past_timeout_then_{status}"] += 1
        if kind == "kafka" and tx["intent"] == "abort" and status == "never":
            stats["kafka_txn_aborted_on_purpose"] += 1
        views = list(rc_views)
        if "ru" in final and status != "never":
            views.append("ru")  # a committed transaction is in the read_uncommitted view too
        if status == "never" and kind == "kafka" and not real_kafka and "ru" in final:
            views.append("ru")  # open/aborted Kafka transactions are never in tmsgate's log
        if kind == "http" and tx["outcome"] == "committed" and tx["tms_state"] != "committed":
            bad(
                "acknowledged_lost",
                txn=tx["x"],
                kind=kind,
                wp=tx["wp"],
                what=f"commit answered 'committed', the state is now {tx['tms_state']!r}",
            )
        seen_any = {}
        for v in views:
            vis = sum(1 for t, rid in tx["recs"] if where[v].get((t, rid)))
            seen_any[v] = vis
            if status == "never":
                if vis:
                    bad(
                        "aborted_read",
                        vis,
                        view=v,
                        txn=tx["x"],
                        kind=kind,
                        outcome=tx["outcome"],
                        recs=tx["recs"],
                        visible=vis,
                    )
            elif status == "committed":
                if vis == 0:
                    bad(
                        "acknowledged_lost",
                        view=v,
                        txn=tx["x"],
                        kind=kind,
                        recs=tx["recs"],
                        note=tx.get("status_note"),
                    )
                elif vis < n:
                    bad(
                        "torn",
                        view=v,
                        txn=tx["x"],
                        kind=kind,
                        visible=vis,
                        of=n,
                        missing=[r for r in tx["recs"] if not where[v].get(r)],
                    )
            else:  # unknown: all or nothing
                if 0 < vis < n:
                    bad(
                        "torn",
                        view=v,
                        txn=tx["x"],
                        kind=kind,
                        visible=vis,
                        of=n,
                        outcome=tx["outcome"],
                        missing=[r for r in tx["recs"] if not where[v].get(r)],
                    )
        if status == "unknown" and rc_views:
            res = "visible" if seen_any[rc_views[0]] else "invisible"
            stats[f"{kind}_unknown_resolved_{res}"] += 1

    # ---- acknowledged plain records
    stats["plain_acked"] = len(acked)
    for (t, rid), off in acked.items():
        views = [v for v in final if t in final[v]]
        missing = [v for v in views if not where[v].get((t, rid))]
        if missing:
            bad("acknowledged_lost", topic=t, rid=rid, acked_offset=off, missing_in=missing)
        else:
            for v in views:
                if off not in where[v][(t, rid)]:
                    bad(
                        "order_mismatch",
                        topic=t,
                        rid=rid,
                        view=v,
                        what="acked offset differs",
                        acked_offset=off,
                        offsets=where[v][(t, rid)],
                    )
                    break

    # ---- the two read_committed consumers agree; per-writer order
    for t in topics + ([data["eos_in"], data["eos_out"]] if data.get("eos_in") else []):
        seqs = {
            v: [(o, d["r"] if d else raw) for o, d, raw in final[v].get(t, [])] for v in rc_views
        }
        if len(rc_views) == 2:
            a, b = (seqs[v] for v in rc_views)
            if a != b:
                i = next(
                    (i for i, (p, q) in enumerate(zip(a, b, strict=False)) if p != q),
                    min(len(a), len(b)),
                )
                bad(
                    "order_mismatch",
                    topic=t,
                    what="rc1 != rc2",
                    at=i,
                    rc1=a[i : i + 3],
                    rc2=b[i : i + 3],
                    len_rc1=len(a),
                    len_rc2=len(b),
                )
        for v in final:
            last: dict[str, tuple[int, int]] = {}
            for off, d, _ in final[v].get(t, []):
                if d is None or d["r"].startswith(("sentinel:", "eos:")):
                    continue
                rid = d["r"]
                tx = rec_txn.get(rid)
                if tx is not None and tx["kind"] == "http":
                    continue  # HTTP publishes and Kafka produces of one txn race
                w, _, num = rid.partition(":")
                if tx is not None:
                    seq_, _, idx = num.partition("/")
                    key = (int(seq_), int(idx))
                else:
                    key = (int(num), 0)
                if w in last and key < last[w][1]:
                    bad(
                        "order_mismatch",
                        view=v,
                        topic=t,
                        what="writer order",
                        rid=rid,
                        offset=off,
                        after_offset=last[w][0],
                    )
                last[w] = (off, key if w not in last or key > last[w][1] else last[w][1])

    # ---- live consumers: nothing uncommitted or aborted, and a prefix of the final view
    live = data.get("live", {})
    for lname, recs in live.items():
        ref = "rc1" if lname == "rc" else "ru"
        per_topic: dict[str, list] = defaultdict(list)
        for t, off, rid, ts in recs:
            per_topic[t].append((off, rid))
            tx = rec_txn.get(rid)
            if tx is None:
                continue
            check_txn_rule = lname == "rc" or (tx["kind"] == "kafka" and not real_kafka)
            if not check_txn_rule:
                continue
            if tx["status"] == "never":
                bad(
                    "aborted_read",
                    view=f"live-{lname}",
                    txn=tx["x"],
                    kind=tx["kind"],
                    rid=rid,
                    topic=t,
                    offset=off,
                    outcome=tx["outcome"],
                )
            elif tx["t_commit"] is None or ts < tx["t_commit"]:
                bad(
                    "uncommitted_read",
                    view=f"live-{lname}",
                    txn=tx["x"],
                    kind=tx["kind"],
                    rid=rid,
                    topic=t,
                    offset=off,
                    seen_before_commit_s=None
                    if tx["t_commit"] is None
                    else round(tx["t_commit"] - ts, 4),
                )
        if ref not in final:
            continue
        for t, seq in per_topic.items():
            c = Counter(seq)
            for item, k in c.items():
                if k > 1:
                    bad(
                        "duplicate",
                        k - 1,
                        view=f"live-{lname}",
                        topic=t,
                        offset=item[0],
                        rid=item[1],
                    )
            fin = [(o, d["r"] if d else f"?{raw!r}") for o, d, raw in final[ref].get(t, [])]
            if lname == "ru":
                # rolled-back / aborted TMS header records may come and go for read_uncommitted
                def keep(item):
                    tx = rec_txn.get(item[1])
                    return tx is None or tx["kind"] != "http"

                seq = [i for i in seq if keep(i)]
                fin = [i for i in fin if keep(i)]
            if seq != fin[: len(seq)]:
                i = next(
                    (i for i, (p, q) in enumerate(zip(seq, fin, strict=False)) if p != q),
                    min(len(seq), len(fin)),
                )
                bad(
                    "order_mismatch",
                    view=f"live-{lname}",
                    topic=t,
                    what="live view is not a prefix of the final one",
                    at=i,
                    live=seq[i : i + 3],
                    final=fin[i : i + 3],
                )
        stats[f"live_{lname}_records"] = len(recs)

    # ---- live torn: the LSO of the other topics right after one topic showed the txn
    if not real_kafka and "rc1" in final:
        log_view = final.get("ru", final["rc1"])
        txn_at: dict[tuple[str, int], str] = {}  # (topic, offset) -> transaction there
        for t, recs in log_view.items():
            for off, d, _ in recs:
                if d is not None and d.get("x"):
                    txn_at[(t, off)] = d["x"]
        inf = float("inf")
        spans = []  # (begin, end, txn): when each transaction may have been open
        for tx in txns.values():
            end = (
                tx["t_end"]
                if tx["t_end"] is not None and tx["outcome"] in ("committed", "aborted")
                else inf
            )
            spans.append((tx["t_begin"], end, tx))
        spans.sort(key=lambda s: s[0])
        # sweep the probes in time order; `active`: the transactions maybe open at t_q
        active: dict[str, dict] = {}
        ends: list[tuple[float, str]] = []
        nxt = 0
        for pr in sorted(data.get("probes", []), key=lambda p: p["t_q"]):
            t_q = pr["t_q"]
            while nxt < len(spans) and spans[nxt][0] <= t_q:
                b, e, other = spans[nxt]
                active[other["x"]] = other
                heapq.heappush(ends, (e, other["x"]))
                nxt += 1
            while ends and ends[0][0] < t_q:
                active.pop(heapq.heappop(ends)[1], None)
            tx = txns.get(pr["x"])
            if tx is None or tx["status"] == "never":
                continue
            for t, lso in pr["lso"].items():
                offs = [
                    o
                    for (tp, rid) in tx["recs"]
                    if tp == t
                    for o in where["rc1"].get((tp, rid), [])
                ]
                if not offs or max(offs) < lso:
                    continue
                # The LSO stops at the first record of a transaction in progress: excused if
                # the record at the LSO belongs to one that may have been open then (a TMS
                # header transaction, or a Kafka commit between its sealed row and commit).
                # Rolled-back TMS records stay in the log, so that record is in the view.
                holder = txn_at.get((t, lso))
                held = holder is not None and holder != tx["x"] and holder in active
                if held:
                    stats["lso_probe_held_back"] += 1
                    age = round(t_q - txns[holder]["t_begin"], 1)
                    stats["lso_held_back_longest_s"] = max(
                        stats.get("lso_held_back_longest_s", 0), age
                    )
                    continue
                ex = {
                    "view": "live-rc+lso",
                    "txn": tx["x"],
                    "kind": tx["kind"],
                    "seen_in": pr["seen_tp"],
                    "topic": t,
                    "lso": lso,
                    "offsets": offs,
                    "lso_asked_after_s": round(t_q - pr["t_seen"], 4),
                }
                if data.get("atomic_visibility", True):
                    bad("torn", **ex)
                else:
                    # --cluster: each gateway shows a commit when its view of the manager
                    # learns of it (a notice, or the next snapshot): not at one moment
                    stats["lso_probe_behind_on_another_gateway"] += 1
                    lag = examples["visibility_lag_across_gateways"]
                    if len(lag) < EXAMPLES_PER_CHECK:
                        lag.append(ex)

    # ---- exactly-once pipeline
    if data.get("eos_in"):
        gofs = data.get("eos_group_offset")
        ins = {
            o: d["r"]
            for o, d, _ in final.get("rc1", {}).get(data["eos_in"], [])
            if d is not None and not d["r"].startswith("sentinel:")
        }
        stats["eos_inputs"] = len(ins)
        for v in final:
            if v == "ru" and real_kafka:
                continue
            outs = [
                d for _, d, _ in final[v].get(data["eos_out"], []) if d is not None and "s" in d
            ]
            src = Counter(d["s"] for d in outs)
            for s, k in src.items():
                if k > 1:
                    bad("eos_duplicate", k - 1, view=v, input_offset=s, times=k)
            if v == "rc1":
                stats["eos_outputs"] = len(outs)
                srcmap = {d["s"]: d["src"] for d in outs}
                for o, rid in ins.items():
                    if gofs is not None and o < gofs and srcmap.get(o) != rid:
                        bad("eos_lost", view=v, input_offset=o, input=rid, output=srcmap.get(o))
                stats["eos_group_offset"] = gofs
    from txn_history_cluster import check_write_pointers

    check_write_pointers(data, bad, stats)  # wp_not_increasing
    stats["kafka_txns"] = sum(1 for t in txns.values() if t["kind"] == "kafka")
    stats["http_txns"] = sum(1 for t in txns.values() if t["kind"] == "http")
    stats["records_final_rc1"] = sum(len(v) for v in final.get("rc1", {}).values())
    stats["records_final_ru"] = sum(len(v) for v in final.get("ru", {}).values())
    return counts, dict(examples), dict(sorted(stats.items()))


# =========================================================================== CLI


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of writing")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--bootstrap", help="an already running broker (no gateway kills)")
    ap.add_argument("--http", help="its TMS HTTP API, e.g. http://127.0.0.1:8080")
    ap.add_argument("--no-http", action="store_true", help="no TMS header transactions")
    ap.add_argument(
        "--real-kafka",
        action="store_true",
        help="Apache Kafka semantics: read_uncommitted sees aborted records, "
        "commit markers are not atomic across partitions",
    )
    ap.add_argument("--topics", type=int, default=4)
    ap.add_argument("--txn-writers", type=int, default=3)
    ap.add_argument("--plain-writers", type=int, default=1)
    ap.add_argument("--http-writers", type=int, default=2)
    ap.add_argument("--no-eos", dest="eos", action="store_false")
    ap.add_argument(
        "--pace",
        type=float,
        default=0.03,
        help="max random pause between a writer's transactions (s)",
    )
    ap.add_argument(
        "--writer-kill-every",
        type=float,
        default=6.0,
        help="mean seconds between writer SIGKILLs (0: none)",
    )
    ap.add_argument(
        "--gateway-kill-every",
        type=float,
        default=25.0,
        help="mean seconds between gateway SIGKILLs (the first by 35%% of the run)",
    )
    ap.add_argument("--no-gateway-kills", action="store_true")
    ap.add_argument(
        "--no-final-crash",
        dest="final_crash",
        action="store_false",
        help="skip the kill -9 before the final reads",
    )
    ap.add_argument("--eos-catch-up-s", type=float, default=60.0)
    ap.add_argument("--gateway-arg", action="append", help="extra `tmsgate serve` argument")
    ap.add_argument(
        "--cluster",
        type=int,
        default=0,
        metavar="N",
        help="N `tmsgate serve --cluster` gateways on one hbase:// store, the controller "
        "and other gateways killed in turn (txn_history_cluster.py)",
    )
    ap.add_argument(
        "--store-url",
        help="with --cluster: the shared store (default: the HBase stand-in, started here)",
    )
    ap.add_argument("--lease-ms", type=int, default=2000, help="with --cluster: --lease-ms")
    ap.add_argument(
        "--workers",
        type=int,
        default=0,
        metavar="N",
        help="one `tmsgate serve --workers N` on a LevelDB store, the controller worker, "
        "another worker and the parent killed in turn (txn_history_workers.py)",
    )
    ap.add_argument("--workdir", help="keep store, gateway log and writer logs here")
    ap.add_argument("--keep", action="store_true", help="keep the work dir even when all is 0")
    ap.add_argument("--json-out", help="also write the summary here")
    a = ap.parse_args(argv)
    if a.seed is None:
        a.seed = random.randrange(1 << 31)
    if a.bootstrap and not a.http:
        a.no_http = True
    if a.cluster and a.bootstrap:
        ap.error("--cluster starts its own gateways: no --bootstrap")
    if a.workers and (a.bootstrap or a.cluster or a.no_http):
        ap.error("--workers starts its own gateway with HTTP: no --bootstrap, --cluster, --no-http")
    return a


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["recheck"]:  # recheck <workdir>: run the checks on a saved history
        counts, examples, stats = check(load_history(Path(argv[1]) / "history.json"))
        print(json.dumps({"counts": counts, "stats": stats, "examples": examples}, indent=1))
        return 0 if all(v == 0 for v in counts.values()) else 1
    if argv[:1] == ["worker"]:
        import faulthandler

        faulthandler.register(signal.SIGUSR1)  # kill -USR1 <pid>: stacks to the .stderr file
        rc = WORKERS[argv[1]](json.loads(argv[2]))
        sys.stdout.flush()
        # at once: a daemon thread blocked reading stdin (orphan_watch) can make the
        # interpreter's shutdown abort (SIGABRT) instead of exiting with rc
        os._exit(rc)
    a = parse_args(argv)

    def on_term(*_):
        raise KeyboardInterrupt("SIGTERM")

    signal.signal(signal.SIGTERM, on_term)
    if a.cluster:
        from txn_history_cluster import ClusterHistory

        h: History = ClusterHistory(a)
    elif a.workers:
        from txn_history_workers import WorkersHistory

        h = WorkersHistory(a)
    else:
        h = History(a)
    summary = None
    try:
        summary = h.run()
    finally:
        h.cleanup()
    text = json.dumps(summary, indent=1, default=str)
    if a.json_out:
        Path(a.json_out).write_text(text)
    short = {k: summary[k] for k in ("ok", "counts", "stats", "problems", "notes")}
    print(json.dumps(short, indent=1, default=str))
    if not summary["ok"]:
        print(json.dumps({"examples": summary["examples"]}, indent=1, default=str))
        print(f"work dir kept: {h.workdir} (seed {a.seed})", file=sys.stderr)
    elif not (a.keep or a.workdir):
        shutil.rmtree(h.workdir, ignore_errors=True)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
