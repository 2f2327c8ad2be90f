"""Online user management: DescribeUserScramCredentials (50) and AlterUserScramCredentials
(51) on live gateways over real sockets. confluent-kafka's and kafka-python's admin clients
add a user that then logs in over SASL/SCRAM, change its password (the old one stops
working, the new one works, a connection already logged in stays so) and delete it; every
error code Kafka 4.1 gives, byte for byte against kafka-python's classes; the CLUSTER
authorization of both; DescribeClientQuotas as kafka-configs.sh asks it; fuzzed requests,
after which the gateway still serves."""

from __future__ import annotations

import hashlib
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from gateway_harness import GatewayThread, RawClient, gateway_thread
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient
from kafka.admin import UserScramCredentialDeletion as KpDeletion
from kafka.admin import UserScramCredentialUpsertion as KpUpsertion
from kafka.protocol.admin import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeClientQuotasRequest,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest
from scramp import ScramClient
from tmsgate.gateway.acls import (
    CLUSTER_NAME,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from tmsgate.gateway.tokens import Tokens
from tmsgate.gateway.users import (
    MECHANISMS,
    UserError,
    Users,
    entry_from_salted_password,
    make_entry,
    password_matches,
)
from tmsgate.protocol import ErrorCode
from tmsgate.storage import open_store

pytestmark = pytest.mark.timeout(180)
ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
SASL_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")
ALTER, DESCRIBE = AlterUserScramCredentialsRequest, DescribeUserScramCredentialsRequest
_AlterResult = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult
_DescribeResult = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
_Info = _DescribeResult.CredentialInfo
HASH = {1: "sha256", 2: "sha512"}
TWICE = "A user credential cannot be altered twice in the same request"
NOT_THERE = "Attempt to delete a user credential that does not exist"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# --- the keys kept for a salted password ----------------------------------------------------
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_keys_from_the_salted_password_are_those_of_the_password(mechanism: str) -> None:
    made = make_entry(mechanism, "s3cret", 8192)  # scramp's, from the password
    algo = HASH[MECHANISMS.index(mechanism) + 1]
    salted = hashlib.pbkdf2_hmac(algo, b"s3cret", made.salt, 8192)
    assert entry_from_salted_password(mechanism, made.salt, salted, 8192) == made
    assert password_matches(made, mechanism, "s3cret")


def test_users_alter_is_one_write_and_reports_missing_deletions(tmp_path: Path) -> None:
    store = open_store(f"leveldb://{tmp_path / 'store'}")
    try:
        users = Users(store)
        users.set_password("ann", "SCRAM-SHA-256", "pw")
        entry = make_entry("SCRAM-SHA-512", "pw2")
        missing = users.alter(
            {
                ("ann", "SCRAM-SHA-512"): entry,
                ("ann", "SCRAM-SHA-256"): None,
                ("ghost", "SCRAM-SHA-256"): None,
                ("ben", "SCRAM-SHA-256"): entry,
            }
        )
        assert missing == {("ghost", "SCRAM-SHA-256")}
        assert users.list() == {"ann": {"SCRAM-SHA-512": 4096}, "ben": {"SCRAM-SHA-256": 4096}}
        with pytest.raises(UserError):  # names set are checked, and nothing is written
            users.alter({("carl", "SCRAM-SHA-256"): entry, ("a,b", "SCRAM-SHA-256"): entry})
        assert "carl" not in users.list()
    finally:
        store.close()


# --- gateways ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sasl_gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayThread]:
    with gateway_thread(
        tmp_path_factory.mktemp("scram-admin"),
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanisms=SASL_MECHANISMS,
    ) as g:
        g.broker.users.set_password(ADMIN, "SCRAM-SHA-512", ADMIN_PASSWORD)
        yield g


@pytest.fixture(scope="module")
def plain_gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayThread]:
    """PLAINTEXT, so raw requests need no login: User:ANONYMOUS, with an authorizer that
    allows what no ACL names, as Kafka's option does (test_without_an_authorizer_anyone_
    manages_users has none)."""
    with gateway_thread(
        tmp_path_factory.mktemp("scram-raw"), authorizer=True, allow_everyone_if_no_acl_found=True
    ) as g:
        yield g


