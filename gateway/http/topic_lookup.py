"""What an HTTP request learns when its topic is missing: whether its namespace exists
(else 404 ``namespace_not_found``), and, with ``?create=auto`` on a write, the topic
created as the Kafka listener's auto-create makes it.

A namespace exists while it holds a topic; the gateway's Kafka namespace always exists.
Both are looked up only after the store said "no such topic" (or listed none), so a
request to a topic that exists pays nothing for them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from starlette.requests import Request
from starlette.responses import Response
from tmsgate.gateway.errors import BadRequest, NamespaceNotFound
from tmsgate.storage import TopicAlreadyExists, TopicId, TopicNotFound, partitions

from .errors import HttpProblem

if TYPE_CHECKING:
    from tmsgate.gateway.services import Services

T = TypeVar("T")
Handler = Callable[[Request], Awaitable[Response]]
# Set by the ACL guard (access.py) on a ?create=auto request: -> why the principal may not
# create the topic, or None. Absent: no ACLs, anyone may.
CREATE_REFUSAL = "tmsgate.create_refusal"


class NoAutoCreate(TopicNotFound):
    """?create=auto on a gateway run with --no-auto-create-topics."""

    def __init__(self, topic: TopicId) -> None:
        super().__init__(topic)
        self.args = (
            f"topic {topic} does not exist, and this gateway does not auto-create topics "
            "(--no-auto-create-topics): create it first",
        )


class NoSuchPartition(TopicNotFound):
    def __init__(self, topic: TopicId, count: int) -> None:
        super().__init__(topic)
        self.args = (
            f"topic {topic} does not exist: {topic.kafka_name!r} has {count} partition"
            f"{'s' if count != 1 else ''} (0-{count - 1})",
        )


class TopicLookup:
    def __init__(self, services: Services) -> None:
        self.services = services
        self.store = services.store

    async def namespace_known(self, namespace: str) -> bool:
        if namespace == self.services.namespace:
            return True
        return bool(await self.services.run(self.store.list_topics, namespace))

    async def check_namespace(self, namespace: str) -> None:
        if not await self.namespace_known(namespace):
            raise NamespaceNotFound(namespace)

    def namespace_scoped(self, handler: Handler) -> Handler:
        """The handler, its "no such topic" turned into "no such namespace" where that is
        what is missing."""

        async def endpoint(request: Request) -> Response:
            try:
                return await handler(request)
            except TopicNotFound as exc:
                if isinstance(exc, NoAutoCreate | NoSuchPartition):
                    raise  # it says more than the namespace would
                await self.check_namespace(request.path_params["namespace"])
                raise

        return endpoint

    async def writing(self, request: Request, tid: TopicId, write: Callable[[], Awaitable[T]]) -> T:
        """``write()``; with ?create=auto, a missing topic is created and written again.
        The store says whether the topic exists (no look-up before a write)."""
        auto = wants_create(request)
        try:
            return await write()
        except TopicNotFound:
            if not auto:
                raise
        await self.auto_create(request, tid)
        return await write()

    async def auto_create(self, request: Request, tid: TopicId) -> None:
        """Create ``tid``'s topic as Kafka's auto-create does: the gateway's default
        partition count, no configs (Kafka's defaults); in the Kafka namespace through the
        Kafka listener's topic registry, so its caches and Kafka clients see it at once."""
        broker = self.services.broker
        if not broker.config.auto_create_topics:
            raise NoAutoCreate(tid)
        refusal = request.scope.get(CREATE_REFUSAL)
        why = refusal() if refusal is not None else None
        if why is not None:
            raise HttpProblem(403, "forbidden", why)
        if tid.namespace == self.services.namespace:
            info = await broker.topics.ensure(tid.kafka_name, True)
            if info is None:  # deleted again meanwhile
                raise TopicNotFound(tid)
            count = info.partitions
        else:
            base = TopicId(tid.namespace, tid.kafka_name)
            try:
                md = await self.services.run(
                    partitions.create, self.store, base, {}, broker.config.default_partitions
                )
            except TopicAlreadyExists:  # another request created it first
                md = await self.services.run(self.store.get_topic, base)
            count = partitions.partition_count(md.properties)
        if tid.partition >= count:
            raise NoSuchPartition(tid, count)


def wants_create(request: Request) -> bool:
    """?create=auto; any other value is a 400 (before anything is written)."""
    if not request.scope["query_string"]:  # the common case, without parsing anything
        return False
    value = request.query_params.get("create")
    if value is None:
        return False
    if value != "auto":
        raise BadRequest(f"create: expected 'auto', got {value[:40]!r}")
    return True
