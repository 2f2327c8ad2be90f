"""`tmsgate serve` as operators run it: flags, environment, signals, restarts."""

from __future__ import annotations

import signal
import socket
import struct
import time
import urllib.request
from pathlib import Path
from typing import Any

import kafka_requests as kr
import pytest
from gateway_harness import GatewayProcess, RawClient, free_port
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from tmsgate.gateway.cli import build_parser, parse_address
from tmsgate.protocol import ErrorCode
from tmsgate.storage import TopicId, open_store


def consume_all(bootstrap: str, topic: str) -> list[Any]:
    c = KafkaConsumer(
        bootstrap_servers=bootstrap, consumer_timeout_ms=1500, enable_auto_commit=False
    )
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    out = list(c)
    c.close()
    return out


def test_parse_address() -> None:
    assert parse_address("127.0.0.1:9092") == ("127.0.0.1", 9092)
    assert parse_address(":9000") == ("0.0.0.0", 9000)
    assert parse_address("[::1]:9092") == ("::1", 9092)


def test_defaults_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    args = build_parser().parse_args(["serve"])
    assert (args.store, args.kafka_listen, args.metrics_listen) == (
        "leveldb://./data",
        "127.0.0.1:9092",
        None,
    )
    assert args.auto_create_topics is True
    monkeypatch.setenv("TMSGATE_STORE", "leveldb:///env/store")
    monkeypatch.setenv("TMSGATE_KAFKA_LISTEN", "127.0.0.1:9999")
    monkeypatch.setenv("TMSGATE_AUTO_CREATE_TOPICS", "false")
    args = build_parser().parse_args(["serve"])
    assert (args.store, args.kafka_listen, args.auto_create_topics) == (
        "leveldb:///env/store",
        "127.0.0.1:9999",
        False,
    )
    args = build_parser().parse_args(["serve", "--kafka-listen", "127.0.0.1:1"])
    assert args.kafka_listen == "127.0.0.1:1"  # a flag beats the environment


def test_sigterm_drains_and_restart_keeps_data(tmp_path: Path) -> None:
    metrics_port = free_port()
    gw = GatewayProcess(
        tmp_path / "store", None, "--metrics-listen", f"127.0.0.1:{metrics_port}"
    ).start()
    try:
        p = KafkaProducer(bootstrap_servers=gw.bootstrap, compression_type="lz4")
        for i in range(25):
            p.send("durable", key=b"k%d" % i, value=b"v%d" % i, headers=[("i", b"%d" % i)])
        p.flush()
        p.close()
        body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read()
        assert b'tmsgate_kafka_requests_total{api="Produce"}' in body
        assert b"tmsgate_kafka_produced_messages_total 25.0" in body
        # a long poll in flight when SIGTERM arrives is answered, then the process exits 0
        raw = RawClient(("127.0.0.1", gw.port))
        raw.send(kr.fetch("durable", 25, max_wait_ms=20_000), 12)
        code, log = gw.terminate(signal.SIGTERM)
        assert code == 0, log
        assert kr.partition(raw.receive(1, 12)).error_code == 0
        assert f"listening on 127.0.0.1:{gw.port}" in log and "store leveldb://" in log
        assert "store closed; gateway stopped" in log
    finally:
        gw.kill()
    gw.start()  # the same store again
    try:
        msgs = consume_all(gw.bootstrap, "durable")
        assert [(m.offset, m.key, m.value) for m in msgs] == [
            (i, b"k%d" % i, b"v%d" % i) for i in range(25)
        ]
        assert msgs[3].headers == [("i", b"3")]
        assert gw.terminate(signal.SIGINT)[0] == 0
    finally:
        gw.kill()


