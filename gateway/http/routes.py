"""The HTTP route table's entries: each route declared once, in its handler area, with its
method, path, handler, permission and OpenAPI description.

An area is a class whose ``ROUTES`` is a tuple of ``Route`` and whose instances
(``Area(services, config)``) have a method per route's ``handler``. The app (app.py)
serves every area of its ``AREAS``; the ACL guard (access.py) checks each route's
``need``; the OpenAPI document (openapi.py) is built from the routes whose ``doc`` is set.
So a new area registers with one entry in ``AREAS``, and nothing else lists its routes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from tmsgate.gateway.acls import Operation


class On(Enum):
    """What a route's permission is checked on."""

    NOTHING = "open"  # no authentication either: probes and the API's description
    LOGIN = "login"  # any principal that passed authentication
    TOPIC = "topic"  # the topic of the path
    CLUSTER = "cluster"  # kafka-cluster
    TOPICS = "topics"  # the answer lists only the topics the principal may DESCRIBE


@dataclass(frozen=True, slots=True)
class Need:
    on: On
    operations: tuple[Operation, ...] = ()  # any one of them is enough
    # CREATE on the cluster is enough to create any topic, as Kafka's CreateTopics allows.
    or_cluster: Operation | None = None
    manifest: bool = False  # and WRITE on every topic a commit's manifest publishes
    # and WRITE on the TRANSACTIONAL_ID the body's "key" names: a keyed start hands back
    # the key's open transaction, as a Kafka transactional id does, so it is guarded alike
    keyed: bool = False
    # ?create=auto: and CREATE on the topic or the cluster, as Kafka's auto-create asks,
    # checked only when the topic is missing (a sink that always asks for it may lack it)
    creates: bool = False


@dataclass(frozen=True, slots=True)
class Doc:
    """What the OpenAPI document says of a route. The document adds what follows from the
    route itself: the operationId (the handler's name in camelCase), the path parameters,
    the security (none for ``On.NOTHING``) and the errors every guarded route can answer
    (401, 403, and 404 for an unknown namespace)."""

    summary: str
    responses: dict[str, Any]  # the answers of this operation (openapi.py's helpers)
    errors: tuple[int, ...] = ()  # further error statuses, described by openapi.ERRORS
    body: dict[str, Any] | None = None  # the requestBody object
    query: tuple[dict[str, Any], ...] = ()  # query parameter objects
    operation_id: str | None = None


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str  # Starlette's syntax: {name} or {name:path}
    handler: str  # the area's method; also the route's label in the metrics
    need: Need
    doc: Doc | None = field(default=None)  # None: served, not in the document (HTML, assets)

    @property
    def path_parameters(self) -> list[str]:
        return [m.split(":")[0] for m in re.findall(r"\{([^}]+)\}", self.path)]

    @property
    def document_path(self) -> str:
        """The path as OpenAPI writes it (no Starlette convertors)."""
        return re.sub(r"\{([^}:]+):[^}]+\}", r"{\1}", self.path)


def operation_id(route: Route) -> str:
    if route.doc is not None and route.doc.operation_id:
        return route.doc.operation_id
    first, *rest = route.handler.split("_")
    return first + "".join(word.capitalize() for word in rest)
