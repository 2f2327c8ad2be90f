"""Group coordinator settings: Kafka's group.* and offsets.* broker configs.

Defaults are Kafka's. Each can be set from the environment (TMSGATE_GROUP_..., see
``ENV``), which is how ``tmsgate serve`` and its tests configure them until the
command line grows flags.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GroupConfig:
    # group.initial.rebalance.delay.ms: how long the first rebalance of an empty group
    # waits for more members (extended while they keep arriving, up to the rebalance
    # timeout).
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    max_size: int = 0  # group.max.size; 0 = unlimited (Kafka: Int.MaxValue)
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    # A member that joined but whose first rebalance never completed is dropped after
    # this long (Kafka's GroupCoordinator.NewMemberJoinTimeoutMs).
    new_member_join_timeout_ms: int = 300_000
    # offsets.retention.check.interval.ms: how often empty groups that have no
    # committed offsets are removed. Committed offsets themselves never expire.
    cleanup_interval_ms: int = 600_000


ENV = {
    "initial_rebalance_delay_ms": "TMSGATE_GROUP_INITIAL_REBALANCE_DELAY_MS",
    "min_session_timeout_ms": "TMSGATE_GROUP_MIN_SESSION_TIMEOUT_MS",
    "max_session_timeout_ms": "TMSGATE_GROUP_MAX_SESSION_TIMEOUT_MS",
    "max_size": "TMSGATE_GROUP_MAX_SIZE",
    "offset_metadata_max_bytes": "TMSGATE_OFFSET_METADATA_MAX_BYTES",
    "new_member_join_timeout_ms": "TMSGATE_GROUP_NEW_MEMBER_JOIN_TIMEOUT_MS",
    "cleanup_interval_ms": "TMSGATE_GROUP_CLEANUP_INTERVAL_MS",
}


def from_env(environ: dict[str, str] | None = None, **overrides: int) -> GroupConfig:
    """Defaults, then TMSGATE_GROUP_* variables, then ``overrides``."""
    env = os.environ if environ is None else environ
    values: dict[str, int] = {}
    for field, var in ENV.items():
        raw = env.get(var)
        if raw is None or not raw.strip():
            continue
        try:
            values[field] = int(raw)
        except ValueError:
            raise ValueError(f"{var} must be an integer, got {raw!r}") from None
        if values[field] < 0:
            raise ValueError(f"{var} must be >= 0, got {raw!r}")
    values.update(overrides)
    return dataclasses.replace(GroupConfig(), **values)
