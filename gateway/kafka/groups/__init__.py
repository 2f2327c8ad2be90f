"""Kafka consumer groups (the classic protocol): coordinator, committed offsets, state.

    coordinator_for(broker) -> GroupCoordinator   # created and loaded on first use
    await start_coordinator(broker)   # gateway start-up: load groups now
    stop_coordinator(broker)          # shutdown begins: answer long-polling joins
    await close_coordinator(broker)   # before the store closes: flush group state

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
    close_coordinator,
    coordinator_for,
    start_coordinator,
    stop_coordinator,
)
from .errors import GroupError, GroupErrorCode
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
    "GroupErrorCode",
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
    "close_coordinator",
    "coordinator_for",
    "from_env",
    "start_coordinator",
    "stop_coordinator",
]
