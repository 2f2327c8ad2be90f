"""tmsgate.client against a live gateway over real sockets: every call, sync and async,
errors mapped from the server's answers, the transaction context (commit and rollback,
buffered and PayloadTable paths) and the Kafka producer shims with read_committed
consumers."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gateway_harness import GatewayThread, free_port, kafka_records
from tmsgate.client import (
    TX_HEADER,
    AsyncMessagingClient,
    BadRequest,
    Encoding,
    Message,
    MessagingClient,
    OutcomeUnknown,
    ServerError,
    TmsConnectionError,
    TmsError,
    TopicExists,
    TopicNotFound,
    Transaction,
    TransactionConflict,
    TransactionInDoubt,
    TxState,
    current_transaction,
)
from tmsgate.client import kafka as tms_kafka
from tmsgate.client._errors import error_from_response

ENCODINGS = [Encoding.AVRO, Encoding.JSON]
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayThread]:
    store = tmp_path_factory.mktemp("sdk") / "store"
    g = GatewayThread(f"leveldb://{store}", http=True).start()
    try:
        yield g
    finally:
        g.stop()


@pytest.fixture(params=ENCODINGS, ids=["avro", "json"])
def tms(gw: GatewayThread, request: pytest.FixtureRequest) -> Iterator[MessagingClient]:
    with MessagingClient(gw.http_url, encoding=request.param) as client:
        yield client


@pytest.fixture
def topic(tms: MessagingClient) -> str:
    name = f"sdk-{uuid.uuid4().hex[:12]}"
    tms.create_topic(name)
    return name


def committed(tms: MessagingClient, topic: str) -> list[bytes]:
    """Payloads a transactional reader sees now (a fresh snapshot)."""
    return [m.payload for m in tms.fetch(topic, read_committed=True)]


def everything(tms: MessagingClient, topic: str) -> list[bytes]:
    """Payloads a non-transactional reader sees (in-progress and rolled back included)."""
    return [m.payload for m in tms.fetch(topic)]


# --- topics -------------------------------------------------------------------------------
def test_topic_admin(tms: MessagingClient) -> None:
    name = f"admin-{uuid.uuid4().hex[:8]}"
    info = tms.create_topic(name, {"ttl": 3600})
    assert info.name == name and info.properties.get("ttl") == "3600"
    assert tms.get_topic(name).properties.get("ttl") == "3600"
    listed = tms.list_topics()
    assert name in listed and listed == sorted(listed)
    updated = tms.update_topic(name, {"ttl": "60"})
    assert updated.properties.get("ttl") == "60"
    assert tms.get_topic(name).properties.get("ttl") == "60"
    tms.delete_topic(name)
    assert name not in tms.list_topics()
    with pytest.raises(TopicNotFound) as missing:
        tms.get_topic(name)
    assert missing.value.status == 404 and missing.value.message


def test_topic_errors(tms: MessagingClient, topic: str) -> None:
    with pytest.raises(TopicExists) as exists:
        tms.create_topic(topic)
    assert exists.value.status == 409 and isinstance(exists.value.kind, str)
    with pytest.raises(BadRequest) as bad_name:
        tms.create_topic("no spaces allowed")
    assert bad_name.value.status == 400 and bad_name.value.message
    with pytest.raises(BadRequest):
        tms.create_topic(f"ttl-{uuid.uuid4().hex[:8]}", {"ttl": "soon"})
    with pytest.raises(BadRequest):
        tms.update_topic(topic, {"ttl": "-5"})
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    for call in (
        lambda: tms.update_topic(missing, {"ttl": "1"}),
        lambda: tms.delete_topic(missing),
        lambda: tms.publish(missing, b"x"),
        lambda: tms.poll(missing),
    ):
        with pytest.raises(TopicNotFound):
            call()


# --- publish and poll ---------------------------------------------------------------------
def test_publish_and_poll(tms: MessagingClient, topic: str) -> None:
    every_byte = bytes(range(256))
    assert tms.publish(topic, [b"a", every_byte, b""]) is None
    assert tms.publish(topic, b"single") is None
    assert tms.publish(topic, "text \u00e9") is None
    messages = tms.poll(topic)
    assert [m.payload for m in messages] == [
        b"a",
        every_byte,
        b"",
        b"single",
        "text \u00e9".encode(),
    ]
    ids = [m.id for m in messages]
    assert all(len(i) == 20 for i in ids) and ids == sorted(ids) and len(set(ids)) == 5
    second = messages[1]
    assert [m.payload for m in tms.poll(topic, second, inclusive=False)] == [
        b"",
        b"single",
        "text \u00e9".encode(),
    ]
    assert tms.poll(topic, second.id, limit=2) == messages[1:3]
    # By publish time: everything published at or after the second message's millisecond.
    by_time = tms.poll(topic, second.publish_timestamp)
    assert by_time[0].publish_timestamp == second.publish_timestamp
    assert by_time[-1] == messages[-1] and second in by_time
    assert tms.poll(topic, messages[-1].publish_timestamp + 1) == []


def test_publish_nothing_is_refused(tms: MessagingClient, topic: str) -> None:
    with pytest.raises(BadRequest) as refused:
        tms.publish(topic, [])
    assert refused.value.status == 400


def test_fetch_pages_through_the_topic(tms: MessagingClient, topic: str) -> None:
    payloads = [f"m{i}".encode() for i in range(25)]
    for i in range(0, 25, 5):
        tms.publish(topic, payloads[i : i + 5])
    fetched = list(tms.fetch(topic, batch_size=7))
    assert [m.payload for m in fetched] == payloads
    later = list(tms.fetch(topic, fetched[9], inclusive=False, batch_size=4))
    assert [m.payload for m in later] == payloads[10:]


# --- transactions, by hand ----------------------------------------------------------------
def test_transaction_service(tms: MessagingClient) -> None:
    txs = tms.transactions
    tx = txs.start(timeout_s=60)
    assert tx.write_pointer > 0 and tx.timeout_s == 60
    assert Transaction.from_encoded(tx.encoded) == Transaction(
        tx.write_pointer, tx.read_pointer, tx.in_progress, tx.invalid, tx.encoded
    )
    assert txs.state(tx).state is TxState.IN_PROGRESS
    assert tx.write_pointer in {o.write_pointer for o in txs.list().in_progress}
    snap = txs.snapshot()
    assert snap.write_pointer == 0 and tx.write_pointer in snap.in_progress
    assert txs.commit(tx).state is TxState.COMMITTED
    assert txs.state(tx.write_pointer).state is TxState.COMMITTED
    with pytest.raises(TransactionConflict) as again:
        txs.commit(tx)
    assert again.value.status == 409 and again.value.state == "committed"
    assert again.value.write_pointer == tx.write_pointer
    with pytest.raises(TransactionConflict):
        txs.abort(tx)

    doomed = txs.start()
    assert txs.invalidate(doomed).state is TxState.INVALID
    assert txs.state(doomed).state is TxState.INVALID
    assert doomed.write_pointer in txs.list().invalid
    assert doomed.write_pointer in txs.snapshot().invalid

    dropped = txs.start()
    assert txs.abort(dropped).state is TxState.ABORTED
    assert txs.state(dropped).state in (TxState.ABORTED, TxState.INVALID)


def test_transactional_publish_commit_and_rollback(tms: MessagingClient, topic: str) -> None:
    tms.publish(topic, b"before")
    txs = tms.transactions
    tx = txs.start()
    detail = tms.publish(topic, [b"t1", b"t2"], tx)
    assert detail is not None and detail.write_pointer == tx.write_pointer
    assert detail.topic == topic and detail.encoding == tms.encoding
    assert everything(tms, topic) == [b"before", b"t1", b"t2"]
    assert committed(tms, topic) == [b"before"]  # in progress: held back
    assert tms.rollback(topic, detail) == (2 if tms.encoding is Encoding.JSON else None)
    txs.abort(tx)
    assert committed(tms, topic) == [b"before"]

    tx = txs.start()
    done = tms.publish(topic, [b"c1"], tx)
    assert done is not None
    # A snapshot taken now reads up to the in-progress entry, even after the commit.
    stale = txs.snapshot()
    txs.commit(tx)
    assert [m.payload for m in tms.poll(topic, tx=stale)] == [b"before"]
    assert [m.payload for m in tms.poll(topic, tx=stale.encoded)] == [b"before"]
    assert committed(tms, topic) == [b"before", b"c1"]
    with pytest.raises(TransactionConflict) as too_late:
        tms.rollback(topic, done)  # committed messages stay
    assert too_late.value.state == "committed"
    assert committed(tms, topic) == [b"before", b"c1"]


def test_store_then_publish(tms: MessagingClient, topic: str) -> None:
    tx = tms.transactions.start()
    tms.store(topic, [b"s1", b"s2"], tx)
    tms.store(topic, b"s3", tx.write_pointer)
    assert everything(tms, topic) == []  # PayloadTable only, nothing in the topic yet
    detail = tms.publish(topic, [], tx)
    assert detail is not None
    assert everything(tms, topic) == [b"s1", b"s2", b"s3"]
    assert committed(tms, topic) == []
    tms.transactions.commit(tx)
    messages = list(tms.fetch(topic, read_committed=True))
    assert [m.payload for m in messages] == [b"s1", b"s2", b"s3"]
    # Stored messages share the publish row and differ by their PayloadTable part.
    assert len({m.id[:10] for m in messages}) == 1 and len({m.id for m in messages}) == 3


def test_transactional_errors(tms: MessagingClient, topic: str) -> None:
    tx = tms.transactions.start()
    tms.transactions.commit(tx)
    with pytest.raises(TransactionConflict) as publish_late:
        tms.publish(topic, b"late", tx)
    assert publish_late.value.state == "committed"
    with pytest.raises(TransactionConflict):
        tms.store(topic, b"late", tx)
    with pytest.raises(TransactionConflict) as unknown:
        tms.publish(topic, b"x", tx.write_pointer + 10**12)
    assert unknown.value.state is not None
    with pytest.raises(TmsError) as bad_tx:
        tms.poll(topic, tx=b"\x07not a transaction")
    assert bad_tx.value.status == 400
    assert everything(tms, topic) == []


def test_an_answer_lost_behind_the_gateway_is_outcome_unknown() -> None:
    """The 504 a worker answers when the worker it sent a write on to died with it
    (tests/test_workers_relay.py makes it happen): a ServerError of its own kind."""
    body = b'{"error":"outcome_unknown","message":"it may have been applied"}'
    err = error_from_response(504, body)
    assert isinstance(err, OutcomeUnknown) and isinstance(err, ServerError)
    assert (err.status, err.kind) == (504, "outcome_unknown")
    assert err.message == "it may have been applied"


def test_connection_refused_is_a_tms_error() -> None:
    down = MessagingClient(f"http://127.0.0.1:{free_port()}", timeout=5)
    with down, pytest.raises(TmsConnectionError) as refused:
        down.list_topics()
    assert refused.value.status is None


# --- the transaction context --------------------------------------------------------------
def test_context_buffers_and_commits(tms: MessagingClient, topic: str) -> None:
    other = f"sdk-{uuid.uuid4().hex[:12]}"
    tms.create_topic(other)
    with tms.transaction(timeout_s=60) as tx:
        assert current_transaction() is tx
        tx.publish(topic, [b"a", b"b"])
        tx.publish(other, b"x")
        tx.publish(topic, b"c")
        assert everything(tms, topic) == []  # buffered on the client
        assert tms.transactions.state(tx.write_pointer).state is TxState.IN_PROGRESS
    assert current_transaction() is None
    assert tms.transactions.state(tx.write_pointer).state is TxState.COMMITTED
    assert committed(tms, topic) == [b"a", b"b", b"c"]
    assert committed(tms, other) == [b"x"]
    assert {d.topic for d in tx.rollback_details} == {topic, other}
    with pytest.raises(RuntimeError):
        tx.publish(topic, b"after the block")


def test_context_store_path(tms: MessagingClient, topic: str) -> None:
    with tms.transaction() as tx:
        tx.store(topic, [b"s1", b"s2"])
        tx.publish(topic, b"s3")  # joins the stored ones: stored, then one publish
        tx.store(topic, b"s4")
        assert everything(tms, topic) == []
    assert committed(tms, topic) == [b"s1", b"s2", b"s4", b"s3"]
    assert len(tx.rollback_details) == 1  # one empty transactional publish for the topic


def test_context_exception_rolls_back_and_aborts(tms: MessagingClient, topic: str) -> None:
    tms.publish(topic, b"before")
    with pytest.raises(ZeroDivisionError), tms.transaction() as tx:
        tx.publish(topic, b"buffered")
        tx.store(topic, b"stored")
        details = tx.prepare()  # now in the topic, under the transaction
        assert len(details) == 1 and everything(tms, topic) == [b"before", b"stored", b"buffered"]
        _ = 1 / 0
    assert tms.transactions.state(tx.write_pointer).state in (TxState.ABORTED, TxState.INVALID)
    tms.publish(topic, b"after")
    assert committed(tms, topic) == [b"before", b"after"]


def test_context_failed_publish_aborts(tms: MessagingClient, topic: str) -> None:
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    with pytest.raises(TopicNotFound), tms.transaction() as tx:
        tx.publish(topic, b"first")
        tx.publish(missing, b"nowhere")
    assert tms.transactions.state(tx.write_pointer).state in (TxState.ABORTED, TxState.INVALID)
    assert everything(tms, topic) == [b"first"]  # published, then rolled back
    assert committed(tms, topic) == []


def test_context_commit_conflict_rolls_back(tms: MessagingClient, topic: str) -> None:
    with pytest.raises(TransactionConflict) as conflict, tms.transaction() as tx:
        tx.publish(topic, b"doomed")
        tms.transactions.invalidate(tx.write_pointer)  # as a timeout would
    assert conflict.value.state == "invalid"
    assert committed(tms, topic) == []


def test_lost_commit_is_in_doubt_not_rolled_back(tmp_path: Path) -> None:
    """The gateway goes away between prepare and commit: the context raises
    TransactionInDoubt and rolls nothing back; the transaction survives the restart in
    progress, and committing it then publishes the messages."""
    store = f"leveldb://{tmp_path / 'store'}"
    first = GatewayThread(store, http=True).start()
    stopped = False
    try:
        with MessagingClient(first.http_url) as tms:
            tms.create_topic("doubt")
            with pytest.raises(TransactionInDoubt) as doubt, tms.transaction() as tx:
                tx.publish("doubt", b"maybe")
                tx.prepare()
                first.stop()
                stopped = True
    finally:
        if not stopped:  # GatewayThread.stop() may be called once
            first.stop()
    assert doubt.value.write_pointer == tx.write_pointer
    second = GatewayThread(store, http=True).start()
    try:
        with MessagingClient(second.http_url) as tms:
            assert tms.transactions.state(tx).state is TxState.IN_PROGRESS
            assert committed(tms, "doubt") == []
            tms.transactions.commit(tx)
            assert committed(tms, "doubt") == [b"maybe"]
    finally:
        second.stop()


# --- asyncio ------------------------------------------------------------------------------
@pytest.mark.parametrize("encoding", ENCODINGS, ids=["avro", "json"])
def test_async_client(gw: GatewayThread, encoding: Encoding) -> None:
    async def main() -> None:
        async with AsyncMessagingClient(gw.http_url, encoding=encoding) as tms:
            name = f"async-{uuid.uuid4().hex[:10]}"
            assert (await tms.create_topic(name, {"ttl": "600"})).properties["ttl"] == "600"
            assert (await tms.get_topic(name)).name == name
            assert name in await tms.list_topics()
            assert (await tms.update_topic(name, {"ttl": "700"})).properties["ttl"] == "700"
            with pytest.raises(TopicExists):
                await tms.create_topic(name)

            assert await tms.publish(name, [b"p1", b"p2"]) is None
            first = (await tms.poll(name, limit=1))[0]
            assert first.payload == b"p1"
            fetched = [m.payload async for m in tms.fetch(name, first, inclusive=False)]
            assert fetched == [b"p2"]

            txs = tms.transactions
            tx = await txs.start(timeout_s=30)
            assert (await txs.state(tx)).state is TxState.IN_PROGRESS
            assert tx.write_pointer in (await txs.snapshot()).in_progress
            assert tx.write_pointer in {o.write_pointer for o in (await txs.list()).in_progress}
            await tms.store(name, b"s", tx)
            detail = await tms.publish(name, [], tx)
            assert detail is not None
            await tms.rollback(name, detail)
            assert (await txs.abort(tx)).state is TxState.ABORTED
            doomed = await txs.start()
            assert (await txs.invalidate(doomed)).state is TxState.INVALID
            done = await txs.start()
            assert (await txs.commit(done)).state is TxState.COMMITTED
            with pytest.raises(TransactionConflict):
                await txs.commit(done)

            async with tms.transaction() as ctx:
                assert current_transaction() is ctx
                ctx.publish(name, b"c1")
                await ctx.store(name, b"c2")
            with pytest.raises(KeyError):
                async with tms.transaction() as failed:
                    failed.publish(name, b"never")
                    await failed.prepare()
                    raise KeyError("boom")
            snap = await txs.snapshot()
            assert [m.payload for m in await tms.poll(name, tx=snap)] == [
                b"p1",
                b"p2",
                b"c2",
                b"c1",
            ]
            assert (await txs.state(failed.write_pointer)).state in (
                TxState.ABORTED,
                TxState.INVALID,
            )

            await tms.delete_topic(name)
            with pytest.raises(TopicNotFound):
                await tms.poll(name)

    asyncio.run(main())


def test_async_fetch_follows_commits(gw: GatewayThread) -> None:
    """A read_committed follower takes a new snapshot per poll, so it sees a transaction
    that commits while it waits."""

    async def main() -> None:
        async with AsyncMessagingClient(gw.http_url) as tms:
            name = f"follow-{uuid.uuid4().hex[:10]}"
            await tms.create_topic(name)
            tx = await tms.transactions.start()
            await tms.publish(name, b"held", tx)
            follower = tms.fetch(name, read_committed=True, follow=True, idle_wait_s=0.05)
            first = asyncio.ensure_future(anext(follower))
            assert [m.payload for m in await tms.poll(name)] == [b"held"]  # stored, held
            await tms.transactions.commit(tx)
            message = await asyncio.wait_for(first, 30)
            assert message.payload == b"held"
            await tms.publish(name, b"next")
            assert (await asyncio.wait_for(anext(follower), 30)).payload == b"next"
            await follower.aclose()

    asyncio.run(main())


def test_async_context_is_per_task(gw: GatewayThread) -> None:
    """Two concurrent contexts on one client: each task sees its own transaction."""

    async def main() -> None:
        async with AsyncMessagingClient(gw.http_url) as tms:
            name = f"async-{uuid.uuid4().hex[:10]}"
            await tms.create_topic(name)
            entered = asyncio.Barrier(2)

            async def work(tag: bytes) -> int:
                async with tms.transaction() as tx:
                    await entered.wait()  # both contexts are open at once
                    assert current_transaction() is tx
                    tx.publish(name, tag)
                    return tx.write_pointer

            wps = await asyncio.gather(work(b"one"), work(b"two"))
            assert len(set(wps)) == 2
            snap = await tms.transactions.snapshot()
            assert sorted(m.payload for m in await tms.poll(name, tx=snap)) == [b"one", b"two"]

    asyncio.run(main())


# --- Kafka producer shims -----------------------------------------------------------------
def read_committed(bootstrap: str, topic: str, end: int) -> list[Any]:
    return kafka_records(bootstrap, topic, end, isolation_level="read_committed")


def header(record: Any) -> bytes | None:
    return dict(record.headers or []).get(TX_HEADER)


def test_kafka_python_shim(gw: GatewayThread, tms: MessagingClient, topic: str) -> None:
    producer = tms_kafka.KafkaProducer(bootstrap_servers=gw.bootstrap)
    try:
        producer.send(topic, b"plain").get(10)
        with tms.transaction() as tx:
            for i in range(3):
                producer.send(topic, f"tx{i}".encode(), key=b"k", headers=[("h", b"v")])
            producer.flush()
            assert everything(tms, topic) == [b"plain", b"tx0", b"tx1", b"tx2"]
            assert committed(tms, topic) == [b"plain"]  # stored, not yet committed
        with pytest.raises(RuntimeError), tms.transaction() as aborted:
            producer.send(topic, b"aborted")
            raise RuntimeError("the application changed its mind")
        assert tms.transactions.state(aborted.write_pointer).state is not TxState.COMMITTED
        producer.send(topic, b"after").get(10)
    finally:
        producer.close()
    records = read_committed(gw.bootstrap, topic, end=6)
    assert [r.value for r in records] == [b"plain", b"tx0", b"tx1", b"tx2", b"after"]
    assert [header(r) for r in records] == [None] + [tx.transaction.header_value] * 3 + [None]
    assert records[1].key == b"k" and ("h", b"v") in records[1].headers
    assert committed(tms, topic) == [b"plain", b"tx0", b"tx1", b"tx2", b"after"]


def test_confluent_shim(gw: GatewayThread, tms: MessagingClient, topic: str) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    producer = tms_kafka.Producer({"bootstrap.servers": gw.bootstrap})
    reports: list[Any] = []
    producer.produce(topic, b"plain")
    producer.flush()
    with tms.transaction() as tx:
        producer.produce(
            topic, b"tx0", headers={"h": b"v"}, on_delivery=lambda e, m: reports.append(e)
        )
        producer.produce(topic, value=b"tx1", callback=lambda e, m: reports.append(e))
    assert reports == [None, None]
    with pytest.raises(TmsError, match="produce_batch"), tms.transaction():
        producer.produce_batch(topic, [{"value": b"unstamped"}])
    with pytest.raises(ValueError), tms.transaction():
        producer.produce(topic, b"aborted")
        raise ValueError("no")
    producer.produce(topic, b"after")
    assert producer.flush() == 0
    del producer  # librdkafka closes its connections when the handle goes
    records = read_committed(gw.bootstrap, topic, end=5)
    assert [r.value for r in records] == [b"plain", b"tx0", b"tx1", b"after"]
    assert [header(r) for r in records] == [None] + [tx.transaction.header_value] * 2 + [None]
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": gw.bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        seen: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(seen) < 4:
            assert time.monotonic() < deadline, f"read {seen}"
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.append(msg.value())
        assert seen == [b"plain", b"tx0", b"tx1", b"after"]
    finally:
        consumer.close()


def test_shim_refused_records_abort_the_transaction(
    gw: GatewayThread, tms: MessagingClient, topic: str
) -> None:
    """A record the gateway refuses must not leave the rest of the transaction to commit."""
    producer = tms_kafka.KafkaProducer(
        bootstrap_servers=gw.bootstrap, retries=0, enable_idempotence=False
    )
    try:
        with pytest.raises(TmsError, match="not acknowledged"), tms.transaction() as tx:
            producer.send(topic, b"ok")
            producer.flush()
            tms.transactions.invalidate(tx.write_pointer)  # the next record is refused
            producer.send(topic, b"refused")
    finally:
        producer.close()
    assert committed(tms, topic) == []


def test_docs_sdk_examples_run(
    gw: GatewayThread, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every python block of docs/sdk.md, in order, in one namespace."""
    text = (ROOT / "docs" / "sdk.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)
    assert len(blocks) >= 8
    monkeypatch.setenv("TMS_URL", gw.http_url)
    monkeypatch.setenv("TMS_BOOTSTRAP", gw.bootstrap)
    monkeypatch.chdir(ROOT)  # the page runs examples/atomic_notification.py by its path
    namespace: dict[str, Any] = {"__name__": "docs_sdk"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"docs/sdk.md block {i + 1}", "exec"), namespace)
    out = capsys.readouterr().out
    assert "order 17 shipped" in out and "from asyncio" in out
    assert len(namespace["seen"]) == 4


def test_message_id_fields() -> None:
    msg = Message(bytes.fromhex("0000018b8a3f2c00000700000000000000000000"), b"")
    assert msg.publish_timestamp == 0x18B8A3F2C00 and msg.sequence_id == 7
