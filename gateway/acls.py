"""Kafka's ACL model and the authorizer that checks it, for the Kafka and HTTP listeners.

An ACL binding is Kafka's: a resource pattern (type, name, LITERAL or PREFIXED), a
principal ("User:alice", "User:*"), a host ("*" or an address), an operation and ALLOW or
DENY. Bindings are kept in the store's MetadataTable, one row each (state area ``acls``,
the binding's canonical JSON as the key), so adding or deleting one is a single-row write
on any backend; the authorizer holds them all in memory and answers from there.

Decisions follow Apache Kafka's StandardAuthorizer:
- super users may do anything;
- a resource no ACL matches at all is open only with allow.everyone.if.no.acl.found;
- a matching DENY wins over any ALLOW;
- an ALLOW of the operation or ALL permits it, and Describe is also implied by Read,
  Write, Delete and Alter, DescribeConfigs by AlterConfigs (never for DENY).

Decisions are cached per (principal, host, operation, resource) until the ACLs change,
so a request pays a dictionary lookup. Denials are counted and logged once per
principal, resource and operation per LOG_INTERVAL_S.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import IntEnum

from tmsgate.storage import Store

from .errors import BadRequest

log = logging.getLogger("tmsgate.acl")
AREA = "acls"
CLUSTER_NAME = "kafka-cluster"  # the one name of the CLUSTER resource
WILDCARD = "*"  # a literal resource name or host that matches every one
ANONYMOUS = "User:ANONYMOUS"  # Kafka's principal for a connection that did not log in
WILDCARD_PRINCIPAL = "User:*"
LOG_INTERVAL_S = 60.0
MAX_CACHED = 100_000  # decisions kept; the cache starts over beyond this
_Key = tuple[str, str, "Operation", "ResourceType", str]


class AclError(BadRequest):
    """A binding or filter Kafka would refuse (INVALID_REQUEST); the message says why."""


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


_IMPLIES_DESCRIBE = frozenset(
    {Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
)
_IMPLIES_DESCRIBE_CONFIGS = frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS})


def canonical_host(host: str) -> str:
    """One spelling per address, for host ACLs and the clients' addresses alike: an IPv4
    client of a dual-stack socket (``::ffff:10.0.0.1``) is ``10.0.0.1``, and IPv6 is in its
    short form whether Kafka's tools wrote ``0:0:0:0:0:0:0:1`` or ``::1``. Anything that is
    not an address (``*``, a host name) stays as it is."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return str(address)


def check_principal(principal: str) -> str:
    """Kafka's principal form, "Type:name": parseKafkaPrincipal only needs the colon."""
    if ":" not in principal:
        raise AclError(f"Could not parse principal from `{principal}` (no colon is found)")
    return principal


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def validate(self) -> AclBinding:
        """Refuse what Kafka's controller refuses, in its words."""
        if self.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise AclError("Invalid resourceType " + self.resource_type.name)
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise AclError("Invalid patternType " + self.pattern_type.name)
        if self.operation in (Operation.ANY, Operation.UNKNOWN):
            raise AclError("Invalid operation " + self.operation.name)
        if self.permission not in (Permission.ALLOW, Permission.DENY):
            raise AclError("Invalid permissionType " + self.permission.name)
        if not self.resource_name:
            raise AclError("Resource name should not be empty")
        if self.resource_type == ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            raise AclError("The only valid name for the CLUSTER resource is " + CLUSTER_NAME)
        check_principal(self.principal)
        host = canonical_host(self.host)
        return self if host == self.host else dataclasses.replace(self, host=host)

    def key(self) -> str:
        return json.dumps(
            [
                self.resource_type.name,
                self.resource_name,
                self.pattern_type.name,
                self.principal,
                self.host,
                self.operation.name,
                self.permission.name,
            ],
            separators=(",", ":"),
        )

    @classmethod
    def from_key(cls, key: str) -> AclBinding:
        rt, name, pt, principal, host, op, perm = json.loads(key)
        return cls(
            ResourceType[rt],
            name,
            PatternType[pt],
            principal,
            host,
            Operation[op],
            Permission[perm],
        )

    def pattern_matches(self, name: str) -> bool:
        """Whether this binding's resource pattern covers a resource of this name."""
        if self.pattern_type == PatternType.LITERAL:
            return self.resource_name in (name, WILDCARD)
        return name.startswith(self.resource_name)


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Kafka's AclBindingFilter: None (or ANY) matches every value of a field."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def validate(self) -> AclFilter:
        if self.host is not None and canonical_host(self.host) != self.host:
            return dataclasses.replace(self, host=canonical_host(self.host)).validate()
        for field, value in (
            ("resourceType", self.resource_type),
            ("patternType", self.pattern_type),
            ("operation", self.operation),
            ("permissionType", self.permission),
        ):
            if value == 0:  # UNKNOWN in every enum
                raise AclError(f"Invalid {field} UNKNOWN in the filter")
        return self

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and b.resource_type != self.resource_type:
            return False
        if not self._pattern_matches(b):
            return False
        if self.principal is not None and b.principal != self.principal:
            return False
        if self.host is not None and b.host != self.host:
            return False
        if self.operation != Operation.ANY and b.operation != self.operation:
            return False
        return self.permission == Permission.ANY or b.permission == self.permission

    def _pattern_matches(self, b: AclBinding) -> bool:
        pt, name = self.pattern_type, self.resource_name
        if pt == PatternType.MATCH:
            # The bindings that would apply to a resource of this name.
            return name is None or b.pattern_matches(name)
        if pt != PatternType.ANY and b.pattern_type != pt:
            return False
        return name is None or b.resource_name == name


