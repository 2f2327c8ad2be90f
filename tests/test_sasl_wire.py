"""SASL on the wire, byte for byte with kafka-python's classes, on a live SASL gateway: the
handshake's answers and error codes, the connection closed after a failed login, fuzzed
tokens over real sockets (each gets an answer or a close, never a hang), and a login that
still works after all of them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from gateway_harness import GatewayThread, RawClient, gateway_thread
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest
from scramp import ScramClient
from tmsgate.protocol import ErrorCode

pytestmark = pytest.mark.timeout(120)
USER, PASSWORD = "frank", "frank-secret"
MECHANISMS = ("SCRAM-SHA-256", "PLAIN")


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayThread]:
    with gateway_thread(
        tmp_path_factory.mktemp("sasl-wire"),
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanisms=MECHANISMS,
    ) as g:
        g.broker.users.set_password(USER, "SCRAM-SHA-256", PASSWORD)
        yield g


def handshake(c: RawClient, mechanism: str, version: int = 1) -> Any:
    return c.request(SaslHandshakeRequest(mechanism=mechanism), version)


def authenticate(c: RawClient, token: bytes, version: int = 2) -> Any:
    return c.request(SaslAuthenticateRequest(auth_bytes=token), version)


def scram_login(gw: GatewayThread) -> RawClient:
    c = RawClient(gw.address)
    assert handshake(c, "SCRAM-SHA-256").error_code == ErrorCode.NONE
    client = ScramClient(["SCRAM-SHA-256"], USER, PASSWORD)
    first = authenticate(c, client.get_client_first().encode())
    assert first.error_code == ErrorCode.NONE
    client.set_server_first(first.auth_bytes.decode())
    final = authenticate(c, client.get_client_final().encode())
    assert final.error_code == ErrorCode.NONE and final.session_lifetime_ms == 0
    client.set_server_final(final.auth_bytes.decode())  # checks the server's signature
    return c


def test_login_then_requests_are_served(gw: GatewayThread) -> None:
    c = scram_login(gw)
    meta = c.request(MetadataRequest(topics=None), 1)
    assert meta.brokers
    c.close()


def test_handshake_lists_the_mechanisms_and_refuses_others(gw: GatewayThread) -> None:
    c = RawClient(gw.address)
    resp = handshake(c, "GSSAPI")
    assert resp.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert list(resp.mechanisms) == list(MECHANISMS)
    assert c.closed_by_peer()
    c = RawClient(gw.address)
    assert handshake(c, "PLAIN", version=0).error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert c.closed_by_peer()


def test_authenticate_without_handshake_and_a_second_handshake(gw: GatewayThread) -> None:
    c = RawClient(gw.address)
    assert authenticate(c, b"\x00u\x00p").error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert c.closed_by_peer()
    c = scram_login(gw)
    assert handshake(c, "PLAIN").error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert c.closed_by_peer()


def test_failed_login_is_answered_then_closed(gw: GatewayThread) -> None:
    c = RawClient(gw.address)
    assert handshake(c, "PLAIN").error_code == ErrorCode.NONE
    resp = authenticate(c, f"\x00{USER}\x00wrong".encode(), version=0)
    assert resp.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert resp.error_message == "Authentication failed: Invalid username or password"
    assert c.closed_by_peer()


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(MECHANISMS),
    st.lists(st.binary(max_size=120), min_size=1, max_size=3),
)
def test_fuzzed_tokens_get_an_answer_and_nothing_else(
    gw: GatewayThread, mechanism: str, tokens: list[bytes]
) -> None:
    c = RawClient(gw.address)
    try:
        assert handshake(c, mechanism).error_code == ErrorCode.NONE
        for token in tokens:
            resp = authenticate(c, token)
            if resp.error_code != ErrorCode.NONE:
                assert resp.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
                assert resp.error_message
                assert c.closed_by_peer()
                return
        # Not failed yet (a SCRAM exchange half way): nothing but SASL is served.
        c.send(MetadataRequest(topics=None), 1)
        assert c.closed_by_peer()
    finally:
        c.close()


def test_still_serving_after_the_fuzz(gw: GatewayThread) -> None:
    scram_login(gw).close()
