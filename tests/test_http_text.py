"""Text over HTTP, over a real socket against a live gateway on LevelDB: ?payload=utf-8 and
base64 on publish, store and poll (read back by a Kafka consumer as the exact bytes), hex
message ids, 404 for an unknown namespace, ?create=auto as Kafka's auto-create, and the
API page at /docs with its assets served by the gateway."""

from __future__ import annotations

import base64
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, TopicPartition
from gateway_harness import GatewayThread, gateway_thread
from kafka import KafkaProducer
from openapi_spec_validator import validate
from tmsgate.protocol.columns import MEDIA_TYPE, RecordColumns, encode_columns
from tmsgate.protocol.tms_http import AVRO, ConsumeRequest, PublishRequest

PARTITIONS = 2  # the gateway's default for auto-created topics (Kafka's num.partitions)


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayThread]:
    tmp = tmp_path_factory.mktemp("text")
    with gateway_thread(tmp, http=True, default_partitions=PARTITIONS) as g:
        yield g


@pytest.fixture(scope="module")
def http(gw: GatewayThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gw.http_url, timeout=30) as client:
        yield client


def url(topic: str, action: str = "", namespace: str = "default") -> str:
    base = f"/v1/namespaces/{namespace}/topics/{topic}"
    return f"{base}/{action}" if action else base


def new_topic(http: httpx.Client, namespace: str = "default") -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    assert http.put(url(name, namespace=namespace)).status_code == 200
    return name


def refused(resp: httpx.Response, status: int, kind: str) -> str:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert body["error"] == kind, body
    return str(body["message"])


def poll(http: httpx.Client, topic: str, payload: str | None = None) -> list[dict[str, Any]]:
    params = {"payload": payload} if payload else {}
    resp = http.post(url(topic, "poll"), json={}, params=params)
    assert resp.status_code == 200, resp.text
    return resp.json()  # type: ignore[no-any-return]


