"""Topic administration: create, update, describe, list and delete (the seed's REST API).

Topics in the Kafka namespace are Kafka's topics too: the Kafka side learns of changes
made here through the store's topic listener. A Kafka topic's partition p > 0 is the
topic ``name~p`` (storage/partitions.py): readable and writable here like any topic,
but created, reconfigured and deleted only with its topic (``name``), whose property
``kafka.partitions`` is the partition count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from tmsgate.gateway.acls import Operation
from tmsgate.gateway.errors import BadRequest
from tmsgate.storage import TopicId, TopicMetadata, partitions
from tmsgate.storage.ids import MAX_PARTITIONS

from .config import HttpConfig
from .errors import check_namespace, json_response, read_json_object, topic_id
from .openapi import EMPTY_OK, JSON_TYPE, json_ok, ref
from .routes import Doc, Need, On, Route
from .topic_lookup import TopicLookup

if TYPE_CHECKING:
    from tmsgate.gateway.services import Services

BASE = "/v1/namespaces/{namespace}/topics"
# A topic's properties are a few short strings: no need for the 64 MiB message limit.
_MAX_PROPERTIES_BYTES = 1 << 20


def topic_json(md: TopicMetadata) -> dict[str, Any]:
    return {"name": md.topic.topic, "properties": dict(md.properties)}


def properties_of(doc: dict[str, Any]) -> dict[str, str]:
    """Property values are strings; numbers are accepted and turned into strings."""
    props = {}
    for name, value in doc.items():
        if isinstance(value, str):
            props[name] = value
        elif isinstance(value, int | float) and not isinstance(value, bool):
            props[name] = str(value)
        else:
            kind = "null" if value is None else type(value).__name__
            raise BadRequest(f"property {name!r}: expected a string or a number, got {kind}")
    return props


D = Operation.DESCRIBE
PROPERTIES_BODY = {"required": False, "content": {JSON_TYPE: {"schema": ref("Properties")}}}


class TopicHandlers:
    ROUTES = (
        Route(
            "GET",
            BASE,
            "list_topics",
            Need(On.TOPICS, (D,)),
            Doc("Names of the namespace's topics, sorted", json_ok("TopicList"), (400, 503)),
        ),
        Route(
            "PUT",
            BASE + "/{topic}",
            "create_topic",
            Need(On.TOPIC, (Operation.CREATE,), or_cluster=Operation.CREATE),
            Doc(
                "Create a topic, optionally with properties (and so its namespace)",
                json_ok("Topic"),
                (400, 409, 413, 415, 503),
                body=PROPERTIES_BODY,
            ),
        ),
        Route(
            "GET",
            BASE + "/{topic}",
            "get_topic",
            Need(On.TOPIC, (D,)),
            Doc("A topic's properties", json_ok("Topic"), (400, 404, 503)),
        ),
        Route(
            "DELETE",
            BASE + "/{topic}",
            "delete_topic",
            Need(On.TOPIC, (Operation.DELETE,)),
            Doc("Delete a topic", EMPTY_OK, (400, 404, 503)),
        ),
        Route(
            "PUT",
            BASE + "/{topic}/properties",
            "update_topic",
            Need(On.TOPIC, (Operation.ALTER_CONFIGS,)),
            Doc(
                "Replace all of a topic's properties",
                json_ok("Topic"),
                (400, 404, 413, 415, 503),
                body={**PROPERTIES_BODY, "required": True},
            ),
        ),
    )

    def __init__(self, services: Services, config: HttpConfig) -> None:
        self.services = services
        self.store = services.store
        self.lookup = TopicLookup(services)

    async def list_topics(self, request: Request) -> Response:
        namespace = check_namespace(request.path_params["namespace"])
        topics = await self.services.run(self.store.list_topics, namespace)
        if not topics:  # none: is there such a namespace at all?
            await self.lookup.check_namespace(namespace)
        return json_response(sorted(t.topic for t in topics))

    async def create_topic(self, request: Request) -> Response:
        tid = _whole_topic(request)
        doc = await read_json_object(request, _MAX_PROPERTIES_BYTES, required=False)
        props = properties_of(doc)
        count = props.get(partitions.PARTITIONS, "1")
        if not (count.isascii() and count.isdigit() and 0 < int(count) < MAX_PARTITIONS):
            raise BadRequest(
                f"{partitions.PARTITIONS} must be a whole number from 1 to "
                f"{MAX_PARTITIONS - 1}, got {count!r}"
            )
        md = await self.services.run(partitions.create, self.store, tid, props, int(count))
        return json_response(topic_json(md))

    async def get_topic(self, request: Request) -> Response:
        tid = topic_id(request.path_params["namespace"], request.path_params["topic"])
        return json_response(topic_json(await self.services.run(self.store.get_topic, tid)))

    async def delete_topic(self, request: Request) -> Response:
        tid = _whole_topic(request)
        await self.services.run(partitions.delete, self.store, tid)
        return Response(status_code=200)

    async def update_topic(self, request: Request) -> Response:
        tid = _whole_topic(request)
        # Required: an empty body would otherwise wipe every property by accident.
        doc = await read_json_object(request, _MAX_PROPERTIES_BYTES, required=True)
        props = properties_of(doc)
        if partitions.PARTITIONS in props:
            raise BadRequest(
                f"{partitions.PARTITIONS} cannot change here: add partitions with Kafka's "
                "CreatePartitions (kafka-topics.sh --alter --partitions N)"
            )
        md = await self.services.run(partitions.update, self.store, tid, props)
        return json_response(topic_json(md))


def _whole_topic(request: Request) -> TopicId:
    """The topic a create, update or delete names: never one partition of a topic."""
    tid = topic_id(request.path_params["namespace"], request.path_params["topic"])
    if tid.partition:
        raise BadRequest(
            f"{tid.topic!r} is partition {tid.partition} of topic {tid.kafka_name!r}: "
            "partitions are created, configured and deleted with their topic"
        )
    return tid
