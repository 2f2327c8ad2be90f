"""The one table from Kafka API to handler. ApiVersions answers from it, so the gateway
advertises exactly the APIs and versions that have a handler (Tansu's dispatch table)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tmsgate.protocol import api_name, decodable_versions

if TYPE_CHECKING:
    from .context import RequestContext

# A handler gets the request context and the decoded kafka-python request body and
# returns the response body, or None when Kafka sends no response (acks=0).
Handler = Callable[["RequestContext", Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Route:
    api_key: int
    min_version: int
    max_version: int
    handler: Handler

    @property
    def name(self) -> str:
        return api_name(self.api_key)


class RouteTable:
    def __init__(self, routes: Iterable[Route]) -> None:
        self._routes: dict[int, Route] = {}
        for route in routes:
            self.add(route)

    def add(self, route: Route) -> None:
        if route.api_key in self._routes:
            raise ValueError(f"a route for {route.name} ({route.api_key}) already exists")
        decodable = decodable_versions(route.api_key)
        if decodable is None or not (
            decodable[0] <= route.min_version <= route.max_version <= decodable[1]
        ):
            raise ValueError(
                f"{route.name} v{route.min_version}-{route.max_version} is outside what "
                f"the codec decodes ({decodable})"
            )
        self._routes[route.api_key] = route

    def get(self, api_key: int) -> Route | None:
        return self._routes.get(api_key)

    def supports(self, api_key: int, version: int) -> bool:
        route = self._routes.get(api_key)
        return route is not None and route.min_version <= version <= route.max_version

    def __iter__(self) -> Iterator[Route]:
        return iter(sorted(self._routes.values(), key=lambda r: r.api_key))

    def versions(self) -> list[tuple[int, int, int]]:
        """(api_key, min, max) for every route: the ApiVersions answer."""
        return [(r.api_key, r.min_version, r.max_version) for r in self]


def default_routes() -> RouteTable:
    from .handlers import ROUTES

    return RouteTable(ROUTES)
