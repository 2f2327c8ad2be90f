"""The gateway on the wire, request by request, with exact error codes (raw sockets)."""

from __future__ import annotations

import os
import struct
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import kafka_requests as kr
import pytest
from aiokafka.record.default_records import DefaultRecordBatch
from gateway_harness import GatewayThread, RawClient, gateway_thread
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from tmsgate.protocol import TX_HEADER, ApiKey, ErrorCode

PRODUCE_V, FETCH_V, LIST_V, META_V = 9, 12, 7, 12


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with gateway_thread(tmp_path_factory.mktemp("wire")) as g:
        yield g


@pytest.fixture
def client(gw: GatewayThread) -> Any:
    c = RawClient(gw.address)
    yield c
    c.close()


def produce(client: RawClient, topic: str, records: bytes, acks: int = -1) -> Any:
    return kr.partition(client.request(kr.produce(topic, records, acks), PRODUCE_V))


def fetch(client: RawClient, topic: str, offset: int, **kw: Any) -> Any:
    return kr.partition(client.request(kr.fetch(topic, offset, **kw), FETCH_V))


def end_offset(client: RawClient, topic: str, isolation: int = 0) -> int:
    return kr.partition(client.request(kr.list_offsets(topic, -1, isolation), LIST_V)).offset


def test_api_versions_lists_exactly_the_routes(gw: GatewayThread, client: RawClient) -> None:
    resp = client.request(
        ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3
    )
    assert resp.error_code == 0
    got = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert got == {key: (lo, hi) for key, lo, hi in gw.server.routes.versions()}
    assert got[ApiKey.PRODUCE] == (3, 13) and got[ApiKey.FETCH] == (4, 17)


def test_api_versions_above_supported_gets_kip511_v0_reply(client: RawClient) -> None:
    # ApiVersions v9 (header v2: client id then empty tagged fields; body irrelevant)
    body = struct.pack(">hhih", 18, 9, 77, 1) + b"x" + b"\x00" + b"\x02a\x02b\x00"
    client.send_raw(struct.pack(">i", len(body)) + body)
    resp = ApiVersionsResponse.decode(client.recv_frame(), version=0, header=True)
    assert resp.header.correlation_id == 77
    assert resp.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert any(k.api_key == ApiKey.API_VERSIONS and k.max_version == 4 for k in resp.api_keys)
    # and the connection keeps working for the retry
    assert client.request(ApiVersionsRequest(), 0).error_code == 0


def test_pipelined_requests_are_answered_in_order(client: RawClient) -> None:
    sent = []
    for i in range(30):
        if i % 3 == 0:
            req, v = kr.produce("pipelined", kr.batch(2)), PRODUCE_V
        elif i % 3 == 1:
            req, v = kr.metadata("pipelined"), META_V
        else:
            req, v = ApiVersionsRequest(), 2
        sent.append((client.send(req, v), req.API_KEY, v))
    offsets = []
    for cid, key, v in sent:
        resp = client.receive(key, v)
        assert resp.header.correlation_id == cid
        if key == ApiKey.PRODUCE:
            offsets.append(kr.partition(resp).base_offset)
    assert offsets == list(range(0, 20, 2))


def test_produce_fetch_round_trip_keeps_key_headers_nulls_timestamps(client: RawClient) -> None:
    records = [(b"k1", b"v1", [("h", b"x"), ("n", None)]), (None, None, []), (b"", b"", [])]
    p = produce(client, "roundtrip", kr.batch(records, timestamp=1234))
    assert (p.error_code, p.base_offset, p.log_append_time_ms) == (0, 0, -1)
    f = fetch(client, "roundtrip", 0)
    assert (f.error_code, f.high_watermark, f.log_start_offset) == (0, 3, 0)
    [(next_offset, recs)] = kr.records_of(f.records)
    assert next_offset == 3
    got = [(r.offset, r.key, r.value, list(r.headers), r.timestamp) for r in recs]
    assert got == [
        (0, b"k1", b"v1", [("h", b"x"), ("n", None)], 1234),
        (1, None, None, [], 1235),
        (2, b"", b"", [], 1236),
    ]


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_every_codec_is_accepted(client: RawClient, codec: int) -> None:
    topic = f"codec-{codec}"
    p = produce(client, topic, kr.batch([(b"k", b"x" * 1000, [])] * 5, codec=codec))
    assert p.error_code == 0
    [(_, recs)] = kr.records_of(fetch(client, topic, 0).records)
    assert [r.value for r in recs] == [b"x" * 1000] * 5