@pytest.fixture(scope="module")
def acl_gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayThread]:
    with gateway_thread(
        tmp_path_factory.mktemp("scram-acl"),
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanisms=SASL_MECHANISMS,
        authorizer=True,
        super_users=(f"User:{ADMIN}",),
    ) as g:
        g.broker.users.set_password(ADMIN, "SCRAM-SHA-256", ADMIN_PASSWORD)
        g.broker.users.set_password("bob", "SCRAM-SHA-256", "bob-secret")
        yield g


# --- logins -----------------------------------------------------------------------------------
def raw_login(gw: GatewayThread, user: str, password: str, mechanism: str) -> RawClient | None:
    """A SCRAM login on a raw connection: the connection, or None when refused."""
    c = RawClient(gw.address)
    assert c.request(SaslHandshakeRequest(mechanism=mechanism), 1).error_code == 0
    client = ScramClient([mechanism], user, password)
    first = c.request(SaslAuthenticateRequest(auth_bytes=client.get_client_first().encode()), 2)
    if first.error_code != ErrorCode.NONE:
        assert first.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        c.close()
        return None
    client.set_server_first(first.auth_bytes.decode())
    final = c.request(SaslAuthenticateRequest(auth_bytes=client.get_client_final().encode()), 2)
    if final.error_code != ErrorCode.NONE:
        assert final.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert c.closed_by_peer()
        c.close()
        return None
    client.set_server_final(final.auth_bytes.decode())
    return c


def can_log_in(gw: GatewayThread, user: str, password: str, mechanism: str) -> bool:
    c = raw_login(gw, user, password, mechanism)
    if c is not None:
        c.close()
    return c is not None


def confluent_conf(gw: GatewayThread, user: str, password: str, mechanism: str) -> dict:
    return {
        "bootstrap.servers": gw.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def confluent_admin(gw: GatewayThread) -> AdminClient:
    return AdminClient(confluent_conf(gw, ADMIN, ADMIN_PASSWORD, "SCRAM-SHA-512"))


def kafka_python_admin(gw: GatewayThread) -> KafkaAdminClient:
    return KafkaAdminClient(
        bootstrap_servers=gw.bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username=ADMIN,
        sasl_plain_password=ADMIN_PASSWORD,
    )


def kafka_python_produces(gw: GatewayThread, user: str, password: str, mechanism: str) -> None:
    producer = KafkaProducer(
        bootstrap_servers=gw.bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism,
        sasl_plain_username=user,
        sasl_plain_password=password,
    )
    try:
        producer.send(unique("scram-kp"), b"hello").get(timeout=30)
    finally:
        producer.close()


def confluent_produces(gw: GatewayThread, user: str, password: str, mechanism: str) -> None:
    producer = Producer(confluent_conf(gw, user, password, mechanism))
    producer.produce(unique("scram-ck"), b"hello")
    assert producer.flush(30) == 0


# --- real admin clients -----------------------------------------------------------------------
def test_confluent_admin_adds_a_user_who_then_logs_in(sasl_gw: GatewayThread) -> None:
    admin = confluent_admin(sasl_gw)
    user = unique("alice")
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192)
    assert not can_log_in(sasl_gw, user, "alice-secret", "SCRAM-SHA-256")
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(user, info, b"alice-secret")]
    )
    assert futures[user].result(30) is None
    kafka_python_produces(sasl_gw, user, "alice-secret", "SCRAM-SHA-256")
    confluent_produces(sasl_gw, user, "alice-secret", "SCRAM-SHA-256")
    assert not can_log_in(sasl_gw, user, "alice-secret", "SCRAM-SHA-512")  # only 256 was set
    # PLAIN checks the same credential
    assert sasl_gw.broker.users.check_plain(user, "alice-secret")

    described = admin.describe_user_scram_credentials([user])[user].result(30)
    assert described.user == user
    got = [(i.mechanism, i.iterations) for i in described.scram_credential_infos]
    assert got == [(ScramMechanism.SCRAM_SHA_256, 8192)]
    everyone = admin.describe_user_scram_credentials().result(30)
    assert {user, ADMIN} <= set(everyone)


