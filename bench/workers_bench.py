"""Every core: `tmsgate serve --workers N` (issue 38) measured with client processes.

    .venv/bin/python bench/workers_bench.py [--workers 1,2] [--runs 3] [--quick]
                                            [--phases produce,consume,txn,latency]
                                            [--bootstrap host:port [--broker-pid PID]]
                                            [--any-spread]

Without --bootstrap it starts `tmsgate serve --workers N` itself for each N of --workers
(default 2; `1,2` measures one, then the other, each on a fresh temporary LevelDB store
and free ports), waits until Metadata names N brokers, and stops it at the end. With
--bootstrap the same run measures any Kafka broker (the local Apache Kafka, a gateway
started by hand); --broker-pid then gives the process whose CPU is counted.

Broker CPU: utime + stime (and cutime + cstime: a worker that died and was waited for)
from /proc/PID/stat of the broker's process and of every process below it
(/proc/PID/task/*/children), read before and after each timed phase; `cores` is CPU
seconds / wall seconds of that window, `cores_parent` the first process's share (with
--workers N > 1 the store's owner: rows and fsyncs) and `cores_children` the workers'.
`client_cores` is the same for the bench's own client processes, which share the machine.

Each phase gets a fresh topic of 4 partitions, RF 1 (confluent-kafka AdminClient), timed
only once every partition has a leader in Metadata. With several brokers the leaders are
also left to settle one lease tick (rendezvous hand-overs right after a create) and, unless
--any-spread, a topic whose 4 partitions are not spread evenly over the brokers (2 + 2 of
2 workers; rendezvous hashing gives that only 3 times in 8) is deleted and another made,
so the figure is of every worker, not of how one topic's names hashed.
Measured, each the median of --runs runs, 1 KiB values:

  produce   msgs/s: 4 producer PROCESSES (confluent-kafka, acks=all, linger.ms=5,
            batch.size=1000000, keys spread over the partitions), 100k records each
            (quick: 20k), from the first send to the last delivery report of all four;
            every delivery report is checked.
  consume   msgs/s: 4 consumer processes read the produce phase's topic back, each
            assigned one partition from OFFSET_BEGINNING (fetch.queue.backoff.ms=10), up
            to the high watermark read before the start; count and bytes checked.
  txn       committed transactions/s summed over 4 transactional producer processes, each
            looping begin / 10 records (partition = i % 4, so every transaction spans all
            four partitions and, with 2 workers, both) / commit for 10 s (quick 3 s);
            commit_transaction() p50/p99. A read_committed consumer then checks the topic
            holds exactly the committed records (`verified`, outside the timing).
  latency   end-to-end p50/p99 at 2,000 msgs/s for 10 s (quick 3 s): kafka_clients_bench's
            latency run (producer linger.ms=0 acks=all sending perf_counter_ns stamps to
            partition 0; consumer fetch.wait.max.ms=100 fetch.min.bytes=1 assigned at its
            end). Its CPU window spans the whole run: warm-up, 2.3 s idle, the timed part.

Topics are not deleted after a phase (their clean-up would run inside the next phase's
CPU window); each --workers count starts on a fresh store. A quick run of `--workers 1,2`
takes about a minute; a full one about 3 x 1 min per count on 2 cores.

Progress goes to stderr, one JSON summary to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import queue
import signal
import statistics
import subprocess
import tempfile
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

# Helpers of the clients benchmark (this folder): logging, the latency run, the gateway's
# port and store size.
from kafka_clients_bench import (
    VENV_BIN,
    Progress,
    ck_common,
    dir_bytes,
    free_port,
    latency_run,
    log,
    percentile,
    setup_logging,
    wait_for_port,
)

VALUE_BYTES = 1024
PARTITIONS = 4
CLIENTS = 4  # processes per throughput phase: one per partition
TXN_RECORDS = 10
TXN_TIMEOUT_MS = 120_000
OP_TIMEOUT_S = 60.0  # init/commit call timeout
READY_S = 120.0  # a client process not ready this long after its start is a failure
DONE_S = 900.0  # ... nor done this long after the start (each also has its own stall check)
LEASE_TICK_S = 2.5  # a fifth of the default --lease-ms, and a margin
SPREAD_TRIES = 12
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class Plan:
    records_per_producer: int
    txn_seconds: float
    latency_rate: int
    latency_seconds: float


FULL = Plan(100_000, 10.0, 2_000, 10.0)
QUICK = Plan(20_000, 3.0, 2_000, 3.0)


# --------------------------------------------------------------------------- CPU


def _children(pid: int) -> list[int]:
    out: list[int] = []
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                out += [int(c) for c in (task / "children").read_text().split()]
    return out


def _stat_cpu_seconds(pid: int) -> float | None:
    """utime + stime + cutime + cstime (stat(5) fields 14-17), or None if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = raw[raw.rindex(")") + 2 :].split()  # after "pid (comm) "
    return sum(int(f) for f in fields[11:15]) / CLK_TCK


