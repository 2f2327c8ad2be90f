"""KIP-368 re-authentication on a live SASL gateway with connections.max.reauth.ms set:
the login's answer tells its lifetime, a client logs in again on the same connection and
keeps being served, a new login cannot change the principal or the mechanism, and a
connection whose login has expired is closed at its next request."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from gateway_harness import GatewayThread, RawClient, gateway_thread
from kafka.protocol.metadata import MetadataRequest
from scramp import ScramClient
from test_sasl_wire import authenticate, handshake
from tmsgate.protocol import ErrorCode

pytestmark = pytest.mark.timeout(120)
LIFETIME_MS = 600_000
SHORT_MS = 300


def _gateway(tmp_path_factory: pytest.TempPathFactory, lifetime_ms: int) -> Iterator[GatewayThread]:
    with gateway_thread(
        tmp_path_factory.mktemp("reauth"),
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanisms=("SCRAM-SHA-256", "PLAIN"),
        connections_max_reauth_ms=lifetime_ms,
    ) as g:
        g.broker.users.set_password("ann", "SCRAM-SHA-256", "ann-secret")
        g.broker.users.set_password("ben", "SCRAM-SHA-256", "ben-secret")
        yield g


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayThread]:
    yield from _gateway(tmp_path_factory, LIFETIME_MS)


def login(c: RawClient, user: str, password: str) -> object:
    """A SCRAM-SHA-256 login (first or again); the last SaslAuthenticate answer."""
    assert handshake(c, "SCRAM-SHA-256").error_code == ErrorCode.NONE
    client = ScramClient(["SCRAM-SHA-256"], user, password)
    first = authenticate(c, client.get_client_first().encode())
    if first.error_code:
        return first
    client.set_server_first(first.auth_bytes.decode())
    final = authenticate(c, client.get_client_final().encode())
    if not final.error_code:
        client.set_server_final(final.auth_bytes.decode())
    return final


def test_the_login_tells_its_lifetime_and_can_be_renewed(gw: GatewayThread) -> None:
    c = RawClient(gw.address)
    first = login(c, "ann", "ann-secret")
    assert first.error_code == ErrorCode.NONE and first.session_lifetime_ms == LIFETIME_MS
    assert c.request(MetadataRequest(topics=None), 1).brokers
    again = login(c, "ann", "ann-secret")
    assert again.error_code == ErrorCode.NONE and again.session_lifetime_ms == LIFETIME_MS
    assert c.request(MetadataRequest(topics=None), 1).brokers  # the same connection
    c.close()


def test_a_new_login_cannot_change_the_principal(gw: GatewayThread) -> None:
    c = RawClient(gw.address)
    assert login(c, "ann", "ann-secret").error_code == ErrorCode.NONE
    resp = login(c, "ben", "ben-secret")
    assert resp.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert resp.error_message == (
        "Cannot change principals during re-authentication from User:ann: User:ben"
    )
    assert c.closed_by_peer()


def test_a_new_login_keeps_the_mechanism_and_needs_the_password(gw: GatewayThread) -> None:
    c = RawClient(gw.address)
    assert login(c, "ann", "ann-secret").error_code == ErrorCode.NONE
    assert handshake(c, "PLAIN").error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert c.closed_by_peer()
    c = RawClient(gw.address)
    assert login(c, "ann", "ann-secret").error_code == ErrorCode.NONE
    assert login(c, "ann", "wrong").error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert c.closed_by_peer()


def test_an_expired_login_closes_the_connection(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    for g in _gateway(tmp_path_factory, SHORT_MS):
        c = RawClient(g.address)
        assert login(c, "ann", "ann-secret").session_lifetime_ms == SHORT_MS
        renewed = RawClient(g.address)
        assert login(renewed, "ann", "ann-secret").error_code == ErrorCode.NONE
        # The session's end is on the monotonic clock the gateway reads; wait it out.
        time.sleep(SHORT_MS / 1000 + 0.1)
        c.send(MetadataRequest(topics=None), 1)
        assert c.closed_by_peer()
        # Logging in again after the end is what KIP-368 clients do: served again.
        assert login(renewed, "ann", "ann-secret").error_code == ErrorCode.NONE
        assert renewed.request(MetadataRequest(topics=None), 1).brokers
        renewed.close()


def test_librdkafka_logs_in_again_on_its_connection(
    tmp_path_factory: pytest.TempPathFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """confluent-kafka's librdkafka (2.2+) re-authenticates before the lifetime ends, so its
    connection is never closed for an expired login."""
    from confluent_kafka import Producer

    delivered: list[object] = []

    def on_delivery(error: object, _message: object) -> None:
        delivered.append(error)

    for g in _gateway(tmp_path_factory, 1500):
        producer = Producer(
            {
                "bootstrap.servers": g.bootstrap,
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": "ann",
                "sasl.password": "ann-secret",
            }
        )
        with caplog.at_level("INFO", logger="tmsgate.kafka"):
            deadline = time.monotonic() + 4.0  # more than two lifetimes
            while time.monotonic() < deadline:
                producer.produce("reauth", b"v", on_delivery=on_delivery)
                producer.poll(0.2)
            assert producer.flush(30) == 0
        assert delivered and all(e is None for e in delivered)
        messages = [r.getMessage() for r in caplog.records]
        assert any("re-authenticated as User:ann" in m for m in messages), messages
        assert not any("session expired" in m for m in messages)
