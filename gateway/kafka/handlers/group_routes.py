"""The consumer-group APIs (the lead appends GROUP_ROUTES to ROUTES)."""

from __future__ import annotations

from . import (
    delete_groups,
    describe_groups,
    find_coordinator,
    heartbeat,
    join_group,
    leave_group,
    list_groups,
    offset_commit,
    offset_delete,
    offset_fetch,
    sync_group,
)

GROUP_ROUTES = [
    offset_commit.ROUTE,
    offset_fetch.ROUTE,
    find_coordinator.ROUTE,
    join_group.ROUTE,
    heartbeat.ROUTE,
    leave_group.ROUTE,
    sync_group.ROUTE,
    describe_groups.ROUTE,
    list_groups.ROUTE,
    delete_groups.ROUTE,
    offset_delete.ROUTE,
]