def _covers(deny: AclBinding, allow: AclBinding) -> bool:
    """Whether a DENY's pattern covers every resource an ALLOW's pattern names."""
    if deny.pattern_type == PatternType.LITERAL:
        return deny.resource_name == WILDCARD or (
            allow.pattern_type == PatternType.LITERAL and allow.resource_name == deny.resource_name
        )
    return allow.resource_name.startswith(deny.resource_name)


@dataclass(slots=True)
class _Index:
    """One resource type's bindings, looked up by a resource name without a scan of them
    all: literal ones by name (``*`` among them), prefixed ones by prefix, so a decision
    costs one lookup per character of the name, however many ACLs there are."""

    all: list[AclBinding]
    literal: dict[str, list[AclBinding]]
    prefixed: dict[str, list[AclBinding]]

    @classmethod
    def of(cls, bindings: list[AclBinding]) -> _Index:
        index = cls(bindings, {}, {})
        for b in bindings:
            table = index.literal if b.pattern_type == PatternType.LITERAL else index.prefixed
            table.setdefault(b.resource_name, []).append(b)
        return index

    def matching(self, name: str) -> list[AclBinding]:
        found = list(self.literal.get(name, ()))
        if name != WILDCARD:
            found += self.literal.get(WILDCARD, ())
        if self.prefixed:
            for end in range(1, len(name) + 1):
                found += self.prefixed.get(name[:end], ())
        return found