def tree_cpu(root: int) -> dict[int, float]:
    """CPU seconds of ``root`` and every process below it, by pid."""
    out: dict[int, float] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        cpu = _stat_cpu_seconds(pid)
        if cpu is not None and pid not in out:
            out[pid] = cpu
            todo += _children(pid)
    return out


class CpuWindow:
    """Cores used by a process tree between start() and stop()."""

    def __init__(self, root: int | None) -> None:
        self.root = root
        self.before: dict[int, float] = {}
        self.started = 0.0

    def start(self) -> None:
        self.before = tree_cpu(self.root) if self.root else {}
        self.started = time.monotonic()

    def stop(self) -> dict[str, float | None]:
        wall = time.monotonic() - self.started
        if not self.root:
            return {"cores": None, "cores_parent": None, "cores_children": None}
        after = tree_cpu(self.root)
        used = {pid: cpu - self.before.get(pid, 0.0) for pid, cpu in after.items()}
        parent = used.get(self.root, 0.0)
        total = sum(used.values())
        return {
            "cores": round(total / wall, 3),
            "cores_parent": round(parent / wall, 3),
            "cores_children": round((total - parent) / wall, 3),
            "cpu_s": round(total, 2),
            "window_s": round(wall, 2),
        }


# --------------------------------------------------------------------------- gateway


@dataclass
class Gateway:
    bootstrap: str
    pid: int | None
    brokers: int


def metadata_brokers(bootstrap: str) -> int:
    return len(AdminClient(ck_common(bootstrap)).list_topics(timeout=10).brokers)


@contextlib.contextmanager
def workers_gateway(count: int, report: dict[str, object]) -> Iterator[Gateway]:
    """`tmsgate serve --workers count` on a temp LevelDB dir and free ports."""
    with tempfile.TemporaryDirectory(prefix=f"tmsgate-workers{count}-bench-") as workdir:
        port, http_port = free_port(), free_port()
        log_path = Path(workdir) / "gateway.log"
        cmd = [
            str(VENV_BIN / "tmsgate"),
            "serve",
            "--workers",
            str(count),
            "--store",
            f"leveldb://{workdir}/store",
            "--kafka-listen",
            f"127.0.0.1:{port}",
            "--http-listen",  # --workers needs it: the workers call each other on it
            f"127.0.0.1:{http_port}",
            "--log-level",
            "WARNING",
        ]
        with open(log_path, "wb") as log_file:
            proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT)
        try:
            wait_for_port(proc, ("127.0.0.1", port))
            bootstrap = f"127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while (brokers := metadata_brokers(bootstrap)) < count:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"--workers {count}: Metadata names {brokers} brokers")
                time.sleep(0.2)
            log(f"gateway: --workers {count}, pid {proc.pid}, {bootstrap}, {brokers} brokers")
            report.update(pid=proc.pid, store_dir=f"{workdir}/store")
            yield Gateway(bootstrap, proc.pid, brokers)
        finally:
            report["store_bytes"] = dir_bytes(Path(workdir) / "store")
            stop_gateway(proc)
            report["exit_code"] = proc.returncode
            lines = log_path.read_text(errors="replace").splitlines()
            report["log_lines"] = len(lines)
            report["worker_restarts"] = sum("exited with" in line for line in lines)
            report["log_tail"] = lines[-15:]
            for line in lines[-15:]:
                log(f"  | {line}")


def stop_gateway(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)  # the parent stops its workers (up to 45 s each)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        log("gateway: did not stop within 60 s of SIGTERM, killing it")
        proc.kill()  # its workers die with it (PR_SET_PDEATHSIG)
        proc.wait(10)


