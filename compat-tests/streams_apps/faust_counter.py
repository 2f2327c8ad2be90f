"""A faust-streaming app with a changelog-backed Table, run as a subprocess by test_faust.py.

    python faust_counter.py BOOTSTRAP APP_ID IN_TOPIC OUT_TOPIC PARTITIONS DATA_DIR

Counts the records per key of IN_TOPIC (PARTITIONS partitions) in the Table ``counts`` (store
``memory://``: nothing local survives a restart, so a restarted worker rebuilds the table from
its compacted changelog topic ``<APP_ID>-counts-changelog``), and for every input record sends
``{"key": K, "count": N, "p": P, "o": O}`` with key K to OUT_TOPIC, N the table's new
count for K, P and O the input record's partition and offset. Runs until
stopped (SIGTERM: faust's clean shutdown, offsets committed). Logs go to stderr.
"""

from __future__ import annotations

import sys

import faust


def _trace_fetches(in_name: str) -> None:
    """Log every fetched range and every seek of the input topic (TMSGATE_FAUST_TRACE=1):
    what the gateway answered, beside what faust processed."""
    import logging

    from aiokafka.consumer import fetcher, subscription_state

    log = logging.getLogger("trace")
    init = fetcher.PartitionRecords.__init__

    def traced_init(self, tp, records, aborted, fetch_offset, *args, **kwargs):
        init(self, tp, records, aborted, fetch_offset, *args, **kwargs)
        if tp.topic == in_name:
            log.warning(
                "FETCH %s fetch_offset=%d bytes=%d", tp, fetch_offset, records.size_in_bytes()
            )

    fetcher.PartitionRecords.__init__ = traced_init
    state = subscription_state.TopicPartitionState
    for name in ("seek", "reset_to"):
        original = getattr(state, name)

        def traced(self, position, _name=name, _original=original):
            log.warning("%s state=%x %s -> %d", _name.upper(), id(self), self._position, position)
            return _original(self, position)

        setattr(state, name, traced)


def main() -> None:
    bootstrap, app_id, in_name, out_name, partitions, data_dir = sys.argv[1:7]
    partitions = int(partitions)
    import os

    if os.environ.get("TMSGATE_FAUST_TRACE"):
        _trace_fetches(in_name)
    app = faust.App(
        app_id,
        broker=f"kafka://{bootstrap}",
        store="memory://",
        datadir=data_dir,
        topic_partitions=partitions,
        topic_replication_factor=1,
        broker_commit_interval=0.5,
        # Roomy, so a worker starved of CPU (2 cores, the suite beside it) is not taken for
        # dead: a rebalance mid-run seeks back to the committed offsets and faust, at least
        # once, counts records again. A stopped worker leaves the group (SIGTERM), so the
        # restart does not wait for this.
        broker_session_timeout=30.0,
        broker_heartbeat_interval=3.0,
        broker_request_timeout=30.0,
        web_enabled=False,
        consumer_auto_offset_reset="earliest",
        table_cleanup_interval=3600.0,
    )
    source = app.topic(
        in_name,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
        partitions=partitions,
    )
    sink = app.topic(out_name, key_serializer="raw", value_serializer="json", partitions=1)
    counts = app.Table("counts", default=int, partitions=partitions, key_type=str, value_type=int)

    @app.agent(source)
    async def count(stream):
        async for event in stream.events():
            key = event.key.decode()
            counts[key] += 1
            # The input's place, for a check that finds an input without output.
            where = {"p": event.message.partition, "o": event.message.offset}
            await sink.send(key=event.key, value={"key": key, "count": counts[key], **where})

    sys.argv = [sys.argv[0], "worker", "--loglevel", "info", "--without-web"]
    app.main()


if __name__ == "__main__":
    main()