def test_metrics_show_the_keys_the_cleaner_holds_from_produce(tmp_path: Path) -> None:
    """Records produced to a compacted topic leave their keys with the cleaner
    (storage/produced_keys.py), bounded by --cleaner-produced-keys-mb; the gauge shows how
    many, and 0 turns it off."""
    from kafka.admin import KafkaAdminClient, NewTopic

    for mb, held in (("64", 30), ("0", 0)):
        metrics_port = free_port()
        gw = GatewayProcess(
            tmp_path / f"store{mb}",
            None,
            "--metrics-listen",
            f"127.0.0.1:{metrics_port}",
            "--cleaner-produced-keys-mb",
            mb,
        ).start()
        try:
            admin = KafkaAdminClient(bootstrap_servers=gw.bootstrap)
            # min.compaction.lag.ms: nothing is cleaned (and forgotten) meanwhile
            configs = {"cleanup.policy": "compact", "min.compaction.lag.ms": "3600000"}
            admin.create_topics([NewTopic("compacted", 1, 1, topic_configs=configs)])
            admin.close()
            p = KafkaProducer(bootstrap_servers=gw.bootstrap)
            for i in range(30):
                p.send("compacted", key=b"k%d" % i, value=b"v%d" % i)
            p.flush()
            p.close()
            url = f"http://127.0.0.1:{metrics_port}/metrics"
            body = urllib.request.urlopen(url, timeout=5).read()
            assert f"tmsgate_cleaner_produced_keys {held}.0".encode() in body
        finally:
            gw.kill()


def test_idempotent_state_survives_a_restart(tmp_path: Path) -> None:
    gw = GatewayProcess(tmp_path / "store", None, "--log-level", "WARNING").start()
    try:
        c = RawClient(("127.0.0.1", gw.port))
        pid = c.request(kr.init_producer_id(), 4).producer_id

        def send(client: RawClient, seq: int) -> Any:
            req = kr.produce("idem", kr.batch(2, producer_id=pid, epoch=0, base_sequence=seq))
            return kr.partition(client.request(req, 9))

        assert send(c, 0).base_offset == 0
        assert send(c, 2).base_offset == 2
        c.close()
        assert gw.terminate()[0] == 0
        gw.start()
        c = RawClient(("127.0.0.1", gw.port))
        # a retry after the restart is answered with its original offsets, not written again
        retry = send(c, 2)
        assert retry.error_code == ErrorCode.NONE and retry.base_offset == 2
        assert send(c, 0).error_code == ErrorCode.NONE and send(c, 0).base_offset == 0
        assert send(c, 6).error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert send(c, 4).base_offset == 4
        assert [m.offset for m in consume_all(gw.bootstrap, "idem")] == [0, 1, 2, 3, 4, 5]
        # a new producer id is never one handed out before the restart
        assert c.request(kr.init_producer_id(), 4).producer_id > pid
        c.close()
    finally:
        gw.kill()


def test_bad_store_url_fails_with_a_message(tmp_path: Path) -> None:
    gw = GatewayProcess(tmp_path, None)
    args = [*gw.args]
    args[args.index("--store") + 1] = "nosuch://x"
    import subprocess

    out = subprocess.run(args, capture_output=True, text=True, timeout=30)
    assert out.returncode != 0
    assert "nosuch" in out.stderr


def test_port_in_use_fails_cleanly(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        gw = GatewayProcess(tmp_path / "store", port)
        import subprocess

        out = subprocess.run(gw.args, capture_output=True, text=True, timeout=30)
        assert out.returncode == 1 and "address already in use" in out.stderr


def test_frame_size_limit_flag(tmp_path: Path) -> None:
    gw = GatewayProcess(tmp_path / "store", None, "--max-request-bytes", "1000").start()
    try:
        c = RawClient(("127.0.0.1", gw.port))
        c.send_raw(struct.pack(">i", 5000) + b"\x00" * 10)
        assert c.closed_by_peer()
        code, log = gw.terminate()
        assert code == 0 and "above the limit of 1000 bytes" in log
    finally:
        gw.kill()


def test_janitor_removes_expired_messages_from_disk(tmp_path: Path) -> None:
    gw = GatewayProcess(tmp_path / "store", None, "--janitor-interval-s", "0.2").start()
    try:
        c = RawClient(("127.0.0.1", gw.port))
        c.request(kr.create_topic("brief", configs={"retention.ms": "1000"}), 5)
        assert kr.partition(c.request(kr.produce("brief", kr.batch(3)), 9)).error_code == 0
        time.sleep(2.5)  # past the retention, and several janitor passes
        c.close()
        code, log = gw.terminate()
        assert code == 0
    finally:
        gw.kill()
    deleted = [line for line in log.splitlines() if "janitor:" in line and "rows_deleted" in line]
    assert deleted, log
    with open_store(f"leveldb://{tmp_path / 'store'}") as store:
        t = TopicId("default", "brief")
        assert store.offsets(t) == (3, 3)  # offsets kept their place after the rows went
        assert store.poll(t, offset=3) == []
