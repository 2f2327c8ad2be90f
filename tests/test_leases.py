"""Leases with fencing epochs (storage/leases.py) on every engine: leveldb, memory and
hbase (against the Thrift stand-in of tests/hbase_standin.py, not HBase).

Time is a fake clock moved by hand (the ``clock`` fixture of conftest.py): no test
sleeps."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Protocol

import pytest
from tmsgate.storage import memory
from tmsgate.storage.backend import Backend, open_backend
from tmsgate.storage.errors import BackendError
from tmsgate.storage.leases import (
    LEASE,
    Lease,
    LeaseError,
    LeaseTable,
    decode_lease,
    encode_lease,
    lease_key,
)
from tmsgate.storage.memory import BackendCrashed, Faults, MemoryBackend

TTL = 10_000


class Clock(Protocol):
    """conftest.FakeClock (the ``clock`` fixture): epoch ms, moved by hand."""

    now: int

    def __call__(self) -> int: ...

    def advance(self, ms: int) -> int: ...


@pytest.fixture
def open_engine(any_engine_url: str) -> Iterator[Callable[[], Backend]]:
    """Opens the test's engine URL (more than once: several "gateways" on one store,
    except on leveldb, which one process holds); every backend is closed afterwards."""
    opened: list[Backend] = []

    def _open() -> Backend:
        backend = open_backend(any_engine_url)
        opened.append(backend)
        return backend

    yield _open
    for backend in reversed(opened):
        backend.close()


@pytest.fixture
def backend(open_engine: Callable[[], Backend]) -> Backend:
    return open_engine()


@pytest.fixture
def leases(backend: Backend, clock: Clock) -> LeaseTable:
    return LeaseTable(backend, clock)


# --- one holder ------------------------------------------------------------------------
def test_acquire_renew_release(leases: LeaseTable, clock: Clock) -> None:
    assert leases.current("p0") is None
    a = leases.acquire("p0", "gw-a", TTL)
    assert a == Lease("p0", "gw-a", 1, clock.now + TTL, TTL)
    assert a is not None and a.held_at(clock.now) and not a.held_at(a.expires_ms)
    assert a.act_until(3_000) == a.expires_ms - 3_000
    assert leases.current("p0") == a
    assert leases.acquire("p0", "gw-b", TTL) is None  # held by someone else
    assert leases.current("p0") == a

    clock.advance(4_000)
    renewed = leases.renew(a)
    assert renewed == Lease("p0", "gw-a", 1, clock.now + TTL, TTL)
    assert leases.current("p0") == renewed
    # Acquiring a lease one holds extends it with the same epoch.
    clock.advance(1_000)
    again = leases.acquire("p0", "gw-a", 2 * TTL)
    assert again == Lease("p0", "gw-a", 1, clock.now + 2 * TTL, 2 * TTL)
    assert again is not None
    renewed = leases.renew(again, ttl_ms=TTL)
    assert renewed is not None and renewed.ttl_ms == TTL and renewed.epoch == 1

    clock.advance(1_000)
    assert leases.release(renewed) is True
    released = leases.current("p0")
    assert released == Lease("p0", "gw-a", 1, clock.now, TTL)
    assert released is not None and not released.held_at(clock.now)
    # Free at once, for anyone, with a new epoch.
    b = leases.acquire("p0", "gw-b", TTL)
    assert b == Lease("p0", "gw-b", 2, clock.now + TTL, TTL)
    # The old holder lost it: renew and release say so and change nothing.
    assert leases.renew(renewed) is None
    assert leases.release(renewed) is False
    assert leases.current("p0") == b


def test_takeover_after_expiry_bumps_the_epoch(leases: LeaseTable, clock: Clock) -> None:
    a = leases.acquire("topic/0", "gw-a", TTL)
    assert a is not None and a.epoch == 1
    clock.advance(TTL - 1)
    assert leases.acquire("topic/0", "gw-b", TTL) is None  # one ms left
    clock.advance(1)  # expires_ms itself is past the lease
    b = leases.acquire("topic/0", "gw-b", TTL)
    assert b is not None and (b.holder, b.epoch) == ("gw-b", 2)
    # The stale holder can neither renew nor release, nor take it back while b holds it.
    assert leases.renew(a) is None
    assert leases.release(a) is False
    assert leases.acquire("topic/0", "gw-a", TTL) is None
    assert leases.current("topic/0") == b
    # Taking a lease back after it expired is a takeover too: a new epoch, even for the
    # holder it expired on.
    clock.advance(TTL)
    b2 = leases.acquire("topic/0", "gw-b", TTL)
    assert b2 is not None and b2.epoch == 3
    clock.advance(TTL)
    a2 = leases.acquire("topic/0", "gw-a", TTL)
    assert a2 is not None and a2.epoch == 4
    assert leases.renew(b2) is None


def test_renewing_an_expired_lease_nobody_took(leases: LeaseTable, clock: Clock) -> None:
    """Nobody held it in between (the epoch is unchanged), so renewing is still exclusive;
    whether the holder may have acted meanwhile is its own deadline's business."""
    a = leases.acquire("p", "gw-a", TTL)
    assert a is not None
    clock.advance(3 * TTL)
    renewed = leases.renew(a)
    assert renewed is not None and renewed.epoch == 1 and renewed.expires_ms == clock.now + TTL


