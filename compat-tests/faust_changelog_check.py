"""faust-streaming (aiokafka driver) Table restore from its changelog against a live gateway.

A manual check, not collected by the suite (run the file by name:
`.venv/bin/pytest compat-tests/faust_changelog_check.py`). It passes on its own, but under
load (a full CI run, or other tests beside it) the restarted worker can drop one input
record and count another twice. Traced with ``TMSGATE_FAUST_TRACE=1`` (faust_counter.py
then logs aiokafka's fetches and seeks; a failure here reports the inputs without an
output, the doubled ones and the group's offsets): faust resumes its flow before it
restores the table, so the input partitions are fetched from the committed offsets
(960, 1040) while the changelog is still being read; once the restore completes, faust
seeks them back to the committed offsets and the gateway sends the same records again
(same offsets, same bytes). What faust had taken from the first delivery is partly
processed: faust's recovery race (faust-streaming issues #216 and #48), not the gateway's.

`streams_apps/faust_counter.py` counts the records per key of an input topic (2 partitions)
in a faust Table backed by the compacted changelog topic ``<app>-counts-changelog`` (faust
creates it, and ``<app>-__assignor-__leader``, with its own CreateTopics request to the
Metadata controller, ``cleanup.policy=compact``), with the in-memory store: nothing local
survives a restart. For every input record it sends the key's new count to an output topic.
The consumer group uses faust's own assignor (protocol "faust").

The test feeds 2,000 keyed records over 50 keys, runs the worker until all 2,000 outputs are
there, checks the changelog (DescribeConfigs: compact; read_committed: the last value of
every key is its count), stops the worker (SIGTERM), deletes its data directory, feeds 1,000
more records and starts a new worker: it must restore the table from the changelog, so every
key's outputs over both runs are exactly 1, 2, ..., n, n its number of input records.

The app runs under TMSGATE_COMPAT_FAUST_PYTHON when set, else under the suite's Python.
"""

from __future__ import annotations

import json
import shutil

import pytest
from compat_helpers import unavailable
from streams_apps.harness import (
    App,
    Reader,
    check_running_counts,
    create_topics,
    import_error,
    outputs_of,
    produce,
    python_for,
    topic_configs,
)

pytestmark = pytest.mark.timeout(300)

KEYS = 50
FIRST = 2000
SECOND = 1000
PARTITIONS = 2
RUN_TIMEOUT_S = 90.0  # generous: faust handles records one by one, slower under load


@pytest.fixture(scope="module")
def faust_available():
    err = import_error("faust")
    if err:
        unavailable(err)


def _records(start: int, n: int) -> list[tuple[bytes, bytes]]:
    return [(f"key-{i % KEYS:02d}".encode(), str(i).encode()) for i in range(start, start + n)]


def _counts(records) -> dict[str, int]:
    out: dict[str, int] = {}
    for k, _ in records:
        out[k.decode()] = out.get(k.decode(), 0) + 1
    return out


def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets of ``topic`` (partition -> offset; -1001: none)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


def _missing_inputs(bootstrap: str, topic: str, reader, committed_at_stop) -> str:
    """Which input (partition, offset) produced no output or several, with the input records
    around them, and where the group stood."""
    from collections import Counter

    seen = Counter((d.get("p"), d.get("o")) for d in (json.loads(v) for _k, v in reader.data()))
    inputs = Reader(bootstrap, topic, PARTITIONS)
    try:
        inputs.read_to_watermarks(PARTITIONS)
        keys = {(p, o): k.decode() for p, o, k, _v in inputs.records}
    finally:
        inputs.close()
    missing = sorted(po for po in keys if po not in seen)
    doubled = sorted(po for po, n in seen.items() if n > 1)

    def around(po):
        p, o = po
        return [(x, keys.get((p, x)), seen.get((p, x), 0)) for x in range(o - 3, o + 4)]

    return (
        f"\ngroup offsets at the first worker's stop: {committed_at_stop}"
        f"\ninputs without an output: {missing[:10]}; with several: {doubled[:10]}"
        + "".join(
            f"\n  around {po}: (offset, key, outputs) {around(po)}"
            for po in (missing + doubled)[:6]
        )
    )


def test_table_restored_from_changelog(faust_available, private_gateway, topic_name, tmp_path):
    # A gateway of its own: the session's has served every other test by now, and a
    # shortfall here should be about faust and this test's records alone.
    bs = private_gateway().bootstrap
    in_topic, out_topic, app_id = f"{topic_name}-in", f"{topic_name}-out", f"{topic_name}-app"
    changelog = f"{app_id}-counts-changelog"
    create_topics(bs, {in_topic: PARTITIONS, out_topic: 1})
    first, second = _records(0, FIRST), _records(FIRST, SECOND)
    produce(bs, in_topic, first)

    data_dir = tmp_path / "faust-data"
    app = App(
        python_for("faust"),
        "faust_counter.py",
        [bs, app_id, in_topic, out_topic, PARTITIONS, data_dir],
        tmp_path / "app.log",
    )
    reader = Reader(bs, out_topic)
    committed_at_stop = None
    try:
        app.start()
        reader.wait(
            lambda: len(reader.data()) >= FIRST, RUN_TIMEOUT_S, f"{FIRST} outputs (run 1)", app
        )
        rc = app.stop()
        assert rc == 0, f"faust worker exited {rc} after SIGTERM\n{app.describe()}"

        # The changelog: compacted, and its last value per key is the key's count.
        cfg = topic_configs(bs, changelog)
        assert cfg.get("cleanup.policy") == "compact", (
            f"{changelog}: cleanup.policy {cfg.get('cleanup.policy')!r}, expected 'compact'"
        )
        cl = Reader(bs, changelog, PARTITIONS)
        try:
            cl.read_to_watermarks(PARTITIONS)
            last = {json.loads(k): json.loads(v) for k, v in cl.data()}
        finally:
            cl.close()
        assert last == _counts(first), (
            f"{changelog}: last value per key differs from the counts of the {FIRST} inputs: "
            f"{sorted(set(last.items()) ^ set(_counts(first).items()))[:10]}"
        )

        shutil.rmtree(data_dir, ignore_errors=True)
        committed_at_stop = _committed(bs, app_id, in_topic)
        produce(bs, in_topic, second)
        app.start()
        total = FIRST + SECOND
        reader.wait(
            lambda: len(reader.data()) >= total,
            RUN_TIMEOUT_S,
            f"{total} outputs (run 2 after restoring the table)",
            app,
        )
        run2 = app.run_output()
        assert "Restore complete" in run2, f"run 2 logged no table restore:\n{run2[-4000:]}"
        rc = app.stop()
        reader.read_to_end(bs)
        check_running_counts(outputs_of(reader), _counts(first + second), "faust table counts")
        assert rc == 0, f"faust worker exited {rc} after SIGTERM\n{app.describe()}"
    except AssertionError as exc:
        msg = str(exc) + _missing_inputs(bs, in_topic, reader, committed_at_stop)
        msg += f"\ngroup offsets now: {_committed(bs, app_id, in_topic)}"
        if "its output (tail)" not in msg:
            msg += f"\n--- app output ---\n{app.output()}"
        raise AssertionError(msg) from None
    finally:
        if app.alive():
            app.kill()
        reader.close()
