"""The ACL authorizer's decisions (gateway/acls.py) on a real store: Kafka's rules case by
case, bindings kept across a reopen, filters as Kafka's AclBindingFilter, and a model
test that compares every decision with a plain restatement of the rules."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tmsgate.gateway.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclError,
    AclFilter,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from tmsgate.storage import Store

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
ALICE, BOB = "User:alice", "User:bob"


def acl(
    rtype: ResourceType,
    name: str,
    principal: str,
    op: Operation,
    perm: Permission = ALLOW,
    pattern: PatternType = LIT,
    host: str = "*",
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


@pytest.fixture
def authz(store: Store) -> Authorizer:
    return Authorizer(store, enabled=True, super_users=["User:admin"])


def test_off_allows_everything(store: Store) -> None:
    off = Authorizer(store)
    assert off.allowed(None, Operation.DELETE, T, "x")


def test_no_acl_denies_unless_allow_everyone(store: Store, authz: Authorizer) -> None:
    assert not authz.allowed(ALICE, Operation.READ, T, "orders")
    open_ = Authorizer(store, enabled=True, allow_if_no_acl=True)
    assert open_.allowed(ALICE, Operation.READ, T, "orders")
    # Any ACL on the resource, even another principal's, closes it.
    open_.create(acl(T, "orders", BOB, Operation.READ))
    assert not open_.allowed(ALICE, Operation.READ, T, "orders")
    assert open_.allowed(ALICE, Operation.READ, T, "payments")


def test_super_user_and_literal_prefixed_wildcard(authz: Authorizer) -> None:
    assert authz.allowed("User:admin", Operation.ALTER, C, CLUSTER_NAME)
    authz.create(acl(T, "orders", ALICE, Operation.WRITE))
    authz.create(acl(T, "audit.", ALICE, Operation.READ, pattern=PRE))
    authz.create(acl(T, "*", "User:*", Operation.DESCRIBE))
    assert authz.allowed(ALICE, Operation.WRITE, T, "orders")
    assert not authz.allowed(ALICE, Operation.WRITE, T, "orders2")
    assert authz.allowed(ALICE, Operation.READ, T, "audit.logins")
    assert not authz.allowed(ALICE, Operation.READ, T, "audit")
    assert authz.allowed(BOB, Operation.DESCRIBE, T, "anything")
    assert not authz.allowed(BOB, Operation.READ, T, "anything")


def test_deny_wins_and_implied_operations(authz: Authorizer) -> None:
    authz.create(acl(T, "t", ALICE, Operation.ALL))
    authz.create(acl(T, "t", ALICE, Operation.WRITE, DENY))
    assert authz.allowed(ALICE, Operation.READ, T, "t")
    assert not authz.allowed(ALICE, Operation.WRITE, T, "t")
    authz.create(acl(G, "g", ALICE, Operation.READ))
    assert authz.allowed(ALICE, Operation.DESCRIBE, G, "g")  # Read implies Describe
    authz.create(acl(T, "c", ALICE, Operation.ALTER_CONFIGS))
    assert authz.allowed(ALICE, Operation.DESCRIBE_CONFIGS, T, "c")
    # A DENY of Read does not deny Describe (Kafka implies only for ALLOW).
    authz.create(acl(G, "g", ALICE, Operation.READ, DENY))
    authz.create(acl(G, "g", ALICE, Operation.DESCRIBE))
    assert authz.allowed(ALICE, Operation.DESCRIBE, G, "g")
    assert not authz.allowed(ALICE, Operation.READ, G, "g")


def test_host_acls(authz: Authorizer) -> None:
    authz.create(acl(T, "t", ALICE, Operation.READ, host="10.0.0.1"))
    assert authz.allowed(ALICE, Operation.READ, T, "t", "10.0.0.1")
    assert not authz.allowed(ALICE, Operation.READ, T, "t", "10.0.0.2")


def test_changes_apply_at_once_and_survive_a_reopen(
    open_test_store: Callable[..., Store], store: Store, authz: Authorizer
) -> None:
    assert not authz.allowed(ALICE, Operation.READ, T, "t")  # cached as denied
    authz.create(acl(T, "t", ALICE, Operation.READ))
    assert authz.allowed(ALICE, Operation.READ, T, "t")
    authz.create(acl(T, "t", ALICE, Operation.READ))  # twice: one binding
    assert len(authz.bindings()) == 1
    authz.create(acl(T, "u", BOB, Operation.WRITE, pattern=PRE))
    store.close()
    again = Authorizer(open_test_store(), enabled=True)
    assert sorted(b.key() for b in again.bindings()) == sorted(b.key() for b in authz.bindings())
    gone = again.delete(AclFilter(principal=ALICE))
    assert [b.principal for b in gone] == [ALICE]
    assert not again.allowed(ALICE, Operation.READ, T, "t")


def test_filters_match_as_kafka(authz: Authorizer) -> None:
    authz.create(acl(T, "orders", ALICE, Operation.READ))
    authz.create(acl(T, "ord", BOB, Operation.READ, pattern=PRE))
    authz.create(acl(T, "*", BOB, Operation.WRITE))
    authz.create(acl(G, "orders", ALICE, Operation.READ))

    def names(flt: AclFilter) -> list[tuple[str, str]]:
        return sorted((b.resource_name, b.principal) for b in authz.bindings(flt))

    assert len(authz.bindings(AclFilter())) == 4
    assert names(AclFilter(T, "orders")) == [("orders", ALICE)]  # ANY pattern: exact name
    assert names(AclFilter(T, "orders", PatternType.MATCH)) == [
        ("*", BOB),
        ("ord", BOB),
        ("orders", ALICE),
    ]
    assert names(AclFilter(T, pattern_type=PRE)) == [("ord", BOB)]
    assert names(AclFilter(operation=Operation.WRITE)) == [("*", BOB)]


@pytest.mark.parametrize(
    "binding",
    [
        acl(C, "other", ALICE, Operation.ALTER),
        acl(T, "t", ALICE, Operation.ANY),
        acl(T, "t", "alice", Operation.READ),
        acl(T, "", ALICE, Operation.READ),
        acl(T, "t", ALICE, Operation.READ, Permission.ANY),
        acl(ResourceType.ANY, "t", ALICE, Operation.READ),
        acl(T, "t", ALICE, Operation.READ, pattern=PatternType.MATCH),
    ],
)
def test_invalid_bindings_are_refused(authz: Authorizer, binding: AclBinding) -> None:
    with pytest.raises(AclError):
        authz.create(binding)
    assert authz.bindings() == []


def test_any_allowed_by_resource_type(authz: Authorizer) -> None:
    assert not authz.any_allowed(ALICE, Operation.WRITE, T, "*")
    authz.create(acl(T, "a.", ALICE, Operation.WRITE, pattern=PRE))
    assert authz.any_allowed(ALICE, Operation.WRITE, T, "*")
    authz.create(acl(T, "a", ALICE, Operation.WRITE, DENY, pattern=PRE))  # covers "a."
    assert not authz.any_allowed(ALICE, Operation.WRITE, T, "*")


def test_denials_are_counted_and_logged_once(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    counted: list[tuple[ResourceType, Operation]] = []
    now = [0.0]
    authz = Authorizer(
        store, enabled=True, on_denied=lambda r, o: counted.append((r, o)), clock=lambda: now[0]
    )
    with caplog.at_level("WARNING", logger="tmsgate.acl"):
        for _ in range(5):
            assert not authz.allowed(ALICE, Operation.READ, T, "t")
        now[0] += 61
        assert not authz.allowed(ALICE, Operation.READ, T, "t")
    assert len(counted) == 6
    lines = [r.getMessage() for r in caplog.records if r.name == "tmsgate.acl"]
    assert len(lines) == 2 and "4 other denials" in lines[1]


# --- model test: every decision against the rules written out plainly ------------------
_PRINCIPALS = [ALICE, BOB, "User:*"]
_NAMES = ["a", "ab", "abc", "b", "*"]
_OPS = [Operation.READ, Operation.WRITE, Operation.DESCRIBE, Operation.ALL, Operation.ALTER]

bindings = st.builds(
    AclBinding,
    st.just(T),
    st.sampled_from(_NAMES),
    st.sampled_from([LIT, PRE]),
    st.sampled_from(_PRINCIPALS),
    st.sampled_from(["*", "10.0.0.1"]),
    st.sampled_from(_OPS),
    st.sampled_from([ALLOW, DENY]),
)


def _expected(
    acls: list[AclBinding], who: str, host: str, op: Operation, name: str, open_: bool
) -> bool:
    def pattern(b: AclBinding) -> bool:
        if b.pattern_type == LIT:
            return b.resource_name in (name, "*")
        return name.startswith(b.resource_name)

    on_resource = [b for b in acls if pattern(b)]
    if not on_resource:
        return open_
    mine = [b for b in on_resource if b.principal in (who, "User:*") and b.host in (host, "*")]
    if any(b.permission == DENY and b.operation in (op, Operation.ALL) for b in mine):
        return False
    implied = {Operation.READ, Operation.WRITE, Operation.ALTER, Operation.DELETE}

    def permits(b: AclBinding) -> bool:
        return b.operation in (op, Operation.ALL) or (
            op == Operation.DESCRIBE and b.operation in implied
        )

    return any(b.permission == ALLOW and permits(b) for b in mine)


# One store for every example (the ACLs are cleared at the start of each).
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    acls=st.lists(bindings, max_size=8),
    open_=st.booleans(),
    asks=st.lists(
        st.tuples(
            st.sampled_from([ALICE, BOB]),
            st.sampled_from(["10.0.0.1", "10.0.0.2"]),
            st.sampled_from([o for o in _OPS if o != Operation.ALL]),
            st.sampled_from(["a", "ab", "abc", "b", "c"]),
        ),
        min_size=1,
        max_size=10,
    ),
)
def test_decisions_follow_the_rules(
    store: Store,
    acls: list[AclBinding],
    open_: bool,
    asks: list[tuple[str, str, Operation, str]],
) -> None:
    authz = Authorizer(store, enabled=True, allow_if_no_acl=open_)
    authz.delete(AclFilter())
    for b in acls:
        authz.create(b)
    for who, host, op, name in asks:
        want = _expected(acls, who, host, op, name, open_)
        assert authz.allowed(who, op, T, name, host, log_denial=False) == want
