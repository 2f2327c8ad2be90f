"""ApiVersions: the versions come from the route table, so only what has a handler is
advertised. A request above our ApiVersions range gets the KIP-511 fallback (built by
``unsupported_version``): a v0 reply with UNSUPPORTED_VERSION and the list, so the
client retries with a version we speak."""

from __future__ import annotations

from typing import Any

from kafka.protocol.metadata import ApiVersionsResponse
from tmsgate.protocol import ApiKey, ErrorCode

from ..context import RequestContext
from ..routes import Route, RouteTable


def build(routes: RouteTable, version: int, error: ErrorCode = ErrorCode.NONE) -> Any:
    keys = [
        ApiVersionsResponse.ApiVersion(api_key=key, min_version=low, max_version=high)
        for key, low, high in routes.versions()
    ]
    return ApiVersionsResponse[version](error_code=error, api_keys=keys, throttle_time_ms=0)


def unsupported_version(routes: RouteTable) -> Any:
    return build(routes, 0, ErrorCode.UNSUPPORTED_VERSION)


async def handle(ctx: RequestContext, req: Any) -> Any:
    return build(ctx.broker.routes, ctx.version)


ROUTE = Route(ApiKey.API_VERSIONS, 0, 4, handle)
