"""Consumer-group coordinators spread over the gateways of a cluster (gateway/cluster.py,
gateway/kafka/groups/slots.py): each of the 50 group slots has one owner, a dead
gateway's slots are taken after its lease, a joining gateway gets its share handed over,
a gateway answers NOT_COORDINATOR for the groups of other slots, and committed offsets
move with their slot exactly (nothing lost, nothing going back, no late write).

Each gateway here is the real ``Services`` of one ``tmsgate serve --cluster`` (its lease
round included), on one memory:// store shared in this process; time is the tests' own
clock, moved by hand: no waiting. The end-to-end test with real clients over real
sockets is at the end.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Iterator

import pytest
from test_cluster import Clock
from tmsgate.gateway.cluster import GROUP_SLOTS, ClusterConfig, group_slot, rendezvous
from tmsgate.gateway.kafka import GatewayConfig
from tmsgate.gateway.kafka.groups import GroupCoordinator, GroupError, JoinRequest, OffsetCommit
from tmsgate.gateway.services import Services
from tmsgate.protocol import ErrorCode
from tmsgate.storage import Store, TopicId
from tmsgate.storage.backend import open_backend
from tmsgate.storage.memory import drop

LEASE_MS = 1000
E = ErrorCode
_names = itertools.count()


@pytest.fixture
def table() -> Iterator[str]:
    name = f"cluster-groups-{next(_names)}"
    yield name
    drop(name)


class Gateway:
    """The services of one clustered gateway, its lease rounds run by hand."""

    def __init__(self, table: str, node_id: int, clock: Clock) -> None:
        store = Store(open_backend(f"memory://{table}"), clock=clock, shared=True)  # type: ignore[arg-type]
        self.node_id = node_id
        self.services = Services(
            store, GatewayConfig(node_id=node_id), ClusterConfig(node_id, LEASE_MS)
        )
        assert self.services.cluster is not None
        self.cluster = self.services.cluster
        self.cluster.announce("127.0.0.1", 9000 + node_id, None)
        self.dead = False

    @property
    def groups(self) -> GroupCoordinator:
        return self.services.broker.groups

    async def tick(self) -> None:
        if not self.dead:  # a dead gateway renews nothing
            await self.services.lease_round()

    def close(self) -> None:
        self.services.broker.close()
        self.services.executor.shutdown(wait=True)


async def settle(gws: list[Gateway], rounds: int = 3) -> None:
    for _ in range(rounds):
        for gw in gws:
            await gw.tick()


def run(gws_of: object) -> None:
    asyncio.run(gws_of)  # type: ignore[arg-type]


def owner(slot: int, nodes: list[int]) -> int | None:
    return rendezvous(f"groups/{slot}", nodes)


def group_on(node: int, nodes: list[int], n: int = 1, prefix: str = "g") -> list[str]:
    """``n`` group ids whose slot rendezvous gives ``node`` among ``nodes``."""
    found = [
        g for g in (f"{prefix}-{i}" for i in range(1000)) if owner(group_slot(g), nodes) == node
    ]
    return found[:n]


async def commit(gw: Gateway, group: str, offset: int, topic: str = "t") -> ErrorCode:
    codes = await gw.groups.commit(group, -1, "", None, [OffsetCommit(topic, 0, offset)])
    return codes[(topic, 0)]


async def fetched(gw: Gateway, group: str, topic: str = "t") -> tuple[ErrorCode, int]:
    code, topics = await gw.groups.fetch_offsets(group, [(topic, [0])])
    if code is not E.NONE:
        return code, -1
    return code, topics[0][1][0][1].offset


def test_slots_spread_over_three_gateways(table: str) -> None:
    clock = Clock()
    gws = [Gateway(table, i, clock) for i in range(3)]

    async def main() -> None:
        await settle(gws)  # the first gateway takes all 50, then hands the others theirs
        for slot in range(GROUP_SLOTS):
            serving = [gw.node_id for gw in gws if gw.cluster.serves_group_slot(slot)]
            assert serving == [owner(slot, [0, 1, 2])], slot
        led = [gw.cluster.stats()["group_slots_led"] for gw in gws]
        assert sum(led) == GROUP_SLOTS and all(led), led
        for g in (f"group-{i}" for i in range(20)):  # everyone names the same coordinator
            want = owner(group_slot(g), [0, 1, 2])
            for gw in gws:
                node = gw.cluster.group_coordinator(g)
                assert node is not None and node.node_id == want, (g, gw.node_id)

    try:
        run(main())
    finally:
        for gw in gws:
            gw.close()


def test_a_gateway_answers_not_coordinator_for_other_slots(table: str) -> None:
    clock = Clock()
    a, b = Gateway(table, 0, clock), Gateway(table, 1, clock)
    a.services.store.create_topic(TopicId("default", "t"))
    (g,) = group_on(1, [0, 1])

    async def main() -> None:
        await settle([a, b])
        assert await commit(b, g, 5) is E.NONE
        assert await fetched(b, g) == (E.NONE, 5)
        assert await commit(a, g, 6) is E.NOT_COORDINATOR
        assert await fetched(a, g) == (E.NOT_COORDINATOR, -1)
        join = JoinRequest(g, "", None, "consumer", (("range", b""),), 10_000, 10_000, "c", "h")
        assert (await a.groups.join(join)).error is E.NOT_COORDINATOR
        with pytest.raises(GroupError) as refused:
            await a.groups.describe(g)
        assert refused.value.code is E.NOT_COORDINATOR
        assert await a.groups.delete_groups([g]) == [E.NOT_COORDINATOR]
        # Kafka: each broker lists the groups it coordinates.
        assert [x.group_id for x in await b.groups.list()] == [g]
        assert await a.groups.list() == []
        assert await fetched(b, g) == (E.NONE, 5)  # the refused commit changed nothing

    try:
        run(main())
    finally:
        a.close()
        b.close()


def test_a_dead_gateways_slots_move_with_their_offsets_exactly(table: str) -> None:
    clock = Clock()
    a, b = Gateway(table, 0, clock), Gateway(table, 1, clock)
    a.services.store.create_topic(TopicId("default", "t"))
    g1, g2 = group_on(0, [0, 1], 2)

    async def main() -> None:
        await settle([a, b])
        for offset in (3, 9):
            assert await commit(a, g1, offset) is E.NONE
        assert await commit(a, g2, 4) is E.NONE
        a.dead = True  # from now on a renews nothing; its leases run out
        clock.advance(LEASE_MS // 2)
        await b.tick()
        assert await fetched(b, g1) == (E.NOT_COORDINATOR, -1)  # not before the lease ends
        # a stops acting a margin before its lease ends, by its clock: its requests are
        # refused, and a write that got past the request check is refused by the writer.
        clock.advance(LEASE_MS // 2 - LEASE_MS // 5 + 1)
        assert await commit(a, g1, 1) is E.NOT_COORDINATOR
        prepared = await a.groups.offsets.prepare(
            g1, [OffsetCommit("t", 0, 1)], await a.groups.offsets.topics(["t"])
        )
        with pytest.raises(GroupError) as late:
            await a.groups.offsets.store(prepared)
        assert late.value.code is E.NOT_COORDINATOR
        clock.advance(LEASE_MS // 5)
        await b.tick()
        await b.tick()
        assert b.cluster.stats()["group_slots_led"] == GROUP_SLOTS
        node = b.cluster.group_coordinator(g1)
        assert node is not None and node.node_id == 1
        assert await fetched(b, g1) == (E.NONE, 9)  # the last acknowledged, not the late 1
        assert await fetched(b, g2) == (E.NONE, 4)
        assert await commit(b, g1, 10) is E.NONE

    try:
        run(main())
    finally:
        a.close()
        b.close()


def test_a_joining_gateway_gets_its_share_handed_over(table: str) -> None:
    """Including a commit whose write is still queued when the hand-over begins: the lease
    is not released before it is durable, and the new owner reads it."""
    clock = Clock()
    a = Gateway(table, 0, clock)
    t = TopicId("default", "t")
    a.services.store.create_topic(t)
    groups = [f"h-{i}" for i in range(12)]
    moving = [g for g in groups if owner(group_slot(g), [0, 1]) == 1]
    staying = [g for g in groups if g not in moving]
    assert len(moving) >= 2 and staying
    gate, holding = threading.Event(), threading.Event()
    store = a.services.store
    put_states = store.put_states

    def put_when_let(updates: dict) -> None:
        """The group writer's write of the queued commit, held up on its I/O thread (the
        store's own writer stays free: the lease round writes through it)."""
        holding.set()
        assert gate.wait(10), "the test never let the write go"
        put_states(updates)

    async def main() -> None:
        await a.tick()
        assert a.cluster.stats()["group_slots_led"] == GROUP_SLOTS
        for i, g in enumerate(groups):
            assert await commit(a, g, 100 + i) is E.NONE
        # A member waiting in a moving group's first rebalance (its initial delay).
        join = JoinRequest(
            moving[0], "", None, "consumer", (("range", b""),), 10_000, 10_000, "c", "h", False
        )
        waiting = asyncio.ensure_future(a.groups.join(join))
        while moving[0] not in a.groups.groups or not a.groups.groups[moving[0]].members:
            await asyncio.sleep(0)
        # A commit of a moving group whose write is under way when the hand-over begins.
        store.put_states = put_when_let  # type: ignore[method-assign]
        queued = asyncio.ensure_future(commit(a, moving[1], 500))
        assert await asyncio.get_running_loop().run_in_executor(None, holding.wait, 10)
        store.put_states = put_states  # type: ignore[method-assign]
        b = Gateway(table, 1, clock)
        try:
            await b.tick()
            handing = asyncio.ensure_future(a.tick())  # hands b's share over
            while len(a.cluster.held_group_slots()) == GROUP_SLOTS and not handing.done():
                await asyncio.sleep(0.001)  # until a's lease round marks b's share leaving
            # a still holds the leases (released only after the queued write is flushed),
            # so b cannot take any of it yet
            await b.tick()
            assert not any(b.cluster.serves_group_slot(group_slot(g)) for g in moving)
            gate.set()
            await handing
            assert await queued is E.NONE  # acknowledged: durable before the release
            assert (await waiting).error is E.NOT_COORDINATOR  # it finds b and rejoins
            await b.tick()  # takes the share
            assert {g for g in groups if b.cluster.serves_group_slot(group_slot(g))} == set(moving)
            assert not any(g in a.groups.groups for g in moving)  # dropped from memory
            for i, g in enumerate(groups):
                on, off = (b, a) if g in moving else (a, b)
                want = 500 if g == moving[1] else 100 + i
                assert await fetched(on, g) == (E.NONE, want), g
                assert await fetched(off, g) == (E.NOT_COORDINATOR, -1), g
            listed_a = {x.group_id for x in await a.groups.list()}
            listed_b = {x.group_id for x in await b.groups.list()}
            assert listed_a == set(staying) and listed_b == set(moving)
        finally:
            gate.set()
            b.close()

    try:
        run(main())
    finally:
        gate.set()
        a.close()


