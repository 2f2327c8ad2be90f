"""The Starlette app of the HTTP API: one route table built from the handler areas, each
handler wrapped once with its metrics, the one error answer, and its authentication and
ACL check (access.py, from each route's permission).

The table: every area in ``AREAS`` (a class with ``ROUTES``, a tuple of routes.Route, and
a method per route: routes.py), and the API's description (apidocs.py), whose
/openapi.json is built from the same routes. A new area registers with one entry here.
An area with ``start()`` and ``async stop()`` (the console's lag sampler) is started and
stopped with the listener (the app's lifespan, which uvicorn runs: server.py).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route as StarletteRoute
from starlette.types import Receive, Scope, Send
from tmsgate.storage import NotLeader

from . import forward
from .access import Access
from .apidocs import ApiDocs
from .cluster_area import ClusterCallHandlers
from .config import HttpConfig
from .console import ConsoleHandlers
from .errors import error_response, json_response
from .messages import MessageHandlers
from .metrics import HttpMetrics, Observe
from .openapi import document_bytes
from .probes import Probes
from .records import RecordHandlers
from .routes import Route
from .topic_lookup import TopicLookup
from .topics import TopicHandlers
from .transactions import TransactionHandlers

if TYPE_CHECKING:
    from tmsgate.gateway.cluster import Cluster
    from tmsgate.gateway.cluster_calls import ClusterCalls
    from tmsgate.gateway.services import Services

Handler = Callable[[Request], Awaitable[Response]]
AREAS = (
    TopicHandlers,
    MessageHandlers,
    RecordHandlers,
    TransactionHandlers,
    Probes,
    ConsoleHandlers,
    ClusterCallHandlers,
)


def route_table() -> list[tuple[type, Route]]:
    """(area, route) of every route served, the API's description last."""
    return [(area, route) for area in (*AREAS, ApiDocs) for route in area.ROUTES]  # type: ignore[attr-defined]


def openapi_document() -> bytes:
    """What /openapi.json serves."""
    return document_bytes(route for _, route in route_table())


def instrument(
    name: str,
    handler: Handler,
    observe: Observe,
    cluster: Cluster | None = None,
    relay: ClusterCalls | None = None,
) -> Handler:
    """Time and count the handler's answers; any exception becomes the JSON error answer.
    ``relay``: a write for a topic led by another worker is sent on to it (forward.py)."""

    async def endpoint(request: Request) -> Response:
        started = time.perf_counter()
        try:
            try:
                response = await handler(request)
            except NotLeader as exc:
                answer = None if relay is None else await forward.to_leader(request, exc, relay)
                if answer is None:
                    raise
                response = answer
        except Exception as exc:  # the relay's AnswerLost too: a 504, never the 421
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
    services: Services,
    config: HttpConfig,
    metrics: HttpMetrics,
    access: Access,
    areas: dict[type, object],
) -> list[StarletteRoute]:
    table = route_table()
    areas[ApiDocs] = ApiDocs(route for _, route in table)
    lookup = TopicLookup(services)
    paths: dict[str, dict[str, Handler]] = {}
    names: set[str] = set()
    for area, route in table:
        by_method = paths.setdefault(route.path, {})
        if route.method in by_method:
            raise ValueError(f"two handlers for {route.method} {route.path}")
        if route.handler in names:  # the metrics' label: one route each
            raise ValueError(f"two routes named {route.handler!r}")
        names.add(route.handler)
        handler = access.guard(route, getattr(areas[area], route.handler))
        if "namespace" in route.path_parameters:
            handler = lookup.namespace_scoped(handler)
        by_method[route.method] = instrument(
            route.handler,
            handler,
            metrics.observer(route.handler),
            services.cluster,
            services.calls if config.relay_writes else None,
        )
    return [
        StarletteRoute(path, AsgiEndpoint(dispatch(by_method)), methods=list(by_method))
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

    areas: dict[type, object] = {area: area(services, config) for area in AREAS}
    running = [a for a in areas.values() if hasattr(a, "start")]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        for area in running:
            area.start()  # type: ignore[attr-defined]
        try:
            yield
        finally:
            for area in reversed(running):
                await area.stop()  # type: ignore[attr-defined]

    app = Starlette(
        routes=build_routes(services, config, metrics, Access(services, config), areas),
        exception_handlers={HTTPException: http_exception},
        lifespan=lifespan,
    )
    app.state.areas = areas  # each area's handlers by class (tests reach the console's)
    return app