class Authorizer:
    """The ACLs of one store, and the decisions made from them. Thread-safe: the Kafka
    listener asks on the event loop, the HTTP API too, and changes come from handlers
    through the I/O executor."""

    def __init__(
        self,
        store: Store,
        *,
        enabled: bool = False,
        super_users: Iterable[str] = (),
        allow_if_no_acl: bool = False,
        on_denied: Callable[[ResourceType, Operation], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self.enabled = enabled
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._on_denied = on_denied
        self._clock = clock
        self._lock = threading.Lock()  # the in-memory state and the denial log
        # Changes, store write and memory together: two requests changing the same binding
        # must leave the store and memory agreeing. Checks never take it.
        self._changing = threading.Lock()
        self._bindings: dict[str, AclBinding] = {}
        # The bindings by resource type, and the decisions made from exactly those: one
        # tuple, replaced whole, so no decision is cached against other bindings.
        self._state: tuple[dict[ResourceType, _Index], dict[_Key, bool]] = ({}, {})
        self._logged: dict[tuple[str, ResourceType, str, Operation], float] = {}
        self._suppressed = 0
        self.load()

    # --- the bindings -------------------------------------------------------------------
    def load(self) -> None:
        """Read every binding from the store (blocking)."""
        bindings = {}
        for key, _ in self._store.scan_state(AREA):
            try:
                bindings[key] = AclBinding.from_key(key)
            except (ValueError, KeyError, TypeError):
                log.error("ignoring an unreadable ACL row %r", key[:200])
        with self._lock:
            self._replace(bindings)

    def _replace(self, bindings: dict[str, AclBinding]) -> None:
        self._bindings = bindings
        grouped: dict[ResourceType, list[AclBinding]] = {}
        for b in bindings.values():
            grouped.setdefault(b.resource_type, []).append(b)
        self._state = ({rtype: _Index.of(found) for rtype, found in grouped.items()}, {})

    def bindings(self, flt: AclFilter | None = None) -> list[AclBinding]:
        with self._lock:
            found = list(self._bindings.values())
        return found if flt is None else [b for b in found if flt.matches(b)]

    def create(self, binding: AclBinding) -> None:
        """Add one binding (blocking: a durable write); adding it twice changes nothing."""
        binding = binding.validate()
        key = binding.key()
        with self._changing:
            self._store.put_state(AREA, key, b"")
            with self._lock:
                bindings = dict(self._bindings)
                bindings[key] = binding
                self._replace(bindings)

    def delete(self, flt: AclFilter) -> list[AclBinding]:
        """Remove the bindings the filter matches (blocking); returns them."""
        return self.delete_all([flt])[0]

    def delete_all(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        """Remove what any of the filters matches, in one write (blocking). Each filter's
        list is what it matched before the request, as Kafka's DeleteAcls answers: a
        binding two filters match is listed under both. Filters are validated first."""
        filters = [flt.validate() for flt in filters]
        with self._changing:
            before = self.bindings()
            matched = [[b for b in before if flt.matches(b)] for flt in filters]
            gone = {b.key(): b for found in matched for b in found}
            if gone:
                self._store.put_states({(AREA, key): None for key in gone})
                with self._lock:
                    bindings = dict(self._bindings)
                    for key in gone:
                        bindings.pop(key, None)
                    self._replace(bindings)
        return matched

    # --- decisions ----------------------------------------------------------------------
    def allowed(
        self,
        principal: str | None,
        operation: Operation,
        resource_type: ResourceType,
        name: str,
        host: str = WILDCARD,
        *,
        log_denial: bool = True,
    ) -> bool:
        """May ``principal`` (None: not logged in, User:ANONYMOUS) do ``operation`` on the
        resource? Always True with the authorizer off. ``log_denial`` False for checks
        whose denial is not an error (Metadata leaving a topic out of a full listing)."""
        if not self.enabled:
            return True
        who = principal or ANONYMOUS
        key = (who, host, operation, resource_type, name)
        by_type, cache = self._state
        decision = cache.get(key)
        if decision is None:
            decision = self._decide(by_type, who, host, operation, resource_type, name)
            if len(cache) >= MAX_CACHED:
                cache.clear()
            cache[key] = decision
        if not decision and log_denial:
            self._denied(who, host, operation, resource_type, name)
        return decision

    def any_allowed(
        self, principal: str | None, operation: Operation, resource_type: ResourceType, host: str
    ) -> bool:
        """May ``principal`` do ``operation`` on some resource of this type? Kafka's
        authorizeByResourceType (KIP-679: an idempotent producer needs Write on any topic):
        an ALLOW not wholly covered by a DENY of the same principal. Not cached: asked
        once per InitProducerId."""
        if not self.enabled:
            return True
        who = principal or ANONYMOUS
        # Kafka first asks about a name no ACL names ("hardcode"): allowed for super users,
        # and with allow.everyone.if.no.acl.found when no ACL matches it.
        if self.allowed(who, operation, resource_type, "hardcode", host, log_denial=False):
            return True
        by_type, _ = self._state
        found = [
            b
            for b in (by_type[resource_type].all if resource_type in by_type else ())
            if b.principal in (who, WILDCARD_PRINCIPAL)
            and b.host in (host, WILDCARD)
            and b.operation in (operation, Operation.ALL)
        ]
        denies = [b for b in found if b.permission == Permission.DENY]
        for allow in found:
            if allow.permission != Permission.ALLOW:
                continue
            if not any(_covers(deny, allow) for deny in denies):
                return True
        return False

    def _decide(
        self,
        by_type: dict[ResourceType, _Index],
        who: str,
        host: str,
        op: Operation,
        rtype: ResourceType,
        name: str,
    ) -> bool:
        if who in self.super_users:
            return True
        index = by_type.get(rtype)
        matching = index.matching(name) if index is not None else []
        if not matching:
            return self.allow_if_no_acl
        allow = False
        for b in matching:
            if b.principal not in (who, WILDCARD_PRINCIPAL) or b.host not in (host, WILDCARD):
                continue
            if b.permission == Permission.DENY:
                if b.operation in (op, Operation.ALL):
                    return False
            elif b.operation in (op, Operation.ALL) or (
                (op == Operation.DESCRIBE and b.operation in _IMPLIES_DESCRIBE)
                or (op == Operation.DESCRIBE_CONFIGS and b.operation in _IMPLIES_DESCRIBE_CONFIGS)
            ):
                allow = True
        return allow

    def _denied(self, who: str, host: str, op: Operation, rtype: ResourceType, name: str) -> None:
        if self._on_denied is not None:
            self._on_denied(rtype, op)
        now = self._clock()
        key = (who, rtype, name, op)
        with self._lock:
            last = self._logged.get(key)
            if last is not None and now - last < LOG_INTERVAL_S:
                self._suppressed += 1
                return
            if len(self._logged) >= MAX_CACHED:
                self._logged = {}
            self._logged[key] = now
            suppressed, self._suppressed = self._suppressed, 0
        log.warning(
            "denied: %s from %s may not %s %s %r%s",
            who,
            host,
            op.name,
            rtype.name,
            name,
            f" ({suppressed} other denials not logged since)" if suppressed else "",
        )
