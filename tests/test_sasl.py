"""SASL on the Kafka listener (issue: SASL, TLS and ACLs), with real clients over real
sockets on a LevelDB store: SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN logins against users
kept in the MetadataTable (salted keys only), wrong passwords and unknown users refused at
once with SASL_AUTHENTICATION_FAILED, and nothing served to a connection before it has
logged in. The mechanisms themselves are checked without sockets against scramp's client,
and fuzzed."""

from __future__ import annotations

import asyncio
import socket
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from gateway_harness import GatewayThread, gateway_thread
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka import KafkaConsumer, KafkaProducer
from scramp import ScramClient
from tmsgate.gateway.sasl import (
    AuthenticationFailed,
    PlainExchange,
    ScramExchange,
    scram_failure,
)
from tmsgate.gateway.users import ScramEntry, UserError, Users, make_entry

pytestmark = pytest.mark.timeout(120)
ALICE, PASSWORD = "alice", "alice-secret"


# --- the mechanisms, without sockets -----------------------------------------------------
ENTRIES = {(ALICE, m): make_entry(m, PASSWORD) for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")}


def lookup(user: str, mechanism: str) -> ScramEntry | None:
    return ENTRIES.get((user, mechanism))


def scram_login(mechanism: str, user: str, password: str) -> str | None:
    client = ScramClient([mechanism], user, password)
    server = ScramExchange(mechanism, lookup)
    client.set_server_first(server.step(client.get_client_first().encode()).decode())
    client.set_server_final(server.step(client.get_client_final().encode()).decode())
    return server.principal


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_exchange(mechanism: str) -> None:
    assert scram_login(mechanism, ALICE, PASSWORD) == f"User:{ALICE}"
    for user, password in ((ALICE, "wrong"), ("mallory", PASSWORD)):
        with pytest.raises(AuthenticationFailed) as err:
            scram_login(mechanism, user, password)
        assert str(err.value) == scram_failure(mechanism)  # the same words for both


def test_plain_exchange() -> None:
    def check(user: str, password: str) -> bool:
        return user == ALICE and password == PASSWORD

    ok = PlainExchange(check)
    assert ok.step(f"\x00{ALICE}\x00{PASSWORD}".encode()) == b""
    assert ok.principal == f"User:{ALICE}"
    for token, words in (
        (f"\x00{ALICE}\x00nope".encode(), "Invalid username or password"),
        (f"bob\x00{ALICE}\x00{PASSWORD}".encode(), "authorization id"),
        (b"no separators", "3 tokens"),
        (f"\x00\x00{PASSWORD}".encode(), "username not specified"),
    ):
        with pytest.raises(AuthenticationFailed, match=words):
            PlainExchange(check).step(token)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]),
    st.lists(st.binary(max_size=80), min_size=1, max_size=3),
)
def test_fuzzed_tokens_fail_with_a_reason(mechanism: str, tokens: list[bytes]) -> None:
    server = (
        PlainExchange(lambda u, p: False)
        if mechanism == "PLAIN"
        else ScramExchange(mechanism, lookup)
    )
    try:
        for token in tokens:
            server.step(token)
    except AuthenticationFailed as exc:
        assert str(exc)
    assert server.principal is None


def test_users_keep_salted_keys_only(tmp_path: Path) -> None:
    from tmsgate.storage import open_store

    store = open_store(f"leveldb://{tmp_path / 'store'}")
    try:
        users = Users(store)
        users.set_password(ALICE, "SCRAM-SHA-256", PASSWORD)
        users.set_password(ALICE, "SCRAM-SHA-512", PASSWORD, iterations=8192)
        assert users.list() == {ALICE: {"SCRAM-SHA-256": 4096, "SCRAM-SHA-512": 8192}}
        assert PASSWORD.encode() not in store.get_state("users", ALICE)
        assert users.check_plain(ALICE, PASSWORD) and not users.check_plain(ALICE, "x")
        assert not users.check_plain("nobody", PASSWORD)
        assert users.delete(ALICE, "SCRAM-SHA-256") and users.entry(ALICE, "SCRAM-SHA-256") is None
        assert users.delete(ALICE) and users.list() == {} and not users.delete(ALICE)
        for bad in (lambda: users.set_password("a,b", "SCRAM-SHA-256", "p"),
                    lambda: users.set_password("a", "SCRAM-SHA-1", "p"),
                    lambda: users.set_password("a", "SCRAM-SHA-256", "")):  # fmt: skip
            with pytest.raises(UserError):
                bad()
    finally:
        store.close()


# --- real clients ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayThread]:
    with gateway_thread(
        tmp_path_factory.mktemp("sasl"),
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanisms=("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"),
    ) as g:
        users = g.broker.users
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            users.set_password(ALICE, mechanism, PASSWORD)
        yield g


