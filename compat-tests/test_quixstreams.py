"""quixstreams (3.x, confluent-kafka + RocksDB state) exactly-once against a live gateway
started with ``--transactional-offsets produce`` (docs/transactions.md): quixstreams keeps
the changelog offsets its transactional producer is told, so it needs them answered as
Kafka answers them; with the default (-1, offsets at the commit) it stops with
InvalidChangelogOffset after a restore (docs/compatibility.md).

quixstreams pins confluent-kafka<2.13, so it runs from a venv of its own, which
scripts/test.sh makes (``.venv-quix``) and names in TMSGATE_COMPAT_QUIXSTREAMS_PYTHON. By
hand:

    python3 -m venv .venv-quix && .venv-quix/bin/pip install 'quixstreams>=3.28,<4'
    TMSGATE_COMPAT_QUIXSTREAMS_PYTHON=.venv-quix/bin/python \
        .venv/bin/pytest compat-tests/test_quixstreams.py

`streams_apps/quix_counter.py` counts the records per key of an input topic (2 partitions) in
a RocksDB store and produces the running count of the key for every input record to an output
topic, with ``processing_guarantee="exactly-once"``: quixstreams creates a compacted changelog
topic (CreateTopics with ``cleanup.policy=compact``, after DescribeConfigs of the input topic),
joins a consumer group and commits output, changelog and offsets in one Kafka transaction per
checkpoint (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn).

The test feeds 3,000 keyed records over 50 keys, starts the app, SIGKILLs it once output
shows up, feeds 2,000 more and restarts it:

- ``same_state_dir``: the restarted app keeps its RocksDB directory (state and changelog must
  agree about what the killed transaction did not commit);
- ``fresh_state_dir``: the restarted app gets an empty state directory and must rebuild every
  count from the changelog topic.

Then, read with read_committed: every key's outputs are exactly 1, 2, ..., n (n its number of
input records): no duplicate, no gap, nothing from the aborted transaction.

The app runs under TMSGATE_COMPAT_QUIXSTREAMS_PYTHON when set (quixstreams 3.28 pins
confluent-kafka<2.13, so it may live in a venv of its own), else under the suite's Python.
"""

from __future__ import annotations

import os
import time

import pytest
from compat_helpers import unavailable
from streams_apps.harness import (
    App,
    Reader,
    check_running_counts,
    create_topics,
    import_error,
    outputs_of,
    prefix_report,
    produce,
    python_for,
    topic_configs,
)

pytestmark = pytest.mark.timeout(150)

KEYS = 50
FIRST = 3000  # fed before the first run
SECOND = 2000  # fed while the app is down after the kill
IN_PARTITIONS = 2
SLEEP_MS = 1  # per record in the app: keeps work in flight when the kill lands
KILL_AFTER = 400  # committed outputs seen before the SIGKILL
RUN_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def quixstreams_available():
    err = import_error("quixstreams")
    if err:
        unavailable(err)


def _records(start: int, n: int) -> list[tuple[bytes, bytes]]:
    return [(f"key-{i % KEYS:02d}".encode(), str(i).encode()) for i in range(start, start + n)]


@pytest.mark.parametrize("restart", ["same_state_dir", "fresh_state_dir"])
def test_exactly_once_count_survives_sigkill(
    quixstreams_available, request, topic_name, tmp_path, restart
):
    bs = os.environ.get("TMSGATE_COMPAT_BOOTSTRAP") or (
        request.getfixturevalue("private_gateway")(
            extra_args=["--transactional-offsets", "produce"]
        ).bootstrap
    )
    in_topic, out_topic, group = f"{topic_name}-in", f"{topic_name}-out", f"{topic_name}-g"
    create_topics(bs, {in_topic: IN_PARTITIONS, out_topic: 1})
    first, second = _records(0, FIRST), _records(FIRST, SECOND)
    expected: dict[str, int] = {}
    for k, _ in first + second:
        expected[k.decode()] = expected.get(k.decode(), 0) + 1
    produce(bs, in_topic, first)

    state1, state2 = tmp_path / "state1", tmp_path / "state2"
    app = App(
        python_for("quixstreams"),
        "quix_counter.py",
        [bs, in_topic, out_topic, group, state1, SLEEP_MS],
        tmp_path / "app.log",
    )
    reader = Reader(bs, out_topic)
    try:
        app.start()
        reader.wait(
            lambda: len(reader.data()) >= KILL_AFTER,
            RUN_TIMEOUT_S,
            f"{KILL_AFTER} committed outputs from the first run",
            app,
        )
        app.kill()
        at_kill = len(reader.data())
        produce(bs, in_topic, second)

        state = state1 if restart == "same_state_dir" else state2
        app.start([bs, in_topic, out_topic, group, state, SLEEP_MS])
        total = FIRST + SECOND
        reader.wait(
            lambda: len(reader.data()) >= total,
            RUN_TIMEOUT_S,
            f"{total} committed outputs after the restart ({at_kill} before the kill)",
            app,
        )
        time.sleep(1.0)  # a duplicate committed late would show up in the final read
        rc = app.stop()
        reader.read_to_end(bs)
        outputs = outputs_of(reader)
        check_running_counts(
            outputs, expected, f"quixstreams exactly-once ({restart}, killed after {at_kill})"
        )
        assert at_kill < FIRST, (
            f"the kill came after all {FIRST} first-run outputs: it tested no crash mid-stream"
        )

        changelog = f"changelog__{group}--{in_topic}--default"
        cfg = topic_configs(bs, changelog)
        assert cfg.get("cleanup.policy") == "compact", (
            f"changelog topic {changelog} has cleanup.policy {cfg.get('cleanup.policy')!r}"
        )
        run2 = app.run_output()
        if restart == "fresh_state_dir":
            assert "Recovery successful" in run2 or "Recovery process complete" in run2, (
                f"the restarted app with an empty state dir logged no changelog recovery:\n"
                f"{run2[-4000:]}"
            )
        assert rc == 0, f"the app exited {rc} after SIGTERM\n{app.describe()}"
    except AssertionError as exc:
        msg = str(exc)
        if "its output (tail)" not in msg:
            msg += f"\n--- app output ---\n{app.output()}"
        try:
            msg += "\n--- " + prefix_report(outputs_of(reader))
        except Exception as e:
            msg += f"\n--- (outputs not readable: {e!r})"
        raise AssertionError(msg) from None
    finally:
        if app.alive():
            app.kill()
        reader.close()