def test_password_change_and_deletion(sasl_gw: GatewayThread) -> None:
    user = unique("carol")
    kp = kafka_python_admin(sasl_gw)
    try:
        assert kp.alter_user_scram_credentials(
            [KpUpsertion(user, "SCRAM-SHA-256", "old-secret"), KpUpsertion(ADMIN + "x", 2, "pw")]
        ) == {user: None, ADMIN + "x": None}
        kept = raw_login(sasl_gw, user, "old-secret", "SCRAM-SHA-256")
        assert kept is not None

        assert kp.alter_user_scram_credentials(
            [KpUpsertion(user, "SCRAM-SHA-256", "new-secret", iterations=4096)]
        ) == {user: None}
        assert not can_log_in(sasl_gw, user, "old-secret", "SCRAM-SHA-256")
        assert can_log_in(sasl_gw, user, "new-secret", "SCRAM-SHA-256")
        confluent_produces(sasl_gw, user, "new-secret", "SCRAM-SHA-256")
        # Kafka's behaviour: a connection already logged in stays logged in.
        assert kept.request(MetadataRequest(topics=None), 1).brokers

        described = kp.describe_user_scram_credentials([user, "nobody-" + user])
        assert described[user]["error"] is None
        assert [
            (int(i["mechanism"]), i["iterations"]) for i in described[user]["credential_infos"]
        ] == [(1, 4096)]
        assert described["nobody-" + user]["error"].startswith(
            "Attempt to describe a user credential that does not exist"
        )

        # deleted with confluent-kafka's admin: no login any more, describe says not found
        admin = confluent_admin(sasl_gw)
        gone = admin.alter_user_scram_credentials(
            [UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256)]
        )
        assert gone[user].result(30) is None
        assert not can_log_in(sasl_gw, user, "new-secret", "SCRAM-SHA-256")
        assert not sasl_gw.broker.users.check_plain(user, "new-secret")
        with pytest.raises(KafkaException) as err:
            admin.describe_user_scram_credentials([user])[user].result(30)
        assert err.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND
        again = admin.alter_user_scram_credentials(
            [UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256)]
        )
        with pytest.raises(KafkaException) as err:
            again[user].result(30)
        assert err.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND
        assert kept.request(MetadataRequest(topics=None), 1).brokers
        kept.close()
    finally:
        kp.close()


def test_kafka_python_admin_reports_kafkas_errors(sasl_gw: GatewayThread) -> None:
    kp = kafka_python_admin(sasl_gw)
    try:
        result = kp.alter_user_scram_credentials(
            [
                KpUpsertion("few", "SCRAM-SHA-256", "pw", iterations=1000),
                KpUpsertion("many", "SCRAM-SHA-256", "pw", iterations=20000),
                KpDeletion("nobody", "SCRAM-SHA-512"),
            ]
        )
        assert result == {
            "few": "Too few iterations",
            "many": "Too many iterations",
            "nobody": NOT_THERE,
        }
    finally:
        kp.close()


# --- byte for byte ------------------------------------------------------------------------------
def exchange(c: RawClient, request: Any, expected: Any) -> None:
    """Send ``request`` (v0) and compare the whole answer with ``expected``, encoded by
    kafka-python: the correlation id, the flexible header's empty tag buffer, the body."""
    cid = c.send(request, 0)
    frame = c.recv_frame()
    assert frame == struct.pack(">i", cid) + b"\x00" + bytes(expected.encode(version=0)), (
        type(request).__name__,
        DescribeUserScramCredentialsResponse.decode(frame, version=0, header=True)
        if isinstance(request, DESCRIBE)
        else AlterUserScramCredentialsResponse.decode(frame, version=0, header=True),
    )


def up(name: str, mechanism: int = 1, iterations: int = 4096, password: bytes = b"pw") -> Any:
    salt = b"0123456789abcdef"
    algo = HASH.get(mechanism, "sha256")
    salted = hashlib.pbkdf2_hmac(algo, password, salt, max(1, min(iterations, 20000)))
    return ALTER.ScramCredentialUpsertion(
        name=name, mechanism=mechanism, iterations=iterations, salt=salt, salted_password=salted
    )


def delete(name: str, mechanism: int = 1) -> Any:
    return ALTER.ScramCredentialDeletion(name=name, mechanism=mechanism)


def alter_answer(*results: tuple[str, int, str | None]) -> Any:
    return AlterUserScramCredentialsResponse(
        throttle_time_ms=0,
        results=[_AlterResult(user=u, error_code=c, error_message=m) for u, c, m in results],
    )


def describe_answer(*results: Any, code: int = 0, message: str = "") -> Any:
    return DescribeUserScramCredentialsResponse(
        throttle_time_ms=0, error_code=code, error_message=message, results=list(results)
    )