def confluent_conf(gw: GatewayThread, mechanism: str, password: str = PASSWORD) -> dict:
    return {
        "bootstrap.servers": gw.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": ALICE,
        "sasl.password": password,
    }


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_confluent_kafka_logs_in_produces_and_consumes(gw: GatewayThread, mechanism: str) -> None:
    topic = f"sasl-{uuid.uuid4().hex[:8]}"
    producer = Producer(confluent_conf(gw, mechanism))
    for i in range(20):
        producer.produce(topic, f"m{i}".encode())
    assert producer.flush(20) == 0
    consumer = Consumer(
        {**confluent_conf(gw, mechanism), "group.id": f"g-{topic}", "auto.offset.reset": "earliest"}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    while len(got) < 20:
        msg = consumer.poll(10)
        assert msg is not None and not msg.error(), msg and msg.error()
        got.append(msg.value())
    consumer.close()
    assert got == [f"m{i}".encode() for i in range(20)]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "PLAIN"])
def test_confluent_kafka_wrong_password_fails_at_once(gw: GatewayThread, mechanism: str) -> None:
    """librdkafka reports the login's failure, with the gateway's reason, through its error
    callback on the first attempt (it keeps retrying in the background, as with Kafka)."""
    errors: list[KafkaError] = []
    producer = Producer({**confluent_conf(gw, mechanism, "wrong"), "error_cb": errors.append})
    for _ in range(100):  # polling the client's queue, at most ~10 s
        producer.poll(0.1)
        if errors:
            break
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
    words = "Invalid username or password" if mechanism == "PLAIN" else "invalid credentials"
    assert words in errors[0].str()


def python_client_conf(gw: GatewayThread, mechanism: str) -> dict:
    """kafka-python's and aiokafka's settings (the same names in both)."""
    return {
        "bootstrap_servers": gw.bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": ALICE,
        "sasl_plain_password": PASSWORD,
    }


def test_kafka_python_scram(gw: GatewayThread) -> None:
    topic = f"sasl-kp-{uuid.uuid4().hex[:8]}"
    common = python_client_conf(gw, "SCRAM-SHA-512")
    producer = KafkaProducer(**common)
    producer.send(topic, b"hello").get(20)
    producer.close()
    consumer = KafkaConsumer(
        topic, auto_offset_reset="earliest", consumer_timeout_ms=10_000, **common
    )
    assert next(iter(consumer)).value == b"hello"  # StopIteration after 10 s without it
    consumer.close()


def test_aiokafka_scram(gw: GatewayThread) -> None:
    topic = f"sasl-aio-{uuid.uuid4().hex[:8]}"
    common = python_client_conf(gw, "SCRAM-SHA-256")

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**common)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"hello")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **common)
        await consumer.start()
        try:
            msg = await asyncio.wait_for(consumer.getone(), 20)
            return [msg.value]
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [b"hello"]


def _request(api_key: int, version: int, body: bytes, correlation: int = 1) -> bytes:
    header = struct.pack(">hhih", api_key, version, correlation, 4) + b"test"
    return struct.pack(">i", len(header) + len(body)) + header + body


def test_nothing_is_served_before_login(gw: GatewayThread) -> None:
    """ApiVersions is answered; a Metadata request before the handshake closes the
    connection without an answer (Kafka: "Unexpected Kafka request ... during SASL
    handshake")."""
    with socket.create_connection(gw.address, timeout=10) as s:
        s.sendall(_request(18, 0, b""))
        size = struct.unpack(">i", s.recv(4))[0]
        assert size > 0
        while size:
            size -= len(s.recv(size))
        s.sendall(_request(3, 1, struct.pack(">i", -1), 2))  # Metadata v1, all topics
        assert s.recv(4) == b""  # closed, nothing answered
    plain = AdminClient({"bootstrap.servers": gw.bootstrap})  # no SASL configured
    with pytest.raises(KafkaException):
        plain.list_topics(timeout=5)


def test_users_command(tmp_path: Path) -> None:
    """`tmsgate users add|list|delete` on a stopped store."""
    import json
    import subprocess
    import sys

    tmsgate = [str(Path(sys.executable).with_name("tmsgate")), "users"]
    store = ["--store", f"leveldb://{tmp_path / 'store'}"]

    def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*tmsgate, *args, *store], input=stdin, capture_output=True, text=True, timeout=60
        )

    assert run("add", "dave", "--password-stdin", stdin="pw\n").returncode == 0
    mech = ("--mechanism", "SCRAM-SHA-512", "--iterations", "8192")
    assert run("add", "erin", *mech, "--password-stdin", stdin="pw2\n").returncode == 0
    listed = run("list", "--json")
    assert json.loads(listed.stdout) == {
        "dave": {"SCRAM-SHA-256": 4096, "SCRAM-SHA-512": 4096},
        "erin": {"SCRAM-SHA-512": 8192},
    }
    bad = run("add", "a,b", "--password-stdin", stdin="pw\n")
    assert bad.returncode == 2 and "user name" in bad.stderr
    assert run("delete", "dave").returncode == 0
    assert run("delete", "dave").returncode == 1
    assert json.loads(run("list", "--json").stdout) == {"erin": {"SCRAM-SHA-512": 8192}}
