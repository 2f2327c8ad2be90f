"""Groups and members as data, with the bookkeeping Kafka's GroupMetadata does: who is
in the group, who leads it, which protocol all members support, which members are
static. No timers, no I/O; the coordinator drives these objects.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field

from tmsgate.protocol import ErrorCode

from .codec import GroupRecord, MemberRecord, subscription_topics
from .errors import GroupError
from .state import EMPTY, GroupState, check_transition

CONSUMER_PROTOCOL = "consumer"
Protocols = tuple[tuple[str, bytes], ...]  # (name, metadata) in the member's preference


def client_host(peer: str) -> str:
    """Kafka's client host as DescribeGroups shows it: ``/`` and the address, no port."""
    host = peer.rsplit(":", 1)[0] if ":" in peer else peer  # the driver's "host:port"
    return "/" + host.strip("[]")


@dataclass(frozen=True, slots=True)
class JoinedMember:
    member_id: str
    instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[JoinedMember, ...] = ()
    skip_assignment: bool = False
    message: str | None = None


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None
    message: str | None = None


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    instance_id: str | None
    protocol_type: str
    protocols: Protocols
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    client_host: str
    require_known_member_id: bool = True  # JoinGroup v4+
    supports_skip_assignment: bool = False  # JoinGroup v9+
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class SyncRequest:
    group_id: str
    generation: int
    member_id: str
    instance_id: str | None
    assignments: dict[str, bytes]
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(slots=True, eq=False)
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    assignment: bytes = b""
    is_new: bool = False
    join_waiter: asyncio.Future[JoinResult] | None = None
    sync_waiter: asyncio.Future[SyncResult] | None = None
    timer: asyncio.TimerHandle | None = None

    @property
    def awaiting_join(self) -> bool:
        return self.join_waiter is not None and not self.join_waiter.done()

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_waiter is not None and not self.sync_waiter.done()

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def matches(self, protocols: Protocols) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def answer_join(self, result: JoinResult) -> None:
        if self.awaiting_join:
            assert self.join_waiter is not None
            self.join_waiter.set_result(result)
        self.join_waiter = None

    def answer_sync(self, result: SyncResult) -> None:
        if self.awaiting_sync:
            assert self.sync_waiter is not None
            self.sync_waiter.set_result(result)
        self.sync_waiter = None

    def cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


@dataclass(slots=True, eq=False)
class Group:
    group_id: str
    state: GroupState = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)  # in join order
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    # KIP-394: member ids handed out with MEMBER_ID_REQUIRED, not joined yet.
    pending_members: dict[str, asyncio.TimerHandle | None] = field(default_factory=dict)
    pending_sync: set[str] = field(default_factory=set)
    new_member_added: bool = False
    state_ms: int = 0  # when it entered its state, by the store's clock (Rebalancer.clock)
    rebalance_timer: asyncio.TimerHandle | None = None
    sync_timer: asyncio.TimerHandle | None = None
    initial_delay_left_ms: int | None = None  # set while the initial delay runs

    def transition(self, target: GroupState, now_ms: int) -> GroupState:
        check_transition(self.group_id, self.state, target)
        previous, self.state = self.state, target
        self.state_ms = now_ms
        return previous

    @property
    def is_empty(self) -> bool:
        return not self.members and not self.pending_members

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        member.cancel_timer()
        if (
            member.instance_id is not None
            and self.static_members.get(member.instance_id) == member_id
        ):
            del self.static_members[member.instance_id]
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def check_member(self, member_id: str, instance_id: str | None) -> GroupError | None:
        """Kafka's validateCurrentMember: a named static instance must exist and be this
        member (else it was fenced by a newer incarnation, KIP-345); the member must exist."""
        if instance_id is not None:
            current = self.static_members.get(instance_id)
            if current is None:
                return GroupError(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"no member of {self.group_id!r} has instance id {instance_id!r}",
                )
            if current != member_id:
                return GroupError(
                    ErrorCode.FENCED_INSTANCE_ID,
                    f"instance id {instance_id!r} now belongs to member {current}",
                )
        if member_id not in self.members:
            return GroupError(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"member {member_id or '(none)'} is not in group {self.group_id!r}",
            )
        return None

    def replace_static(self, instance_id: str, old_id: str, new_id: str) -> Member:
        member = self.members.pop(old_id)
        member.answer_join(JoinResult(ErrorCode.FENCED_INSTANCE_ID, old_id))
        member.answer_sync(SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        return member

    # --- protocols ----------------------------------------------------------------------
    def supports(self, protocol_type: str, names: list[str]) -> bool:
        """Kafka's supportsProtocols: an empty group takes any non-empty protocol type and
        list; otherwise the type must match and one protocol must be supported by all."""
        if not protocol_type or not names:
            return False
        if not self.members:
            return True
        if protocol_type != self.protocol_type:
            return False
        counts = Counter(n for m in self.members.values() for n in set(m.protocol_names()))
        return any(counts[n] == len(self.members) for n in names)

    def candidate_protocols(self) -> set[str]:
        sets = [set(m.protocol_names()) for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """Every member votes for its preferred candidate; most votes wins, ties go to the
        protocol the earliest member prefers."""
        candidates = self.candidate_protocols()
        if not candidates:
            raise ValueError(f"no protocol is supported by every member of {self.group_id!r}")
        votes = [m.vote(candidates) for m in self.members.values()]
        counts = Counter(votes)
        best = max(counts.values())
        return next(v for v in votes if counts[v] == best)

    # --- rebalance bookkeeping ----------------------------------------------------------
    def all_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def elect_joined_leader(self) -> bool:
        """Make sure the leader is a member that rejoined; False when none did."""
        leader = self.members.get(self.leader_id or "")
        if leader is not None and leader.awaiting_join:
            return True
        for member in self.members.values():
            if member.awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    def joined_members(self) -> tuple[JoinedMember, ...]:
        return tuple(
            JoinedMember(m.member_id, m.instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        )

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to, for a consumer group; None when unknown."""
        if self.protocol_type != CONSUMER_PROTOCOL or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            member_topics = subscription_topics(member.metadata(self.protocol_name))
            if member_topics is None:
                return None
            topics.update(member_topics)
        return topics

    def record(self, assignments: dict[str, bytes] | None = None) -> GroupRecord:
        """The durable form: members with the group protocol's metadata and (the given or
        their current) assignment."""
        members = tuple(
            MemberRecord(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                m.session_timeout_ms,
                m.rebalance_timeout_ms,
                m.metadata(self.protocol_name),
                m.assignment if assignments is None else assignments.get(m.member_id, b""),
            )
            for m in self.members.values()
        )
        return GroupRecord(
            self.group_id,
            self.generation,
            self.protocol_type,
            self.protocol_name,
            self.leader_id,
            self.state_ms,
            members,
        )


def group_member(
    groups: dict[str, Group],
    group_id: str,
    member_id: str,
    instance_id: str | None,
    generation: int,
) -> tuple[Group, Member]:
    """The group and member a SyncGroup, Heartbeat or OffsetCommit names, checked the way
    Kafka does (group id, member, static instance, generation); raises GroupError."""
    if not group_id:
        raise GroupError(ErrorCode.INVALID_GROUP_ID, "the group id must not be empty")
    group = groups.get(group_id)
    if group is None:
        raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID, f"group {group_id!r} does not exist")
    error = group.check_member(member_id, instance_id)
    if error is not None:
        raise error
    if generation != group.generation:
        raise GroupError(
            ErrorCode.ILLEGAL_GENERATION,
            f"generation {generation} is not group {group_id!r}'s current generation "
            f"{group.generation}",
        )
    return group, group.members[member_id]
