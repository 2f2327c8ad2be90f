"""History checker, cluster mode, bounded: three gateways, SIGKILLs of the controller and
of another gateway (issue 36's proof).

`txn_history.py --cluster 3` (txn_history_cluster.py) starts the HBase Thrift 1 stand-in
(tests/hbase_standin.py, not HBase) and three `tmsgate serve --cluster` processes on it,
runs transactional, exactly-once, TMS-header (HTTP, spread over the gateways) and plain
writers against all three, kills -9 the controller (restarted once another gateway took
the controller over) and then another gateway, kills all three before the final reads,
and checks the history. Every count must be 0, write pointers increasing across the
failover (``wp_not_increasing``) included, and each fault must have happened:

    .venv/bin/pytest compat-tests/test_txn_history_cluster.py -s   # -s: the summary

A longer run: ``.venv/bin/python compat-tests/txn_history.py --cluster 3 --duration 600``.
"""

from __future__ import annotations

import os

import pytest
from history_run import run_history

SEED = 20261129
DURATION_S = 45
TIMEOUT_S = 360  # generous: a loaded 2-core machine; a run takes about 70 s


@pytest.mark.timeout(TIMEOUT_S + 60)
def test_cluster_histories_with_controller_and_gateway_kills(tmp_path):
    pytest.importorskip("happybase", reason="the hbase engine needs tmsgate[hbase]")
    if os.environ.get("TMSGATE_COMPAT_BOOTSTRAP"):
        pytest.skip("starts and kills its own gateways")
    options = [
        "--cluster",
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
    run = run_history(tmp_path, options, TIMEOUT_S, "txn_history --cluster 3")
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
        "controller_takeovers",
        "other_gateway_kills",
        "writer_kills",
        "wp_starts_compared",
        "wp_check_spans_controller_kills",
        "lso_probe_behind_on_another_gateway",
    ]
    run.report(f"txn_history --cluster 3, seed {SEED}", keys)
    where = run.where(SEED, "node<i>/gateway.log, logs/, history.json")
    assert "wp_not_increasing" in counts
    assert all(v == 0 for v in counts.values()), f"violations {counts}; {where}"
    assert not run.summary["problems"], f"{run.summary['problems']}; {where}"
    # each fault happened, and enough went through for the zeros to mean something
    assert stats["controller_kills"] >= 1 and stats["controller_takeovers"] >= 1, stats
    assert stats["other_gateway_kills"] >= 1, stats
    assert stats["writer_kills"] >= 1, stats
    assert stats["wp_check_spans_controller_kills"] >= 1, stats
    assert stats.get("kafka_txn_committed", 0) >= 20, stats
    assert stats.get("http_txn_committed", 0) >= 5, stats
    assert stats.get("plain_acked", 0) >= 100, stats
    assert stats.get("eos_outputs", 0) >= 20, stats
