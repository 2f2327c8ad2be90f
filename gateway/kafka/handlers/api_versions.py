"""ApiVersions: the versions come from the route table, so only what has a handler is
advertised. A request above our ApiVersions range gets the KIP-511 fallback (built by
``unsupported_version``): a v0 reply with UNSUPPORTED_VERSION and the list, so the
client retries with a version we speak."""

from __future__ import annotations

from typing import Any

from kafka.protocol.metadata import ApiVersionsResponse
from tmsgate.protocol import ApiKey, ErrorCode

from ..context import RequestContext
from ..routes import Route, RouteTable, default_routes

# The features (KIP-584) a Kafka 4.1 broker reports, as far as they hold here:
# metadata.version 4.1-IV1 (27), what kafka-features.sh describe prints. Not
# transaction.version 2 (KIP-890's protocol) nor group.version 1 (KIP-848's consumer
# groups): clients would then use APIs the gateway does not serve; at 0 they use the
# protocols it does. (name, min, max supported, finalized level)
FEATURES = (
    ("metadata.version", 7, 27, 27),
    ("kraft.version", 0, 0, 0),
    ("transaction.version", 0, 0, 0),
    ("group.version", 0, 0, 0),
)
FEATURES_EPOCH = 1


def build(routes: RouteTable, version: int, error: ErrorCode = ErrorCode.NONE) -> Any:
    keys = [
        ApiVersionsResponse.ApiVersion(api_key=key, min_version=low, max_version=high)
        for key, low, high in routes.versions()
    ]
    extra: dict[str, Any] = {}
    if version >= 3 and not error:
        # v3 omits features whose minimum is 0 (the schema's note); v4 lists them all.
        shown = [f for f in FEATURES if version >= 4 or f[1] > 0]
        extra = {
            "supported_features": [
                ApiVersionsResponse.SupportedFeatureKey(name=n, min_version=lo, max_version=hi)
                for n, lo, hi, _ in shown
            ],
            "finalized_features_epoch": FEATURES_EPOCH,
            "finalized_features": [
                ApiVersionsResponse.FinalizedFeatureKey(
                    name=n, max_version_level=level, min_version_level=level
                )
                for n, _, _, level in shown
                if level > 0
            ],
        }
    return ApiVersionsResponse[version](
        error_code=error, api_keys=keys, throttle_time_ms=0, **extra
    )


def unsupported_version(routes: RouteTable) -> Any:
    return build(routes, 0, ErrorCode.UNSUPPORTED_VERSION)


async def handle(ctx: RequestContext, req: Any) -> Any:
    return build(ctx.routes or default_routes(), ctx.version)


ROUTE = Route(ApiKey.API_VERSIONS, 0, 4, handle)
