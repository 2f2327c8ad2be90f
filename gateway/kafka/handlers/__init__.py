"""One module per Kafka API; ROUTES is what the gateway serves (and advertises)."""

from . import (
    alter_configs,
    api_versions,
    create_topics,
    delete_topics,
    describe_configs,
    fetch,
    group_routes,
    init_producer_id,
    list_offsets,
    metadata,
    produce,
)

ROUTES = [
    produce.ROUTE,
    fetch.ROUTE,
    list_offsets.ROUTE,
    metadata.ROUTE,
    api_versions.ROUTE,
    create_topics.ROUTE,
    delete_topics.ROUTE,
    init_producer_id.ROUTE,
    describe_configs.ROUTE,
    alter_configs.ROUTE,
    alter_configs.INCREMENTAL_ROUTE,
    *group_routes.GROUP_ROUTES,
]
