"""The Starlette app of the HTTP API: one route table built from the handler areas, each
handler wrapped once with its metrics, the one error answer, and its authentication and
ACL check (access.py, one permission table for every route)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send
from tmsgate.storage import StoreClosed

from .access import Access
from .config import HttpConfig
from .errors import error_response, json_response
from .messages import MessageHandlers
from .metrics import HttpMetrics, Observe
from .openapi import openapi_document
from .records import RecordHandlers
from .topics import TopicHandlers
from .transactions import TransactionHandlers

if TYPE_CHECKING:
    from tmsgate.gateway.cluster import Cluster
    from tmsgate.gateway.services import Services

Handler = Callable[[Request], Awaitable[Response]]
AREAS = (TopicHandlers, MessageHandlers, RecordHandlers, TransactionHandlers)


class Probes:
    """Liveness, readiness and the API's own description."""

    ROUTES = (
        ("GET", "/healthz", "healthz"),
        ("GET", "/readyz", "readyz"),
        ("GET", "/openapi.json", "openapi"),
    )

    def __init__(self, services: Services, config: HttpConfig) -> None:
        self.services = services
        self.document = openapi_document()  # built and encoded once

    async def healthz(self, request: Request) -> Response:
        return json_response({"status": "ok"})

    async def readyz(self, request: Request) -> Response:
        store = self.services.store
        reason = None
        if self.services.closing:
            reason = "the gateway is shutting down"
        elif store.writes_refused:
            reason = "disk full: writes are refused until space is free"
        else:
            try:  # one point read: raises StoreClosed once the store is closed
                await self.services.run(store.get_state, "http", "ready")
            except StoreClosed:
                reason = "the store is closed"
        if reason is not None:
            return json_response({"error": "not_ready", "message": reason}, 503)
        return json_response({"status": "ready"})

    async def openapi(self, request: Request) -> Response:
        return Response(self.document, media_type="application/json")


def instrument(
    name: str, handler: Handler, observe: Observe, cluster: Cluster | None = None
) -> Handler:
    """Time and count the handler's answers; any exception becomes the JSON error answer."""

    async def endpoint(request: Request) -> Response:
        started = time.perf_counter()
        try:
            response = await handler(request)
        except Exception as exc:
            response = error_response(exc, request, cluster)
        observe(response.status_code, time.perf_counter() - started)
        return response

    endpoint.__name__ = name
    return endpoint


def dispatch(by_method: dict[str, Handler]) -> Handler:
    """One endpoint per path, so that a 405 lists every method the path has in Allow."""
    if "GET" in by_method:
        by_method.setdefault("HEAD", by_method["GET"])

    async def endpoint(request: Request) -> Response:
        return await by_method[request.method](request)

    return endpoint


def build_routes(
    services: Services, config: HttpConfig, metrics: HttpMetrics, access: Access
) -> list[Route]:
    paths: dict[str, dict[str, Handler]] = {}
    for area in (*AREAS, Probes):
        handlers = area(services, config)  # type: ignore[operator]
        for method, path, name in area.ROUTES:  # type: ignore[attr-defined]
            by_method = paths.setdefault(path, {})
            if method in by_method:
                raise ValueError(f"two handlers for {method} {path}")
            guarded = access.guard(name, getattr(handlers, name))
            by_method[method] = instrument(
                name, guarded, metrics.observer(name), services.cluster
            )
    return [
        Route(path, AsgiEndpoint(dispatch(by_method)), methods=list(by_method))
        for path, by_method in paths.items()
    ]


class AsgiEndpoint:
    """A handler served as a plain ASGI app. Starlette wraps a function endpoint in its
    exception-handling plumbing (a third of a transaction request's loop time, measured);
    ours already turn every exception into the JSON answer (``instrument``)."""

    __slots__ = ("handler",)

    def __init__(self, handler: Handler) -> None:
        self.handler = handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = await self.handler(Request(scope, receive, send))
        await response(scope, receive, send)


def build_app(services: Services, config: HttpConfig) -> Starlette:
    metrics = HttpMetrics(services.registry)
    unmatched = metrics.observer("unmatched")

    async def http_exception(request: Request, exc: Exception) -> Response:
        # Starlette's own refusals: no route (404) or a method the path lacks (405).
        assert isinstance(exc, HTTPException)
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "bad_request")
        message = f"{request.method} {request.url.path}: {exc.detail}"
        response = json_response({"error": kind, "message": message}, exc.status_code, exc.headers)
        unmatched(exc.status_code, 0.0)
        return response

    return Starlette(
        routes=build_routes(services, config, metrics, Access(services, config)),
        exception_handlers={HTTPException: http_exception},
    )