# --- end to end: three gateways, real clients --------------------------------------------


def test_consumer_groups_follow_their_coordinator_to_another_gateway(table: str) -> None:
    """Three gateways in this process on one memory:// store; two consumer groups of two
    confluent-kafka consumers each, committing, coordinated by different gateways. The
    gateway coordinating the first group dies (leases left to run out, sockets closed).
    Its members find the new coordinator, and both groups go on from their committed
    offsets: every record is received, none skipped, no partition goes back before what
    was committed before the death (consumers start only from committed offsets:
    auto.offset.reset=error)."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    from gateway_harness import GatewayThread

    lease_ms = 1500
    nodes = [0, 1, 2]
    gws = [
        GatewayThread(
            f"memory://{table}", GatewayConfig(node_id=i), cluster=ClusterConfig(i, lease_ms)
        ).start()
        for i in nodes
    ]
    stopped: set[int] = set()
    topic, partitions = "moving", 4
    (g_victim,) = group_on(1, nodes, prefix="moving-group")
    (g_other,) = group_on(2, nodes, prefix="staying-group")
    try:
        boot = ",".join(gw.bootstrap for gw in gws)
        admin = AdminClient({"bootstrap.servers": boot})
        for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
            f.result(30)
        deadline = time.monotonic() + 30
        while not all(  # every slot where rendezvous puts it (a lease round every 0.3 s)
            gws[owner(slot, nodes) or 0].services.cluster.serves_group_slot(slot)
            for slot in range(GROUP_SLOTS)
        ):
            assert time.monotonic() < deadline, "the group slots did not spread"
            time.sleep(0.1)
        for g in (g_victim, g_other):  # a starting point the consumers must read back
            seed = Consumer({"bootstrap.servers": boot, "group.id": g})
            seed.commit(
                offsets=[TopicPartition(topic, p, 0) for p in range(partitions)],
                asynchronous=False,
            )
            seed.close()
        producer = Producer({"bootstrap.servers": boot, "acks": "all", "linger.ms": 5})

        def produce(start: int, n: int) -> None:
            for i in range(start, start + n):
                producer.produce(topic, key=str(i).encode(), value=f"v{i:05d}".encode())
                producer.poll(0)
            assert producer.flush(60) == 0

        received: dict[str, list[tuple[int, int, bytes]]] = {g_victim: [], g_other: []}
        errors: list[str] = []
        lock = threading.Lock()
        stop = threading.Event()

        def consume(group: str) -> None:
            c = Consumer(
                {
                    "bootstrap.servers": boot,
                    "group.id": group,
                    "enable.auto.commit": False,
                    "auto.offset.reset": "error",
                    "session.timeout.ms": 6000,
                    "heartbeat.interval.ms": 500,
                }
            )
            c.subscribe([topic])
            uncommitted = 0
            try:
                while not stop.is_set():
                    m = c.poll(0.2)
                    if m is not None and m.error() is not None:
                        if m.error().code() == KafkaError._AUTO_OFFSET_RESET:
                            with lock:  # no committed offset where one must be
                                errors.append(f"{group}: {m.error()}")
                        continue  # others: the coordinator or a leader moving
                    if m is not None:
                        with lock:
                            received[group].append((m.partition(), m.offset(), m.value()))
                        uncommitted += 1
                    if uncommitted >= 10 or (m is None and uncommitted):
                        try:
                            c.commit(asynchronous=False)
                            uncommitted = 0
                        except KafkaException:
                            pass  # the coordinator moving: committed with the next ones
            finally:
                c.close()

        threads = [
            threading.Thread(target=consume, args=(g,), daemon=True)
            for g in (g_victim, g_victim, g_other, g_other)
        ]
        for th in threads:
            th.start()
        produce(0, 400)

        def caught_up(n: int) -> bool:
            with lock:
                return all(len({v for _, _, v in got}) >= n for got in received.values())

        deadline = time.monotonic() + 60
        while not caught_up(400):
            assert time.monotonic() < deadline, "the groups did not consume the first records"
            time.sleep(0.1)
        probe = Consumer({"bootstrap.servers": boot, "group.id": g_victim})
        before = {
            tp.partition: tp.offset
            for tp in probe.committed(
                [TopicPartition(topic, p) for p in range(partitions)], timeout=30
            )
        }
        probe.close()
        with lock:
            seen_at_kill = len(received[g_victim])
        victim = gws[1]  # coordinates g_victim
        assert victim.services.cluster.group_coordinator(g_victim).node_id == 1
        victim.call(victim.services.cluster.stop, False)  # leases left to expire
        victim.stop()
        stopped.add(1)
        produce(400, 400)  # waits out the lease on the dead gateway's partitions
        deadline = time.monotonic() + 90
        while not caught_up(800):
            assert time.monotonic() < deadline, f"the groups stopped consuming: {errors[:3]}"
            time.sleep(0.1)
        stop.set()
        for th in threads:
            th.join(30)
        assert not errors, errors[:5]
        want = {f"v{i:05d}".encode() for i in range(800)}
        for g, got in received.items():
            assert {v for _, _, v in got} == want, f"{g} missed records"
        after_kill = received[g_victim][seen_at_kill:]
        back = [(p, o) for p, o, _ in after_kill if o < before[p]]
        assert not back, f"went back before committed offsets {before}: {back[:5]}"
        survivors = [gw for i, gw in enumerate(gws) if i not in stopped]
        node = survivors[0].services.cluster.group_coordinator(g_victim)
        assert node is not None and node.node_id in (0, 2)
        listed = [
            {x.group_id for x in gw.run(gw.services.broker.groups.list())} for gw in survivors
        ]
        assert not listed[0] & listed[1] and {g_victim, g_other} <= listed[0] | listed[1]
    finally:
        for i, gw in enumerate(gws):
            if i not in stopped:
                gw.stop()
