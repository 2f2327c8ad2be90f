"""Bulk reads and writes (record columns), offsets, keyed transactions and commits with a
manifest, over a live gateway on LevelDB with httpx; Kafka clients on the same store."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest
from gateway_harness import GatewayThread, gateway_thread
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from tmsgate.pipelines.spark.gateway import find_http_url
from tmsgate.protocol import TX_HEADER
from tmsgate.protocol.columns import MEDIA_TYPE, RecordColumns, decode_columns, encode_columns

TX = "/v1/transactions"


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayThread]:
    with gateway_thread(tmp_path_factory.mktemp("records"), http=True) as g:
        yield g


@pytest.fixture(scope="module")
def http(gw: GatewayThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gw.http_url, timeout=30) as client:
        yield client


@pytest.fixture
def topic(http: httpx.Client) -> str:
    name = f"r-{uuid.uuid4().hex[:10]}"
    assert http.put(f"/v1/namespaces/default/topics/{name}").status_code == 200
    return name


def url(topic: str, action: str) -> str:
    return f"/v1/namespaces/default/topics/{topic}/{action}"


def read(http: httpx.Client, topic: str, **query: object) -> RecordColumns:
    resp = http.post(url(topic, "read"), json=query)
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"] == MEDIA_TYPE
    return decode_columns(resp.content)


def columns(values: list[bytes | None], key: bytes | None = None, ts: int = -1) -> bytes:
    n = len(values)
    return encode_columns(
        RecordColumns(
            offsets=[0] * n,
            timestamps=[ts] * n,
            write_pointers=[0] * n,
            keys=[key] * n,
            values=values,
            headers=[[("h", b"v"), ("n", None)]] * n,
        )
    )


def store(http: httpx.Client, topic: str, wp: int, body: bytes) -> dict[str, int]:
    resp = http.post(
        url(topic, "store"),
        content=body,
        headers={"content-type": MEDIA_TYPE, "x-transaction-write-pointer": str(wp)},
    )
    assert resp.status_code == 200, resp.text
    return resp.json()


def start(http: httpx.Client, **body: object) -> dict[str, object]:
    resp = http.post(TX, json=body)
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_read_serves_kafka_columns_and_tms_ids(
    gw: GatewayThread, http: httpx.Client, topic: str
) -> None:
    producer = KafkaProducer(bootstrap_servers=gw.bootstrap)
    producer.send(topic, b"v0", key=b"k0", headers=[("a", b"1")], timestamp_ms=1_000).get(10)
    producer.send(topic, None, key=b"gone", timestamp_ms=2_000).get(10)
    producer.close()
    http.post(url(topic, "publish"), json={"messages": ["from-http"]})
    cols = read(http, topic, offset=0)
    assert cols.offsets == [0, 1, 2] and cols.next_offset == 3
    assert cols.keys == [b"k0", b"gone", None]
    assert cols.values == [b"v0", None, b"from-http"]
    assert cols.headers[0] == [("a", b"1")] and cols.headers[2] == []
    assert cols.timestamps[:2] == [1_000, 2_000] and cols.timestamps[2] > 2_000
    assert cols.write_pointers == [0, 0, 0] and not cols.log_append_time
    polled = http.post(url(topic, "poll"), json={}).json()
    assert [m["id"].encode("latin-1") for m in polled] == cols.ids
    part = read(http, topic, offset=1, endOffset=2)
    assert part.offsets == [1] and part.next_offset == 2
    assert read(http, topic, offset=3).offsets == []


def test_read_refuses_bad_queries(http: httpx.Client, topic: str) -> None:
    http.post(url(topic, "publish"), json={"messages": ["a"]})
    resp = http.post(url(topic, "read"), json={"offset": 7})
    assert resp.status_code == 416
    assert resp.json() | {"message": ""} == {
        "error": "offset_out_of_range",
        "message": "",
        "earliest": 0,
        "latest": 1,
    }
    for body, words in (
        ({}, "offset is required"),
        ({"offset": -1}, "offset: expected an integer"),
        ({"offset": 0, "isolation": "dirty"}, "isolation"),
        ({"offset": 0, "maxRecords": 0}, "maxRecords"),
        ({"offset": 0, "limit": 5}, "unknown field 'limit'"),
    ):
        resp = http.post(url(topic, "read"), json=body)
        assert resp.status_code == 400 and words in resp.json()["message"], resp.text
    assert http.post(url("nope", "read"), json={"offset": 0}).status_code == 404


def test_offsets_and_time_lookup(gw: GatewayThread, http: httpx.Client, topic: str) -> None:
    producer = KafkaProducer(bootstrap_servers=gw.bootstrap)
    for i, ts in enumerate((1_000, 2_000, 3_000)):
        producer.send(topic, f"v{i}".encode(), timestamp_ms=ts).get(10)
    producer.close()
    doc = http.get(url(topic, "offsets"), params={"timestamp": 1_500}).json()
    assert doc == {"earliest": 0, "latest": 3, "stable": 3, "forTimestamp": 1}
    assert (
        http.get(url(topic, "offsets"), params={"timestamp": 9_999_999_999_999}).json()[
            "forTimestamp"
        ]
        is None
    )
    assert "forTimestamp" not in http.get(url(topic, "offsets")).json()
    assert http.get(url(topic, "offsets"), params={"timestamp": "soon"}).status_code == 400


def test_read_committed_stops_at_an_open_transaction(
    gw: GatewayThread, http: httpx.Client, topic: str
) -> None:
    wp = start(http)["writePointer"]
    producer = KafkaProducer(bootstrap_servers=gw.bootstrap)
    producer.send(topic, b"before").get(10)
    producer.send(topic, b"in-tx", headers=[(TX_HEADER, int(wp).to_bytes(8, "big"))]).get(10)
    producer.send(topic, b"after").get(10)
    producer.close()
    assert http.get(url(topic, "offsets")).json() | {"earliest": 0} == {
        "earliest": 0,
        "latest": 3,
        "stable": 1,
    }
    committed = read(http, topic, offset=0, isolation="read_committed")
    assert committed.values == [b"before"] and committed.next_offset == 1
    dirty = read(http, topic, offset=0)
    assert dirty.values == [b"before", b"in-tx", b"after"]
    assert dirty.write_pointers == [0, wp, 0]
    assert http.post(f"{TX}/{wp}/commit").status_code == 200
    assert read(http, topic, offset=0, isolation="read_committed").values == dirty.values


def test_keyed_transaction_answers_the_same_one_then_its_final_state(
    http: httpx.Client,
) -> None:
    key = f"spark/{uuid.uuid4()}/0"
    first = start(http, key=key, timeoutSeconds=60)
    again = start(http, key=key)
    assert first["state"] == again["state"] == "in_progress" and first["key"] == key
    assert again["writePointer"] == first["writePointer"]
    assert first["writePointer"] not in again["inProgress"]  # its own: not in its snapshot
    wp = first["writePointer"]
    assert http.post(f"{TX}/{wp}/commit").status_code == 200
    assert start(http, key=key) == {"writePointer": wp, "key": key, "state": "committed"}
    other = f"spark/{uuid.uuid4()}/0"
    aborted = start(http, key=other)["writePointer"]
    assert http.post(f"{TX}/{aborted}/abort").status_code == 200
    fresh = start(http, key=other)
    assert fresh["state"] == "in_progress" and fresh["writePointer"] != aborted
    for bad in ("", "x" * 256, "tab\there", 5):
        resp = http.post(TX, json={"key": bad})
        assert resp.status_code == 400 and "key" in resp.json()["message"], resp.text


def test_commit_with_manifest_publishes_only_the_listed_stores(
    gw: GatewayThread, http: httpx.Client, topic: str
) -> None:
    other = f"r-{uuid.uuid4().hex[:10]}"
    http.put(f"/v1/namespaces/default/topics/{other}")
    wp = start(http)["writePointer"]
    kept = store(http, topic, wp, columns([b"a1", b"a2"], key=b"k", ts=5_000))
    store(http, topic, wp, columns([b"lost-attempt"]))  # a failed task's rows
    kept2 = store(http, topic, wp, columns([b"a3"]))
    on_other = store(http, other, wp, columns([None]))
    assert kept["count"] == 2 and kept["transactionWritePointer"] == wp
    assert read(http, topic, offset=0).values == []  # stored: nothing visible yet
    manifest = {
        "publish": [
            {"topic": topic, "stored": [kept, kept2]},
            {"namespace": "default", "topic": other, "stored": [on_other]},
        ]
    }
    resp = http.post(f"{TX}/{wp}/commit", json=manifest)
    assert resp.json() == {"writePointer": wp, "state": "committed"}, resp.text
    cols = read(http, topic, offset=0, isolation="read_committed")
    assert cols.values == [b"a1", b"a2", b"a3"] and cols.offsets == [0, 1, 2]
    assert cols.keys == [b"k", b"k", None] and cols.timestamps[:2] == [5_000, 5_000]
    assert cols.headers[0] == [("h", b"v"), ("n", None)]
    assert cols.write_pointers == [wp] * 3
    assert read(http, other, offset=0).values == [None]
    again = http.post(f"{TX}/{wp}/commit", json=manifest)
    assert again.status_code == 409 and again.json()["state"] == "committed"
    consumer = KafkaConsumer(bootstrap_servers=gw.bootstrap, isolation_level="read_committed")
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = consumer.poll(timeout_ms=5000, max_records=10).get(tp, [])
    consumer.close()
    assert [r.value for r in got] == [b"a1", b"a2", b"a3"]


def test_manifest_and_store_refusals(http: httpx.Client, topic: str) -> None:
    wp = start(http)["writePointer"]
    good = store(http, topic, wp, columns([b"x"]))
    for body, words in (
        ({"publish": "all"}, "publish: expected a list"),
        ({"publish": [{"topic": topic, "stored": [{"startTimestamp": 1}]}]}, "startSequenceId"),
        ({"publish": [{"topic": topic, "stored": [good | {"endSequenceId": 70_000}]}]}, "0-65535"),
        ({"publish": [{"topic": topic, "stored": [good, good]}]}, "overlap"),
        (
            {
                "publish": [
                    {"topic": topic, "stored": [good | {"endTimestamp": good["endTimestamp"] + 1}]}
                ]
            },
            "messages; 1 are stored",
        ),
        ({"everything": True}, "unknown field"),
    ):
        resp = http.post(f"{TX}/{wp}/commit", json=body)
        assert resp.status_code == 400 and words in resp.json()["message"], (body, resp.text)
    resp = http.post(
        url(topic, "store"),
        content=b"TMSR\x01",
        headers={"content-type": MEDIA_TYPE, "x-transaction-write-pointer": str(wp)},
    )
    assert resp.status_code == 400 and "record columns" in resp.json()["message"]
    resp = http.post(
        url(topic, "store"), content=columns([b"x"]), headers={"content-type": MEDIA_TYPE}
    )
    assert resp.status_code == 400 and "x-transaction-write-pointer" in resp.json()["message"]
    # Still committable after every refusal: nothing was decided.
    ok = http.post(f"{TX}/{wp}/commit", json={"publish": [{"topic": topic, "stored": [good]}]})
    assert ok.status_code == 200, ok.text
    late = http.post(
        url(topic, "store"),
        content=columns([b"late"]),
        headers={"content-type": MEDIA_TYPE, "x-transaction-write-pointer": str(wp)},
    )
    assert late.status_code == 409 and late.json()["state"] == "committed"


def test_avro_store_answers_a_receipt(http: httpx.Client, topic: str) -> None:
    wp = start(http)["writePointer"]
    resp = http.post(url(topic, "store"), json={"transactionWritePointer": wp, "messages": ["p"]})
    assert resp.status_code == 200
    receipt = resp.json()
    assert receipt["transactionWritePointer"] == {"long": wp}
    assert receipt["startTimestamp"] == receipt["endTimestamp"] > 0
    commit = http.post(
        f"{TX}/{wp}/commit", json={"publish": [{"topic": topic, "stored": [receipt]}]}
    )
    assert commit.status_code == 200, commit.text
    assert read(http, topic, offset=0).values == [b"p"]


def test_broker_tells_kafka_clients_where_the_http_api_is(gw: GatewayThread) -> None:
    """The broker config tmsgate.http.url, as the Spark source looks it up from a bootstrap
    (DescribeConfigs of the broker, kafka-python's admin client)."""
    assert find_http_url(gw.bootstrap) == gw.http_url