def test_corrupt_crc_is_refused_and_nothing_is_stored(client: RawClient) -> None:
    produce(client, "crc", kr.batch(1))
    raw = bytearray(kr.batch(3))
    raw[-1] ^= 0xFF
    p = produce(client, "crc", bytes(raw))
    assert p.error_code == ErrorCode.CORRUPT_MESSAGE and "CRC" in p.error_message
    assert end_offset(client, "crc") == 1


def test_message_too_large(client: RawClient) -> None:
    resp = client.request(kr.create_topic("small", configs={"max.message.bytes": "500"}), 5)
    assert resp.topics[0].error_code == 0
    p = produce(client, "small", kr.batch([(None, b"x" * 1000, [])]))
    assert p.error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert produce(client, "small", kr.batch([(None, b"x" * 10, [])])).error_code == 0


def test_partition_other_than_zero_is_unknown(client: RawClient) -> None:
    resp = client.request(kr.produce("onepart", kr.batch(1), partition=1), PRODUCE_V)
    assert kr.partition(resp).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    f = kr.fetch("onepart", 0)
    f.topics[0].partitions[0].partition = 1
    assert kr.partition(client.request(f, FETCH_V)).error_code == 3
    lo = kr.list_offsets("onepart", -1)
    lo.topics[0].partitions[0].partition_index = 1
    assert kr.partition(client.request(lo, LIST_V)).error_code == 3


def test_idempotent_sequences(client: RawClient) -> None:
    pid_resp = client.request(kr.init_producer_id(), 4)
    pid = pid_resp.producer_id
    assert pid_resp.error_code == 0 and pid >= 0

    def send(seq: int, n: int = 3, epoch: int = 0, producer: int = pid) -> Any:
        return produce(
            client, "idem", kr.batch(n, producer_id=producer, epoch=epoch, base_sequence=seq)
        )

    first = send(0)
    assert (first.error_code, first.base_offset) == (0, 0)
    assert send(3).base_offset == 3
    again = send(0)  # a retry of an earlier batch: its original offsets, not a new write
    assert (again.error_code, again.base_offset) == (0, 0)
    assert send(3).base_offset == 3
    gap = send(9)
    assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert send(6).base_offset == 6
    assert send(9, epoch=-5).error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert send(4, producer=pid + 999).error_code == ErrorCode.UNKNOWN_PRODUCER_ID
    assert send(5, epoch=1).error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert send(0, epoch=1).base_offset == 9  # a bumped epoch starts over at 0
    assert end_offset(client, "idem") == 12


def test_acks_zero_sends_no_response_but_writes(client: RawClient) -> None:
    client.send(kr.produce("acks0", kr.batch(4), acks=0), PRODUCE_V)
    resp = client.request(ApiVersionsRequest(), 1)  # the next answer is this one's
    assert resp.error_code == 0
    deadline = time.monotonic() + 5
    while end_offset(client, "acks0") < 4:
        assert time.monotonic() < deadline


def test_acks_zero_failure_closes_connection(client: RawClient) -> None:
    raw = bytearray(kr.batch(3))
    raw[-1] ^= 0xFF
    client.send(kr.produce("acks0-bad", bytes(raw), acks=0), PRODUCE_V)
    assert client.closed_by_peer()


def test_invalid_acks(client: RawClient) -> None:
    assert (
        produce(client, "acks", kr.batch(1), acks=2).error_code == ErrorCode.INVALID_REQUIRED_ACKS
    )