# --------------------------------------------------------------------------- topics


def _leaders(admin: AdminClient, topic: str) -> dict[int, int]:
    md = admin.list_topics(topic, timeout=10).topics.get(topic)
    if md is None or md.error is not None:
        return {}
    return {p: md.partitions[p].leader for p in md.partitions}


def _wait_leaders(admin: AdminClient, topic: str, settle: bool) -> dict[int, int]:
    """The leaders once every partition has one (and, with ``settle``, they stayed the
    same over a lease tick)."""
    deadline = time.monotonic() + 90
    last: dict[int, int] = {}
    while time.monotonic() < deadline:
        leaders = _leaders(admin, topic)
        if len(leaders) == PARTITIONS and min(leaders.values()) >= 0:
            if not settle or leaders == last:
                return leaders
            last = leaders
            time.sleep(LEASE_TICK_S)
        else:
            time.sleep(0.05)
    raise RuntimeError(f"{topic}: no settled leader for every partition within 90 s: {last}")


def create_topic(gw: Gateway, prefix: str, spread: bool) -> tuple[str, dict[int, int]]:
    """A fresh topic of PARTITIONS partitions with a leader each -> (name, leaders).
    ``spread``: as many partitions on every broker as can be (max - min <= 1)."""
    admin = AdminClient(ck_common(gw.bootstrap))
    several = gw.brokers > 1
    for _ in range(SPREAD_TRIES):
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        futures = admin.create_topics([NewTopic(name, PARTITIONS, 1)], operation_timeout=30)
        futures[name].result(timeout=60)  # raises KafkaException on failure
        leaders = _wait_leaders(admin, name, settle=several)
        per_broker = Counter(leaders.values())
        counts = [per_broker.get(b, 0) for b in admin.list_topics(timeout=10).brokers]
        if not (spread and several) or max(counts) - min(counts) <= 1:
            return name, leaders
        log(f"  {name}: partitions per broker {counts}, not even: another topic")
        admin.delete_topics([name], operation_timeout=30)[name].result(timeout=60)
    raise RuntimeError(f"no topic of {PARTITIONS} partitions spread evenly in {SPREAD_TRIES}")


# --------------------------------------------------------------------------- clients


@dataclass
class Sync:
    """A client process's side of the start line (spawn-context objects)."""

    index: int
    events: mp.Queue  # ("ready" | "done" | "error", index, payload)
    go: object  # mp.Event
    start_ns: object  # mp.Value("q"): time.monotonic_ns() of the start, set before `go`

    def ready(self) -> int:
        """Say ready, wait for the start; -> the start's monotonic_ns (system-wide clock)."""
        self.events.put(("ready", self.index, None))
        if not self.go.wait(READY_S):  # type: ignore[attr-defined]
            raise RuntimeError("no start signal")
        return int(self.start_ns.value)  # type: ignore[attr-defined]


def _client_entry(target: Callable[..., dict[str, object]], sync: Sync, args: tuple) -> None:
    warnings = setup_logging()
    try:
        result = target(sync, *args)
        result["warnings"] = sum(warnings.counts.values())
        sync.events.put(("done", sync.index, result))
    except BaseException as exc:
        sync.events.put(("error", sync.index, f"{exc!r}\n{traceback.format_exc()[-1500:]}"))


def _collect(
    events: mp.Queue, procs: list, kind: str, seconds: float, what: str
) -> dict[int, object]:
    got: dict[int, object] = {}
    deadline = time.monotonic() + seconds
    while len(got) < len(procs):
        try:
            tag, index, payload = events.get(timeout=1.0)
        except queue.Empty:
            tag, index, payload = "", -1, None
        if not tag:
            dead = [i for i, p in enumerate(procs) if i not in got and p.exitcode is not None]
            if dead:
                raise RuntimeError(f"{what}: client {dead[0]} exited without a result")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what}: {len(got)}/{len(procs)} {kind} after {seconds:.0f} s")
            continue
        if tag == "error":
            raise RuntimeError(f"{what}: client {index} failed: {payload}")
        if tag == kind:
            got[index] = payload
    return got