def found(user: str, *infos: tuple[int, int]) -> Any:
    credentials = [_Info(mechanism=m, iterations=i) for m, i in infos]
    return _DescribeResult(user=user, error_code=0, error_message="", credential_infos=credentials)


def not_found(user: str) -> Any:
    return _DescribeResult(
        user=user,
        error_code=ErrorCode.RESOURCE_NOT_FOUND,
        error_message=f"Attempt to describe a user credential that does not exist: {user}",
        credential_infos=[],
    )


@pytest.fixture
def raw(plain_gw: GatewayThread) -> Iterator[RawClient]:
    c = RawClient(plain_gw.address)
    yield c
    c.close()


def test_alter_errors_byte_for_byte(plain_gw: GatewayThread, raw: RawClient) -> None:
    ok = ErrorCode.NONE
    exchange(raw, ALTER(deletions=[], upsertions=[up("u1"), up("u2", 2, 8192)]),
             alter_answer(("u1", ok, None), ("u2", ok, None)))  # fmt: skip
    request = ALTER(
        deletions=[delete("d0", 0), delete("d3", 3)],
        upsertions=[
            up(""),
            up("m0", 0),
            up("m-1", -1),
            up("few", 1, 4095),
            up("many", 2, 16385),
            up("top", 2, 16384),
            up("weird,name"),
            ALTER.ScramCredentialUpsertion(
                name="empty", mechanism=1, iterations=4096, salt=b"s", salted_password=b""
            ),
        ],
    )
    unacceptable, unknown = ErrorCode.UNACCEPTABLE_CREDENTIAL, ErrorCode.UNSUPPORTED_SASL_MECHANISM
    exchange(raw, request, alter_answer(
        ("top", ok, None),
        ("d0", unknown, "Unknown SCRAM mechanism"),
        ("d3", unknown, "Unknown SCRAM mechanism"),
        ("", unacceptable, "Username must not be empty"),
        ("m0", unknown, "Unknown SCRAM mechanism"),
        ("m-1", unknown, "Unknown SCRAM mechanism"),
        ("few", unacceptable, "Too few iterations"),
        ("many", unacceptable, "Too many iterations"),
        ("weird,name", unacceptable,
         "user name 'weird,name': 1 to 255 characters, without ',' '=' or control characters"),
        ("empty", ErrorCode.UNKNOWN_SERVER_ERROR, "The salted password is empty"),
    ))  # fmt: skip
    twice = ErrorCode.DUPLICATE_RESOURCE
    # Kafka 4.1 refuses a user named twice whatever the mechanisms (kafka-configs.sh with
    # SCRAM-SHA-256 and SCRAM-SHA-512 in one --add-config fails so against Kafka too).
    exchange(raw, ALTER(deletions=[], upsertions=[up("u1", 1), up("u1", 1)]),
             alter_answer(("u1", twice, TWICE)))  # fmt: skip
    exchange(raw, ALTER(deletions=[], upsertions=[up("u1", 1), up("u1", 2)]),
             alter_answer(("u1", twice, TWICE)))  # fmt: skip
    exchange(raw, ALTER(deletions=[delete("u2", 2)], upsertions=[up("u2", 1)]),
             alter_answer(("u2", twice, TWICE)))  # fmt: skip
    exchange(raw, ALTER(deletions=[delete("u1", 1), delete("u1", 2)], upsertions=[]),
             alter_answer(("u1", twice, TWICE)))  # fmt: skip
    # A user's first error stands: the later entries for it are not looked at.
    missing = ErrorCode.RESOURCE_NOT_FOUND
    exchange(raw, ALTER(deletions=[delete("u1", 2), delete("u1", 2)], upsertions=[up("u1")]),
             alter_answer(("u1", missing, NOT_THERE)))  # fmt: skip
    exchange(raw, ALTER(deletions=[delete("nobody")], upsertions=[up("few2", 1, 1), up("few2")]),
             alter_answer(("nobody", missing, NOT_THERE), ("few2", unacceptable,
                                                           "Too few iterations")))  # fmt: skip
    # nothing refused was written
    assert plain_gw.broker.users.list() == {
        "u1": {"SCRAM-SHA-256": 4096},
        "u2": {"SCRAM-SHA-512": 8192},
        "top": {"SCRAM-SHA-512": 16384},
    }
    exchange(raw, ALTER(deletions=[delete("u1"), delete("top", 2)], upsertions=[up("u2", 1)]),
             alter_answer(("u1", ok, None), ("top", ok, None), ("u2", ok, None)))  # fmt: skip
    assert plain_gw.broker.users.list() == {"u2": {"SCRAM-SHA-256": 4096, "SCRAM-SHA-512": 8192}}
    exchange(raw, ALTER(deletions=[], upsertions=[]), alter_answer())


