"""Kafka consumer groups (the classic protocol): coordinator, committed offsets, state.

    broker.groups: GroupCoordinator   # one per Broker, built with it
    await broker.groups.ready()       # gateway start-up: load groups now
    broker.groups.shutdown()          # shutdown begins: answer long-polling joins
    await broker.groups.close()       # before the store closes: flush group state

The handlers in ``gateway/kafka/handlers`` translate requests to the coordinator's
methods and its results back to responses; nothing here knows wire formats.
"""

from .codec import GROUPS_AREA, OFFSETS_AREA, CommittedOffset, GroupRecord, MemberRecord
from .config import GroupConfig, from_env
from .coordinator import (
    GroupCoordinator,
    GroupSummary,
    ListedGroup,
    MemberSummary,
)
from .errors import GroupError
from .model import JoinRequest, JoinResult, SyncRequest, SyncResult, client_host
from .offsets import FetchedOffset, OffsetCommit
from .state import GroupState, IllegalTransition

__all__ = [
    "GROUPS_AREA",
    "OFFSETS_AREA",
    "CommittedOffset",
    "FetchedOffset",
    "GroupConfig",
    "GroupCoordinator",
    "GroupError",
    "GroupRecord",
    "GroupState",
    "GroupSummary",
    "IllegalTransition",
    "JoinRequest",
    "JoinResult",
    "ListedGroup",
    "MemberRecord",
    "MemberSummary",
    "OffsetCommit",
    "SyncRequest",
    "SyncResult",
    "client_host",
    "from_env",
]
