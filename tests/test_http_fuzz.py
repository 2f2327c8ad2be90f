"""Schemathesis against the live HTTP API, driven by the server's own /openapi.json.

Every operation gets a bounded number of generated requests, valid and invalid (JSON
bodies from the JSON Schemas, Avro bodies from a strategy of encoded and mangled
records). Checked: no 5xx, every status and content type is documented, every body
matches its schema, invalid input is refused with a 4xx, and undocumented methods get 405.
Afterwards the gateway still answers, and a message published before the fuzz is still
there.

Not checked: that every schema-valid request is accepted. Some refusals depend on more
than a JSON Schema can say (an encoded transaction must decode, a publish without a
write pointer needs messages, a ttl property must be a whole number), so a valid-looking
request may rightly get a 400.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from gateway_harness import GatewayThread, gateway_thread
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from tmsgate.gateway.http.app import openapi_document
from tmsgate.protocol.tms_http import AVRO, ConsumeRequest, PublishRequest, PublishResponse

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
]
SEED = 20261122
EXAMPLES = 60  # per operation and mode: ~80 s in all on two busy cores
CANARY_TOPIC = f"canary-{uuid.uuid4().hex}"
CANARY = b"published before the fuzz"

longs = st.integers(-(1 << 63), (1 << 63) - 1)
ints = st.integers(-(1 << 31), (1 << 31) - 1)
blobs = st.binary(max_size=64)
valid_avro = st.one_of(
    st.builds(PublishRequest, st.none() | longs, st.lists(blobs, max_size=5)).map(
        AVRO.encode_publish_request
    ),
    st.builds(PublishResponse, st.none() | longs, longs, ints, longs, ints).map(
        AVRO.encode_publish_response
    ),
    st.builds(
        ConsumeRequest,
        st.none() | longs | st.binary(min_size=20, max_size=20),
        st.booleans(),
        st.none() | ints,
        st.none() | blobs,
    ).map(AVRO.encode_consume_request),
)


@st.composite
def avro_bodies(draw: st.DrawFn) -> bytes:
    """Encoded records (valid for one operation or another), cut, extended or random."""
    body = draw(valid_avro | st.binary(max_size=64))
    how = draw(st.sampled_from(["as is", "cut", "extended"]))
    if how == "cut" and body:
        return body[: draw(st.integers(0, len(body) - 1))]
    if how == "extended":
        return body + draw(st.binary(min_size=1, max_size=8))
    return body


schemathesis.openapi.media_type("avro/binary", avro_bodies())


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayThread]:
    with gateway_thread(tmp_path_factory.mktemp("fuzz"), http=True) as g:
        with httpx.Client(base_url=g.http_url) as http:
            assert http.put(f"/v1/namespaces/default/topics/{CANARY_TOPIC}").status_code == 200
            publish = f"/v1/namespaces/default/topics/{CANARY_TOPIC}/publish"
            assert http.post(publish, json={"messages": [CANARY.decode()]}).status_code == 200
        yield g


@pytest.fixture(scope="module")
def api(gw: GatewayThread) -> Any:
    live = schemathesis.openapi.from_url(f"{gw.http_url}/openapi.json")
    assert live.raw_schema == DOCUMENT  # the server serves the document this file walks
    return live


# The operations, for test ids: the document is built without a server. Negative cases
# only where there is something to get wrong (parameters or a body). Operations on a topic
# or a transaction run twice: with drawn names (nearly all unknown: 400 or 404) and pinned
# to a topic and a transaction that exist, so that bodies reach the store.
DOCUMENT = json.loads(openapi_document())
CASES = [
    pytest.param(method.upper(), path, mode, pinned, id=f"{method.upper()} {path} {mode}{pin}")
    for path, item in DOCUMENT["paths"].items()
    for method, op in item.items()
    if method != "parameters"
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if mode is GenerationMode.POSITIVE or "parameters" in item or "requestBody" in op
    for pinned, pin in ((False, ""), (True, " pinned"))
    # Pinned, only a body is left to get wrong.
    if not pinned
    or (("{topic}" in path or "{wp}" in path) and (mode == "positive" or "requestBody" in op))
]
FUZZ_TOPIC = "fuzzed"


def test_query_parameters_are_described_and_so_fuzzed() -> None:
    """?payload= and ?create= are in the document, so schemathesis draws them (valid and
    not) for every operation that takes them."""
    topic = "/v1/namespaces/{namespace}/topics/{topic}"
    taken = {
        action: {p["name"] for p in DOCUMENT["paths"][f"{topic}/{action}"]["post"]["parameters"]}
        for action in ("publish", "store", "poll")
    }
    assert taken["publish"] >= {"payload", "create"} and taken["store"] >= {"payload", "create"}
    assert "payload" in taken["poll"] and "create" not in taken["poll"]


def pinned_parameters(gw: GatewayThread, path: str) -> dict[str, Any]:
    """An existing topic (created again if a fuzzed DELETE took it) and a transaction in
    progress (a fuzzed commit or abort ends it)."""
    with httpx.Client(base_url=gw.http_url) as http:
        if "{topic}" in path:
            created = http.put(f"/v1/namespaces/default/topics/{FUZZ_TOPIC}")
            assert created.status_code in (200, 409)
            return {"namespace": "default", "topic": FUZZ_TOPIC}
        started = http.post("/v1/transactions", json={"timeoutSeconds": 600})
        return {"wp": started.json()["writePointer"]}


@pytest.mark.parametrize(("method", "path", "mode", "pinned"), CASES)
def test_operation(
    gw: GatewayThread, api: Any, method: str, path: str, mode: GenerationMode, pinned: bool
) -> None:
    operation = api[path][method]
    fixed = pinned_parameters(gw, path) if pinned else None

    @given(case=operation.as_strategy(generation_mode=mode, path_parameters=fixed))
    @seed(SEED)  # the same requests every run: a failure reproduces
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        case.call_and_validate(checks=CHECKS, timeout=30)

    run()


def test_still_serving_after_the_fuzz(gw: GatewayThread) -> None:
    with httpx.Client(base_url=gw.http_url) as http:
        assert http.get("/healthz").status_code == 200
        assert http.get("/readyz").status_code == 200
        poll = f"/v1/namespaces/default/topics/{CANARY_TOPIC}/poll"
        resp = http.post(poll, json={})
        assert resp.status_code == 200
        assert [m["payload"].encode("latin-1") for m in resp.json()] == [CANARY]