def test_describe_byte_for_byte(plain_gw: GatewayThread, raw: RawClient) -> None:
    plain_gw.broker.users.set_password("zed", "SCRAM-SHA-512", "pw", 5000)
    plain_gw.broker.users.set_password("zed", "SCRAM-SHA-256", "pw", 6000)
    plain_gw.broker.users.set_password("amy", "SCRAM-SHA-256", "pw")
    everyone = {
        name: [(MECHANISMS.index(m) + 1, i) for m, i in sorted(mechs.items())]
        for name, mechs in sorted(plain_gw.broker.users.list().items())
    }
    all_found = [found(n, *infos) for n, infos in everyone.items()]
    exchange(raw, DESCRIBE(users=None), describe_answer(*all_found))
    exchange(raw, DESCRIBE(users=[]), describe_answer(*all_found))  # empty: all, as Kafka
    names = ["zed", "ghost", "amy", "zed", "", "zed"]
    exchange(
        raw,
        DESCRIBE(users=[DESCRIBE.UserName(name=n) for n in names]),
        describe_answer(
            _DescribeResult(
                user="zed",
                error_code=ErrorCode.DUPLICATE_RESOURCE,
                error_message="Cannot describe SCRAM credentials for the same user twice in a "
                "single request: zed",
                credential_infos=[],
            ),
            not_found("ghost"),
            found("amy", (1, 4096)),
            not_found(""),
        ),
    )
    exchange(
        raw,
        DESCRIBE(users=[DESCRIBE.UserName(name="zed")]),
        describe_answer(found("zed", (1, 6000), (2, 5000))),
    )


def test_describe_client_quotas_as_kafka_configs_asks(raw: RawClient) -> None:
    """kafka-configs.sh --describe --entity-type users asks for quotas too: none here."""
    comp = DescribeClientQuotasRequest.ComponentData

    def quotas(components: list[Any], version: int = 1) -> Any:
        return raw.request(
            DescribeClientQuotasRequest(components=components, strict=False), version
        )

    for version in (0, 1):
        resp = quotas([comp(entity_type="user", match_type=2, match=None)], version)
        assert (resp.error_code, resp.error_message, resp.entries) == (0, "", [])
    resp = quotas([comp(entity_type="user", match_type=0, match="alice")])
    assert (resp.error_code, resp.entries) == (0, [])
    for components, code, message in (
        ([comp(entity_type="", match_type=0, match="x")], 42, "Invalid empty entity type."),
        ([comp(entity_type="bogus", match_type=0, match="x")], 35,
         "Unsupported entity type bogus"),
        ([comp(entity_type="user", match_type=5, match=None)], 42, "Unknown match type 5"),
        ([comp(entity_type="user", match_type=0, match=None)], 42,
         "Request specified MATCH_TYPE_EXACT, but set match string to null."),
        ([comp(entity_type="user", match_type=2, match="x")], 42,
         "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."),
        ([comp(entity_type="ip", match_type=2, match=None),
          comp(entity_type="user", match_type=2, match=None)], 42,
         "Invalid entity filter component combination. IP filter component should not be used "
         "with user or clientId filter component."),
    ):  # fmt: skip
        resp = quotas(components)
        assert (resp.error_code, resp.error_message, resp.entries) == (code, message, None)


def test_a_user_left_without_credentials_loses_its_tokens(
    plain_gw: GatewayThread, raw: RawClient
) -> None:
    users, tokens = plain_gw.broker.users, Tokens(plain_gw.broker.store)
    users.set_password("tok", "SCRAM-SHA-256", "pw")
    users.set_password("tok", "SCRAM-SHA-512", "pw")
    tokens.issue("tok")
    ok = ErrorCode.NONE
    exchange(
        raw, ALTER(deletions=[delete("tok", 1)], upsertions=[]), alter_answer(("tok", ok, None))
    )
    assert len(tokens.list("tok")) == 1  # still a user
    exchange(
        raw, ALTER(deletions=[delete("tok", 2)], upsertions=[]), alter_answer(("tok", ok, None))
    )
    assert tokens.list("tok") == []