def run_clients(
    what: str,
    target: Callable[..., dict[str, object]],
    per_client: Sequence[tuple],
    broker: CpuWindow,
) -> tuple[list[dict[str, object]], int, dict[str, float | None]]:
    """One spawned process per entry of ``per_client`` running ``target(sync, *args)``;
    all start together once all are ready. -> (results, start ns, broker cores)."""
    ctx = mp.get_context("spawn")  # no librdkafka threads forked from this process
    events, go, start_ns = ctx.Queue(), ctx.Event(), ctx.Value("q", 0)
    procs = [
        ctx.Process(
            target=_client_entry,
            args=(target, Sync(i, events, go, start_ns), args),
            name=f"{what}-{i}",
            daemon=True,
        )
        for i, args in enumerate(per_client)
    ]
    for p in procs:
        p.start()
    try:
        _collect(events, procs, "ready", READY_S, what)
        broker.start()
        start_ns.value = time.monotonic_ns()
        go.set()
        done = _collect(events, procs, "done", DONE_S, what)
        cores = broker.stop()
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
    return [done[i] for i in range(len(procs))], int(start_ns.value), cores  # type: ignore[misc]


def _client_cores(results: list[dict[str, object]], wall_s: float) -> float:
    return round(sum(float(r["cpu_s"]) for r in results) / wall_s, 3)


def produce_client(sync: Sync, bootstrap: str, topic: str, n: int) -> dict[str, object]:
    value = os.urandom(VALUE_BYTES)
    p = confluent_kafka.Producer(
        {
            **ck_common(bootstrap),
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "compression.type": "none",
        }
    )
    delivered, last_ns, errors = 0, 0, []

    def on_delivery(err: confluent_kafka.KafkaError | None, _msg: object) -> None:
        nonlocal delivered, last_ns
        if err is None:
            delivered += 1
            last_ns = time.monotonic_ns()
        elif len(errors) < 10:
            errors.append(str(err))

    p.list_topics(topic, timeout=30)  # metadata outside the timing
    sync.ready()
    cpu0 = time.process_time()
    first_ns = time.monotonic_ns()
    progress = Progress(f"producer {sync.index}")
    for i in range(n):
        key = b"%d-%d" % (sync.index, i)
        while True:
            try:
                p.produce(topic, value, key, on_delivery=on_delivery)
                break
            except BufferError:  # local queue full: serve delivery reports, retry
                p.poll(0.005)
                progress.check(delivered)
        p.poll(0)
    while (left := p.flush(1.0)) > 0:
        progress.check(n - left)
    if errors or delivered != n:
        raise RuntimeError(f"{delivered}/{n} delivered, delivery errors {errors[:3]}")
    return {"first_ns": first_ns, "last_ns": last_ns, "cpu_s": time.process_time() - cpu0}


def consume_client(sync: Sync, bootstrap: str, topic: str) -> dict[str, object]:
    partition = sync.index
    c = confluent_kafka.Consumer(
        {
            **ck_common(bootstrap),
            "group.id": f"bench-workers-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "fetch.queue.backoff.ms": 10,  # see kafka_clients_bench.consume_confluent
        }
    )
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
        expected = high - low
        sync.ready()
        # Assigned only now: librdkafka starts fetching at assign(), and would otherwise
        # fill its queue (64 MB) before the start.
        c.assign([TopicPartition(topic, partition, confluent_kafka.OFFSET_BEGINNING)])
        cpu0 = time.process_time()
        got = nbytes = 0
        progress = Progress(f"consumer {partition}")
        while got < expected:
            for msg in c.consume(num_messages=10_000, timeout=0.5):
                if msg.error():
                    raise RuntimeError(f"partition {partition}: {msg.error()}")
                got += 1
                nbytes += len(msg.value())
            progress.check(got)
        end_ns = time.monotonic_ns()
        if got != expected or nbytes != expected * VALUE_BYTES:
            raise RuntimeError(f"partition {partition}: {got}/{expected} messages, {nbytes} B")
        return {"records": got, "end_ns": end_ns, "cpu_s": time.process_time() - cpu0}
    finally:
        c.close()


