"""The TMS HTTP API over a real socket: a live gateway on LevelDB, httpx as the client,
kafka-python on the same store. Every endpoint, both encodings, the contract's status
codes and bodies, bad input (4xx with a JSON body), and the Kafka interplay."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from gateway_harness import GatewayProcess, GatewayThread, gateway_thread, kafka_records
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from prometheus_client import generate_latest
from tmsgate.gateway.http.app import route_table
from tmsgate.gateway.http.config import HttpConfig
from tmsgate.gateway.kafka import GatewayConfig
from tmsgate.gateway.services import ServeConfig, Services, serve
from tmsgate.protocol import TX_HEADER
from tmsgate.protocol.tms_http import AVRO, JSON, ConsumeRequest, PublishRequest, PublishResponse
from tmsgate.storage import MessageId, space
from tmsgate.storage.transactions import decode_transaction

AVRO_HEADERS = {"content-type": "avro/binary"}
ALL_BYTES = bytes(range(256))
# Later than any write pointer issued (milliseconds x 10^6): its state is "unknown".
FUTURE_WP = 1 << 62


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayThread]:
    with gateway_thread(tmp_path_factory.mktemp("http"), http=True) as g:
        yield g


@pytest.fixture(scope="module")
def http(gw: GatewayThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gw.http_url, timeout=30) as client:
        yield client


@pytest.fixture
def topic(http: httpx.Client) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    assert http.put(f"/v1/namespaces/default/topics/{name}").status_code == 200
    return name


def url(topic: str, action: str = "", namespace: str = "default") -> str:
    base = f"/v1/namespaces/{namespace}/topics/{topic}"
    return f"{base}/{action}" if action else base


def error(resp: httpx.Response, status: int, kind: str | None = None) -> dict[str, Any]:
    """Assert an error answer: the status, a JSON body with error and message."""
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"] == "application/json"
    body = resp.json()
    assert isinstance(body["message"], str) and body["message"]
    if kind is not None:
        assert body["error"] == kind, body
    return body


def publish_json(http: httpx.Client, topic: str, messages: list[bytes], wp: int | None = None):
    req = PublishRequest(wp, messages)
    return http.post(url(topic, "publish"), content=JSON.encode_publish_request(req))


def publish_avro(http: httpx.Client, topic: str, messages: list[bytes], wp: int | None = None):
    body = AVRO.encode_publish_request(PublishRequest(wp, messages))
    return http.post(url(topic, "publish"), content=body, headers=AVRO_HEADERS)


def poll(
    http: httpx.Client, topic: str, avro: bool = False, **kw: Any
) -> list[tuple[bytes, bytes]]:
    codec = AVRO if avro else JSON
    headers = AVRO_HEADERS if avro else {"content-type": "application/json"}
    resp = http.post(
        url(topic, "poll"),
        content=codec.encode_consume_request(ConsumeRequest(**kw)),
        headers=headers,
    )
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"] == headers["content-type"]
    return codec.decode_messages(resp.content)


def payloads(http: httpx.Client, topic: str, **kw: Any) -> list[bytes]:
    return [p for _, p in poll(http, topic, **kw)]


def start_tx(http: httpx.Client, **body: Any) -> dict[str, Any]:
    resp = http.post("/v1/transactions", json=body) if body else http.post("/v1/transactions")
    assert resp.status_code == 200, resp.text
    return resp.json()


def snapshot(http: httpx.Client) -> bytes:
    return http.post("/v1/transactions/snapshot").json()["encoded"].encode("latin-1")


def committed(http: httpx.Client, topic: str) -> list[bytes]:
    """What a transactional poll with a fresh snapshot returns."""
    return payloads(http, topic, transaction=snapshot(http))


# --- topics ----------------------------------------------------------------------------------
def test_create_get_list_update_delete(http: httpx.Client) -> None:
    ns = f"ns-{uuid.uuid4().hex[:6]}"
    created = http.put(url("b", namespace=ns), json={"ttl": 3600, "owner": "me", "ratio": 1.5})
    assert created.status_code == 200
    assert created.json() == {
        "name": "b",
        "properties": {"ttl": "3600", "owner": "me", "ratio": "1.5"},
    }
    assert http.put(url("a", namespace=ns)).json() == {"name": "a", "properties": {}}
    assert http.get(f"/v1/namespaces/{ns}/topics").json() == ["a", "b"]
    assert http.get(url("b", namespace=ns)).json()["properties"]["ttl"] == "3600"
    updated = http.put(url("b", "properties", ns), json={"ttl": "60"})
    assert updated.json() == {"name": "b", "properties": {"ttl": "60"}}  # replaces all
    assert http.get(url("b", namespace=ns)).json() == updated.json()
    deleted = http.delete(url("b", namespace=ns))
    assert deleted.status_code == 200 and deleted.content == b""
    assert http.get(f"/v1/namespaces/{ns}/topics").json() == ["a"]
    error(http.get(url("b", namespace=ns)), 404, "topic_not_found")
    error(http.delete(url("b", namespace=ns)), 404, "topic_not_found")
    # Recreated: a new generation, empty.
    assert http.put(url("b", namespace=ns)).status_code == 200
    assert http.get(f"/v1/namespaces/{ns}/topics").json() == ["a", "b"]


def test_topic_refusals(http: httpx.Client, topic: str) -> None:
    error(http.put(url(topic)), 409, "topic_exists")
    error(http.put(url("x1"), json={"ttl": "abc"}), 400, "invalid_properties")
    error(http.put(url("x2"), json={"ttl": -5}), 400, "invalid_properties")
    error(http.put(url("x3"), json={"flag": True}), 400, "bad_request")
    error(http.put(url("x4"), json={"flag": None}), 400, "bad_request")
    error(http.put(url("x5"), json=["ttl"]), 400, "bad_request")
    error(http.put(url("x6"), content=b"{not json"), 400, "bad_request")
    error(http.put(url("x7"), content=b"ttl=5", headers={"content-type": "text/plain"}), 415)
    error(http.put(url("bad name")), 400, "invalid_name")
    error(http.put(url("a" * 250)), 400, "invalid_name")
    error(http.put(url("t", namespace="bad%24ns")), 400, "invalid_name")
    error(http.get("/v1/namespaces/bad%24ns/topics"), 400, "invalid_name")
    error(http.put(url(topic, "properties")), 400, "bad_request")  # the body is required
    error(http.put(url("nope-x", "properties"), json={}), 404, "topic_not_found")
    error(http.put(url(topic, "properties"), json={"ttl": "1.5"}), 400, "invalid_properties")
    # Nothing refused was created.
    assert not any(t.startswith("x") for t in http.get("/v1/namespaces/default/topics").json())


def test_dot_names_refused(gw: GatewayThread) -> None:
    """'.' and '..' as raw path segments (httpx would normalise them away)."""
    with httpx.Client(base_url=gw.http_url) as client:
        resp = client.send(
            httpx.Request("PUT", gw.http_url + "/v1/namespaces/default/topics/%2E%2E")
        )
    error(resp, 400, "invalid_name")


# --- publish and poll --------------------------------------------------------------------------
@pytest.mark.parametrize("avro", [False, True], ids=["json", "avro"])
def test_publish_and_poll(http: httpx.Client, topic: str, avro: bool) -> None:
    messages = [b"first", ALL_BYTES, b"", b"\x00" * 1000]
    resp = (publish_avro if avro else publish_json)(http, topic, messages)
    assert resp.status_code == 200
    assert resp.content == b"" and "content-type" not in resp.headers
    got = poll(http, topic, avro=avro)
    assert [p for _, p in got] == messages
    ids = [MessageId(i) for i, _ in got]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    # From a message id, inclusive and not; from a time; with a limit.
    assert [p for _, p in poll(http, topic, avro=avro, start_from=ids[1])] == messages[1:]
    exclusive = poll(http, topic, avro=avro, start_from=ids[1], inclusive=False)
    assert [p for _, p in exclusive] == messages[2:]
    at = ids[0].publish_ts
    assert [p for _, p in poll(http, topic, avro=avro, start_from=at)] == messages
    assert poll(http, topic, avro=avro, start_from=at + 10_000) == []
    assert [p for _, p in poll(http, topic, avro=avro, limit=2)] == messages[:2]


def test_poll_default_limit_is_100(http: httpx.Client, topic: str) -> None:
    assert publish_avro(http, topic, [b"%d" % i for i in range(150)]).status_code == 200
    assert len(poll(http, topic)) == 100
    assert len(poll(http, topic, limit=150)) == 150


def test_publish_refusals(http: httpx.Client, topic: str) -> None:
    body = error(publish_json(http, topic, []), 400, "bad_request")
    assert "messages is empty" in body["message"]
    error(publish_json(http, "no-such-topic", [b"x"]), 404, "topic_not_found")
    error(publish_avro(http, "no-such-topic", [b"x"]), 404, "topic_not_found")
    text = error(
        http.post(url(topic, "publish"), content=b"\x02\x04\x02a", headers=AVRO_HEADERS), 400
    )["message"]
    assert text.startswith("PublishRequest.messages: expected an array of bytes")
    text = error(http.post(url(topic, "publish"), json={"messages": [1]}), 400)["message"]
    assert text.startswith("PublishRequest.messages[0]: expected bytes")
    text = error(http.post(url(topic, "publish"), json={"messages": ["\u20ac"]}), 400)["message"]
    assert "U+20AC" in text
    error(http.post(url(topic, "publish"), content=b"{", headers={}), 400, "bad_request")
    error(
        http.post(url(topic, "publish"), content=b"x", headers={"content-type": "text/plain"}),
        415,
        "unsupported_media_type",
    )
    # A pointer that is not in progress: 409 with its state.
    body = error(publish_json(http, topic, [b"x"], wp=FUTURE_WP), 409, "transaction_conflict")
    assert body["state"] == "unknown" and body["writePointer"] == FUTURE_WP
    error(publish_json(http, topic, [b"x"], wp=-1), 400, "invalid_transaction")
    assert poll(http, topic) == []  # nothing refused was stored


def test_missing_content_type_is_json(http: httpx.Client, topic: str) -> None:
    req = http.build_request("POST", url(topic, "publish"), content=b'{"messages":["m"]}')
    assert "content-type" not in req.headers  # httpx sets none for raw content
    assert http.send(req).status_code == 200
    assert payloads(http, topic) == [b"m"]


def test_poll_refusals(http: httpx.Client, topic: str) -> None:
    message = error(http.post(url(topic, "poll"), json={"startFrom": "short"}), 400)["message"]
    assert "startFrom: a message id has 20 bytes, got 5" in message
    error(http.post(url(topic, "poll"), json={"limit": 0}), 400, "bad_request")
    error(http.post(url(topic, "poll"), json={"limit": -1}), 400, "bad_request")
    message = error(http.post(url(topic, "poll"), json={"transaction": "xyz"}), 400)["message"]
    assert message.startswith("transaction: not an encoded transaction")
    error(http.post(url(topic, "poll"), json={"inclusive": 1}), 400, "bad_request")
    error(http.post(url(topic, "poll"), json={"extra": 1}), 400, "bad_request")
    error(http.post(url("no-such-topic", "poll"), json={}), 404, "topic_not_found")
    error(http.post(url(topic, "poll"), content=b"\x09", headers=AVRO_HEADERS), 400)


# --- transactions ------------------------------------------------------------------------------
def test_transaction_start_and_snapshot(http: httpx.Client) -> None:
    tx = start_tx(http, timeoutSeconds=5)
    assert tx["timeoutSeconds"] == 5 and tx["writePointer"] > tx["readPointer"] >= 0
    decoded = decode_transaction(tx["encoded"].encode("latin-1"))
    assert decoded.write_pointer == tx["writePointer"]
    assert sorted(decoded.in_progress) == tx["inProgress"]
    assert start_tx(http)["timeoutSeconds"] == 30.0
    listed = http.get("/v1/transactions").json()
    assert tx["writePointer"] in [t["writePointer"] for t in listed["inProgress"]]
    expiry = next(t for t in listed["inProgress"] if t["writePointer"] == tx["writePointer"])
    assert expiry["expiresAtMs"] > tx["writePointer"] // 1_000_000
    snap = http.post("/v1/transactions/snapshot").json()
    assert snap["writePointer"] == 0 and snap["timeoutSeconds"] is None
    assert tx["writePointer"] in snap["inProgress"]
    raw = http.post("/v1/transactions", headers={"accept": "avro/binary"})
    assert raw.headers["content-type"] == "avro/binary"
    assert decode_transaction(raw.content).write_pointer > tx["writePointer"]
    raw = http.post("/v1/transactions/snapshot", headers={"accept": "avro/binary"})
    assert decode_transaction(raw.content).write_pointer == 0


def test_transaction_refusals(http: httpx.Client) -> None:
    for body in ({"timeoutSeconds": 0}, {"timeoutSeconds": -1}, {"timeoutSeconds": "5"}):
        error(http.post("/v1/transactions", json=body), 400, "bad_request")
    error(http.post("/v1/transactions", json={"timeoutSeconds": 1e9}), 400, "bad_request")
    error(http.post("/v1/transactions", json={"timeout": 5}), 400, "bad_request")
    error(http.post("/v1/transactions", content=b"[]"), 400, "bad_request")
    error(http.post("/v1/transactions/abc/commit"), 400, "bad_request")
    error(http.post("/v1/transactions/-5/commit"), 400, "bad_request")
    error(http.get("/v1/transactions/99999999999999999999"), 400, "bad_request")
    body = error(http.post(f"/v1/transactions/{FUTURE_WP}/commit"), 409, "transaction_conflict")
    assert body == {
        "error": "transaction_conflict",
        "message": body["message"],
        "writePointer": FUTURE_WP,
        "state": "unknown",
    }


def test_commit_abort_invalidate_states(http: httpx.Client) -> None:
    wps = [start_tx(http)["writePointer"] for _ in range(3)]
    for wp in wps:
        assert http.get(f"/v1/transactions/{wp}").json() == {
            "writePointer": wp,
            "state": "in_progress",
        }
    for wp, action, state in zip(
        wps, ("commit", "abort", "invalidate"), ("committed", "aborted", "invalid"), strict=True
    ):
        resp = http.post(f"/v1/transactions/{wp}/{action}")
        assert resp.json() == {"writePointer": wp, "state": state}
        assert http.get(f"/v1/transactions/{wp}").json()["state"] == state
        for again in ("commit", "abort", "invalidate"):
            body = error(http.post(f"/v1/transactions/{wp}/{again}"), 409, "transaction_conflict")
            assert body["state"] == state
    invalid = http.get("/v1/transactions").json()["invalid"]
    assert wps[1] in invalid and wps[2] in invalid and wps[0] not in invalid


@pytest.mark.parametrize("avro", [False, True], ids=["json", "avro"])
def test_transactional_publish_commit_and_rollback(
    http: httpx.Client, topic: str, avro: bool
) -> None:
    publish = publish_avro if avro else publish_json
    codec = AVRO if avro else JSON
    assert publish(http, topic, [b"before"]).status_code == 200
    tx = start_tx(http)
    wp = tx["writePointer"]
    first = publish(http, topic, [b"a", b"b"], wp)
    assert first.status_code == 200
    assert first.headers["content-type"] == codec.content_type
    detail = codec.decode_publish_response(first.content)
    assert detail.write_pointer == wp
    assert (detail.start_ts, detail.start_seq) <= (detail.end_ts, detail.end_seq)
    second = publish(http, topic, [b"c"], wp)
    # Uncommitted: everything is in a plain poll; a transactional one stops before it.
    assert payloads(http, topic) == [b"before", b"a", b"b", b"c"]
    assert committed(http, topic) == [b"before"]
    # The transaction reads its own writes.
    assert payloads(http, topic, transaction=tx["encoded"].encode("latin-1")) == [
        b"before",
        b"a",
        b"b",
        b"c",
    ]
    # Roll back the second publish with its answer as is.
    rolled = http.post(
        url(topic, "rollback"),
        content=second.content,
        headers=AVRO_HEADERS if avro else {},
    )
    assert rolled.status_code == 200
    if avro:
        assert rolled.content == b""
    else:
        assert rolled.json() == {"rolledBack": 1}
    assert http.post(f"/v1/transactions/{wp}/commit").status_code == 200
    assert committed(http, topic) == [b"before", b"a", b"b"]
    assert payloads(http, topic) == [b"before", b"a", b"b", b"c"]  # a plain poll sees all
    # Committed is final: no more publishing or rolling back.
    body = error(publish(http, topic, [b"late"], wp), 409, "transaction_conflict")
    assert body["state"] == "committed"
    body = error(
        http.post(
            url(topic, "rollback"), content=first.content, headers=AVRO_HEADERS if avro else {}
        ),
        409,
        "transaction_conflict",
    )
    assert body["state"] == "committed"


def test_rollback_refusals(http: httpx.Client, topic: str) -> None:
    resp = PublishResponse(None, 1, 0, 1, 0)
    error(http.post(url(topic, "rollback"), content=JSON.encode_publish_response(resp)), 400)
    wp = start_tx(http)["writePointer"]
    for bad in (PublishResponse(wp, -1, 0, 1, 0), PublishResponse(wp, 1, 0, 1, 70000)):
        body = JSON.encode_publish_response(bad)
        error(http.post(url(topic, "rollback"), content=body), 400, "bad_request")
    error(http.post(url(topic, "rollback"), json={"startTimestamp": 1}), 400, "bad_request")
    good = JSON.encode_publish_response(PublishResponse(wp, 1, 0, 1, 0))
    error(http.post(url("no-such-topic", "rollback"), content=good), 404, "topic_not_found")
    assert http.post(url(topic, "rollback"), content=good).json() == {"rolledBack": 0}
    unknown = JSON.encode_publish_response(PublishResponse(FUTURE_WP, 1, 0, 1, 0))
    assert error(http.post(url(topic, "rollback"), content=unknown), 409)["state"] == "unknown"


def test_store_then_publish(http: httpx.Client, topic: str) -> None:
    wp = start_tx(http)["writePointer"]
    store = url(topic, "store")
    stored = http.post(store, content=JSON.encode_publish_request(PublishRequest(wp, [b"s1"])))
    assert stored.status_code == 200
    receipt = JSON.decode_publish_response(stored.content)  # the rows written: one
    assert receipt.write_pointer == wp and receipt.start_ts == receipt.end_ts > 0
    assert receipt.start_seq == receipt.end_seq
    body = AVRO.encode_publish_request(PublishRequest(wp, [b"s2", ALL_BYTES]))
    assert http.post(store, content=body, headers=AVRO_HEADERS).status_code == 200
    assert payloads(http, topic) == []  # stored, not yet published
    published = publish_json(http, topic, [], wp)
    assert published.status_code == 200
    assert JSON.decode_publish_response(published.content).write_pointer == wp
    assert committed(http, topic) == []  # published, not yet committed
    assert http.post(f"/v1/transactions/{wp}/commit").status_code == 200
    assert committed(http, topic) == [b"s1", b"s2", ALL_BYTES]
    assert payloads(http, topic) == [b"s1", b"s2", ALL_BYTES]


def test_store_refusals(http: httpx.Client, topic: str) -> None:
    store = url(topic, "store")
    error(http.post(store, json={"messages": ["x"]}), 400, "bad_request")  # no pointer
    wp = start_tx(http)["writePointer"]
    error(http.post(store, json={"transactionWritePointer": wp, "messages": []}), 400)
    body = {"transactionWritePointer": wp, "messages": ["x"]}
    error(http.post(url("no-such-topic", "store"), json=body), 404, "topic_not_found")
    assert http.post(store, json=body).status_code == 200
    assert publish_json(http, topic, [], wp).status_code == 200
    # Its payloads were published: no more storing for the pointer.
    error(http.post(store, json=body), 400, "invalid_transaction")
    assert http.post(f"/v1/transactions/{wp}/abort").status_code == 200
    assert error(http.post(store, json=body), 409, "transaction_conflict")["state"] == "aborted"


def test_abort_hides_and_invalid_is_skipped(http: httpx.Client, topic: str) -> None:
    aborted = start_tx(http)["writePointer"]
    publish_json(http, topic, [b"aborted"], aborted)
    invalidated = start_tx(http)["writePointer"]
    publish_json(http, topic, [b"invalidated"], invalidated)
    publish_json(http, topic, [b"plain"])
    assert committed(http, topic) == []  # held at the first in-progress entry
    http.post(f"/v1/transactions/{aborted}/abort")
    http.post(f"/v1/transactions/{invalidated}/invalidate")
    assert committed(http, topic) == [b"plain"]


def test_empty_transactional_publish_answers_a_noop_rollback(
    http: httpx.Client, topic: str
) -> None:
    wp = start_tx(http)["writePointer"]
    resp = publish_json(http, topic, [], wp)  # nothing stored for the pointer
    assert JSON.decode_publish_response(resp.content) == PublishResponse(wp, 0, 0, 0, 0)
    assert http.post(url(topic, "rollback"), content=resp.content).json() == {"rolledBack": 0}


# --- limits, other routes, metrics -----------------------------------------------------------
class SmallGateway:
    """A gateway with small HTTP limits (GatewayThread's HTTP config is the default)."""

    def __init__(self, path: Path, http: HttpConfig) -> None:
        self.config = ServeConfig(
            f"leveldb://{path}", GatewayConfig(host="127.0.0.1", port=0), http
        )
        self.services: Services | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()

        def ready(services: Services) -> None:
            self.services = services
            self._ready.set()

        await serve(self.config, stop=self._stop, on_ready=ready, handle_signals=False)

    def __enter__(self) -> str:
        self._thread.start()
        assert self._ready.wait(30)
        assert self.services is not None and self.services.http_server is not None
        host, port = self.services.http_server.address
        return f"http://{host}:{port}"

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


def test_body_limit_and_poll_cap(tmp_path: Path) -> None:
    config = HttpConfig(host="127.0.0.1", port=0, max_body_bytes=1024, max_poll=5)
    with SmallGateway(tmp_path / "store", config) as base, httpx.Client(base_url=base) as http:
        assert http.put(url("t")).status_code == 200
        fits = JSON.encode_publish_request(PublishRequest(None, [b"x" * 900]))
        assert http.post(url("t", "publish"), content=fits).status_code == 200
        big = JSON.encode_publish_request(PublishRequest(None, [b"x" * 2000]))
        error(http.post(url("t", "publish"), content=big), 413, "body_too_large")

        def chunks() -> Iterator[bytes]:  # no Content-Length: refused while reading
            yield big[:1000]
            yield big[1000:]

        error(http.post(url("t", "publish"), content=chunks()), 413, "body_too_large")
        for _ in range(3):
            http.post(url("t", "publish"), json={"messages": ["a", "b", "c"]})
        assert len(poll(http, "t", limit=1000)) == 5
        assert len(poll(http, "t")) == 5


def test_unknown_routes_and_methods(http: httpx.Client) -> None:
    error(http.get("/v2/nothing"), 404, "not_found")
    resp = http.patch("/v1/namespaces/default/topics/t")
    error(resp, 405, "method_not_allowed")
    assert set(resp.headers["allow"].split(", ")) == {"PUT", "GET", "HEAD", "DELETE"}
    error(http.get(url("t", "publish")), 405, "method_not_allowed")


def test_health_ready_openapi(gw: GatewayThread, http: httpx.Client) -> None:
    assert http.get("/healthz").json() == {"status": "ok"}
    assert http.get("/readyz").json() == {"status": "ready"}
    doc = http.get("/openapi.json").json()
    assert doc["openapi"].startswith("3.0")
    # Every route the app serves is described, with every method, but HTML pages and
    # their assets (the routes declared without a Doc).
    pages = {(r.path, r.method.lower()) for _, r in route_table() if r.doc is None}
    assert ("/docs", "get") in pages
    served = {
        (route.path, method.lower())
        for route in gw.services.http_server.app.routes  # type: ignore[union-attr]
        for method in route.methods - {"HEAD"}
    } - pages
    described = {
        (path, method)
        for path, item in doc["paths"].items()
        for method in item
        if method != "parameters"
    }
    assert served == described


def test_metrics(gw: GatewayThread, http: httpx.Client, topic: str) -> None:
    publish_json(http, topic, [b"m"])
    error(publish_json(http, "no-such-topic", [b"m"]), 404)
    text = generate_latest(gw.services.registry).decode()  # type: ignore[union-attr]
    assert 'tmsgate_http_requests_total{route="publish",status="200"}' in text
    assert 'tmsgate_http_requests_total{route="publish",status="404"}' in text
    assert 'tmsgate_http_request_seconds_count{route="publish"}' in text
    assert "tmsgate_transactions_open" in text


# --- Kafka interplay -----------------------------------------------------------------------------
def last_stable_offset(bootstrap: str, topic: str) -> int:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    try:
        tp = TopicPartition(topic, 0)
        return int(consumer.end_offsets([tp])[tp])
    finally:
        consumer.close()


def test_http_published_messages_read_by_kafka(
    gw: GatewayThread, http: httpx.Client, topic: str
) -> None:
    publish_avro(http, topic, [b"one", ALL_BYTES, b""])
    records = kafka_records(gw.bootstrap, topic, 3)
    assert [r.value for r in records] == [b"one", ALL_BYTES, b""]
    assert [r.offset for r in records] == [0, 1, 2]
    assert all(r.key is None and not r.headers for r in records)


def test_kafka_produced_records_polled_over_http(gw: GatewayThread, http: httpx.Client) -> None:
    topic = f"k-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(bootstrap_servers=gw.bootstrap)
    try:
        for value in (b"v1", ALL_BYTES, None):
            producer.send(topic, value, key=b"key", headers=[("h", b"x")]).get(10)
    finally:
        producer.close()
    assert payloads(http, topic) == [b"v1", ALL_BYTES, b""]  # a null value reads as empty
    assert [p for _, p in poll(http, topic, avro=True)] == [b"v1", ALL_BYTES, b""]


def test_kafka_transactional_records_under_an_http_transaction(
    gw: GatewayThread, http: httpx.Client
) -> None:
    topic = f"ktx-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(bootstrap_servers=gw.bootstrap)

    def send(value: bytes, wp: int | None = None) -> int:
        headers = [] if wp is None else [(TX_HEADER, struct.pack(">q", wp))]
        return producer.send(topic, value, headers=headers).get(10).offset

    try:
        send(b"plain")  # offset 0
        wp = start_tx(http)["writePointer"]
        assert send(b"tx1", wp) == 1 and send(b"tx2", wp) == 2
        send(b"after")  # offset 3, behind the open transaction
        # Not yet committed: read_committed consumers stop before it, as do transactional
        # polls; a plain HTTP poll sees everything.
        assert last_stable_offset(gw.bootstrap, topic) == 1
        assert committed(http, topic) == [b"plain"]
        assert payloads(http, topic) == [b"plain", b"tx1", b"tx2", b"after"]
        assert http.post(f"/v1/transactions/{wp}/commit").status_code == 200
        assert last_stable_offset(gw.bootstrap, topic) == 4
        records = kafka_records(gw.bootstrap, topic, 4, isolation_level="read_committed")
        assert [r.value for r in records] == [b"plain", b"tx1", b"tx2", b"after"]
        assert dict(records[1].headers)[TX_HEADER] == struct.pack(">q", wp)
        assert committed(http, topic) == [b"plain", b"tx1", b"tx2", b"after"]

        # Aborted, its HTTP-published part rolled back too: never seen by either reader.
        wp2 = start_tx(http)["writePointer"]
        send(b"gone1", wp2)
        rollback = publish_json(http, topic, [b"gone2"], wp2).content
        assert http.post(url(topic, "rollback"), content=rollback).json() == {"rolledBack": 1}
        assert http.post(f"/v1/transactions/{wp2}/abort").status_code == 200
        send(b"last")  # offset 6
        records = kafka_records(gw.bootstrap, topic, 7, isolation_level="read_committed")
        assert [r.value for r in records] == [b"plain", b"tx1", b"tx2", b"after", b"last"]
        assert committed(http, topic) == [b"plain", b"tx1", b"tx2", b"after", b"last"]
    finally:
        producer.close()


def test_topics_created_over_http_are_kafka_topics(gw: GatewayThread, http: httpx.Client) -> None:
    topic = f"h-{uuid.uuid4().hex[:8]}"
    assert http.put(url(topic), json={"ttl": "3600"}).status_code == 200
    consumer = KafkaConsumer(bootstrap_servers=gw.bootstrap)
    try:
        assert topic in consumer.topics()
    finally:
        consumer.close()
    publish_json(http, topic, [b"x"])
    assert [r.value for r in kafka_records(gw.bootstrap, topic, 1)] == [b"x"]


def test_json_answers_are_utf8_json(http: httpx.Client, topic: str) -> None:
    """Bytes 128-255 travel as their code points, UTF-8 encoded on the wire."""
    publish_avro(http, topic, [b"\xe9\xff"])
    resp = http.post(url(topic, "poll"), json={})
    assert json.loads(resp.content)[0]["payload"] == "\u00e9\u00ff"


def test_client_gone_mid_body(gw: GatewayThread, http: httpx.Client, topic: str) -> None:
    """A client that closes before its body is in: nothing stored, no 500, no log of a bug."""
    host, port = gw.http_url.removeprefix("http://").split(":")
    head = (
        f"POST {url(topic, 'publish')} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: 1000\r\n\r\n"
    )
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(head.encode() + b'{"messages": ["never')
    # The next request on another connection is served, after the server saw the close.
    deadline = time.monotonic() + 10
    text = ""
    while 'route="publish",status="499"' not in text:
        assert time.monotonic() < deadline, "the server never saw the client go"
        text = generate_latest(gw.services.registry).decode()  # type: ignore[union-attr]
        time.sleep(0.05)
    assert payloads(http, topic) == []
    assert 'route="publish",status="500"' not in text


def test_tmsgate_serve_http_listen(tmp_path: Path) -> None:
    """The operator's command: --http-listen serves the API; SIGTERM stops it cleanly."""
    proc = GatewayProcess(tmp_path / "store").start()  # passes --http-listen on a free port
    try:
        with httpx.Client(base_url=proc.http_url) as client:
            assert client.get("/healthz").status_code == 200
            assert client.put(url("cli")).status_code == 200
            assert client.post(url("cli", "publish"), json={"messages": ["x"]}).status_code == 200
            assert [m["payload"] for m in client.post(url("cli", "poll"), json={}).json()] == ["x"]
    finally:
        code, out = proc.terminate()
    assert code == 0, out
    assert f"HTTP API on {proc.http_url}" in out


def test_full_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk (a fake free-space figure, as in test_storage_full_disk): publishes get
    507, readiness 503, polls go on; both come back once space is free."""
    free = {"bytes": 10 << 30}
    monkeypatch.setattr(space, "free_bytes_of", lambda path: free["bytes"])
    with (
        gateway_thread(tmp_path, http=True, disk_reserve_bytes=1 << 20) as g,
        httpx.Client(base_url=g.http_url) as http,
    ):
        assert http.put(url("full")).status_code == 200
        assert publish_json(http, "full", [b"before"]).status_code == 200
        free["bytes"] = 0

        def until(status: int) -> httpx.Response:
            # The store looks at free space at a bounded rate: a few calls may pass.
            deadline = time.monotonic() + 10
            while (resp := publish_json(http, "full", [b"x"])).status_code != status:
                assert time.monotonic() < deadline, resp.text
                time.sleep(0.05)
            return resp

        body = error(until(507), 507, "disk_full")
        assert {"freeBytes", "needBytes"} <= set(body)
        ready = error(http.get("/readyz"), 503, "not_ready")
        assert "disk full" in ready["message"]
        assert payloads(http, "full")[0] == b"before"  # reads go on
        free["bytes"] = 10 << 30
        until(200)
        assert http.get("/readyz").status_code == 200


def test_large_bodies_decode_off_the_loop_and_message_count_is_bounded(
    http: httpx.Client, topic: str
) -> None:
    # 2 MiB of 1 KiB messages: decoded on the CPU thread, stored whole.
    big = [bytes([i % 256]) * 1024 for i in range(2000)]
    assert publish_avro(http, topic, big).status_code == 200
    assert len(payloads(http, topic, limit=5000)) == 2000
    # 2M empty messages in 2 MB: refused, saying the limit, nothing stored.
    resp = publish_avro(http, topic, [b""] * 2_000_000)
    assert "the limit is 1,000,000" in error(resp, 400, "bad_request")["message"]
    assert len(payloads(http, topic, limit=5000)) == 2000
