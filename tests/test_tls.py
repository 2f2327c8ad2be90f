"""TLS on the Kafka listener (Kafka's SSL and SASL_SSL security protocols), with
certificates made at test time by trustme: kafka-python, aiokafka and confluent-kafka
produce and consume over SSL and SASL_SSL, on the stdlib loop and on uvloop (what `tmsgate
serve` runs); a client certificate's principal is User:<CN> (checked through the
authorizer, which lets alice in and keeps bob out), while on SASL_SSL the login decides;
a plaintext client, an untrusted or missing client certificate and a stalled handshake are
closed and logged without disturbing other clients; bad certificate files fail at start
with a message naming the file. `tmsgate serve --kafka-security ssl` is started once as
operators run it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import struct
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trustme
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.helpers import create_ssl_context
from confluent_kafka import Consumer, Producer, TopicPartition
from cryptography.hazmat.primitives import serialization
from gateway_harness import GatewayProcess, GatewayThread, gateway_thread
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import TopicAuthorizationFailedError
from tmsgate.gateway import tls
from tmsgate.gateway.kafka import GatewayConfig

pytestmark = pytest.mark.timeout(120)
LOOPS = ["asyncio", "uvloop"]
USER, PASSWORD = "alice", "alice-secret"


# --- certificates ------------------------------------------------------------------------
@dataclass(frozen=True)
class Pki:
    """PEM files: a CA, the listener's chain and key, client certificates it signed, and
    one signed by a CA the listener does not trust."""

    dir: Path
    ca: str
    server_cert: str
    server_key: str

    def client(self, name: str) -> tuple[str, str]:
        return str(self.dir / f"{name}.pem"), str(self.dir / f"{name}.key")


def write_leaf(cert: trustme.LeafCert, cert_path: Path, key_path: Path) -> None:
    cert_path.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    key_path.write_bytes(cert.private_key_pem.bytes())


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    ca, stranger = trustme.CA(), trustme.CA()
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    write_leaf(ca.issue_cert("127.0.0.1", "localhost"), d / "server.pem", d / "server.key")
    for name in ("alice", "bob"):
        write_leaf(ca.issue_cert(f"{name}@example.com", common_name=name), *_paths(d, name))
    write_leaf(stranger.issue_cert("x@example.com", common_name="alice"), *_paths(d, "stranger"))
    return Pki(d, str(d / "ca.pem"), str(d / "server.pem"), str(d / "server.key"))


def _paths(d: Path, name: str) -> tuple[Path, Path]:
    return d / f"{name}.pem", d / f"{name}.key"


# --- gateways ----------------------------------------------------------------------------
@contextlib.contextmanager
def tls_gateway(tmp_path: Path, loop: str, pki: Pki, **config: Any) -> Iterator[GatewayThread]:
    """An in-process gateway with the listener's certificate, on ``loop``."""
    config = {"tls_cert": pki.server_cert, "tls_key": pki.server_key, **config}
    policy = asyncio.get_event_loop_policy()
    with contextlib.ExitStack() as stack:
        if loop == "uvloop":
            import uvloop

            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        try:  # the gateway's thread makes its loop before start() returns
            gw = stack.enter_context(gateway_thread(tmp_path, **config))
        finally:
            asyncio.set_event_loop_policy(policy)
        assert type(gw._loop).__module__.startswith(loop)
        yield gw


def add_user(gw: GatewayThread, name: str = USER, password: str = PASSWORD) -> None:
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        gw.broker.users.set_password(name, mechanism, password)