def txn_client(sync: Sync, bootstrap: str, topic: str, seconds: float) -> dict[str, object]:
    value = os.urandom(VALUE_BYTES)
    p = confluent_kafka.Producer(
        {
            **ck_common(bootstrap),
            "transactional.id": f"bench-workers-txn-{uuid.uuid4().hex[:10]}",
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "compression.type": "none",
            "transaction.timeout.ms": TXN_TIMEOUT_MS,
        }
    )
    delivered, errors = 0, []

    def on_delivery(err: confluent_kafka.KafkaError | None, _msg: object) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1
        elif len(errors) < 10:
            errors.append(str(err))

    p.list_topics(topic, timeout=30)
    p.init_transactions(OP_TIMEOUT_S)  # outside the timing
    start_ns = sync.ready()
    cpu0 = time.process_time()
    deadline_ns = start_ns + int(seconds * 1e9)
    commit_ns: list[int] = []
    while time.monotonic_ns() < deadline_ns:
        p.begin_transaction()
        for i in range(TXN_RECORDS):
            p.produce(topic, value, partition=i % PARTITIONS, on_delivery=on_delivery)
            p.poll(0)
        t0 = time.monotonic_ns()
        p.commit_transaction(OP_TIMEOUT_S)
        commit_ns.append(time.monotonic_ns() - t0)
    ended_ns = time.monotonic_ns()
    if errors or delivered != len(commit_ns) * TXN_RECORDS:
        raise RuntimeError(f"{delivered} delivered for {len(commit_ns)} commits: {errors[:3]}")
    return {"commit_ns": commit_ns, "ended_ns": ended_ns, "cpu_s": time.process_time() - cpu0}


def count_committed(bootstrap: str, topic: str, expected: int) -> bool:
    """read_committed, every partition from the start: exactly ``expected`` records?"""
    c = confluent_kafka.Consumer(
        {
            **ck_common(bootstrap),
            "group.id": f"bench-verify-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.queue.backoff.ms": 10,
        }
    )
    try:
        c.assign(
            [TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in range(PARTITIONS)]
        )
        got, since, extra_window = 0, time.monotonic(), False
        while True:  # to the expected count, then once more to catch extras
            msgs = c.consume(num_messages=10_000, timeout=0.5)
            for m in msgs:
                if m.error():
                    raise RuntimeError(f"verify: {m.error()}")
                got += 1
            if msgs:
                since = time.monotonic()
            if got >= expected:
                if extra_window:
                    break
                extra_window = True
            elif time.monotonic() - since > 10:
                break
        if got != expected:
            log(f"  verify {topic}: read {got} committed records, expected {expected}")
        return got == expected
    finally:
        c.close()


# --------------------------------------------------------------------------- phases


def produce_phase(gw: Gateway, plan: Plan, spread: bool) -> tuple[str, dict[str, object]]:
    topic, leaders = create_topic(gw, "bench-workers-produce", spread)
    n = plan.records_per_producer
    args = [(gw.bootstrap, topic, n)] * CLIENTS
    results, _, cores = run_clients("produce", produce_client, args, CpuWindow(gw.pid))
    wall = max(int(r["last_ns"]) for r in results) - min(int(r["first_ns"]) for r in results)
    wall_s = wall / 1e9
    total = n * CLIENTS
    return topic, {
        "records": total,
        "seconds": round(wall_s, 3),
        "msgs_s": round(total / wall_s),
        "mib_s": round(total * VALUE_BYTES / wall_s / (1 << 20), 1),
        **cores,
        "client_cores": _client_cores(results, wall_s),
        "leaders": leaders,
        "client_warnings": sum(int(r["warnings"]) for r in results),
    }


def consume_phase(gw: Gateway, topic: str) -> dict[str, object]:
    args = [(gw.bootstrap, topic)] * CLIENTS
    results, start_ns, cores = run_clients("consume", consume_client, args, CpuWindow(gw.pid))
    wall_s = (max(int(r["end_ns"]) for r in results) - start_ns) / 1e9
    total = sum(int(r["records"]) for r in results)
    return {
        "records": total,
        "seconds": round(wall_s, 3),
        "msgs_s": round(total / wall_s),
        "mib_s": round(total * VALUE_BYTES / wall_s / (1 << 20), 1),
        **cores,
        "client_cores": _client_cores(results, wall_s),
        "client_warnings": sum(int(r["warnings"]) for r in results),
    }


