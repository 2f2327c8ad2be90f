"""The group coordinator driven directly (no sockets): a real Broker over a real LevelDB
store, short timeouts. Covers the rebalance protocol's states, errors and timers, the
committed offsets, durability across a restart, and the admin operations."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription
from tmsgate.gateway.kafka.broker import Broker
from tmsgate.gateway.kafka.config import GatewayConfig
from tmsgate.gateway.kafka.groups import (
    OFFSETS_AREA,
    GroupConfig,
    GroupState,
    JoinRequest,
    OffsetCommit,
    SyncRequest,
)
from tmsgate.gateway.kafka.groups.codec import decode_offset
from tmsgate.gateway.kafka.groups.errors import ErrorCode as E
from tmsgate.storage import TopicId, open_store

FAST = GroupConfig(
    initial_rebalance_delay_ms=0,
    min_session_timeout_ms=50,
    new_member_join_timeout_ms=5000,
    cleanup_interval_ms=0,
)
SESSION_MS = 10_000


def subscription(*topics: str) -> bytes:
    return bytes(
        ConsumerProtocolSubscription(version=0, topics=list(topics), user_data=None).encode()
    )


PROTOCOLS = (("range", subscription("t")), ("roundrobin", subscription("t")))


class Harness:
    def __init__(
        self, path: Path, config: GroupConfig = FAST, clock: Callable[[], int] | None = None
    ) -> None:
        self.path = path
        self.config = config
        self.clock = clock
        self.store = open_store(f"leveldb://{path}", clock=clock)
        self.broker = Broker(self.store, GatewayConfig(groups=config))
        self.coord = self.broker.groups

    def restart(self) -> None:
        self.close()
        self.__init__(self.path, self.config, self.clock)  # type: ignore[misc]

    def close(self) -> None:
        self.coord.shutdown()
        self.broker.close()
        self.store.close()

    def topic(self, name: str = "t") -> None:
        self.store.create_topic(TopicId("default", name), {})

    def request(self, group: str, member_id: str = "", **kw: object) -> JoinRequest:
        fields = {
            "group_id": group,
            "member_id": member_id,
            "instance_id": None,
            "protocol_type": "consumer",
            "protocols": PROTOCOLS,
            "session_timeout_ms": SESSION_MS,
            "rebalance_timeout_ms": 2000,
            "client_id": "test",
            "client_host": "/127.0.0.1",
        }
        fields.update(kw)
        return JoinRequest(**fields)  # type: ignore[arg-type]

    async def join(self, group: str, member_id: str = "", **kw: object):
        req = self.request(group, member_id, **kw)
        result = await self.coord.join(req)
        if result.error is E.MEMBER_ID_REQUIRED:
            result = await self.coord.join(dataclasses.replace(req, member_id=result.member_id))
        return result

    async def sync(self, group: str, result, assignments: dict[str, bytes] | None = None):
        return await self.coord.sync(
            SyncRequest(group, result.generation, result.member_id, None, assignments or {})
        )

    async def join_and_sync(self, group: str, members: int, **kw: object) -> list:
        """``members`` new members join together and sync; -> their join results."""
        results = await asyncio.gather(*(self.join(group, **kw) for _ in range(members)))
        leader = next(r for r in results if r.members)
        plan = {r.member_id: f"for-{r.member_id}".encode() for r in results}
        syncs = await asyncio.gather(
            *(self.sync(group, r, plan if r is leader else None) for r in results)
        )
        for r, s in zip(results, syncs, strict=True):
            assert s.error is E.NONE and s.assignment == plan[r.member_id]
        return results

    async def heartbeat(self, group: str, result) -> E:
        code, _ = await self.coord.heartbeat(group, result.member_id, None, result.generation)
        return code


@pytest.fixture
def h(tmp_path: Path):
    harness = Harness(tmp_path / "store")
    yield harness
    harness.close()


def run(coro: Awaitable[object]) -> object:
    return asyncio.run(asyncio.wait_for(coro, 20))  # type: ignore[arg-type]


async def eventually(pred: Callable[[], object], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not pred():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


# --- joining ----------------------------------------------------------------------------
def test_new_member_gets_an_id_first_then_joins_leads_and_syncs(h):
    async def scenario():
        first = await h.coord.join(h.request("g"))
        assert first.error is E.MEMBER_ID_REQUIRED and first.member_id.startswith("test-")
        joined = await h.coord.join(h.request("g", first.member_id))
        assert joined.error is E.NONE and joined.generation == 1
        assert joined.leader == joined.member_id == first.member_id
        assert [m.member_id for m in joined.members] == [joined.member_id]
        assert joined.protocol_name == "range" and joined.protocol_type == "consumer"
        sync = await h.sync("g", joined, {joined.member_id: b"plan"})
        assert (sync.error, sync.assignment) == (E.NONE, b"plan")
        assert h.coord.groups["g"].state is GroupState.STABLE
        assert await h.heartbeat("g", joined) is E.NONE

    run(scenario())


def test_concurrent_joins_converge_on_one_generation_with_one_leader(h):
    async def scenario():
        results = await h.join_and_sync("g", 5)
        assert {r.generation for r in results} == {1}
        assert len({r.leader for r in results}) == 1
        assert sum(1 for r in results if r.members) == 1
        leader = next(r for r in results if r.members)
        assert {m.member_id for m in leader.members} == {r.member_id for r in results}

    run(scenario())


def test_a_new_member_makes_the_others_rejoin(h):
    async def scenario():
        (a,) = await h.join_and_sync("g", 1)
        b_join = asyncio.ensure_future(h.join("g"))
        await eventually(lambda: h.coord.groups["g"].state is GroupState.PREPARING_REBALANCE)
        assert await h.heartbeat("g", a) is E.REBALANCE_IN_PROGRESS
        # Commits still go through while the rebalance is being prepared.
        h.topic()
        codes = await h.coord.commit(
            "g", a.generation, a.member_id, None, [OffsetCommit("t", 0, 3)]
        )
        assert codes == {("t", 0): E.NONE}
        a2 = await h.join("g", a.member_id)
        b = await b_join
        assert a2.generation == b.generation == 2
        assert await h.heartbeat("g", a) is E.ILLEGAL_GENERATION  # a's old generation

    run(scenario())


def test_requests_that_kafka_refuses(h):
    async def scenario():
        (a,) = await h.join_and_sync("g", 1)
        assert (await h.coord.join(h.request(""))).error is E.INVALID_GROUP_ID
        assert (await h.coord.join(h.request("g", session_timeout_ms=10))).error is (
            E.INVALID_SESSION_TIMEOUT
        )
        assert (await h.coord.join(h.request("g", protocol_type="connect"))).error is (
            E.INCONSISTENT_GROUP_PROTOCOL
        )
        assert (await h.coord.join(h.request("g", protocols=(("sticky", b""),)))).error is (
            E.INCONSISTENT_GROUP_PROTOCOL
        )
        assert (await h.coord.join(h.request("nope", "who"))).error is E.UNKNOWN_MEMBER_ID
        assert (await h.coord.join(h.request("g", "who"))).error is E.UNKNOWN_MEMBER_ID
        hb = h.coord.heartbeat
        assert (await hb("g", a.member_id, None, a.generation + 1))[0] is E.ILLEGAL_GENERATION
        assert (await hb("g", "who", None, a.generation))[0] is E.UNKNOWN_MEMBER_ID
        assert (await hb("nope", a.member_id, None, 1))[0] is E.UNKNOWN_MEMBER_ID
        assert (await hb("", a.member_id, None, 1))[0] is E.INVALID_GROUP_ID
        stale = dataclasses.replace(a, generation=a.generation - 1)
        assert (await h.sync("g", stale)).error is E.ILLEGAL_GENERATION
        wrong = SyncRequest("g", a.generation, a.member_id, None, {}, "consumer", "roundrobin")
        assert (await h.coord.sync(wrong)).error is E.INCONSISTENT_GROUP_PROTOCOL
        # The group is untouched by all of that.
        assert await h.heartbeat("g", a) is E.NONE
        assert h.coord.groups["g"].state is GroupState.STABLE

    run(scenario())


def test_group_max_size(tmp_path):
    h = Harness(tmp_path / "s", dataclasses.replace(FAST, max_size=2))

    async def scenario():
        await h.join_and_sync("g", 2)
        assert (await h.join("g")).error is E.GROUP_MAX_SIZE_REACHED

    try:
        run(scenario())
    finally:
        h.close()


# --- timers -----------------------------------------------------------------------------
def test_a_member_without_heartbeats_expires_after_its_session_timeout(h):
    async def scenario():
        a = await h.join("g", session_timeout_ms=300)
        b_join = asyncio.ensure_future(h.join("g", session_timeout_ms=300))
        await eventually(lambda: len(h.coord.groups["g"].members) == 2)
        a = await h.join("g", a.member_id, session_timeout_ms=300)
        b = await b_join
        await asyncio.gather(
            h.sync("g", a, {a.member_id: b"a", b.member_id: b"b"}) if a.members else h.sync("g", a),
            h.sync("g", b, {a.member_id: b"a", b.member_id: b"b"}) if b.members else h.sync("g", b),
        )
        # a heartbeats, b went silent (a SIGKILLed consumer sends no LeaveGroup).
        loop = asyncio.get_running_loop()
        start = loop.time()
        while (code := await h.heartbeat("g", a)) is E.NONE:
            assert loop.time() - start < 3
            await asyncio.sleep(0.05)
        assert code is E.REBALANCE_IN_PROGRESS
        assert 0.25 < loop.time() - start < 1.5
        a2 = await h.join("g", a.member_id, session_timeout_ms=300)
        assert a2.generation == 3 and [m.member_id for m in a2.members] == [a.member_id]
        assert b.member_id not in h.coord.groups["g"].members

    run(scenario())


def test_a_member_that_does_not_rejoin_is_dropped_after_the_rebalance_timeout(h):
    async def scenario():
        a, b = await h.join_and_sync("g", 2, rebalance_timeout_ms=400)
        c_join = asyncio.ensure_future(h.join("g", rebalance_timeout_ms=400))
        await eventually(lambda: h.coord.groups["g"].state is GroupState.PREPARING_REBALANCE)
        a2 = await h.join("g", a.member_id, rebalance_timeout_ms=400)  # b never rejoins
        c = await c_join
        assert a2.generation == c.generation == 2
        assert b.member_id not in h.coord.groups["g"].members

    run(scenario())


def test_a_member_that_never_syncs_is_removed_and_the_group_rebalances(h):
    async def scenario():
        a, b = await asyncio.gather(
            h.join("g", rebalance_timeout_ms=300), h.join("g", rebalance_timeout_ms=300)
        )
        leader = a if a.members else b
        other = b if leader is a else a
        sync = await h.sync("g", leader, {a.member_id: b"a", b.member_id: b"b"})
        assert sync.error is E.NONE
        await eventually(lambda: h.coord.groups["g"].state is GroupState.PREPARING_REBALANCE)
        assert other.member_id not in h.coord.groups["g"].members

    run(scenario())


def test_initial_rebalance_delay_gathers_members_into_the_first_generation(tmp_path):
    h = Harness(tmp_path / "s", dataclasses.replace(FAST, initial_rebalance_delay_ms=300))

    async def scenario():
        loop = asyncio.get_running_loop()
        start = loop.time()
        first = asyncio.ensure_future(h.join("g"))
        await asyncio.sleep(0.1)
        second = asyncio.ensure_future(h.join("g"))
        a, b = await asyncio.gather(first, second)
        assert a.generation == b.generation == 1
        assert loop.time() - start >= 0.3

    try:
        run(scenario())
    finally:
        h.close()


def test_random_arrivals_and_departures_converge(h):
    """Members arrive, leave and rejoin at random moments; afterwards everyone still in
    the group agrees on one generation, leader and assignment."""
    rng = random.Random(7)

    async def member(name: int, stop: asyncio.Event, out: dict) -> None:
        await asyncio.sleep(rng.random() * 0.2)
        r = await h.join("g")
        while not stop.is_set():
            if r.error is not E.NONE:
                r = await h.join("g", r.member_id if r.error is E.REBALANCE_IN_PROGRESS else "")
                continue
            plan = {m.member_id: m.member_id.encode() for m in r.members}
            s = await h.sync("g", r, plan)
            if s.error is not E.NONE:
                r = await h.join("g", r.member_id)
                continue
            out[name] = (r.generation, r.leader, s.assignment, r.member_id)
            while not stop.is_set():
                code = await h.heartbeat("g", r)
                if code is not E.NONE:
                    out.pop(name, None)
                    r = await h.join("g", r.member_id)
                    break
                await asyncio.sleep(0.02)
        if name % 3 == 0:
            await h.coord.leave("g", [(r.member_id, None)])

    async def scenario():
        stop = asyncio.Event()
        out: dict = {}
        tasks = [asyncio.ensure_future(member(i, stop, out)) for i in range(8)]
        await asyncio.sleep(0.5)
        await eventually(
            lambda: (
                h.coord.groups["g"].state is GroupState.STABLE
                and len(out) == len(h.coord.groups["g"].members) == 8
                and len({v[0] for v in out.values()}) == 1
            ),
            timeout=10,
        )
        (generation,) = {v[0] for v in out.values()}
        assert generation == h.coord.groups["g"].generation
        for _gen, leader, assignment, member_id in out.values():
            assert leader == h.coord.groups["g"].leader_id and assignment == member_id.encode()
        stop.set()
        await asyncio.gather(*tasks)

    run(scenario())


# --- static membership ------------------------------------------------------------------
def test_static_member_restart_keeps_its_assignment_without_a_rebalance(h):
    async def scenario():
        a = await h.join("g", instance_id="a")  # static: no MEMBER_ID_REQUIRED round
        b_join = asyncio.ensure_future(h.join("g", instance_id="b"))
        await eventually(lambda: len(h.coord.groups["g"].members) == 2)
        a = await h.join("g", a.member_id, instance_id="a")
        b = await b_join
        leader, follower = (a, b) if a.members else (b, a)
        plan = {a.member_id: b"A", b.member_id: b"B"}
        await asyncio.gather(h.sync("g", leader, plan), h.sync("g", follower))
        generation = h.coord.groups["g"].generation
        # "b" restarts: a new process, no member id, same instance id.
        b2 = await h.coord.join(h.request("g", instance_id="b"))
        assert b2.error is E.NONE and b2.generation == generation
        assert b2.member_id != b.member_id and b2.leader != b2.member_id
        s = await h.coord.sync(SyncRequest("g", generation, b2.member_id, "b", {}))
        assert (s.error, s.assignment) == (E.NONE, b"B")
        assert h.coord.groups["g"].state is GroupState.STABLE
        # The old incarnation is fenced.
        code, _ = await h.coord.heartbeat("g", b.member_id, "b", generation)
        assert code is E.FENCED_INSTANCE_ID
        # Leaving by instance id alone (KIP-345 batch leave).
        top, codes = await h.coord.leave("g", [("", "b"), ("nobody", None)])
        assert (top, codes) == (E.NONE, [E.NONE, E.UNKNOWN_MEMBER_ID])
        assert h.coord.groups["g"].state is GroupState.PREPARING_REBALANCE

    run(scenario())


def test_returning_static_leader_skips_the_assignment_with_join_v9(h):
    async def scenario():
        a = await h.join("g", instance_id="a")
        await h.sync("g", a, {a.member_id: b"A"})
        again = await h.coord.join(h.request("g", instance_id="a", supports_skip_assignment=True))
        assert again.skip_assignment and again.leader == again.member_id
        assert [m.member_id for m in again.members] == [again.member_id]
        old = await h.coord.join(h.request("g", instance_id="a"))  # < v9: acts as follower
        assert not old.skip_assignment and old.leader == again.member_id != old.member_id

    run(scenario())


# --- offsets ----------------------------------------------------------------------------
def test_commits_and_fetches(h):
    async def scenario():
        h.topic()
        c = h.coord
        # A simple commit (generation -1) creates an empty group that only has offsets.
        codes = await c.commit("s", -1, "", None, [OffsetCommit("t", 0, 7, 4, "meta")])
        assert codes == {("t", 0): E.NONE}
        code, got = await c.fetch_offsets("s", [("t", [0, 1]), ("other", [0])])
        assert code is E.NONE
        assert [
            (t, [(p, f.offset, f.leader_epoch, f.metadata) for p, f in ps]) for t, ps in got
        ] == [
            ("t", [(0, 7, 4, "meta"), (1, -1, -1, "")]),
            ("other", [(0, -1, -1, "")]),
        ]
        assert (await c.fetch_offsets("s", None))[1][0][0] == "t"
        assert (await c.fetch_offsets("never", None)) == (E.NONE, [])
        bad = await c.commit(
            "s",
            -1,
            "",
            None,
            [
                OffsetCommit("missing", 0, 1),
                OffsetCommit("t", 1, 1),
                OffsetCommit("t", 0, 9, metadata="x" * 5000),
                OffsetCommit("bad name!", 0, 1),
            ],
        )
        assert bad == {
            ("missing", 0): E.UNKNOWN_TOPIC_OR_PARTITION,
            ("t", 1): E.UNKNOWN_TOPIC_OR_PARTITION,
            ("t", 0): E.OFFSET_METADATA_TOO_LARGE,
            ("bad name!", 0): E.UNKNOWN_TOPIC_OR_PARTITION,
        }
        assert (await c.fetch_offsets("s", [("t", [0])]))[1][0][1][0][1].offset == 7
        # Generation checks for group members.
        (a,) = await h.join_and_sync("g", 1)
        commit = [OffsetCommit("t", 0, 5)]
        assert await c.commit("g", a.generation, a.member_id, None, commit) == {("t", 0): E.NONE}
        assert await c.commit("g", 99, a.member_id, None, commit) == {
            ("t", 0): E.ILLEGAL_GENERATION
        }
        assert await c.commit("g", 1, "who", None, commit) == {("t", 0): E.UNKNOWN_MEMBER_ID}
        assert await c.commit("g", -1, "", None, commit) == {("t", 0): E.UNKNOWN_MEMBER_ID}
        assert await c.commit("nope", 3, "x", None, commit) == {("t", 0): E.ILLEGAL_GENERATION}
        # Between JoinGroup and the assignment: REBALANCE_IN_PROGRESS.
        b_join = asyncio.ensure_future(h.join("g"))
        await eventually(lambda: c.groups["g"].state is GroupState.PREPARING_REBALANCE)
        a2, _b = await asyncio.gather(h.join("g", a.member_id), b_join)
        assert c.groups["g"].state is GroupState.COMPLETING_REBALANCE
        got = await c.commit("g", a2.generation, a.member_id, None, commit)
        assert got == {("t", 0): E.REBALANCE_IN_PROGRESS}

    run(scenario())


def test_group_state_times_and_commit_times_are_the_stores_clock(tmp_path):
    """Not the wall clock: a transaction's replayed offsets are compared with a commit's
    time by the decision's, which is the store's (Store.now_ms, moved here by hand)."""
    now = [1_700_000_000_000]
    h = Harness(tmp_path, clock=lambda: now[0])

    async def scenario():
        h.topic()
        assert await h.coord.commit("s", -1, "", None, [OffsetCommit("t", 0, 7)]) == {
            ("t", 0): E.NONE
        }
        assert h.coord.groups["s"].state_ms == now[0]  # made by the commit, Empty
        now[0] += 5_000
        await h.join_and_sync("g", 1)
        assert h.coord.groups["g"].state_ms == now[0]  # Stable since now
        ((_, raw),) = h.store.scan_state(OFFSETS_AREA)
        assert decode_offset(raw).commit_ms == now[0] - 5_000

    try:
        run(scenario())
    finally:
        h.close()


def test_commits_are_fsynced_in_order_and_batched(h):
    async def scenario():
        h.topic()
        await asyncio.gather(
            *(h.coord.commit("g", -1, "", None, [OffsetCommit("t", 0, i)]) for i in range(200))
        )
        assert h.coord.writer.batches < 200  # they shared fsyncs
        _, got = await h.coord.fetch_offsets("g", [("t", [0])])
        assert got[0][1][0][1].offset == 199

    run(scenario())
    raw = h.store.get_state(OFFSETS_AREA, "g/t/0")
    assert raw is not None


def test_offsets_of_a_deleted_topic_do_not_leak_into_the_next_generation(h):
    async def scenario():
        h.topic()
        await h.coord.commit("g", -1, "", None, [OffsetCommit("t", 0, 42)])
        await h.broker.topics.delete("t")
        h.topic()  # recreated: a new generation, empty
        h.broker.topics.invalidate("t")
        _, got = await h.coord.fetch_offsets("g", [("t", [0])])
        assert got[0][1][0][1].offset == -1
        assert await h.coord.fetch_offsets("g", None) == (E.NONE, [])
        await h.coord.writer.flush()
        # A commit to the new generation works as usual.
        await h.coord.commit("g", -1, "", None, [OffsetCommit("t", 0, 1)])
        _, got = await h.coord.fetch_offsets("g", [("t", [0])])
        assert got[0][1][0][1].offset == 1

    run(scenario())
    assert h.store.scan_state(OFFSETS_AREA) != []


def test_offset_delete(h):
    async def scenario():
        h.topic("t")
        h.topic("u")
        (a,) = await h.join_and_sync("g", 1)  # subscribed to "t"
        await h.coord.commit(
            "g", 1, a.member_id, None, [OffsetCommit("t", 0, 1), OffsetCommit("u", 0, 2)]
        )
        code, codes = await h.coord.delete_offsets("g", [("t", [0]), ("u", [0]), ("x", [0])])
        assert code is E.NONE
        assert codes == {
            ("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC,
            ("u", 0): E.NONE,
            ("x", 0): E.UNKNOWN_TOPIC_OR_PARTITION,
        }
        _, got = await h.coord.fetch_offsets("g", None)
        assert [t for t, _ in got] == ["t"]
        assert (await h.coord.delete_offsets("nope", [("t", [0])]))[0] is E.GROUP_ID_NOT_FOUND
        await h.coord.leave("g", [(a.member_id, None)])
        code, codes = await h.coord.delete_offsets("g", [("t", [0])])
        assert (code, codes) == (E.NONE, {("t", 0): E.NONE})
        assert await h.coord.fetch_offsets("g", None) == (E.NONE, [])

    run(scenario())


# --- admin ------------------------------------------------------------------------------
def test_describe_list_and_delete(h):
    async def scenario():
        h.topic()
        a, b = await h.join_and_sync("g", 2)
        await h.coord.commit("lonely", -1, "", None, [OffsetCommit("t", 0, 1)])
        d = await h.coord.describe("g")
        assert d.state is GroupState.STABLE and d.protocol_type == "consumer"
        assert d.protocol_data == "range"
        assert {m.member_id for m in d.members} == {a.member_id, b.member_id}
        assert all(m.assignment == f"for-{m.member_id}".encode() for m in d.members)
        assert all(m.client_host == "/127.0.0.1" for m in d.members)
        assert await h.coord.describe("nope") is None
        listed = {g.group_id: g for g in await h.coord.list()}
        assert listed["g"].state is GroupState.STABLE and listed["lonely"].protocol_type == ""
        assert [g.group_id for g in await h.coord.list({GroupState.EMPTY})] == ["lonely"]
        assert await h.coord.list(types={"consumer"}) == []
        assert len(await h.coord.list(types={"Classic"})) == 2
        codes = await h.coord.delete_groups(["g", "lonely", "nope"])
        assert codes == [E.NON_EMPTY_GROUP, E.NONE, E.GROUP_ID_NOT_FOUND]
        assert await h.coord.fetch_offsets("lonely", None) == (E.NONE, [])
        assert "lonely" not in h.coord.groups

    run(scenario())
    assert h.store.scan_state(OFFSETS_AREA, "lonely/") == []


def test_cleanup_removes_empty_groups_without_offsets(h):
    async def scenario():
        h.topic()
        (a,) = await h.join_and_sync("g", 1)
        (b,) = await h.join_and_sync("kept", 1)
        await h.coord.commit("kept", 1, b.member_id, None, [OffsetCommit("t", 0, 1)])
        await h.coord.leave("g", [(a.member_id, None)])
        await h.coord.leave("kept", [(b.member_id, None)])
        assert h.coord.cleanup() == ["g"]
        assert set(h.coord.groups) == {"kept"}

    run(scenario())


# --- durability -------------------------------------------------------------------------
def test_groups_and_offsets_survive_a_restart(h):
    state = {}

    async def before():
        h.topic()
        a, b = await h.join_and_sync("g", 2)
        await h.coord.commit(
            "g", a.generation, a.member_id, None, [OffsetCommit("t", 0, 11, metadata="m")]
        )
        (c,) = await h.join_and_sync("gone", 1)
        await h.coord.leave("gone", [(c.member_id, None)])
        await h.coord.writer.flush()
        state.update(a=a, b=b)

    async def after():
        a, b = state["a"], state["b"]
        g = h.coord
        await g.ready()
        assert g.groups["g"].state is GroupState.STABLE and g.groups["g"].generation == 1
        # Members carry on with their generation: no rebalance after a gateway restart.
        assert await h.heartbeat("g", a) is E.NONE
        s = await h.sync("g", b)
        assert s.assignment == f"for-{b.member_id}".encode()
        _, got = await g.fetch_offsets("g", [("t", [0])])
        assert (got[0][1][0][1].offset, got[0][1][0][1].metadata) == (11, "m")
        assert g.groups["gone"].state is GroupState.EMPTY and g.groups["gone"].generation == 2
        # The next generation continues from the stored one.
        (c,) = await h.join_and_sync("gone", 1)
        assert c.generation == 3

    run(before())
    h.restart()
    run(after())


def test_restored_members_that_never_return_expire(tmp_path):
    h = Harness(tmp_path / "s")

    async def before():
        await h.join_and_sync("g", 1) if False else None
        r = await h.join("g", session_timeout_ms=200)
        await h.sync("g", r, {r.member_id: b"x"})
        await h.coord.writer.flush()

    async def after():
        await h.coord.ready()
        assert h.coord.groups["g"].state is GroupState.STABLE
        await eventually(lambda: h.coord.groups["g"].state is GroupState.EMPTY, timeout=3)

    try:
        run(before())
        h.restart()
        run(after())
    finally:
        h.close()


def test_shutdown_answers_waiting_joins(h):
    async def scenario():
        (a,) = await h.join_and_sync("g", 1)
        waiting = asyncio.ensure_future(h.join("g", rebalance_timeout_ms=60_000))
        await eventually(lambda: h.coord.groups["g"].state is GroupState.PREPARING_REBALANCE)
        h.coord.shutdown()
        assert (await waiting).error is E.NOT_COORDINATOR
        assert (await h.coord.heartbeat("g", a.member_id, None, 1))[0] is E.NOT_COORDINATOR

    run(scenario())


def test_each_broker_owns_its_coordinator_with_ready_shutdown_and_close(tmp_path):
    store = open_store(f"leveldb://{tmp_path / 's'}")
    broker = Broker(store, GatewayConfig(groups=FAST))
    other = Broker(store, GatewayConfig(groups=FAST))

    async def scenario():
        coord = broker.groups
        await coord.ready()
        assert coord._loading.done() and other.groups is not coord
        assert coord.config is FAST
        h = Harness.__new__(Harness)
        h.coord = coord
        (a,) = await Harness.join_and_sync(h, "g", 1)
        broker.begin_shutdown()  # answers waiting joins and refuses heartbeats
        assert (await coord.heartbeat("g", a.member_id, None, 1))[0] is E.NOT_COORDINATOR
        await coord.close()

    try:
        run(scenario())
        assert len(store.scan_state("kafka.groups")) == 1
    finally:
        broker.close()
        other.close()
        store.close()
