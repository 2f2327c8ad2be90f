"""The classic group protocol's states and transitions, as tables (Kafka's GroupMetadata).

    Empty ──join──> PreparingRebalance ──all joined / rebalance timeout──> CompletingRebalance
      ^                 ^      |                                                │
      │                 │      └──no member left──> Empty                       │ leader's
      │                 └──member joins, leaves, expires or changes─── Stable <─┘ SyncGroup
      └─ any state ──DeleteGroups (only from Empty)──> Dead

``TRANSITIONS`` is the only place that says which move is legal; ``transition`` raises
the typed ``IllegalTransition`` for any other. ``OUTCOMES`` says what a member request
gets in each state once its group, member and generation have been checked: an error
code, ``NONE``, or ``PROCEED`` when the coordinator has state-specific work to do.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from tmsgate.protocol import ErrorCode

from .errors import GroupError


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    @classmethod
    def parse(cls, name: str) -> GroupState | None:
        """Case-insensitive, as ListGroups' StatesFilter is; ``AwaitingSync`` is the old
        name of CompletingRebalance."""
        wanted = name.strip().lower()
        if wanted == "awaitingsync":
            return cls.COMPLETING_REBALANCE
        for state in cls:
            if state.value.lower() == wanted:
                return state
        return None


EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD

# state -> the states it may move to (Kafka's validPreviousStates, read forwards).
TRANSITIONS: Mapping[GroupState, frozenset[GroupState]] = {
    EMPTY: frozenset({PREPARING, DEAD}),
    PREPARING: frozenset({COMPLETING, EMPTY, DEAD}),
    COMPLETING: frozenset({STABLE, PREPARING, DEAD}),
    STABLE: frozenset({PREPARING, DEAD}),
    DEAD: frozenset({DEAD}),
}


class IllegalTransition(GroupError):
    """A move the table forbids. Clients get COORDINATOR_NOT_AVAILABLE, find the
    coordinator again and retry, which is also Kafka's answer for a dead group."""

    def __init__(self, group_id: str, current: GroupState, target: GroupState) -> None:
        super().__init__(
            ErrorCode.COORDINATOR_NOT_AVAILABLE,
            f"group {group_id!r} cannot move from {current.value} to {target.value}",
        )
        self.current = current
        self.target = target


def check_transition(group_id: str, current: GroupState, target: GroupState) -> None:
    if target not in TRANSITIONS[current]:
        raise IllegalTransition(group_id, current, target)


class Op(enum.Enum):
    """Member requests whose answer depends on the group's state."""

    JOIN = "JoinGroup"  # from a member the group already knows
    SYNC = "SyncGroup"
    HEARTBEAT = "Heartbeat"
    COMMIT = "OffsetCommit"  # from a member with a generation (not a simple commit)


class _Proceed(enum.Enum):
    PROCEED = "proceed"


PROCEED = _Proceed.PROCEED
Outcome = ErrorCode | _Proceed
_E = ErrorCode

# (request, state) -> outcome, after the group, member and generation checks passed.
OUTCOMES: Mapping[tuple[Op, GroupState], Outcome] = {
    # A known member rejoining: update it and (maybe) rebalance, or resend the current
    # generation. An empty group has no members to know.
    (Op.JOIN, EMPTY): _E.UNKNOWN_MEMBER_ID,
    (Op.JOIN, PREPARING): PROCEED,
    (Op.JOIN, COMPLETING): PROCEED,
    (Op.JOIN, STABLE): PROCEED,
    (Op.JOIN, DEAD): _E.COORDINATOR_NOT_AVAILABLE,
    # SyncGroup waits for the leader's assignment, or returns the current one.
    (Op.SYNC, EMPTY): _E.UNKNOWN_MEMBER_ID,
    (Op.SYNC, PREPARING): _E.REBALANCE_IN_PROGRESS,
    (Op.SYNC, COMPLETING): PROCEED,
    (Op.SYNC, STABLE): PROCEED,
    (Op.SYNC, DEAD): _E.COORDINATOR_NOT_AVAILABLE,
    # A heartbeat keeps the member alive in every live state; during a rebalance it is
    # how members learn they must rejoin.
    (Op.HEARTBEAT, EMPTY): _E.UNKNOWN_MEMBER_ID,
    (Op.HEARTBEAT, PREPARING): _E.REBALANCE_IN_PROGRESS,
    (Op.HEARTBEAT, COMPLETING): _E.NONE,
    (Op.HEARTBEAT, STABLE): _E.NONE,
    (Op.HEARTBEAT, DEAD): _E.COORDINATOR_NOT_AVAILABLE,
    # Commits are allowed while the next rebalance is being prepared (the heartbeat
    # tells the member to rejoin), but not between JoinGroup and the assignment.
    (Op.COMMIT, EMPTY): _E.UNKNOWN_MEMBER_ID,
    (Op.COMMIT, PREPARING): PROCEED,
    (Op.COMMIT, COMPLETING): _E.REBALANCE_IN_PROGRESS,
    (Op.COMMIT, STABLE): PROCEED,
    (Op.COMMIT, DEAD): _E.COORDINATOR_NOT_AVAILABLE,
}


def outcome(op: Op, state: GroupState) -> Outcome:
    return OUTCOMES[(op, state)]


# States from which a join, leave or expiry starts a rebalance (Kafka's canRebalance).
CAN_REBALANCE = frozenset({EMPTY, STABLE, COMPLETING})