class LogWatch(logging.Handler):
    """Collects the gateway's log lines (from its thread) and waits for one."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self._cond = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        with self._cond:
            self.lines.append(record.getMessage())
            self._cond.notify_all()

    def wait_for(self, *words: str, timeout: float = 20) -> str:
        def found() -> str | None:
            return next((ln for ln in self.lines if all(w in ln for w in words)), None)

        with self._cond:
            assert self._cond.wait_for(found, timeout), f"no log line with {words}: {self.lines}"
            return found() or ""


@pytest.fixture
def logs() -> Iterator[LogWatch]:
    watch = LogWatch()
    loggers = [logging.getLogger(n) for n in ("tmsgate.kafka.server", "tmsgate.acl")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(watch)
        lg.setLevel(logging.INFO)
    yield watch
    for lg, level in zip(loggers, levels, strict=True):
        lg.removeHandler(watch)
        lg.setLevel(level)


# --- client settings ---------------------------------------------------------------------
def confluent_conf(gw: GatewayThread, pki: Pki, protocol: str, **extra: str) -> dict[str, Any]:
    conf = {
        "bootstrap.servers": gw.bootstrap,
        "security.protocol": protocol,
        "ssl.ca.location": pki.ca,  # hostname checked: the certificate names 127.0.0.1
    }
    return conf | extra


def confluent_sasl(mechanism: str, user: str = USER, password: str = PASSWORD) -> dict[str, str]:
    return {"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


def python_conf(gw: GatewayThread, protocol: str, mechanism: str | None) -> dict[str, Any]:
    """kafka-python's and aiokafka's settings (SSL files or context added by the caller)."""
    conf: dict[str, Any] = {"bootstrap_servers": gw.bootstrap, "security_protocol": protocol}
    if mechanism is not None:
        conf |= {
            "sasl_mechanism": mechanism,
            "sasl_plain_username": USER,
            "sasl_plain_password": PASSWORD,
        }
    return conf


def values(tag: str, n: int = 10) -> list[bytes]:
    return [f"{tag}-{i}".encode() for i in range(n)]


def confluent_round_trip(conf: dict[str, Any], topic: str) -> list[bytes]:
    producer = Producer(conf)
    for v in values("ck"):
        producer.produce(topic, v)
    assert producer.flush(30) == 0
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    try:
        while len(got) < 10:
            msg = consumer.poll(20)
            assert msg is not None and not msg.error(), msg and msg.error()
            got.append(msg.value())
    finally:
        consumer.close()
    return got


def kafka_python_round_trip(conf: dict[str, Any], topic: str) -> list[bytes]:
    producer = KafkaProducer(**conf)
    for v in values("kp"):
        producer.send(topic, v)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(
        topic, auto_offset_reset="earliest", consumer_timeout_ms=15_000, **conf
    )
    got = [m.value for _, m in zip(range(10), consumer, strict=False)]
    consumer.close()
    return got


def aiokafka_round_trip(conf: dict[str, Any], topic: str) -> list[bytes]:
    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**conf)
        await producer.start()
        try:
            for v in values("aio"):
                await producer.send_and_wait(topic, v)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **conf)
        await consumer.start()
        try:
            return [(await asyncio.wait_for(consumer.getone(), 20)).value for _ in range(10)]
        finally:
            await consumer.stop()

    return asyncio.run(run())


def all_clients_round_trip(
    gw: GatewayThread,
    pki: Pki,
    protocol: str,
    mechanism: str | None = None,
    cert: tuple[str, str] | None = None,
) -> None:
    """confluent-kafka, kafka-python and aiokafka each produce to a topic of their own
    and consume it back; ``cert``: the client certificate and key they present."""
    conf = confluent_conf(gw, pki, protocol, **(confluent_sasl(mechanism) if mechanism else {}))
    kp = {**python_conf(gw, protocol, mechanism), "ssl_cafile": pki.ca}
    aio = python_conf(gw, protocol, mechanism)
    if cert is not None:
        conf |= {"ssl.certificate.location": cert[0], "ssl.key.location": cert[1]}
        kp |= {"ssl_certfile": cert[0], "ssl_keyfile": cert[1]}
    aio["ssl_context"] = create_ssl_context(
        cafile=pki.ca, certfile=cert and cert[0], keyfile=cert and cert[1]
    )
    for tag, round_trip, settings in (
        ("ck", confluent_round_trip, conf),
        ("kp", kafka_python_round_trip, kp),
        ("aio", aiokafka_round_trip, aio),
    ):
        assert round_trip(settings, f"tls-{tag}-{uuid.uuid4().hex[:8]}") == values(tag), tag


# --- real clients ------------------------------------------------------------------------
@pytest.mark.parametrize("loop", LOOPS)
def test_clients_over_ssl(tmp_path: Path, pki: Pki, loop: str) -> None:
    with tls_gateway(tmp_path, loop, pki, security_protocol="SSL") as gw:
        all_clients_round_trip(gw, pki, "SSL")


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "PLAIN"])
def test_clients_over_sasl_ssl(tmp_path: Path, pki: Pki, loop: str, mechanism: str) -> None:
    with tls_gateway(
        tmp_path, loop, pki, security_protocol="SASL_SSL", sasl_mechanisms=(mechanism,)
    ) as gw:
        add_user(gw)
        all_clients_round_trip(gw, pki, "SASL_SSL", mechanism)


def test_sasl_ssl_wrong_password_is_refused(tmp_path: Path, pki: Pki) -> None:
    """The login's failure is answered over TLS, then the connection closes."""
    with tls_gateway(
        tmp_path, "uvloop", pki, security_protocol="SASL_SSL", sasl_mechanisms=("PLAIN",)
    ) as gw:
        add_user(gw)
        errors: list[Any] = []
        conf = confluent_conf(gw, pki, "SASL_SSL", **confluent_sasl("PLAIN", password="wrong"))
        producer = Producer({**conf, "error_cb": errors.append})
        for _ in range(200):  # polling the client's queue, at most ~20 s
            producer.poll(0.1)
            if errors:
                break
        assert errors and "Invalid username or password" in errors[0].str(), errors


