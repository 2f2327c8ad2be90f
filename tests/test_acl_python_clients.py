"""Kafka ACLs end to end (gateway/acls.py), with real clients over SASL_PLAINTEXT on a live
gateway: ACLs made, listed and removed by a super user through the Kafka admin API
(confluent-kafka's and kafka-python's AdminClient), then each API's check as Kafka makes
it -- a denied operation gets Kafka's error and changes nothing (read back as the super
user), the allowed one works -- for kafka-python, aiokafka and confluent-kafka; deny over
allow, prefixed patterns, implied Describe, super users, allow.everyone.if.no.acl.found; an
ACL change on an open connection; the denials metric and log; and fuzzed ACL requests over
real sockets. The Kafka behaviour asserted is Apache Kafka's (KafkaApis, ControllerApis,
StandardAuthorizer, Authorizer.authorizeByResourceType), checked against Kafka 4.1 where the
gateway once differed. kcat and the Java client: compat-tests/test_acl_clients.py.
(Not named test_acl_clients.py: pytest collects tests/ and compat-tests/ together, and two
test modules of one basename cannot be imported side by side.)"""

from __future__ import annotations

import asyncio
import json
import logging
import struct
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kafka_requests as kr
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from aiokafka.errors import GroupAuthorizationFailedError as AioGroupAuthorizationFailed
from aiokafka.errors import TopicAuthorizationFailedError as AioTopicAuthorizationFailed
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from gateway_harness import GatewayThread, RawClient, gateway_thread
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka import errors as kerr
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    KafkaAdminClient,
    ResourcePattern,
    ResourcePatternFilter,
)
from kafka.admin import ACLResourcePatternType as KpPattern
from kafka.admin import ResourceType as KpResourceType
from kafka.protocol.admin import (
    CreateAclsRequest,
    DeleteAclsRequest,
    DescribeAclsRequest,
    DescribeGroupsRequest,
    ListGroupsRequest,
)
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest
from tmsgate.gateway.kafka.groups import GroupConfig
from tmsgate.protocol import ErrorCode

pytestmark = pytest.mark.timeout(120)
ADMIN = "admin"
MECHANISM = "SCRAM-SHA-256"
SASL = {
    "authorizer": True,
    "super_users": (f"User:{ADMIN}",),
    "allow_everyone_if_no_acl_found": False,
    "security_protocol": "SASL_PLAINTEXT",
    "sasl_mechanisms": (MECHANISM, "PLAIN"),
    "groups": GroupConfig(initial_rebalance_delay_ms=0),
}
CLUSTER = "kafka-cluster"
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
TOPIC, GROUP, BROKER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.BROKER
TXN_ID = ResourceType.TRANSACTIONAL_ID
Op = AclOperation
ACL_LOG = "tmsgate.acl"


def password(user: str) -> str:
    return f"{user}-secret"


def principal(user: str) -> str:
    return f"User:{user}"


def uid() -> str:
    return uuid.uuid4().hex[:10]


def confluent_conf(gw: GatewayThread, user: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": gw.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": MECHANISM,
        "sasl.username": user,
        "sasl.password": password(user),
    }


def python_conf(gw: GatewayThread, user: str) -> dict[str, Any]:
    """kafka-python's and aiokafka's settings (the same names in both)."""
    return {
        "bootstrap_servers": gw.bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": MECHANISM,
        "sasl_plain_username": user,
        "sasl_plain_password": password(user),
    }


def code_of(exc: KafkaException) -> int:
    return exc.args[0].code()


def acl_tuple(b: Any) -> tuple[Any, ...]:
    """A confluent-kafka AclBinding as comparable values."""
    return (
        b.restype,
        b.name,
        b.resource_pattern_type,
        b.principal,
        b.host,
        b.operation,
        b.permission_type,
    )


class Cluster:
    """A super user's view of one gateway: users, topics and ACLs made through the admin
    API, and what the topics hold, read back as the super user."""

    def __init__(self, gw: GatewayThread) -> None:
        self.gw = gw
        gw.broker.users.set_password(ADMIN, MECHANISM, password(ADMIN))
        self.admin = AdminClient(confluent_conf(gw, ADMIN))

    def user(self) -> str:
        name = f"u-{uid()}"
        self.gw.broker.users.set_password(name, MECHANISM, password(name))
        return name

    def binding(
        self,
        who: str,
        rtype: ResourceType,
        name: str,
        op: AclOperation,
        *,
        pattern: ResourcePatternType = LITERAL,
        perm: AclPermissionType = ALLOW,
        host: str = "*",
    ) -> AclBinding:
        who = who if ":" in who else principal(who)
        return AclBinding(rtype, name, pattern, who, host, op, perm)

    def grant(self, who: str, rtype: ResourceType, name: str, *ops: AclOperation, **kw: Any):
        bindings = [self.binding(who, rtype, name, op, **kw) for op in ops]
        for fut in self.admin.create_acls(bindings).values():
            assert fut.result(20) is None
        return bindings

    def revoke(self, bindings: list[AclBinding]) -> None:
        filters = [
            AclBindingFilter(
                b.restype,
                b.name,
                b.resource_pattern_type,
                b.principal,
                b.host,
                b.operation,
                b.permission_type,
            )
            for b in bindings
        ]
        for fut in self.admin.delete_acls(filters).values():
            assert len(fut.result(20)) == 1

    def acls_of(self, who: str) -> set[tuple[Any, ...]]:
        flt = AclBindingFilter(
            ResourceType.ANY,
            None,
            ResourcePatternType.ANY,
            who,
            None,
            Op.ANY,
            AclPermissionType.ANY,
        )
        return {acl_tuple(b) for b in self.admin.describe_acls(flt).result(20)}

    def topic(self, partitions: int = 1, name: str | None = None) -> str:
        name = name or f"t-{uid()}"
        for fut in self.admin.create_topics([NewTopic(name, partitions, 1)]).values():
            fut.result(20)
        return name

    def topics(self) -> set[str]:
        return set(self.admin.list_topics(timeout=20).topics)

    def partitions(self, topic: str) -> int:
        return len(self.admin.list_topics(topic, timeout=20).topics[topic].partitions)

    def produce(self, topic: str, *values: bytes) -> None:
        p = Producer(confluent_conf(self.gw, ADMIN))
        for v in values:
            p.produce(topic, v)
        assert p.flush(20) == 0

    def consumer(self, **extra: Any) -> Consumer:
        return Consumer({**confluent_conf(self.gw, ADMIN), "group.id": f"admin-{uid()}", **extra})

    def end_offset(self, topic: str, partition: int = 0) -> int:
        c = self.consumer()
        try:
            return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=20)[1]
        finally:
            c.close()

    def values(self, topic: str, read_committed: bool = False) -> list[bytes]:
        """Every record value of partition 0, read as the super user."""
        level = "read_committed" if read_committed else "read_uncommitted"
        c = self.consumer(**{"isolation.level": level, "enable.partition.eof": True})
        c.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        try:
            while True:
                msg = c.poll(10)
                assert msg is not None, f"no end of {topic} within 10 s"
                if msg.error():
                    assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                    return got
                got.append(msg.value())
        finally:
            c.close()

    def config(self, topic: str, name: str) -> str | None:
        res = ConfigResource(ConfigResource.Type.TOPIC, topic)
        entries = self.admin.describe_configs([res])[res].result(20)
        return entries[name].value if name in entries else None


def make_gateway(tmp: Path, **config: Any) -> Any:
    return gateway_thread(tmp, **{**SASL, **config})


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayThread]:
    with make_gateway(tmp_path_factory.mktemp("acl-clients")) as g:
        yield g


@pytest.fixture(scope="module")
def cluster(gw: GatewayThread) -> Cluster:
    return Cluster(gw)


# --- raw requests over a logged-in socket -----------------------------------------------
def login(gw: GatewayThread, user: str, pw: str | None = None) -> RawClient:
    """A socket logged in with SASL/PLAIN as ``user``."""
    c = RawClient(gw.address)
    assert c.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
    token = f"\x00{user}\x00{pw or password(user)}".encode()
    resp = c.request(SaslAuthenticateRequest(auth_bytes=token), 2)
    assert resp.error_code == 0, resp
    return c


def raw_produce(c: RawClient, topic: str, n: int = 1, version: int = 9, **kw: Any) -> Any:
    return kr.partition(c.request(kr.produce(topic, kr.batch(n), **kw), version))


def metadata_topic(c: RawClient, name: str, auto_create: bool = True) -> Any:
    [t] = c.request(kr.metadata(name, auto_create=auto_create), 9).topics
    return t


def topic_id(c: RawClient, name: str) -> Any:
    [t] = c.request(kr.metadata(name, auto_create=False), 12).topics
    assert t.error_code == 0, t
    return t.topic_id


def denials(gw: GatewayThread, rtype: str, op: str) -> float:
    value = gw.broker.metrics.registry.get_sample_value(
        "tmsgate_authorization_denials_total", {"resource_type": rtype, "operation": op}
    )
    return value or 0.0


def wait_for(pred: Callable[[], Any], what: str, attempts: int = 100) -> Any:
    """Poll a condition whose every try waits on the client (no sleeps here)."""
    for _ in range(attempts):
        got = pred()
        if got:
            return got
    raise AssertionError(f"never happened: {what}")


