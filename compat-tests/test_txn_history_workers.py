"""History checker, workers mode, bounded: one ``tmsgate serve --workers 3``, kill -9 of
the controller worker, of the parent (the store's owner) and of another worker (issue 38).

`txn_history.py --workers 3` (txn_history_workers.py) starts ``tmsgate serve --workers 3``
on a LevelDB store in its work dir, runs transactional, exactly-once, TMS-header (HTTP, on
the shared HTTP port) and plain writers against it, kills -9 the controller worker (the
parent starts it again by itself), then the parent (its workers die with it; started
again on the same store and ports), then another worker, kills the parent once more
before the final reads, and checks the history. Every count must be 0, write pointers
increasing across the faults (``wp_not_increasing``) included; each fault must have
happened; and the clients that lived through the parent's kill must go on after its
restart:

    .venv/bin/pytest compat-tests/test_txn_history_workers.py -s   # -s: the summary

A longer run: ``.venv/bin/python compat-tests/txn_history.py --workers 3 --duration 600``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from history_run import run_history

SEED = 20261129
DURATION_S = 45
TIMEOUT_S = 420  # generous: a loaded 2-core machine; a run takes about 130 s


@pytest.mark.timeout(TIMEOUT_S + 60)
def test_workers_histories_with_worker_and_parent_kills(tmp_path):
    if os.environ.get("TMSGATE_COMPAT_BOOTSTRAP"):
        pytest.skip("starts and kills its own gateway")
    if not Path("/proc/self/task").exists():
        pytest.skip("finds the workers in /proc (Linux)")
    options = [
        "--workers",
        "3",
        "--duration",
        str(DURATION_S),
        "--seed",
        str(SEED),
        "--txn-writers",
        "2",
        "--http-writers",
        "1",
        "--plain-writers",
        "1",
        "--gateway-kill-every",
        "12",
    ]
    run = run_history(tmp_path, options, TIMEOUT_S, "txn_history --workers 3")
    counts, stats = run.counts, run.stats
    keys = [
        "kafka_txn_committed",
        "kafka_txn_aborted_on_purpose",
        "kafka_txn_unknown",
        "http_txn_committed",
        "http_txn_never",
        "plain_acked",
        "eos_outputs",
        "controller_kills",
        "controller_moved",
        "other_worker_kills",
        "worker_restarts_by_parent",
        "parent_kills",
        "final_parent_kills",
        "parent_restarts_settled",
        "writer_kills",
        "wp_starts_compared",
        "wp_check_spans_controller_kills",
        "lso_probe_behind_on_another_gateway",
        "http_421",
        "http_504_outcome_unknown",
        "live_records_after_parent_restart",
        "survivor_commits_after_parent_restart",
    ]
    run.report(f"txn_history --workers 3, seed {SEED}", keys)
    where = run.where(SEED, "gateway.log, logs/, history.json")
    assert "wp_not_increasing" in counts
    assert all(v == 0 for v in counts.values()), f"violations {counts}; {where}"
    assert not run.summary["problems"], f"{run.summary['problems']}; {where}"
    # each fault happened: the parent started the killed workers again, and the checker
    # the killed parent, both times settling on three brokers and one controller
    assert stats["controller_kills"] >= 1 and stats["other_worker_kills"] >= 1, stats
    assert stats["worker_restarts_by_parent"] >= 2, stats
    assert stats["parent_kills"] >= 1 and stats["final_parent_kills"] >= 1, stats
    assert stats["parent_restarts_settled"] >= 2, stats
    assert stats["writer_kills"] >= 1, stats
    assert stats["wp_check_spans_controller_kills"] >= 1, stats
    # enough went through for the zeros to mean something
    assert stats.get("kafka_txn_committed", 0) >= 20, stats
    assert stats.get("http_txn_committed", 0) >= 5, stats
    assert stats.get("plain_acked", 0) >= 100, stats
    assert stats.get("eos_outputs", 0) >= 20, stats
    assert stats.get("eos_group_offset") is not None, stats  # else eos_lost is not checked
    # the clients running when the parent was killed carry on with its next run
    assert stats["live_records_after_parent_restart"] > 0, (
        f"the live consumers saw nothing after the parent's restart: {stats}; {where}"
    )
    assert stats.get("survivor_commits_after_parent_restart", 1) > 0, (
        f"no transactional writer that lived through the parent's kill committed after "
        f"its restart ({stats.get('parent_kill_survivors')}); {where}"
    )
