"""The group coordinator of one gateway: membership (``Rebalancer``), committed offsets
(``Offsets``) and the operator APIs, over state loaded from the store.

A single gateway is the coordinator of every group. Each Broker builds one
(``broker.groups``) and the gateway's start-up calls ``ready()``; it loads the durable
state (group records and committed offsets) before answering its first request. Groups
that had members when the gateway stopped come back Stable with the same generation and
assignment, so their members carry on heartbeating; a member that does not come back
expires after its session timeout like any other.

With several gateways (``--cluster``), a gateway coordinates the groups of the slots it
holds the lease of (gateway/cluster.py; slots.py loads, hands over and drops them); a
request for any other group gets NOT_COORDINATOR, and the client asks FindCoordinator
again. Its groups come back on the next owner as they do after a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote

from tmsgate.protocol import ErrorCode

from ..loading import loaded
from .codec import (
    GROUPS_AREA,
    OFFSETS_AREA,
    CommittedOffset,
    CorruptState,
    GroupRecord,
    decode_group,
    decode_offset,
    encode_offset,
    group_key,
    offset_key,
    parse_offset_key,
)
from .config import GroupConfig
from .errors import GroupError
from .model import (
    CONSUMER_PROTOCOL,
    Group,
    JoinRequest,
    JoinResult,
    Member,
    SyncRequest,
    SyncResult,
    group_member,
)
from .offsets import (
    NO_OFFSET,
    FetchedOffset,
    OffsetCommit,
    Offsets,
    PreparedCommit,
    TopicPartition,
)
from .rebalance import Rebalancer
from .slots import SlotFence, SlotGroups
from .state import DEAD, EMPTY, PROCEED, STABLE, GroupState, Op, outcome
from .writer import StateWriter

if TYPE_CHECKING:
    from tmsgate.storage import Store

    from ...cluster import Cluster
    from ..pacing import Paced
    from ..store_futures import Blocking
    from ..topics import TopicRegistry

log = logging.getLogger("tmsgate.kafka.groups")
E = ErrorCode
WATCH_INTERVAL_S = 0.25
CLASSIC = "classic"  # ListGroups v5 group type


@dataclass(frozen=True, slots=True)
class MemberSummary:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupSummary:
    group_id: str
    state: GroupState
    protocol_type: str
    protocol_data: str
    members: tuple[MemberSummary, ...]


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: GroupState


class GroupCoordinator:
    def __init__(
        self,
        store: Store,
        config: GroupConfig,
        *,
        run: Blocking,
        paced: Paced,
        topics: TopicRegistry,
        cluster: Cluster | None = None,
    ) -> None:
        """``run`` and ``paced``: the broker's (store calls on its executor; loops over
        what a client sent giving the event loop back). ``cluster``: several gateways on
        the store (None: this one coordinates every group)."""
        self.store = store
        self.config = config
        self.run = run
        self.paced = paced
        fence = None if cluster is None else SlotFence(cluster)
        self.writer = StateWriter(store, run, fence)
        # With several gateways: the slots this one coordinates (None: every group)
        self.slots = None if cluster is None else SlotGroups(self, cluster)
        self.rebalancer = Rebalancer(config, self.writer, store.now_ms)
        self.offsets = Offsets(
            paced, topics, self.writer, config.offset_metadata_max_bytes, store.now_ms
        )
        self._loading: asyncio.Task[None] | None = None
        self._watcher: asyncio.Task[None] | None = None
        # group id -> (the lock ordering its commits, commits holding or awaiting it)
        self._commit_turns: dict[str, tuple[asyncio.Lock, int]] = {}
        self.closed = False

    @property
    def groups(self) -> dict[str, Group]:
        return self.rebalancer.groups

    # --- life cycle ---------------------------------------------------------------------
    async def ready(self, group_id: str | None = None) -> None:
        """Load the durable state once; concurrent first requests wait for the same load.
        In a cluster, NOT_COORDINATOR unless this gateway coordinates ``group_id`` now,
        whose slot is then loaded (``None``: every slot this gateway holds)."""
        if self.closed:
            raise GroupError(E.NOT_COORDINATOR, "the gateway is shutting down")
        if self.slots is not None:
            await self.slots.ready(group_id)
            if self.closed:
                raise GroupError(E.NOT_COORDINATOR, "the gateway is shutting down")
            return
        if loaded(self._loading):
            return  # every request after the load: no shield to build
        if self._loading is None:
            self._loading = asyncio.get_running_loop().create_task(self._load())
        try:
            await asyncio.shield(self._loading)
        except Exception as exc:
            self._loading = None  # retry on the next request
            log.error("loading consumer groups failed: %s", exc)
            raise GroupError(E.COORDINATOR_NOT_AVAILABLE, f"loading groups failed: {exc}") from exc
        if self.closed:
            raise GroupError(E.NOT_COORDINATOR, "the gateway is shutting down")

    async def _load(self) -> None:
        started = time.perf_counter()
        records = await self.run(self.store.scan_state, GROUPS_AREA)
        rows = await self.run(self.store.scan_state, OFFSETS_AREA)
        self.restore(records, rows)
        self.watch()
        active = sum(1 for g in self.groups.values() if g.members)
        log.info(
            "loaded %d consumer groups (%d with members) and %d committed offsets in %.0f ms",
            len(self.groups),
            active,
            len(rows),
            (time.perf_counter() - started) * 1000,
        )

    def restore(self, records: list[tuple[str, bytes]], rows: list[tuple[str, bytes]]) -> int:
        """Groups and committed offsets from their rows; -> how many groups."""
        before = len(self.groups)
        for key, raw in rows:
            try:
                group_id, topic, partition = parse_offset_key(key)
                self.offsets.load(group_id, topic, partition, decode_offset(raw))
            except CorruptState as exc:
                log.error("skipping committed offset %r: %s", key, exc)
        for key, raw in records:
            try:
                self._restore(decode_group(unquote(key), raw))
            except CorruptState as exc:
                log.error("skipping group record %r: %s", key, exc)
        for group_id in self.offsets.group_ids():
            self.groups.setdefault(group_id, self.rebalancer.new_group(group_id))
        return len(self.groups) - before

    def watch(self) -> None:
        """Start the watcher (once)."""
        if self._watcher is None and not self.closed:
            self._watcher = asyncio.get_running_loop().create_task(self._watch())

    def forget(self, group: Group) -> None:
        """The group leaves memory (another gateway coordinates it now): its timers stop
        and its waiting members are told NOT_COORDINATOR, as at shutdown."""
        self.rebalancer.cancel_timers(group)
        for member in group.members.values():
            member.answer_join(JoinResult(E.NOT_COORDINATOR, member.member_id))
            member.answer_sync(SyncResult(E.NOT_COORDINATOR))
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]

    def _restore(self, record: GroupRecord) -> None:
        group = Group(
            record.group_id,
            generation=record.generation,
            protocol_type=record.protocol_type,
            protocol_name=record.protocol_name,
            state_ms=record.state_ms,
        )
        for m in record.members:
            group.add(
                Member(
                    m.member_id,
                    m.instance_id,
                    m.client_id,
                    m.client_host,
                    m.session_timeout_ms,
                    m.rebalance_timeout_ms,
                    record.protocol_type or "",
                    ((record.protocol_name or "", m.metadata),),
                    assignment=m.assignment,
                )
            )
        group.leader_id = record.leader_id if record.leader_id in group.members else group.leader_id
        group.state = STABLE if group.members else EMPTY
        self.groups[group.group_id] = group
        for member in group.members.values():
            self.rebalancer.schedule_expiry(group, member)

    async def _watch(self) -> None:
        """Notice the gateway shutting down, and remove empty groups now and then."""
        interval = self.config.cleanup_interval_ms / 1000
        next_cleanup = time.monotonic() + interval
        while not self.closed:  # shutdown() (Broker.begin_shutdown) ends it
            await asyncio.sleep(WATCH_INTERVAL_S)
            if interval > 0 and time.monotonic() >= next_cleanup:
                next_cleanup = time.monotonic() + interval
                self.cleanup()

    def cleanup(self) -> list[str]:
        """Kafka's periodic cleanup: empty groups with no committed offsets go away."""
        gone = [
            g
            for g in self.groups.values()
            if g.state is EMPTY
            and g.is_empty
            and not self.offsets.has_offsets(g.group_id)
            and (self.slots is None or self.slots.serves(g.group_id))
        ]
        for group in gone:
            fut = self._delete(group)
            fut.add_done_callback(lambda f: f.cancelled() or f.exception())
        if gone:
            log.info("removed %d empty groups without committed offsets", len(gone))
        return [g.group_id for g in gone]

    def shutdown(self) -> None:
        """Answer every waiting JoinGroup/SyncGroup with NOT_COORDINATOR (the clients find
        the coordinator again, i.e. this gateway once it is back) and stop all timers."""
        if self.closed:
            return
        self.closed = True
        for group in self.groups.values():
            self.rebalancer.cancel_timers(group)
            for member in group.members.values():
                member.answer_join(JoinResult(E.NOT_COORDINATOR, member.member_id))
                member.answer_sync(SyncResult(E.NOT_COORDINATOR))
        if self._watcher is not None and self._watcher is not _current_task():
            self._watcher.cancel()
        log.info("group coordinator stopped (%d groups)", len(self.groups))

    async def close(self) -> None:
        """shutdown(), then wait for queued state writes."""
        self.shutdown()
        with contextlib.suppress(Exception):
            await self.writer.flush()

    # --- membership ---------------------------------------------------------------------
    async def join(self, req: JoinRequest) -> JoinResult:
        try:
            await self.ready(req.group_id)
        except GroupError as exc:
            return JoinResult(exc.code, req.member_id, message=str(exc))
        return await self.rebalancer.join(req)

    async def sync(self, req: SyncRequest) -> SyncResult:
        try:
            await self.ready(req.group_id)
        except GroupError as exc:
            return SyncResult(exc.code, message=str(exc))
        return await self.rebalancer.sync(req)

    async def heartbeat(
        self, group_id: str, member_id: str, instance_id: str | None, generation: int
    ) -> tuple[ErrorCode, str | None]:
        """Heartbeat: keeps the member's session alive; during a rebalance the answer is
        REBALANCE_IN_PROGRESS, which makes it rejoin."""
        try:
            await self.ready(group_id)
            group, member = group_member(self.groups, group_id, member_id, instance_id, generation)
        except GroupError as exc:
            self.rebalancer.log_refusal("Heartbeat", group_id, member_id, exc)
            return exc.code, str(exc)
        self.rebalancer.schedule_expiry(group, member)
        result = outcome(Op.HEARTBEAT, group.state)
        assert result is not PROCEED
        return result, None

    async def leave(
        self, group_id: str, leaving: list[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """LeaveGroup: (group error, one error per leaving member)."""
        try:
            await self.ready(group_id)
        except GroupError as exc:
            return exc.code, [exc.code] * len(leaving)
        if not group_id:
            return E.INVALID_GROUP_ID, [E.INVALID_GROUP_ID] * len(leaving)
        group = self.groups.get(group_id)
        if group is None:
            return E.NONE, [E.UNKNOWN_MEMBER_ID] * len(leaving)
        # Paced: the members leaving are what the client sent. Each leaves on its own
        # (the group may rebalance between two), as when they leave one request each.
        return E.NONE, [self._leave_one(group, mid, iid) async for mid, iid in self.paced(leaving)]

    def _leave_one(self, group: Group, member_id: str, instance_id: str | None) -> ErrorCode:
        if not member_id:  # KIP-345: a static member leaves by instance id
            member_id = group.static_members.get(instance_id or "", "")
            if not member_id:
                return E.UNKNOWN_MEMBER_ID
        elif member_id in group.pending_members:
            handle = group.pending_members.pop(member_id)
            if handle is not None:
                handle.cancel()
            self.rebalancer.try_complete_join(group)
            return E.NONE
        else:
            error = group.check_member(member_id, instance_id)
            if error is not None:
                return error.code
        log.info("group %r: member %s left", group.group_id, member_id)
        self.rebalancer.remove_member(group, member_id, f"member {member_id} left")
        return E.NONE

    # --- offsets ------------------------------------------------------------------------
    async def commit(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        items: list[OffsetCommit],
    ) -> dict[TopicPartition, ErrorCode]:
        """OffsetCommit: per-partition error codes (NONE once fsynced)."""
        # The loops over ``items`` (what the client sent) are paced; see Broker.paced.
        paced = self.paced
        try:
            await self.ready(group_id)
        except GroupError as exc:
            return {(i.topic, i.partition): exc.code async for i in paced(items)}
        code = E.NONE
        written: asyncio.Future[None] | None = None
        async with self._commit_turn(group_id):
            topics = await self.offsets.topics(i.topic for i in items)
            errors = await self.offsets.check(items, topics)
            async for (t, p), error in paced(errors.items()):
                log.info("OffsetCommit group=%r %s-%d: %s", group_id, t, p, error.name)
            accepted = [i async for i in paced(items) if (i.topic, i.partition) not in errors]
            if accepted:
                prepared = await self.offsets.prepare(group_id, accepted, topics)
                # No await from asking the group to queueing the write: a rebalance must
                # not come between them.
                code, why = self._may_commit(group_id, generation, member_id, instance_id)
                if code is not E.NONE:
                    log.info(
                        "OffsetCommit group=%r member=%s generation=%d: %s: %s",
                        group_id,
                        member_id or "-",
                        generation,
                        code.name,
                        why,
                    )
                else:
                    written = self.offsets.store(prepared)
        if written is not None:
            try:
                await asyncio.shield(written)
            except GroupError as exc:  # the slot moved on: the client finds its new home
                log.info("OffsetCommit group=%r: %s", group_id, exc)
                code = exc.code
            except Exception as exc:
                log.error("OffsetCommit group=%r: storing offsets failed: %s", group_id, exc)
                code = E.COORDINATOR_NOT_AVAILABLE
        async for i in paced(accepted):
            errors[(i.topic, i.partition)] = code
        return {
            (i.topic, i.partition): errors.get((i.topic, i.partition), E.NONE)
            async for i in paced(items)
        }

    # --- transactional offsets (TxnOffsetCommit, applied by the transaction coordinator) ---
    def check_transactional_member(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> tuple[ErrorCode, str]:
        """TxnOffsetCommit v3+ (KIP-447): a member that names itself must be a member of the
        group's current generation; a producer without group metadata (generation -1, no
        member) is not checked, as in Kafka."""
        if generation < 0 and not member_id and instance_id is None:
            return E.NONE, ""
        group = self.groups.get(group_id)
        if group is None:
            return E.ILLEGAL_GENERATION, f"group {group_id!r} does not exist"
        error = group.check_member(member_id, instance_id)
        if error is not None:
            return error.code, str(error)
        if generation != group.generation:
            return E.ILLEGAL_GENERATION, f"the group's generation is {group.generation}"
        return E.NONE, ""

    async def commit_transactional(
        self,
        group_id: str,
        offsets: dict[TopicPartition, tuple[int, int, str]],
        commit_ms: int,
        replay: bool,
    ) -> None:
        """Commit a Kafka transaction's offsets (offset, leader epoch, metadata) with the
        time its commit was decided. ``replay`` (finishing a recorded commit after a
        restart): a partition committed later than that is left as it is, so a replay
        never moves an offset back. Offsets of topics gone since are dropped."""
        await self.ready(group_id)
        written = None
        async with self._commit_turn(group_id):
            topics = await self.offsets.topics({t for t, _ in offsets})
            current = self.offsets.committed(group_id)
            rows: dict[TopicPartition, CommittedOffset] = {}
            updates: dict[tuple[str, str], bytes | None] = {}
            for (t, p), (offset, leader_epoch, metadata) in offsets.items():
                info = topics.get(t)
                before = current.get((t, p))
                if info is None or (replay and before is not None and before.commit_ms > commit_ms):
                    continue
                c = CommittedOffset(
                    offset, leader_epoch, metadata, commit_ms, bytes(info.metadata.topic_uuid)
                )
                rows[(t, p)] = c
                updates[(OFFSETS_AREA, offset_key(group_id, t, p))] = encode_offset(c)
            self.groups.setdefault(group_id, self.rebalancer.new_group(group_id))
            if rows:
                written = self.offsets.store(PreparedCommit(group_id, rows, updates))
        if written is not None:
            await asyncio.shield(written)

    @contextlib.asynccontextmanager
    async def _commit_turn(self, group_id: str) -> AsyncIterator[None]:
        """Commits to one group queue their writes in the order they arrived, so that the
        later commit of a partition wins: their paced loops give the event loop back, and
        a commit that started later could otherwise overtake one naming more partitions.
        The fsync is awaited after the turn, so concurrent commits still share it."""
        lock, users = self._commit_turns.get(group_id, (asyncio.Lock(), 0))
        self._commit_turns[group_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._commit_turns[group_id]
            if users == 1:
                del self._commit_turns[group_id]
            else:
                self._commit_turns[group_id] = (lock, users - 1)

    def _may_commit(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> tuple[ErrorCode, str]:
        group = self.groups.get(group_id)
        if group is None:
            if generation < 0:  # offsets only: the group exists from now on, empty
                self.groups[group_id] = self.rebalancer.new_group(group_id)
                return E.NONE, ""
            return E.ILLEGAL_GENERATION, f"group {group_id!r} does not exist"
        if generation < 0 and group.state is EMPTY:
            return E.NONE, ""  # an admin, or a consumer without group management
        error = group.check_member(member_id, instance_id)
        if error is not None:
            return error.code, str(error)
        member = group.members[member_id]
        if generation != group.generation:
            return E.ILLEGAL_GENERATION, f"the group's generation is {group.generation}"
        result = outcome(Op.COMMIT, group.state)
        if result is not PROCEED:
            return result, f"the group is {group.state.value}"
        self.rebalancer.schedule_expiry(group, member)
        return E.NONE, ""

    async def fetch_offsets(
        self, group_id: str, topics: list[tuple[str, list[int]]] | None
    ) -> tuple[ErrorCode, list[tuple[str, list[tuple[int, FetchedOffset]]]]]:
        """OffsetFetch: ``topics`` None means every topic the group has offsets for."""
        paced = self.paced  # a 1 MB request names ~80,000 topics
        try:
            await self.ready(group_id)
        except GroupError as exc:
            failed = FetchedOffset(error=exc.code)
            return exc.code, [
                (t, [(p, failed) async for p in paced(ps)]) async for t, ps in paced(topics or [])
            ]
        names = None if topics is None else {t async for t, _ in paced(topics)}
        live = await self.offsets.live(group_id, names)
        if topics is None:
            by_topic: dict[str, list[tuple[int, FetchedOffset]]] = {}
            async for (t, p), c in paced(sorted(live.items())):
                by_topic.setdefault(t, []).append(
                    (p, FetchedOffset(c.offset, c.leader_epoch, c.metadata))
                )
            return E.NONE, list(by_topic.items())
        out = []
        async for name, partitions in paced(topics):
            parts = []
            async for p in paced(partitions):
                c = live.get((name, p))
                parts.append(
                    (
                        p,
                        NO_OFFSET
                        if c is None
                        else FetchedOffset(c.offset, c.leader_epoch, c.metadata),
                    )
                )
            out.append((name, parts))
        return E.NONE, out

    async def delete_offsets(
        self, group_id: str, topics: list[tuple[str, list[int]]]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete: refused for partitions of topics a live consumer group reads."""
        try:
            await self.ready(group_id)
        except GroupError as exc:
            return exc.code, {}
        group = self.groups.get(group_id)
        if group is None:
            return E.GROUP_ID_NOT_FOUND, {}
        paced = self.paced  # ``topics`` is what the client sent
        infos = await self.offsets.topics(t for t, _ in topics)
        errors: dict[TopicPartition, ErrorCode] = {}
        # Each partition once, in request order: a request may name one many times.
        found: dict[TopicPartition, None] = {}
        async for name, partitions in paced(topics):
            async for p in paced(partitions):
                info = infos.get(name)
                if info is None or not 0 <= p < info.partitions:
                    errors[(name, p)] = E.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    found[(name, p)] = None
        if self.groups.get(group_id) is not group:
            return E.GROUP_ID_NOT_FOUND, {}
        wanted = list(found)
        if group.state is not EMPTY:
            if group.protocol_type != CONSUMER_PROTOCOL:
                return E.NON_EMPTY_GROUP, {}
            subscribed = group.subscribed_topics()
            kept: list[TopicPartition] = []
            for tp in wanted:  # no await: the group's subscriptions must not change meanwhile
                if subscribed is None or tp[0] in subscribed:
                    errors[tp] = E.GROUP_SUBSCRIBED_TO_TOPIC
                else:
                    kept.append(tp)
            wanted = kept
        if wanted:
            try:
                await asyncio.shield(self.offsets.delete(group_id, wanted))
                log.info("group %r: deleted offsets of %s", group_id, wanted)
            except Exception as exc:
                log.error("OffsetDelete group=%r failed: %s", group_id, exc)
                errors.update({tp: E.COORDINATOR_NOT_AVAILABLE for tp in wanted})
        return E.NONE, {**{tp: E.NONE for tp in wanted}, **errors}

    # --- operator APIs ------------------------------------------------------------------
    async def describe(self, group_id: str) -> GroupSummary | None:
        await self.ready(group_id)
        group = self.groups.get(group_id)
        if group is None:
            return None
        stable = group.state is STABLE
        members = tuple(
            MemberSummary(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                m.metadata(group.protocol_name) if stable else b"",
                m.assignment if stable else b"",
            )
            for m in group.members.values()
        )
        return GroupSummary(
            group.group_id,
            group.state,
            group.protocol_type or "",
            (group.protocol_name or "") if stable else "",
            members,
        )

    async def list(
        self, states: set[GroupState] | None = None, types: set[str] | None = None
    ) -> list[ListedGroup]:
        await self.ready()  # in a cluster: every slot this gateway holds
        if types and CLASSIC not in {t.lower() async for t in self.paced(types)}:
            return []
        # Kafka: each broker lists the groups it coordinates (admin clients ask them all).
        serves = None if self.slots is None else self.slots.serves
        # A snapshot, paced: clients can make groups by the hundred thousand (a commit
        # with generation -1 makes one), and the dict may change while this yields.
        return [
            ListedGroup(g.group_id, g.protocol_type or "", g.state)
            async for g in self.paced(list(self.groups.values()))
            if (not states or g.state in states) and (serves is None or serves(g.group_id))
        ]

    async def delete_groups(self, group_ids: list[str]) -> list[ErrorCode]:
        if self.slots is None:
            await self.ready()
        results: list[ErrorCode] = []
        writes = []
        # Paced (the ids are what the client sent); each group is checked and deleted with
        # no await between, so no join can slip in between the two.
        async for group_id in self.paced(group_ids):
            if self.slots is not None:  # per group: each may be coordinated elsewhere
                try:
                    await self.ready(group_id)
                except GroupError as exc:
                    results.append(exc.code)
                    continue
            group = self.groups.get(group_id)
            if group is None:
                results.append(E.GROUP_ID_NOT_FOUND)
            elif group.state is not EMPTY:
                log.info("DeleteGroups %r: NON_EMPTY_GROUP (%s)", group_id, group.state.value)
                results.append(E.NON_EMPTY_GROUP)
            else:
                writes.append((len(results), self._delete(group)))
                results.append(E.NONE)
                log.info("deleted group %r", group_id)
        async for index, fut in self.paced(writes):  # done futures do not yield
            try:
                await asyncio.shield(fut)
            except Exception as exc:
                log.error("DeleteGroups %r failed: %s", group_ids[index], exc)
                failed = isinstance(exc, GroupError)  # NOT_COORDINATOR: the slot moved
                results[index] = exc.code if failed else E.COORDINATOR_NOT_AVAILABLE
        return results

    def _delete(self, group: Group) -> asyncio.Future[None]:
        group.transition(DEAD, self.store.now_ms())
        self.rebalancer.cancel_timers(group)
        del self.groups[group.group_id]
        return self.offsets.drop_group(
            group.group_id, {(GROUPS_AREA, group_key(group.group_id)): None}
        )


def _current_task() -> asyncio.Task[object] | None:
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None