# --- authorization ----------------------------------------------------------------------------
def test_cluster_authorization(acl_gw: GatewayThread) -> None:
    bob = raw_login(acl_gw, "bob", "bob-secret", "SCRAM-SHA-256")
    assert bob is not None
    denied = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    words = "Cluster authorization failed."
    nameless = _DescribeResult(user="", error_code=denied, error_message=words, credential_infos=[])
    exchange(bob, DESCRIBE(users=None), describe_answer(code=denied, message=words))
    exchange(
        bob,
        DESCRIBE(users=[DESCRIBE.UserName(name="bob"), DESCRIBE.UserName(name="x")]),
        describe_answer(nameless, nameless, code=denied, message=words),
    )
    refused = "Request AlterUserScramCredentials is not authorized: ALTER on the cluster needed"
    exchange(
        bob,
        ALTER(deletions=[delete("zz")], upsertions=[up("bob"), up("amy"), up("bob")]),
        alter_answer(("amy", denied, refused), ("bob", denied, refused), ("zz", denied, refused)),
    )
    quotas = bob.request(DescribeClientQuotasRequest(components=[], strict=False), 1)
    assert (quotas.error_code, quotas.entries) == (denied, None)
    assert acl_gw.broker.users.list()["bob"] == {"SCRAM-SHA-256": 4096}

    # DESCRIBE on the cluster lets bob describe, not alter
    grant = AclBinding(
        ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL, "User:bob", "*",
        Operation.DESCRIBE, Permission.ALLOW,
    )  # fmt: skip
    acl_gw.broker.authorizer.create(grant)
    exchange(
        bob,
        DESCRIBE(users=[DESCRIBE.UserName(name="bob")]),
        describe_answer(found("bob", (1, 4096))),
    )
    exchange(
        bob,
        ALTER(deletions=[], upsertions=[up("bob")]),
        alter_answer(("bob", denied, refused)),
    )
    bob.close()

    # the super user may do both
    admin = raw_login(acl_gw, ADMIN, ADMIN_PASSWORD, "SCRAM-SHA-256")
    assert admin is not None
    exchange(admin, ALTER(deletions=[], upsertions=[up("dan")]), alter_answer(("dan", 0, None)))
    exchange(
        admin,
        DESCRIBE(users=[DESCRIBE.UserName(name="dan")]),
        describe_answer(found("dan", (1, 4096))),
    )
    admin.close()
    assert can_log_in(acl_gw, "dan", "pw", "SCRAM-SHA-256")


def test_without_an_authorizer_anyone_manages_users(tmp_path: Path) -> None:
    """As Kafka (KafkaApis' authorize is ``authorizer.forall``: true without one), any
    client may change and list users when no authorizer runs, an anonymous one on a
    PLAINTEXT listener too (docs/security.md)."""
    with gateway_thread(tmp_path / "open") as g:
        c = RawClient(g.address)
        resp = c.request(ALTER(deletions=[], upsertions=[up("mallory")]), 0)
        assert [(r.user, r.error_code) for r in resp.results] == [("mallory", ErrorCode.NONE)]
        assert set(g.broker.users.entries("mallory")) == {"SCRAM-SHA-256"}
        resp = c.request(DESCRIBE(users=None), 0)
        assert resp.error_code == ErrorCode.NONE
        assert [r.user for r in resp.results] == ["mallory"]
        c.close()
        kp = KafkaAdminClient(bootstrap_servers=g.bootstrap)
        try:
            result = kp.alter_user_scram_credentials(
                [KpUpsertion("nina", "SCRAM-SHA-512", "pw"), KpDeletion("mallory", "SCRAM-SHA-256")]
            )
        finally:
            kp.close()
        assert result == {"nina": None, "mallory": None}, result
        assert g.broker.users.list() == {"nina": {"SCRAM-SHA-512": 4096}}


# --- fuzz ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fuzz_gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayThread]:
    with gateway_thread(
        tmp_path_factory.mktemp("scram-fuzz"), authorizer=True, allow_everyone_if_no_acl_found=True
    ) as g:
        yield g