# --- principals --------------------------------------------------------------------------
def mtls_gateway(tmp_path: Path, pki: Pki, protocol: str, loop: str = "uvloop", **config: Any):
    """Client certificates required; ACLs on, with alice a super user and nobody else
    allowed anything: whoever the gateway takes a connection for decides what it may do."""
    return tls_gateway(
        tmp_path,
        loop,
        pki,
        security_protocol=protocol,
        tls_client_ca=pki.ca,
        authorizer=True,
        super_users=("User:alice",),
        **config,
    )


@pytest.mark.parametrize("loop", LOOPS)
def test_client_certificate_principal_is_user_cn(
    tmp_path: Path, pki: Pki, loop: str, logs: LogWatch
) -> None:
    with mtls_gateway(tmp_path, pki, "SSL", loop) as gw:
        all_clients_round_trip(gw, pki, "SSL", cert=pki.client("alice"))  # a super user
        topic = f"mtls-{uuid.uuid4().hex[:8]}"
        python = {**python_conf(gw, "SSL", None), "ssl_cafile": pki.ca}
        bob_cert, bob_key = pki.client("bob")
        producer = KafkaProducer(**python, ssl_certfile=bob_cert, ssl_keyfile=bob_key)
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(topic, b"from bob").get(20)
        producer.close()
        logs.wait_for("denied: User:bob ", topic)


def test_sasl_ssl_login_decides_the_principal(tmp_path: Path, pki: Pki, logs: LogWatch) -> None:
    """Kafka's SASL_SSL: the certificate is checked, the SASL user is the principal."""
    with mtls_gateway(tmp_path, pki, "SASL_SSL", sasl_mechanisms=("SCRAM-SHA-256",)) as gw:
        add_user(gw, "alice", PASSWORD)
        add_user(gw, "carol", "carol-secret")
        topic = f"mtls-sasl-{uuid.uuid4().hex[:8]}"
        bob_cert, bob_key = pki.client("bob")  # a certificate ACLs would refuse...
        conf = confluent_conf(gw, pki, "SASL_SSL", **confluent_sasl("SCRAM-SHA-256"))
        conf |= {"ssl.certificate.location": bob_cert, "ssl.key.location": bob_key}
        assert confluent_round_trip(conf, topic) == values("ck")  # ...logged in as alice

        alice_cert, alice_key = pki.client("alice")
        producer = KafkaProducer(
            **python_conf(gw, "SASL_SSL", "SCRAM-SHA-256")
            | {"sasl_plain_username": "carol", "sasl_plain_password": "carol-secret"},
            ssl_cafile=pki.ca,
            ssl_certfile=alice_cert,
            ssl_keyfile=alice_key,
        )
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(topic, b"from carol").get(20)
        producer.close()
        logs.wait_for("denied: User:carol ", topic)