def txn_phase(gw: Gateway, plan: Plan, spread: bool) -> dict[str, object]:
    topic, leaders = create_topic(gw, "bench-workers-txn", spread)
    args = [(gw.bootstrap, topic, plan.txn_seconds)] * CLIENTS
    results, start_ns, cores = run_clients("txn", txn_client, args, CpuWindow(gw.pid))
    wall_s = (max(int(r["ended_ns"]) for r in results) - start_ns) / 1e9
    commit_ms = sorted(x / 1e6 for r in results for x in r["commit_ns"])  # type: ignore[attr-defined]
    commits = len(commit_ms)
    return {
        "producers": CLIENTS,
        "records_per_txn": TXN_RECORDS,
        "seconds": round(wall_s, 3),
        "transactions": commits,
        "tx_s": round(commits / wall_s, 1),
        "records_s": round(commits * TXN_RECORDS / wall_s),
        "commit_p50_ms": round(percentile(commit_ms, 0.50), 3),
        "commit_p99_ms": round(percentile(commit_ms, 0.99), 3),
        **cores,
        "client_cores": _client_cores(results, wall_s),
        "leaders": leaders,
        "verified": count_committed(gw.bootstrap, topic, commits * TXN_RECORDS),
        "client_warnings": sum(int(r["warnings"]) for r in results),
    }


def latency_phase(gw: Gateway, plan: Plan) -> dict[str, object]:
    topic, leaders = create_topic(gw, "bench-workers-latency", spread=False)
    broker = CpuWindow(gw.pid)
    broker.start()
    lat = latency_run(gw.bootstrap, topic, plan.latency_rate, plan.latency_seconds)
    keep = ("samples", "sent_rate", "p50_ms", "p99_ms", "max_ms", "slow_share", "histogram_ms")
    return {
        "rate_msgs_s": plan.latency_rate,
        **{k: lat[k] for k in keep},
        **broker.stop(),
        "leader": leaders[0],
    }


# --------------------------------------------------------------------------- driver

MEDIANS = {
    "produce": ("msgs_s", "mib_s", "cores", "cores_parent", "cores_children", "client_cores"),
    "consume": ("msgs_s", "mib_s", "cores", "cores_parent", "cores_children", "client_cores"),
    "txn": (
        "tx_s",
        "records_s",
        "commit_p50_ms",
        "commit_p99_ms",
        "cores",
        "cores_parent",
        "cores_children",
        "client_cores",
    ),
    "latency": ("p50_ms", "p99_ms", "cores", "cores_parent", "cores_children"),
}


def _cores_text(r: dict[str, object]) -> str:
    if r.get("cores") is None:
        return "broker CPU not measured"
    return (
        f"broker {r['cores']:.2f} cores (parent {r['cores_parent']:.2f}, "
        f"children {r['cores_children']:.2f})"
    )