def test_renew_after_a_write_whose_answer_was_lost(backend: Backend, clock: Clock) -> None:
    """A renew that failed with an unknown outcome may have landed: renewing again with
    the same Lease works either way (the row still names its holder and epoch)."""
    leases = LeaseTable(backend, clock)
    a = leases.acquire("p", "gw-a", TTL)
    assert a is not None
    clock.advance(1_000)
    landed = leases.renew(a)  # as if its answer never came: the caller keeps ``a``
    assert landed is not None
    clock.advance(1_000)
    renewed = leases.renew(a)
    assert renewed is not None and renewed.expires_ms == clock.now + TTL
    assert leases.current("p") == renewed
    # ... but not once someone else took it over.
    clock.advance(TTL)
    assert leases.acquire("p", "gw-b", TTL) is not None
    assert leases.renew(a) is None and leases.renew(renewed) is None


def test_renew_many_renews_each_as_renew_would(leases: LeaseTable, clock: Clock) -> None:
    """All in one conditional write, each judged as renew() would: held ones extended,
    one taken over lost, one whose row changed since it was read (a renew through
    another copy) renewed after a second look, an expired one nobody took renewed."""
    held = [leases.acquire(f"t/{i}", "gw-a", TTL) for i in range(5)]
    assert all(x is not None for x in held)
    a0, a1, a2, a3, a4 = held  # type: ignore[misc]
    clock.advance(TTL)  # all expired
    assert leases.acquire("t/1", "gw-b", TTL) is not None  # t/1 taken over
    moved = leases.renew(a2)  # t/2's row is not the one a2 holds any more
    assert moved is not None
    clock.advance(1_000)
    out = leases.renew_many([a0, a1, a2, a3, a4])
    assert out[1] is None
    for lease, new in zip([a0, a2, a3, a4], [out[0], *out[2:]], strict=True):
        assert new is not None
        assert (new.holder, new.epoch, new.expires_ms) == ("gw-a", 1, clock.now + TTL)
        assert leases.current(lease.name) == new
    assert leases.current("t/1") is not None and leases.current("t/1").holder == "gw-b"  # type: ignore[union-attr]
    assert leases.renew_many([]) == []


def test_current_and_all(leases: LeaseTable, clock: Clock) -> None:
    names = ["orders/0", "orders/1", "orders/10", "pay/0", "ö/0"]
    for i, name in enumerate(names):
        assert leases.acquire(name, f"gw-{i}", TTL) is not None
    assert [lease.name for lease in leases.all()] == sorted(names, key=str.encode)
    assert [lease.name for lease in leases.all("orders/1")] == ["orders/1", "orders/10"]
    assert [lease.holder for lease in leases.all("pay/")] == ["gw-3"]
    assert leases.all("nothing") == []
    assert leases.current("ö/0") == Lease("ö/0", "gw-4", 1, clock.now + TTL, TTL)


def test_rows_and_validation(backend: Backend, leases: LeaseTable) -> None:
    lease = leases.acquire("p", "gw-a", TTL)
    assert lease is not None
    row = backend.get(b"Lp")
    assert row == lease.row == encode_lease("gw-a", 1, lease.expires_ms, TTL)
    assert lease_key("p") == LEASE + b"p" == b"Lp"
    assert decode_lease("p", row) == lease
    for bad in (b"", b"{", b"[]", b'{"holder": "x"}', encode_lease("x", 0, 5, 5)):
        with pytest.raises(LeaseError, match="not a lease"):
            decode_lease("p", bad)
    backend.check_and_put(b"Lbad", None, b"garbage")
    with pytest.raises(LeaseError, match="'bad'"):
        leases.current("bad")
    with pytest.raises(LeaseError):
        leases.acquire("bad", "gw-a", TTL)
    for args in [("", "gw", TTL), ("p", "", TTL), ("p", "gw", 0), ("p", "gw", 1.5)]:
        with pytest.raises(ValueError):
            leases.acquire(*args)  # type: ignore[arg-type]