def test_metadata_topic_ids_are_stable_per_generation(client: RawClient) -> None:
    def topic_id() -> Any:
        t = client.request(kr.metadata("gen"), META_V).topics[0]
        assert t.error_code == 0 and [p.partition_index for p in t.partitions] == [0]
        assert t.partitions[0].leader_id == 0
        return t.topic_id

    first = topic_id()
    assert topic_id() == first
    from kafka.protocol.admin import DeleteTopicsRequest

    resp = client.request(DeleteTopicsRequest(topic_names=["gen"], timeout_ms=1000), 4)
    assert resp.responses[0].error_code == 0
    assert topic_id() != first  # auto-created again: a new generation, a new id


def test_metadata_reports_listen_address(gw: GatewayThread, client: RawClient) -> None:
    resp = client.request(kr.metadata(), META_V)
    assert [(b.node_id, b.host, b.port) for b in resp.brokers] == [(0, *gw.address)]
    assert resp.controller_id == 0


def test_fetch_out_of_range_and_empty(client: RawClient) -> None:
    produce(client, "range", kr.batch(2))
    assert fetch(client, "range", 5).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    empty = fetch(client, "range", 2)
    assert (empty.error_code, empty.records, empty.high_watermark) == (0, b"", 2)
    assert fetch(client, "nosuch", 0).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_fetch_long_poll_is_woken_by_a_publish(gw: GatewayThread) -> None:
    a, b = RawClient(gw.address), RawClient(gw.address)
    produce(a, "longpoll", kr.batch(1))
    threading.Timer(0.3, lambda: produce(b, "longpoll", kr.batch(2))).start()
    started = time.monotonic()
    f = fetch(a, "longpoll", 1, max_wait_ms=10_000)
    took = time.monotonic() - started
    assert 0.25 < took < 3
    assert sum(len(r) for _, r in kr.records_of(f.records)) == 2
    started = time.monotonic()
    f = fetch(a, "longpoll", 3, max_wait_ms=400)
    assert f.records == b"" and 0.35 < time.monotonic() - started < 3
    a.close()
    b.close()


def test_fetch_max_bytes_limits_but_returns_at_least_one(client: RawClient) -> None:
    for _ in range(5):
        produce(client, "maxbytes", kr.batch([(None, b"y" * 5000, [])]))
    f = fetch(client, "maxbytes", 0, max_bytes=100)
    recs = [r for _, rs in kr.records_of(f.records) for r in rs]
    assert len(recs) == 1
    f = fetch(client, "maxbytes", 0, max_bytes=12_000)
    recs = [r for _, rs in kr.records_of(f.records) for r in rs]
    assert 1 < len(recs) < 5


def test_list_offsets_earliest_latest_by_time(client: RawClient) -> None:
    now = int(time.time() * 1000)
    produce(client, "times", kr.batch(3, timestamp=now))
    time.sleep(0.05)
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    produce(client, "times", kr.batch(2, timestamp=int(time.time() * 1000)))

    def lo(ts: int) -> Any:
        return kr.partition(client.request(kr.list_offsets("times", ts), LIST_V))

    assert (lo(-2).offset, lo(-1).offset) == (0, 5)
    found = lo(middle)
    assert found.offset == 3 and found.timestamp >= middle
    assert (lo(middle + 3_600_000).offset, lo(middle + 3_600_000).timestamp) == (-1, -1)
    assert (lo(0).offset, lo(0).timestamp) == (0, now)
    assert lo(-3).offset == 4  # max timestamp: the newest message


def test_list_offsets_by_time_uses_record_timestamps(client: RawClient) -> None:
    """Back-dated records (CreateTime): found by their own timestamps, as in Kafka."""
    week_ago = int(time.time() * 1000) - 7 * 86_400_000
    produce(client, "backdated", kr.batch(4, timestamp=week_ago))  # week_ago + 0..3

    def lo(ts: int) -> tuple[int, int]:
        p = kr.partition(client.request(kr.list_offsets("backdated", ts), LIST_V))
        return p.offset, p.timestamp

    assert lo(week_ago - 1) == (0, week_ago)
    assert lo(week_ago + 2) == (2, week_ago + 2)
    assert lo(week_ago + 4) == (-1, -1)