def measure(gw: Gateway, args: argparse.Namespace, plan: Plan) -> dict[str, object]:
    runs: dict[str, list[dict[str, object]]] = {phase: [] for phase in args.phases}
    spread = not args.any_spread
    for run in range(1, args.runs + 1):
        label = f"[{gw.brokers} broker(s), run {run}/{args.runs}]"
        if "produce" in args.phases:
            topic, r = produce_phase(gw, plan, spread)
            runs["produce"].append(r)
            log(
                f"{label} produce {r['records']:,} recs in {r['seconds']:.2f} s = "
                f"{r['msgs_s']:,} msgs/s ({r['mib_s']} MiB/s); {_cores_text(r)}; "
                f"clients {r['client_cores']:.2f} cores; leaders {r['leaders']}"
            )
            if "consume" in args.phases:
                r = consume_phase(gw, topic)
                runs["consume"].append(r)
                log(
                    f"{label} consume {r['records']:,} recs in {r['seconds']:.2f} s = "
                    f"{r['msgs_s']:,} msgs/s; {_cores_text(r)}; "
                    f"clients {r['client_cores']:.2f} cores"
                )
        if "txn" in args.phases:
            r = txn_phase(gw, plan, spread)
            runs["txn"].append(r)
            log(
                f"{label} txn     {CLIENTS} x (begin/{TXN_RECORDS} recs/commit): "
                f"{r['tx_s']:,.1f} tx/s, commit p50 {r['commit_p50_ms']:.2f} ms "
                f"p99 {r['commit_p99_ms']:.2f} ms; {_cores_text(r)}; verified {r['verified']}"
            )
        if "latency" in args.phases:
            r = latency_phase(gw, plan)
            runs["latency"].append(r)
            log(
                f"{label} latency {plan.latency_rate:,}/s: p50 {r['p50_ms']:.2f} ms "
                f"p99 {r['p99_ms']:.2f} ms max {r['max_ms']:.2f} ms; {_cores_text(r)}"
            )
    out: dict[str, object] = {"brokers_in_metadata": gw.brokers}
    for phase, rs in runs.items():
        out[phase] = {
            **{
                key: statistics.median(float(r[key]) for r in rs)
                for key in MEDIANS[phase]
                if rs and all(r.get(key) is not None for r in rs)
            },
            "runs": rs,
        }
    if "txn" in runs:
        out["txn"]["all_verified"] = all(r["verified"] for r in runs["txn"])  # type: ignore[index]
    return out


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--bootstrap",
        help="host:port of the broker to measure (default: start tmsgate serve --workers N)",
    )
    ap.add_argument("--broker-pid", type=int, help="pid of the broker at --bootstrap, for its CPU")
    ap.add_argument(
        "--workers",
        default="2",
        help="worker counts to start in turn, comma-separated, each on a fresh store "
        "(default 2; ignored with --bootstrap)",
    )
    ap.add_argument("--runs", type=int, default=None, help="runs per figure (default 3)")
    ap.add_argument("--quick", action="store_true", help="smoke run: small counts, 1 run")
    ap.add_argument(
        "--phases",
        default="produce,consume,txn,latency",
        help="comma-separated: produce, consume (reads produce's topic), txn, latency",
    )
    ap.add_argument(
        "--any-spread",
        action="store_true",
        help="take each topic's partition leaders as they fall (default: a topic whose "
        "partitions are not spread evenly over the brokers is replaced)",
    )
    args = ap.parse_args()
    args.phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    if not args.phases or not set(args.phases) <= set(MEDIANS):
        ap.error("--phases takes produce, consume, txn and latency")
    if "consume" in args.phases and "produce" not in args.phases:
        ap.error("--phases consume reads the produce phase's topic: name produce too")
    try:
        args.workers = [int(n) for n in args.workers.split(",") if n.strip()]
    except ValueError:
        ap.error("--workers takes whole numbers, comma-separated")
    if not args.workers or min(args.workers) < 1:
        ap.error("--workers needs counts >= 1")
    if args.broker_pid and not args.bootstrap:
        ap.error("--broker-pid is for a broker at --bootstrap")
    if args.runs is None:
        args.runs = 1 if args.quick else 3
    if args.runs < 1:
        ap.error("--runs must be >= 1")
    return args


def main() -> None:
    args = parse_args()
    counter = setup_logging()
    plan = QUICK if args.quick else FULL
    started = time.monotonic()
    summary: dict[str, object] = {
        "cpus": os.cpu_count(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "value_bytes": VALUE_BYTES,
        "partitions": PARTITIONS,
        "client_processes": CLIENTS,
        "runs": args.runs,
        "quick": args.quick,
        "plan": {
            "records_per_producer": plan.records_per_producer,
            "txn_seconds": plan.txn_seconds,
            "latency_rate": plan.latency_rate,
            "latency_seconds": plan.latency_seconds,
        },
        "clients": {
            "confluent_kafka": confluent_kafka.version()[0],
            "librdkafka": confluent_kafka.libversion()[0],
        },
        "bootstrap": args.bootstrap,
        "self_started_gateway": not args.bootstrap,
    }
    try:
        if args.bootstrap:
            gw = Gateway(args.bootstrap, args.broker_pid, metadata_brokers(args.bootstrap))
            summary["broker"] = measure(gw, args, plan)
        else:
            by_workers: dict[str, object] = {}
            summary["by_workers"] = by_workers
            for count in args.workers:
                gateway: dict[str, object] = {}
                with workers_gateway(count, gateway) as gw:
                    result = measure(gw, args, plan)
                by_workers[str(count)] = {**result, "gateway": gateway}
    except (RuntimeError, KafkaException) as exc:
        summary["error"] = repr(exc)
        log(f"FAILED: {exc!r}")
    summary["client_warnings"] = {"by_logger": dict(counter.counts), "first": counter.samples}
    summary["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    summary["wall_seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(summary, indent=2))
    if "error" in summary:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