# --- racing gateways -------------------------------------------------------------------
def test_racing_acquires_have_exactly_one_winner(
    any_engine_url: str, open_engine: Callable[[], Backend], clock: Clock
) -> None:
    """8 threads race for an expired lease, 50 rounds: exactly one wins each round and the
    epochs strictly increase. On memory and hbase the threads are split over 2 backends
    (2 gateways on one store; leveldb is held by one process)."""
    gateways = 1 if any_engine_url.startswith("leveldb") else 2
    tables = [LeaseTable(open_engine(), clock) for _ in range(gateways)]
    threads_n, rounds = 8, 50
    barrier = threading.Barrier(threads_n)
    results: list[list[Lease | None]] = [[None] * threads_n for _ in range(rounds)]
    errors: list[BaseException] = []

    def race(i: int) -> None:
        leases = tables[i % gateways]
        try:
            for r in range(rounds):
                barrier.wait()  # the clock was moved: every thread sees the lease expired
                results[r][i] = leases.acquire("hot", f"gw-{i}", TTL)
                barrier.wait()  # everyone is done before the clock moves on
                if i == 0:
                    clock.advance(TTL)
        except BaseException as exc:  # reported below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=race, args=(i,)) for i in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors
    epochs = []
    for r, outcome in enumerate(results):
        winners = [lease for lease in outcome if lease is not None]
        assert len(winners) == 1, (r, outcome)
        epochs.append(winners[0].epoch)
    assert epochs == list(range(1, rounds + 1))
    last = tables[-1].current("hot")
    assert last is not None and last.epoch == rounds


# --- faults (memory engine) ------------------------------------------------------------
@pytest.fixture
def memory_name() -> Iterator[str]:
    name = f"leases-{uuid.uuid4().hex}"
    yield name
    memory.drop(name)


def _old_lease(name: str, clock: Clock) -> Lease:
    lease = LeaseTable(MemoryBackend(memory.table(name)), clock).acquire("p", "gw-old", TTL)
    assert lease is not None
    clock.advance(TTL)  # expired: free for a takeover
    return lease


def test_a_crash_during_acquire_leaves_the_old_row(memory_name: str, clock: Clock) -> None:
    old = _old_lease(memory_name, clock)
    table = memory.table(memory_name)
    crashing = MemoryBackend(table, Faults(crash_after_rows=0))
    with pytest.raises(BackendCrashed):
        LeaseTable(crashing, clock).acquire("p", "gw-new", TTL)
    assert table.rows[b"Lp"] == old.row
    # The gateway restarts: its acquire takes the old row over, with the next epoch.
    restarted = LeaseTable(MemoryBackend(table), clock)
    new = restarted.acquire("p", "gw-new", TTL)
    assert new is not None and new.epoch == old.epoch + 1


def test_a_crash_after_acquire_leaves_the_new_row(memory_name: str, clock: Clock) -> None:
    old = _old_lease(memory_name, clock)
    table = memory.table(memory_name)
    crashing = MemoryBackend(table, Faults(crash_after_rows=1))
    leases = LeaseTable(crashing, clock)
    new = leases.acquire("p", "gw-new", TTL)
    assert new is not None and new.epoch == old.epoch + 1
    with pytest.raises(BackendCrashed):
        leases.renew(new)
    assert table.rows[b"Lp"] == new.row
    # Restarted with the same holder name: the lease is still its own, same epoch.
    again = LeaseTable(MemoryBackend(table), clock).acquire("p", "gw-new", TTL)
    assert again is not None and again.epoch == new.epoch


def test_a_failed_acquire_changes_nothing(memory_name: str, clock: Clock) -> None:
    old = _old_lease(memory_name, clock)
    table = memory.table(memory_name)
    failing = MemoryBackend(table, Faults(fail_after_rows=0))
    leases = LeaseTable(failing, clock)
    with pytest.raises(BackendError, match="injected"):
        leases.acquire("p", "gw-new", TTL)
    assert table.rows[b"Lp"] == old.row
    new = leases.acquire("p", "gw-new", TTL)  # a failure is not a crash: it goes on
    assert new is not None and new.epoch == old.epoch + 1


def test_random_faults_never_leave_a_torn_row(memory_name: str, clock: Clock) -> None:
    """Gateways taking a lease from each other under random failures and crashes: after
    every step the row is one that was written whole, and its epoch never goes back."""
    table = memory.table(memory_name)
    written: set[bytes] = set()
    last_epoch = 0
    outcomes = {"won": 0, "failed": 0, "crashed": 0}
    for seed in range(200):
        backend = MemoryBackend(table, Faults(seed=seed, fail_rate=0.2, crash_rate=0.2))
        leases = LeaseTable(backend, clock)
        try:
            lease = leases.acquire("p", f"gw-{seed % 3}", TTL)
            if lease is not None:
                written.add(lease.row)
                outcomes["won"] += 1
                clock.advance(TTL // 3)
                renewed = leases.renew(lease)
                assert renewed is not None
                written.add(renewed.row)
        except BackendCrashed:
            outcomes["crashed"] += 1
        except BackendError:
            outcomes["failed"] += 1
        row = table.rows.get(b"Lp")
        if row is not None:
            assert row in written, seed
            current = decode_lease("p", row)
            assert current.epoch >= last_epoch
            last_epoch = current.epoch
        clock.advance(TTL)
    assert all(outcomes.values()), outcomes
