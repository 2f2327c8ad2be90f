"""Pipelined requests on one connection, over a real socket: answered strictly in order
whatever order their handlers finish in, with at most max_in_flight_per_connection
unanswered (the socket is not read past that, and reading resumes as answers go out);
what was read before a malformed frame or a half-close is still answered."""

from __future__ import annotations

import socket
from pathlib import Path

import kafka_requests as kr
import pytest
from gateway_harness import RawClient, gateway_thread
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.producer import ProduceRequest
from tmsgate.protocol import ApiKey, ErrorCode

PRODUCE_V, METADATA_V, API_VERSIONS_V = 8, 1, 0


def _encoded(request: object, version: int, correlation_id: int) -> bytes:
    request.with_header(correlation_id=correlation_id, client_id="pipeline")  # type: ignore[attr-defined]
    return request.encode(version=version, header=True, framed=True)  # type: ignore[attr-defined]


def _pipeline(topic: str, count: int) -> tuple[bytes, list[int]]:
    """``count`` requests alternating Produce (answered after an fsync), Metadata and
    ApiVersions (answered at once) -> their bytes and API keys, correlation ids 1..count."""
    out, keys = [], []
    for cid in range(1, count + 1):
        kind = cid % 3
        if kind == 0:
            req, version = kr.produce(topic, kr.batch(2)), PRODUCE_V
        elif kind == 1:
            req, version = kr.metadata(topic, auto_create=False), METADATA_V
        else:
            req, version = ApiVersionsRequest(), API_VERSIONS_V
        out.append(_encoded(req, version, cid))
        keys.append(req.API_KEY)
    return b"".join(out), keys


def _version(api_key: int) -> int:
    return {
        ProduceRequest.API_KEY: PRODUCE_V,
        MetadataRequest.API_KEY: METADATA_V,
        ApiVersionsRequest.API_KEY: API_VERSIONS_V,
    }[api_key]


def _rest(client: RawClient) -> bytes:
    """Whatever the gateway sends until it closes the connection."""
    client.sock.settimeout(10)
    rest = b""
    while chunk := client.sock.recv(65536):
        rest += chunk
    return rest


def _topic_and_pipeline(client: RawClient, topic: str, count: int) -> tuple[bytes, list[int]]:
    assert client.request(kr.create_topic(topic), 3).topics[0].error_code == 0
    return _pipeline(topic, count)


def test_pipelined_requests_past_max_in_flight_are_answered_in_order(tmp_path: Path) -> None:
    with gateway_thread(tmp_path, max_in_flight_per_connection=2) as gw:
        client = RawClient(gw.address)
        data, keys = _topic_and_pipeline(client, "pipelined", 60)
        client.send_raw(data)  # all at once: 30 times the connection's limit
        offsets = []
        for cid, api_key in enumerate(keys, start=1):
            resp = client.receive(api_key, _version(api_key))
            assert resp.header.correlation_id == cid
            if api_key == ProduceRequest.API_KEY:
                part = kr.partition(resp)
                assert part.error_code == ErrorCode.NONE
                offsets.append(part.base_offset)
        assert offsets == list(range(0, 2 * len(offsets), 2))  # in the order sent
        client.close()


def test_what_came_before_a_malformed_frame_is_answered_first(tmp_path: Path) -> None:
    with gateway_thread(tmp_path) as gw:
        client = RawClient(gw.address)
        data, keys = _topic_and_pipeline(client, "before-bad", 9)
        # A Produce v8 header and no body: cut short, so the connection closes.
        bad = (
            (12).to_bytes(4, "big") + ApiKey.PRODUCE.to_bytes(2, "big") + b"\x00\x08" + b"\xff" * 8
        )
        client.send_raw(data + bad + _encoded(ApiVersionsRequest(), 0, 99))
        for cid, api_key in enumerate(keys, start=1):
            assert client.receive(api_key, _version(api_key)).header.correlation_id == cid
        assert _rest(client) == b""  # closed, nothing after the malformed frame answered
        client.close()


def test_a_half_closed_client_gets_every_answer(tmp_path: Path) -> None:
    with gateway_thread(tmp_path, max_in_flight_per_connection=3) as gw:
        client = RawClient(gw.address)
        data, keys = _topic_and_pipeline(client, "half-closed", 30)
        client.send_raw(data)
        client.sock.shutdown(socket.SHUT_WR)  # no more requests: the answers still come
        for cid, api_key in enumerate(keys, start=1):
            assert client.receive(api_key, _version(api_key)).header.correlation_id == cid
        assert _rest(client) == b""  # then closed
        client.close()


def test_an_answer_that_fails_to_encode_closes_only_its_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answers before it go out; the connection then closes (its client cannot be
    told which answer is missing) and every other connection is served as before."""
    from tmsgate.gateway.kafka import connection

    real = connection.encode_response

    def encode(correlation_id: int, response: object) -> object:
        if correlation_id == 2:
            raise ValueError("cannot encode this one")
        return real(correlation_id, response)

    monkeypatch.setattr(connection, "encode_response", encode)
    with gateway_thread(tmp_path) as gw:
        client = RawClient(gw.address)
        client.send_raw(
            _encoded(ApiVersionsRequest(), 0, 1)
            + _encoded(ApiVersionsRequest(), 0, 2)
            + _encoded(ApiVersionsRequest(), 0, 3)
        )
        assert client.receive(ApiKey.API_VERSIONS, 0).header.correlation_id == 1
        assert _rest(client) == b""
        client.close()
        other = RawClient(gw.address)
        assert other.request(ApiVersionsRequest(), 0).error_code == 0
        other.close()