# --- the admin APIs ----------------------------------------------------------------------
def test_confluent_admin_creates_describes_and_deletes_acls(cluster: Cluster) -> None:
    x, alice = uid(), cluster.user()
    who = principal(alice)
    orders = f"{x}-orders"
    read_orders = cluster.binding(alice, TOPIC, orders, Op.READ)
    deny_prefix = cluster.binding(alice, TOPIC, f"{x}-", Op.WRITE, pattern=PREFIXED, perm=DENY,
                                  host="10.0.0.1")  # fmt: skip
    describe_all = cluster.binding(alice, TOPIC, "*", Op.DESCRIBE)
    everyone_group = cluster.binding("User:*", GROUP, f"{x}-g", Op.READ)
    created = [read_orders, deny_prefix, describe_all, everyone_group]
    for fut in cluster.admin.create_acls(created).values():
        assert fut.result(20) is None
    # Created again: nothing changes (Kafka keeps one of each).
    assert cluster.admin.create_acls([read_orders])[read_orders].result(20) is None

    def flt(**kw: Any) -> AclBindingFilter:
        fields = {
            "restype": ResourceType.ANY,
            "name": None,
            "resource_pattern_type": ResourcePatternType.ANY,
            "principal": who,
            "host": None,
            "operation": Op.ANY,
            "permission_type": AclPermissionType.ANY,
            **kw,
        }
        return AclBindingFilter(*fields.values())

    def described(**kw: Any) -> set[tuple[Any, ...]]:
        got = [acl_tuple(b) for b in cluster.admin.describe_acls(flt(**kw)).result(20)]
        assert len(got) == len(set(got)), got  # each binding once
        return set(got)

    mine = {acl_tuple(b) for b in (read_orders, deny_prefix, describe_all)}
    assert described() == mine
    assert described(principal="User:*", restype=GROUP, name=f"{x}-g") == {
        acl_tuple(everyone_group)
    }
    # MATCH: the bindings that apply to a resource of this name (literal, wildcard, prefix).
    assert (
        described(restype=TOPIC, name=orders, resource_pattern_type=ResourcePatternType.MATCH)
        == mine
    )
    assert described(
        restype=TOPIC, name=f"{x}-other", resource_pattern_type=ResourcePatternType.MATCH
    ) == {acl_tuple(deny_prefix), acl_tuple(describe_all)}
    assert described(restype=TOPIC, name=orders, resource_pattern_type=LITERAL) == {
        acl_tuple(read_orders)
    }
    # ANY pattern with a name: that exact name, whatever its pattern type.
    assert described(name=f"{x}-") == {acl_tuple(deny_prefix)}
    assert described(permission_type=DENY) == {acl_tuple(deny_prefix)}
    assert described(operation=Op.READ) == {acl_tuple(read_orders)}
    assert described(host="10.0.0.1") == {acl_tuple(deny_prefix)}
    assert described(restype=GROUP) == set()

    def deleted(**kw: Any) -> set[tuple[Any, ...]]:
        [fut] = cluster.admin.delete_acls([flt(**kw)]).values()
        return {acl_tuple(b) for b in fut.result(20)}

    assert deleted(resource_pattern_type=PREFIXED) == {acl_tuple(deny_prefix)}
    assert deleted(resource_pattern_type=PREFIXED) == set()  # gone already
    assert described() == {acl_tuple(read_orders), acl_tuple(describe_all)}
    assert deleted(restype=TOPIC, name=orders, resource_pattern_type=ResourcePatternType.MATCH) == {
        acl_tuple(read_orders),
        acl_tuple(describe_all),
    }
    assert described() == set()
    assert deleted(principal="User:*", restype=GROUP, name=f"{x}-g") == {acl_tuple(everyone_group)}
    assert described(principal="User:*", restype=GROUP, name=f"{x}-g") == set()


def test_kafka_python_admin_creates_describes_and_deletes_acls(
    gw: GatewayThread, cluster: Cluster
) -> None:
    x, bob = uid(), cluster.user()
    admin = KafkaAdminClient(**python_conf(gw, ADMIN), request_timeout_ms=20_000)
    try:
        write = ACL(
            principal(bob),
            "*",
            ACLOperation.WRITE,
            ACLPermissionType.ALLOW,
            ResourcePattern(KpResourceType.TOPIC, f"{x}-", KpPattern.PREFIXED),
        )
        deny = ACL(
            principal(bob),
            "*",
            ACLOperation.ALL,
            ACLPermissionType.DENY,
            ResourcePattern(KpResourceType.GROUP, f"{x}-g", KpPattern.LITERAL),
        )
        bad = ACL(
            principal(bob),
            "*",
            ACLOperation.ALTER,
            ACLPermissionType.ALLOW,
            ResourcePattern(KpResourceType.CLUSTER, "not-the-cluster", KpPattern.LITERAL),
        )
        result = admin.create_acls([write, deny, bad])
        assert result["succeeded"] == [write, deny]
        assert result["failed"] == [kerr.InvalidRequestError]
        every = ResourcePatternFilter(KpResourceType.ANY, None, KpPattern.ANY)
        mine = ACLFilter(principal(bob), None, ACLOperation.ANY, ACLPermissionType.ANY, every)
        acls, error = admin.describe_acls(mine)
        assert error is kerr.NoError and set(acls) == {write, deny}
        match = ResourcePatternFilter(KpResourceType.TOPIC, f"{x}-topic", KpPattern.MATCH)
        acls, _ = admin.describe_acls(
            ACLFilter(principal(bob), None, ACLOperation.ANY, ACLPermissionType.ANY, match)
        )
        assert acls == [write]
        [(_, gone, error)] = admin.delete_acls([mine])
        assert error is kerr.NoError and set(gone) == {write, deny}
        assert admin.describe_acls(mine)[0] == []
    finally:
        admin.close()


def create_acls_raw(c: RawClient, *creations: dict[str, Any], version: int = 3) -> list[Any]:
    fields = {
        "resource_type": 2,
        "resource_name": "t",
        "resource_pattern_type": 3,
        "principal": "User:nobody",
        "host": "*",
        "operation": 3,
        "permission_type": 3,
    }
    wire = [CreateAclsRequest.AclCreation(**{**fields, **c}) for c in creations]
    return list(c.request(CreateAclsRequest(creations=wire), version).results)


def describe_acls_raw(c: RawClient, version: int = 3, **kw: Any) -> Any:
    fields = {
        "resource_type_filter": 1,
        "resource_name_filter": None,
        "pattern_type_filter": 1,
        "principal_filter": None,
        "host_filter": None,
        "operation": 1,
        "permission_type": 1,
        **kw,
    }
    return c.request(DescribeAclsRequest(**fields), version)


def delete_acls_raw(c: RawClient, *filters: dict[str, Any], version: int = 3) -> list[Any]:
    fields = {
        "resource_type_filter": 1,
        "resource_name_filter": None,
        "pattern_type_filter": 1,
        "principal_filter": None,
        "host_filter": None,
        "operation": 1,
        "permission_type": 1,
    }
    wire = [DeleteAclsRequest.DeleteAclsFilter(**{**fields, **f}) for f in filters]
    return list(c.request(DeleteAclsRequest(filters=wire), version).filter_results)


def test_invalid_bindings_get_invalid_request(gw: GatewayThread, cluster: Cluster) -> None:
    x = uid()
    who = f"User:{x}"
    c = login(gw, ADMIN)
    try:
        results = create_acls_raw(
            c,
            {"resource_type": 4, "resource_name": "other-cluster", "principal": who,
             "operation": 7},
            {"resource_name": f"{x}-t", "principal": who, "operation": 1},  # ANY
            {"resource_name": f"{x}-t", "principal": x},  # no colon
            {"resource_name": f"{x}-t", "principal": who, "permission_type": 1},  # ANY
            {"resource_type": 1, "resource_name": f"{x}-t", "principal": who},  # ANY
            {"resource_name": f"{x}-t", "principal": who, "resource_pattern_type": 2},  # MATCH
            {"resource_name": "", "principal": who},
            {"resource_name": f"{x}-t", "principal": who},  # the one valid creation
        )  # fmt: skip
        codes = [r.error_code for r in results]
        # (Kafka 4.1 refuses an ANY code with UNKNOWN_SERVER_ERROR and no message: the
        # gateway's INVALID_REQUEST, with the reason, is what its controller means.)
        assert codes == [ErrorCode.INVALID_REQUEST] * 7 + [ErrorCode.NONE], results
        assert "kafka-cluster" in results[0].error_message
        assert "colon" in results[2].error_message
        assert all(r.error_message for r in results[:7])
        found = describe_acls_raw(c, principal_filter=who)
        assert found.error_code == 0
        assert [(r.resource_type, r.resource_name, r.pattern_type) for r in found.resources] == [
            (2, f"{x}-t", 3)
        ]
        # A filter with an UNKNOWN field: refused too (Kafka 4.1 cannot parse the request
        # and closes the connection; the gateway answers INVALID_REQUEST).
        assert describe_acls_raw(c, operation=0).error_code == ErrorCode.INVALID_REQUEST
        [bad] = delete_acls_raw(c, {"principal_filter": who, "permission_type": 0})
        assert bad.error_code == ErrorCode.INVALID_REQUEST and not bad.matching_acls
        assert len(describe_acls_raw(c, principal_filter=who).resources) == 1
        [gone] = delete_acls_raw(c, {"principal_filter": who})
        assert gone.error_code == 0 and [m.resource_name for m in gone.matching_acls] == [f"{x}-t"]
    finally:
        c.close()
    # The same refusal through confluent-kafka's AdminClient.
    bad_cluster = cluster.binding(who, BROKER, "other", Op.ALTER)
    with pytest.raises(KafkaException) as err:
        cluster.admin.create_acls([bad_cluster])[bad_cluster].result(20)
    assert code_of(err.value) == KafkaError.INVALID_REQUEST
    assert cluster.acls_of(who) == set()