def test_certificate_principal_mapping() -> None:
    def cert(*rdns: tuple[tuple[str, str], ...]) -> dict[str, Any]:
        return {"subject": rdns}

    c, o, cn = (("countryName", "GB"),), (("organizationName", "Acme, Inc."),), None
    assert tls.principal(cert(c, o, (("commonName", "alice"),))) == "User:alice"
    # several CNs: the last, the most specific (the first in Kafka's DN form)
    two = cert((("commonName", "team"),), (("commonName", "alice"),))
    assert tls.principal(two) == "User:alice"
    # no CN: the whole subject in RFC 2253 form, most specific first, escaped
    assert tls.principal(cert(c, o)) == "User:O=Acme\\, Inc.,C=GB"
    multi = cert(c, (("organizationalUnitName", "ops"), ("userId", "42")))
    assert tls.principal(multi) == "User:OU=ops+UID=42,C=GB"
    assert tls.distinguished_name([(("organizationName", " #x "),)]) == "O=\\ #x\\ "
    for anonymous in (None, {}, cert()):  # no certificate, none verified, empty subject
        assert tls.principal(anonymous) is cn


# --- failed handshakes -------------------------------------------------------------------
def api_versions_request() -> bytes:
    header = struct.pack(">hhih", 18, 0, 1, 4) + b"test"
    return struct.pack(">i", len(header)) + header


def answered(sock: socket.socket | ssl.SSLSocket) -> bool:
    """Send ApiVersions; True if its response comes back."""
    sock.sendall(api_versions_request())
    head = sock.recv(8)
    size, correlation_id = struct.unpack(">ii", head)
    assert correlation_id == 1 and 0 < size < 1 << 16, head
    sock.recv(size - 4)
    return True


def refusal(sock: ssl.SSLSocket) -> str:
    """Send ApiVersions where the gateway refuses the handshake: OpenSSL's reason for the
    alert that arrives instead of an answer (TLS 1.3: the client's side of the handshake
    ends before the server checks its certificate, so the alert comes on the first read)."""
    with pytest.raises(ssl.SSLError) as err:
        sock.sendall(api_versions_request())
        sock.recv(8)
    return str(err.value.reason)


def tls_client(gw: GatewayThread, pki: Pki, cert: tuple[str, str] | None = None) -> ssl.SSLSocket:
    ctx = ssl.create_default_context(cafile=pki.ca)
    if cert is not None:
        ctx.load_cert_chain(*cert)
    sock = socket.create_connection(gw.address, timeout=20)
    return ctx.wrap_socket(sock, server_hostname="127.0.0.1")


@pytest.mark.parametrize("loop", LOOPS)
def test_plaintext_client_is_closed_and_others_go_on(
    tmp_path: Path, pki: Pki, loop: str, logs: LogWatch
) -> None:
    with (
        tls_gateway(tmp_path, loop, pki, security_protocol="SSL") as gw,
        tls_client(gw, pki) as good,
    ):
        assert answered(good)
        with socket.create_connection(gw.address, timeout=20) as plain:
            plain.sendall(api_versions_request())
            alert = b""
            while chunk := plain.recv(1 << 16):  # until the gateway closes it
                alert += chunk
            # No Kafka answer; OpenSSL sends no alert for a record that is not TLS.
            assert alert[:1] in (b"", b"\x15"), alert
        line = logs.wait_for("TLS handshake failed", "plaintext client")
        assert "127.0.0.1:" in line
        assert answered(good)  # the TLS connection open all along is still served
        assert gw.call(lambda: gw.server.connection_count) == 1  # the refused one: none


@pytest.mark.parametrize("loop", LOOPS)
def test_untrusted_or_missing_client_certificate_is_refused(
    tmp_path: Path, pki: Pki, loop: str, logs: LogWatch
) -> None:
    with mtls_gateway(tmp_path, pki, "SSL", loop) as gw:
        with tls_client(gw, pki, pki.client("stranger")) as stranger:
            assert refusal(stranger) == "TLSV1_ALERT_UNKNOWN_CA"
        logs.wait_for("TLS handshake failed", "not trusted by --tls-client-ca")
        with tls_client(gw, pki) as anonymous:
            assert refusal(anonymous) == "TLSV13_ALERT_CERTIFICATE_REQUIRED"
        logs.wait_for("TLS handshake failed", "no client certificate")
        with tls_client(gw, pki, pki.client("bob")) as bob:
            assert answered(bob)  # ApiVersions needs no authorization
        # and the other way round: a client that does not trust the gateway's certificate
        with (
            socket.create_connection(gw.address, timeout=20) as raw,
            pytest.raises(ssl.SSLCertVerificationError),
        ):
            ssl.create_default_context().wrap_socket(raw, server_hostname="127.0.0.1")
        logs.wait_for("TLS handshake failed", "the client does not trust --tls-cert")


