"""A faust-streaming app with a changelog-backed Table, run as a subprocess by test_faust.py.

    python faust_counter.py BOOTSTRAP APP_ID IN_TOPIC OUT_TOPIC PARTITIONS DATA_DIR

Counts the records per key of IN_TOPIC (PARTITIONS partitions) in the Table ``counts`` (store
``memory://``: nothing local survives a restart, so a restarted worker rebuilds the table from
its compacted changelog topic ``<APP_ID>-counts-changelog``), and for every input record sends
``{"key": K, "count": N}`` with key K to OUT_TOPIC, N the table's new count for K. Runs until
stopped (SIGTERM: faust's clean shutdown, offsets committed). Logs go to stderr.
"""

from __future__ import annotations

import sys

import faust


def main() -> None:
    bootstrap, app_id, in_name, out_name, partitions, data_dir = sys.argv[1:7]
    partitions = int(partitions)
    app = faust.App(
        app_id,
        broker=f"kafka://{bootstrap}",
        store="memory://",
        datadir=data_dir,
        topic_partitions=partitions,
        topic_replication_factor=1,
        broker_commit_interval=0.5,
        broker_session_timeout=6.0,
        broker_heartbeat_interval=1.0,
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
            await sink.send(key=event.key, value={"key": key, "count": counts[key]})

    sys.argv = [sys.argv[0], "worker", "--loglevel", "info", "--without-web"]
    app.main()


if __name__ == "__main__":
    main()