def test_delete_filters_each_list_every_match(gw: GatewayThread, cluster: Cluster) -> None:
    x = uid()
    who = f"User:{x}"
    c = login(gw, ADMIN)
    try:
        made = create_acls_raw(
            c,
            {"resource_name": f"{x}-a", "principal": who},
            {"resource_name": f"{x}-b", "principal": who},
        )
        assert [r.error_code for r in made] == [0, 0]
        first, second = delete_acls_raw(
            c,
            {"principal_filter": who, "resource_name_filter": f"{x}-a"},
            {"principal_filter": who},
        )
        assert [m.resource_name for m in first.matching_acls] == [f"{x}-a"]
        assert sorted(m.resource_name for m in second.matching_acls) == [f"{x}-a", f"{x}-b"]
    finally:
        c.close()


def test_create_acls_takes_what_kafka_takes(gw: GatewayThread, cluster: Cluster) -> None:
    x = uid()
    c = login(gw, ADMIN)
    try:
        results = create_acls_raw(
            c,
            {"resource_name": f"{x}-t", "principal": "User:"},
            {"resource_name": f"{x}-t", "principal": ":x"},
            {"resource_name": f"{x}-t", "principal": f"User:{x}", "host": ""},
        )
    finally:
        c.close()
    assert [r.error_code for r in results] == [ErrorCode.NONE] * 3, results


def test_acl_apis_need_cluster_alter_and_describe(gw: GatewayThread, cluster: Cluster) -> None:
    carol, x = cluster.user(), uid()
    admin = AdminClient(confluent_conf(gw, carol))
    wanted = cluster.binding(f"User:{x}", TOPIC, f"{x}-t", Op.READ)
    every = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                             Op.ANY, AclPermissionType.ANY)  # fmt: skip
    with pytest.raises(KafkaException) as err:
        admin.create_acls([wanted])[wanted].result(20)
    assert code_of(err.value) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # (confluent-kafka's describe_acls reports a refused DescribeAcls as an empty list.)
    assert admin.describe_acls(every).result(20) == []
    kp = KafkaAdminClient(**python_conf(gw, carol), request_timeout_ms=20_000)
    any_acl = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                        ResourcePatternFilter(KpResourceType.ANY, None, KpPattern.ANY))  # fmt: skip
    with pytest.raises(kerr.ClusterAuthorizationFailedError):
        kp.describe_acls(any_acl)
    own = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, principal(carol),
                           None, Op.ANY, AclPermissionType.ANY)  # fmt: skip
    cluster.grant(carol, TOPIC, f"{x}-mine", Op.READ)  # something her filter would delete
    with pytest.raises(KafkaException) as err:
        admin.delete_acls([own])[own].result(20)
    assert code_of(err.value) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert cluster.acls_of(f"User:{x}") == set()  # nothing made
    assert len(cluster.acls_of(principal(carol))) == 1  # nothing deleted
    # Describe on the cluster lists but does not change.
    cluster.grant(carol, ResourceType.BROKER, CLUSTER, Op.DESCRIBE)
    assert {acl_tuple(b) for b in admin.describe_acls(own).result(20)} == cluster.acls_of(
        principal(carol)
    )
    listed = {a.resource_pattern.resource_name for a in kp.describe_acls(any_acl)[0]}
    assert {f"{x}-mine", CLUSTER} <= listed
    kp.close()
    with pytest.raises(KafkaException) as err:
        admin.create_acls([wanted])[wanted].result(20)
    assert code_of(err.value) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # Alter on the cluster: she manages ACLs (and may list them: Alter implies Describe).
    cluster.grant(carol, ResourceType.BROKER, CLUSTER, Op.ALTER)
    assert admin.create_acls([wanted])[wanted].result(20) is None
    assert cluster.acls_of(f"User:{x}") == {acl_tuple(wanted)}
    mine = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, f"User:{x}", None,
                            Op.ANY, AclPermissionType.ANY)  # fmt: skip
    assert [acl_tuple(b) for b in admin.delete_acls([mine])[mine].result(20)] == [acl_tuple(wanted)]


def test_acl_apis_without_an_authorizer_answer_security_disabled(tmp_path: Path) -> None:
    with gateway_thread(tmp_path) as plain:
        admin = AdminClient({"bootstrap.servers": plain.bootstrap})
        b = AclBinding(TOPIC, "t", LITERAL, "User:x", "*", Op.READ, ALLOW)
        flt = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                               Op.ANY, AclPermissionType.ANY)  # fmt: skip
        for fut in (admin.create_acls([b])[b], admin.delete_acls([flt])[flt]):
            with pytest.raises(KafkaException) as err:
                fut.result(20)
            assert code_of(err.value) == KafkaError.SECURITY_DISABLED
        kp = KafkaAdminClient(bootstrap_servers=plain.bootstrap, request_timeout_ms=20_000)
        try:
            every = ResourcePatternFilter(KpResourceType.ANY, None, KpPattern.ANY)
            with pytest.raises(kerr.SecurityDisabledError):
                kp.describe_acls(
                    ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY, every)
                )
        finally:
            kp.close()


def test_acls_survive_a_restart(tmp_path: Path) -> None:
    with make_gateway(tmp_path) as first:
        c = Cluster(first)
        dave = c.user()
        topic = c.topic()
        grants = c.grant(dave, TOPIC, topic, Op.WRITE)
        c.grant("User:*", TOPIC, topic, Op.READ, perm=DENY)
        made = c.acls_of(principal(dave)) | c.acls_of("User:*")
        assert len(made) == 2
    with make_gateway(tmp_path) as second:
        c = Cluster(second)
        assert c.acls_of(principal(dave)) | c.acls_of("User:*") == made
        p = login(second, dave)
        try:
            assert raw_produce(p, topic).error_code == ErrorCode.NONE
            read = kr.partition(p.request(kr.fetch(topic, 0), 11))
            assert read.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        finally:
            p.close()
        c.revoke(grants)
    with make_gateway(tmp_path) as third:  # a deletion lasts too
        c = Cluster(third)
        assert c.acls_of(principal(dave)) == set()
        p = login(third, dave)
        try:
            assert raw_produce(p, topic).error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        finally:
            p.close()
        assert c.end_offset(topic) == 1


# --- Produce and Fetch -------------------------------------------------------------------
def produce_with(client: str, gw: GatewayThread, user: str, topic: str, value: bytes) -> Any:
    """Produce one record with a fresh client; returns None or the client's error."""
    if client == "kafka-python":
        p = KafkaProducer(**python_conf(gw, user), enable_idempotence=False, retries=0,
                          max_block_ms=20_000, request_timeout_ms=20_000)  # fmt: skip
        try:
            p.send(topic, value).get(20)
        except kerr.KafkaError as exc:
            return exc
        finally:
            p.close(5)
        return None
    if client == "aiokafka":

        async def run() -> Any:
            p = AIOKafkaProducer(**python_conf(gw, user), request_timeout_ms=20_000)
            await p.start()
            try:
                await p.send_and_wait(topic, value)
            except Exception as exc:
                return exc
            finally:
                await p.stop()
            return None

        return asyncio.run(asyncio.wait_for(run(), 60))
    errors: list[Any] = []
    p = Producer(confluent_conf(gw, user))
    p.produce(topic, value, on_delivery=lambda err, _msg: errors.append(err))
    assert p.flush(20) == 0
    return errors[0]


def topic_denied(client: str, error: Any) -> bool:
    if client == "confluent-kafka":
        return error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    return isinstance(error, (kerr.TopicAuthorizationFailedError, AioTopicAuthorizationFailed))


CLIENTS = ["kafka-python", "aiokafka", "confluent-kafka"]


@pytest.mark.parametrize("client", CLIENTS)
def test_produce_needs_topic_write(gw: GatewayThread, cluster: Cluster, client: str) -> None:
    alice, topic = cluster.user(), cluster.topic()
    cluster.grant(alice, TOPIC, topic, Op.READ)  # Describe (implied): the client finds it
    error = produce_with(client, gw, alice, topic, b"refused")
    assert topic_denied(client, error), error
    assert cluster.end_offset(topic) == 0  # nothing written
    cluster.grant(alice, TOPIC, topic, Op.WRITE)
    assert produce_with(client, gw, alice, topic, b"accepted") is None
    assert cluster.values(topic) == [b"accepted"]


