"""Authentication and ACL authorization of the HTTP API, for every route in one place.

``guard`` wraps each handler once, when the routes are built (app.py): it names the
request's principal (auth.py; 401 without one when ``--http-auth required``) and asks the
authorizer (gateway/acls.py, the Kafka listener's, with the same ACLs) for what the
route's entry in ``PERMISSIONS`` needs (403 when it is denied), before the handler runs;
so a refused request changes nothing. A route without an entry fails the start-up.

Resources: a topic of the gateway's Kafka namespace is the Kafka topic (partition
``name~p`` is topic ``name``), so HTTP and Kafka clients share its ACLs; a topic of
another namespace is ``/<namespace>/<topic>``: '/' is never part of a Kafka topic's name,
so no ACL meant for Kafka topics, not even a PREFIXED one, covers another namespace.
The transaction service is the CLUSTER resource ``kafka-cluster``.

With ``--http-auth none`` every request is User:ANONYMOUS, as on a Kafka PLAINTEXT
listener (an Authorization header is ignored); with ACLs off every check passes.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message
from tmsgate.gateway.acls import (
    ANONYMOUS,
    CLUSTER_NAME,
    Authorizer,
    Operation,
    ResourceType,
    canonical_host,
)
from tmsgate.storage import TopicId

from .auth import Authenticator, Unauthenticated
from .config import HttpConfig
from .errors import json_response, read_body, topic_id, write_pointer_of
from .transactions import manifest_of

if TYPE_CHECKING:
    from tmsgate.gateway.services import Services

Handler = Callable[[Request], Awaitable[Response]]
Denied = tuple[tuple[Operation, ...], ResourceType, str]  # what the principal lacked
CHALLENGE = {"WWW-Authenticate": 'Basic realm="tmsgate", Bearer'}


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


W, R, D = Operation.WRITE, Operation.READ, Operation.DESCRIBE
# Route name (the handler's) -> what its principal needs.
PERMISSIONS: dict[str, Need] = {
    "list_topics": Need(On.TOPICS, (D,)),
    "create_topic": Need(On.TOPIC, (Operation.CREATE,), or_cluster=Operation.CREATE),
    "get_topic": Need(On.TOPIC, (D,)),
    "delete_topic": Need(On.TOPIC, (Operation.DELETE,)),
    "update_topic": Need(On.TOPIC, (Operation.ALTER_CONFIGS,)),
    "publish": Need(On.TOPIC, (W,)),
    "store": Need(On.TOPIC, (W,)),
    "rollback": Need(On.TOPIC, (W,)),
    "poll": Need(On.TOPIC, (R,)),
    "read": Need(On.TOPIC, (R,)),
    "offsets": Need(On.TOPIC, (D,)),
    # kafka-acls.sh refuses Write on --cluster (Kafka's valid cluster operations), so
    # IdempotentWrite, which it grants, does as well.
    "start_transaction": Need(On.CLUSTER, (W, Operation.IDEMPOTENT_WRITE), keyed=True),
    "commit": Need(On.CLUSTER, (W, Operation.IDEMPOTENT_WRITE), manifest=True),
    "abort": Need(On.CLUSTER, (W, Operation.IDEMPOTENT_WRITE)),
    "invalidate": Need(On.CLUSTER, (Operation.ALTER,)),  # an operator's: any transaction
    "list_transactions": Need(On.CLUSTER, (D,)),
    "transaction_state": Need(On.CLUSTER, (D,)),
    # Read pointers only: what a transactional poll then reads needs READ on its topic.
    "snapshot": Need(On.LOGIN),
    "healthz": Need(On.NOTHING),
    "readyz": Need(On.NOTHING),
    "openapi": Need(On.NOTHING),
}


class Access:
    """The authenticator and authorizer of one HTTP listener."""

    def __init__(self, services: Services, config: HttpConfig) -> None:
        self.required = config.auth_required
        self.authenticator = Authenticator(services)
        self.authorizer: Authorizer = services.authorizer
        self.namespace = services.namespace
        self.max_body = config.max_body_bytes

    def guard(self, name: str, handler: Handler) -> Handler:
        need = PERMISSIONS.get(name)
        if need is None:
            raise ValueError(f"route {name!r} has no entry in the HTTP permission table")
        if need.on is On.NOTHING:
            return handler

        async def endpoint(request: Request) -> Response:
            try:
                principal = await self.principal(request)
            except Unauthenticated as exc:
                return json_response({"error": "unauthorized", "message": str(exc)}, 401, CHALLENGE)
            if not self.authorizer.enabled or need.on is On.LOGIN:
                return await handler(request)
            if need.on is On.TOPICS:
                return self.visible_topics(request, principal, await handler(request))
            request, denied = await self.check(request, principal, need)
            if denied is not None:
                return forbidden(principal, *denied)
            return await handler(request)

        return endpoint

    async def principal(self, request: Request) -> str | None:
        """The request's principal; None (User:ANONYMOUS) when authentication is off."""
        if not self.required:
            return None
        header = request.headers.get("authorization")
        if header is None:
            raise Unauthenticated(
                "authentication required: HTTP Basic (over HTTPS) or a bearer token"
            )
        return await self.authenticator.principal(header, request.scope["scheme"] == "https")

    def resource(self, tid: TopicId) -> str:
        """A topic's ACL resource name (see the module's docstring)."""
        if tid.namespace == self.namespace:
            return tid.kafka_name
        return f"/{tid.namespace}/{tid.kafka_name}"

    def allowed(
        self,
        principal: str | None,
        host: str,
        ops: tuple[Operation, ...],
        rtype: ResourceType,
        name: str,
        *,
        log: bool = True,
    ) -> bool:
        """May the principal do any of ``ops``? Only the last denial is logged (if ``log``):
        one line for one refused request."""
        ask, last = self.authorizer.allowed, len(ops) - 1
        return any(
            ask(principal, op, rtype, name, host, log_denial=log and i == last)
            for i, op in enumerate(ops)
        )

    async def check(
        self, request: Request, principal: str | None, need: Need
    ) -> tuple[Request, Denied | None]:
        """-> the request (to read its body again after a manifest was read from it) and,
        if the principal may not, what it lacks."""
        host = client_host(request)
        cluster = (ResourceType.CLUSTER, CLUSTER_NAME)
        if need.on is On.CLUSTER:
            rtype, name = cluster
        else:
            tid = topic_id(request.path_params["namespace"], request.path_params["topic"])
            rtype, name = ResourceType.TOPIC, self.resource(tid)
            if need.or_cluster and self.allowed(
                principal, host, (need.or_cluster,), *cluster, log=False
            ):
                return request, None
        if not self.allowed(principal, host, need.operations, rtype, name):
            return request, (need.operations, rtype, name)
        if need.keyed:
            request, key = await self._transaction_key(request)
            txn_id = (ResourceType.TRANSACTIONAL_ID, key or "")
            if key is not None and not self.allowed(principal, host, (W,), *txn_id):
                return request, ((W,), *txn_id)
        if need.manifest:
            request, topics = await self._manifest_topics(request)
            for topic in topics:
                if not self.allowed(principal, host, (W,), ResourceType.TOPIC, topic):
                    return request, ((W,), ResourceType.TOPIC, topic)
        return request, None

    async def _transaction_key(self, request: Request) -> tuple[Request, str | None]:
        """The key a transaction's start names, and the request with its body to read
        again. A body the handler refuses (400) names none here."""
        body = await read_body(request, self.max_body)
        request = _with_body(request, body)
        try:
            doc = json.loads(body) if body else None
        except (ValueError, RecursionError):
            return request, None
        key = doc.get("key") if isinstance(doc, dict) else None
        return request, key if isinstance(key, str) else None

    async def _manifest_topics(self, request: Request) -> tuple[Request, list[str]]:
        """The topics a commit's body would publish to, and the request with that body to
        read again. A body that is no manifest names none: the handler refuses it (400)."""
        body = await read_body(request, self.max_body)
        request = _with_body(request, body)
        try:
            doc = json.loads(body) if body else None
            wp = write_pointer_of(request.path_params["wp"])
            manifest = manifest_of(wp, doc) if isinstance(doc, dict) and doc else []
        except (ValueError, RecursionError):  # the handler answers this body with its 400
            return request, []
        return request, sorted({self.resource(tid) for tid, _ in manifest})

    def visible_topics(self, request: Request, principal: str | None, resp: Response) -> Response:
        """A topic listing without the topics the principal may not DESCRIBE (a denial
        here is no error, so it is not logged), as Kafka's Metadata for all topics."""
        if resp.status_code != 200:
            return resp
        host = client_host(request)
        namespace = request.path_params["namespace"]
        names = [
            n
            for n in json.loads(resp.body)
            if self.allowed(
                principal,
                host,
                (D,),
                ResourceType.TOPIC,
                self.resource(TopicId.stored(namespace, n)),
                log=False,
            )
        ]
        return json_response(names)


def client_host(request: Request) -> str:
    """The client's address as host ACLs name it (gateway/acls.py canonical_host)."""
    return canonical_host(request.client.host) if request.client else "*"


def forbidden(
    principal: str | None, ops: tuple[Operation, ...], rtype: ResourceType, name: str
) -> Response:
    who = principal or ANONYMOUS
    what = " or ".join(op.name for op in ops)
    message = f"{who} may not {what} {rtype.name} {name!r}"
    return json_response({"error": "forbidden", "message": message}, 403)


def _with_body(request: Request, body: bytes) -> Request:
    """The request again, its body (already read) served to the handler's read."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return await request.receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return Request(request.scope, receive)
