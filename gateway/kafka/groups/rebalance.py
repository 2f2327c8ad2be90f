"""The classic rebalance protocol, as Kafka's GroupCoordinator runs it: JoinGroup,
SyncGroup, Heartbeat and LeaveGroup, with the timers behind them.

- A join from a new member (KIP-394) first gets MEMBER_ID_REQUIRED and an id; the
  member joins again with it. A join that changes membership moves the group to
  PreparingRebalance; its JoinGroup is answered when every member has rejoined (or the
  rebalance timeout drops the ones that did not), with a new generation. The leader
  gets every member's metadata, computes the assignment and sends it in SyncGroup;
  the other members' SyncGroups wait for it. Then the group is Stable.
- Members heartbeat within their session timeout or are removed, which starts the
  next rebalance; during one, heartbeats answer REBALANCE_IN_PROGRESS so members rejoin.
- An empty group's first rebalance waits group.initial.rebalance.delay.ms for more
  members (extended while they keep arriving in the first generation).
- Static members (group.instance.id, KIP-345) keep their place across restarts: a
  rejoin with the same instance id takes over the old member id without a rebalance,
  and an old member id using the instance id afterwards is FENCED_INSTANCE_ID.

Everything here runs on the event loop; timers are ``loop.call_later`` handles. The
only awaits are durable writes, after which the group is re-checked (generation and
state) before acting, as Kafka's callbacks do.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

from tmsgate.protocol import ErrorCode

from .codec import GROUPS_AREA, encode_group, group_key
from .config import GroupConfig
from .errors import GroupError
from .model import (
    Group,
    JoinRequest,
    JoinResult,
    Member,
    SyncRequest,
    SyncResult,
    group_member,
)
from .state import (
    CAN_REBALANCE,
    COMPLETING,
    EMPTY,
    PREPARING,
    PROCEED,
    STABLE,
    Op,
    outcome,
)
from .writer import StateWriter

log = logging.getLogger("tmsgate.kafka.groups")
E = ErrorCode


class Rebalancer:
    """Membership and rebalances of every group of one gateway."""

    def __init__(self, config: GroupConfig, writer: StateWriter, clock: Callable[[], int]) -> None:
        """``clock``: the store's (``Store.now_ms``), for the groups' state times."""
        self.config = config
        self.writer = writer
        self.clock = clock
        self.groups: dict[str, Group] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        # (api, error) -> (when last logged at INFO, refusals not logged since)
        self._refusals: dict[tuple[str, ErrorCode], tuple[float, int]] = {}

    def new_group(self, group_id: str) -> Group:
        """An empty group, entering its state now."""
        return Group(group_id, state_ms=self.clock())

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    # --- JoinGroup ----------------------------------------------------------------------
    async def join(self, req: JoinRequest) -> JoinResult:
        try:
            answer = self._join(req)
        except GroupError as exc:
            self.log_refusal("JoinGroup", req.group_id, req.member_id, exc)
            return JoinResult(exc.code, req.member_id, message=str(exc))
        if isinstance(answer, JoinResult):
            return answer
        # Shielded: a closed connection must not cancel the member's place in the round.
        return await asyncio.shield(answer)

    def _join(self, req: JoinRequest) -> JoinResult | asyncio.Future[JoinResult]:
        cfg = self.config
        if not req.group_id:
            raise GroupError(E.INVALID_GROUP_ID, "the group id must not be empty")
        if not cfg.min_session_timeout_ms <= req.session_timeout_ms <= cfg.max_session_timeout_ms:
            raise GroupError(
                E.INVALID_SESSION_TIMEOUT,
                f"session timeout {req.session_timeout_ms} ms is outside "
                f"[{cfg.min_session_timeout_ms}, {cfg.max_session_timeout_ms}] ms "
                "(group.min/max.session.timeout.ms)",
            )
        unknown = req.member_id == ""
        group = self.groups.get(req.group_id)
        if group is None:
            if not unknown:
                raise GroupError(E.UNKNOWN_MEMBER_ID, f"group {req.group_id!r} does not exist")
            group = self.new_group(req.group_id)
        self._check_size(group, req)
        names = [name for name, _ in req.protocols]
        if not group.supports(req.protocol_type, names):
            raise GroupError(
                E.INCONSISTENT_GROUP_PROTOCOL,
                f"protocol type {req.protocol_type!r} with protocols {names} does not match "
                f"group {req.group_id!r} (type {group.protocol_type!r}, protocols all "
                f"members support: {sorted(group.candidate_protocols())})",
            )
        self.groups.setdefault(req.group_id, group)
        return self._join_new(group, req) if unknown else self._join_known(group, req)

    def _check_size(self, group: Group, req: JoinRequest) -> None:
        limit = self.config.max_size
        if not limit or req.member_id in group.members:
            return
        size = len(group.members) + (len(group.pending_members) if not req.member_id else 0)
        if size >= limit:
            raise GroupError(
                E.GROUP_MAX_SIZE_REACHED,
                f"group {req.group_id!r} already has {size} members (group.max.size {limit})",
            )

    def _join_new(self, group: Group, req: JoinRequest) -> JoinResult | asyncio.Future[JoinResult]:
        new_id = f"{req.client_id}-{uuid.uuid4()}"
        if req.instance_id is not None:
            old_id = group.static_members.get(req.instance_id)
            if old_id is not None:
                return self._replace_static(group, req, old_id, new_id)
            return self._add_member(group, req, new_id)
        if req.require_known_member_id:
            handle = self.loop.call_later(
                req.session_timeout_ms / 1000, self._expire_pending, group, new_id
            )
            group.pending_members[new_id] = handle
            return JoinResult(
                E.MEMBER_ID_REQUIRED,
                new_id,
                message="rejoin with the member id given in this response (KIP-394)",
            )
        return self._add_member(group, req, new_id)

    def _join_known(
        self, group: Group, req: JoinRequest
    ) -> JoinResult | asyncio.Future[JoinResult]:
        mid = req.member_id
        if mid in group.pending_members:
            handle = group.pending_members.pop(mid)
            if handle is not None:
                handle.cancel()
            return self._add_member(group, req, mid)
        error = group.check_member(mid, req.instance_id)
        if error is not None:
            raise error
        member = group.members[mid]
        result = outcome(Op.JOIN, group.state)
        if result is not PROCEED:
            raise GroupError(result, f"group {group.group_id!r} is {group.state.value}")
        reason = f"member {mid} rejoined" + (f" ({req.reason})" if req.reason else "")
        if group.state is PREPARING:
            return self._update_member(group, member, req, reason)
        if group.state is COMPLETING:
            if member.matches(req.protocols):
                return self._current_generation(group, member)
            return self._update_member(group, member, req, reason + " with new metadata")
        if group.leader_id == mid or not member.matches(req.protocols):
            return self._update_member(group, member, req, reason)
        return self._current_generation(group, member)  # a follower with nothing new

    def _current_generation(self, group: Group, member: Member) -> JoinResult:
        leader = group.leader_id == member.member_id
        return JoinResult(
            E.NONE,
            member.member_id,
            group.generation,
            group.protocol_type,
            group.protocol_name,
            group.leader_id or "",
            group.joined_members() if leader else (),
        )

    def _add_member(
        self, group: Group, req: JoinRequest, member_id: str
    ) -> asyncio.Future[JoinResult]:
        member = Member(
            member_id,
            req.instance_id,
            req.client_id,
            req.client_host,
            req.session_timeout_ms,
            req.rebalance_timeout_ms,
            req.protocol_type,
            req.protocols,
            is_new=True,
        )
        waiter = member.join_waiter = self.loop.create_future()
        if group.state is PREPARING and group.generation == 0:
            group.new_member_added = True
        group.add(member)
        self.schedule_expiry(group, member, self.config.new_member_join_timeout_ms)
        static = f" (instance {req.instance_id})" if req.instance_id else ""
        self._rebalance(group, f"new member {member_id}{static} joined")
        return waiter

    def _update_member(
        self, group: Group, member: Member, req: JoinRequest, reason: str
    ) -> asyncio.Future[JoinResult]:
        member.protocols = req.protocols
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.client_id, member.client_host = req.client_id, req.client_host
        # A second JoinGroup replaces the first, whose client has stopped waiting for it.
        member.answer_join(JoinResult(E.REBALANCE_IN_PROGRESS, member.member_id))
        waiter = member.join_waiter = self.loop.create_future()
        self._rebalance(group, reason)
        return waiter

    def _replace_static(
        self, group: Group, req: JoinRequest, old_id: str, new_id: str
    ) -> asyncio.Future[JoinResult]:
        assert req.instance_id is not None
        old_leader = group.leader_id
        member = group.replace_static(req.instance_id, old_id, new_id)
        member.protocols = req.protocols
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.client_id, member.client_host = req.client_id, req.client_host
        waiter = member.join_waiter = self.loop.create_future()
        self.schedule_expiry(group, member)
        log.info(
            "group %r: static member %s rejoined as %s (was %s) in state %s",
            group.group_id,
            req.instance_id,
            new_id,
            old_id,
            group.state.value,
        )
        reason = f"static member {req.instance_id} rejoined"
        if group.state is STABLE:
            if group.select_protocol() == group.protocol_name:
                self._spawn(
                    self._confirm_static(group, member, old_leader, req, self.store_group(group))
                )
            else:
                self._rebalance(group, reason + " with a different protocol")
        elif group.state is COMPLETING:
            # Its old id may already be in the leader's assignment: assign again.
            self._prepare_rebalance(group, reason + " while the assignment was pending")
        else:
            self.try_complete_join(group)
        return waiter

    async def _confirm_static(
        self,
        group: Group,
        member: Member,
        old_leader: str | None,
        req: JoinRequest,
        stored: asyncio.Future[None],
    ) -> None:
        """A static member back in a stable group keeps its assignment: persist its new
        id, then tell it the current generation (its SyncGroup returns the assignment).
        A returning leader that cannot skip the assignment (JoinGroup < v9) is told the
        old leader id, so it acts as a follower and does not reassign."""
        generation = group.generation
        try:
            await asyncio.shield(stored)
            error = E.NONE
        except Exception as exc:
            log.error("group %r: persisting static member failed: %s", group.group_id, exc)
            error = E.COORDINATOR_NOT_AVAILABLE
        if group.generation != generation or group.members.get(member.member_id) is not member:
            return  # a rebalance or removal answered the join meanwhile
        if error is not E.NONE:
            member.answer_join(JoinResult(error, member.member_id))
            return
        skip = req.supports_skip_assignment and group.leader_id == member.member_id
        member.answer_join(
            JoinResult(
                E.NONE,
                member.member_id,
                group.generation,
                group.protocol_type,
                group.protocol_name,
                (group.leader_id if skip else old_leader) or "",
                group.joined_members() if skip else (),
                skip_assignment=skip,
            )
        )

    def _expire_pending(self, group: Group, member_id: str) -> None:
        if group.pending_members.pop(member_id, None) is None:
            return
        log.info(
            "group %r: pending member %s did not rejoin within its session timeout",
            group.group_id,
            member_id,
        )
        self.try_complete_join(group)

    # --- rebalancing --------------------------------------------------------------------
    def _rebalance(self, group: Group, reason: str) -> None:
        if group.state in CAN_REBALANCE:
            self._prepare_rebalance(group, reason)
        self.try_complete_join(group)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.state is COMPLETING:
            self._reset_assignments(group, E.REBALANCE_IN_PROGRESS)
        self._cancel_sync_timer(group)
        was_empty = group.state is EMPTY
        group.transition(PREPARING, self.clock())
        log.info(
            "group %r: preparing to rebalance (generation %d, %d members): %s",
            group.group_id,
            group.generation,
            len(group.members),
            reason,
        )
        self._cancel_rebalance_timer(group)
        if was_empty:
            delay = self.config.initial_rebalance_delay_ms
            group.initial_delay_left_ms = max(group.rebalance_timeout_ms() - delay, 0)
            group.rebalance_timer = self.loop.call_later(
                delay / 1000, self._initial_delay_over, group
            )
        else:
            group.initial_delay_left_ms = None
            group.rebalance_timer = self.loop.call_later(
                group.rebalance_timeout_ms() / 1000, self._rebalance_timed_out, group
            )
            self.try_complete_join(group)  # e.g. the last member just left

    def _initial_delay_over(self, group: Group) -> None:
        group.rebalance_timer = None
        if not self._current(group) or group.state is not PREPARING:
            return
        left = group.initial_delay_left_ms or 0
        if group.new_member_added and left > 0:
            group.new_member_added = False
            delay = min(self.config.initial_rebalance_delay_ms, left)
            group.initial_delay_left_ms = left - delay
            group.rebalance_timer = self.loop.call_later(
                delay / 1000, self._initial_delay_over, group
            )
            return
        group.initial_delay_left_ms = None
        self._complete_join(group)

    def _rebalance_timed_out(self, group: Group) -> None:
        group.rebalance_timer = None
        if self._current(group) and group.state is PREPARING:
            self._complete_join(group)

    def try_complete_join(self, group: Group) -> None:
        if group.state is PREPARING and group.initial_delay_left_ms is None and group.all_joined():
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        self._cancel_rebalance_timer(group)
        for member in list(group.members.values()):
            if not member.awaiting_join and member.instance_id is None:
                log.info(
                    "group %r: removing member %s, which did not rejoin within the "
                    "rebalance timeout",
                    group.group_id,
                    member.member_id,
                )
                group.remove(member.member_id)
        if group.members and not group.elect_joined_leader():
            log.warning(
                "group %r: no member rejoined; waiting for the static members to return or expire",
                group.group_id,
            )
            group.rebalance_timer = self.loop.call_later(
                group.rebalance_timeout_ms() / 1000, self._rebalance_timed_out, group
            )
            return
        group.generation += 1
        if not group.members:
            group.protocol_name = None
            group.transition(EMPTY, self.clock())
            log.info("group %r: generation %d is empty", group.group_id, group.generation)
            self._store_quietly(group)
            return
        try:
            group.protocol_name = group.select_protocol()
        except ValueError as exc:  # unreachable while joins check supports(); never stall
            group.protocol_name = group.members[group.leader_id or ""].protocol_names()[0]
            log.error(
                "group %r: %s; using the leader's %s", group.group_id, exc, group.protocol_name
            )
        group.transition(COMPLETING, self.clock())
        log.info(
            "group %r: generation %d with %d members, leader %s, protocol %s",
            group.group_id,
            group.generation,
            len(group.members),
            group.leader_id,
            group.protocol_name,
        )
        joined = group.joined_members()
        for member in group.members.values():
            leader = member.member_id == group.leader_id
            member.answer_join(
                JoinResult(
                    E.NONE,
                    member.member_id,
                    group.generation,
                    group.protocol_type,
                    group.protocol_name,
                    group.leader_id or "",
                    joined if leader else (),
                )
            )
            member.is_new = False
            self.schedule_expiry(group, member)
        group.pending_sync = set(group.members)
        group.sync_timer = self.loop.call_later(
            group.rebalance_timeout_ms() / 1000, self._sync_timed_out, group, group.generation
        )

    def _sync_timed_out(self, group: Group, generation: int) -> None:
        group.sync_timer = None
        if not self._current(group) or group.generation != generation:
            return
        if group.state not in (COMPLETING, STABLE) or not group.pending_sync:
            return
        missing = sorted(group.pending_sync)
        log.info(
            "group %r: removing members %s, which sent no SyncGroup within the rebalance timeout",
            group.group_id,
            missing,
        )
        for member_id in missing:
            self._drop(group, member_id)
        self._prepare_rebalance(group, f"members {missing} did not sync")

    def _reset_assignments(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            member.answer_sync(SyncResult(error))

    # --- SyncGroup ----------------------------------------------------------------------
    async def sync(self, req: SyncRequest) -> SyncResult:
        try:
            answer = self._sync(req)
        except GroupError as exc:
            self.log_refusal("SyncGroup", req.group_id, req.member_id, exc)
            return SyncResult(exc.code, message=str(exc))
        if isinstance(answer, SyncResult):
            return answer
        return await asyncio.shield(answer)

    def _sync(self, req: SyncRequest) -> SyncResult | asyncio.Future[SyncResult]:
        group, member = group_member(
            self.groups, req.group_id, req.member_id, req.instance_id, req.generation
        )
        if (req.protocol_type is not None and req.protocol_type != group.protocol_type) or (
            req.protocol_name is not None and req.protocol_name != group.protocol_name
        ):
            raise GroupError(
                E.INCONSISTENT_GROUP_PROTOCOL,
                f"SyncGroup names protocol {req.protocol_type}/{req.protocol_name}, the group "
                f"uses {group.protocol_type}/{group.protocol_name}",
            )
        result = outcome(Op.SYNC, group.state)
        if result is not PROCEED:
            raise GroupError(result, f"group {group.group_id!r} is {group.state.value}")
        group.pending_sync.discard(member.member_id)
        self.schedule_expiry(group, member)
        if group.state is STABLE:
            return SyncResult(E.NONE, member.assignment, group.protocol_type, group.protocol_name)
        member.answer_sync(SyncResult(E.REBALANCE_IN_PROGRESS))  # a repeated SyncGroup
        waiter = member.sync_waiter = self.loop.create_future()
        if member.member_id == group.leader_id:
            extra = set(req.assignments) - set(group.members)
            if extra:
                log.info("group %r: leader assigned to unknown members %s", group.group_id, extra)
            assignments = {m: req.assignments.get(m, b"") for m in group.members}
            stored = self.store_group(group, assignments)
            self._spawn(self._accept_assignment(group, group.generation, assignments, stored))
        return waiter

    async def _accept_assignment(
        self,
        group: Group,
        generation: int,
        assignments: dict[str, bytes],
        stored: asyncio.Future[None],
    ) -> None:
        try:
            await asyncio.shield(stored)
            error = E.NONE
        except Exception as exc:
            log.error("group %r: persisting the assignment failed: %s", group.group_id, exc)
            error = E.COORDINATOR_NOT_AVAILABLE
        if not self._current(group) or group.state is not COMPLETING:
            return
        if group.generation != generation:
            return
        if error is not E.NONE:
            self._reset_assignments(group, error)
            self._prepare_rebalance(group, "the assignment could not be stored")
            return
        for member_id, member in group.members.items():
            member.assignment = assignments.get(member_id, b"")
            if member.awaiting_sync:
                member.answer_sync(
                    SyncResult(E.NONE, member.assignment, group.protocol_type, group.protocol_name)
                )
                # Its session restarts now: it may have run out while the leader computed.
                self.schedule_expiry(group, member)
        group.transition(STABLE, self.clock())
        log.info(
            "group %r: generation %d is stable with %d members",
            group.group_id,
            group.generation,
            len(group.members),
        )

    # --- members ------------------------------------------------------------------------
    def remove_member(self, group: Group, member_id: str, reason: str) -> None:
        self._drop(group, member_id)
        if group.state in (STABLE, COMPLETING):
            self._prepare_rebalance(group, reason)
        else:
            self.try_complete_join(group)

    def _drop(self, group: Group, member_id: str) -> None:
        member = group.remove(member_id)
        if member is not None:
            member.answer_join(JoinResult(E.UNKNOWN_MEMBER_ID, member_id))
            member.answer_sync(SyncResult(E.UNKNOWN_MEMBER_ID))

    def schedule_expiry(self, group: Group, member: Member, timeout_ms: int | None = None) -> None:
        member.cancel_timer()
        delay = (member.session_timeout_ms if timeout_ms is None else timeout_ms) / 1000
        member.timer = self.loop.call_later(delay, self._expire, group, member)

    def _expire(self, group: Group, member: Member) -> None:
        member.timer = None
        if not self._current(group) or group.members.get(member.member_id) is not member:
            return
        if not member.is_new and (member.awaiting_join or member.awaiting_sync):
            # Waiting on the group counts as alive; the rebalance timeout bounds it.
            self.schedule_expiry(group, member)
            return
        why = "its first rebalance did not complete" if member.is_new else "no heartbeat"
        log.info(
            "group %r: member %s expired: %s within %d ms",
            group.group_id,
            member.member_id,
            why,
            self.config.new_member_join_timeout_ms if member.is_new else member.session_timeout_ms,
        )
        self.remove_member(group, member.member_id, f"member {member.member_id} expired")

    # --- persistence and plumbing -------------------------------------------------------
    def store_group(
        self, group: Group, assignments: dict[str, bytes] | None = None
    ) -> asyncio.Future[None]:
        """Queue the group's record now (a snapshot of this moment); the future resolves
        once it is fsynced."""
        raw = encode_group(group.record(assignments))
        return self.writer.write({(GROUPS_AREA, group_key(group.group_id)): raw})

    def _store_quietly(self, group: Group) -> None:
        def done(fut: asyncio.Future[None]) -> None:
            if not fut.cancelled() and fut.exception() is not None:
                log.error(
                    "group %r: persisting the group failed: %s", group.group_id, fut.exception()
                )

        self.store_group(group).add_done_callback(done)

    def _current(self, group: Group) -> bool:
        return self.groups.get(group.group_id) is group

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    def _cancel_rebalance_timer(group: Group) -> None:
        if group.rebalance_timer is not None:
            group.rebalance_timer.cancel()
            group.rebalance_timer = None

    @staticmethod
    def _cancel_sync_timer(group: Group) -> None:
        if group.sync_timer is not None:
            group.sync_timer.cancel()
            group.sync_timer = None
        group.pending_sync.clear()

    def cancel_timers(self, group: Group) -> None:
        self._cancel_rebalance_timer(group)
        self._cancel_sync_timer(group)
        for handle in group.pending_members.values():
            if handle is not None:
                handle.cancel()
        for member in group.members.values():
            member.cancel_timer()

    def log_refusal(self, api: str, group_id: str, member_id: str, exc: GroupError) -> None:
        """An INFO line per kind of refusal (API and error) at most every REFUSAL_LOG_S,
        counting the others: a client heartbeating a group this gateway does not know
        would otherwise write a line per heartbeat, and many clients a flood."""
        level = logging.DEBUG
        if exc.code not in _ROUTINE:
            now = time.monotonic()
            last, quiet = self._refusals.get((api, exc.code), (-REFUSAL_LOG_S, 0))
            if now - last >= REFUSAL_LOG_S:
                level = logging.INFO
                self._refusals[api, exc.code] = (now, 0)
            else:
                self._refusals[api, exc.code] = (last, quiet + 1)
            if quiet and level == logging.INFO:
                log.info("%s: %d more %s refusals were not logged", api, quiet, exc.code.name)
        log.log(
            level,
            "%s group=%r member=%s: %s: %s",
            api,
            group_id,
            member_id or "-",
            exc.code.name,
            exc,
        )


REFUSAL_LOG_S = 10.0
# Answers every client expects during normal operation: not worth an INFO line each.
_ROUTINE = frozenset({E.REBALANCE_IN_PROGRESS, E.MEMBER_ID_REQUIRED})