def test_produce_refuses_each_denied_topic_of_a_request(gw: GatewayThread, cluster: Cluster):
    """One Produce naming a topic the user may write and one it may not: Kafka answers per
    topic, writing the first and nothing of the second."""
    bob, mine, theirs = cluster.user(), cluster.topic(), cluster.topic()
    cluster.grant(bob, TOPIC, mine, Op.WRITE)
    cluster.grant(bob, TOPIC, theirs, Op.READ)
    c = login(gw, bob)
    try:
        req = kr.produce(mine, kr.batch(2))
        other = kr.produce(theirs, kr.batch(3)).topic_data[0]
        req.topic_data.append(other)
        resp = c.request(req, 9)
        codes = {t.name: t.partition_responses[0].error_code for t in resp.responses}
        assert codes == {mine: ErrorCode.NONE, theirs: ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    finally:
        c.close()
    assert cluster.end_offset(mine) == 2 and cluster.end_offset(theirs) == 0


def test_produce_does_not_create_a_topic_without_create(
    gw: GatewayThread, cluster: Cluster
) -> None:
    """Kafka's Produce never creates a topic (only Metadata does, for who may Create): a
    user with Write but not Create on a missing topic gets UNKNOWN_TOPIC_OR_PARTITION."""
    erin, name = cluster.user(), f"t-{uid()}"
    cluster.grant(erin, TOPIC, name, Op.WRITE)
    c = login(gw, erin)
    try:
        code = raw_produce(c, name).error_code
    finally:
        c.close()
    assert name not in cluster.topics(), "a Produce without Create created the topic"
    assert code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def fetch_with(client: str, gw: GatewayThread, user: str, topic: str, n: int) -> Any:
    """Read n records from offset 0 with a fresh client, no group; the values, or the
    error the client reported."""
    if client == "kafka-python":
        c = KafkaConsumer(**python_conf(gw, user), enable_auto_commit=False,
                          request_timeout_ms=20_000)  # fmt: skip
        tp = KpTopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        got: list[bytes] = []
        try:
            for _ in range(50):
                for records in c.poll(200).values():
                    got.extend(r.value for r in records)
                if len(got) >= n:
                    return got
        except kerr.KafkaError as exc:
            return exc
        finally:
            c.close()
        return got
    if client == "aiokafka":

        async def run() -> Any:
            c = AIOKafkaConsumer(**python_conf(gw, user), enable_auto_commit=False)
            await c.start()
            tp = AioTopicPartition(topic, 0)
            c.assign([tp])
            c.seek(tp, 0)
            got: list[bytes] = []
            try:
                for _ in range(50):
                    for records in (await c.getmany(timeout_ms=200)).values():
                        got.extend(r.value for r in records)
                    if len(got) >= n:
                        break
            except Exception as exc:
                return exc
            finally:
                await c.stop()
            return got

        return asyncio.run(asyncio.wait_for(run(), 60))
    group = f"g-{uid()}"  # librdkafka asks for the group's coordinator even when assigned
    c = Consumer({**confluent_conf(gw, user), "group.id": group,
                  "enable.auto.commit": False})  # fmt: skip
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    try:
        for _ in range(30):
            msg = c.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                return msg.error()
            got.append(msg.value())
            if len(got) >= n:
                break
    finally:
        c.close()
    return got


@pytest.mark.parametrize(
    "client",
    [
        "kafka-python",
        "aiokafka",
        "confluent-kafka",
    ],
)
def test_fetch_needs_topic_read(gw: GatewayThread, cluster: Cluster, client: str) -> None:
    alice, topic = cluster.user(), cluster.topic()
    cluster.produce(topic, b"a", b"b", b"c")
    cluster.grant(alice, TOPIC, topic, Op.DESCRIBE)
    cluster.grant(alice, GROUP, "*", Op.READ)  # the group is not what this test is about
    error = fetch_with(client, gw, alice, topic, 3)
    assert topic_denied(client, error), error
    cluster.grant(alice, TOPIC, topic, Op.READ)
    assert fetch_with(client, gw, alice, topic, 3) == [b"a", b"b", b"c"]


def fetch_by_id(tid: Any) -> Any:
    req = kr.fetch("", 0)
    req.topics[0].topic_id = tid
    return req


def produce_by_id(tid: Any) -> Any:
    req = kr.produce("", kr.batch(1))
    req.topic_data[0].topic_id = tid
    return req


def test_raw_fetch_and_produce_by_name_are_refused(gw: GatewayThread, cluster: Cluster) -> None:
    frank, topic = cluster.user(), cluster.topic()
    cluster.produce(topic, b"x")
    cluster.grant(frank, TOPIC, topic, Op.DESCRIBE)
    c = login(gw, frank)
    try:
        for version in (4, 12):
            read = kr.partition(c.request(kr.fetch(topic, 0), version))
            assert read.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED and not read.records
        assert raw_produce(c, topic, version=12).error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    finally:
        c.close()
    assert cluster.values(topic) == [b"x"]


def test_raw_fetch_and_produce_by_topic_id_are_refused(gw: GatewayThread, cluster: Cluster) -> None:
    frank, topic = cluster.user(), cluster.topic()
    cluster.produce(topic, b"x")
    cluster.grant(frank, TOPIC, topic, Op.DESCRIBE)
    c = login(gw, frank)
    try:
        tid = topic_id(c, topic)
        read = kr.partition(c.request(fetch_by_id(tid), 13))
        wrote = kr.partition(c.request(produce_by_id(tid), 13))
    finally:
        c.close()
    assert not read.records and cluster.values(topic) == [b"x"]
    assert (read.error_code, wrote.error_code) == (ErrorCode.TOPIC_AUTHORIZATION_FAILED,) * 2


# --- Metadata ----------------------------------------------------------------------------
def test_metadata_lists_only_describable_topics(gw: GatewayThread, cluster: Cluster) -> None:
    """Describe is implied by Read, Write, Delete and Alter, not by Create; a DENY of Read
    does not deny Describe; a full listing leaves the others out, naming one refuses it."""
    grace = cluster.user()
    by_op = {op: cluster.topic() for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE)}
    create_only, hidden, denied_read = cluster.topic(), cluster.topic(), cluster.topic()
    for op, topic in by_op.items():
        cluster.grant(grace, TOPIC, topic, op)
    cluster.grant(grace, TOPIC, create_only, Op.CREATE)
    cluster.grant(grace, TOPIC, denied_read, Op.DESCRIBE)
    cluster.grant(grace, TOPIC, denied_read, Op.READ, perm=DENY)
    before = denials(gw, "TOPIC", "DESCRIBE")
    ours = {*by_op.values(), create_only, hidden, denied_read}
    visible = {*by_op.values(), denied_read}
    listed = set(AdminClient(confluent_conf(gw, grace)).list_topics(timeout=20).topics)
    assert listed & ours == visible
    consumer = KafkaConsumer(**python_conf(gw, grace), request_timeout_ms=20_000)
    try:
        assert consumer.topics() & ours == visible
    finally:
        consumer.close()
    # A full listing is not an error: nothing counted for the topics left out.
    assert denials(gw, "TOPIC", "DESCRIBE") == before
    c = login(gw, grace)
    try:
        assert metadata_topic(c, hidden).error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert metadata_topic(c, create_only).error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert metadata_topic(c, by_op[Op.WRITE]).error_code == ErrorCode.NONE
        everything = c.request(MetadataRequest(topics=None), 9).topics
        assert {t.name for t in everything} & ours == visible
    finally:
        c.close()
    assert denials(gw, "TOPIC", "DESCRIBE") == before + 2


def test_metadata_auto_creation_needs_create(gw: GatewayThread, cluster: Cluster) -> None:
    heidi, x = cluster.user(), uid()
    a, b, c_name = f"{x}-a", f"{x}-b", f"{x}-c"
    cluster.grant(heidi, TOPIC, f"{x}-", Op.DESCRIBE, pattern=PREFIXED)
    c = login(gw, heidi)
    try:
        assert metadata_topic(c, a).error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert metadata_topic(c, a, auto_create=False).error_code == (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )
        assert a not in cluster.topics()
        cluster.grant(heidi, TOPIC, a, Op.CREATE)  # Create on the topic
        assert metadata_topic(c, a).error_code == ErrorCode.NONE
        assert metadata_topic(c, b).error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert a in cluster.topics() and b not in cluster.topics()
        cluster.grant(heidi, BROKER, CLUSTER, Op.CREATE)  # Create on the cluster
        assert metadata_topic(c, b).error_code == ErrorCode.NONE
        # Create without Describe: the name is refused before anything else.
        other = f"{uid()}-x"
        assert metadata_topic(c, other).error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert other not in cluster.topics()
    finally:
        c.close()
    assert {a, b} <= cluster.topics()
    # A real producer: the topic it names is made for it, as by Kafka.
    assert produce_with("confluent-kafka", gw, heidi, c_name, b"v") is not None  # no Write
    assert c_name in cluster.topics()


# --- topic administration ----------------------------------------------------------------
def refused(fut: Any, code: int) -> None:
    with pytest.raises(KafkaException) as err:
        fut.result(20)
    assert code_of(err.value) == code, err.value