def test_create_topic_validation(client: RawClient) -> None:
    def create(**kw: Any) -> Any:
        return client.request(kr.create_topic(**kw), 5).topics[0]

    for count in (0, -2, 100_000):
        bad = create(name="parts", partitions=count)
        assert bad.error_code == ErrorCode.INVALID_PARTITIONS and "between 1" in bad.error_message
    assert create(name="repl", replication=3).error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    for bad in ({"no.such.config": "1"}, {"cleanup.policy": "foo"}, {"segment.bytes": "100"}):
        assert create(name="cfg", configs=bad).error_code == ErrorCode.INVALID_CONFIG, bad
    assert create(name="bad/name").error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    # Kafka refuses these too (they name directories), and names over 249 characters
    for name in (".", "..", "x" * 250):
        assert create(name=name).error_code == ErrorCode.INVALID_TOPIC_EXCEPTION, name
        md = client.request(kr.metadata(name), 12)  # auto-creation refuses them as well
        assert md.topics[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION, name
        part = kr.partition(client.request(kr.produce(name, kr.batch(1)), 9))
        assert part.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION, name
    assert create(name="...").error_code == ErrorCode.NONE  # only those two are reserved
    null = create(name="nullcfg", configs={"retention.ms": None})
    assert null.error_code == ErrorCode.INVALID_CONFIG and "Null value" in null.error_message
    ok = create(name="made", partitions=-1, configs={"retention.ms": "1500"})
    assert ok.error_code == 0 and ok.num_partitions == 1
    assert {c.name: c.value for c in ok.configs}["retention.ms"] == "1500"
    assert create(name="made").error_code == ErrorCode.TOPIC_ALREADY_EXISTS


def test_retention_moves_log_start_and_fetch_below_is_out_of_range(client: RawClient) -> None:
    client.request(kr.create_topic("short", configs={"retention.ms": "1000"}), 5)
    produce(client, "short", kr.batch(3))
    time.sleep(2.2)
    produce(client, "short", kr.batch(1))
    lo = kr.partition(client.request(kr.list_offsets("short", -2), LIST_V))
    assert lo.offset == 3
    assert fetch(client, "short", 0).error_code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_transactional_header_publishes_under_the_write_pointer(
    gw: GatewayThread, client: RawClient
) -> None:
    store = gw.broker.store
    tx = store.transactions.start(timeout_s=30)
    wp = struct.pack(">q", tx.write_pointer)
    produce(client, "txh", kr.batch([(b"plain", b"0", [])]))
    p = produce(
        client,
        "txh",
        kr.batch([(b"a", b"1", [(TX_HEADER, wp)]), (b"b", b"2", [("x", b"y"), (TX_HEADER, wp)])]),
    )
    assert p.error_code == 0
    produce(client, "txh", kr.batch([(b"after", b"3", [])]))
    # read_uncommitted sees everything, the transactional records with the header back
    recs = [r for _, rs in kr.records_of(fetch(client, "txh", 0).records) for r in rs]
    assert [list(r.headers) for r in recs] == [
        [],
        [(TX_HEADER, wp)],
        [("x", b"y"), (TX_HEADER, wp)],
        [],
    ]
    # read_committed stops at the open transaction
    assert end_offset(client, "txh", isolation=1) == 1
    committed = fetch(client, "txh", 0, isolation_level=1)
    assert committed.last_stable_offset == 1
    assert [r.value for _, rs in kr.records_of(committed.records) for r in rs] == [b"0"]
    store.transactions.commit(tx)
    assert end_offset(client, "txh", isolation=1) == 4
    values = [
        r.value
        for _, rs in kr.records_of(fetch(client, "txh", 1, isolation_level=1).records)
        for r in rs
    ]
    assert values == [b"1", b"2", b"3"]


def test_transactional_header_refused_when_not_in_progress(client: RawClient) -> None:
    wp = struct.pack(">q", 12345)
    p = produce(client, "txbad", kr.batch([(None, b"1", [(TX_HEADER, wp)])]))
    assert p.error_code == ErrorCode.INVALID_TXN_STATE and "12345" in p.error_message
    bad = produce(client, "txbad", kr.batch([(None, b"1", [(TX_HEADER, b"short")])]))
    assert bad.error_code == ErrorCode.INVALID_RECORD


def test_read_committed_skips_rolled_back_offsets(gw: GatewayThread, client: RawClient) -> None:
    """A fetch over rolled-back rows returns a batch that moves the consumer past them,
    even when no visible record follows (no spinning on empty fetches)."""
    store = gw.broker.store
    produce(client, "rolled", kr.batch(1))
    tid = gw.broker.topics.topic_id("rolled")
    tx = store.transactions.start(timeout_s=30)
    r = store.publish(tid, [b"gone1", b"gone2"], tx=tx)
    store.rollback(tid, r.rollback)
    store.transactions.abort(tx)
    f = fetch(client, "rolled", 1, isolation_level=1)
    skip = DefaultRecordBatch(f.records)  # one control batch, skipped by every client
    assert (skip.is_control_batch, skip.base_offset, skip.next_offset) == (True, 1, 3)
    produce(client, "rolled", kr.batch(1))
    [(next_offset, recs)] = kr.records_of(fetch(client, "rolled", 1, isolation_level=1).records)
    assert next_offset == 4 and [r.offset for r in recs] == [3]


def test_malformed_frame_closes_only_that_connection(gw: GatewayThread) -> None:
    good, bad = RawClient(gw.address), RawClient(gw.address)
    produce(good, "survives", kr.batch(2))
    body = struct.pack(">hhih", 0, 9, 5, 1) + b"x" + b"\x00" + b"\xff" * 40
    bad.send_raw(struct.pack(">i", len(body)) + body)
    assert bad.closed_by_peer()
    assert produce(good, "survives", kr.batch(1)).base_offset == 2
    assert end_offset(good, "survives") == 3
    good.close()


def test_unknown_api_key_closes_connection(client: RawClient) -> None:
    body = struct.pack(">hhih", 999, 0, 1, -1)
    client.send_raw(struct.pack(">i", len(body)) + body)
    assert client.closed_by_peer()


def test_hundreds_of_connections(gw: GatewayThread) -> None:
    clients = [RawClient(gw.address) for _ in range(300)]
    for c in clients:
        c.send(ApiVersionsRequest(), 2)
    for c in clients:
        assert c.receive(ApiKey.API_VERSIONS, 2).error_code == 0
        c.close()


def test_oversized_request_refused_without_reading_it(tmp_path: Path) -> None:
    with gateway_thread(tmp_path, max_request_bytes=1 << 20) as g:
        c, other = RawClient(g.address), RawClient(g.address)
        c.send_raw(struct.pack(">i", 50 << 20) + b"\x00" * 1000)
        assert c.closed_by_peer()
        assert other.request(ApiVersionsRequest(), 1).error_code == 0


def test_auto_create_off(tmp_path: Path) -> None:
    with gateway_thread(tmp_path, auto_create_topics=False) as g:
        c = RawClient(g.address)
        t = c.request(kr.metadata("nope"), META_V).topics[0]
        assert t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert produce(c, "nope", kr.batch(1)).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert c.request(kr.create_topic("nope"), 5).topics[0].error_code == 0
        assert produce(c, "nope", kr.batch(1)).error_code == 0


def test_idle_connections_time_out(tmp_path: Path) -> None:
    with gateway_thread(tmp_path, idle_timeout_s=0.3) as g:
        c = RawClient(g.address)
        assert c.request(ApiVersionsRequest(), 1).error_code == 0
        started = time.monotonic()
        assert c.closed_by_peer(timeout=5)
        assert 0.2 < time.monotonic() - started < 3


def test_log_append_time_topic(client: RawClient) -> None:
    client.request(kr.create_topic("lat", configs={"message.timestamp.type": "LogAppendTime"}), 5)
    before = int(time.time() * 1000)
    p = produce(client, "lat", kr.batch(2, timestamp=1000))
    assert p.log_append_time_ms >= before - 5
    [(_, recs)] = kr.records_of(fetch(client, "lat", 0).records)
    assert [r.timestamp for r in recs] == [p.log_append_time_ms] * 2
    assert all(r.timestamp_type == 1 for r in recs)


@pytest.mark.parametrize("fetch_version", [13, 16, 17])
def test_topic_id_versions(client: RawClient, fetch_version: int) -> None:
    import uuid

    topic = f"by-id-{fetch_version}"
    tid = client.request(kr.metadata(topic), 13).topics[0].topic_id
    req = kr.produce(topic, kr.batch(3))
    req.topic_data[0].topic_id = tid
    p = client.request(req, 13)
    assert p.responses[0].topic_id == tid and kr.partition(p).base_offset == 0
    f = kr.fetch(topic, 1)
    f.topics[0].topic_id = tid
    resp = client.request(f, fetch_version)
    assert resp.responses[0].topic_id == tid
    offsets = [r.offset for _, rs in kr.records_of(kr.partition(resp).records) for r in rs]
    # Like Kafka, a fetch may return the whole batch holding the fetch offset.
    assert offsets[-2:] == [1, 2] and offsets[0] <= 1
    f.topics[0].topic_id = uuid.uuid4()
    missing = kr.partition(client.request(f, fetch_version))
    assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_ID
    req.topic_data[0].topic_id = uuid.uuid4()
    assert kr.partition(client.request(req, 13)).error_code == ErrorCode.UNKNOWN_TOPIC_ID


def test_delete_topic_by_id_and_describe_broker(client: RawClient) -> None:
    from kafka.protocol.admin import DeleteTopicsRequest, DescribeConfigsRequest

    tid = client.request(kr.metadata("doomed"), META_V).topics[0].topic_id
    state = DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=tid)
    resp = client.request(DeleteTopicsRequest(topics=[state], timeout_ms=1000), 6)
    assert (resp.responses[0].error_code, resp.responses[0].name) == (0, "doomed")
    again = client.request(DeleteTopicsRequest(topics=[state], timeout_ms=1000), 6)
    assert again.responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID
    # exactly one of name and id, as Kafka's controller requires
    neither = DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=uuid.UUID(int=0))
    both = DeleteTopicsRequest.DeleteTopicState(name="doomed", topic_id=tid)
    resp = client.request(DeleteTopicsRequest(topics=[neither, both], timeout_ms=1000), 6)
    assert [r.error_code for r in resp.responses] == [ErrorCode.INVALID_REQUEST] * 2
    assert "Neither" in resp.responses[0].error_message
    res = DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=4, resource_name="0", configuration_keys=None
    )
    cfg = client.request(
        DescribeConfigsRequest(resources=[res], include_synonyms=True, include_documentation=True),
        4,
    ).results[0]
    values = {c.name: c.value for c in cfg.configs}
    assert cfg.error_code == 0 and values["auto.create.topics.enable"] == "true"
    assert all(c.read_only for c in cfg.configs)


