"""What a handler sees: the broker (shared state) and this request's details."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tmsgate.protocol import Request, response_class

from ..acls import CLUSTER_NAME, WILDCARD, Operation, ResourceType

if TYPE_CHECKING:
    from ..sasl import Exchange
    from .broker import Broker
    from .routes import RouteTable


@dataclass(slots=True)
class Session:
    """What one connection has established: its SASL login (gateway/sasl.py) or its
    client certificate's principal, and the client's address (for host ACLs)."""

    principal: str | None = None  # "User:<name>" once logged in (None: User:ANONYMOUS)
    host: str = WILDCARD  # the client's IP address
    mechanism: str | None = None
    exchange: Exchange | None = None  # a login under way
    # When the login ends (time.monotonic; None: never): past it, only a new login
    # (KIP-368 re-authentication) is served on the connection.
    expires_at: float | None = None
    # Set by a handler whose answer must be the connection's last (a failed login).
    close_after_answer: bool = False


@dataclass(slots=True)
class RequestContext:
    broker: Broker
    request: Request
    peer: str
    # The connection's login; a context built outside a connection (tests) gets its own.
    session: Session = field(default_factory=Session)
    # The listener's route table (ApiVersions lists it); None: every handler's (tests).
    routes: RouteTable | None = None
    # Set when the next pipelined request on this connection may start. The driver
    # sets it when the handler returns; a handler sets it earlier (release()) once the
    # order-sensitive part is done, e.g. a produce after submitting its writes, so the
    # next request overlaps with this one's fsync. Responses still go out in order.
    turn: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def version(self) -> int:
        return self.request.api_version

    def allowed(
        self, operation: Operation, resource_type: ResourceType, name: str, *, log: bool = True
    ) -> bool:
        """May this connection's principal do this (gateway/acls.py)? True with ACLs off."""
        s = self.session
        return self.broker.authorizer.allowed(
            s.principal, operation, resource_type, name, s.host, log_denial=log
        )

    def may_manage_users(self, operation: Operation) -> bool:
        """Describe/AlterUserScramCredentials: Kafka's check, on the cluster; without an
        authorizer anyone may, as in Kafka (whoever reaches a listener is trusted with
        everything then: docs/security.md)."""
        return self.allowed(operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def may_create_topic(self, name: str) -> bool:
        """Kafka: Create on the cluster, or on the topic."""
        return self.allowed(
            Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, log=False
        ) or self.allowed(Operation.CREATE, ResourceType.TOPIC, name)

    def release(self) -> None:
        self.turn.set()

    def response(self, **fields: Any) -> Any:
        """This request's response class, at the request's version, with these fields."""
        return response_class(self.request.api_key, self.version)(**fields)


class CloseConnection(Exception):
    """Raised by a handler when Kafka would drop the connection instead of answering
    (for example an acks=0 produce that fails: the client has no other way to learn)."""