def test_topic_admin_apis_need_their_operation(gw: GatewayThread, cluster: Cluster) -> None:
    ivan, x = cluster.user(), uid()
    admin = AdminClient(confluent_conf(gw, ivan))
    denied = KafkaError.TOPIC_AUTHORIZATION_FAILED
    # CreateTopics: Create on the topic (or the cluster).
    new = f"{x}-new"
    refused(admin.create_topics([NewTopic(new, 1, 1)])[new], denied)
    assert new not in cluster.topics()
    cluster.grant(ivan, TOPIC, new, Op.CREATE)
    admin.create_topics([NewTopic(new, 1, 1)])[new].result(20)
    assert new in cluster.topics()
    # CreatePartitions: Alter.
    grown = cluster.topic()
    cluster.grant(ivan, TOPIC, grown, Op.DESCRIBE)
    refused(admin.create_partitions([NewPartitions(grown, 3)])[grown], denied)
    assert cluster.partitions(grown) == 1
    cluster.grant(ivan, TOPIC, grown, Op.ALTER)
    admin.create_partitions([NewPartitions(grown, 3)])[grown].result(20)
    assert cluster.partitions(grown) == 3
    # DescribeConfigs: DescribeConfigs (or AlterConfigs, which implies it).
    res = ConfigResource(ConfigResource.Type.TOPIC, grown)
    refused(admin.describe_configs([res])[res], denied)
    change = ConfigResource(
        ConfigResource.Type.TOPIC,
        grown,
        incremental_configs=[
            ConfigEntry("retention.ms", "123456", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    before = cluster.config(grown, "retention.ms")
    refused(admin.incremental_alter_configs([change])[change], denied)
    assert cluster.config(grown, "retention.ms") == before
    grant = cluster.grant(ivan, TOPIC, grown, Op.DESCRIBE_CONFIGS)
    assert "retention.ms" in admin.describe_configs([res])[res].result(20)
    refused(admin.incremental_alter_configs([change])[change], denied)  # describing only
    cluster.revoke(grant)
    refused(admin.describe_configs([res])[res], denied)
    # AlterConfigs: AlterConfigs, which also lets him describe them.
    cluster.grant(ivan, TOPIC, grown, Op.ALTER_CONFIGS)
    admin.incremental_alter_configs([change])[change].result(20)
    assert cluster.config(grown, "retention.ms") == "123456"
    assert admin.describe_configs([res])[res].result(20)["retention.ms"].value == "123456"
    # A broker's configs: DescribeConfigs on the cluster.
    broker = ConfigResource(ConfigResource.Type.BROKER, "0")
    refused(admin.describe_configs([broker])[broker], KafkaError.CLUSTER_AUTHORIZATION_FAILED)
    # DeleteTopics: Delete.
    doomed = cluster.topic()
    cluster.grant(ivan, TOPIC, doomed, Op.DESCRIBE)
    refused(admin.delete_topics([doomed])[doomed], denied)
    assert doomed in cluster.topics()
    cluster.grant(ivan, TOPIC, doomed, Op.DELETE)
    admin.delete_topics([doomed])[doomed].result(20)
    assert doomed not in cluster.topics()


def test_kafka_python_create_and_delete_topics_are_refused(
    gw: GatewayThread, cluster: Cluster
) -> None:
    judy, x = cluster.user(), uid()
    kept = cluster.topic()
    admin = KafkaAdminClient(**python_conf(gw, judy), request_timeout_ms=20_000)
    try:
        from kafka.admin import NewTopic as KpNewTopic

        with pytest.raises(kerr.TopicAuthorizationFailedError):
            admin.create_topics([KpNewTopic(f"{x}-a", 1, 1)], raise_errors=True)
        with pytest.raises(kerr.TopicAuthorizationFailedError):
            admin.delete_topics([kept], raise_errors=True)
    finally:
        admin.close()
    assert f"{x}-a" not in cluster.topics() and kept in cluster.topics()


def test_legacy_alter_configs_needs_alter_configs(gw: GatewayThread, cluster: Cluster) -> None:
    from kafka.protocol.admin import AlterConfigsRequest

    kurt, topic = cluster.user(), cluster.topic()
    cluster.grant(kurt, TOPIC, topic, Op.DESCRIBE_CONFIGS)
    res = AlterConfigsRequest.AlterConfigsResource
    req = AlterConfigsRequest(
        resources=[
            res(resource_type=2, resource_name=topic,
                configs=[res.AlterableConfig(name="retention.ms", value="777000")])
        ],
        validate_only=False,
    )  # fmt: skip
    before = cluster.config(topic, "retention.ms")
    c = login(gw, kurt)
    try:
        [r] = c.request(req, 1).responses
        assert r.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert cluster.config(topic, "retention.ms") == before
        cluster.grant(kurt, TOPIC, topic, Op.ALTER_CONFIGS)
        [r] = c.request(req, 1).responses
        assert r.error_code == ErrorCode.NONE
    finally:
        c.close()
    assert cluster.config(topic, "retention.ms") == "777000"


def test_delete_on_the_cluster_deletes_any_topic(gw: GatewayThread, cluster: Cluster) -> None:
    mallory, doomed = cluster.user(), cluster.topic()
    cluster.grant(mallory, BROKER, CLUSTER, Op.DELETE)
    admin = AdminClient(confluent_conf(gw, mallory))
    admin.delete_topics([doomed])[doomed].result(20)
    assert doomed not in cluster.topics()


def test_delete_of_a_missing_describable_topic_says_unknown(
    gw: GatewayThread, cluster: Cluster
) -> None:
    nora, name = cluster.user(), f"t-{uid()}"
    cluster.grant(nora, TOPIC, name, Op.DESCRIBE)
    admin = AdminClient(confluent_conf(gw, nora))
    refused(admin.delete_topics([name])[name], KafkaError.UNKNOWN_TOPIC_OR_PART)


# --- consumer groups ---------------------------------------------------------------------
def group_consume(client: str, gw: GatewayThread, user: str, topic: str, group: str, n: int):
    """Subscribe in ``group`` and read n records, committing them; the values, or the error
    the client reported."""
    if client == "kafka-python":
        c = KafkaConsumer(topic, **python_conf(gw, user), group_id=group,
                          auto_offset_reset="earliest", enable_auto_commit=False,
                          request_timeout_ms=20_000)  # fmt: skip
        got: list[bytes] = []
        try:
            for _ in range(60):
                for records in c.poll(200).values():
                    got.extend(r.value for r in records)
                if len(got) >= n:
                    c.commit()
                    return got
        except kerr.KafkaError as exc:
            return exc
        finally:
            c.close()
        return got
    if client == "aiokafka":

        async def run() -> Any:
            c = AIOKafkaConsumer(topic, **python_conf(gw, user), group_id=group,
                                 auto_offset_reset="earliest",
                                 enable_auto_commit=False)  # fmt: skip
            got: list[bytes] = []
            try:
                await c.start()
                for _ in range(60):
                    for records in (await c.getmany(timeout_ms=200)).values():
                        got.extend(r.value for r in records)
                    if len(got) >= n:
                        await c.commit()
                        break
            except Exception as exc:
                return exc
            finally:
                await c.stop()
            return got

        return asyncio.run(asyncio.wait_for(run(), 60))
    c = Consumer({**confluent_conf(gw, user), "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    c.subscribe([topic])
    got = []
    try:
        for _ in range(60):
            msg = c.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                return msg.error()
            got.append(msg.value())
            if len(got) >= n:
                c.commit(asynchronous=False)
                break
    finally:
        c.close()
    return got


def committed(cluster: Cluster, group: str, topic: str) -> int:
    c = Consumer({**confluent_conf(cluster.gw, ADMIN), "group.id": group})
    try:
        [tp] = c.committed([TopicPartition(topic, 0)], timeout=20)
        return tp.offset
    finally:
        c.close()


@pytest.mark.parametrize("client", CLIENTS)
def test_consumer_group_needs_group_read(gw: GatewayThread, cluster: Cluster, client: str):
    kim, topic, group = cluster.user(), cluster.topic(), f"g-{uid()}"
    cluster.produce(topic, b"a", b"b")
    cluster.grant(kim, TOPIC, topic, Op.READ)
    error = group_consume(client, gw, kim, topic, group, 2)
    if client == "confluent-kafka":
        assert isinstance(error, KafkaError), error
        assert error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    else:
        assert isinstance(
            error, (kerr.GroupAuthorizationFailedError, AioGroupAuthorizationFailed)
        ), error
    assert committed(cluster, group, topic) < 0  # nothing committed
    cluster.grant(kim, GROUP, group, Op.READ)
    assert group_consume(client, gw, kim, topic, group, 2) == [b"a", b"b"]
    assert committed(cluster, group, topic) == 2


def test_offset_commit_needs_group_and_topic_read(gw: GatewayThread, cluster: Cluster) -> None:
    leo, topic, group = cluster.user(), cluster.topic(), f"g-{uid()}"
    cluster.produce(topic, b"a", b"b", b"c")
    cluster.grant(leo, TOPIC, topic, Op.DESCRIBE)
    c = login(gw, leo)

    def commit(offset: int) -> int:
        resp = c.request(kr.offset_commit(group, topic, offset), 8)
        return resp.topics[0].partitions[0].error_code

    try:
        assert commit(1) == ErrorCode.GROUP_AUTHORIZATION_FAILED
        cluster.grant(leo, GROUP, group, Op.READ)
        assert commit(2) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert committed(cluster, group, topic) < 0
        cluster.grant(leo, TOPIC, topic, Op.READ)
        assert commit(3) == ErrorCode.NONE
    finally:
        c.close()
    assert committed(cluster, group, topic) == 3
    # kafka-python's commit reports the topic's refusal as Kafka's error.
    other = cluster.topic()
    cluster.grant(leo, TOPIC, other, Op.DESCRIBE)
    consumer = KafkaConsumer(**python_conf(gw, leo), group_id=group, enable_auto_commit=False,
                             request_timeout_ms=20_000)  # fmt: skip
    try:
        from kafka.structs import OffsetAndMetadata

        tp = KpTopicPartition(other, 0)
        consumer.assign([tp])
        with pytest.raises(kerr.TopicAuthorizationFailedError):
            consumer.commit({tp: OffsetAndMetadata(1, "", -1)})
    finally:
        consumer.close()
    assert committed(cluster, group, other) < 0


def list_groups(c: RawClient) -> set[str]:
    resp = c.request(ListGroupsRequest(states_filter=[], types_filter=[]), 4)
    assert resp.error_code == 0
    return {g.group_id for g in resp.groups}


def test_list_groups_without_cluster_describe(gw: GatewayThread, cluster: Cluster) -> None:
    mia, topic, x = cluster.user(), cluster.topic(), uid()
    seen, unseen, described = f"{x}-seen", f"{x}-unseen", f"{x}-described"
    su = login(gw, ADMIN)
    try:
        for g in (seen, unseen, described):
            resp = su.request(kr.offset_commit(g, topic, 1), 8)
            assert resp.topics[0].partitions[0].error_code == 0
        assert {seen, unseen, described} <= list_groups(su)
    finally:
        su.close()
    cluster.grant(mia, GROUP, seen, Op.READ)  # Read implies Describe
    cluster.grant(mia, GROUP, described, Op.DESCRIBE)
    ours = {seen, unseen, described}
    c = login(gw, mia)
    try:
        assert list_groups(c) & ours == {seen, described}
        admin = AdminClient(confluent_conf(gw, mia))
        listed = admin.list_consumer_groups().result(20)
        assert not listed.errors
        assert {g.group_id for g in listed.valid} & ours == {seen, described}
        cluster.grant(mia, BROKER, CLUSTER, Op.DESCRIBE)
        assert list_groups(c) & ours == ours
    finally:
        c.close()


def test_describe_groups_reports_the_principals_operations(
    gw: GatewayThread, cluster: Cluster
) -> None:
    """DescribeGroups v3+ with include_authorized_operations: the group operations this
    principal may do (a bit field of Kafka's codes), as Kafka reports them."""
    ned, group = cluster.user(), f"{uid()}-ops"
    cluster.grant(ned, GROUP, group, Op.READ)  # Read, and the Describe it implies
    c = login(gw, ned)
    try:
        req = DescribeGroupsRequest(groups=[group], include_authorized_operations=True)
        described = c.request(req, 5).groups[0]
        assert set(described.authorized_operations) == {Op.READ.value, Op.DESCRIBE.value}
        cluster.grant(ned, GROUP, group, Op.DELETE)
        described = c.request(req, 5).groups[0]
        assert set(described.authorized_operations) == {
            Op.READ.value,
            Op.DESCRIBE.value,
            Op.DELETE.value,
        }
    finally:
        c.close()


# --- idempotent and transactional producers ----------------------------------------------
# (No test on this gateway allows Write on a topic to User:*: that would let every user
# start an idempotent producer.)
def init_pid(c: RawClient, transactional_id: str | None = None) -> int:
    return c.request(kr.init_producer_id(transactional_id), 4).error_code


def test_idempotent_producer_needs_idempotent_write_or_some_topic_write(
    gw: GatewayThread, cluster: Cluster
) -> None:
    x, topic = uid(), cluster.topic()
    writer, reader, idem, shadowed = (cluster.user() for _ in range(4))
    cluster.grant(writer, TOPIC, topic, Op.WRITE)
    cluster.grant(reader, TOPIC, topic, Op.READ)
    cluster.grant(idem, BROKER, CLUSTER, Op.IDEMPOTENT_WRITE)
    cluster.grant(idem, TOPIC, topic, Op.DESCRIBE)
    # Write on some topics, every one of them covered by a DENY: none is writable.
    cluster.grant(shadowed, TOPIC, f"{x}-a", Op.WRITE, pattern=PREFIXED)
    cluster.grant(shadowed, TOPIC, f"{x}-b", Op.ALL)
    cluster.grant(shadowed, TOPIC, x, Op.WRITE, pattern=PREFIXED, perm=DENY)
    expected = {
        writer: ErrorCode.NONE,
        reader: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        idem: ErrorCode.NONE,
        shadowed: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    }
    for user, code in expected.items():
        c = login(gw, user)
        try:
            assert init_pid(c) == code, user
        finally:
            c.close()
    # IdempotentWrite on the cluster gives a producer id, not Write on a topic.
    c = login(gw, idem)
    try:
        assert raw_produce(c, topic).error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    finally:
        c.close()
    # Real idempotent producers: the writer's work, the reader's are refused.
    p = KafkaProducer(**python_conf(gw, writer), enable_idempotence=True, max_block_ms=20_000)
    try:
        p.send(topic, b"idempotent").get(20)
    finally:
        p.close(5)
    errors: list[Any] = []
    ok = Producer({**confluent_conf(gw, writer), "enable.idempotence": True})
    ok.produce(topic, b"confluent", on_delivery=lambda e, _m: errors.append(e))
    assert ok.flush(20) == 0 and errors == [None]
    assert cluster.values(topic) == [b"idempotent", b"confluent"]
    with pytest.raises(kerr.KafkaError, match="ClusterAuthorizationFailed"):
        p = KafkaProducer(**python_conf(gw, reader), enable_idempotence=True,
                          max_block_ms=20_000)  # fmt: skip
        try:
            p.send(topic, b"refused").get(20)
        finally:
            p.close(5)
    fatal: list[KafkaError] = []
    bad = Producer({**confluent_conf(gw, reader), "enable.idempotence": True,
                    "error_cb": fatal.append})  # fmt: skip
    bad.produce(topic, b"refused")
    try:  # reported to error_cb, or raised by poll (a fatal error)
        wait_for(lambda: bad.poll(0.1) >= 0 and fatal, "librdkafka's fatal error")
    except KafkaException as exc:
        fatal.append(exc.args[0])
    assert fatal[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED, fatal
    assert cluster.end_offset(topic) == 2


def test_transactional_producer_needs_transactional_id_and_topic_write(
    gw: GatewayThread, cluster: Cluster
) -> None:
    nina, topic, x = cluster.user(), cluster.topic(), uid()
    tid = f"{x}-txn"
    cluster.grant(nina, TOPIC, topic, Op.READ)
    p = Producer({**confluent_conf(gw, nina), "transactional.id": tid})
    with pytest.raises(KafkaException) as err:
        p.init_transactions(20)
    assert code_of(err.value) == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    kp = KafkaProducer(**python_conf(gw, nina), transactional_id=tid, max_block_ms=20_000)
    try:
        with pytest.raises(kerr.TransactionalIdAuthorizationFailedError):
            kp.init_transactions()
    finally:
        kp.close(5)
    c = login(gw, nina)
    try:
        assert init_pid(c, tid) == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    finally:
        c.close()
    # Write on the transactional id, not on the topic: the transaction cannot add it.
    cluster.grant(nina, TXN_ID, tid, Op.WRITE)
    p = Producer({**confluent_conf(gw, nina), "transactional.id": tid})
    p.init_transactions(20)
    p.begin_transaction()
    p.produce(topic, b"refused")
    with pytest.raises(KafkaException) as err:
        p.commit_transaction(20)
    assert err.value.args[0].txn_requires_abort()
    # The coordinator never saw the transaction: librdkafka's abort fails as with Kafka 4.1.
    with pytest.raises(KafkaException) as err:
        p.abort_transaction(20)
    assert code_of(err.value) == KafkaError.INVALID_TXN_STATE
    assert cluster.end_offset(topic) == 0
    # And with Write on the topic, it commits (a new instance: it fences the one before).
    cluster.grant(nina, TOPIC, topic, Op.WRITE)
    p = Producer({**confluent_conf(gw, nina), "transactional.id": tid})
    p.init_transactions(20)
    p.begin_transaction()
    p.produce(topic, b"committed")
    p.commit_transaction(20)
    assert cluster.values(topic, read_committed=True) == [b"committed"]


# --- the rules of the decision -----------------------------------------------------------
def can_write(gw: GatewayThread, user: str, topic: str) -> bool:
    c = login(gw, user)
    try:
        code = raw_produce(c, topic).error_code
    finally:
        c.close()
    assert code in (ErrorCode.NONE, ErrorCode.TOPIC_AUTHORIZATION_FAILED), code
    return code == ErrorCode.NONE


def can_read(gw: GatewayThread, user: str, topic: str) -> bool:
    c = login(gw, user)
    try:
        code = kr.partition(c.request(kr.fetch(topic, 0), 11)).error_code
    finally:
        c.close()
    assert code in (ErrorCode.NONE, ErrorCode.TOPIC_AUTHORIZATION_FAILED), code
    return code == ErrorCode.NONE


def test_deny_wins_over_allow(gw: GatewayThread, cluster: Cluster) -> None:
    olga, pete, topic, x = cluster.user(), cluster.user(), cluster.topic(), uid()
    cluster.produce(topic, b"x")
    cluster.grant("User:*", TOPIC, topic, Op.READ)
    cluster.grant(olga, TOPIC, topic, Op.READ, perm=DENY)
    assert can_read(gw, pete, topic) and not can_read(gw, olga, topic)
    assert fetch_with("kafka-python", gw, pete, topic, 1) == [b"x"]
    assert topic_denied("kafka-python", fetch_with("kafka-python", gw, olga, topic, 1))
    # A DENY of Read does not deny Describe (implied by the ALLOW of Read for everyone).
    c = login(gw, olga)
    try:
        assert metadata_topic(c, topic, auto_create=False).error_code == ErrorCode.NONE
    finally:
        c.close()
    # A prefixed DENY (of ALL) beats a literal ALLOW of the operation, for that user only.
    mine = cluster.topic(name=f"{x}-mine")
    cluster.grant(olga, TOPIC, mine, Op.WRITE)
    cluster.grant(pete, TOPIC, mine, Op.WRITE)
    assert can_write(gw, olga, mine)
    cluster.grant(olga, TOPIC, x, Op.ALL, pattern=PREFIXED, perm=DENY)
    assert not can_write(gw, olga, mine) and can_write(gw, pete, mine)
    # A DENY for another host does not apply to this one (127.0.0.1).
    other = cluster.topic()
    cluster.grant(pete, TOPIC, other, Op.WRITE)
    cluster.grant(pete, TOPIC, other, Op.WRITE, perm=DENY, host="10.9.8.7")
    assert can_write(gw, pete, other)
    cluster.grant(pete, TOPIC, other, Op.WRITE, perm=DENY, host="127.0.0.1")
    assert not can_write(gw, pete, other)


def test_prefixed_acls_apply_by_prefix(gw: GatewayThread, cluster: Cluster) -> None:
    quinn, x = cluster.user(), uid()
    inside = cluster.topic(name=f"{x}-team-a")
    deeper = cluster.topic(name=f"{x}-team-a-b")
    short = cluster.topic(name=f"{x}-team")
    outside = cluster.topic(name=f"{x}-other")
    cluster.grant(quinn, TOPIC, f"{x}-team-", Op.WRITE, pattern=PREFIXED)
    assert can_write(gw, quinn, inside) and can_write(gw, quinn, deeper)
    assert not can_write(gw, quinn, short) and not can_write(gw, quinn, outside)
    assert produce_with("confluent-kafka", gw, quinn, inside, b"v") is None
    assert topic_denied(
        "confluent-kafka", produce_with("confluent-kafka", gw, quinn, outside, b"v")
    )
    assert cluster.end_offset(outside) == 0 and cluster.end_offset(short) == 0
    # A literal "*" names every topic.
    cluster.grant(quinn, TOPIC, "*", Op.READ)
    assert can_read(gw, quinn, outside)


def test_super_users_bypass_every_acl(gw: GatewayThread, cluster: Cluster) -> None:
    rita, topic = cluster.user(), cluster.topic()
    cluster.grant("User:*", TOPIC, topic, Op.ALL, perm=DENY)
    cluster.grant(rita, TOPIC, topic, Op.WRITE)
    assert not can_write(gw, rita, topic)
    assert can_write(gw, ADMIN, topic) and can_read(gw, ADMIN, topic)
    assert produce_with("kafka-python", gw, ADMIN, topic, b"su") is None
    assert cluster.values(topic) == [b"v0", b"su"]
    c = login(gw, ADMIN)
    try:
        assert init_pid(c) == ErrorCode.NONE and init_pid(c, f"{uid()}-txn") == ErrorCode.NONE
    finally:
        c.close()


# --- allow.everyone.if.no.acl.found ------------------------------------------------------
def test_allow_everyone_opens_only_resources_without_acls(tmp_path: Path) -> None:
    with make_gateway(tmp_path, allow_everyone_if_no_acl_found=True) as gw:
        c = Cluster(gw)
        sam, tess = c.user(), c.user()
        open_topic, guarded = f"open-{uid()}", c.topic()
        # No ACL names open_topic, the cluster or Sam's group: all open to him.
        assert produce_with("kafka-python", gw, sam, open_topic, b"anyone") is None
        assert group_consume("kafka-python", gw, sam, open_topic, f"g-{uid()}", 1) == [b"anyone"]
        c.grant(tess, TOPIC, guarded, Op.READ)
        c.produce(guarded, b"x")
        # An ACL on guarded (for Tess only) closes it to everyone else.
        assert not can_write(gw, sam, guarded) and not can_read(gw, sam, guarded)
        assert can_read(gw, tess, guarded) and not can_write(gw, tess, guarded)
        assert c.values(guarded) == [b"x"]
        listed = set(AdminClient(confluent_conf(gw, sam)).list_topics(timeout=20).topics)
        assert open_topic in listed and guarded not in listed
        # The ACL APIs are open while the cluster has no ACL (how kafka-acls.sh gets in).
        sam_admin = AdminClient(confluent_conf(gw, sam))
        mine = c.binding(sam, GROUP, "sams", Op.READ)
        assert sam_admin.create_acls([mine])[mine].result(20) is None
        c.grant(tess, BROKER, CLUSTER, Op.DESCRIBE)  # now the cluster has one
        other = c.binding(sam, GROUP, "other", Op.READ)
        refused(sam_admin.create_acls([other])[other], KafkaError.CLUSTER_AUTHORIZATION_FAILED)
        assert c.acls_of(principal(sam)) == {acl_tuple(mine)}


def test_allow_everyone_lets_an_idempotent_producer_start(tmp_path: Path) -> None:
    with make_gateway(tmp_path, allow_everyone_if_no_acl_found=True) as gw:
        c = Cluster(gw)
        uma, vic = c.user(), c.user()
        c.grant(vic, TOPIC, c.topic(), Op.WRITE)  # some topic has an ACL
        c.grant(vic, BROKER, CLUSTER, Op.IDEMPOTENT_WRITE)  # and so has the cluster
        open_topic = c.topic()  # no ACL: Uma may write it
        assert can_write(gw, uma, open_topic)
        raw = login(gw, uma)
        try:
            assert init_pid(raw) == ErrorCode.NONE
        finally:
            raw.close()


# --- ACL changes apply at once -----------------------------------------------------------
def test_an_acl_change_applies_to_an_open_connection(gw: GatewayThread, cluster: Cluster) -> None:
    walt, topic = cluster.user(), cluster.topic()
    cluster.grant(walt, TOPIC, topic, Op.DESCRIBE)
    c = login(gw, walt)
    try:
        assert raw_produce(c, topic).error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        grant = cluster.grant(walt, TOPIC, topic, Op.WRITE)
        assert raw_produce(c, topic).error_code == ErrorCode.NONE  # the same socket
        cluster.revoke(grant)
        assert raw_produce(c, topic).error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    finally:
        c.close()
    assert cluster.end_offset(topic) == 1
    # A real producer, kept open: refused, then (after the grant) delivered, on the
    # connections it already had (librdkafka's statistics count its connects).
    stats: list[dict[str, Any]] = []
    p = Producer({**confluent_conf(gw, walt), "statistics.interval.ms": 100,
                  "stats_cb": lambda s: stats.append(json.loads(s))})  # fmt: skip

    def send(value: bytes) -> Any:
        errors: list[Any] = []
        p.produce(topic, value, on_delivery=lambda e, _m: errors.append(e))
        assert p.flush(20) == 0
        return errors[0]

    def connects() -> int:
        stats.clear()
        wait_for(lambda: p.poll(0.1) >= 0 and stats, "librdkafka statistics")
        return sum(b["connects"] for b in stats[-1]["brokers"].values())

    error = send(b"refused")
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    before = connects()
    cluster.grant(walt, TOPIC, topic, Op.WRITE)
    assert send(b"delivered") is None
    assert connects() == before
    assert cluster.values(topic) == [b"v0", b"delivered"]


# --- denials: the metric and the log -----------------------------------------------------
def test_denials_are_counted_and_logged_once_a_minute(
    gw: GatewayThread, cluster: Cluster, caplog: pytest.LogCaptureFixture, monkeypatch
) -> None:
    caplog.set_level(logging.WARNING, logger=ACL_LOG)
    now = [10_000.0]  # the authorizer's clock, moved by hand: no waiting a minute
    monkeypatch.setattr(gw.broker.authorizer, "_clock", lambda: now[0])
    xena, yuri, topic, other = cluster.user(), cluster.user(), cluster.topic(), cluster.topic()
    cluster.grant(xena, TOPIC, topic, Op.DESCRIBE)
    writes, reads = denials(gw, "TOPIC", "WRITE"), denials(gw, "TOPIC", "READ")

    def logged(user: str) -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.name == ACL_LOG and f"User:{user} " in r.getMessage()
        ]

    c = login(gw, xena)
    try:
        for _ in range(3):
            assert raw_produce(c, topic).error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert denials(gw, "TOPIC", "WRITE") == writes + 3
        [line] = logged(xena)
        assert f"User:{xena} from 127.0.0.1 may not WRITE TOPIC '{topic}'" in line
        for _ in range(2):  # another operation: logged on its own
            read = kr.partition(c.request(kr.fetch(topic, 0), 11))
            assert read.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert denials(gw, "TOPIC", "READ") == reads + 2
        assert len(logged(xena)) == 2 and "may not READ TOPIC" in logged(xena)[1]
        assert raw_produce(c, other).error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert len(logged(xena)) == 3 and f"'{other}'" in logged(xena)[2]  # another resource
        assert can_write(gw, yuri, topic) is False  # another principal
        assert len(logged(yuri)) == 1 and len(logged(xena)) == 3
        now[0] += 59
        assert raw_produce(c, topic).error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert len(logged(xena)) == 3  # still within the minute
        now[0] += 2
        assert raw_produce(c, topic).error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert len(logged(xena)) == 4 and "other denials not logged since" in logged(xena)[3]
    finally:
        c.close()
    assert denials(gw, "TOPIC", "WRITE") == writes + 7
    # The registry the gateway serves to Prometheus has it (resource type and operation).
    from prometheus_client import generate_latest

    text = generate_latest(gw.broker.metrics.registry).decode()
    assert 'tmsgate_authorization_denials_total{operation="WRITE",resource_type="TOPIC"}' in text


# --- fuzzed ACL requests over real sockets -----------------------------------------------
FUZZER = "fuzzer"  # a user without ACLs: every ACL request is refused to it


@pytest.fixture(scope="module")
def fuzz_gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayThread]:
    with make_gateway(tmp_path_factory.mktemp("acl-fuzz")) as g:
        Cluster(g)
        g.broker.users.set_password(FUZZER, MECHANISM, password(FUZZER))
        yield g


int8 = st.one_of(st.integers(0, 15), st.integers(-128, 127))


def mostly(good: st.SearchStrategy[Any], other: st.SearchStrategy[Any]) -> Any:
    """``good`` three times in four, else ``other`` (so that bindings do get made)."""
    return st.tuples(st.integers(0, 3), good, other).map(lambda t: t[2] if t[0] == 0 else t[1])


def enum(*valid: int) -> st.SearchStrategy[int]:
    return mostly(st.sampled_from(valid), int8)


names = mostly(
    st.sampled_from(["t-1", "t", "t-", "*", "kafka-cluster"]),
    st.one_of(st.sampled_from(["", "kafka-cluster2"]), st.text(max_size=12)),
)
principals = mostly(
    st.sampled_from(["User:*", "User:alice", "User:bob", "Group:g"]),
    st.one_of(st.sampled_from(["alice", ":x", "User:", ""]), st.text(max_size=12)),
)
hosts = mostly(st.sampled_from(["*", "127.0.0.1", "::1"]), st.text(max_size=12))
creations = st.fixed_dictionaries(
    {
        "resource_type": enum(2, 3, 4, 5, 6, 7),
        "resource_name": names,
        "resource_pattern_type": enum(3, 4),
        "principal": principals,
        "host": hosts,
        "operation": enum(*range(2, 15)),
        "permission_type": enum(2, 3),
    }
)
filters = st.fixed_dictionaries(
    {
        # Mostly ANY (1) or null, so that filters do match bindings.
        "resource_type_filter": mostly(st.just(1), enum(*range(2, 8))),
        "resource_name_filter": st.one_of(st.none(), names),
        "pattern_type_filter": enum(1, 2, 3, 4),
        "principal_filter": mostly(st.none(), principals),
        "host_filter": mostly(st.none(), hosts),
        "operation": mostly(st.just(1), enum(*range(2, 15))),
        "permission_type": mostly(st.just(1), enum(2, 3)),
    }
)
versions = st.integers(1, 3)
actions = st.one_of(
    st.tuples(st.just("create"), versions, st.lists(creations, min_size=1, max_size=4)),
    st.tuples(st.just("describe"), versions, filters),
    st.tuples(st.just("delete"), versions, st.lists(filters, min_size=1, max_size=3)),
    st.tuples(st.just("garbage"), st.sampled_from([29, 30, 31]), versions, st.binary(max_size=60)),
)


def kafka_valid(c: dict[str, Any]) -> bool:
    """Whether Kafka's controller accepts this binding (AclControlManager.validateNewAcl,
    the CLUSTER name check of the ACL APIs)."""
    return (
        c["resource_type"] in range(2, 8)
        and c["resource_pattern_type"] in (3, 4)
        and c["operation"] in range(2, 15)
        and c["permission_type"] in (2, 3)
        and c["resource_name"] != ""
        and (c["resource_type"] != 4 or c["resource_name"] == CLUSTER)
        and ":" in c["principal"]
    )


def filter_known(f: dict[str, Any]) -> bool:
    return (
        f["resource_type_filter"] in range(1, 8)
        and f["pattern_type_filter"] in range(1, 5)
        and f["operation"] in range(1, 15)
        and f["permission_type"] in range(1, 4)
    )


def filter_matches(f: dict[str, Any], b: tuple[int, str, int, str, str, int, int]) -> bool:
    """Kafka's AclBindingFilter.matches (ResourcePatternFilter, AccessControlEntryFilter)."""
    rtype, name, pattern, who, host, op, perm = b
    if f["resource_type_filter"] not in (1, rtype):
        return False
    pt, fname = f["pattern_type_filter"], f["resource_name_filter"]
    if pt not in (1, 2, pattern):
        return False
    if fname is not None:
        if pt in (1, pattern):
            if fname != name:
                return False
        elif (pattern == 3 and name not in (fname, "*")) or (
            pattern == 4 and not fname.startswith(name)
        ):
            return False
    return (
        f["principal_filter"] in (None, who)
        and f["host_filter"] in (None, host)
        and f["operation"] in (1, op)
        and f["permission_type"] in (1, perm)
    )


def described_bindings(resp: Any) -> list[tuple[int, str, int, str, str, int, int]]:
    return [
        (r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation,
         a.permission_type)
        for r in resp.resources
        for a in r.acls
    ]  # fmt: skip


def exact_filter(c: dict[str, Any]) -> dict[str, Any]:
    return {
        "resource_type_filter": c["resource_type"],
        "resource_name_filter": c["resource_name"],
        "pattern_type_filter": c["resource_pattern_type"],
        "principal_filter": c["principal"],
        "host_filter": c["host"],
        "operation": c["operation"],
        "permission_type": c["permission_type"],
    }


def garbage_frame(api_key: int, version: int, body: bytes) -> bytes:
    client = b"fuzz"
    header = struct.pack(">hhih", api_key, version, 99, len(client)) + client
    if version >= 2:  # the flexible versions' header has tagged fields
        header += b"\x00"
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def all_bindings(c: RawClient) -> set[tuple[int, str, int, str, str, int, int]]:
    resp = describe_acls_raw(c)
    assert resp.error_code == 0, resp
    found = described_bindings(resp)
    assert len(found) == len(set(found)), found  # each binding once
    return set(found)


# Bindings every fuzzed super-user example starts with (again: creating one twice is a
# no-op), so that its filters have something to match: literal, prefixed and wildcard
# names, both permissions, several principals and hosts.
SEEDS = [
    {"resource_type": rt, "resource_name": name, "resource_pattern_type": pt,
     "principal": who, "host": host, "operation": op, "permission_type": perm}
    for rt, name, pt, who, host, op, perm in [
        (2, "t", 3, "User:alice", "*", 3, 3),
        (2, "t-", 4, "User:alice", "*", 4, 2),
        (2, "t-1", 3, "User:bob", "127.0.0.1", 2, 3),
        (2, "*", 3, "User:*", "*", 8, 3),
        (3, "t", 4, "User:bob", "*", 3, 3),
        (4, "kafka-cluster", 3, "User:alice", "*", 7, 3),
        (5, "t-1", 3, "Group:g", "::1", 4, 2),
    ]
]  # fmt: skip


def check_admin_action(c: RawClient, action: tuple[Any, ...]) -> bool:
    """Send one action as the super user and check its answer against Kafka's rules and
    the bindings there were (listed before); False when the gateway closed the connection
    (allowed for an invalid request)."""
    kind, version = action[0], action[1]
    try:
        before = all_bindings(c)
        if kind == "create":
            results = create_acls_raw(c, *action[2], version=version)
            for creation, r in zip(action[2], results, strict=True):
                assert r.error_code in (ErrorCode.NONE, ErrorCode.INVALID_REQUEST), r
                if r.error_code == ErrorCode.NONE:
                    assert kafka_valid(creation), creation
                    again = describe_acls_raw(c, **exact_filter(creation))
                    assert again.error_code == 0 and len(described_bindings(again)) == 1
                else:
                    assert r.error_message
                    # (Kafka also takes "User:", ":x" and an empty host; the gateway not.)
                    strict = creation["host"] != "" and all(creation["principal"].split(":", 1))
                    assert not (kafka_valid(creation) and strict), (creation, r)
        elif kind == "describe":
            flt = action[2]
            resp = describe_acls_raw(c, version=version, **flt)
            assert resp.error_code in (ErrorCode.NONE, ErrorCode.INVALID_REQUEST), resp
            assert (resp.error_code == ErrorCode.NONE) == filter_known(flt), resp
            found = described_bindings(resp)
            assert sorted(found) == sorted(b for b in before if filter_matches(flt, b)), flt
        else:
            results = delete_acls_raw(c, *action[2], version=version)
            for i, (flt, r) in enumerate(zip(action[2], results, strict=True)):
                assert r.error_code in (ErrorCode.NONE, ErrorCode.INVALID_REQUEST), r
                assert (r.error_code == ErrorCode.NONE) == filter_known(flt), r
                gone = [
                    (m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host,
                     m.operation, m.permission_type)
                    for m in r.matching_acls
                ]  # fmt: skip
                wanted = {b for b in before if filter_matches(flt, b)}
                if i == 0:  # (later filters: see test_delete_filters_each_list_every_match)
                    assert sorted(gone) == sorted(wanted), flt
                assert set(gone) <= wanted and len(gone) == len(set(gone)), flt
                if r.error_code == ErrorCode.NONE:
                    assert described_bindings(describe_acls_raw(c, **flt)) == []
    except ConnectionError:
        return False
    return True


# No shrinking: the gateway keeps the bindings of every example, so a shrunk example does
# not replay the same state (hypothesis calls that flaky) and shrinking ran for minutes.
@settings(
    max_examples=300,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.booleans(), st.lists(actions, min_size=1, max_size=3))
def test_fuzzed_acl_requests_get_an_answer_or_a_close(
    fuzz_gw: GatewayThread, as_admin: bool, steps: list[tuple[Any, ...]]
) -> None:
    c = login(fuzz_gw, ADMIN if as_admin else FUZZER)
    try:
        if as_admin:
            assert {r.error_code for r in create_acls_raw(c, *SEEDS)} == {ErrorCode.NONE}
        for action in steps:
            if action[0] == "garbage":
                c.send_raw(garbage_frame(*action[1:]))
                try:
                    c.recv_frame()  # an answer (whatever it says) ...
                except ConnectionError:
                    return  # ... or a close, never silence (the socket times out)
                return  # the connection's state is unknown after garbage
            if as_admin:
                if not check_admin_action(c, action):
                    return
                continue
            kind, version, payload = action
            if kind == "create":
                codes = [r.error_code for r in create_acls_raw(c, *payload, version=version)]
            elif kind == "describe":
                codes = [describe_acls_raw(c, version=version, **payload).error_code]
            else:
                codes = [r.error_code for r in delete_acls_raw(c, *payload, version=version)]
            assert set(codes) == {ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
    finally:
        c.close()


def test_logins_and_acls_still_work_after_the_fuzz(fuzz_gw: GatewayThread) -> None:
    cluster = Cluster(fuzz_gw)  # a SCRAM login by confluent-kafka
    who = f"User:{uid()}"
    b = cluster.binding(who, TOPIC, "after-fuzz", Op.READ)
    assert cluster.admin.create_acls([b])[b].result(20) is None
    assert cluster.acls_of(who) == {acl_tuple(b)}
    c = login(fuzz_gw, FUZZER)
    try:
        assert c.request(MetadataRequest(topics=None), 9).brokers
    finally:
        c.close()