def kafka_values(bootstrap: str, topic: str, count: int) -> list[bytes]:
    """What a confluent-kafka (librdkafka) consumer reads from partition 0."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    try:
        for _ in range(200):  # bounded: fails rather than hangs
            if len(values) >= count:
                break
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
    finally:
        consumer.close()
    return values


# --- payloads as text and base64 --------------------------------------------------------------
def test_utf8_text_is_stored_as_its_utf8_bytes(gw: GatewayThread, http: httpx.Client) -> None:
    topic = new_topic(http)
    text = ["Zürich", "5€", "日本", ""]
    resp = http.post(url(topic, "publish"), params={"payload": "utf-8"}, json={"messages": text})
    assert resp.status_code == 200, resp.text
    assert kafka_values(gw.bootstrap, topic, 4) == [t.encode() for t in text]
    # Read back as text, as Avro JSON bytes (the seed's default), and as base64.
    as_text = poll(http, topic, "utf-8")
    assert [(m["payload"], m["payloadEncoding"]) for m in as_text] == [(t, "utf-8") for t in text]
    assert [m["payload"].encode("latin-1") for m in poll(http, topic)] == [t.encode() for t in text]
    assert [base64.b64decode(m["payload"]) for m in poll(http, topic, "base64")] == [
        t.encode() for t in text
    ]
    # The seed's Avro JSON still refuses a character above U+00FF, saying where.
    message = refused(
        http.post(url(topic, "publish"), json={"messages": ["5€"]}), 400, "bad_request"
    )
    assert "U+20AC at index 1" in message


def test_utf8_poll_answers_bytes_that_are_not_text_in_base64(
    gw: GatewayThread, http: httpx.Client
) -> None:
    topic = new_topic(http)
    producer = KafkaProducer(bootstrap_servers=gw.bootstrap)
    for value in (b"ok", b"\xfc\xff\x00", b"Z\xc3\xbcrich"):
        producer.send(topic, value).get(30)
    producer.close()
    answered = [(m["payload"], m["payloadEncoding"]) for m in poll(http, topic, "utf-8")]
    assert answered == [("ok", "utf-8"), ("/P8A", "base64"), ("Zürich", "utf-8")]


def test_base64_round_trip_of_every_byte(gw: GatewayThread, http: httpx.Client) -> None:
    topic = new_topic(http)
    blobs = [bytes(range(256)), b"", b"\x00" * 7, uuid.uuid4().bytes]
    body = {"messages": [base64.b64encode(b).decode() for b in blobs]}
    assert (
        http.post(url(topic, "publish"), params={"payload": "base64"}, json=body).status_code == 200
    )
    answered = poll(http, topic, "base64")
    assert [base64.b64decode(m["payload"], validate=True) for m in answered] == blobs
    assert {m["payloadEncoding"] for m in answered} == {"base64"}
    assert kafka_values(gw.bootstrap, topic, len(blobs)) == blobs
    # store takes the same forms: stored in base64, committed, read as text.
    wp = http.post("/v1/transactions").json()["writePointer"]
    stored = http.post(
        url(topic, "store"),
        params={"payload": "base64"},
        json={"transactionWritePointer": wp, "messages": [base64.b64encode("€".encode()).decode()]},
    )
    assert stored.status_code == 200, stored.text
    assert (
        http.post(
            f"/v1/transactions/{wp}/commit",
            json={"publish": [{"topic": topic, "stored": [stored.json()]}]},
        ).status_code
        == 200
    )
    assert poll(http, topic, "utf-8")[-1]["payload"] == "€"


def test_hex_ids_beside_the_seeds(http: httpx.Client) -> None:
    topic = new_topic(http)
    assert http.post(url(topic, "publish"), json={"messages": ["a", "b"]}).status_code == 200
    for mode in (None, "avro", "utf-8", "base64"):
        answered = poll(http, topic, mode)
        assert [m["idHex"] for m in answered] == [m["id"].encode("latin-1").hex() for m in answered]
        assert all(re.fullmatch("[0-9a-f]{40}", m["idHex"]) for m in answered)
    # The id goes back as it came, to read on from it.
    first = poll(http, topic)[0]
    resp = http.post(url(topic, "poll"), json={"startFrom": first["id"], "inclusive": False})
    assert [m["payload"] for m in resp.json()] == ["b"]


def test_payload_refusals(http: httpx.Client) -> None:
    topic = new_topic(http)
    message = refused(
        http.post(url(topic, "publish"), params={"payload": "latin-9"}, json={"messages": []}),
        400,
        "bad_request",
    )
    assert "'avro', 'utf-8', 'base64'" in message
    assert "latin-9" in message
    # Avro binary carries bytes: only the default (or payload=avro) goes with it.
    avro = {"content-type": "avro/binary"}
    body = AVRO.encode_publish_request(PublishRequest(None, [b"\xff"]))
    resp = http.post(url(topic, "publish"), params={"payload": "utf-8"}, content=body, headers=avro)
    assert "avro/binary" in refused(resp, 400, "bad_request")
    resp = http.post(url(topic, "publish"), params={"payload": "avro"}, content=body, headers=avro)
    assert resp.status_code == 200
    consume = AVRO.encode_consume_request(ConsumeRequest())
    assert (
        AVRO.decode_messages(http.post(url(topic, "poll"), content=consume, headers=avro).content)[
            0
        ][1]
        == b"\xff"
    )
    bad = http.post(url(topic, "publish"), params={"payload": "base64"}, json={"messages": ["%%"]})
    assert "messages[0]: expected base64" in refused(bad, 400, "bad_request")
    assert poll(http, topic, "base64")[0]["payload"] == "/w=="  # nothing refused was stored


# --- unknown namespaces -------------------------------------------------------------------------
def test_unknown_namespace_is_404_on_every_route(http: httpx.Client) -> None:
    ns = f"ns-{uuid.uuid4().hex[:8]}"
    calls = [
        http.get(f"/v1/namespaces/{ns}/topics"),
        http.get(url("t", namespace=ns)),
        http.delete(url("t", namespace=ns)),
        http.put(url("t", "properties", ns), json={"a": "b"}),
        http.post(url("t", "publish", ns), json={"messages": ["x"]}),
        http.post(url("t", "store", ns), json={"transactionWritePointer": 1, "messages": ["x"]}),
        http.post(url("t", "poll", ns), json={}),
        http.post(
            url("t", "rollback", ns),
            json={
                "transactionWritePointer": 1,
                "startTimestamp": 0,
                "startSequenceId": 0,
                "endTimestamp": 0,
                "endSequenceId": 0,
            },
        ),
        http.get(url("t", "offsets", ns)),
        http.post(url("t", "read", ns), json={"offset": 0}),
    ]
    for resp in calls:
        assert ns in refused(resp, 404, "namespace_not_found"), resp.request.url
    # The Kafka namespace always exists: an unknown topic there is the topic's 404.
    refused(http.post(url("nothing-here", "poll"), json={}), 404, "topic_not_found")
    # A topic makes the namespace; then an unknown topic in it is the topic's 404.
    assert http.put(url("a", namespace=ns)).status_code == 200
    assert http.get(f"/v1/namespaces/{ns}/topics").json() == ["a"]
    refused(http.post(url("b", "poll", ns), json={}), 404, "topic_not_found")


# --- ?create=auto -------------------------------------------------------------------------------
def test_create_auto_makes_the_topic_as_kafka_does(gw: GatewayThread, http: httpx.Client) -> None:
    topic = f"auto-{uuid.uuid4().hex[:8]}"
    refused(http.post(url(topic, "publish"), json={"messages": ["x"]}), 404, "topic_not_found")
    resp = http.post(url(topic, "publish"), params={"create": "auto"}, json={"messages": ["x"]})
    assert resp.status_code == 200, resp.text
    # The gateway's default partition count, Kafka's defaults; a Kafka client sees it.
    assert http.get(url(topic)).json()["properties"] == {"kafka.partitions": str(PARTITIONS)}
    assert kafka_values(gw.bootstrap, topic, 1) == [b"x"]
    resp = http.post(
        url(f"{topic}~1", "publish"), params={"create": "auto"}, json={"messages": ["y"]}
    )
    assert resp.status_code == 200
    beyond = f"auto-{uuid.uuid4().hex[:8]}~5"
    resp = http.post(url(beyond, "publish"), params={"create": "auto"}, json={"messages": ["z"]})
    assert f"has {PARTITIONS} partitions" in refused(resp, 404, "topic_not_found")
    bad = http.post(url(topic, "publish"), params={"create": "yes"}, json={"messages": ["x"]})
    assert "create: expected 'auto'" in refused(bad, 400, "bad_request")


def test_create_auto_on_store_in_a_new_namespace(http: httpx.Client) -> None:
    ns, topic = f"ns-{uuid.uuid4().hex[:8]}", "out"
    wp = http.post("/v1/transactions").json()["writePointer"]
    n = 2
    body = encode_columns(
        RecordColumns(
            offsets=[0] * n,
            timestamps=[-1] * n,
            write_pointers=[0] * n,
            keys=[b"k"] * n,
            values=[b"v1", b"v2"],
            headers=[[]] * n,
        )
    )
    headers = {"content-type": MEDIA_TYPE, "x-transaction-write-pointer": str(wp)}
    plain = http.post(url(topic, "store", ns), content=body, headers=headers)
    refused(plain, 404, "namespace_not_found")
    stored = http.post(
        url(topic, "store", ns), params={"create": "auto"}, content=body, headers=headers
    )
    assert stored.status_code == 200, stored.text
    commit = {"publish": [{"namespace": ns, "topic": topic, "stored": [stored.json()]}]}
    assert http.post(f"/v1/transactions/{wp}/commit", json=commit).status_code == 200
    resp = http.post(url(topic, "poll", ns), json={}, params={"payload": "utf-8"})
    assert [m["payload"] for m in resp.json()] == ["v1", "v2"]
    assert http.get(f"/v1/namespaces/{ns}/topics").json() == ["out", "out~1"]


def test_create_auto_without_auto_create(tmp_path: Path) -> None:
    with (
        gateway_thread(tmp_path, http=True, auto_create_topics=False) as g,
        httpx.Client(base_url=g.http_url, timeout=30) as client,
    ):
        resp = client.post(url("t", "publish"), params={"create": "auto"}, json={"messages": ["x"]})
        assert "--no-auto-create-topics" in refused(resp, 404, "topic_not_found")
        assert client.get("/v1/namespaces/default/topics").json() == []


# --- the API page -------------------------------------------------------------------------------
def test_docs_page_and_its_local_assets(http: httpx.Client) -> None:
    page = http.get("/docs")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    refs = re.findall(r'(?:href|src|url)[=:]\s*"([^"]+)"', page.text)
    assert "openapi.json" in refs and "docs/swagger-ui-bundle.js" in refs
    assert not [r for r in refs if "//" in r]  # nothing from another host (no CDN)
    for ref in refs:
        asset = http.get(f"/{ref}")  # relative to /docs: the server's root
        assert asset.status_code == 200, ref
        assert len(asset.content) > 100
    assert "SwaggerUIBundle" in http.get("/docs/swagger-ui-bundle.js").text
    assert http.get("/docs/swagger-ui.css").headers["content-type"].startswith("text/css")
    refused(http.get("/docs/index.j2"), 404, "not_found")
    refused(http.get("/docs/..%2Fpyproject.toml"), 404, "not_found")
    validate(http.get("/openapi.json").json())  # OpenAPI 3.0, as the validator reads it
