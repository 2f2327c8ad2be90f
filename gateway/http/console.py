"""A read-only console in the browser, on the HTTP listener (docs/console.md).

    /ui                 Kafka topics: partitions, offsets, sizes, configs; open transactions
    /ui/groups          consumer groups: state, members, lag per partition, a lag chart
    /ui/topics/{name}   a topic's partitions and a message browser (by offset, time or id)

GET only; nothing here writes. The routes are guarded as the HTTP API's are (access.py:
authentication first, 401 without it); each page then shows only what the principal's
ACLs let it see, as Kafka's own listings do: topics it may DESCRIBE, groups it may
DESCRIBE (GROUP resource), Kafka transactions whose TRANSACTIONAL_ID it may DESCRIBE, the
TMS transactions with DESCRIBE on the cluster. A topic's page needs DESCRIBE on it (else
403) and its messages READ. Errors are HTML pages with the HTTP API's statuses.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from tmsgate.gateway.acls import ANONYMOUS, CLUSTER_NAME, Operation, ResourceType
from tmsgate.gateway.errors import BadRequest, is_unexpected
from tmsgate.gateway.views import GroupsView, SizeCache, TopicsView, TopicView
from tmsgate.storage import TopicId, TopicNotFound
from tmsgate.storage.ids import PARTITION_MARK

from .access import PRINCIPAL, client_host
from .config import HttpConfig
from .console_data import (
    MAX_LIMIT,
    browse,
    browse_of,
    kafka_transactions,
    tms_transactions,
)
from .console_pages import Pages, lag_chart
from .errors import HttpProblem, error_of
from .lag_history import LagHistory, LagSampler
from .routes import Need, On, Route

if TYPE_CHECKING:
    from tmsgate.gateway.services import Services

log = logging.getLogger("tmsgate.http")
D, R = Operation.DESCRIBE, Operation.READ
VIEWS = ("auto", "text", "hex")  # how values show: text when UTF-8 (auto), or always
REFRESH_S = 5  # ?refresh=1 reloads the page this often
# Authentication only: each page filters, or refuses, by the ACLs of what it shows.
SEEN = Need(On.LOGIN)


class Viewer:
    """The principal looking, and what its ACLs let it see (no denial is logged for a
    listing that leaves things out, as Kafka's Metadata)."""

    def __init__(self, services: Services, request: Request) -> None:
        self.principal: str | None = request.scope.get(PRINCIPAL)
        self.host = client_host(request)
        self._ask = services.authorizer.allowed

    @property
    def name(self) -> str:
        return self.principal or ANONYMOUS

    def may(self, op: Operation, rtype: ResourceType, name: str, log: bool = False) -> bool:
        return self._ask(self.principal, op, rtype, name, self.host, log_denial=log)

    def may_see_topic(self, name: str) -> bool:
        return self.may(D, ResourceType.TOPIC, name)


class ConsoleHandlers:
    ROUTES = (
        Route("GET", "/ui", "console_topics", SEEN),
        Route("GET", "/ui/groups", "console_groups", SEEN),
        Route("GET", "/ui/topics/{name}", "console_topic", SEEN),
    )

    def __init__(self, services: Services, config: HttpConfig) -> None:
        self.services = services
        self.store = services.store
        self.namespace = services.namespace
        self.pages = Pages(services.namespace)
        self.sizes = SizeCache(services.store)  # sizes are scans: read every 30 s at most
        self.lag_history = LagHistory()
        self.sampler = LagSampler(services, self.lag_history)

    # The HTTP listener starts and stops these with itself (server.py).
    def start(self) -> None:
        self.sampler.start()

    async def stop(self) -> None:
        await self.sampler.stop()

    # --- pages -------------------------------------------------------------------------------
    async def console_topics(self, request: Request) -> Response:
        return await self._page(request, self._topics_page)

    async def console_groups(self, request: Request) -> Response:
        return await self._page(request, self._groups_page)

    async def console_topic(self, request: Request) -> Response:
        return await self._page(request, self._topic_page)

    async def _page(self, request: Request, build: Any) -> Response:
        viewer = Viewer(self.services, request)
        try:
            template, context = await build(request, viewer)
        except Exception as exc:
            return self._error_page(request, viewer, exc)
        refresh = REFRESH_S if request.query_params.get("refresh") == "1" else None
        html = self.pages.render(
            template, viewer=viewer.name, refresh=refresh, now_ms=self.store.now_ms(), **context
        )
        return HTMLResponse(html)

    async def _topics_page(self, request: Request, viewer: Viewer) -> tuple[str, dict[str, Any]]:
        view = self._topics_view()
        names = await self.services.run(view.names)
        shown = [name for name, _ in names if viewer.may_see_topic(name)]
        topics = await self.services.run(_read_topics, view, shown)
        context = self._transactions(viewer)
        return "topics.html", {
            "nav": "topics",
            "topics": topics,
            "hidden": len(names) - len(shown),
            **context,
        }

    async def _groups_page(self, request: Request, viewer: Viewer) -> tuple[str, dict[str, Any]]:
        groups = GroupsView(self.store, self.namespace)
        ids = await self.services.run(groups.group_ids)
        shown = [g for g in ids if viewer.may(D, ResourceType.GROUP, g)]
        docs = await self.services.run(_describe_groups, groups, shown)
        now = self.store.now_ms()
        for doc in docs:
            # Kafka's OffsetFetch leaves out the partitions of topics one may not DESCRIBE.
            doc["offsets"] = [o for o in doc["offsets"] if viewer.may_see_topic(o["topic"])]
            lags = [o["lag"] for o in doc["offsets"] if o["lag"] is not None]
            doc["lag"] = sum(lags) if lags else None
            history = self.lag_history.of_group(doc["group"])
            seen = {k: v for k, v in history.items() if viewer.may_see_topic(k[0])}
            doc["chart"] = lag_chart(seen, now)
        return "groups.html", {"nav": "groups", "groups": docs, "hidden": len(ids) - len(shown)}

    async def _topic_page(self, request: Request, viewer: Viewer) -> tuple[str, dict[str, Any]]:
        name = request.path_params["name"]
        _check_topic_name(self.namespace, name)
        if not viewer.may(D, ResourceType.TOPIC, name, log=True):
            raise forbidden(f"{viewer.name} may not DESCRIBE TOPIC {name!r}")
        topic: TopicView = await self.services.run(self._topics_view().topic, name)
        params = request.query_params
        show = params.get("view", "auto")
        if show not in VIEWS:
            raise BadRequest(f"view {show[:20]!r}: expected one of {', '.join(VIEWS)}")
        b = browse_of(params, max(1, len(topic.partitions)))
        readable = viewer.may(R, ResourceType.TOPIC, name, log=False)
        page = None
        if readable:
            tx = await self.services.transactions.snapshot() if b.committed else None
            page = await self.services.run(browse, self.store, self.namespace, name, b, tx)
        elif any(k in params for k in ("offset", "time", "id", "partition")):
            viewer.may(R, ResourceType.TOPIC, name, log=True)  # the denial, logged
            raise forbidden(f"{viewer.name} may not READ TOPIC {name!r}")
        txns = self._transactions(viewer)
        writing = [t for t in txns["kafka_txns"] if any(p[0] == name for p in t.partitions)]
        return "topic.html", {
            "nav": "topics",
            "topic": topic,
            "browse": b,
            "page": page,
            "readable": readable,
            "show": show,
            "max_limit": MAX_LIMIT,
            "kafka_txns": writing,
            "clustered": txns["clustered"],
        }

    # --- parts -------------------------------------------------------------------------------
    def _topics_view(self) -> TopicsView:
        cluster = self.services.cluster

        def leader_of(t: TopicId) -> int | None:
            node = cluster.leader(t) if cluster is not None else None
            return None if node is None else node.node_id

        return TopicsView(self.store, self.namespace, self.sizes, leader_of)

    def _transactions(self, viewer: Viewer) -> dict[str, Any]:
        """The open transactions the viewer may see (None: TMS ones, not allowed)."""
        kafka = [
            t
            for t in kafka_transactions(self.services)
            if viewer.may(D, ResourceType.TRANSACTIONAL_ID, t.transactional_id)
        ]
        tms = (
            tms_transactions(self.services)
            if viewer.may(D, ResourceType.CLUSTER, CLUSTER_NAME)
            else None
        )
        clustered = self.services.cluster is not None
        return {"kafka_txns": kafka, "tms_txns": tms, "clustered": clustered}

    def _error_page(self, request: Request, viewer: Viewer, exc: Exception) -> Response:
        err = error_of(exc)
        if is_unexpected(exc) and not isinstance(exc, HttpProblem):
            log.error("GET %s failed: %r", request.url.path, exc, exc_info=exc)
        html = self.pages.render(
            "error.html",
            nav="",
            viewer=viewer.name,
            now_ms=self.store.now_ms(),
            status=err.status,
            kind=err.kind,
            message=err.message,
        )
        return HTMLResponse(html, err.status)


def forbidden(message: str) -> HttpProblem:
    return HttpProblem(403, "forbidden", message)


def _check_topic_name(namespace: str, name: str) -> None:
    """A Kafka topic's name; a partition's TMS topic (``name~p``) is not one."""
    base, mark, index = name.partition(PARTITION_MARK)
    if mark:
        raise HttpProblem(
            404,
            "topic_not_found",
            f"{name!r} is partition {index} of topic {base!r}: "
            f"see /ui/topics/{base}?partition={index}",
        )
    try:
        TopicId(namespace, name)
    except ValueError as exc:
        raise BadRequest(f"topic name {name[:60]!r}: {exc}") from None


def _read_topics(view: TopicsView, names: list[str]) -> list[TopicView]:
    topics = []
    for name in names:
        try:
            topics.append(view.topic(name))
        except TopicNotFound:
            continue  # deleted since it was listed
    return topics


def _describe_groups(groups: GroupsView, ids: list[str]) -> list[dict[str, Any]]:
    docs = (groups.describe(g) for g in ids)
    return [d for d in docs if d is not None]