NAMES = st.one_of(st.sampled_from(["f1", "f2", "f3", ""]), st.text(max_size=12))
MECHANISM_CODES = st.one_of(st.sampled_from([1, 2]), st.integers(-128, 127))
ITERATIONS = st.one_of(
    st.sampled_from([4095, 4096, 8192, 16384, 16385]), st.integers(-(2**31), 2**31 - 1)
)
UPSERTIONS = st.builds(
    ALTER.ScramCredentialUpsertion,
    name=NAMES,
    mechanism=MECHANISM_CODES,
    iterations=ITERATIONS,
    salt=st.binary(max_size=32),
    salted_password=st.binary(max_size=64),
)
DELETIONS = st.builds(ALTER.ScramCredentialDeletion, name=NAMES, mechanism=MECHANISM_CODES)
ALTER_CODES = {
    ErrorCode.NONE,
    ErrorCode.UNSUPPORTED_SASL_MECHANISM,
    ErrorCode.UNACCEPTABLE_CREDENTIAL,
    ErrorCode.DUPLICATE_RESOURCE,
    ErrorCode.RESOURCE_NOT_FOUND,
    ErrorCode.UNKNOWN_SERVER_ERROR,  # only for an empty salted password, as Kafka
}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(DELETIONS, max_size=4), st.lists(UPSERTIONS, max_size=4))
def test_fuzzed_alter_requests(fuzz_gw: GatewayThread, deletions: list, upsertions: list) -> None:
    """Every named user gets one result with a known code; what succeeded is what the store
    then holds, and nothing else changed."""
    users = fuzz_gw.broker.users
    before = users.list()
    c = RawClient(fuzz_gw.address)
    try:
        resp = c.request(ALTER(deletions=deletions, upsertions=upsertions), 0)
    finally:
        c.close()
    results = {r.user: (r.error_code, r.error_message) for r in resp.results}
    assert len(results) == len(resp.results)
    assert set(results) == {x.name for x in deletions} | {x.name for x in upsertions}
    assert {code for code, _ in results.values()} <= ALTER_CODES
    assert all(message for code, message in results.values() if code != 0)
    after, expected = users.list(), dict(before)
    names = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
    for d in deletions:
        if results[d.name][0] == 0:
            mechs = {m: i for m, i in expected[d.name].items() if names[m] != d.mechanism}
            expected[d.name] = mechs
    for u in upsertions:
        if results[u.name][0] == 0:
            mechanism = next(m for m, code in names.items() if code == u.mechanism)
            expected[u.name] = {**expected.get(u.name, {}), mechanism: u.iterations}
    assert after == {n: m for n, m in expected.items() if m}


def framed_request(request: Any, correlation_id: int) -> bytearray:
    request.with_header(correlation_id=correlation_id, client_id="fuzz")
    return bytearray(request.encode(version=0, header=True, framed=True))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.booleans(), st.data())
def test_mutated_request_bodies(fuzz_gw: GatewayThread, alter: bool, data: st.DataObject) -> None:
    """Bytes changed or cut in a valid request: answered (with this correlation id) or the
    connection closed, never a hang; the gateway serves on."""
    if alter:
        request: Any = ALTER(deletions=[delete("f1", 2)], upsertions=[up("f2"), up("f3", 2)])
    else:
        request = DESCRIBE(users=[DESCRIBE.UserName(name=n) for n in ("f1", "f2", "f1")])
    raw = framed_request(request, 77)
    body_start = 4 + 2 + 2 + 4 + 2 + len("fuzz") + 1  # size, key, version, cid, client id, tags
    for _ in range(data.draw(st.integers(1, 6))):
        pos = data.draw(st.integers(body_start, len(raw) - 1))
        raw[pos] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(body_start, len(raw)))
    raw = raw[:cut]
    struct.pack_into(">i", raw, 0, len(raw) - 4)
    c = RawClient(fuzz_gw.address)
    try:
        c.send_raw(bytes(raw))
        try:
            frame = c.recv_frame()
        except (ConnectionError, OSError):
            return  # closed: the request could not be decoded
        assert struct.unpack_from(">i", frame)[0] == 77
        response = (
            AlterUserScramCredentialsResponse if alter else DescribeUserScramCredentialsResponse
        )
        response.decode(frame, version=0, header=True)
    finally:
        c.close()


def test_still_serving_after_the_fuzz(fuzz_gw: GatewayThread) -> None:
    c = RawClient(fuzz_gw.address)
    try:
        exchange(c, ALTER(deletions=[], upsertions=[up("after")]), alter_answer(("after", 0, None)))
        resp = c.request(DESCRIBE(users=[DESCRIBE.UserName(name="after")]), 0)
        assert resp.results[0].credential_infos[0].iterations == 4096
    finally:
        c.close()
