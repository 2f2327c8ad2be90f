"""A quixstreams exactly-once word-count style app, run as a subprocess by test_quixstreams.py.

    python quix_counter.py BOOTSTRAP IN_TOPIC OUT_TOPIC CONSUMER_GROUP STATE_DIR [SLEEP_MS]

Counts the records per key of IN_TOPIC in a RocksDB store (quixstreams creates the compacted
changelog topic ``changelog__<group>--<in>--default``) and produces, for every input record,
``{"key": K, "count": N}`` with key K to OUT_TOPIC, where N is the running count of K.
``processing_guarantee="exactly-once"``: output records, changelog records and the consumer
offsets commit in one Kafka transaction per checkpoint. Runs until killed (SIGTERM stops it
cleanly, SIGKILL is the crash the test injects). SLEEP_MS (default 0) slows every record
down so that a kill lands while there is work (and an open transaction) in flight.
"""

from __future__ import annotations

import logging
import sys
import time

from quixstreams import Application


def main() -> None:
    bootstrap, in_topic, out_topic, group, state_dir = sys.argv[1:6]
    sleep_s = float(sys.argv[6]) / 1000 if len(sys.argv) > 6 else 0.0
    app = Application(
        broker_address=bootstrap,
        consumer_group=group,
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once",
        state_dir=state_dir,
        commit_interval=0.5,  # a checkpoint (one transaction) every half second
        loglevel="INFO",
        request_timeout=20,
        topic_create_timeout=30,
        consumer_extra_config={"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000},
        # A stable transactional.id (as a deployment would set): the restarted app's
        # InitProducerId fences the killed one's open transaction at once instead of
        # leaving it to transaction.timeout.ms (quixstreams' default id is random).
        producer_extra_config={
            "transactional.id": f"{group}-txn",
            "transaction.timeout.ms": 10000,
        },
        broker_availability_timeout=60,
    )
    inp = app.topic(in_topic, key_deserializer="str", value_deserializer="bytes")
    out = app.topic(out_topic, key_serializer="str", value_serializer="json")

    def count(value, key, timestamp, headers, state):
        if sleep_s:
            time.sleep(sleep_s)
        n = state.get("count", 0) + 1
        state.set("count", n)
        return {"key": key, "count": n}

    sdf = app.dataframe(inp)
    sdf = sdf.apply(count, stateful=True, metadata=True)
    sdf.to_topic(out)
    logging.getLogger("quix_counter").info("starting")
    app.run()


if __name__ == "__main__":
    main()
