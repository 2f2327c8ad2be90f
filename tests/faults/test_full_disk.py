"""Full disk (issue, defect 7): a ``tmsgate serve`` process on a small tmpfs, real clients.

The defect: while the disk was full, DeleteTopics failed with KAFKA_STORAGE_ERROR, so an
operator could not free space through Kafka; a restart on the full disk exited with
``cannot open LevelDB ... No space left on device``; every failed produce logged a full
traceback (266 in 10 s).

``test_filling_the_disk_then_deleting_and_restarting_on_it``: confluent-kafka producers
fill the disk until produces fail with KAFKA_STORAGE_ERROR; every acknowledged message
must read back; DeleteTopics through the AdminClient succeeds; the janitor gives the
space back and producing works again. The disk is filled once more and the gateway is
killed with SIGKILL and started again on the full disk: it must start, say in its log
that writes are refused, serve every acknowledged message, refuse produces, delete a
topic, and accept produces again once the janitor has freed the space.

``test_a_disk_filled_by_something_else``: a file written beside the store takes the last
byte, so the gateway's next write fails with ENOSPC (no free-space check beforehand can
see it coming); the reserve is released and the same must hold.

Both need a tmpfs mount (root or CAP_SYS_ADMIN) and are skipped, saying so, without one.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import FaultGateway, free_port, scale

pytestmark = pytest.mark.timeout(600)

DISK_MIB = scale(96, 512)
RESERVE_MIB = 8
VALUE_BYTES = 1000
# Bounds for progress (a healthy gateway takes a second or two), not speed assertions.
PROGRESS_BOUND_S = 60.0
STORAGE_ERROR = 56  # KAFKA_STORAGE_ERROR


def value(topic: str, i: int) -> bytes:
    head = f"{topic}:{i:09d}:".encode()
    return (head * (VALUE_BYTES // len(head) + 1))[:VALUE_BYTES]


# --------------------------------------------------------------------------- the disk


def mount_tmpfs(where: Path, size_mib: int) -> None:
    where.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(where)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot mount a tmpfs to fill ({exc}); needs root or CAP_SYS_ADMIN")
    if done.returncode != 0:
        pytest.skip(
            f"cannot mount a {size_mib} MiB tmpfs to fill (needs root or CAP_SYS_ADMIN): "
            f"{done.stderr.strip() or done.returncode}"
        )


def unmount(where: Path) -> None:
    if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def free_mib(path: Path) -> float:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize / (1 << 20)


@pytest.fixture
def small_disk_gateway(tmp_path: Path) -> Iterator[tuple[FaultGateway, int]]:
    """A gateway whose store is a DISK_MIB tmpfs, with a RESERVE_MIB reserve, a 1 s
    janitor and Prometheus metrics; -> (gateway, metrics port)."""
    metrics_port = free_port()
    gw = FaultGateway(
        tmp_path / "gw",
        "--disk-reserve-mb",
        str(RESERVE_MIB),
        "--janitor-interval-s",
        "1",
        "--metrics-listen",
        f"127.0.0.1:{metrics_port}",
    )
    mount_tmpfs(gw.store_dir, DISK_MIB)
    try:
        gw.start()
        yield gw, metrics_port
    finally:
        gw.stop()
        unmount(gw.store_dir)


def metric(port: int, name: str) -> float | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def log_since_start(gw: FaultGateway) -> str:
    text = gw.log_path.read_text(errors="replace")
    return text[text.rfind(f"===== faults: start #{gw.starts}") :]


# --------------------------------------------------------------------------- clients


class Produced:
    def __init__(self) -> None:
        self.acked: dict[int, bytes] = {}
        self.errors: dict[int, int] = {}  # error code -> count

    def storage_errors(self) -> int:
        return self.errors.get(STORAGE_ERROR, 0)


def producer(bootstrap: str) -> Any:
    from confluent_kafka import Producer

    # No retries: a refused produce comes back as its error at once (a real client would
    # retry KAFKA_STORAGE_ERROR, a retriable error, within delivery.timeout.ms).
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "retries": 0,
            "enable.idempotence": False,
            "linger.ms": 5,
            "batch.num.messages": 200,
            "message.timeout.ms": 60_000,
        }
    )


def produce_until_refused(bootstrap: str, topic: str, out: Produced, start: int = 0) -> None:
    """Produce VALUE_BYTES messages until produces fail with KAFKA_STORAGE_ERROR."""
    p = producer(bootstrap)

    def report(err: Any, msg: Any) -> None:
        if err is None:
            out.acked[msg.offset()] = msg.value()
        else:
            out.errors[err.code()] = out.errors.get(err.code(), 0) + 1

    i = start
    deadline = time.monotonic() + PROGRESS_BOUND_S * 3
    while out.storage_errors() == 0 and time.monotonic() < deadline:
        for _ in range(500):
            while True:
                try:
                    p.produce(topic, value(topic, i), on_delivery=report)
                    break
                except BufferError:
                    p.poll(0.05)
            i += 1
        p.poll(0)
        if len(p) > 5000:
            p.flush(30)
    p.flush(60)
    assert out.storage_errors() > 0, f"the disk never filled: {out.errors} {len(out.acked)}"
    assert set(out.errors) == {STORAGE_ERROR}, out.errors


def produce_one(bootstrap: str, topic: str, payload: bytes) -> tuple[int | None, int]:
    """-> (error code or None, offset)."""
    p = producer(bootstrap)
    result: list[tuple[int | None, int]] = []
    p.produce(
        topic,
        payload,
        on_delivery=lambda err, msg: result.append(
            (err.code() if err else None, msg.offset() if not err else -1)
        ),
    )
    p.flush(30)
    return result[0] if result else (-1, -1)


def produce_when_writable(bootstrap: str, topic: str, payload: bytes) -> tuple[int, int]:
    """Produce until it is accepted (the janitor frees space meanwhile); -> (offset,
    refused attempts). Fails if it never is within PROGRESS_BOUND_S."""
    refused = 0
    deadline = time.monotonic() + PROGRESS_BOUND_S
    while time.monotonic() < deadline:
        err, offset = produce_one(bootstrap, topic, payload)
        if err is None:
            return offset, refused
        assert err == STORAGE_ERROR, err
        refused += 1
        time.sleep(0.5)
    raise AssertionError(f"produce to {topic} still refused after {PROGRESS_BOUND_S} s")


def read_all(bootstrap: str, topic: str) -> dict[int, bytes]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "faults-full-disk-reader",
            "enable.auto.commit": False,
        }
    )
    out: dict[int, bytes] = {}
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        c.assign([TopicPartition(topic, 0, low)])
        deadline = time.monotonic() + PROGRESS_BOUND_S
        while len(out) < high - low and time.monotonic() < deadline:
            for m in c.consume(10_000, 0.5):
                assert not m.error(), m.error()
                out[m.offset()] = m.value()
    finally:
        c.close()
    return out


def create_topics(bootstrap: str, *topics: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, 1) for t in topics]).values():
        f.result(30)


def delete_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic], operation_timeout=30)[topic].result(60)  # raises on error
    deadline = time.monotonic() + PROGRESS_BOUND_S
    while time.monotonic() < deadline:
        if topic not in admin.list_topics(timeout=30).topics:
            return
        time.sleep(0.2)
    raise AssertionError(f"{topic} still listed after DeleteTopics succeeded")


def check_read_back(bootstrap: str, topic: str, acked: dict[int, bytes]) -> tuple[int, int, int]:
    """Every acknowledged message is there, at its offset; -> (read, lost, extra)."""
    got = read_all(bootstrap, topic)
    lost = sum(1 for off, v in acked.items() if got.get(off) != v)
    extra = len(set(got) - set(acked))
    offsets = sorted(got)
    if offsets:  # dense: nothing missing in between
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
    return len(got), lost, extra


# --------------------------------------------------------------------------- tests


def test_filling_the_disk_then_deleting_and_restarting_on_it(
    small_disk_gateway: tuple[FaultGateway, int], fault_topic_name: str, faults_report: Any
) -> None:
    gw, metrics_port = small_disk_gateway
    keep, fill, refill = (f"{fault_topic_name}-{x}" for x in ("keep", "a", "b"))
    create_topics(gw.bootstrap, keep, fill, refill)
    kept = Produced()
    for i in range(4):
        err, offset = produce_one(gw.bootstrap, keep, value(keep, i))
        assert err is None, err
        kept.acked[offset] = value(keep, i)

    # 1. Fill the disk until produces are refused.
    first = Produced()
    produce_until_refused(gw.bootstrap, fill, first)
    assert metric(metrics_port, "tmsgate_store_writes_refused") == 1
    assert metric(metrics_port, "tmsgate_store_disk_reserve_bytes") == 0
    full_free = free_mib(gw.store_dir)
    read, lost, extra = check_read_back(gw.bootstrap, fill, first.acked)
    faults_report(
        "fill",
        acked=len(first.acked),
        refused=first.storage_errors(),
        read_back=read,
        lost=lost,
        extra=extra,
        free_mib=full_free,
    )
    assert lost == 0 and read >= len(first.acked)

    # 2. Delete the topic through Kafka; the janitor gives the space back; produce again.
    delete_topic(gw.bootstrap, fill)
    offset, waited = produce_when_writable(gw.bootstrap, keep, value(keep, 1000))
    kept.acked[offset] = value(keep, 1000)
    assert metric(metrics_port, "tmsgate_store_writes_refused") == 0
    assert metric(metrics_port, "tmsgate_store_disk_reserve_bytes") == RESERVE_MIB << 20
    faults_report("freed", free_mib=free_mib(gw.store_dir), refused_while_freeing=waited)

    # 3. Full again; kill -9 while full; start again on the full disk.
    second = Produced()
    produce_until_refused(gw.bootstrap, refill, second)
    gw.kill9()
    gw.start()
    log = log_since_start(gw)
    assert "writes are refused until space is free" in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    assert metric(metrics_port, "tmsgate_store_writes_refused") == 1
    read2, lost2, extra2 = check_read_back(gw.bootstrap, refill, second.acked)
    read_kept, lost_kept, _ = check_read_back(gw.bootstrap, keep, kept.acked)
    err, _ = produce_one(gw.bootstrap, keep, b"refused")
    assert err == STORAGE_ERROR
    delete_topic(gw.bootstrap, refill)
    offset, waited = produce_when_writable(gw.bootstrap, keep, value(keep, 2000))
    kept.acked[offset] = value(keep, 2000)
    read_kept_end, lost_kept_end, _ = check_read_back(gw.bootstrap, keep, kept.acked)
    log = log_since_start(gw)
    produce_lines = [ln for ln in log.splitlines() if "tmsgate.kafka.produce" in ln]
    faults_report(
        "restart on full disk",
        acked=len(second.acked),
        read_back=read2,
        lost=lost2,
        extra=extra2,
        kept_acked=len(kept.acked),
        kept_lost=lost_kept + lost_kept_end,
        produce_log_lines=len(produce_lines),
    )
    assert lost2 == 0 and lost_kept == 0 and lost_kept_end == 0
    assert read_kept == len(kept.acked) - 1 and read_kept_end == len(kept.acked)
    assert len(produce_lines) <= 3, produce_lines  # once with the cause, then counts
    acked = len(first.acked) + len(second.acked) + len(kept.acked)
    faults_report(acked=acked, read_back=read + read2 + read_kept_end, lost=lost + lost2)


def test_a_disk_filled_by_something_else(
    small_disk_gateway: tuple[FaultGateway, int], fault_topic_name: str, faults_report: Any
) -> None:
    gw, metrics_port = small_disk_gateway
    topic, other = f"{fault_topic_name}-t", f"{fault_topic_name}-o"
    create_topics(gw.bootstrap, topic, other)
    acked: dict[int, bytes] = {}
    p = producer(gw.bootstrap)
    results: list[tuple[Any, Any]] = []
    for i in range(2000):
        p.produce(topic, value(topic, i), on_delivery=lambda e, m: results.append((e, m)))
    p.flush(60)
    for err, msg in results:
        assert err is None, err
        acked[msg.offset()] = msg.value()
    filler = gw.store_dir / "filler"
    with open(filler, "wb") as f:  # another program takes every byte left
        try:
            while True:
                f.write(b"\1" * (1 << 20))
                f.flush()
        except OSError:
            pass
    assert free_mib(gw.store_dir) < 1
    # The gateway notices at its next write: a free-space check before it (every 0.1 s,
    # or every write near the floor), or the write failing with ENOSPC. A write may still
    # fit in the last pages of a file; the next ones are refused.
    after = Produced()
    produce_until_refused(gw.bootstrap, topic, after, start=2000)
    acked.update(after.acked)
    assert metric(metrics_port, "tmsgate_store_writes_refused") == 1
    assert metric(metrics_port, "tmsgate_store_disk_reserve_bytes") == 0  # released
    # ...and its space is free, less what LevelDB's background compaction may have
    # written since (once 1.4 MiB of the 8, on a loaded machine).
    released_free = free_mib(gw.store_dir)
    assert released_free >= RESERVE_MIB / 2
    delete_topic(gw.bootstrap, other)  # deletes work on the full disk
    read_full, lost, _ = check_read_back(gw.bootstrap, topic, acked)
    assert read_full == len(acked)
    filler.unlink()  # the other program is gone
    offset, waited = produce_when_writable(gw.bootstrap, topic, value(topic, 10_000))
    acked[offset] = value(topic, 10_000)
    read_end, lost_end, extra_end = check_read_back(gw.bootstrap, topic, acked)
    refusal = next(ln for ln in gw.log_path.read_text().splitlines() if "disk full at" in ln)
    faults_report(
        acked=len(acked),
        acked_on_full_disk=len(after.acked),
        read_back=read_end,
        lost=lost + lost_end,
        extra=extra_end,
        free_after_release_mib=released_free,
        refused_while_waiting=waited,
        noticed_by="ENOSPC" if "No space left" in refusal else "free-space check",
    )
    assert lost == 0 and lost_end == 0 and read_end == len(acked)