def test_stalled_handshake_times_out_without_blocking_others(
    tmp_path: Path, pki: Pki, logs: LogWatch
) -> None:
    """A client that connects and sends nothing holds only its own socket: others complete
    their handshakes meanwhile; the stalled one is closed after connections.max.idle.ms
    (here 1 s; the handshake's limit is at most 60 s)."""
    with tls_gateway(tmp_path, "uvloop", pki, security_protocol="SSL", idle_timeout_s=1.0) as gw:
        with socket.create_connection(gw.address, timeout=20) as stalled:
            with tls_client(gw, pki) as good:
                assert answered(good)
            assert stalled.recv(1) == b""  # closed by the gateway, not by our timeout
        logs.wait_for("TLS handshake failed", "taking longer than 1.0 seconds")


# --- configuration errors ----------------------------------------------------------------
def test_bad_certificate_files_fail_with_the_file_named(tmp_path: Path, pki: Pki) -> None:
    missing = str(tmp_path / "missing.pem")
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello\n")
    _, bob_key = pki.client("bob")
    encrypted = tmp_path / "encrypted.key"
    key = serialization.load_pem_private_key(Path(pki.server_key).read_bytes(), None)
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"pass"),
        )
    )
    cases = [
        ((missing, pki.server_key, None), f"certificate chain (--tls-cert) {missing}: No such"),
        ((pki.server_cert, missing, None), f"private key (--tls-key) {missing}: No such"),
        ((str(not_pem), pki.server_key, None), "no PEM CERTIFICATE"),
        ((pki.server_cert, str(not_pem), None), "no PEM PRIVATE KEY"),
        ((pki.server_cert, bob_key, None), "does not go with certificate"),
        ((pki.server_cert, str(encrypted), None), f"{encrypted} is encrypted"),
        ((pki.server_cert, pki.server_key, missing), f"client CA (--tls-client-ca) {missing}"),
        ((pki.server_cert, pki.server_key, bob_key), "no PEM CERTIFICATE"),
    ]
    for args, words in cases:
        with pytest.raises(tls.TlsConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
            tls.server_context(*args)
    assert isinstance(tls.TlsConfigError("x"), ValueError)
    ctx = tls.server_context(pki.server_cert, pki.server_key, pki.ca)
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert tls.listener_context(GatewayConfig(security_protocol="SASL_PLAINTEXT")) is None
    with pytest.raises(tls.TlsConfigError, match="needs a certificate chain"):
        tls.listener_context(GatewayConfig(security_protocol="SSL"))


def test_gateway_with_a_missing_certificate_does_not_start(tmp_path: Path, pki: Pki) -> None:
    missing = str(tmp_path / "nope.pem")
    config = {"security_protocol": "SSL", "tls_cert": missing, "tls_key": pki.server_key}
    with (
        pytest.raises(RuntimeError, match=r"TlsConfigError.*nope\.pem: No such file"),
        gateway_thread(tmp_path, **config),
    ):
        pass


# --- the real CLI ------------------------------------------------------------------------
def test_tmsgate_serve_with_ssl(tmp_path: Path, pki: Pki) -> None:
    """`tmsgate serve --kafka-security ssl` (uvloop, as operators run it)."""
    flags = ["--kafka-security", "ssl", "--tls-cert", pki.server_cert, "--tls-key"]
    gw = GatewayProcess(tmp_path / "store", None, *flags, pki.server_key, "--no-http")
    gw.start()
    try:
        conf = {"bootstrap.servers": gw.bootstrap, "security.protocol": "SSL"}
        conf["ssl.ca.location"] = pki.ca
        assert confluent_round_trip(conf, "cli-tls") == values("ck")
        with socket.create_connection(("127.0.0.1", gw.port), timeout=20) as plain:
            plain.sendall(api_versions_request())
            while plain.recv(1 << 16):  # the alert, then the gateway closes
                pass
        code, log = gw.terminate()
    finally:
        gw.kill()
    assert code == 0, log
    assert "TLS handshake failed: not TLS: a plaintext client" in log

    bad = GatewayProcess(tmp_path / "store2", None, *flags, str(tmp_path / "nope.key"))
    with pytest.raises(RuntimeError, match=r"private key \(--tls-key\) .*nope.key: No such file"):
        bad.start()
