"""A failed fsync (disk error) must not let an idempotent producer's later batch skip the
lost one: LevelDB on disk, with the failure injected at the write, as a full disk would."""

from __future__ import annotations

import asyncio
from pathlib import Path

import kafka_requests as kr
from gateway_harness import FailingWrite
from tmsgate.gateway.kafka import GatewayConfig
from tmsgate.gateway.kafka.broker import Broker
from tmsgate.gateway.kafka.context import RequestContext
from tmsgate.gateway.kafka.handlers import produce as produce_handler
from tmsgate.protocol import ErrorCode, Request
from tmsgate.storage import TopicId, open_store


async def send(broker: Broker, raw: bytes, cid: int) -> tuple[int, int]:
    req = Request(0, 9, cid, "c", kr.produce("t", raw), 0)
    ctx = RequestContext(broker, req, "peer")
    part = (await produce_handler.handle(ctx, req.body)).topics[0].partitions[0]
    return part.error_code, part.base_offset


def test_a_failed_write_is_not_skipped_by_the_next_batch(tmp_path: Path) -> None:
    async def main() -> None:
        store = open_store(f"failing-leveldb://{tmp_path}")
        # The first message write after arming waits (an fsync in progress), then fails.
        disk = FailingWrite.at(tmp_path, b"M", delay_s=0.2)
        broker = Broker(store, GatewayConfig())
        broker.attach(asyncio.get_running_loop())
        try:
            await broker.topics.create("t", {})
            a = kr.batch(
                [(None, b"A%d" % i, []) for i in range(3)], producer_id=9, epoch=0, base_sequence=0
            )
            b = kr.batch(
                [(None, b"B%d" % i, []) for i in range(3)],
                producer_id=9,
                epoch=0,
                base_sequence=3,
            )
            disk.armed = True
            first = asyncio.ensure_future(send(broker, a, 1))
            await asyncio.sleep(0.05)  # A is in its (failing) fsync; B is pipelined behind
            second = asyncio.ensure_future(send(broker, b, 2))
            assert (await first)[0] == ErrorCode.KAFKA_STORAGE_ERROR
            assert (await second)[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            # the client retries both, in order; nothing is lost or written twice
            assert await send(broker, a, 3) == (ErrorCode.NONE, 0)
            assert await send(broker, b, 4) == (ErrorCode.NONE, 3)
            res = store.read(TopicId("default", "t"), offset=0)
            assert [m.payload for m in res.messages] == [b"A0", b"A1", b"A2", b"B0", b"B1", b"B2"]
        finally:
            broker.close()
            store.close()

    asyncio.run(main())
