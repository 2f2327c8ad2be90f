"""Shared helpers for the compat suite (no gateway imports: everything goes over sockets).

Record fixtures are deterministic so every client produces and checks the same shapes:
record i has key b"k-<i>", value b"v-<i>-<tag>-<compressible padding>" and headers
("idx", b"<i>"), ("hk", b"hv-<i>").
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import pytest

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]

# Bounds (seconds) used by every client wrapper so a hang fails fast.
PRODUCE_TIMEOUT_S = 20.0
CONSUME_TIMEOUT_S = 20.0
ADMIN_TIMEOUT_S = 20.0

IN_CI = bool(os.environ.get("CI"))


@dataclass(frozen=True)
class Rec:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = field(default_factory=tuple)


def value_for(i: int, tag: str, size: int = 120) -> bytes:
    head = f"v-{i}-{tag}-"
    unit = f"lorem ipsum dolor sit amet {i % 7} "
    body = (head + unit * (size // len(unit) + 1))[: max(size, len(head))]
    return body.encode()


def make_records(n: int, tag: str, start: int = 0, size: int = 120) -> list[Rec]:
    return [
        Rec(
            key=f"k-{i}".encode(),
            value=value_for(i, tag, size),
            headers=(("idx", str(i).encode()), ("hk", f"hv-{i}".encode())),
        )
        for i in range(start, start + n)
    ]


def assert_same_records(got: list[Rec], expected: list[Rec], what: str = "records") -> None:
    """Compare consumed records with the produced ones, reporting the first difference."""
    for i, (g, e) in enumerate(zip(got, expected, strict=False)):
        assert g == e, (
            f"{what}: first difference at position {i}:\n  got      {g!r}\n  expected {e!r}"
        )
    assert len(got) == len(expected), (
        f"{what}: got {len(got)} records, expected {len(expected)}"
        + (f"; first extra {got[len(expected)]!r}" if len(got) > len(expected) else "")
    )


def assert_dense_offsets(offsets: Iterable[int], start: int, n: int, what: str = "offsets") -> None:
    offsets = list(offsets)
    assert offsets == list(range(start, start + n)), (
        f"{what} are not dense {start}..{start + n - 1}: got {offsets[:20]}"
        + ("..." if len(offsets) > 20 else "")
    )


def assert_no_redelivery(offsets: Iterable[int | tuple[object, int]], what: str = "consumer"):
    """Within one consumer session, each partition's offsets are strictly increasing: no
    record delivered twice, no step backwards (what the issue's fetch cache bug broke: a
    response carried 9,999 offsets a second time, going backwards).

    ``offsets`` are the delivered offsets in delivery order, plain ints for one partition or
    (partition, offset) pairs. Only for one uninterrupted session: a consumer that re-seeks,
    or a group member after a rebalance, may legitimately see offsets again.
    """
    last: dict[object, int] = {}
    twice = backwards = 0
    first_bad = None
    seen: dict[object, set[int]] = {}
    for i, item in enumerate(offsets):
        part, off = item if isinstance(item, tuple) else (0, item)
        prev = last.get(part)
        if prev is not None and off <= prev:
            if off in seen[part]:
                twice += 1
            else:
                backwards += 1
            if first_bad is None:
                first_bad = (i, part, prev, off)
        seen.setdefault(part, set()).add(off)
        last[part] = off if prev is None else max(prev, off)
    if first_bad is not None:
        i, part, prev, off = first_bad
        raise AssertionError(
            f"{what}: {twice} offsets delivered twice and {backwards} out of order within one "
            f"session; first at delivery #{i}: partition {part} offset {off} after {prev}"
        )


# Read while producing: a consumer starts BEHIND_HEAD tiny records behind the head (more than
# the 50,000 messages one store read of the gateway returns, so a response joins a store read
# and cached produced batches) while the producer adds WHILE_READING more. Record i is at
# offset i with value tiny_value(i); record 0 is produced (and acknowledged) alone first.
BEHIND_HEAD = 60_000
WHILE_READING = 20_000


def tiny_value(i: int) -> bytes:
    return b"%d" % i


def check_tiny_stream(got: list[tuple[int, bytes | None]], total: int, what: str) -> None:
    """(offset, value) consumed in one session from offset 0 of a tiny_value stream."""
    assert_no_redelivery([o for o, _ in got], what)
    assert_dense_offsets([o for o, _ in got], 0, total, what)
    wrong = [(o, v) for o, v in got if v != tiny_value(o)]
    assert not wrong, f"{what}: wrong records (offset, value): {wrong[:5]}"


def wait_until(pred: Callable[[], object], timeout: float, what: str, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            v = pred()
            if v:
                return v
        except Exception as exc:
            last_exc = exc
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"timed out after {timeout}s waiting for {what}; last error: {last_exc!r}"
            )
        time.sleep(interval)


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def require_tool(name: str, why: str = "") -> str:
    """Path of an executable; FAIL when missing under CI (CI env var set), skip locally."""
    path = shutil.which(name)
    if path is None:
        msg = f"{name} not found on PATH{': ' + why if why else ''}"
        if IN_CI:
            pytest.fail(msg + " (CI is set: compat tools must be installed)", pytrace=False)
        pytest.skip(msg)
    return path


def unavailable(msg: str) -> None:
    """A third-party client cannot run here: fail under CI, skip locally."""
    if IN_CI:
        pytest.fail(msg + " (CI is set, so this is a failure rather than a skip)", pytrace=False)
    pytest.skip(msg)


def sleep_past_ms_boundary(pause_s: float = 0.05) -> int:
    """Sleep a little, return the current epoch-ms, sleep a little more.

    Used for timestamp lookups: everything produced before the call has a timestamp strictly
    below the returned value and everything produced after it one at or above it, whether the
    broker keeps the client's CreateTime or stamps LogAppendTime (same clock on this host).
    """
    time.sleep(pause_s)
    ts = int(time.time() * 1000)
    time.sleep(pause_s)
    return ts


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
