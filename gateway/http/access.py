"""Authentication and ACL authorization of the HTTP API, for every route in one place.

``guard`` wraps each handler once, when the routes are built (app.py): it names the
request's principal (auth.py; 401 without one when ``--http-auth required``) and asks the
authorizer (gateway/acls.py, the Kafka listener's, with the same ACLs) for what the
route's ``need`` (routes.py, declared with the route) asks (403 when it is denied),
before the handler runs; so a refused request changes nothing.

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
from .routes import Need, On, Route
from .topic_lookup import CREATE_REFUSAL
from .transactions import manifest_of

if TYPE_CHECKING:
    from tmsgate.gateway.services import Services

Handler = Callable[[Request], Awaitable[Response]]
Denied = tuple[tuple[Operation, ...], ResourceType, str]  # what the principal lacked
CHALLENGE = {"WWW-Authenticate": 'Basic realm="tmsgate", Bearer'}
# The request scope's key of its principal, for handlers that filter what they show by the
# ACLs (console.py); None: User:ANONYMOUS.
PRINCIPAL = "tmsgate.principal"


W, D = Operation.WRITE, Operation.DESCRIBE
__all__ = ["Access", "Need", "On"]


class Access:
    """The authenticator and authorizer of one HTTP listener."""

    def __init__(self, services: Services, config: HttpConfig) -> None:
        self.required = config.auth_required
        self.authenticator = Authenticator(services)
        self.authorizer: Authorizer = services.authorizer
        self.namespace = services.namespace
        self.max_body = config.max_body_bytes

    def guard(self, route: Route, handler: Handler) -> Handler:
        need = route.need
        if need.on is On.NOTHING:
            return handler

        async def endpoint(request: Request) -> Response:
            try:
                principal = await self.principal(request)
            except Unauthenticated as exc:
                return json_response({"error": "unauthorized", "message": str(exc)}, 401, CHALLENGE)
            request.scope[PRINCIPAL] = principal
            if not self.authorizer.enabled or need.on is On.LOGIN:
                return await handler(request)
            if need.on is On.TOPICS:
                return self.visible_topics(request, principal, await handler(request))
            request, denied = await self.check(request, principal, need)
            if denied is not None:
                return forbidden(principal, *denied)
            if need.creates and request.query_params.get("create") == "auto":
                request.scope[CREATE_REFUSAL] = self._create_refusal(request, principal)
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

    def _create_refusal(self, request: Request, principal: str | None) -> Callable[[], str | None]:
        """What ?create=auto asks when the topic is missing: CREATE on the cluster or the
        topic, as Kafka's auto-create (asked then, so a denial is logged only when it
        refuses something)."""

        def refusal() -> str | None:
            name = self.resource(
                topic_id(request.path_params["namespace"], request.path_params["topic"])
            )
            host = client_host(request)
            create = (Operation.CREATE,)
            cluster = (ResourceType.CLUSTER, CLUSTER_NAME)
            if self.allowed(principal, host, create, *cluster, log=False) or self.allowed(
                principal, host, create, ResourceType.TOPIC, name
            ):
                return None
            return f"{principal or ANONYMOUS} may not CREATE TOPIC {name!r} (?create=auto)"

        return refusal

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