def test_too_many_headers_is_an_invalid_record_not_a_closed_connection(
    client: RawClient,
) -> None:
    headers = [("h", b"")] * 70_000  # more than the store's meta can keep
    p = produce(client, "many-headers", kr.batch([(None, b"v", headers)]))
    assert p.error_code == ErrorCode.INVALID_RECORD and "headers" in p.error_message
    assert produce(client, "many-headers", kr.batch(1)).error_code == 0  # still served


def test_oversized_batch_refused_before_decoding(client: RawClient) -> None:
    big = kr.batch([(None, b"x" * 600_000, []), (None, b"y" * 600_000, [])])
    p = produce(client, "too-big", big)
    assert p.error_code == ErrorCode.MESSAGE_TOO_LARGE and "max.message.bytes" in p.error_message


def test_cached_zstd_batch_goes_to_old_fetches_uncompressed(client: RawClient) -> None:
    """Fetch < v10 must not get zstd (Kafka refuses it): the cache declines and the store
    path re-encodes, far from the head too (no long poll waiting on data that is there)."""
    records = [(None, os.urandom(300), []) for _ in range(100)]  # big enough to be cached
    produce(client, "zstd-old", kr.batch(records, codec=4))
    produce(client, "zstd-old", kr.batch(records, codec=4))
    for version in (9, FETCH_V):
        resp = kr.partition(client.request(kr.fetch("zstd-old", 0, max_wait_ms=5000), version))
        batches = kr.records_of(resp.records)
        assert batches and batches[0][1][0].offset == 0
        codecs = {struct.unpack_from(">h", resp.records, 21)[0] & 7}
        assert codecs == ({0} if version < 10 else {4})
